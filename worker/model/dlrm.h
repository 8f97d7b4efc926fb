// The dense part of DLRM (DESIGN §2): bottom MLP over the dense features, an interaction with
// the T pooled embeddings (dot, or concat for Wide&Deep), a top MLP to one logit, and
// BCE-with-logits. Embeddings live on the PS; this model takes pooled bags and returns their
// gradients (embedding_bag.h turns them into per-row gradients).
//
// Flat layout (a pure function of the config, so gradient buckets are too, PROTOCOLS §5.5):
// params() and grads() are one contiguous float buffer each, holding in order
//   bottom_mlp.0.weight [out x in], bottom_mlp.0.bias [out], ..., bottom_mlp.{B-1}.bias,
//   top_mlp.0.weight, top_mlp.0.bias, ..., top_mlp.{K-1}.bias
// with no padding; bottom layer 0 has in = num_dense and top layer 0 has
// in = interaction width (dot: d + (T+1)T/2, concat: bottom_mlp.back() + T*d).
// Initialisation: weight of global layer index l (bottom layers first, then top) is Glorot
// uniform from Philox keyed by (seed, l, element) (layers.h); biases are 0.
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

  Dlrm(const Dlrm&) = delete;
  Dlrm& operator=(const Dlrm&) = delete;

  // One training forward+backward on a batch: dense is batch x num_dense, pooled[t] is
  // batch x d, labels/weights have batch entries (weights null = all 1). Overwrites grads() and
  // every d_pooled[t] (batch x d) with gradients of the returned loss,
  // sum_i w_i * bce_i / normaliser (normaliser = nominal global batch, DESIGN §2).
  float ForwardBackward(int64_t batch, const float* dense, const float* const* pooled,
                        const float* labels, const float* weights, float normaliser,
                        float* const* d_pooled);

  // Click probabilities (batch entries) for a batch; does not touch grads().
  void Predict(int64_t batch, const float* dense, const float* const* pooled, float* probs);

  std::span<float> params() { return params_; }
  std::span<const float> params() const { return params_; }
  std::span<float> grads() { return grads_; }
  std::span<const float> grads() const { return grads_; }
  const std::vector<ParamInfo>& param_info() const { return param_info_; }
  int64_t num_params() const { return static_cast<int64_t>(params_.size()); }
  int64_t num_dense() const { return num_dense_; }
  int64_t num_tables() const { return num_tables_; }
  int64_t embedding_dim() const { return dim_; }
  int64_t interaction_width() const { return interaction_->output_width(); }

 private:
  Dlrm(const ModelConfig& config, int64_t num_dense, int64_t num_tables,
       std::unique_ptr<Interaction> interaction, Backend* backend);

  void BuildLayout();
  void Initialize(uint64_t seed);
  // Forward to the logits (batch entries, valid until the next call).
  const float* ForwardLogits(int64_t batch, const float* dense, const float* const* pooled);
  void Reserve(int64_t batch);

  Backend* backend_;
  int64_t num_dense_;
  int64_t num_tables_;
  int64_t dim_;
  Mlp bottom_;
  std::unique_ptr<Interaction> interaction_;
  Mlp top_;
  std::vector<float> params_;
  std::vector<float> grads_;
  std::vector<ParamInfo> param_info_;
  int64_t capacity_ = 0;
  std::vector<float> inter_out_;  // batch x interaction width
  std::vector<float> d_inter_;    // batch x interaction width
  std::vector<float> d_bottom_;   // batch x bottom_mlp.back()
  std::vector<float> d_logits_;   // batch
};

}  // namespace tandem::model
