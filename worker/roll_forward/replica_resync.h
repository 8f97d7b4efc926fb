// Roll-forward recovery of a lost worker (PROTOCOLS §8, §11): once the all-reduce group is
// rebuilt under the new generation, the replicas agree on the step they all train next and
// every one of them — the replacement included — takes the dense state of the step before it
// from the lowest surviving rank (broadcast; the survivors first compare their states).
//
// Why one step back at most: a survivor applies step s only after the all-reduce of s, in
// which the lost rank took part after all of its pushes of s-1 were acknowledged. So the lost
// rank's pushes may be missing for the newest step a survivor completed, never for an older
// one, and a survivor stuck before its own pushes of s+1 were acknowledged undoes step s (the
// replacement then recomputes s: its pushes are answered "duplicate" where they were logged,
// and a shard that applied s answers its pulls from the pre-images of that apply).
#pragma once

#include <cstdint>

#include "common/status.h"
#include "worker/collective/collective.h"
#include "worker/trainer.h"

namespace tandem::worker {

struct ResyncInput {
  bool replacement = false;  // a new process: it holds no state of this run
  // A survivor: the last step whose dense update it applied (-1: none yet).
  int64_t completed = -1;
  // A survivor: whether every shard is known to hold the pushes of `completed` from every rank:
  // it failed in the all-reduce of completed + 1 (its pull of that step was answered), or
  // `completed` was restored from a checkpoint. False when it failed in the pull or push of
  // completed + 1: the lost rank's pushes of `completed` may be missing.
  bool pushes_acknowledged = false;
};

struct ResyncResult {
  int64_t next_step = 0;     // the step every replica trains next
  bool rolled_back = false;  // this replica undid step next_step: RedoLastStep comes first
  int root = 0;              // the survivor whose dense state every replica now holds
  int survivors = 0;
};

// Collective over every rank of `group`; the trainer must be the one of this replica.
// kFailedPrecondition when no replica survived (nothing to roll forward from: the job must roll
// back to a checkpoint) or a survivor cannot undo the step the group needs: every rank returns
// that verdict. kUnavailable when the group failed meanwhile (another loss: rebuild and try
// again).
StatusOr<ResyncResult> ResyncReplicas(collective::Collective* group, Trainer* trainer,
                                      const ResyncInput& input);

}  // namespace tandem::worker
