// What accelerators this process can use, and a self-test that runs a kernel and a cuBLAS GEMM
// on device 0. Compiled without CUDA, the probe says so and the self-test is unavailable.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::device {

struct DeviceReport {
  bool cuda_compiled = false;
  int device_count = 0;
  std::string error;                 // why no device is usable, when none is
  std::vector<std::string> devices;  // "NVIDIA H200 (sm_90, 132 SMs, 141 GiB)"
  std::string library_versions;      // "cudart 13000 driver 0 cublas 130100 cudnn 91900 nccl 22809"
  std::string ToString() const;
};

DeviceReport ProbeDevices();

// Runs y = a*x + y (a kernel) and a small cublasSgemm on device 0 and checks them against the
// CPU. kUnavailable when built without CUDA or no device is present; kInternal on a mismatch.
Status RunDeviceSelfTest();

}  // namespace tandem::device
