// Internal to the CUDA backend: CUDA and cuBLAS return codes turned into the backend's sticky
// Status (backend.h: the first error is kept and later ops do nothing). Host C++ only (g++):
// common/status.h does not compile warning-free under nvcc.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string>

#include "common/status.h"

namespace tandem::device::cuda {

// The first error met, kept for good. Requires external synchronization.
class StickyStatus {
 public:
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // Keeps `s` if no error is kept yet. Returns s.ok().
  bool Update(const Status& s) {
    if (!s.ok() && status_.ok()) status_ = s;
    return s.ok();
  }
  // Return-code checks for TANDEM_CUDA_OK: true on success; otherwise records the error (with
  // the failed expression and where) and returns false.
  bool Check(cudaError_t e, const char* expr, const char* file, int line) {
    if (e == cudaSuccess) return true;
    // Clears the thread's last-error slot, so that the next launch check of any CUDA user on this
    // thread does not report this error a second time (device faults stay sticky in CUDA anyway).
    (void)cudaGetLastError();
    const std::string what = std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
    return Update(Make(e == cudaErrorMemoryAllocation, expr, what, file, line));
  }
  bool Check(cublasStatus_t e, const char* expr, const char* file, int line) {
    if (e == CUBLAS_STATUS_SUCCESS) return true;
    const std::string what =
        std::string(cublasLtGetStatusName(e)) + " (" + cublasLtGetStatusString(e) + ")";
    return Update(Make(e == CUBLAS_STATUS_ALLOC_FAILED, expr, what, file, line));
  }

 private:
  static Status Make(bool out_of_memory, const char* expr, const std::string& what,
                     const char* file, int line) {
    std::string where = file;
    where = where.substr(where.find_last_of('/') + 1) + ":" + std::to_string(line);
    const std::string message = "cuda backend: " + std::string(expr) + ": " + what + " at " + where;
    // Out of memory is the one failure a caller can act on (a smaller batch); anything else is a
    // device fault or a bug and leaves the CUDA context unusable for this process.
    return out_of_memory ? Status::ResourceExhausted(message) : Status::Internal(message);
  }

  Status status_;
};

}  // namespace tandem::device::cuda

// True when `expr` (a cudaError_t or cublasStatus_t) succeeded; otherwise records it in `sticky`.
#define TANDEM_CUDA_OK(sticky, expr) ((sticky).Check((expr), #expr, __FILE__, __LINE__))

// Returns from a void function when `expr` failed (the error is recorded in `sticky`).
#define TANDEM_CUDA_RETURN_IF_ERROR(sticky, expr) \
  do {                                            \
    if (!TANDEM_CUDA_OK(sticky, expr)) return;    \
  } while (0)
