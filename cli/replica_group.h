// The worker's all-reduce group across losses (PROTOCOLS §8, §11, §12): built under the
// generation of a complete cluster; a newer generation from the chief (a worker was lost)
// aborts the op in flight and marks pulls and pushes waiting on the shards as interrupted, so
// that the step gives way to recovery; Recover() waits for the cluster to be complete again and
// rebuilds the group under the new generation. An op that ignores its abort makes the process
// exit 76.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/chief_client.h"
#include "common/config/job_config.h"
#include "common/status.h"
#include "common/sync.h"
#include "worker/collective/collective.h"

namespace tandem::cli {

class ReplicaGroup {
 public:
  // `chief` is not owned and must outlive this object.
  ReplicaGroup(const config::JobConfig* job, ChiefClient* chief) : job_(job), chief_(chief) {}

  // Takes the group built under `generation`.
  void Adopt(std::unique_ptr<collective::Collective> group, uint64_t generation);
  collective::Collective* get() const { return group_.get(); }

  // From a watcher thread, every ~100 ms: aborts the op in flight on a new generation; exits 76
  // when an abandoned op is wedged.
  void Watch();
  // Whether the chief announced a generation newer than the group's (PsClient::interrupted).
  // Fenced too: a zombie's pulls and pushes give way at once.
  bool Interrupted() const { return chief_->fenced() || chief_->generation() > generation_.load(); }

  // Waits until the chief has declared the loss (within twice the heartbeat timeout plus a
  // probe), then until the cluster is complete under a newer generation (within
  // recovery.max_wait_s, or kDeadlineExceeded naming the ranks still missing), and rebuilds
  // the group under it. kAborted when this incarnation was replaced (a zombie: it must exit
  // 75). `on_state` gets "recovering" and, once rebuilt, "training".
  Status Recover(const std::function<void(const std::string&)>& on_state);

 private:
  const config::JobConfig* job_;
  ChiefClient* chief_;
  std::unique_ptr<collective::Collective> group_;
  std::atomic<uint64_t> generation_{0};
  Mutex mu_;  // orders Watch()'s abort against Recover()'s new generation
  uint64_t aborted_for_ GUARDED_BY(mu_) = 0;
  bool aborted_for_fence_ GUARDED_BY(mu_) = false;
};

}  // namespace tandem::cli
