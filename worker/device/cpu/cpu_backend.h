// The CPU backend (DESIGN §8): OpenBLAS sgemm for GEMM, plain loops for everything else. The
// loops are written so that each reduction runs in the documented order of backend.h; the file
// must be compiled with -ffp-contract=off and without -ffast-math / -march=native (PROTOCOLS §5).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/device/backend.h"

namespace tandem::device {

// Host-memory backend. OpenBLAS keeps its thread count in process-global state, so every
// CpuBackend in a process must be created with the same thread count (Create enforces nothing
// beyond setting it). Thread-safety: requires external synchronization.
class CpuBackend final : public Backend {
 public:
  // Sets OpenBLAS to `threads` threads (train.threads). InvalidArgument if threads < 1.
  static StatusOr<std::unique_ptr<CpuBackend>> Create(int64_t threads);

  int64_t threads() const { return threads_; }
  // The OpenBLAS kernel set in use ("SkylakeX", "Haswell", "Prescott", ...): part of the
  // determinism class (PROTOCOLS §5). DYNAMIC_ARCH builds pick it from CPUID unless
  // OPENBLAS_CORETYPE pins it; on VMs with a generic CPU model they fall back to Prescott (SSE3),
  // several times slower, so deployments should pin it.
  static std::string BlasCoreName();

  bool host_memory() const override { return true; }
  void* Allocate(size_t bytes) override;
  void Deallocate(void* p) override;
  void CopyToDevice(void* dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  void Synchronize() override {}
  Status status() const override { return status_; }

  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, const float* b, float beta, float* c) override;
  void GemmMixed(Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 float alpha, const float* a, const float* b, float beta, float* c) override;
  void LinearForward(Precision precision, int64_t batch, int64_t in, int64_t out, const float* x,
                     const float* w, const float* b, bool relu, float* y) override;
  void SetRowStableForward(bool on) override { row_stable_ = on; }
  void Scale(int64_t n, float alpha, float* x) override;
  bool AllFinite(int64_t n, const float* x) override;
  void AddBias(int64_t rows, int64_t cols, const float* bias, float* y) override;
  void BiasGrad(int64_t rows, int64_t cols, const float* dy, float* db) override;
  void ReluForward(int64_t n, const float* x, float* y) override;
  void ReluBackward(int64_t n, const float* y, const float* dy, float* dx) override;
  void Sigmoid(int64_t n, const float* x, float* y) override;
  void SigmoidBackward(int64_t n, const float* y, const float* dy, float* dx) override;
  float BceWithLogits(int64_t n, const float* logits, const float* labels, const float* weights,
                      float normaliser, float* d_logits) override;
  void Copy(int64_t n, const float* x, float* y) override;
  void Fill(int64_t n, float value, float* y) override;
  void Axpy(int64_t n, float alpha, const float* x, float* y) override;
  void CopyStrided(int64_t rows, int64_t cols, const float* src, int64_t src_ld, float* dst,
                   int64_t dst_ld, bool accumulate) override;
  void Mul(int64_t n, const float* a, const float* b, float* y, bool accumulate) override;
  void FmForward(int64_t batch, int64_t n, int64_t d, const float* x, float* out,
                 int64_t out_ld) override;
  void FmBackward(int64_t batch, int64_t n, int64_t d, const float* x, const float* dz,
                  int64_t dz_ld, float* dx) override;
  void SoftmaxForward(int64_t rows, int64_t cols, const float* x, float* y) override;
  void SoftmaxBackward(int64_t rows, int64_t cols, const float* y, const float* dy,
                       float* dx) override;
  void MixtureForward(int64_t batch, int64_t e, int64_t h, const float* gate, const float* x,
                      float* out) override;
  void MixtureBackward(int64_t batch, int64_t e, int64_t h, const float* gate, const float* x,
                       const float* dy, float* d_gate, float* dx, bool accumulate) override;
  void PairwiseDotsForward(int64_t batch, int64_t n, int64_t d, const float* x, float* out,
                           int64_t out_ld) override;
  void PairwiseDotsBackward(int64_t batch, int64_t n, int64_t d, const float* x, const float* dz,
                            int64_t dz_ld, float* dx) override;
  void EmbeddingBagForward(int64_t batch, int64_t d, const float* rows, const int64_t* offsets,
                           const int64_t* inverse, const float* weights, bool mean,
                           float* pooled) override;
  void EmbeddingBagBackward(int64_t batch, int64_t d, int64_t num_unique, const float* d_pooled,
                            const int64_t* offsets, const int64_t* inverse, const float* weights,
                            bool mean, float* d_rows) override;

 private:
  explicit CpuBackend(int64_t threads) : threads_(threads) {}

  int64_t threads_;
  Status status_;
  // GemmMixed's rounded copies of A and B.
  std::vector<float> round_a_, round_b_;
  bool row_stable_ = false;
  std::vector<float> round_x_, transposed_w_;  // RowStableLinear's inputs
};

}  // namespace tandem::device
