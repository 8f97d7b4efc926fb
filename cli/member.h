// The parts of a PS or worker daemon that deal with the chief: registration with the identity
// the chief issues, and what a refusal means for the exit status.
#pragma once

#include <memory>
#include <string>

#include "cli/roles.h"
#include "common/chief_client.h"

namespace tandem::cli {

// Registers this member with the chief named in the config, adopts the issued identity in the
// server (replies carry it) and the log, and starts the heartbeat thread. On failure returns
// null and sets *exit_status (75 when refused, 1 when the chief cannot be reached).
// `registration` (may be null) gets what the chief issued.
std::unique_ptr<ChiefClient> JoinJob(const RoleContext& ctx, wire::Role role,
                                     const std::string& determinism_class, int* exit_status,
                                     Registration* registration = nullptr);

}  // namespace tandem::cli
