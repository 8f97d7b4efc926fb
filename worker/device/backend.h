// The device interface the dense model computes through (DESIGN §8): the CPU backend and the
// CUDA backend, without touching the model code. Every op works on raw float pointers with
// explicit sizes; all matrices are row-major and contiguous unless a leading dimension is given.
//
// Determinism contract (PROTOCOLS §5): every op other than Gemm reduces in an order fixed per
// backend, spelled out below, and without floating-point atomics. Where the CUDA backend's order
// differs from the CPU's, results agree across backends only within rounding; each backend is
// bit-identical from run to run (the CUDA one on the same GPU model). Gemm must use one algorithm
// per shape for a given backend configuration (OpenBLAS with a fixed thread count; one cuBLASLt
// algorithm).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace tandem::device {

// The number format GEMM inputs are rounded to (train.precision). Products are always
// accumulated in fp32 and results, activations, gradients and master weights stay fp32
// (DESIGN §8: mixed precision with fp32 master weights).
enum class Precision { kFp32, kBf16, kFp16 };

// Abstract device backend. Pointers are device pointers of that backend (host memory for CPU),
// allocated with Allocate. Ops are queued in order on the backend's one stream; only the calls
// that hand a value to the host (BceWithLogits, CopyToHost, AllFinite, Synchronize) wait (the
// CUDA backend also waits in Deallocate, in EmbeddingBagBackward and when an op first needs more
// scratch memory than before).
//
// Errors: a failed op (out of memory, a device fault, a bad launch) makes status() non-OK for
// good (sticky, like the CUDA context it reflects); ops after it do nothing. Callers check
// status() once per step, not per op.
// Thread-safety: an instance requires external synchronization.
class Backend {
 public:
  virtual ~Backend() = default;

  // Whether device pointers are host pointers (CPU): then the Copy* calls are memcpy and a
  // caller may read results directly.
  virtual bool host_memory() const = 0;
  // Zero-filled device memory of `bytes` (> 0); null after an error (see status()).
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Deallocate(void* p) = 0;
  // Host -> device, ordered after the ops queued before it; `src` may be reused on return.
  virtual void CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  // Device -> host; the bytes are in `dst` on return.
  virtual void CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  // Waits for every queued op.
  virtual void Synchronize() = 0;
  // OK, or the first error an op met (sticky).
  virtual Status status() const = 0;

  // Gemm with A and B rounded to `precision` first (round-to-nearest-even), products summed in
  // fp32, C fp32. kFp32 is Gemm. The CPU backend emulates the rounding so that mixed-precision
  // code paths can be tested without a GPU.
  virtual void GemmMixed(Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n,
                         int64_t k, float alpha, const float* a, const float* b, float beta,
                         float* c) = 0;
  // x *= alpha element-wise.
  virtual void Scale(int64_t n, float alpha, float* x) = 0;
  // Whether every x[i] is finite (fp16 overflow check); waits for the result.
  virtual bool AllFinite(int64_t n, const float* x) = 0;

  // C[m x n] = alpha * op(A) * op(B) + beta * C, where op(A) is m x k and op(B) is k x n.
  // A is stored m x k (k x m when trans_a), B is k x n (n x k when trans_b). beta = 0 ignores C.
  virtual void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, const float* b, float beta, float* c) = 0;

  // A linear layer's forward: y = x W^T + b (then max(y, 0) when relu), x of batch x in, W of
  // out x in, GEMM inputs at `precision`. The CPU backend runs Gemm, AddBias and ReluForward;
  // the CUDA backend fuses bias and ReLU into the GEMM's epilogue (cuBLASLt).
  virtual void LinearForward(Precision precision, int64_t batch, int64_t in, int64_t out,
                             const float* x, const float* w, const float* b, bool relu,
                             float* y) = 0;
  // on: LinearForward computes each row on its own (cpu/row_stable_linear.h), so that a
  // sample's score does not depend on the batch it is scored in; scoring (Trainer::Predict)
  // turns it on, so eval, `tandem predict` and `tandem serve` agree bit for bit on every record.
  // off: the BLAS GEMM (training). Backends that make no such promise (CUDA) ignore it.
  virtual void SetRowStableForward(bool on) {}

  // y[r][c] += bias[c] for y of rows x cols.
  virtual void AddBias(int64_t rows, int64_t cols, const float* bias, float* y) = 0;
  // db[c] = sum over r of dy[r][c], starting from 0, in a fixed order per backend (CPU:
  // increasing r, i.e. sample order; CUDA: chunks of 256 consecutive rows each summed in
  // increasing r, then the chunk sums added in chunk order; one chunk is the CPU's order).
  virtual void BiasGrad(int64_t rows, int64_t cols, const float* dy, float* db) = 0;

  // y = max(x, 0) element-wise (y may alias x).
  virtual void ReluForward(int64_t n, const float* x, float* y) = 0;
  // dx = y > 0 ? dy : 0, where y is the forward output (dx may alias dy).
  virtual void ReluBackward(int64_t n, const float* y, const float* dy, float* dx) = 0;
  // y = 1 / (1 + exp(-x)), computed without overflow for either sign.
  virtual void Sigmoid(int64_t n, const float* x, float* y) = 0;
  // dx = dy * y * (1 - y), where y is the forward output.
  virtual void SigmoidBackward(int64_t n, const float* y, const float* dy, float* dx) = 0;

  // Binary cross-entropy on logits z with labels in [0, 1] and per-sample weights w (nullptr:
  // all 1). Returns sum_i w_i * bce(z_i, y_i) / normaliser, summed in double in a fixed order
  // per backend (CPU: sample order; CUDA: blocks of 1024 samples, each a fixed binary tree over
  // 256 sequential per-thread sums, then the block sums by the same scheme); writes
  // d_logits[i] = w_i * (sigmoid(z_i) - y_i) / normaliser when d_logits is not null.
  virtual float BceWithLogits(int64_t n, const float* logits, const float* labels,
                              const float* weights, float normaliser, float* d_logits) = 0;

  virtual void Copy(int64_t n, const float* x, float* y) = 0;
  virtual void Fill(int64_t n, float value, float* y) = 0;
  // y += alpha * x.
  virtual void Axpy(int64_t n, float alpha, const float* x, float* y) = 0;
  // 2-D strided copy of a rows x cols block: dst[r * dst_ld + c] (+)= src[r * src_ld + c].
  // Concatenation and splitting of feature blocks are both this op.
  virtual void CopyStrided(int64_t rows, int64_t cols, const float* src, int64_t src_ld, float* dst,
                           int64_t dst_ld, bool accumulate) = 0;

  // DLRM pairwise dot products. x is batch x n x d (n vectors of dim d per sample). For each
  // sample, out[s * out_ld + p] = <x_i, x_j> for the p-th pair of the strict upper triangle in
  // row-major order (i < j, i outer), each dot summed over d in increasing index order.
  virtual void PairwiseDotsForward(int64_t batch, int64_t n, int64_t d, const float* x, float* out,
                                   int64_t out_ld) = 0;
  // dx[s][i] = sum over j != i (increasing j) of dz[s][pair(i, j)] * x[s][j]; dx is overwritten.
  virtual void PairwiseDotsBackward(int64_t batch, int64_t n, int64_t d, const float* x,
                                    const float* dz, int64_t dz_ld, float* dx) = 0;

  // The layers of the standard CTR models (issue 19). Every sum below runs in the index order
  // it names on both backends (one thread per output element on CUDA), so each backend is
  // bit-identical from run to run and the two agree within rounding.

  // y = a * b element-wise (y += a * b when accumulate); y may alias neither a nor b.
  virtual void Mul(int64_t n, const float* a, const float* b, float* y, bool accumulate) = 0;
  // Factorisation-machine second order over n vectors of dim d per sample (x: batch x n x d):
  // out[s * out_ld] = 0.5 * sum over c of ((sum_i x_ic)^2 - sum_i x_ic^2), the inner sums over
  // increasing i, the outer over increasing c.
  virtual void FmForward(int64_t batch, int64_t n, int64_t d, const float* x, float* out,
                         int64_t out_ld) = 0;
  // dx[s][i][c] = dz[s * dz_ld] * (sum_j x_jc - x_ic) (the sum over increasing j); overwrites dx.
  virtual void FmBackward(int64_t batch, int64_t n, int64_t d, const float* x, const float* dz,
                          int64_t dz_ld, float* dx) = 0;
  // Row-wise softmax of x (rows x cols) into y: exp(x - max) / sum, the sum over increasing
  // column.
  virtual void SoftmaxForward(int64_t rows, int64_t cols, const float* x, float* y) = 0;
  // dx = y * (dy - sum_c y_c dy_c), the sum over increasing column; y is the forward output.
  virtual void SoftmaxBackward(int64_t rows, int64_t cols, const float* y, const float* dy,
                               float* dx) = 0;
  // Mixture of experts: x is batch x e x h (e expert outputs per sample), gate batch x e;
  // out[s][c] = sum over k (increasing) of gate[s][k] * x[s][k][c].
  virtual void MixtureForward(int64_t batch, int64_t e, int64_t h, const float* gate,
                              const float* x, float* out) = 0;
  // d_gate[s][k] = sum over c (increasing) of dy[s][c] * x[s][k][c] (overwritten), and
  // dx[s][k][c] (+)= gate[s][k] * dy[s][c] (added to dx when accumulate, else overwritten).
  virtual void MixtureBackward(int64_t batch, int64_t e, int64_t h, const float* gate,
                               const float* x, const float* dy, float* d_gate, float* dx,
                               bool accumulate) = 0;

  // Embedding-bag pooling. rows is num_unique x d; the lookups of sample s are
  // positions [offsets[s], offsets[s + 1]) of `inverse`, each a row index into rows, with a
  // per-lookup weight w[k] (`weights`, or 1 when null). pooled[s] = sum of w[k] * row, the
  // products added in lookup order (mean: times 1/count; an empty bag is 0).
  virtual void EmbeddingBagForward(int64_t batch, int64_t d, const float* rows,
                                   const int64_t* offsets, const int64_t* inverse,
                                   const float* weights, bool mean, float* pooled) = 0;
  // d_rows (num_unique x d) is overwritten with, for each unique row, the sum over every lookup
  // k of it of (scale * w[k]) * d_pooled[sample of k] (scale: 1/count for mean, else 1), added in
  // lookup (= sample) order on both backends. The CUDA backend waits for its stream here: it
  // reads offsets[batch] to size the sort that groups the lookups by row.
  virtual void EmbeddingBagBackward(int64_t batch, int64_t d, int64_t num_unique,
                                    const float* d_pooled, const int64_t* offsets,
                                    const int64_t* inverse, const float* weights, bool mean,
                                    float* d_rows) = 0;
};

}  // namespace tandem::device
