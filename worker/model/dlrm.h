// The dense part of DLRM (DESIGN §2): bottom MLP over the dense features, an interaction with
// the T pooled embeddings (dot, or concat for Wide&Deep), a top MLP to one logit, and
// BCE-with-logits. Embeddings live on the PS; this model takes pooled bags and returns their
// gradients (embedding_bag.h turns them into per-row gradients).
//
// Flat layout (a pure function of the config, so gradient buckets are too, PROTOCOLS §5.5):
// params() and grads() are one contiguous float buffer each, holding in order
//   bottom_mlp.0.weight [out x in], bottom_mlp.0.bias [out], ..., bottom_mlp.{B-1}.bias,
//   top_mlp.0.weight, top_mlp.0.bias, ..., top_mlp.{K-1}.bias,
//   then, for dot with features of another width than bottom_mlp.back() (mixed-width tables),
//   each such feature f's learned projection proj.f.0.weight [D x d_f], proj.f.0.bias [D]
// with no padding; bottom layer 0 has in = num_dense and top layer 0 has
// in = interaction width (dot: d + (T+1)T/2, concat: bottom_mlp.back() + T*d).
// Initialisation: weight of global layer index l (bottom layers first, then top) is Glorot
// uniform from Philox keyed by (seed, l, element) (layers.h); biases are 0.
//
// Memory: params() and grads() are host memory, the fp32 master copy that the optimizer,
// checkpoints and checksums use. On a backend whose memory is the host's (CPU) the layers
// compute in them directly. On a device (CUDA) the layers compute in device copies: a mutable
// params() marks the device copy stale and the next forward uploads it; the device gradients
// come back to grads() at the end of TrainStep, or are all-reduced on the device first
// (device_grad_bucket). Workspaces live in the backend's memory.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/config/job_config.h"
#include "common/status.h"
#include "worker/device/backend.h"
#include "worker/model/interaction.h"
#include "worker/model/layers.h"

namespace tandem::model {

using config::ModelConfig;

// One named parameter tensor inside the flat buffer (for checksums and checkpoints).
struct ParamInfo {
  std::string name;            // "bottom_mlp.0.weight"
  std::vector<int64_t> shape;  // {out, in} or {out}
  int64_t offset = 0;          // first float in params()/grads()
  int64_t size = 0;            // floats
};

// What the model's inputs look like (issue 18): the dense count, each sparse feature's pooled
// width (its table's dim) and pooling, and the labels with their loss weights.
struct DlrmInputs {
  int64_t num_dense = 13;
  std::vector<int64_t> dims;        // per feature
  std::vector<bool> mean;           // per feature: mean pooling; empty = all sum
  int64_t num_labels = 1;           // logits, one binary task each
  std::vector<float> loss_weights;  // per label; empty = all 1
  // num_features features of width dim, sum pooling, one label: the Criteo shape.
  static DlrmInputs Uniform(int64_t num_dense, int64_t num_features, int64_t dim);
};

// One batch in host memory for TrainStep / PredictStep: the embedding rows arrive as the
// unique rows of each feature's table (as pulled; features sharing a table point at the same
// rows) and are pooled on the backend (embedding_bag.h).
struct HostBatch {
  int64_t batch = 0;
  const float* dense = nullptr;    // batch x num_dense
  const float* labels = nullptr;   // batch x num_labels (TrainStep only)
  const float* weights = nullptr;  // batch, or null for all 1
  // Per feature:
  std::vector<const float*> rows;        // num_unique[f] x dims[f]
  std::vector<int64_t> num_unique;       //
  std::vector<const int64_t*> offsets;   // batch + 1: sample s looks up [offsets[s], offsets[s+1])
  std::vector<const int64_t*> inverse;   // offsets[batch] indexes into the table's unique rows
  std::vector<const float*> id_weights;  // offsets[batch] per-id weights, or null (all 1)
};

// Floats after the gradients in device_grad_bucket(): room for the values the trainer reduces
// together with them (loss, votes, overflow flag).
inline constexpr int64_t kGradBucketTail = 8;

// Thread-safety: requires external synchronization. Non-copyable (owns workspaces).
class Dlrm {
 public:
  // InvalidArgument for an inconsistent shape: num_dense, num_tables, embedding_dim < 1, an
  // empty bottom_mlp or top_mlp, a non-positive size, top_mlp.back() != 1, dot with
  // bottom_mlp.back() != embedding_dim, or an unknown interaction. `backend` must outlive the
  // model.
  static StatusOr<std::unique_ptr<Dlrm>> Create(const ModelConfig& config, int64_t num_dense,
                                                int64_t num_tables, uint64_t seed,
                                                Backend* backend);
  // Any feature widths, poolings and labels; the last top_mlp size must be num_labels.
  static StatusOr<std::unique_ptr<Dlrm>> Create(const ModelConfig& config, const DlrmInputs& inputs,
                                                uint64_t seed, Backend* backend);

  Dlrm(const Dlrm&) = delete;
  Dlrm& operator=(const Dlrm&) = delete;

  // One training forward+backward on a batch: dense is batch x num_dense, pooled[f] is
  // batch x dims[f], labels batch x num_labels, weights batch entries (null = all 1). Overwrites
  // grads() and every d_pooled[f] with gradients of the returned loss,
  // sum over tasks k of loss_weight_k * sum_i w_i * bce_ik / normaliser (normaliser = nominal
  // global batch, DESIGN §2).
  float ForwardBackward(int64_t batch, const float* dense, const float* const* pooled,
                        const float* labels, const float* weights, float normaliser,
                        float* const* d_pooled);

  // Probabilities (batch x num_labels) for a batch; does not touch grads().
  void Predict(int64_t batch, const float* dense, const float* const* pooled, float* probs);

  // ForwardBackward and Predict above take backend memory (host memory on the CPU backend).
  // The step functions below take host memory on every backend.

  // A training forward+backward on host inputs: pools the rows, and writes each feature's per-row
  // gradients (num_unique[f] x dims[f], host) to d_rows[f], summed in lookup (= sample) order. The
  // loss gradient is multiplied by loss_scale (fp16 loss scaling; 1 otherwise), so every
  // gradient is scaled by it; the returned loss is not. Dense gradients go to grads() when
  // grads_to_host, else they stay in device_grad_bucket() (a device all-reduce; then
  // DownloadGradBucket). Check backend status() after it.
  float TrainStep(const HostBatch& in, float normaliser, float loss_scale, float* const* d_rows,
                  bool grads_to_host);
  // Probabilities (host, batch x num_labels) on host inputs.
  void PredictStep(const HostBatch& in, float* probs);
  // The device gradients, followed by kGradBucketTail spare floats (device memory; on a
  // host-memory backend, null: grads() is the gradient buffer).
  float* device_grad_bucket();
  // Writes `values` (at most kGradBucketTail) after the gradients in device_grad_bucket().
  void SetGradBucketTail(std::span<const float> values);
  // Copies the first `count` floats of device_grad_bucket() to `out` (host), and the gradients
  // into grads().
  void DownloadGradBucket(int64_t count, float* out);
  // GEMM inputs of every layer at `precision` except the output layer's (kept fp32, DESIGN §8).
  void SetPrecision(device::Precision precision);

  std::span<float> params() {
    params_dirty_ = true;  // the caller may write: the device copy is stale
    return params_;
  }
  std::span<const float> params() const { return params_; }
  std::span<float> grads() { return grads_; }
  std::span<const float> grads() const { return grads_; }
  const std::vector<ParamInfo>& param_info() const { return param_info_; }
  int64_t num_params() const { return static_cast<int64_t>(params_.size()); }
  int64_t num_dense() const { return num_dense_; }
  int64_t num_tables() const { return num_tables_; }  // sparse features
  int64_t num_labels() const { return inputs_.num_labels; }
  const std::vector<int64_t>& dims() const { return inputs_.dims; }
  int64_t interaction_width() const { return interaction_->output_width(); }

 private:
  Dlrm(const ModelConfig& config, const DlrmInputs& inputs,
       std::unique_ptr<Interaction> interaction, Backend* backend);
  // The loss over every task from logits (batch x num_labels); writes d_logits_.
  float Loss(int64_t batch, const float* logits, const float* labels, const float* weights,
             float normaliser);

  void BuildLayout();
  void Initialize(uint64_t seed);
  // Forward to the logits (batch entries, valid until the next call).
  const float* ForwardLogits(int64_t batch, const float* dense, const float* const* pooled);
  void Reserve(int64_t batch);
  // Uploads params() to the device copy when a mutable params() call may have changed them.
  void SyncParams();
  // Uploads a HostBatch (or points at it on a host-memory backend) and pools it into pooled_.
  void StageAndPool(const HostBatch& in);
  // Host data for the backend: the pointer itself on a host-memory backend, else a copy in buf.
  template <typename T>
  const T* Stage(const T* host, int64_t n, device::Buffer<T>* buf);

  Backend* backend_;
  int64_t num_dense_;
  int64_t num_tables_;
  DlrmInputs inputs_;
  Mlp bottom_;
  std::unique_ptr<Interaction> interaction_;
  Mlp top_;
  // Per feature: the linear projection to the dot width, or null (dot needs one width).
  std::vector<std::unique_ptr<Mlp>> proj_;
  std::vector<device::Buffer<float>> d_proj_out_;  // per projected feature: batch x D
  std::vector<const float*> inter_in_;             // what the interaction reads per feature
  std::vector<float*> inter_d_;                    // where it writes their gradients
  std::vector<float> params_;
  std::vector<float> grads_;
  std::vector<ParamInfo> param_info_;
  int64_t capacity_ = 0;
  device::Buffer<float> inter_out_;                           // batch x interaction width
  device::Buffer<float> d_inter_;                             // batch x interaction width
  device::Buffer<float> d_bottom_;                            // batch x bottom_mlp.back()
  device::Buffer<float> d_logits_;                            // batch x num_labels
  device::Buffer<float> task_logits_, task_labels_, task_d_;  // batch: one task's column
  device::Buffer<float> probs_;  // batch x num_labels (PredictStep on a device)
  // Device copies of params_ and grads_ (+ the bucket tail); empty on a host-memory backend.
  device::Buffer<float> dev_params_;
  device::Buffer<float> dev_grads_;
  bool params_dirty_ = true;
  float loss_scale_ = 1.0f;  // multiplies the loss gradient inside TrainStep
  // TrainStep/PredictStep staging, per table where indexed by t.
  device::Buffer<float> dense_in_, labels_in_, weights_in_;
  std::vector<device::Buffer<float>> rows_in_, pooled_, d_pooled_, d_rows_;
  std::vector<device::Buffer<int64_t>> offsets_in_, inverse_in_;
  std::vector<const float*> pooled_ptrs_;
  std::vector<float*> d_pooled_ptrs_;
  std::vector<const int64_t*> staged_offsets_, staged_inverse_;  // backend memory
  std::vector<device::Buffer<float>> id_weights_in_;
  std::vector<const float*> staged_weights_;
  std::vector<const float*> staged_rows_;
  bool mean(size_t f) const { return !inputs_.mean.empty() && inputs_.mean[f]; }
};

}  // namespace tandem::model
