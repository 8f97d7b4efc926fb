#include "common/daemon/security_setup.h"

#include "common/log.h"
#include "common/wire/curve_keys.h"

namespace tandem::daemon {

Status ApplySecurity(const config::JobConfig& job) {
  if (job.security.keys.empty()) {
    wire::SetDefaultCurveKeys(std::nullopt);
    return Status::Ok();
  }
  auto keys = wire::LoadCurveKeys(job.security.keys);
  if (!keys.ok()) return keys.status();
  wire::SetDefaultCurveKeys(*keys);
  return Status::Ok();
}

}  // namespace tandem::daemon
