#include "worker/roll_forward/replica_group.h"

#include <chrono>
#include <cstdlib>
#include <optional>
#include <thread>

#include "common/daemon/stop_signals.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "common/wait_log.h"

namespace tandem::worker {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

void ReplicaGroup::Adopt(std::unique_ptr<collective::Collective> group, uint64_t generation) {
  MutexLock lock(&mu_);
  group_ = std::move(group);
  timed_.Reset(group_.get());
  generation_.store(generation);
}

ReplicaGroup::~ReplicaGroup() {
  MutexLock lock(&mu_);
  if (aborted_for_stop_ && group_) {
    TLOG_INFO("the all-reduce op abandoned for the stop is left to the exit");
    (void)group_.release();
  }
}

void ReplicaGroup::NoteStop(bool at_once) {
  MutexLock lock(&mu_);
  if (stop_since_ == Clock::time_point{}) stop_since_ = Clock::now();
  stop_at_once_ = stop_at_once_ || at_once;
}

void ReplicaGroup::Watch() {
  MutexLock lock(&mu_);
  // A stop rides in the next step's all-reduce, and the step ends the loop. An op (or a shard
  // wait) that outlasts the grace is held up by a peer or a shard that does not answer: the
  // stop must not wait for collective.timeout_ms, nor for a recovery.
  if (stop_since_ == Clock::time_point{} && chief_->stop_requested()) stop_since_ = Clock::now();
  // A failed job goes back to its last committed checkpoint (it is rolled back or given up):
  // the step in flight is lost whatever it does, and it may wait on the member that failed the
  // job, so nothing is waited for. The grace would hold the rollback up as long.
  const bool job_failed = chief_->stop_requested() && chief_->job_state() == JobState::kFailed;
  if (stop_since_ != Clock::time_point{} && !stop_overdue_.load() &&
      (stop_at_once_ || job_failed || Clock::now() - stop_since_ >= kStopGrace)) {
    stop_overdue_.store(true);
    TLOG_WARN(
        "the stop {}: waits on the shards give way, and an op of the all-reduce group still in "
        "flight is abandoned (the job stops at its last committed checkpoint)",
        stop_at_once_ ? "came twice"
        : job_failed  ? "is the job's failure"
                     : fmt::format("has waited {} ms", static_cast<long long>(kStopGrace.count())));
  }
  if (!group_) return;
  if (stop_overdue_.load() && !aborted_for_stop_ &&
      timed_.InFlightFor() > Clock::duration::zero()) {
    TLOG_WARN("stopping: aborting the all-reduce group's op in flight for {:.1f} s",
              std::chrono::duration<double>(timed_.InFlightFor()).count());
    group_->Abort();
    aborted_for_stop_ = true;
  }
  // PROTOCOLS §11, the last resort: an op that ignores its abort blocks the training thread for
  // good; only a new process can take the rank back.
  if (group_->Wedged()) {
    TLOG_ERROR(
        "an abandoned collective op has not returned within collective.abort_grace_ms: exiting "
        "{} to be restarted",
        kExitRestart);
    std::_Exit(kExitRestart);
  }
  // Fenced (declared lost while cut off, or replaced): this incarnation must not finish the op
  // in flight nor push what follows it; the rank is its successor's (common/daemon/member.h).
  if (chief_->fenced() && !aborted_for_fence_) {
    TLOG_WARN("fenced by the chief: aborting the group's op");
    group_->Abort();
    aborted_for_fence_ = true;
  }
  const uint64_t g = chief_->generation();
  if (g > generation_.load() && g > aborted_for_) {
    TLOG_WARN("the chief announced generation {} (the group's is {}): aborting the group's op", g,
              generation_.load());
    group_->Abort();
    aborted_for_ = g;
  }
}

bool ReplicaGroup::EveryWorkerHeardSince(const ClusterView& v, Clock::time_point since,
                                         Clock::time_point asked) {
  const auto workers = v.Of(config::Role::kWorker);
  if (workers.empty()) return false;
  const int64_t window =
      std::chrono::duration_cast<milliseconds>(asked - since).count();  // heard within it
  for (const MemberView* m : workers)
    if (!IsPresent(m->state) || m->ms_since_heartbeat < 0 || m->ms_since_heartbeat >= window)
      return false;
  return true;
}

Status ReplicaGroup::Recover(const std::function<void(MemberState)>& on_state) {
  // A zombie (stopped, replaced, continued) must not rejoin the group in its successor's place:
  // it asks the chief first and is told it was replaced.
  chief_->HeartbeatNow(milliseconds(2000)).IgnoreError();
  if (chief_->fenced())
    return Status::Aborted("this incarnation was replaced: it takes no part in the recovery");
  on_state(MemberState::kRecovering);
  // The group broke at `broken_since`. A worker that died then stops heartbeating and is
  // declared lost within the heartbeat timeout and a probe; max_wait_s counts from then. When
  // every worker heartbeats after it instead, nobody is dead: the workers lost each other, not
  // the chief, and they regroup under a generation the chief opens on request.
  Clock::time_point broken_since = Clock::now();
  auto declared_by =
      broken_since + 2 * milliseconds(job_->chief.heartbeat_timeout_ms) + milliseconds(5000);
  std::optional<Clock::time_point> deadline;
  std::string missing = "no answer from the chief";
  uint64_t regrouping_from = 0;  // the failed generation this worker asked to regroup from
  WaitLog wait("the all-reduce group of a newer generation (chief " + job_->cluster.chief.at(0) +
               ")");
  for (;;) {
    // Declared lost meanwhile (this worker was the one cut off): it leaves the rank to the
    // decision of the chief (common/daemon/member.h, ExitWhenFenced).
    if (chief_->fenced())
      return Status::Aborted("this incarnation was declared lost while it waited to recover");
    if (daemon::StopSignalReceived() || chief_->stop_requested() || StopOverdue())
      return Status::Cancelled("the job is stopping: no recovery");
    wait.Tick(missing);
    const auto now = Clock::now();
    if (!deadline && now > declared_by)
      return Status::FailedPrecondition(
          "the all-reduce group failed, the chief declared no worker lost and no regroup could "
          "be agreed: " +
          missing);
    if (deadline && now > *deadline) break;
    const auto asked = Clock::now();
    auto v = chief_->View(milliseconds(2000));
    if (v.ok()) {
      if (!deadline && (v->generation > generation_.load() || v->generation_pending))
        deadline = Clock::now() + std::chrono::seconds(job_->recovery.max_wait_s);
      if (v->Complete() && v->generation > generation_.load()) {
        {
          MutexLock lock(&mu_);
          generation_.store(v->generation);
        }
        Status rebuilt = group_->Rebuild("gen-" + std::to_string(v->generation));
        if (!rebuilt.ok() && chief_->generation() > v->generation) {
          TLOG_WARN("rebuilding under generation {}: {}; the chief moved on", v->generation,
                    rebuilt.ToString());
          continue;  // another loss while the group formed: the next generation
        }
        if (!rebuilt.ok() && !rebuilt.IsInvalidArgument()) {
          // Nobody moved on: a peer it cannot reach (the cut between the workers lasts) or a
          // peer that died as the group formed. The same rule as for the op that failed.
          TLOG_WARN("the all-reduce group of generation {} could not form: {}", v->generation,
                    rebuilt.ToString());
          missing = "the group of generation " + std::to_string(v->generation) +
                    " could not form: " + rebuilt.ToString();
          broken_since = Clock::now();
          declared_by = broken_since + 2 * milliseconds(job_->chief.heartbeat_timeout_ms) +
                        milliseconds(5000);
          continue;
        }
        TANDEM_RETURN_IF_ERROR(rebuilt.WithContext(
            "rebuilding the all-reduce group of generation " + std::to_string(v->generation)));
        TLOG_INFO("all-reduce group rebuilt under generation {}", v->generation);
        {
          MutexLock lock(&mu_);
          aborted_for_stop_ = false;
        }
        on_state(MemberState::kTraining);
        return Status::Ok();
      }
      missing.clear();
      for (const MemberView* m : v->Of(config::Role::kWorker))
        if (m->state == MemberState::kLost || m->state == MemberState::kStarting)
          missing += (missing.empty() ? "" : ", ") + std::string("worker:") +
                     std::to_string(m->index) + " (" + std::string(Name(m->state)) + ")";
      if (missing.empty()) missing = "not every worker heard from yet";
      // Nobody lost, nobody pending, every worker heard from since the group broke: ask for
      // the regroup (once per failed generation; the other workers' requests find it open).
      const uint64_t mine = generation_.load();
      if (v->generation == mine && !v->generation_pending && regrouping_from != mine + 1 &&
          EveryWorkerHeardSince(*v, broken_since, asked)) {
        auto a = chief_->Regroup(mine,
                                 "the group of generation " + std::to_string(mine) +
                                     " broke and every worker is heard from",
                                 milliseconds(2000));
        if (!a.ok()) {
          missing = "asking the chief to regroup: " + a.status().ToString();
        } else if (a->raised || a->generation > mine) {
          regrouping_from = mine + 1;  // +1: generation 0 is a real one
          if (!deadline) deadline = Clock::now() + std::chrono::seconds(job_->recovery.max_wait_s);
          TLOG_WARN(
              "the all-reduce group of generation {} broke while every worker is heard from "
              "(workers cut off from each other, not from the chief): regrouping under "
              "generation {}{}",
              mine, a->generation, a->raised ? "" : " (opened by another worker)");
          continue;
        } else {
          missing = "the chief does not regroup yet: " + a->why_not;
        }
      }
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  return Status::DeadlineExceeded(
      std::string(regrouping_from != 0 ? "the workers did not regroup" : "no replacement joined") +
      " within recovery.max_wait_s = " + std::to_string(job_->recovery.max_wait_s) +
      " s: " + missing);
}

}  // namespace tandem::worker
