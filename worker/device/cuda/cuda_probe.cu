#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <cmath>
#include <string>
#include <vector>

#include "worker/device/cuda/cuda_probe.h"

namespace tandem::device::cuda {
namespace {

__global__ void Saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

std::string Versions() {
  int rt = 0, drv = 0, nccl = 0, cublas_major = 0, cublas_minor = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  ncclGetVersion(&nccl);
  cublasGetProperty(MAJOR_VERSION, &cublas_major);
  cublasGetProperty(MINOR_VERSION, &cublas_minor);
  return "cudart " + std::to_string(rt) + " driver " + std::to_string(drv) + " cublas " +
         std::to_string(cublas_major) + "." + std::to_string(cublas_minor) + " cudnn " +
         std::to_string(cudnnGetVersion()) + " nccl " + std::to_string(nccl);
}

// Frees device buffers on every path.
struct DeviceBuffers {
  float* p[3] = {nullptr, nullptr, nullptr};
  ~DeviceBuffers() {
    for (float* q : p)
      if (q) cudaFree(q);
  }
};

}  // namespace

ProbeResult Probe() {
  ProbeResult r;
  r.versions = Versions();
  cudaError_t e = cudaGetDeviceCount(&r.device_count);
  if (e != cudaSuccess) {
    r.device_count = 0;
    r.error = cudaGetErrorString(e);
    return r;
  }
  for (int d = 0; d < r.device_count; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    r.devices.push_back(std::string(prop.name) + " (sm_" + std::to_string(prop.major) +
                        std::to_string(prop.minor) + ", " +
                        std::to_string(prop.multiProcessorCount) + " SMs, " +
                        std::to_string(prop.totalGlobalMem >> 30) + " GiB)");
  }
  return r;
}

SelfTestResult SelfTest(std::string* error) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    *error =
        std::string("no CUDA device: ") + (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return SelfTestResult::kNoDevice;
  }
  const int n = 1 << 16, m = 64;
  std::vector<float> x(n), y(n), a(m * m), b(m * m), c(m * m, 0.f);
  for (int i = 0; i < n; ++i) {
    x[i] = float(i % 97) * 0.5f;
    y[i] = float(i % 13);
  }
  for (int i = 0; i < m * m; ++i) {
    a[i] = float(i % 7) - 3.f;
    b[i] = float(i % 5) * 0.25f;
  }
  DeviceBuffers buf;
  if (cudaMalloc(&buf.p[0], n * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&buf.p[1], n * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&buf.p[2], 3 * m * m * sizeof(float)) != cudaSuccess) {
    *error = "cudaMalloc failed";
    return SelfTestResult::kFailed;
  }
  cudaMemcpy(buf.p[0], x.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(buf.p[1], y.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  Saxpy<<<(n + 255) / 256, 256>>>(n, 2.0f, buf.p[0], buf.p[1]);
  std::vector<float> got(n);
  cudaMemcpy(got.data(), buf.p[1], n * sizeof(float), cudaMemcpyDeviceToHost);
  if ((e = cudaGetLastError()) != cudaSuccess) {
    *error = std::string("saxpy: ") + cudaGetErrorString(e);
    return SelfTestResult::kFailed;
  }
  for (int i = 0; i < n; ++i) {
    if (got[i] != 2.0f * x[i] + y[i]) {
      *error = "saxpy mismatch at " + std::to_string(i);
      return SelfTestResult::kFailed;
    }
  }
  float* da = buf.p[2];
  float* db = da + m * m;
  float* dc = db + m * m;
  cudaMemcpy(da, a.data(), m * m * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), m * m * sizeof(float), cudaMemcpyHostToDevice);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    *error = "cublasCreate failed";
    return SelfTestResult::kFailed;
  }
  const float one = 1.f, zero = 0.f;
  cublasStatus_t s =
      cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, &one, da, m, db, m, &zero, dc, m);
  cudaMemcpy(c.data(), dc, m * m * sizeof(float), cudaMemcpyDeviceToHost);
  cublasDestroy(h);
  if (s != CUBLAS_STATUS_SUCCESS) {
    *error = "cublasSgemm failed";
    return SelfTestResult::kFailed;
  }
  for (int col = 0; col < m; ++col) {
    for (int row = 0; row < m; ++row) {
      double ref = 0;
      for (int k = 0; k < m; ++k) ref += double(a[k * m + row]) * double(b[col * m + k]);
      if (std::fabs(ref - c[col * m + row]) > 1e-3 * (1 + std::fabs(ref))) {
        *error = "sgemm mismatch at (" + std::to_string(row) + "," + std::to_string(col) + ")";
        return SelfTestResult::kFailed;
      }
    }
  }
  return SelfTestResult::kOk;
}

}  // namespace tandem::device::cuda
