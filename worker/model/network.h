// The dense network of a model (issue 19): everything between the pooled embeddings and the
// logits. model.h owns what every model shares (the flat parameter buffers, staging a batch,
// pooling, the loss, the device gradient bucket); a network only computes. A new model type is
// a Network subclass in its own file plus a case in network_factory.cc: the trainer, the
// checkpoints and the PS never see which one runs (DESIGN §2, "adding an interaction must be a
// local change").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/device/backend.h"
#include "worker/model/layers.h"

namespace tandem::model {

// One named parameter tensor inside the flat buffer (for checksums and checkpoints).
struct ParamInfo {
  std::string name;            // "bottom_mlp.0.weight"
  std::vector<int64_t> shape;  // {out, in} or {out}
  int64_t offset = 0;          // first float in params()/grads()
  int64_t size = 0;            // floats
};

// What the model's inputs look like (issue 18): the dense count, each sparse feature's pooled
// width (its table's dim) and pooling, and the labels with their loss weights. The last
// num_wide features are the first-order ("wide") bags of DeepFM and Wide & Deep: one per field,
// on a table of width num_labels (network_factory.h).
struct ModelInputs {
  int64_t num_dense = 13;
  std::vector<int64_t> dims;        // per feature
  std::vector<bool> mean;           // per feature: mean pooling; empty = all sum
  int64_t num_labels = 1;           // logits, one binary task each
  std::vector<float> loss_weights;  // per label; empty = all 1
  int64_t num_wide = 0;             // trailing wide features
  int64_t num_fields() const { return static_cast<int64_t>(dims.size()) - num_wide; }
  // num_features features of width dim, sum pooling, one label: the Criteo shape.
  static ModelInputs Uniform(int64_t num_dense, int64_t num_features, int64_t dim);
};

// The parameter blocks of a network in flat-layout order. The layout is a pure function of the
// config (so gradient buckets are too, PROTOCOLS §5.5): each Linear is W [out x in] then b [out],
// blocks follow each other with no padding. Initialisation: the weight of the l-th Linear in
// this order is Glorot uniform from Philox keyed by (seed, l, element) (layers.h); biases 0.
class ParamLayout {
 public:
  // "name.0.weight", "name.0.bias", "name.1.weight", ... for each layer of the MLP.
  void Add(std::string name, Mlp* mlp) { blocks_.push_back({std::move(name), mlp, nullptr}); }
  // "name.weight", "name.bias".
  void Add(std::string name, Linear* linear) {
    blocks_.push_back({std::move(name), nullptr, linear});
  }

  int64_t num_params() const;
  // Points every block at its region of params and grads.
  void Bind(float* params, float* grads);
  // Host memory.
  void Init(uint64_t seed, float* params) const;
  std::vector<ParamInfo> Info() const;

 private:
  struct Block {
    std::string name;
    Mlp* mlp;
    Linear* linear;
  };
  std::vector<Block> blocks_;
};

// Thread-safety: requires external synchronization; holds workspaces in the memory of the
// backend passed to Forward, which must outlive it.
class Network {
 public:
  virtual ~Network() = default;

  ParamLayout& layout() { return layout_; }
  // GEMM inputs at `precision`, except each output layer's (kept fp32, DESIGN §8).
  virtual void SetPrecision(device::Precision precision) = 0;
  // The logits (batch x num_labels) from dense (batch x num_dense) and every feature's pooled
  // bag (pooled[f]: batch x dims[f]); valid until the next Forward.
  virtual const float* Forward(device::Backend* be, int64_t batch, const float* dense,
                               const float* const* pooled) = 0;
  // After a Forward on the same inputs: overwrites the parameter gradients and every
  // d_pooled[f] (batch x dims[f]) with the gradients of sum(d_logits * logits).
  virtual void Backward(device::Backend* be, int64_t batch, const float* dense,
                        const float* const* pooled, const float* d_logits,
                        float* const* d_pooled) = 0;

 protected:
  ParamLayout layout_;
};

}  // namespace tandem::model
