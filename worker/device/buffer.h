// A typed array in a backend's memory that frees itself: the model's parameters, gradients and
// workspaces live in these, so the same model code runs on host memory (CPU) and on a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "worker/device/backend.h"

namespace tandem::device {

// Move-only. size() is in elements. An allocation failure leaves the buffer empty and the
// backend's status() non-OK (callers check status() once per step).
template <typename T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend* backend, int64_t n) { Reset(backend, n); }
  ~Buffer() { Release(); }
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      Release();
      backend_ = std::exchange(other.backend_, nullptr);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Replaces the contents with n zero elements (old contents are not kept).
  void Reset(Backend* backend, int64_t n) {
    Release();
    backend_ = backend;
    if (n > 0) {
      data_ = static_cast<T*>(backend->Allocate(static_cast<size_t>(n) * sizeof(T)));
      size_ = data_ == nullptr ? 0 : n;
    }
  }
  // Grows to at least n elements (contents not kept when it grows).
  void Reserve(Backend* backend, int64_t n) {
    if (n > size_ || backend != backend_) Reset(backend, n);
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  void Release() {
    if (data_ != nullptr) backend_->Deallocate(data_);
    data_ = nullptr;
    size_ = 0;
  }

  Backend* backend_ = nullptr;
  T* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace tandem::device
