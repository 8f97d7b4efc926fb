// The backend a worker trains on, chosen by train.device (DESIGN §8).
#pragma once

#include <memory>

#include "common/config/job_config.h"
#include "common/status.h"
#include "worker/device/backend.h"

namespace tandem::device {

// cpu: OpenBLAS with train.threads threads. cuda: device 0 of the process (a supervisor gives
// each worker its GPU through CUDA_VISIBLE_DEVICES); kUnavailable without a CUDA build or device.
StatusOr<std::unique_ptr<Backend>> CreateBackend(const config::TrainConfig& train);

}  // namespace tandem::device
