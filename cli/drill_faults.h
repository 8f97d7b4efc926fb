// The fault schedule of `tandem drill --faults SPEC` (issue 7, DESIGN §6): `;`-separated faults,
// each fired when the job's step reaches its `@step`:
//   kill ROLE:I @step S          SIGKILL the process (ROLE: ps | worker; `kill chief` for the
//   chief) stop ROLE:I @step S for Ds   SIGSTOP, then SIGCONT after D (`2s`, `1.5s`, `500ms`) lose
//   ps:I @step S            SIGKILL and delete its `ps.data_dir/shard-I` (a lost machine)
//   corrupt-latest @step S       flip a byte of `checkpoint.dir/LATEST`
// Instead of `@step S`, `@rollback N` fires the fault once the job has been rolled back N times
// and trains again (a loss during a recovery, scenario 20); such faults come after every
// `@step` fault.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tandem::cli {

enum class FaultKind { kKill, kStop, kLose, kCorruptLatest };

// One parsed fault. A value type.
struct Fault {
  FaultKind kind = FaultKind::kKill;
  std::string role;  // "chief" | "ps" | "worker"; empty for corrupt-latest
  int index = 0;
  int64_t step = 0;                       // fired once the job's step reaches it
  int64_t after_rollbacks = 0;            // > 0: `@rollback N` instead (step is then 0)
  std::chrono::milliseconds duration{0};  // stop only: how long the process stays stopped
  size_t position = 0;                    // offset of the fault's first character in the spec

  // "ps:0", "chief:0"; empty for corrupt-latest.
  std::string task() const;
  // Canonical text, e.g. "stop ps:1 @step 200 for 2000ms".
  std::string ToString() const;
};

// Parses SPEC. The faults come back ordered by step, then the `@rollback` ones by N (equal ones
// keep their order).
// kInvalidArgument naming the fault (its number and character position) and the problem for a
// malformed spec, an empty one included.
StatusOr<std::vector<Fault>> ParseFaults(std::string_view spec);

}  // namespace tandem::cli
