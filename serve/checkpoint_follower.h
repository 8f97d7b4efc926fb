// `tandem serve --follow CHECKPOINT_DIR`: serves the newest committed checkpoint of a training
// job and keeps up with it. Each newly committed checkpoint is picked up by polling LATEST: its
// dense file is read, and only the rows that changed since the served checkpoint are read
// (checkpoint_delta.h) and laid over the rows being served; the next version is published
// whole, so serving never stops and no request mixes versions. The first checkpoint, and any
// after the changed rows held in memory outgrow `max_delta_rows` (or after a re-partition, a
// rollback to another timeline or a config change), is opened whole instead: its shards read-only
// with a bounded row cache, which reads nothing up front.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics/prometheus.h"
#include "common/status.h"
#include "common/sync.h"
#include "serve/served_model.h"
#include "server/ps/durable_copy.h"

namespace tandem::serve {

struct FollowOptions {
  std::string dir;        // checkpoint.dir of the job
  std::string state_dir;  // where checkpoints are materialised (hard links when on dir's FS)
  uint64_t cache_bytes = 256ull << 20;  // per shard's row cache
  double poll_seconds = 1.0;
  uint64_t max_delta_rows = 1u << 22;
  VersionOptions version;
};

class CheckpointFollower {
 public:
  // Starts polling; the first committed checkpoint is published as soon as there is one
  // (`served` stays empty until then). Metrics go to `registry` (not owned, outlives this).
  static StatusOr<std::unique_ptr<CheckpointFollower>> Start(const FollowOptions& options,
                                                             ServedModel* served,
                                                             metrics::Registry* registry);
  ~CheckpointFollower();  // stops polling (an update in progress finishes first)

  // One poll, on the caller's thread (tests): publishes the newest checkpoint if it is newer.
  Status PollOnce();

  CheckpointFollower(const CheckpointFollower&) = delete;
  CheckpointFollower& operator=(const CheckpointFollower&) = delete;

 private:
  CheckpointFollower() = default;
  void Loop();
  // Publishes checkpoint `m` of `root`, whole or as the rows changed since the served one.
  Status Update(const std::string& root, const chief::Manifest& m);

  FollowOptions options_;
  ServedModel* served_ = nullptr;
  Mutex mu_;  // one update at a time
  // What the served version is made of: the checkpoint opened whole, the rows changed since it,
  // and the parts of the checkpoint served (what the next delta is computed against).
  std::shared_ptr<const CheckpointRows> base_ GUARDED_BY(mu_);
  std::shared_ptr<const DeltaRows> delta_ GUARDED_BY(mu_);  // null: none
  std::vector<ps::CheckpointPart> served_parts_ GUARDED_BY(mu_);
  std::string served_config_hash_ GUARDED_BY(mu_);
  uint64_t served_timeline_ GUARDED_BY(mu_) = 0;
  int64_t served_step_ GUARDED_BY(mu_) = -1;
  std::string last_error_ GUARDED_BY(mu_);

  metrics::Counter* updates_ = nullptr;
  metrics::Counter* full_loads_ = nullptr;
  metrics::Counter* failures_ = nullptr;
  metrics::Counter* rows_read_ = nullptr;
  metrics::Counter* rows_applied_ = nullptr;
  metrics::Histogram* update_seconds_ = nullptr;
  std::atomic<double> lag_seconds_{0};
  std::atomic<uint64_t> delta_rows_{0};

  Mutex stop_mu_;
  CondVar stop_cv_{&stop_mu_};
  bool stop_ GUARDED_BY(stop_mu_) = false;
  std::thread thread_;
};

}  // namespace tandem::serve
