#include "worker/device/backend_factory.h"

#include "worker/device/cpu/cpu_backend.h"

namespace tandem::device {

StatusOr<std::unique_ptr<Backend>> CreateBackend(const config::TrainConfig& train) {
  if (train.device == "cpu") {
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<CpuBackend> cpu, CpuBackend::Create(train.threads));
    return std::unique_ptr<Backend>(std::move(cpu));
  }
  return Status::Unimplemented("train.device: " + train.device +
                               " is not available yet (the CUDA backend is its own issue)");
}

}  // namespace tandem::device
