// Internal to the CUDA backend: host-callable launchers of its kernels. Each queues its work on
// `stream` and returns the launch's error (cudaGetLastError), never waiting for the GPU. Shapes
// are as in backend.h; n == 0 (or an empty shape) launches nothing.
//
// Floating-point order: every sum runs in the order documented below, with additions and
// multiplications spelled __fadd_rn / __fmul_rn where the CPU backend (compiled with
// -ffp-contract=off) does them separately, so that the compiler's default fused multiply-add
// contraction cannot change a result between code versions. Results are bit-identical from run
// to run on one GPU model. Where the order is the CPU's (embedding bags, pairwise dots, the
// elementwise adds and multiplies, BiasGrad over at most kBiasGradChunkRows rows, the CTR ops but
// SoftmaxForward) they are the CPU backend's bits too; elsewhere they agree within rounding:
// CUDA's expf / log1pf differ from glibc's by an ulp or two, and BiasGrad over more rows and
// BceWithLogits' sum use their own order.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tandem::device::cuda {

// ---- elementwise_kernels.cu ----
cudaError_t LaunchScale(cudaStream_t stream, int64_t n, float alpha, float* x);
cudaError_t LaunchFill(cudaStream_t stream, int64_t n, float value, float* y);
cudaError_t LaunchAxpy(cudaStream_t stream, int64_t n, float alpha, const float* x, float* y);
cudaError_t LaunchAddBias(cudaStream_t stream, int64_t rows, int64_t cols, const float* bias,
                          float* y);
cudaError_t LaunchReluForward(cudaStream_t stream, int64_t n, const float* x, float* y);
cudaError_t LaunchReluBackward(cudaStream_t stream, int64_t n, const float* y, const float* dy,
                               float* dx);
cudaError_t LaunchSigmoid(cudaStream_t stream, int64_t n, const float* x, float* y);
cudaError_t LaunchSigmoidBackward(cudaStream_t stream, int64_t n, const float* y, const float* dy,
                                  float* dx);
cudaError_t LaunchCopyStrided(cudaStream_t stream, int64_t rows, int64_t cols, const float* src,
                              int64_t src_ld, float* dst, int64_t dst_ld, bool accumulate);
// out[i] = x[i] rounded to nearest-even bf16 (__nv_bfloat16) or fp16 (__half), 2 bytes each.
cudaError_t LaunchRoundToHalf(cudaStream_t stream, bool bf16, int64_t n, const float* x, void* out);
// out[i] = x[i] rounded as by LaunchRoundToHalf, widened back to fp32 (exactly).
cudaError_t LaunchRoundInFloat(cudaStream_t stream, bool bf16, int64_t n, const float* x,
                               float* out);

// ---- reduction_kernels.cu ----
// BiasGrad's fixed partition: chunks of this many consecutive rows, each summed in row order;
// then db[c] = the chunk sums added in chunk order. With rows <= kBiasGradChunkRows that is the
// CPU's sample order exactly.
constexpr int64_t kBiasGradChunkRows = 256;
// Floats of scratch LaunchBiasGrad needs (0 when it needs none).
int64_t BiasGradScratchFloats(int64_t rows, int64_t cols);
cudaError_t LaunchBiasGrad(cudaStream_t stream, int64_t rows, int64_t cols, const float* dy,
                           float* scratch, float* db);

// BceWithLogits' fixed partition: blocks of kBceChunk samples, each reduced by a fixed binary
// tree over kBceThreads per-thread sums (thread t adds samples t, t + kBceThreads, ... of the
// block in order), all in double; then the block sums by the same scheme in one block.
constexpr int kBceThreads = 256;
constexpr int64_t kBceChunk = 4 * kBceThreads;
// Doubles of scratch LaunchBceWithLogits needs.
int64_t BceScratchDoubles(int64_t n);
// *sum = sum_i w_i * bce(z_i, y_i) (double, not yet divided by the normaliser); d_logits as in
// backend.h when not null. n > 0.
cudaError_t LaunchBceWithLogits(cudaStream_t stream, int64_t n, const float* logits,
                                const float* labels, const float* weights, float normaliser,
                                float* d_logits, double* scratch, double* sum);

// *flag = 1 if some x[i] is not finite, else 0 (integer max over the elements: deterministic).
cudaError_t LaunchAllFinite(cudaStream_t stream, int64_t n, const float* x, int* flag);

// ---- interaction_kernels.cu ----
// One block per sample; each output element is one thread's sequential sum (increasing index).
cudaError_t LaunchPairwiseDotsForward(cudaStream_t stream, int64_t batch, int64_t n, int64_t d,
                                      const float* x, float* out, int64_t out_ld);
cudaError_t LaunchPairwiseDotsBackward(cudaStream_t stream, int64_t batch, int64_t n, int64_t d,
                                       const float* x, const float* dz, int64_t dz_ld, float* dx);

// ---- ctr_kernels.cu ----
// Every sum is one chain in the order backend.h documents. The FM sample sums, the softmax row
// sums and the mixture's gate gradient are a warp's, its lanes' terms added in column order; the
// rest are one thread's per output element (FmBackward: per sample and column).
cudaError_t LaunchMul(cudaStream_t stream, int64_t n, const float* a, const float* b, float* y,
                      bool accumulate);
cudaError_t LaunchFmForward(cudaStream_t stream, int64_t batch, int64_t n, int64_t d,
                            const float* x, float* out, int64_t out_ld);
cudaError_t LaunchFmBackward(cudaStream_t stream, int64_t batch, int64_t n, int64_t d,
                             const float* x, const float* dz, int64_t dz_ld, float* dx);
cudaError_t LaunchSoftmaxForward(cudaStream_t stream, int64_t rows, int64_t cols, const float* x,
                                 float* y);
cudaError_t LaunchSoftmaxBackward(cudaStream_t stream, int64_t rows, int64_t cols, const float* y,
                                  const float* dy, float* dx);
cudaError_t LaunchMixtureForward(cudaStream_t stream, int64_t batch, int64_t e, int64_t h,
                                 const float* gate, const float* x, float* out);
cudaError_t LaunchMixtureBackward(cudaStream_t stream, int64_t batch, int64_t e, int64_t h,
                                  const float* gate, const float* x, const float* dy, float* d_gate,
                                  float* dx, bool accumulate);

// ---- embedding_bag_kernels.cu ----
// One thread per (sample, column), summing the bag's rows in lookup order.
cudaError_t LaunchEmbeddingBagForward(cudaStream_t stream, int64_t batch, int64_t d,
                                      const float* rows, const int64_t* offsets,
                                      const int64_t* inverse, const float* weights, bool mean,
                                      float* pooled);
// The backward groups the lookups by unique row with a stable radix sort (keys: row; values:
// lookup index), so each row's gradients are summed in lookup order, as on the CPU. It needs the
// lookup count on the host (lookups = offsets[batch], 0 < lookups <= INT32_MAX, num_unique <
// INT32_MAX) and this many bytes of scratch.
cudaError_t EmbeddingBagBackwardScratchBytes(int64_t lookups, int64_t num_unique, size_t* bytes);
cudaError_t LaunchEmbeddingBagBackward(cudaStream_t stream, int64_t batch, int64_t d,
                                       int64_t num_unique, int64_t lookups, const float* d_pooled,
                                       const int64_t* offsets, const int64_t* inverse,
                                       const float* weights, bool mean, float* d_rows,
                                       void* scratch, size_t scratch_bytes);

}  // namespace tandem::device::cuda
