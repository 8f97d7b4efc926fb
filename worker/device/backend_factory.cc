#include "worker/device/backend_factory.h"

#include "worker/device/cpu/cpu_backend.h"
#ifdef TANDEM_HAVE_CUDA
#include "worker/device/cuda_plugin_loader.h"
#endif

namespace tandem::device {

StatusOr<std::unique_ptr<Backend>> CreateBackend(const config::TrainConfig& train) {
  if (train.device == "cpu") {
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<CpuBackend> cpu, CpuBackend::Create(train.threads));
    return std::unique_ptr<Backend>(std::move(cpu));
  }
  if (train.device == "cuda") {
#ifdef TANDEM_HAVE_CUDA
    TANDEM_ASSIGN_OR_RETURN(const cuda::PluginApi* plugin, CudaPlugin());
    return plugin->create_backend(/*device=*/0);
#else
    return Status::Unavailable(
        "train.device: cuda, but this build has no CUDA part (nvcc was not found when it was "
        "configured)");
#endif
  }
  return Status::InvalidArgument("train.device: unknown device " + train.device);
}

}  // namespace tandem::device
