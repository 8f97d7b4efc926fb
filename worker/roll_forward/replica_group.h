// The worker's all-reduce group across losses and partitions (PROTOCOLS §8, §11, §12): built
// under the generation of a complete cluster; a newer generation from the chief (a worker was
// lost, or the workers regroup) aborts the op in flight and marks pulls and pushes waiting on
// the shards as interrupted, so that the step gives way to recovery; Recover() waits for the
// cluster to be complete again and rebuilds the group under the new generation. A group that
// broke while nobody was lost (workers cut off from each other but not from the chief) asks the
// chief for a new generation itself, and again while the group cannot form. An op that ignores
// its abort makes the process exit 76.
//
// A stop (SIGTERM, or the chief's stop) is honoured by the step it rides in; an op or a shard
// wait that has not returned kStopGrace after the stop (at once after a second SIGTERM, or when
// the stop is the job's failure) is abandoned, and the job stops at its last committed
// checkpoint instead of at a final one.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/chief_client.h"
#include "common/config/job_config.h"
#include "common/status.h"
#include "common/sync.h"
#include "worker/collective/collective.h"
#include "worker/collective/timed_collective.h"

namespace tandem::worker {

// How long a stop waits for the op in flight (or a shard) before abandoning it: far above a
// healthy op or pull, far below collective.timeout_ms.
inline constexpr std::chrono::milliseconds kStopGrace{3000};

class ReplicaGroup {
 public:
  using Clock = std::chrono::steady_clock;

  // `chief` is not owned and must outlive this object.
  ReplicaGroup(const config::JobConfig* job, ChiefClient* chief) : job_(job), chief_(chief) {}
  // Joins the group's threads, except after an op abandoned for a stop: that op may run on into
  // Gloo's own timeout (collective.timeout_ms), and the process is about to exit, so its context
  // is left to the exit instead of holding the stop up.
  ~ReplicaGroup();
  ReplicaGroup(const ReplicaGroup&) = delete;
  ReplicaGroup& operator=(const ReplicaGroup&) = delete;

  // Takes the group built under `generation`.
  void Adopt(std::unique_ptr<collective::Collective> group, uint64_t generation);
  // The group for the training loop: it forwards to the adopted one and times its ops.
  collective::Collective* get() { return group_ ? &timed_ : nullptr; }

  // From a watcher thread, every ~100 ms: aborts the op in flight on a new generation, or when
  // a stop is overdue; exits 76 when an abandoned op is wedged.
  void Watch();
  // A stop signal arrived (`at_once`: a second one). The chief's stop is noted by Watch().
  void NoteStop(bool at_once);
  // A stop has waited kStopGrace (or came twice): waits on shards give way (PsClient::interrupted
  // of a single worker).
  bool StopOverdue() const { return stop_overdue_.load(); }
  // Whether the chief announced a generation newer than the group's, or a stop is overdue
  // (PsClient::interrupted). Fenced too: a zombie's pulls and pushes give way at once.
  bool Interrupted() const {
    return StopOverdue() || chief_->fenced() || chief_->generation() > generation_.load();
  }

  // Waits until the chief has declared the loss (within twice the heartbeat timeout plus a
  // probe), or, when every worker has heartbeated since the group broke (nobody is lost), asks
  // the chief for a new generation; then waits until the cluster is complete under a newer
  // generation (within recovery.max_wait_s, or kDeadlineExceeded naming the ranks still
  // missing) and rebuilds the group under it, asking again while it cannot form. kAborted when
  // this incarnation was replaced (a zombie: it must exit 75); kCancelled on a stop. `on_state`
  // gets kRecovering and, once rebuilt, kTraining.
  Status Recover(const std::function<void(MemberState)>& on_state);

 private:
  // Whether every worker in `v` is up and heartbeated after `since` (the view was asked for at
  // `asked`): none of them is dead, so none will be declared lost.
  static bool EveryWorkerHeardSince(const ClusterView& v, Clock::time_point since,
                                    Clock::time_point asked);

  const config::JobConfig* job_;
  ChiefClient* chief_;
  std::unique_ptr<collective::Collective> group_;
  collective::TimedCollective timed_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_overdue_{false};
  Mutex mu_;  // orders Watch()'s abort against Recover()'s new generation
  uint64_t aborted_for_ GUARDED_BY(mu_) = 0;
  bool aborted_for_fence_ GUARDED_BY(mu_) = false;
  Clock::time_point stop_since_ GUARDED_BY(mu_){};  // the first stop seen; epoch: none
  bool stop_at_once_ GUARDED_BY(mu_) = false;
  bool aborted_for_stop_ GUARDED_BY(mu_) = false;
};

}  // namespace tandem::worker
