// The CUDA backend (train.device: cuda, DESIGN §8): every Backend op on one stream of one GPU,
// GEMMs through cuBLASLt, the rest in hand-written kernels without floating-point atomics
// (PROTOCOLS §5). Plain C++: no CUDA headers, so host code compiles without nvcc.
#pragma once

#include <memory>

#include "common/status.h"
#include "worker/device/backend.h"

namespace tandem::device {

// A backend on CUDA device `device` (0-based), with its own non-blocking stream, cuBLASLt handle
// and 32 MiB GEMM workspace. kUnavailable when there is no usable CUDA device (no driver, no
// device, or `device` beyond the device count; the message says which); kInvalidArgument for a
// negative `device`; kInternal (or kResourceExhausted) when the device is there but setting it up
// failed. Results are bit-identical from run to run on the same GPU model and software versions.
// Thread-safety: the instance requires external synchronization; it may be used from any thread
// (each call makes `device` current on the calling thread).
StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device);

}  // namespace tandem::device
