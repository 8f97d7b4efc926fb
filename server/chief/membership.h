// Membership: the chief's view of the job (DESIGN §5, PROTOCOLS §1, §10, §12) as plain logic:
// who is registered with which incarnation, heartbeats and losses, the generation, and the job's
// state machine. No sockets and no clock of its own (every call takes `now`), so tests drive it
// directly; ChiefService wraps it in RPC handlers and a monitor thread.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/cluster_spec.h"
#include "common/states.h"
#include "common/status.h"
#include "server/chief/chief_state.h"

namespace tandem::chief {

using Clock = std::chrono::steady_clock;

using config::Role;  // members are kPs and kWorker; the chief is none

struct MembershipOptions {
  uint32_t num_ps = 1;
  uint32_t num_workers = 1;
  std::string build_id;     // the chief's; members built from other code are refused
  std::string config_hash;  // the chief's JobConfig::ComputationHash()
  // `train.deterministic: strict` with `train.embedding_staleness == 0`: every worker must share
  // one determinism class, or bit-identity (PROTOCOLS §5) cannot hold.
  bool strict_determinism = true;
  std::chrono::milliseconds heartbeat_interval{200};
  std::chrono::milliseconds heartbeat_timeout{2000};
  // A PS silent this long is declared lost, and its supervisor kills and restarts it on the same
  // data directory (ps.watchdog_ms, PROTOCOLS §9); a worker after heartbeat_timeout.
  std::chrono::milliseconds ps_watchdog{10000};
  int64_t total_steps = 0;  // train.steps
  // Unix time in ms, for the run's training start and end kept in the chief state (a steady
  // clock does not survive a restart). Tests inject their own.
  std::function<int64_t()> wall_ms;  // empty: std::chrono::system_clock
};

struct RegisterInput {
  Role role = Role::kWorker;
  uint32_t index = 0;
  std::string build_id;
  std::string config_hash;
  std::string determinism_class;
  uint64_t last_incarnation = 0;  // 0 on a first start
  std::string address;            // the member's bound endpoint, where probes go
  uint32_t pid = 0;
  std::string host;
  int64_t step = -1;
  uint64_t timeline = 0;
};

struct Issued {
  uint64_t incarnation = 0, generation = 0, timeline = 0, term = 0;
  int64_t total_steps = 0;
  // A new incarnation of a worker whose predecessor was lost while the job trained (at any
  // term of this run): it rolls forward from the survivors' state, not from the checkpoint.
  bool joins_running_job = false;
  // This run has not trained yet (a start, or a start over after a restart of every process):
  // every shard must be at the checkpoint it resumes from, not at what it applied before.
  bool job_start = false;
};

// What a member reports with each heartbeat.
struct MemberProgress {
  int64_t step = -1;
  double samples_per_sec = 0;
  MemberState state = MemberState::kStarting;
  double loss = NAN, auc = NAN, logloss = NAN, teacher_auc = NAN;
  std::string model_checksum;
  std::string detail;
  std::string waiting_on;  // Heartbeat.waitingOn: what holds the member now
  // A worker's malformed data lines; in the job's result (kDone), the sum over workers.
  int64_t bad_lines = 0;
};

enum class HeartbeatVerdict {
  kOk,
  kRetry,  // this chief does not know that incarnation: register again with it
  kStale,  // the incarnation was replaced or declared lost: the member is fenced
};

struct HeartbeatResult {
  HeartbeatVerdict verdict = HeartbeatVerdict::kOk;
  std::string message;  // why, for RETRY and STALE
  uint64_t generation = 0, timeline = 0, term = 0;
  bool stop = false;
  JobState job_state = JobState::kStarting;
};

struct RegroupResult {
  uint64_t generation = 0;  // the chief's generation after the request
  bool raised = false;      // this request opened it
  std::string why_not;  // when not raised and the generation did not move: what stands in the way
};

// A member whose heartbeats stopped: the service probes it before declaring it lost.
struct Suspect {
  Role role;
  uint32_t index;
  uint64_t incarnation;
  std::string address;
  int64_t ms_since_heartbeat;
};

struct MemberSnapshot {
  Role role = Role::kWorker;
  uint32_t index = 0;
  std::string address;
  // kStarting (never registered), kUp (nothing reported yet), kLost, kLeft or the reported state
  MemberState state = MemberState::kStarting;
  uint64_t incarnation = 0;
  int64_t step = -1;
  uint64_t generation = 0;  // the generation the member last heard
  double samples_per_sec = 0;
  uint32_t pid = 0;
  std::string host;
  std::string lost_reason;
  int64_t ms_since_heartbeat = -1;
  std::string determinism_class;
  int64_t bad_lines = 0;
  std::string waiting_on;  // MemberProgress::waiting_on of a member that is up
};

struct JobSnapshot {
  uint64_t term = 0, generation = 0, timeline = 0;
  int64_t last_checkpoint_step = -1;
  bool generation_pending = false;  // a worker was lost and the generation has not risen again
  JobState job_state = JobState::kStarting;
  int64_t step = -1;  // the lowest step among registered workers
  int64_t total_steps = 0;
  double samples_per_sec = 0;  // summed over workers that are up
  double loss = NAN, auc = NAN, logloss = NAN, teacher_auc = NAN;  // worker 0's, final once done
  std::string model_checksum;
  std::string detail;
  int64_t elapsed_ms = 0;  // since the job became "training"
  std::string config_hash;
  int64_t bad_lines = 0;                // malformed data lines skipped, summed over workers
  std::vector<MemberSnapshot> members;  // ps 0.., then workers 0..
};

// Requires external synchronization (ChiefService holds one mutex around it).
class Membership {
 public:
  // Persists the issued numbers before they are used; an error refuses the operation that
  // needed them. `state` must outlive this object.
  Membership(MembershipOptions options, ChiefState* state);
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Admits a member and issues its identities, or refuses it:
  //   kInvalidArgument   malformed (index out of range, no address);
  //   kPermissionDenied  refused (a live incarnation of this rank, another build or config hash,
  //                      another determinism class under strict determinism), with the reason;
  //   kUnavailable       the chief state could not be persisted (nothing was issued).
  StatusOr<Issued> Register(const RegisterInput& in, Clock::time_point now);

  // Records a heartbeat. kInvalidArgument for an index out of range or the chief's role.
  StatusOr<HeartbeatResult> Heartbeat(Role role, uint32_t index, uint64_t incarnation,
                                      const MemberProgress& progress, Clock::time_point now);

  // Members whose last sign of life (a heartbeat, or an answered probe) is older than the
  // heartbeat timeout and that are neither lost, left nor in a terminal state.
  std::vector<Suspect> Suspects(Clock::time_point now) const;
  // Worker `index` (incarnation `incarnation`) found its all-reduce group of `failed_generation`
  // broken while the chief declared nobody lost (two workers cut off from each other, not from
  // the chief; PROTOCOLS §11): opens generation failed_generation + 1, complete at once, in
  // which every worker rebuilds the group. Only once: when the generation moved on already (the
  // other workers' requests, a loss) it stays. Not while a worker loss awaits its replacement,
  // a worker is silent (it may be dead: its loss is declared instead) or the job is not
  // training; `why_not` says which. kFailedPrecondition for an incarnation that is not the rank's
  // live one; kInvalidArgument for an index out of range; kUnavailable when the new generation
  // could not be persisted.
  StatusOr<RegroupResult> Regroup(uint32_t index, uint64_t incarnation, uint64_t failed_generation,
                                  const std::string& reason, Clock::time_point now);
  // A chief cut off from the network sees every member fall silent at once, exactly as if all
  // had died; it cannot tell the two apart. Whether no live member has heartbeated within half
  // the heartbeat timeout: the monitor then declares nobody lost (a partitioned chief is
  // treated like an absent one, PROTOCOLS §10), and the first heartbeat or registration after
  // it excuses every member's silence over that time.
  bool NoteIsolation(Clock::time_point now);
  bool isolated() const { return isolated_since_ != Clock::time_point{}; }
  // The probe of `s` was answered by the same incarnation: keep it and probe again only after
  // another timeout.
  void ProbeAnswered(const Suspect& s, Clock::time_point now);
  // Declares `s` lost unless it heartbeated or was replaced meanwhile; a lost worker raises the
  // generation. Returns whether it was declared lost. kUnavailable when the new generation could
  // not be persisted (the member is not declared lost then; the next tick tries again).
  // `replaced`: a new process claims the rank and `s` did not answer a probe, so the heartbeat
  // timeout need not have passed.
  StatusOr<bool> DeclareLost(const Suspect& s, const std::string& reason, Clock::time_point now,
                             bool replaced = false);
  // The rank's live incarnation when it alone stands in the way of `in` (Register would refuse it
  // as a duplicate of a live member): the service probes it, since a crashed process restarted
  // by its supervisor re-registers before its heartbeats have timed out.
  std::optional<Suspect> LiveRival(const RegisterInput& in, Clock::time_point now) const;

  // SIGTERM or StopJob: "stopping" unless the job already ended. Returns the job state.
  JobState RequestStop(const std::string& reason, Clock::time_point now);
  // Records the committed LATEST checkpoint in the persisted state (and the cluster view).
  Status SetLatestCheckpoint(int64_t step);

  // A job start: opens a new run in the persisted state, resuming from `resume_step` (-1: from
  // scratch). kUnavailable when it cannot be persisted.
  // kFailedPrecondition (nothing changed) when the last `max_rollbacks` + 1 runs all failed
  // from this same resume step: see ChiefStateData::futile_runs.
  Status OpenRun(int64_t resume_step, int64_t max_rollbacks = std::numeric_limits<int64_t>::max());
  // A chief restarted into the open run (PROTOCOLS §10): takes over the run's persisted job
  // state (a terminal one with worker 0's final report, or a requested stop) and its training
  // start, so the elapsed time and the end of the job are the run's. Members come back by
  // re-registering with their incarnations; the job is "training" again once all have.
  void RejoinRun(Clock::time_point now);
  // A rejoined run had no survivors after all (the whole job was started again): back to a
  // job start's state, before OpenRun.
  void StartOver();
  // The chief leaves on purpose: the run is closed, and the next chief start is a job start.
  Status CloseRun();
  // The chief itself was not running (stopped, starved) from some time until `now`: a member's
  // silence over that time proves nothing, so every live member counts as heard from now.
  void ExcuseSilence(Clock::time_point now);

  JobState job_state() const { return job_state_; }
  uint64_t generation() const { return state_->data().generation; }
  // How long a member of `role` may be silent before it is suspected.
  std::chrono::milliseconds SilenceLimit(Role role) const {
    return role == Role::kPs ? options_.ps_watchdog : options_.heartbeat_timeout;
  }
  uint64_t timeline() const { return state_->data().timeline; }
  uint64_t term() const { return state_->data().term; }
  // The job ended and every registered member reported a terminal state and has been silent for
  // `quiet` or said its last word, or is lost or left.
  bool Finished(Clock::time_point now, std::chrono::milliseconds quiet) const;
  JobSnapshot Snapshot(Clock::time_point now) const;

 private:
  struct Member {
    bool registered = false;
    uint64_t incarnation = 0;
    std::string address, host, determinism_class;
    uint32_t pid = 0;
    bool lost = false, left = false;
    // Said its last word after a terminal report (ChiefClient::Leave): it sends nothing more, so
    // Finished need not wait for it to fall quiet.
    bool gone = false;
    std::string lost_reason;
    Clock::time_point last_heartbeat{}, last_alive{};  // last_alive: heartbeat or probe
    bool heartbeated = false;
    bool joins_running_job = false;  // what its registration was told (Issued)
    MemberProgress progress;
    uint64_t generation_seen = 0;
  };

  std::vector<Member>& Of(Role role) { return role == Role::kPs ? ps_ : workers_; }
  const std::vector<Member>& Of(Role role) const { return role == Role::kPs ? ps_ : workers_; }
  bool Alive(const Member& m, Clock::time_point now) const;
  // The chief hears a member again after NoteIsolation: silence over that time proves nothing.
  void EndIsolation(const std::string& who, Clock::time_point now);
  bool Terminal(const Member& m) const;
  std::optional<std::string> Refusal(const RegisterInput& in, const Member& current,
                                     Clock::time_point now) const;
  Status Persist(const ChiefStateData& data);
  Status BumpGeneration(const std::string& why);
  void TryCompleteGeneration();
  void UpdateJobState(Clock::time_point now);
  // Persists a change of the run's fields; a failure is logged, not fatal: they only matter
  // after a restart of the chief, and the next change writes them all again.
  void SaveRun(const std::function<void(ChiefStateData*)>& change);
  int64_t WallMs() const;
  std::string Name(Role role, uint32_t index) const;

  const MembershipOptions options_;
  ChiefState* const state_;
  std::vector<Member> ps_, workers_;
  JobState job_state_ = JobState::kStarting;
  std::string stop_reason_;
  Clock::time_point training_since_{};
  Clock::time_point ended_at_{};
  bool awaiting_workers_ = false;  // a worker was lost; the generation rises again when all are up
  Clock::time_point last_worker_loss_{};
  MemberProgress final_result_;  // worker 0's report once the job is done
  // Set by RejoinRun: until a heartbeat timeout later, a member not yet registered may still
  // come back, so Finished waits for it.
  Clock::time_point rejoined_at_{};
  Clock::time_point isolated_since_{};  // NoteIsolation found every live member silent
  Clock::time_point excused_at_{};      // the last ExcuseSilence
};

}  // namespace tandem::chief
