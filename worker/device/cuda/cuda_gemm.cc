#include "worker/device/cuda/cuda_gemm.h"

#include <cstdint>
#include <string>

#include "common/log.h"

namespace tandem::device::cuda {
namespace {

cudaDataType_t InputType(Precision p) {
  switch (p) {
    case Precision::kBf16:
      return CUDA_R_16BF;
    case Precision::kFp16:
      return CUDA_R_16F;
    case Precision::kFp32:
      break;
  }
  return CUDA_R_32F;
}

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
    case Precision::kFp32:
      break;
  }
  return "fp32";
}

cublasLtEpilogue_t LtEpilogue(Epilogue e) {
  switch (e) {
    case Epilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kReluBias:
      return CUBLASLT_EPILOGUE_RELU_BIAS;
    case Epilogue::kNone:
      break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

const char* EpilogueName(Epilogue e) {
  switch (e) {
    case Epilogue::kBias:
      return "bias";
    case Epilogue::kReluBias:
      return "relu(bias)";
    case Epilogue::kNone:
      break;
  }
  return "none";
}

// The largest power of two dividing the address, capped at cuBLASLt's default assumption (256).
uint32_t Alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

std::string Describe(const auto& key) {
  return std::string(PrecisionName(key.precision)) + " " + (key.trans_a ? "T" : "N") +
         (key.trans_b ? "T" : "N") + " m=" + std::to_string(key.m) + " n=" + std::to_string(key.n) +
         " k=" + std::to_string(key.k) + " epilogue=" + EpilogueName(key.epilogue) +
         " align=" + std::to_string(key.align_a) + "/" + std::to_string(key.align_b) + "/" +
         std::to_string(key.align_c) + "/" + std::to_string(key.align_bias);
}

template <typename T>
T AlgoConfig(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T value{};
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof(value), &written) !=
      CUBLAS_STATUS_SUCCESS) {
    return T{};
  }
  return value;
}

}  // namespace

struct LtGemm::Plan {
  bool supported = false;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A, B, C (= D)
  cublasLtMatmulAlgo_t algo{};

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    for (cublasLtMatrixLayout_t layout : {a, b, c}) {
      if (layout != nullptr) (void)cublasLtMatrixLayoutDestroy(layout);
    }
    if (desc != nullptr) (void)cublasLtMatmulDescDestroy(desc);
  }
};

LtGemm::LtGemm(cudaStream_t stream, StickyStatus* sticky) : stream_(stream), sticky_(sticky) {}

StatusOr<std::unique_ptr<LtGemm>> LtGemm::Create(cudaStream_t stream, StickyStatus* sticky) {
  std::unique_ptr<LtGemm> gemm(new LtGemm(stream, sticky));
  if (!TANDEM_CUDA_OK(*sticky, cublasLtCreate(&gemm->handle_)) ||
      !TANDEM_CUDA_OK(*sticky, cudaMalloc(&gemm->workspace_, kWorkspaceBytes))) {
    return sticky->status();
  }
  return gemm;
}

LtGemm::~LtGemm() {
  plans_.clear();
  if (workspace_ != nullptr) (void)cudaFree(workspace_);
  if (handle_ != nullptr) (void)cublasLtDestroy(handle_);
}

LtGemm::Result LtGemm::Run(const GemmCall& call) {
  const Key key{call.precision,
                call.trans_a,
                call.trans_b,
                call.m,
                call.n,
                call.k,
                call.epilogue,
                Alignment(call.a),
                Alignment(call.b),
                Alignment(call.c),
                Alignment(call.bias)};
  const Plan* plan = PlanFor(key, call);
  if (plan == nullptr) return Result::kFailed;
  if (!plan->supported) return Result::kUnsupported;
  if (call.epilogue != Epilogue::kNone &&
      !TANDEM_CUDA_OK(*sticky_,
                      cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                     &call.bias, sizeof(call.bias)))) {
    return Result::kFailed;
  }
  // cuBLASLt's A is our b and its B our a (see MakePlan); alpha and beta live on the host.
  if (!TANDEM_CUDA_OK(*sticky_,
                      cublasLtMatmul(handle_, plan->desc, &call.alpha, call.b, plan->a, call.a,
                                     plan->b, &call.beta, call.c, plan->c, call.c, plan->c,
                                     &plan->algo, workspace_, kWorkspaceBytes, stream_))) {
    return Result::kFailed;
  }
  return Result::kQueued;
}

const LtGemm::Plan* LtGemm::PlanFor(const Key& key, const GemmCall& call) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  std::unique_ptr<Plan> plan = MakePlan(key, call);
  if (plan == nullptr) return nullptr;
  return plans_.emplace(key, std::move(plan)).first->second.get();
}

std::unique_ptr<LtGemm::Plan> LtGemm::MakePlan(const Key& key, const GemmCall& call) {
  auto plan = std::make_unique<Plan>();
  if (!CreateDescriptors(key, call, plan.get()) || !ChooseAlgorithm(key, plan.get())) {
    return nullptr;
  }
  return plan;
}

bool LtGemm::CreateDescriptors(const Key& key, const GemmCall& call, Plan* plan) {
  // cuBLASLt is column-major. Row-major C (m x n) is column-major C^T (n x m), and
  // C^T = op(B)^T op(A)^T, where row-major B read column-major is B^T: so cuBLASLt computes an
  // n x m product of our b (its A, op = trans_b) and our a (its B, op = trans_a). A bias per
  // column of row-major C is then a bias per row of cuBLASLt's D, which is what its BIAS
  // epilogue adds (the vector's length is D's row count).
  const cudaDataType_t in = InputType(key.precision);
  const uint64_t a_rows = key.trans_b ? key.k : key.n, a_cols = key.trans_b ? key.n : key.k;
  const uint64_t b_rows = key.trans_a ? key.m : key.k, b_cols = key.trans_a ? key.k : key.m;
  const cublasOperation_t op_a = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = LtEpilogue(key.epilogue);
  // fp32 accumulation for every precision; plain CUBLAS_COMPUTE_32F never uses TF32.
  return TANDEM_CUDA_OK(*sticky_,
                        cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)) &&
         TANDEM_CUDA_OK(*sticky_,
                        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                       &op_a, sizeof(op_a))) &&
         TANDEM_CUDA_OK(*sticky_,
                        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                       &op_b, sizeof(op_b))) &&
         TANDEM_CUDA_OK(*sticky_,
                        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                       &epilogue, sizeof(epilogue))) &&
         // The heuristic reads the bias pointer's alignment (the bias stays fp32: D's type).
         (key.epilogue == Epilogue::kNone ||
          TANDEM_CUDA_OK(*sticky_, cublasLtMatmulDescSetAttribute(
                                       plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &call.bias,
                                       sizeof(call.bias)))) &&
         TANDEM_CUDA_OK(*sticky_, cublasLtMatrixLayoutCreate(&plan->a, in, a_rows, a_cols,
                                                             static_cast<int64_t>(a_rows))) &&
         TANDEM_CUDA_OK(*sticky_, cublasLtMatrixLayoutCreate(&plan->b, in, b_rows, b_cols,
                                                             static_cast<int64_t>(b_rows))) &&
         TANDEM_CUDA_OK(*sticky_,
                        cublasLtMatrixLayoutCreate(&plan->c, CUDA_R_32F, key.n, key.m, key.n));
}

bool LtGemm::ChooseAlgorithm(const Key& key, Plan* plan) {
  cublasLtMatmulPreference_t pref = nullptr;
  if (!TANDEM_CUDA_OK(*sticky_, cublasLtMatmulPreferenceCreate(&pref))) return false;
  const uint64_t workspace = kWorkspaceBytes;
  // cuBLASLt's A is our b, its B our a.
  const uint32_t align_a = key.align_b, align_b = key.align_a, align_c = key.align_c;
  auto set = [&](cublasLtMatmulPreferenceAttributes_t attr, const auto& value) {
    return TANDEM_CUDA_OK(*sticky_,
                          cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
  };
  const bool ok = set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace) &&
                  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a) &&
                  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b) &&
                  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c) &&
                  set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  // NOT_SUPPORTED is one way the heuristic says it has no algorithm: not an error.
  const cublasStatus_t heuristic =
      ok ? cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->c, plan->c,
                                          pref, 1, &result, &found)
         : CUBLAS_STATUS_SUCCESS;
  (void)cublasLtMatmulPreferenceDestroy(pref);
  if (!ok) return false;
  if (heuristic != CUBLAS_STATUS_NOT_SUPPORTED && !TANDEM_CUDA_OK(*sticky_, heuristic)) {
    return false;
  }
  plan->supported =
      heuristic == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (!plan->supported) {
    TLOG_INFO("cuda backend: gemm plan {}: no cuBLASLt algorithm", Describe(key));
    return true;
  }
  plan->algo = result.algo;
  TLOG_INFO(
      "cuda backend: gemm plan {}: cuBLASLt algo {} tile {} stages {} split-k {} reduction {} "
      "(workspace {} of {} bytes)",
      Describe(key), AlgoConfig<int32_t>(plan->algo, CUBLASLT_ALGO_CONFIG_ID),
      AlgoConfig<uint32_t>(plan->algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
      AlgoConfig<uint32_t>(plan->algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
      AlgoConfig<int32_t>(plan->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
      AlgoConfig<uint32_t>(plan->algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME), result.workspaceSize,
      kWorkspaceBytes);
  return true;
}

}  // namespace tandem::device::cuda
