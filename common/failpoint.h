// Fault points for the races a drill cannot hit by timing: a kill at "step 150" lands wherever
// the process happens to be, and some recovery paths need one exact window (a worker dead after
// its all-reduce of a step but before its push of that step landed). A fault point is named in
// the code; the environment arms it for one daemon:
//
//   TANDEM_FAILPOINT="worker:1 die-after-allreduce @step 153"
//   TANDEM_FAILPOINT_ONCE=/path/marker   (optional: it fires only if it creates this file, so a
//                                         restarted process does not die at the same spot again)
//
// Unset (every production run), Fires() is one load of a flag that is false.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tandem::failpoint {

// The points the code has. worker/trainer.cc: a worker dies once its all-reduce of the step
// returned, before its push of that step went out (fires at its step exactly).
inline constexpr std::string_view kDieAfterAllReduce = "die-after-allreduce";
// server/ps/shard.cc: a PS dies in its first restore point of a step at or after the armed one,
// once the dirty rows are in RocksDB and its checkpoint is made but before the marker that
// completes it (FiresAtOrAfter): the restore point is left half made, the live DB ahead of it.
inline constexpr std::string_view kDieInRestorePoint = "die-in-restore-point";

// The TANDEM_FAILPOINT value that arms `point` for `task` at `step`, as Arm reads it.
std::string Spec(const std::string& task, std::string_view point, int64_t step);

// Reads the environment for this daemon (`task`, e.g. "worker:1"). A malformed
// TANDEM_FAILPOINT is an error: a drill that meant to inject a fault must not run without it.
Status Arm(const std::string& task);

// Whether the point `name` is armed for `step` (and, with a marker, not fired before). The
// caller then does what the point is named for (usually Die()).
bool Fires(std::string_view name, int64_t step);
// The same for a point reached at some steps only (restore points): armed for S, it fires at
// the first `step` >= S.
bool FiresAtOrAfter(std::string_view name, int64_t step);

// Ends the process the way SIGKILL does: no destructor, no flush, no goodbye to peers.
[[noreturn]] void Die();

}  // namespace tandem::failpoint
