// Plain-C++ face of the CUDA probe (no CUDA headers), so host code compiles without nvcc.
#pragma once

#include <string>
#include <vector>

namespace tandem::device::cuda {

struct ProbeResult {
  int device_count = 0;
  std::string error;
  std::vector<std::string> devices;
  std::string versions;
};

enum class SelfTestResult { kOk, kNoDevice, kFailed };

ProbeResult Probe();
SelfTestResult SelfTest(std::string* error);

}  // namespace tandem::device::cuda
