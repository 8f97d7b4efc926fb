// Internal to the CUDA backend: row-major GEMMs through cuBLASLt with one algorithm per shape
// (PROTOCOLS §5.2). Host C++ (g++).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <compare>
#include <cstdint>
#include <map>
#include <memory>

#include "common/status.h"
#include "worker/device/backend.h"
#include "worker/device/cuda/cuda_check.h"

namespace tandem::device::cuda {

// What runs after the product, fused into the GEMM: nothing, + bias per output column, or
// max(. + bias, 0).
enum class Epilogue { kNone, kBias, kReluBias };

// One row-major GEMM: c[m x n] = alpha * op(a) * op(b) + beta * c (backend.h's Gemm), followed by
// the epilogue. a and b hold elements of `precision` (fp32, or bf16 / fp16 already rounded), c
// and bias are fp32.
struct GemmCall {
  Precision precision = Precision::kFp32;
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0;  // all > 0
  float alpha = 1.0f;
  const void* a = nullptr;
  const void* b = nullptr;
  float beta = 0.0f;
  float* c = nullptr;
  Epilogue epilogue = Epilogue::kNone;
  const float* bias = nullptr;  // n floats when the epilogue adds a bias
};

// Owns a cuBLASLt handle, a fixed workspace and the plans. Every call of one plan key runs the
// algorithm that cublasLtMatmulAlgoGetHeuristic ranked first when the key was first seen (logged
// then), with the same workspace, on the one stream: the result is the same bits every run.
// Requires external synchronization.
class LtGemm {
 public:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

  enum class Result {
    kQueued,       // on the stream
    kUnsupported,  // no cuBLASLt algorithm for this key; nothing queued, no error recorded
    kFailed,       // error recorded in the sticky status
  };

  // `stream` and `sticky` must outlive the object.
  static StatusOr<std::unique_ptr<LtGemm>> Create(cudaStream_t stream, StickyStatus* sticky);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  Result Run(const GemmCall& call);

 private:
  // Pointer alignments are part of the key: the heuristic only offers algorithms valid for the
  // alignments it is told (and it reads the bias pointer's). They are a function of the model's
  // buffer layout (cudaMalloc returns 256-byte aligned blocks), so the plan stays deterministic.
  struct Key {
    Precision precision;
    bool trans_a, trans_b;
    int64_t m, n, k;
    Epilogue epilogue;
    uint32_t align_a, align_b, align_c, align_bias;
    auto operator<=>(const Key&) const = default;
  };
  struct Plan;

  // Out of line: the members' cleanup needs Plan's definition.
  LtGemm(cudaStream_t stream, StickyStatus* sticky);
  // The plan of `key`, made on first use; null after an error.
  const Plan* PlanFor(const Key& key, const GemmCall& call);
  std::unique_ptr<Plan> MakePlan(const Key& key, const GemmCall& call);
  // The descriptors of `key` (call.bias's value is read for its alignment). False after an error.
  bool CreateDescriptors(const Key& key, const GemmCall& call, Plan* plan);
  // The heuristic's first algorithm for the plan's descriptors, logged; plan->supported false
  // when there is none. False after an error.
  bool ChooseAlgorithm(const Key& key, Plan* plan);

  cudaStream_t stream_;
  StickyStatus* sticky_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace tandem::device::cuda
