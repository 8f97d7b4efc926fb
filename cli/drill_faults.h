// The fault schedule of `tandem drill --faults SPEC` (issue 7, DESIGN §6): `;`-separated faults,
// each fired when the job's step reaches its `@step`:
//   kill ROLE:I @step S          SIGKILL the process (ROLE: ps | worker; `kill chief` for the
//                                chief)
//   stop ROLE:I @step S for Ds   SIGSTOP, then SIGCONT after D (`2s`, `1.5s`, `500ms`)
//   lose ps:I @step S            SIGKILL and delete its `ps.data_dir/shard-I` (a lost machine)
//   corrupt-latest @step S       flip a byte of `checkpoint.dir/LATEST`
//   partition ROLE:I @step S for Ds          cut the member off the network for D
//   partition ROLE:I,ROLE:J @step S for Ds   cut the two members off from each other only
//   flap ROLE:I @step S Nx       take its link down and up N times (2 s down, 2 s up)
//   die-after-allreduce worker:I @step S   the worker dies (as SIGKILL) once its all-reduce of
//                                step S returned, before its push of S leaves: a window a timed
//                                kill rarely hits. A fault point (common/failpoint.h), armed in
//                                the faulty run's environment when it starts and fired once; at
//                                most one a drill, and only `@step`.
//   die-in-restore-point ps:I @step S   the PS dies (as SIGKILL) in its first restore point of
//                                a step >= S (a checkpoint's cut, or one after
//                                ps.restore_point_every_bytes), once the rows are written and
//                                RocksDB's checkpoint made, before the marker that completes it:
//                                a restore point left half made. A fault point as above.
// Network faults run the job with every member in a network namespace of its own (cli/netns.h).
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

enum class FaultKind {
  kKill,
  kStop,
  kLose,
  kCorruptLatest,
  kPartition,
  kFlap,
  kDieAfterAllReduce,
  kDieInRestorePoint
};

// A flap's rhythm: each of its N cycles keeps the link down, then up, this long.
inline constexpr std::chrono::milliseconds kFlapHalfCycle{2000};

// One parsed fault. A value type.
struct Fault {
  FaultKind kind = FaultKind::kKill;
  std::string role;  // "chief" | "ps" | "worker"; empty for corrupt-latest
  int index = 0;
  int64_t step = 0;                       // fired once the job's step reaches it
  int64_t after_rollbacks = 0;            // > 0: `@rollback N` instead (step is then 0)
  std::chrono::milliseconds duration{0};  // stop, partition: how long the fault lasts
  std::string peer_role;                  // partition between two members: the other one
  int peer_index = -1;
  int flaps = 0;        // flap: how many down/up cycles
  size_t position = 0;  // offset of the fault's first character in the spec

  // "ps:0", "chief:0"; empty for corrupt-latest.
  std::string task() const;
  // The other member of a partition between two members; empty otherwise.
  std::string peer_task() const;
  bool network() const { return kind == FaultKind::kPartition || kind == FaultKind::kFlap; }
  // Fired by the target itself at a fault point the run's environment arms, not by the drill.
  bool fault_point() const {
    return kind == FaultKind::kDieAfterAllReduce || kind == FaultKind::kDieInRestorePoint;
  }
  // The fault point's name (common/failpoint.h), e.g. "die-after-allreduce"; empty for others.
  std::string_view point_name() const;
  // The fault point's TANDEM_FAILPOINT value, e.g. "worker:1 die-after-allreduce @step 120".
  std::string FailpointSpec() const;
  // Canonical text, e.g. "stop ps:1 @step 200 for 2000ms".
  std::string ToString() const;
};

// Parses SPEC. The faults come back ordered by step, then the `@rollback` ones by N (equal ones
// keep their order).
// kInvalidArgument naming the fault (its number and character position) and the problem for a
// malformed spec, an empty one included.
StatusOr<std::vector<Fault>> ParseFaults(std::string_view spec);

}  // namespace tandem::cli
