// The dense all-reduce group a worker joins (PROTOCOLS §11): NCCL between GPUs when
// train.device is cuda (and the build has CUDA), Gloo over TCP otherwise, meeting through the
// chief's rendezvous store under the worker's generation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/config/job_config.h"
#include "common/status.h"
#include "worker/collective/collective.h"

namespace tandem::worker {

// Null for a single worker (nothing to reduce). `host` is the worker's own address (Gloo binds
// it; on loopback collective.iface is ignored).
StatusOr<std::unique_ptr<collective::Collective>> JoinAllReduceGroup(
    const config::JobConfig& job, int rank, int world, const std::string& host, int64_t generation,
    collective::RendezvousStore* store);

// The GPU part of the determinism class (PROTOCOLS §5): device model, SM count, memory and the
// driver/CUDA/cuBLAS/cuDNN/NCCL versions for train.device cuda; "none" otherwise.
std::string GpuDeterminismClass(const config::JobConfig& job);

}  // namespace tandem::worker
