// The CUDA backend's host side: stream, memory, copies, GEMM dispatch and kernel launches. Host
// C++ compiled by g++ (the project's warnings, spdlog); the kernels are in the .cu files behind
// cuda_kernels.h.
//
// cuDNN is not used: its fused ops target convolutions and attention, and for what this
// interface needs (bias, ReLU, sigmoid, BCE, embedding bags, pairwise dots, FM, softmax,
// mixtures) the hand kernels are simple, and their summation order is ours to fix and document
// (PROTOCOLS §5.1).
#include "worker/device/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "common/log.h"
#include "worker/device/cuda/cuda_check.h"
#include "worker/device/cuda/cuda_gemm.h"
#include "worker/device/cuda/cuda_kernels.h"

namespace tandem::device {
namespace {

using cuda::Epilogue;
using cuda::GemmCall;
using cuda::LtGemm;
using cuda::StickyStatus;

// Host copies go through pinned buffers: a pageable cudaMemcpyAsync would wait for the stream.
// A ring of slots lets copies queue behind each other; a slot is reused only after the event of
// its last copy, so a copy still in flight never sees its source overwritten.
constexpr size_t kStagingSlots = 4;
constexpr size_t kStagingChunkBytes = size_t{8} << 20;  // larger copies go in chunks

class CudaBackend final : public Backend {
 public:
  static StatusOr<std::unique_ptr<Backend>> Create(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  bool host_memory() const override { return false; }
  void* Allocate(size_t bytes) override;
  void Deallocate(void* p) override;
  void CopyToDevice(void* dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  void Synchronize() override;
  Status status() const override { return sticky_.status(); }

  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, const float* b, float beta, float* c) override;
  void GemmMixed(Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 float alpha, const float* a, const float* b, float beta, float* c) override;
  void LinearForward(Precision precision, int64_t batch, int64_t in, int64_t out, const float* x,
                     const float* w, const float* b, bool relu, float* y) override;
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
  // Device memory that only grows (by half again at least, since batch-dependent sizes vary).
  struct Scratch {
    void* p = nullptr;
    size_t bytes = 0;
  };
  struct StagingSlot {
    void* host = nullptr;  // pinned
    size_t bytes = 0;
    cudaEvent_t done = nullptr;  // recorded after the slot's last host-to-device copy
    bool pending = false;
  };
  // Values handed to the host: device side and pinned host side.
  struct DeviceScalars {
    double loss_sum;
    int flag;
  };
  struct HostScalars {
    double loss_sum;
    int64_t lookups;
    int flag;
  };

  explicit CudaBackend(int device) : device_(device) {}
  Status Init();
  // Makes device_ current on this thread. False (error recorded) when that fails.
  bool MakeCurrent();
  // The preamble of every op: false when an error is kept (the op does nothing) or the device
  // cannot be made current.
  bool Begin() { return sticky_.ok() && MakeCurrent(); }
  // At least `bytes` of `s`; null after an error. Growing waits for the stream, which may still
  // use the old block.
  void* Grow(Scratch* s, size_t bytes);
  // A staging slot of at least `bytes`, free of in-flight copies; null after an error.
  StagingSlot* AcquireSlot(size_t bytes);
  // `count` floats rounded to `precision` in `s`: 16-bit elements, or (in_float) fp32 ones.
  // Null after an error.
  const void* Rounded(Precision precision, const float* x, int64_t count, bool in_float,
                      Scratch* s);
  // Sets call->a and call->b to the fp32 inputs a (a_count floats) and b (b_count), or to their
  // copies rounded to call->precision. False after an error.
  bool SetInputs(GemmCall* call, const float* a, int64_t a_count, const float* b, int64_t b_count,
                 bool in_float);
  // c = beta * c (0 when beta is 0): Gemm with k = 0.
  void ScaleOnly(int64_t count, float beta, float* c);
  // Queues `call` (no epilogue) on the inputs a and b as SetInputs takes them. Where cuBLASLt has
  // no algorithm for a 16-bit precision, runs the fp32 GEMM of the rounded values instead: the
  // same products (exact in fp32) and fp32 sums. Records an error when it has none at all.
  void RunGemm(GemmCall call, const float* a, int64_t a_count, const float* b, int64_t b_count);

  const int device_;
  StickyStatus sticky_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<LtGemm> gemm_;
  Scratch half_a_, half_b_;  // GemmMixed's rounded inputs
  Scratch reduce_;           // BiasGrad / BceWithLogits partial sums
  Scratch sort_;             // EmbeddingBagBackward's sort
  Scratch overlap_;          // Copy between overlapping ranges
  std::array<StagingSlot, kStagingSlots> staging_;
  size_t next_slot_ = 0;
  DeviceScalars* device_scalars_ = nullptr;
  HostScalars* host_scalars_ = nullptr;  // pinned
};

StatusOr<std::unique_ptr<Backend>> CudaBackend::Create(int device) {
  if (device < 0) {
    return Status::InvalidArgument("cuda backend: device must be >= 0, got " +
                                   std::to_string(device));
  }
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::Unavailable(
        "cuda backend: cudaGetDeviceCount: " + std::string(cudaGetErrorName(e)) + " (" +
        cudaGetErrorString(e) + ")");
  }
  if (count == 0) return Status::Unavailable("cuda backend: cudaGetDeviceCount found 0 devices");
  if (device >= count) {
    return Status::Unavailable("cuda backend: device " + std::to_string(device) +
                               " requested, but only " + std::to_string(count) + " visible");
  }
  // Creates the device's context: a device that is there but unusable (exclusive mode and taken,
  // driver trouble) fails here, and is as unavailable as a missing one.
  cudaError_t context = cudaSetDevice(device);
  if (context == cudaSuccess) context = cudaFree(nullptr);
  if (context != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::Unavailable("cuda backend: device " + std::to_string(device) +
                               " unusable: " + cudaGetErrorName(context) + " (" +
                               cudaGetErrorString(context) + ")");
  }
  std::unique_ptr<CudaBackend> backend(new CudaBackend(device));
  TANDEM_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

Status CudaBackend::Init() {
  cudaDeviceProp prop{};
  if (!TANDEM_CUDA_OK(sticky_, cudaSetDevice(device_)) ||
      !TANDEM_CUDA_OK(sticky_, cudaGetDeviceProperties(&prop, device_)) ||
      !TANDEM_CUDA_OK(sticky_, cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)) ||
      !TANDEM_CUDA_OK(
          sticky_, cudaMalloc(reinterpret_cast<void**>(&device_scalars_), sizeof(DeviceScalars))) ||
      !TANDEM_CUDA_OK(sticky_, cudaHostAlloc(reinterpret_cast<void**>(&host_scalars_),
                                             sizeof(HostScalars), cudaHostAllocDefault))) {
    return sticky_.status();
  }
  for (StagingSlot& slot : staging_) {
    if (!TANDEM_CUDA_OK(sticky_, cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming))) {
      return sticky_.status();
    }
  }
  TANDEM_ASSIGN_OR_RETURN(gemm_, LtGemm::Create(stream_, &sticky_));
  // The GPU model and SM count are part of the determinism class (PROTOCOLS §5).
  TLOG_INFO("cuda backend: device {} {} (sm_{}{}, {} SMs, {} GiB)", device_, prop.name, prop.major,
            prop.minor, prop.multiProcessorCount, prop.totalGlobalMem >> 30);
  return Status::Ok();
}

CudaBackend::~CudaBackend() {
  // Teardown errors have no one to go to; the memory is released as far as CUDA allows.
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != device_) (void)cudaSetDevice(device_);
  if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
  gemm_.reset();
  for (Scratch* s : {&half_a_, &half_b_, &reduce_, &sort_, &overlap_}) {
    if (s->p != nullptr) (void)cudaFree(s->p);
  }
  for (StagingSlot& slot : staging_) {
    if (slot.host != nullptr) (void)cudaFreeHost(slot.host);
    if (slot.done != nullptr) (void)cudaEventDestroy(slot.done);
  }
  if (host_scalars_ != nullptr) (void)cudaFreeHost(host_scalars_);
  if (device_scalars_ != nullptr) (void)cudaFree(device_scalars_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  (void)cudaGetLastError();
}

bool CudaBackend::MakeCurrent() {
  int current = -1;
  if (!TANDEM_CUDA_OK(sticky_, cudaGetDevice(&current))) return false;
  return current == device_ || TANDEM_CUDA_OK(sticky_, cudaSetDevice(device_));
}

void* CudaBackend::Grow(Scratch* s, size_t bytes) {
  if (bytes <= s->bytes) return s->p;
  const size_t grown = std::max(bytes, s->bytes + s->bytes / 2);
  if (!TANDEM_CUDA_OK(sticky_, cudaStreamSynchronize(stream_))) return nullptr;
  if (s->p != nullptr) {
    const bool freed = TANDEM_CUDA_OK(sticky_, cudaFree(s->p));
    s->p = nullptr;
    s->bytes = 0;
    if (!freed) return nullptr;
  }
  if (!TANDEM_CUDA_OK(sticky_, cudaMalloc(&s->p, grown))) {
    s->p = nullptr;
    return nullptr;
  }
  s->bytes = grown;
  return s->p;
}

CudaBackend::StagingSlot* CudaBackend::AcquireSlot(size_t bytes) {
  StagingSlot& slot = staging_[next_slot_];
  next_slot_ = (next_slot_ + 1) % kStagingSlots;
  if (slot.pending) {
    if (!TANDEM_CUDA_OK(sticky_, cudaEventSynchronize(slot.done))) return nullptr;
    slot.pending = false;
  }
  if (slot.bytes < bytes) {
    if (slot.host != nullptr && !TANDEM_CUDA_OK(sticky_, cudaFreeHost(slot.host))) return nullptr;
    slot.host = nullptr;
    slot.bytes = 0;
    constexpr size_t kMinSlotBytes = size_t{64} << 10;
    const size_t size = std::min(kStagingChunkBytes, std::max(bytes, kMinSlotBytes));
    if (!TANDEM_CUDA_OK(sticky_, cudaHostAlloc(&slot.host, size, cudaHostAllocDefault))) {
      slot.host = nullptr;
      return nullptr;
    }
    slot.bytes = size;
  }
  return &slot;
}

void* CudaBackend::Allocate(size_t bytes) {
  if (!Begin()) return nullptr;
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1));
  if (e != cudaSuccess) {
    const std::string what = "cudaMalloc of " + std::to_string(bytes) + " bytes";
    (void)sticky_.Check(e, what.c_str(), __FILE__, __LINE__);
    return nullptr;
  }
  if (!TANDEM_CUDA_OK(sticky_, cudaMemsetAsync(p, 0, bytes, stream_))) {
    (void)cudaFree(p);
    return nullptr;
  }
  return p;
}

void CudaBackend::Deallocate(void* p) {
  // Runs after an error too, so that buffers are still released.
  if (p == nullptr || !MakeCurrent()) return;
  // Queued ops may still use the block.
  (void)TANDEM_CUDA_OK(sticky_, cudaStreamSynchronize(stream_));
  (void)TANDEM_CUDA_OK(sticky_, cudaFree(p));
}

void CudaBackend::CopyToDevice(void* dst, const void* src, size_t bytes) {
  if (!Begin()) return;
  for (size_t offset = 0; offset < bytes; offset += kStagingChunkBytes) {
    const size_t len = std::min(kStagingChunkBytes, bytes - offset);
    StagingSlot* slot = AcquireSlot(len);
    if (slot == nullptr) return;
    std::memcpy(slot->host, static_cast<const char*>(src) + offset, len);
    TANDEM_CUDA_RETURN_IF_ERROR(sticky_,
                                cudaMemcpyAsync(static_cast<char*>(dst) + offset, slot->host, len,
                                                cudaMemcpyHostToDevice, stream_));
    TANDEM_CUDA_RETURN_IF_ERROR(sticky_, cudaEventRecord(slot->done, stream_));
    slot->pending = true;
  }
}

void CudaBackend::CopyToHost(void* dst, const void* src, size_t bytes) {
  if (!Begin()) return;
  for (size_t offset = 0; offset < bytes; offset += kStagingChunkBytes) {
    const size_t len = std::min(kStagingChunkBytes, bytes - offset);
    StagingSlot* slot = AcquireSlot(len);
    if (slot == nullptr) return;
    TANDEM_CUDA_RETURN_IF_ERROR(
        sticky_, cudaMemcpyAsync(slot->host, static_cast<const char*>(src) + offset, len,
                                 cudaMemcpyDeviceToHost, stream_));
    TANDEM_CUDA_RETURN_IF_ERROR(sticky_, cudaStreamSynchronize(stream_));
    std::memcpy(static_cast<char*>(dst) + offset, slot->host, len);
  }
}

void CudaBackend::Synchronize() {
  if (!Begin()) return;
  (void)TANDEM_CUDA_OK(sticky_, cudaStreamSynchronize(stream_));
}

const void* CudaBackend::Rounded(Precision precision, const float* x, int64_t count, bool in_float,
                                 Scratch* s) {
  void* out = Grow(s, static_cast<size_t>(count) * (in_float ? sizeof(float) : 2));
  if (out == nullptr) return nullptr;
  const bool bf16 = precision == Precision::kBf16;
  const cudaError_t e =
      in_float ? cuda::LaunchRoundInFloat(stream_, bf16, count, x, static_cast<float*>(out))
               : cuda::LaunchRoundToHalf(stream_, bf16, count, x, out);
  const char* what = in_float ? "LaunchRoundInFloat" : "LaunchRoundToHalf";
  return sticky_.Check(e, what, __FILE__, __LINE__) ? out : nullptr;
}

bool CudaBackend::SetInputs(GemmCall* call, const float* a, int64_t a_count, const float* b,
                            int64_t b_count, bool in_float) {
  if (call->precision == Precision::kFp32) {
    call->a = a;
    call->b = b;
    return true;
  }
  call->a = Rounded(call->precision, a, a_count, in_float, &half_a_);
  call->b = Rounded(call->precision, b, b_count, in_float, &half_b_);
  return call->a != nullptr && call->b != nullptr;
}

void CudaBackend::ScaleOnly(int64_t count, float beta, float* c) {
  if (beta == 0.0f) {
    (void)TANDEM_CUDA_OK(sticky_, cudaMemsetAsync(c, 0, count * sizeof(float), stream_));
  } else {
    (void)TANDEM_CUDA_OK(sticky_, cuda::LaunchScale(stream_, count, beta, c));
  }
}

void CudaBackend::RunGemm(GemmCall call, const float* a, int64_t a_count, const float* b,
                          int64_t b_count) {
  if (!SetInputs(&call, a, a_count, b, b_count, /*in_float=*/false)) return;
  LtGemm::Result result = gemm_->Run(call);
  if (result == LtGemm::Result::kUnsupported && call.precision != Precision::kFp32) {
    if (!SetInputs(&call, a, a_count, b, b_count, /*in_float=*/true)) return;
    call.precision = Precision::kFp32;
    result = gemm_->Run(call);
  }
  if (result == LtGemm::Result::kUnsupported) {
    sticky_.Update(Status::Internal("cuda backend: cuBLASLt has no algorithm for a " +
                                    std::to_string(call.m) + " x " + std::to_string(call.n) +
                                    " x " + std::to_string(call.k) + " GEMM"));
  }
}

void CudaBackend::Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float* a, const float* b, float beta, float* c) {
  GemmMixed(Precision::kFp32, trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
}

void CudaBackend::GemmMixed(Precision precision, bool trans_a, bool trans_b, int64_t m, int64_t n,
                            int64_t k, float alpha, const float* a, const float* b, float beta,
                            float* c) {
  if (!Begin() || m <= 0 || n <= 0) return;
  if (k <= 0) return ScaleOnly(m * n, beta, c);
  RunGemm(GemmCall{.precision = precision,
                   .trans_a = trans_a,
                   .trans_b = trans_b,
                   .m = m,
                   .n = n,
                   .k = k,
                   .alpha = alpha,
                   .beta = beta,
                   .c = c},
          a, m * k, b, k * n);
}

void CudaBackend::LinearForward(Precision precision, int64_t batch, int64_t in, int64_t out,
                                const float* x, const float* w, const float* b, bool relu,
                                float* y) {
  if (!Begin() || batch <= 0 || out <= 0) return;
  if (in <= 0) {
    ScaleOnly(batch * out, 0.0f, y);
  } else {
    GemmCall call{.precision = precision,
                  .trans_a = false,
                  .trans_b = true,
                  .m = batch,
                  .n = out,
                  .k = in,
                  .c = y,
                  .epilogue = relu ? Epilogue::kReluBias : Epilogue::kBias,
                  .bias = b};
    if (!SetInputs(&call, x, batch * in, w, out * in, /*in_float=*/false)) return;
    if (gemm_->Run(call) != LtGemm::Result::kUnsupported) return;  // fused, or an error
    // No fused algorithm for this shape: the CPU backend's three steps.
    call.epilogue = Epilogue::kNone;
    call.bias = nullptr;
    RunGemm(call, x, batch * in, w, out * in);
  }
  AddBias(batch, out, b, y);
  if (relu) ReluForward(batch * out, y, y);
}

void CudaBackend::Scale(int64_t n, float alpha, float* x) {
  if (Begin()) (void)TANDEM_CUDA_OK(sticky_, cuda::LaunchScale(stream_, n, alpha, x));
}

bool CudaBackend::AllFinite(int64_t n, const float* x) {
  if (!Begin()) return false;  // after an error nothing is known to be finite
  if (n <= 0) return true;
  if (!TANDEM_CUDA_OK(sticky_, cuda::LaunchAllFinite(stream_, n, x, &device_scalars_->flag)) ||
      !TANDEM_CUDA_OK(sticky_, cudaMemcpyAsync(&host_scalars_->flag, &device_scalars_->flag,
                                               sizeof(int), cudaMemcpyDeviceToHost, stream_)) ||
      !TANDEM_CUDA_OK(sticky_, cudaStreamSynchronize(stream_))) {
    return false;
  }
  return host_scalars_->flag == 0;
}

void CudaBackend::AddBias(int64_t rows, int64_t cols, const float* bias, float* y) {
  if (Begin()) (void)TANDEM_CUDA_OK(sticky_, cuda::LaunchAddBias(stream_, rows, cols, bias, y));
}

void CudaBackend::BiasGrad(int64_t rows, int64_t cols, const float* dy, float* db) {
  if (!Begin() || cols <= 0) return;
  const int64_t floats = cuda::BiasGradScratchFloats(rows, cols);
  float* scratch = nullptr;
  if (floats > 0) {
    scratch = static_cast<float*>(Grow(&reduce_, static_cast<size_t>(floats) * sizeof(float)));
    if (scratch == nullptr) return;
  }
  (void)TANDEM_CUDA_OK(sticky_, cuda::LaunchBiasGrad(stream_, rows, cols, dy, scratch, db));
}

void CudaBackend::ReluForward(int64_t n, const float* x, float* y) {
  if (Begin()) (void)TANDEM_CUDA_OK(sticky_, cuda::LaunchReluForward(stream_, n, x, y));
}

void CudaBackend::ReluBackward(int64_t n, const float* y, const float* dy, float* dx) {
  if (Begin()) (void)TANDEM_CUDA_OK(sticky_, cuda::LaunchReluBackward(stream_, n, y, dy, dx));
}

void CudaBackend::Sigmoid(int64_t n, const float* x, float* y) {
  if (Begin()) (void)TANDEM_CUDA_OK(sticky_, cuda::LaunchSigmoid(stream_, n, x, y));
}

void CudaBackend::SigmoidBackward(int64_t n, const float* y, const float* dy, float* dx) {
  if (Begin()) (void)TANDEM_CUDA_OK(sticky_, cuda::LaunchSigmoidBackward(stream_, n, y, dy, dx));
}

float CudaBackend::BceWithLogits(int64_t n, const float* logits, const float* labels,
                                 const float* weights, float normaliser, float* d_logits) {
  // NaN after an error, so that a caller that skips status() cannot mistake it for a loss.
  constexpr float kNoLoss = std::numeric_limits<float>::quiet_NaN();
  if (!Begin()) return kNoLoss;
  if (n <= 0) return static_cast<float>(0.0 / normaliser);
  auto* scratch = static_cast<double*>(
      Grow(&reduce_, static_cast<size_t>(cuda::BceScratchDoubles(n)) * sizeof(double)));
  if (scratch == nullptr ||
      !TANDEM_CUDA_OK(sticky_,
                      cuda::LaunchBceWithLogits(stream_, n, logits, labels, weights, normaliser,
                                                d_logits, scratch, &device_scalars_->loss_sum)) ||
      !TANDEM_CUDA_OK(sticky_, cudaMemcpyAsync(&host_scalars_->loss_sum, &device_scalars_->loss_sum,
                                               sizeof(double), cudaMemcpyDeviceToHost, stream_)) ||
      !TANDEM_CUDA_OK(sticky_, cudaStreamSynchronize(stream_))) {
    return kNoLoss;
  }
  return static_cast<float>(host_scalars_->loss_sum / normaliser);  // as the CPU backend
}

void CudaBackend::Copy(int64_t n, const float* x, float* y) {
  if (!Begin() || n <= 0 || x == y) return;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  const auto xa = reinterpret_cast<uintptr_t>(x), ya = reinterpret_cast<uintptr_t>(y);
  if (xa + bytes <= ya || ya + bytes <= xa) {
    (void)TANDEM_CUDA_OK(sticky_, cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  // cudaMemcpy is undefined for overlapping ranges; the CPU backend's memmove is not.
  void* tmp = Grow(&overlap_, bytes);
  if (tmp == nullptr) return;
  TANDEM_CUDA_RETURN_IF_ERROR(sticky_,
                              cudaMemcpyAsync(tmp, x, bytes, cudaMemcpyDeviceToDevice, stream_));
  (void)TANDEM_CUDA_OK(sticky_, cudaMemcpyAsync(y, tmp, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::Fill(int64_t n, float value, float* y) {
  if (Begin()) (void)TANDEM_CUDA_OK(sticky_, cuda::LaunchFill(stream_, n, value, y));
}

void CudaBackend::Axpy(int64_t n, float alpha, const float* x, float* y) {
  if (Begin()) (void)TANDEM_CUDA_OK(sticky_, cuda::LaunchAxpy(stream_, n, alpha, x, y));
}

void CudaBackend::CopyStrided(int64_t rows, int64_t cols, const float* src, int64_t src_ld,
                              float* dst, int64_t dst_ld, bool accumulate) {
  if (!Begin()) return;
  (void)TANDEM_CUDA_OK(
      sticky_, cuda::LaunchCopyStrided(stream_, rows, cols, src, src_ld, dst, dst_ld, accumulate));
}

void CudaBackend::Mul(int64_t n, const float* a, const float* b, float* y, bool accumulate) {
  if (Begin()) (void)TANDEM_CUDA_OK(sticky_, cuda::LaunchMul(stream_, n, a, b, y, accumulate));
}

void CudaBackend::FmForward(int64_t batch, int64_t n, int64_t d, const float* x, float* out,
                            int64_t out_ld) {
  if (!Begin()) return;
  (void)TANDEM_CUDA_OK(sticky_, cuda::LaunchFmForward(stream_, batch, n, d, x, out, out_ld));
}

void CudaBackend::FmBackward(int64_t batch, int64_t n, int64_t d, const float* x, const float* dz,
                             int64_t dz_ld, float* dx) {
  if (!Begin()) return;
  (void)TANDEM_CUDA_OK(sticky_, cuda::LaunchFmBackward(stream_, batch, n, d, x, dz, dz_ld, dx));
}

void CudaBackend::SoftmaxForward(int64_t rows, int64_t cols, const float* x, float* y) {
  if (Begin()) (void)TANDEM_CUDA_OK(sticky_, cuda::LaunchSoftmaxForward(stream_, rows, cols, x, y));
}

void CudaBackend::SoftmaxBackward(int64_t rows, int64_t cols, const float* y, const float* dy,
                                  float* dx) {
  if (!Begin()) return;
  (void)TANDEM_CUDA_OK(sticky_, cuda::LaunchSoftmaxBackward(stream_, rows, cols, y, dy, dx));
}

void CudaBackend::MixtureForward(int64_t batch, int64_t e, int64_t h, const float* gate,
                                 const float* x, float* out) {
  if (!Begin()) return;
  (void)TANDEM_CUDA_OK(sticky_, cuda::LaunchMixtureForward(stream_, batch, e, h, gate, x, out));
}

void CudaBackend::MixtureBackward(int64_t batch, int64_t e, int64_t h, const float* gate,
                                  const float* x, const float* dy, float* d_gate, float* dx,
                                  bool accumulate) {
  if (!Begin()) return;
  (void)TANDEM_CUDA_OK(sticky_, cuda::LaunchMixtureBackward(stream_, batch, e, h, gate, x, dy,
                                                            d_gate, dx, accumulate));
}

void CudaBackend::PairwiseDotsForward(int64_t batch, int64_t n, int64_t d, const float* x,
                                      float* out, int64_t out_ld) {
  if (!Begin()) return;
  (void)TANDEM_CUDA_OK(sticky_,
                       cuda::LaunchPairwiseDotsForward(stream_, batch, n, d, x, out, out_ld));
}

void CudaBackend::PairwiseDotsBackward(int64_t batch, int64_t n, int64_t d, const float* x,
                                       const float* dz, int64_t dz_ld, float* dx) {
  if (!Begin()) return;
  (void)TANDEM_CUDA_OK(sticky_,
                       cuda::LaunchPairwiseDotsBackward(stream_, batch, n, d, x, dz, dz_ld, dx));
}

void CudaBackend::EmbeddingBagForward(int64_t batch, int64_t d, const float* rows,
                                      const int64_t* offsets, const int64_t* inverse,
                                      const float* weights, bool mean, float* pooled) {
  if (!Begin()) return;
  (void)TANDEM_CUDA_OK(sticky_, cuda::LaunchEmbeddingBagForward(stream_, batch, d, rows, offsets,
                                                                inverse, weights, mean, pooled));
}

void CudaBackend::EmbeddingBagBackward(int64_t batch, int64_t d, int64_t num_unique,
                                       const float* d_pooled, const int64_t* offsets,
                                       const int64_t* inverse, const float* weights, bool mean,
                                       float* d_rows) {
  if (!Begin() || num_unique <= 0 || d <= 0) return;
  // The sort is sized on the host, and the lookup count lives in device memory: this op waits
  // for the stream to read it (TODO(perf): take the count from the caller, who has it).
  int64_t lookups = 0;
  if (batch > 0) {
    if (!TANDEM_CUDA_OK(sticky_,
                        cudaMemcpyAsync(&host_scalars_->lookups, offsets + batch, sizeof(int64_t),
                                        cudaMemcpyDeviceToHost, stream_)) ||
        !TANDEM_CUDA_OK(sticky_, cudaStreamSynchronize(stream_))) {
      return;
    }
    lookups = host_scalars_->lookups;
  }
  if (lookups <= 0) {
    (void)TANDEM_CUDA_OK(sticky_,
                         cudaMemsetAsync(d_rows, 0, num_unique * d * sizeof(float), stream_));
    return;
  }
  if (lookups > INT_MAX || num_unique >= INT_MAX) {
    sticky_.Update(Status::InvalidArgument(
        "cuda backend: embedding bag backward supports < 2^31 lookups and unique rows, got " +
        std::to_string(lookups) + " and " + std::to_string(num_unique)));
    return;
  }
  size_t bytes = 0;
  TANDEM_CUDA_RETURN_IF_ERROR(sticky_,
                              cuda::EmbeddingBagBackwardScratchBytes(lookups, num_unique, &bytes));
  void* scratch = Grow(&sort_, bytes);
  if (scratch == nullptr) return;
  (void)TANDEM_CUDA_OK(sticky_, cuda::LaunchEmbeddingBagBackward(
                                    stream_, batch, d, num_unique, lookups, d_pooled, offsets,
                                    inverse, weights, mean, d_rows, scratch, sort_.bytes));
}

}  // namespace

StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device) {
  return CudaBackend::Create(device);
}

}  // namespace tandem::device
