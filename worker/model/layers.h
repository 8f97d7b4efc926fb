// Dense layers of the model, each with forward and backward through a device::Backend:
// Linear, ReLU, Sigmoid, an MLP built from them, and BCE-with-logits. Parameters live in the
// model's flat buffers (dlrm.h); layers only hold pointers into them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "worker/device/backend.h"
#include "worker/device/buffer.h"

namespace tandem::model {

using device::Backend;
using device::Precision;

// Fills w[out * in] with uniform(-a, a), a = sqrt(6 / (in + out)) (Glorot), from Philox keyed by
// (seed, layer_index, element): element e takes word e % 4 of counter block e / 4 of the stream
// key = (seed_lo, seed_hi ^ kDenseInitTag), counter = (block_lo, block_hi, layer_index, 0).
// The tag keeps these streams apart from the embedding rows' (common/embedding/initializer.h).
// Mapping to floats is exact except one rounding per element, so the bits are the same on every
// machine; sqrt is taken once in double (correctly rounded by IEEE 754).
void InitGlorotUniform(uint64_t seed, uint32_t layer_index, int64_t in, int64_t out, float* w);

inline constexpr uint32_t kDenseInitTag = 0x44454E53u;  // "DENS"

// y = x W^T + b for x of batch x in, W of out x in (row-major), b of out.
// Thread-safety: requires external synchronization (gradient pointers are written).
class Linear {
 public:
  Linear(int64_t in, int64_t out) : in_(in), out_(out) {}

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  // The format the layer's GEMM inputs are rounded to (fp32 master weights either way).
  Precision precision() const { return precision_; }
  void set_precision(Precision p) { precision_ = p; }
  // Parameter floats: W then b.
  int64_t num_params() const { return out_ * in_ + out_; }

  // Points the layer at W (then b) in `params` and at dW (then db) in `grads`; both must outlive
  // the layer's use.
  void Bind(float* params, float* grads);

  // y = x W^T + b, then ReLU when `relu` (fused on backends that can).
  void Forward(Backend* be, int64_t batch, const float* x, float* y, bool relu = false) const;
  // Overwrites dW and db; writes dx (batch x in) unless dx is null.
  void Backward(Backend* be, int64_t batch, const float* x, const float* dy, float* dx) const;

 private:
  int64_t in_;
  int64_t out_;
  Precision precision_ = Precision::kFp32;
  float* w_ = nullptr;
  float* b_ = nullptr;
  float* dw_ = nullptr;
  float* db_ = nullptr;
};

// Element-wise activations. Backward takes the forward output y.
struct Relu {
  static void Forward(Backend* be, int64_t n, const float* x, float* y) {
    be->ReluForward(n, x, y);
  }
  static void Backward(Backend* be, int64_t n, const float* y, const float* dy, float* dx) {
    be->ReluBackward(n, y, dy, dx);
  }
};

struct Sigmoid {
  static void Forward(Backend* be, int64_t n, const float* x, float* y) { be->Sigmoid(n, x, y); }
  static void Backward(Backend* be, int64_t n, const float* y, const float* dy, float* dx) {
    be->SigmoidBackward(n, y, dy, dx);
  }
};

// Weighted BCE with logits: returns sum_i w_i * bce_i / normaliser (normaliser = the nominal
// global batch, DESIGN §2) and writes its gradient w.r.t. the logits (may be null).
inline float BceWithLogitsLoss(Backend* be, int64_t n, const float* logits, const float* labels,
                               const float* weights, float normaliser, float* d_logits) {
  return be->BceWithLogits(n, logits, labels, weights, normaliser, d_logits);
}

// A stack of Linear layers with ReLU after each, except after the last when relu_last is false.
// Owns its activation workspaces in the backend's memory (grown to the largest batch seen,
// never shrunk): the backend passed to Forward must outlive the Mlp.
// Thread-safety: requires external synchronization.
class Mlp {
 public:
  Mlp(int64_t in, const std::vector<int64_t>& sizes, bool relu_last);

  int64_t in() const { return in_; }
  int64_t out() const { return layers_.empty() ? in_ : layers_.back().out(); }
  const std::vector<Linear>& layers() const { return layers_; }
  int64_t num_params() const;

  // params/grads point at this MLP's region: W0, b0, W1, b1, ...
  void Bind(float* params, float* grads);
  // Glorot weights (layer l uses Philox layer index first_layer_index + l), zero biases.
  // `params` is host memory.
  void Init(uint64_t seed, uint32_t first_layer_index, float* params) const;
  // GEMM inputs of every layer at `precision`, except the last layer's when keep_last_fp32
  // (the output layer stays fp32, DESIGN §8).
  void SetPrecision(Precision precision, bool keep_last_fp32);

  // Returns the output (batch x out()), valid until the next Forward.
  const float* Forward(Backend* be, int64_t batch, const float* x);
  // Uses the activations of the last Forward (same x and batch). Overwrites this MLP's grads;
  // writes dx (batch x in()) unless dx is null.
  void Backward(Backend* be, int64_t batch, const float* x, const float* dy, float* dx);

 private:
  bool HasRelu(size_t layer) const { return relu_last_ || layer + 1 < layers_.size(); }
  void Reserve(Backend* be, int64_t batch);

  int64_t in_;
  bool relu_last_;
  std::vector<Linear> layers_;
  int64_t capacity_ = 0;
  std::vector<device::Buffer<float>> acts_;   // layer outputs, after the activation
  std::vector<device::Buffer<float>> d_pre_;  // gradients before the activation
  std::vector<device::Buffer<float>> d_in_;   // gradients w.r.t. inputs of layers 1..L-1
};

}  // namespace tandem::model
