// `security.keys` for one process: every RpcServer and RpcClient it makes from now on uses the
// cluster's CURVE keys (wire::SetDefaultCurveKeys), daemons and tools alike, so a tool like
// `tandem status` can still talk to a protected chief.
#pragma once

#include "common/config/job_config.h"
#include "common/status.h"

namespace tandem::daemon {

// kInvalidArgument naming the file when the keys cannot be used. Without `security.keys`,
// clears them (no authentication).
Status ApplySecurity(const config::JobConfig& job);

}  // namespace tandem::daemon
