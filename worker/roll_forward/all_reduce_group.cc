#include "worker/roll_forward/all_reduce_group.h"

#include "common/log.h"
#include "worker/collective/gloo_collective.h"
#include "worker/device/device_info.h"
#ifdef TANDEM_HAVE_CUDA
#include "worker/collective/nccl_collective.h"
#endif

namespace tandem::worker {

StatusOr<std::unique_ptr<collective::Collective>> JoinAllReduceGroup(
    const config::JobConfig& job, int rank, int world, const std::string& host, int64_t generation,
    collective::RendezvousStore* store) {
  if (world <= 1) return std::unique_ptr<collective::Collective>();
  const std::string prefix = "gen-" + std::to_string(generation);
  if (job.train.device == "cuda") {
#ifdef TANDEM_HAVE_CUDA
    collective::NcclOptions no;
    no.rank = rank;
    no.size = world;
    no.store = store;
    no.prefix = prefix;
    no.device = 0;  // each worker sees its own GPU as device 0 (CUDA_VISIBLE_DEVICES)
    no.timeout_ms = job.collective.timeout_ms;
    no.abort_grace_ms = job.collective.abort_grace_ms;
    TANDEM_ASSIGN_OR_RETURN(auto nccl, collective::NcclCollective::Create(no));
    TLOG_INFO("NCCL all-reduce group of {} workers joined ({})", world, prefix);
    return std::unique_ptr<collective::Collective>(std::move(nccl));
#else
    return Status::Unavailable("train.device: cuda, but this build has no CUDA part");
#endif
  }
  collective::GlooOptions go;
  go.rank = rank;
  go.size = world;
  go.store = store;
  go.prefix = prefix;
  go.iface = host.rfind("127.", 0) == 0 || host == "localhost" ? "" : job.collective.iface;
  go.hostname = host;
  go.timeout_ms = job.collective.timeout_ms;
  go.abort_grace_ms = job.collective.abort_grace_ms;
  TANDEM_ASSIGN_OR_RETURN(auto gloo, collective::GlooCollective::Create(go));
  TLOG_INFO("all-reduce group of {} workers joined ({})", world, prefix);
  return std::unique_ptr<collective::Collective>(std::move(gloo));
}

std::string GpuDeterminismClass(const config::JobConfig& job) {
  if (job.train.device != "cuda") return "none";
  const device::DeviceReport report = device::ProbeDevices();
  if (report.devices.empty()) return "unavailable";
  return report.devices.front() + " " + report.library_versions;
}

}  // namespace tandem::worker
