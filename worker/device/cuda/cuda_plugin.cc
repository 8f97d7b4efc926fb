// Entry point of tandem-cuda.so (see cuda_plugin.h); everything else in it is hidden.
#include "worker/device/cuda/cuda_plugin.h"

#include "tandem_build_id.h"
#include "worker/device/cuda/cuda_backend.h"

namespace {
constexpr const char* kBuild = TANDEM_VERSION " " TANDEM_GIT_COMMIT;
}  // namespace

extern "C" __attribute__((visibility("default"))) const tandem::device::cuda::PluginApi*
tandem_cuda_plugin_api() {
  static const tandem::device::cuda::PluginApi api{
      tandem::device::cuda::kPluginAbi, kBuild, &tandem::device::cuda::Probe,
      &tandem::device::cuda::SelfTest, &tandem::device::CreateCudaBackend};
  return &api;
}
