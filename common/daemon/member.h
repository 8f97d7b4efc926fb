// The parts of a PS or worker daemon that deal with the chief: registration with the identity
// the chief issues, and what a refusal means for the exit status.
#pragma once

#include <memory>
#include <string>

#include "common/chief_client.h"
#include "common/daemon/daemon.h"

namespace tandem::daemon {

// Registers this member with the chief named in the config, adopts the issued identity in the
// server (replies carry it) and the log, and starts the heartbeat thread. On failure returns
// null and sets *exit_status (75 when refused, 1 when the chief cannot be reached).
// `registration` (may be null) gets what the chief issued.
std::unique_ptr<ChiefClient> JoinJob(const RoleContext& ctx, config::Role role,
                                     const std::string& determinism_class, int* exit_status,
                                     Registration* registration = nullptr);

// What a daemon returns (never an exit status: cli/tandem.cc executes the same command line
// again) when it was declared lost, e.g. cut off by the network, and no successor holds its
// rank: the new process registers as that rank's successor and recovers exactly as a
// replacement started by a supervisor would (a worker rolls forward from the survivors, a PS
// replays its log). Whether it may is decided by the chief at that registration: a successor
// that registered meanwhile makes it a refusal, and the process exits 75.
inline constexpr int kRoleRejoin = -75;

// The status of a member the chief fenced: kExitFenced when a newer incarnation of its rank is
// registered and not lost (it was replaced), kRoleRejoin otherwise.
int ExitWhenFenced(ChiefClient* chief, config::Role role, uint32_t index);

// Executes this process's own command line again after kRoleRejoin (counted in TANDEM_REJOINS).
// Returns only when that fails, with the exit status to use.
int ExecAgainToRejoin(char** argv);

}  // namespace tandem::daemon
