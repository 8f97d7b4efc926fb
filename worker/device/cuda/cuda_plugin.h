// The CUDA part as a plugin: the kernels, cuBLAS(Lt) and cuDNN live in `tandem-cuda.so`, which a
// process opens only when it uses a GPU (train.device: cuda, or the device probe). cuBLASLt
// alone commits about 90 MiB of static data in every process that loads it, so a binary linked
// to it directly paid that in every parameter server, chief and CPU worker (issue 21: PS memory
// bounded by ps.cache_bytes plus a documented overhead).
//
// The binary and the plugin come from the same build and pass C++ types to each other (same
// compiler, same libstdc++); `abi` and `build` guard against a stale plugin beside a newer binary.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "worker/device/backend.h"
#include "worker/device/cuda/cuda_probe.h"

namespace tandem::device::cuda {

inline constexpr uint32_t kPluginAbi = 1;

struct PluginApi {
  uint32_t abi = kPluginAbi;
  const char* build = "";  // TANDEM_VERSION and TANDEM_GIT_COMMIT it was built at
  ProbeResult (*probe)() = nullptr;
  SelfTestResult (*self_test)(std::string* error) = nullptr;
  StatusOr<std::unique_ptr<Backend>> (*create_backend)(int device) = nullptr;
};

}  // namespace tandem::device::cuda

// The plugin's one exported symbol.
extern "C" const tandem::device::cuda::PluginApi* tandem_cuda_plugin_api();
