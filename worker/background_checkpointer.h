// Rank 0's checkpoints, finished off the training thread (PROTOCOLS §7). The training loop hands
// over a snapshot of the dense state and goes on; a thread writes the dense file, collects every
// shard's part (each shard cut its restore point in the apply path, or cuts it on request at a
// step after which nothing is pushed) and asks the chief to commit the manifest.
//
// A commit the chief cannot take — it is away (PROTOCOLS §10) — is retried until it answers;
// only the newest such checkpoint waits for it, because the shards collect the durable files of
// checkpoints the chief does not keep, and an older uncommitted one is no longer needed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/chief_client.h"
#include "common/config/job_config.h"
#include "common/ps_client.h"
#include "common/status.h"
#include "common/sync.h"
#include "worker/dense_state.h"

namespace tandem::worker {

struct BackgroundCheckpointerOptions {
  const config::JobConfig* job = nullptr;
  // Every shard's part of checkpoint `step`, JSON each (PsClient::CheckpointParts); `retained`:
  // the committed checkpoints the chief keeps; `final`: the job's last checkpoint. Called on the
  // checkpointer's thread only.
  std::function<StatusOr<std::vector<std::string>>(
      int64_t step, const std::vector<int64_t>& retained, bool final)>
      shard_parts;
  // Asks the chief to commit the manifest's parts (ChiefClient::CommitCheckpoint); `retained`
  // gets the committed checkpoints it keeps. kUnavailable and the like: the chief is away (try
  // again); kResourceExhausted: the chief cannot take it now, its disk is full (try again, as
  // long as it takes);
  // kInvalidArgument or kDataLoss: refused for good.
  std::function<StatusOr<int64_t>(int64_t step, const std::vector<std::string>& parts,
                                  std::vector<int64_t>* retained)>
      commit;
  std::chrono::milliseconds retry_every{1000};  // commit retries while the chief is away
  // Told what holds the checkpoint ("" once nothing does): a dense file that meets a full disk
  // is written again every retry_every until it fits, a commit the chief's full disk refused
  // is asked again. Optional; the checkpointer's thread only.
  std::function<void(const std::string&)> waiting_on;
};

// The hooks over the clients of a worker: `ps` is used by the checkpointer's thread only; both
// must outlive the checkpointer.
void UseClients(PsClient* ps, ChiefClient* chief, const std::string& determinism_class,
                BackgroundCheckpointerOptions* options,
                std::chrono::milliseconds commit_budget = std::chrono::milliseconds(10000));

class BackgroundCheckpointer {
 public:
  explicit BackgroundCheckpointer(BackgroundCheckpointerOptions options);
  // Stops the thread; a checkpoint not committed by then is abandoned (logged).
  ~BackgroundCheckpointer();

  // Hands checkpoint `step` over. Waits while the previous one is still being written, so that
  // checkpoints asked for faster than they can be written hold training up instead of piling up
  // snapshots; but not while a full disk holds it (NoteHeld): this one then replaces it, so
  // training goes on and only the newest checkpoint waits for space. Returns the seconds it
  // waited. `final`: the job stops after this step (its
  // shards may then copy what they wrote since their last part instead of new SSTs).
  double Begin(int64_t step, worker::DenseState state, bool final = false);

  // Waits until every checkpoint handed over is written and committed: the commit at most
  // `budget`, the writing as long as it takes. kDeadlineExceeded when the newest is not
  // committed by then, or the error that lost it; kCancelled when `stopped` (polled) says so
  // while a full disk holds the writing, which would otherwise wait for space for ever.
  Status Finish(std::chrono::milliseconds budget, const std::function<bool()>& stopped = nullptr);

  int64_t last_committed() const;

  // The checkpoint being written waits for space (a shard answered OVERLOADED to its part):
  // Begin no longer waits for it. Any thread.
  void NoteHeld();
  // The one being written is held and a newer one was handed over, or the checkpointer stops:
  // its wait should end (polled by the part requests, PsClientOptions::interrupted). Any thread.
  bool Superseded() const;

  BackgroundCheckpointer(const BackgroundCheckpointer&) = delete;
  BackgroundCheckpointer& operator=(const BackgroundCheckpointer&) = delete;

 private:
  struct Uncommitted {
    int64_t step = -1;
    std::vector<std::string> parts;  // the manifest's parts, JSON each
    bool tried = false;              // offered to the chief at least once
  };
  void Run();
  // The dense file and every shard's part, as the chief's parts.
  StatusOr<std::vector<std::string>> Write(int64_t step, const worker::DenseState& state,
                                           bool final);
  // worker::WriteDenseStateFile, again every retry_every while the disk is full (until it fits or
  // the checkpointer stops).
  Status WriteDenseWhenThereIsSpace(int64_t step, const std::string& path,
                                    const worker::DenseState& state, worker::DenseFileInfo* info);
  // One commit attempt; true when it is settled (committed, or refused for good).
  bool TryCommit(const Uncommitted& c);

  const BackgroundCheckpointerOptions options_;
  mutable Mutex mu_;
  CondVar cv_{&mu_};
  std::optional<std::pair<int64_t, worker::DenseState>> next_ GUARDED_BY(mu_);
  bool next_final_ GUARDED_BY(mu_) = false;
  bool writing_ GUARDED_BY(mu_) = false;
  bool writing_final_ GUARDED_BY(mu_) = false;
  bool held_ GUARDED_BY(mu_) = false;         // the one being written waits for space
  bool commit_held_ GUARDED_BY(mu_) = false;  // the chief asked to be asked later (full disk)
  std::optional<Uncommitted> uncommitted_ GUARDED_BY(mu_);
  int64_t last_begun_ GUARDED_BY(mu_) = -1;
  int64_t last_committed_ GUARDED_BY(mu_) = -1;
  Status last_error_ GUARDED_BY(mu_);  // why the newest checkpoint was lost, if it was
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<int64_t> retained_;            // the chief's kept checkpoints (thread only)
  int64_t retry_step_ GUARDED_BY(mu_) = -1;  // the commit being retried, for quieter logs
  int retries_ GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace tandem::worker
