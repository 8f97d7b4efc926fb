#include "cli/replica_group.h"

#include <chrono>
#include <cstdlib>
#include <optional>
#include <thread>

#include "cli/stop_signals.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "common/wait_log.h"

namespace tandem::cli {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

void ReplicaGroup::Adopt(std::unique_ptr<collective::Collective> group, uint64_t generation) {
  MutexLock lock(&mu_);
  group_ = std::move(group);
  generation_.store(generation);
}

void ReplicaGroup::Watch() {
  MutexLock lock(&mu_);
  if (!group_) return;
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
  // in flight nor push what follows it; the rank is its successor's (cli/member.h).
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

Status ReplicaGroup::Recover(const std::function<void(const std::string&)>& on_state) {
  // A zombie (stopped, replaced, continued) must not rejoin the group in its successor's place:
  // it asks the chief first and is told it was replaced.
  chief_->HeartbeatNow(milliseconds(2000)).IgnoreError();
  if (chief_->fenced())
    return Status::Aborted("this incarnation was replaced: it takes no part in the recovery");
  on_state("recovering");
  // The loss is declared within the heartbeat timeout and a probe; max_wait_s counts from then.
  const auto declared_by =
      Clock::now() + 2 * milliseconds(job_->chief.heartbeat_timeout_ms) + milliseconds(5000);
  std::optional<Clock::time_point> deadline;
  std::string missing = "no answer from the chief";
  WaitLog wait("the all-reduce group of a newer generation (chief " + job_->cluster.chief.at(0) +
               ")");
  for (;;) {
    // Declared lost meanwhile (this worker was the one cut off): it leaves the rank to the
    // decision of the chief (cli/member.h, ExitWhenFenced).
    if (chief_->fenced())
      return Status::Aborted("this incarnation was declared lost while it waited to recover");
    if (StopSignalReceived() || chief_->stop_requested())
      return Status::Cancelled("the job is stopping: no recovery");
    wait.Tick(missing);
    const auto now = Clock::now();
    if (!deadline && now > declared_by)
      return Status::FailedPrecondition(
          "the all-reduce group failed but the chief declared no worker lost");
    if (deadline && now > *deadline) break;
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
        TANDEM_RETURN_IF_ERROR(rebuilt.WithContext(
            "rebuilding the all-reduce group of generation " + std::to_string(v->generation)));
        TLOG_INFO("all-reduce group rebuilt under generation {}", v->generation);
        on_state("training");
        return Status::Ok();
      }
      missing.clear();
      for (const MemberView* m : v->Of("worker"))
        if (m->state == "lost" || m->state == "starting")
          missing += (missing.empty() ? "" : ", ") + std::string("worker:") +
                     std::to_string(m->index) + " (" + m->state + ")";
      if (missing.empty()) missing = "not every worker heard from yet";
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  return Status::DeadlineExceeded("no replacement joined within recovery.max_wait_s = " +
                                  std::to_string(job_->recovery.max_wait_s) + " s: " + missing);
}

}  // namespace tandem::cli
