// ChiefClient: a member's side of the chief protocol (DESIGN §5, PROTOCOLS §1, §10, §12):
// registration, heartbeats from a dedicated thread on their own socket, the cluster view, named
// barriers, the rendezvous key/value store, and the request to stop the job. The chief is never
// on a training step's path: nothing here is called between a step's pull and its dense update.
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "common/config/cluster_spec.h"
#include "common/states.h"
#include "common/status.h"
#include "common/sync.h"
#include "common/wire/identity.h"
#include "common/wire/rpc_client.h"

namespace tandem {

struct MemberView {
  config::Role role = config::Role::kWorker;
  uint32_t index = 0;
  std::string address;  // "tcp://host:port"; empty until registered
  // kStarting (never registered), kUp, kLost, kLeft, or the member's reported state
  MemberState state = MemberState::kStarting;
  uint64_t incarnation = 0;
  int64_t step = -1;
  uint64_t generation = 0;
  double samples_per_sec = 0;
  uint32_t pid = 0;
  std::string host;
  std::string lost_reason;
  int64_t ms_since_heartbeat = -1;
  std::string determinism_class;
  int64_t bad_lines = 0;  // a worker: malformed data lines it trained on (skipped)
  // What holds a member that is up (a PS refusing pushes: its disk is full); empty if nothing.
  std::string waiting_on;
};

struct ClusterView {
  uint64_t term = 0, generation = 0, timeline = 0;
  JobState job_state = JobState::kStarting;
  int64_t step = -1;  // the lowest step among workers
  int64_t total_steps = 0;
  int64_t last_checkpoint_step = -1;
  bool generation_pending =
      false;  // a worker was lost; the generation rises again once all are back
  double samples_per_sec = 0;
  double loss = NAN, auc = NAN, logloss = NAN, teacher_auc = NAN;
  std::string model_checksum;
  std::string detail;
  int64_t elapsed_ms = 0;
  std::string config_hash;
  int64_t bad_lines = 0;  // malformed data lines skipped, summed over workers
  // The committed checkpoint the job resumes from (-1: from scratch); a PS asks before it opens
  // its shard, so that it restores that checkpoint before serving.
  int64_t resume_step = -1;
  // A restarted chief has not yet learnt whether the run goes on or starts over: a shard must
  // not decide between keeping what it applied and restoring resume_step before it has.
  bool rejoin_pending = false;
  std::vector<MemberView> members;  // chief first, then ps 0.., then workers 0..

  // Members of `role` ordered by index.
  std::vector<const MemberView*> Of(config::Role role) const;
  // Every ps and worker registered and not lost, and no generation pending.
  bool Complete() const;
};

struct Registration {
  uint64_t incarnation = 0, generation = 0, timeline = 0, term = 0;
  int64_t total_steps = 0;
  int64_t resume_step = -1;  // the committed checkpoint the job resumes from; -1: from scratch
  // A replacement of a worker lost while the job trained: it takes its state from the surviving
  // replicas (roll forward, PROTOCOLS §8) instead of from resume_step.
  bool joins_running_job = false;
  // The run has not trained yet: a shard must be at resume_step (PsDaemon::WrongState).
  bool job_start = false;
};

// What the heartbeat thread reports; the owner updates it with SetProgress.
struct Progress {
  int64_t step = -1;
  double samples_per_sec = 0;
  MemberState state = MemberState::kStarting;
  double loss = NAN, auc = NAN, logloss = NAN, teacher_auc = NAN;
  std::string model_checksum;
  std::string detail;
  int64_t bad_lines = 0;  // a worker: malformed data lines it trained on (skipped)
};

struct ChiefClientOptions {
  std::string chief_endpoint;  // "tcp://host:port"
  wire::Identity identity;     // job id, role, index; incarnation as known before registering
  std::string address;         // this member's bound endpoint, sent with the registration
  std::string config_hash;
  std::string determinism_class;
  std::chrono::milliseconds heartbeat_interval{200};
  std::chrono::milliseconds call_budget{2000};  // one attempt of a control call
};

// Ends a SetWaitingOn text of a member whose work goes on meanwhile (rank 0 keeping metrics
// lines in memory): `tandem local` then does not say that the job waits for it.
inline constexpr std::string_view kWaitingGoesOn = " (training goes on)";

// Register, View, Barrier, KvSet, KvGet, StopJob are safe for concurrent use (one control
// socket behind a mutex); the heartbeat thread has its own socket.
class ChiefClient {
 public:
  ChiefClient(zmq::context_t* context, ChiefClientOptions options);
  ~ChiefClient();  // stops the heartbeat thread
  ChiefClient(const ChiefClient&) = delete;
  ChiefClient& operator=(const ChiefClient&) = delete;

  // Registers (retrying while the chief is unreachable, until `timeout`) and adopts the issued
  // identities. kPermissionDenied when refused (a live incarnation of this rank, another build
  // or config hash, another determinism class under `strict`): the caller exits 75.
  // A wait longer than a few seconds is logged (where, how long so far, the last error); it
  // ends with kCancelled as soon as `cancelled` (e.g. a stop signal) says so.
  StatusOr<Registration> Register(int64_t step, std::chrono::milliseconds timeout,
                                  const std::function<bool()>& cancelled = nullptr);

  // Starts the heartbeat thread. Each heartbeat carries the last SetProgress. A STALE answer
  // (this incarnation was replaced) sets fenced(); a RETRY (a restarted chief that does not
  // know this member) re-registers with the last incarnation.
  void StartHeartbeats();
  void StopHeartbeats();
  void SetProgress(const Progress& progress);
  // What holds this member now (a PS refusing pushes for a full disk, a checkpoint waiting for
  // space), sent with every heartbeat until cleared with "". Any thread. Each `source` (a
  // worker's checkpointer and its outputs) has its own; the heartbeat joins them with "; ".
  void SetWaitingOn(std::string why, const std::string& source = "");
  // Sends a heartbeat now from the calling thread and waits for its answer (a final report),
  // trying again while the chief is unreachable (e.g. restarting) until `budget` is spent.
  Status HeartbeatNow(std::chrono::milliseconds budget);
  // The last word of a member that has made its final report and stopped its heartbeats: it
  // sends nothing more, so the chief may leave without waiting for it to fall quiet (three
  // heartbeat intervals). One attempt of at most `budget`; a chief that misses it waits out
  // the quiet as before, so the result only says whether it was heard.
  Status Leave(std::chrono::milliseconds budget);

  bool stop_requested() const { return stop_requested_.load(); }
  bool fenced() const { return fenced_.load(); }
  JobState job_state() const;
  uint64_t generation() const { return generation_.load(); }
  // The issued incarnation, and the latest term, generation and timeline heard from the chief.
  wire::Identity identity() const;

  // Retries while the chief is unreachable; logs and cancels as Register does. kInvalidArgument
  // for a view with a role or state this build does not know.
  StatusOr<ClusterView> View(std::chrono::milliseconds budget,
                             const std::function<bool()>& cancelled = nullptr);
  // Polls the view until Complete() (or kDeadlineExceeded), logging who is missing every few
  // seconds; kCancelled as soon as `cancelled` says so.
  StatusOr<ClusterView> AwaitComplete(std::chrono::milliseconds timeout,
                                      const std::function<bool()>& cancelled = nullptr);
  // Returns once `count` distinct members have entered barrier `name`.
  Status Barrier(const std::string& name, uint32_t count, std::chrono::milliseconds timeout);
  Status KvSet(const std::string& key, std::string_view value);
  // nullopt when the key is not set (never waits).
  StatusOr<std::optional<std::string>> KvGet(const std::string& key);
  // Worker rank 0: hands the chief every part of checkpoint `step` (JSON each) to commit.
  // Returns the committed step; kResourceExhausted at once when the chief cannot take the
  // commit now (its disk is full, or its queue: ask again later).
  // `retained` (may be null) gets the committed checkpoints the chief keeps.
  StatusOr<int64_t> CommitCheckpoint(int64_t step, const std::vector<std::string>& parts,
                                     const std::string& determinism_class,
                                     std::chrono::milliseconds budget,
                                     std::vector<int64_t>* retained = nullptr);
  // Asks the chief to stop the job (SIGTERM to a member, Ctrl-C of `tandem local`).
  StatusOr<JobState> StopJob(const std::string& reason);
  // A worker whose all-reduce group of `failed_generation` broke while nobody was declared lost
  // asks for a new generation to regroup in (RegroupRequest, PROTOCOLS §11); the heartbeats
  // bring the new generation as usual. An incarnation that is not the live one is answered
  // STALE (the reply's status).
  struct RegroupAnswer {
    uint64_t generation = 0;
    bool raised = false;
    std::string why_not;
  };
  StatusOr<RegroupAnswer> Regroup(uint64_t failed_generation, const std::string& reason,
                                  std::chrono::milliseconds budget);

 private:
  // `cancelled` (if set) ends the wait early, within 100 ms.
  StatusOr<wire::InMessage> ControlCall(wire::OutMessage message, std::chrono::milliseconds budget,
                                        const std::function<bool()>& cancelled = {})
      EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ControlCall again (after a back-off) while the chief is unreachable or answers OVERLOADED or
  // RETRY, until `budget` is spent. Returns an OK reply or the error.
  // `overloaded_ends`: an OVERLOADED answer (the chief could not write for lack of space, or its
  // server's queue is full) is returned at once as kResourceExhausted, for a caller that waits
  // its own way and for as long as it takes.
  StatusOr<wire::InMessage> ControlRetry(const std::function<wire::OutMessage()>& build,
                                         std::chrono::milliseconds budget,
                                         const std::function<bool()>& cancelled = nullptr,
                                         bool overloaded_ends = false) LOCKS_EXCLUDED(mu_);
  // One HeartbeatNow attempt: a RETRY answer (a restarted chief) registers again first.
  Status HeartbeatNowOnce(std::chrono::milliseconds budget) LOCKS_EXCLUDED(mu_);
  void HeartbeatLoop();
  Status SendHeartbeat(wire::RpcClient* client, int handle, std::chrono::milliseconds budget);
  // kFailedPrecondition when the chief answered RETRY (register again), kAborted when STALE.
  Status OnHeartbeatReply(const wire::InMessage& reply);
  // One registration attempt over `client`. kUnavailable: try again; kPermissionDenied: refused.
  StatusOr<Registration> RegisterOnce(wire::RpcClient* client, int handle, int64_t step,
                                      std::chrono::milliseconds budget);
  std::chrono::milliseconds HeartbeatBudget() const;

  zmq::context_t* const context_;
  const ChiefClientOptions options_;
  mutable Mutex mu_;  // the control socket; held across its calls
  wire::RpcClient control_ GUARDED_BY(mu_);
  int control_handle_ GUARDED_BY(mu_) = -1;
  // The state the heartbeat thread shares; never held across a network call.
  mutable Mutex state_mu_;
  wire::Identity identity_ GUARDED_BY(state_mu_);
  Progress progress_ GUARDED_BY(state_mu_);
  std::map<std::string, std::string> waiting_on_ GUARDED_BY(state_mu_);  // by source
  JobState job_state_ GUARDED_BY(state_mu_) = JobState::kStarting;
  int64_t registered_step_ GUARDED_BY(state_mu_) = -1;
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> fenced_{false};
  std::atomic<uint64_t> generation_{0};
  Mutex heartbeat_mu_;  // lets StopHeartbeats cut the heartbeat thread's sleep short
  CondVar heartbeat_cv_{&heartbeat_mu_};
  std::atomic<bool> heartbeats_running_{false};
  std::thread heartbeat_thread_;
};

}  // namespace tandem
