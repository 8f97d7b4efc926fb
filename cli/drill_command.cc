#include "cli/drill_command.h"

#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "cli/cluster_file.h"
#include "cli/drill_faults.h"
#include "cli/netns.h"
#include "cli/step_timeline.h"
#include "common/chief_client.h"
#include "common/config/job_config.h"
#include "common/daemon/security_setup.h"
#include "common/daemon/stop_signals.h"
#include "common/exit_codes.h"
#include "common/job_id.h"
#include "common/subprocess.h"

namespace tandem::cli {

using daemon::ApplySecurity;
using daemon::BlockStopSignals;
using daemon::WaitStopSignal;
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t).count();
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What one fault did, as far as the drill could see it.
struct FaultRecord {
  Fault fault;
  bool fired = false;
  std::string error;  // why it could not be fired
  Clock::time_point fired_at;
  int64_t fired_at_step = -1;
  int64_t step_before = -1;  // the highest step completed before the fault
  int pid = 0;
  int last_pid = 0;  // the target's pid in cluster.json as last seen
  // The chief's term and timeline and the target's incarnation when the fault fired, and as
  // last seen.
  struct Marks {
    uint64_t incarnation = 0, term = 0, timeline = 0;
  } before, after;
  uintmax_t log_offset = 0;      // size of the target's log when the fault fired
  uintmax_t log_end = 0;         // its size when the next fault on the same target fired (0: none),
                                 // bounding the search for the target's own account of this fault
  std::string corrupted_latest;  // corrupt-latest: the bytes written
  std::optional<Clock::time_point> cont_at;  // stop: when SIGCONT is due; network: the fault's end
  // A network fault's changes to the links and routes, each due at its time (the first ones at
  // once); whatever is left when the job ends is applied then, so every link comes back.
  struct NetAction {
    Clock::time_point at;
    std::function<Status()> run;
  };
  std::vector<NetAction> net_actions;
  std::optional<int64_t> detect_ms, recovery_ms;
  // The longest time the job's step stood still from the fault to the next one (or the last
  // step): what the fault cost training, which recovery_ms does not say (StepTimeline).
  std::optional<int64_t> stall_ms;
  std::string detected_by;
  // A rollback after the fault: the highest step the job had reached when it failed, and the
  // checkpoint the next run resumed from; the steps between are trained again.
  int64_t step_at_failure = -1;
  std::optional<int64_t> resumed_from;
  bool recovery_bound_only = false;  // seen only as the job's successful end
  // `tandem local`'s whole-job rollbacks (lines in drill-local.log) when the fault fired, and
  // before the next fault fired (or the end).
  size_t rollbacks_at_fire = 0, rollbacks_until = 0;
  // A lost worker rolled forward: the step its replacement trained first (its log says).
  int64_t rolled_forward_from = -1;
  std::string path;
  // A fault point (Fault::fault_point): when the drill first saw its marker, the file the
  // target creates as it fires (TANDEM_FAILPOINT_ONCE).
  std::optional<Clock::time_point> point_seen_at;
};

// The marker a fault point of the faulty run creates when it fires (TANDEM_FAILPOINT_ONCE).
std::string FaultPointMarker(const std::string& out_dir) { return out_dir + "/drill-fault-point"; }

// The chief's view of a `tandem local` job, read through its cluster.json.
class JobWatcher {
 public:
  explicit JobWatcher(std::string out_dir) : out_dir_(std::move(out_dir)) {}

  std::optional<ClusterFile> Cluster() const {
    auto f = ReadClusterFile(out_dir_ + "/cluster.json");
    if (!f.ok()) return std::nullopt;
    return *f;
  }

  std::optional<ClusterView> View() {
    if (!client_) {
      auto f = Cluster();
      if (!f) return std::nullopt;
      ChiefClientOptions o;
      for (const auto& m : f->members)
        if (m.task == "chief:0") o.chief_endpoint = m.endpoint;
      auto id = ParseJobId(f->job_id);
      if (o.chief_endpoint.empty() || !id.ok()) return std::nullopt;
      o.identity.job_id = *id;
      o.identity.role = wire::Role::TOOL;
      o.call_budget = milliseconds(500);
      client_ = std::make_unique<ChiefClient>(&context_, o);
    }
    auto v = client_->View(milliseconds(500));
    if (!v.ok()) return std::nullopt;
    return *v;
  }

  int Pid(const std::string& task) const {
    auto f = Cluster();
    if (f)
      for (const auto& m : f->members)
        if (m.task == task) return m.pid;
    return 0;
  }

 private:
  std::string out_dir_;
  zmq::context_t context_{1};
  std::unique_ptr<ChiefClient> client_;
};

// `role` as a fault names it: by its name, checked when the faults were parsed.
const MemberView* FindMember(const ClusterView& v, const std::string& role, int index) {
  const auto r = config::ParseRole(role);
  for (const auto& m : v.members)
    if (m.role == r && static_cast<int>(m.index) == index) return &m;
  return nullptr;
}

std::string LogOf(const std::string& out_dir, const Fault& f) {
  return out_dir + "/logs/" + f.role + "-" + std::to_string(f.index) + ".log";
}

uintmax_t FileSize(const std::string& path) {
  std::error_code ec;
  auto n = fs::file_size(path, ec);
  return ec ? 0 : n;
}

// Flips the first byte of checkpoint.dir/LATEST; returns the corrupted content or an error.
StatusOr<std::string> CorruptLatest(const std::string& checkpoint_dir) {
  const std::string path = checkpoint_dir + "/LATEST";
  std::string content = ReadAll(path);
  if (content.empty()) return Status::NotFound(path + " does not exist yet");
  content[0] = static_cast<char>(content[0] ^ 0xff);
  std::fstream out(path, std::ios::in | std::ios::out | std::ios::binary);
  out.seekp(0);
  out.write(content.data(), 1);
  if (!out) return Status::Unavailable("cannot write " + path);
  return content;
}

struct Context {
  const config::JobConfig* job;
  std::string out_dir;
};

// Fires `r.fault` against the running job.
// Whole-job rollbacks `tandem local` has announced in its output so far.
size_t CountRollbacks(const std::string& out_dir) {
  const std::string log = ReadAll(out_dir + "/drill-local.log");
  size_t n = 0;
  for (size_t at = log.find("rolling back"); at != std::string::npos;
       at = log.find("rolling back", at + 1))
    ++n;
  return n;
}

FaultRecord::Marks MarksOf(const ClusterView& view, const Fault& f) {
  FaultRecord::Marks marks{0, view.term, view.timeline};
  if (const MemberView* m = FindMember(view, f.role, f.index)) marks.incarnation = m->incarnation;
  return marks;
}

// Applies the network actions of `r` that are due (all of them with `all`), in order.
void RunDueNetActions(FaultRecord& r, bool all = false) {
  while (!r.net_actions.empty() && (all || Clock::now() >= r.net_actions.front().at)) {
    Status s = r.net_actions.front().run();
    if (!s.ok()) std::fprintf(stderr, "tandem drill: %s\n", s.ToString().c_str());
    r.net_actions.erase(r.net_actions.begin());
  }
}

// The links a partition or a flap changes, and when (cli/netns.h: a member's switch port goes
// down for a cut; a partition between two members drops their frames to each other only).
Status PlanNetworkFault(JobWatcher& watcher, FaultRecord& r) {
  const Fault& f = r.fault;
  auto cluster = watcher.Cluster();
  auto member = [&](const std::string& task) -> const ClusterMember* {
    if (cluster)
      for (const auto& m : cluster->members)
        if (m.task == task) return &m;
    return nullptr;
  };
  const ClusterMember* a = member(f.task());
  if (a == nullptr || a->netns.empty() || a->link.empty())
    return Status::FailedPrecondition(
        f.task() +
        " has no network namespace (cluster.json): network faults "
        "need `tandem local --netns`, which the drill starts as root");
  const auto now = Clock::now();
  const auto end = now + f.duration;
  r.cont_at = end;
  const std::string link = a->link;
  auto set_link = [link](bool up) { return [link, up] { return SetLink(link, up); }; };
  if (f.kind == FaultKind::kFlap) {
    for (int c = 0; c < f.flaps; ++c) {
      r.net_actions.push_back({now + 2 * c * kFlapHalfCycle, set_link(false)});
      r.net_actions.push_back({now + (2 * c + 1) * kFlapHalfCycle, set_link(true)});
    }
    return Status::Ok();
  }
  if (f.peer_role.empty()) {
    r.net_actions.push_back({now, set_link(false)});
    r.net_actions.push_back({end, set_link(true)});
    return Status::Ok();
  }
  const ClusterMember* b = member(f.peer_task());
  if (b == nullptr || b->netns.empty())
    return Status::FailedPrecondition(f.peer_task() + " has no network namespace (cluster.json)");
  auto ip = [](const ClusterMember& m) {
    const std::string e = m.endpoint.substr(m.endpoint.find("://") + 3);
    return e.substr(0, e.rfind(':'));
  };
  auto block = [a_ns = a->netns, a_ip = ip(*a), b_ns = b->netns, b_ip = ip(*b)](bool on) {
    return [=] { return SetBlocked(a_ns, a_ip, b_ns, b_ip, on); };
  };
  r.net_actions.push_back({now, block(true)});
  r.net_actions.push_back({end, block(false)});
  std::stable_sort(r.net_actions.begin(), r.net_actions.end(),
                   [](const auto& x, const auto& y) { return x.at < y.at; });
  return Status::Ok();
}

void Fire(const Context& ctx, JobWatcher& watcher, const std::optional<ClusterView>& view,
          int64_t step, FaultRecord& r) {
  const Fault& f = r.fault;
  r.rollbacks_at_fire = CountRollbacks(ctx.out_dir);
  r.fired_at_step = step;
  r.step_before = step;
  if (view && !f.fault_point()) r.before = MarksOf(*view, f);
  if (f.fault_point()) {
    // The target fired it itself; its pid, marks and log size are the last ones seen before
    // (RunFaulty), the step is the one its log names (failpoint::Fires logs it before the
    // process dies): a restore point's fires at the first one from its step on.
    r.fired_at_step = f.step;
    const std::string log = ReadAll(LogOf(ctx.out_dir, f));
    const std::string mark = "fault point " + std::string(f.point_name()) + " fires at step ";
    if (const size_t at = log.find(mark, r.log_offset); at != std::string::npos)
      r.fired_at_step = std::max<int64_t>(f.step, std::atoll(log.c_str() + at + mark.size()));
    r.step_before = r.fired_at_step - 1;
  } else if (f.kind == FaultKind::kCorruptLatest) {
    auto c = CorruptLatest(ctx.job->checkpoint.dir);
    if (!c.ok()) {
      r.error = c.status().message();
      return;
    }
    r.corrupted_latest = *c;
  } else {
    r.pid = watcher.Pid(f.task());
    r.log_offset = FileSize(LogOf(ctx.out_dir, f));
    if (r.pid <= 0) {
      r.error = "no pid for " + f.task() + " in cluster.json";
      return;
    }
    if (f.network()) {
      if (Status s = PlanNetworkFault(watcher, r); !s.ok()) {
        r.error = s.message();
        return;
      }
      RunDueNetActions(r);
    } else if (f.kind == FaultKind::kKill) {
      ::kill(r.pid, SIGKILL);
    } else if (f.kind == FaultKind::kStop) {
      ::kill(r.pid, SIGSTOP);
      r.cont_at = Clock::now() + f.duration;
    } else {  // lose: stopped while its data goes, so that no restart can race the delete
      ::kill(r.pid, SIGSTOP);
      std::error_code ec;
      fs::remove_all(ctx.job->ps.data_dir + "/shard-" + std::to_string(f.index), ec);
      ::kill(r.pid, SIGKILL);
    }
  }
  r.fired = true;
  r.fired_at = r.point_seen_at.value_or(Clock::now());
  std::printf("tandem drill: step %lld: %s (pid %d)\n", static_cast<long long>(r.fired_at_step),
              f.ToString().c_str(), r.pid);
  std::fflush(stdout);
}

// Updates detection and recovery of a fired fault from what is observable now.
// `latest`: r is the fault fired last, the one a job failure now is put down to.
void Observe(const std::optional<ClusterView>& view, JobWatcher& watcher, int64_t step,
             const Context& ctx, bool latest, bool superseded, FaultRecord& r) {
  if (!r.fired) return;
  const Fault& f = r.fault;
  // A corrupt LATEST is repaired only by the next commit, whatever fired meanwhile.
  if (f.kind == FaultKind::kCorruptLatest) superseded = false;
  if (!r.detect_ms && !superseded) {
    std::string by;
    if (f.kind == FaultKind::kCorruptLatest) {
      const std::string now = ReadAll(ctx.job->checkpoint.dir + "/LATEST");
      if (!now.empty() && now != r.corrupted_latest)
        by = "LATEST rewritten by the next checkpoint commit";
    } else if (f.role == "chief") {
      if (view && view->term > r.before.term)
        by = "restarted chief answers with term " + std::to_string(view->term);
    } else {
      const MemberView* m = view ? FindMember(*view, f.role, f.index) : nullptr;
      if (m && m->state == MemberState::kLost)
        by = "chief declared " + f.task() + " lost" +
             (m->lost_reason.empty() ? "" : " (" + m->lost_reason + ")");
      else if (m && m->incarnation != 0 && m->incarnation != r.before.incarnation)
        by = f.task() + " re-registered as incarnation " + std::to_string(m->incarnation);
    }
    if (by.empty() && !f.role.empty() && f.kind != FaultKind::kStop) {
      const int pid = watcher.Pid(f.task());
      if (pid > 0 && pid != r.pid)
        by = "supervisor restarted it (pid " + std::to_string(r.pid) + " -> " +
             std::to_string(pid) + ")";
    }
    if (!by.empty()) {
      r.detect_ms = MsSince(r.fired_at);
      r.detected_by = by;
    }
  }
  if (view && !superseded) r.after = MarksOf(*view, f);
  if (!f.role.empty() && !superseded)
    if (const int pid = watcher.Pid(f.task()); pid > 0) r.last_pid = pid;
  // The chief's view lags the workers by up to a heartbeat, so steps already under way when a
  // process was killed can still appear: after a kill, progress counts only once the fault has
  // been seen (restart, new incarnation or term).
  // The job failed after the fault (it is rolled back): the steps its survivors went on with
  // are lost, and recovery counts from the rolled-back run's progress.
  if (latest && view && view->job_state == JobState::kFailed) {
    r.recovery_ms.reset();
    r.step_at_failure = std::max(r.step_at_failure, step);
    r.resumed_from.reset();
  } else if (view && r.step_at_failure >= 0 && !r.resumed_from &&
             view->job_state == JobState::kTraining) {
    r.resumed_from = view->resume_step;
  }
  // After a rollback the steps start again below the highest ever seen: progress is the rolled
  // back run's own.
  if (r.step_at_failure >= 0)
    step = view && view->job_state == JobState::kTraining ? view->step : -1;
  // A stop or a network fault may pass unnoticed (shorter than the timeouts): progress after
  // its end is the recovery.
  const bool needs_detection =
      f.kind == FaultKind::kKill || f.kind == FaultKind::kLose || f.fault_point();
  // A stopped process replaced meanwhile (killed on the chief's verdict) no longer holds the
  // job up: its SIGCONT, still due, changes nothing.
  const MemberView* m = view && !f.role.empty() ? FindMember(*view, f.role, f.index) : nullptr;
  const bool replaced =
      m != nullptr && m->incarnation != 0 && m->incarnation != r.before.incarnation;
  if (!r.recovery_ms && step > r.step_before && (!r.cont_at || replaced) &&
      (r.detect_ms || !needs_detection))
    r.recovery_ms = MsSince(r.fired_at);
}

// The observable recovery path of `r`, read after the run (also rolled_forward_from).
std::string PathOf(const Context& ctx, FaultRecord& r) {
  const Fault& f = r.fault;
  std::string path;
  if (f.kind == FaultKind::kCorruptLatest) {
    path = r.detect_ms ? "LATEST rewritten by the next commit" : "LATEST left corrupt";
  } else if (f.role == "chief" && f.network() && r.after.term == r.before.term) {
    path = "the link came back: training went on, the chief declared nobody lost (term " +
           std::to_string(r.after.term) + ")";
  } else if (f.role == "chief" && f.kind == FaultKind::kStop && r.after.term == r.before.term) {
    path = "resumed after SIGCONT, no restart (term " + std::to_string(r.after.term) + ")";
  } else if (f.role == "chief") {
    path = "chief restart (term " + std::to_string(r.before.term) + " -> " +
           std::to_string(r.after.term) + ")";
  } else {
    const bool restarted = r.after.incarnation != r.before.incarnation ||
                           r.detected_by.find("restarted") != std::string::npos;
    if (f.kind == FaultKind::kStop && !restarted) {
      path = "resumed after SIGCONT, no restart";
    } else if (f.network() && !restarted) {
      path = r.detect_ms ? "the link came back, no restart"
                         : "the link came back: no loss declared, no restart";
      if (f.role == "worker") {
        // The group broke with nobody lost (worker/roll_forward/replica_group.h): the worker's own
        // account.
        std::string log = ReadAll(LogOf(ctx.out_dir, f));
        if (r.log_end > r.log_offset && r.log_end < log.size())
          log.resize(r.log_end);  // a later fault's regroup is not this one's
        // Whoever asked for it, every worker of the group logs the rebuild (replica_group.cc);
        // with nobody lost and nobody restarted, only a regroup raises the generation.
        const std::string mark = "all-reduce group rebuilt under generation ";
        if (const size_t at = log.find(mark, r.log_offset); at != std::string::npos)
          path += " + regroup (the all-reduce group broke with nobody lost; rebuilt under " +
                  std::string("generation ") +
                  std::to_string(std::atoll(log.c_str() + at + mark.size())) + ", rolled forward)";
      }
    } else if (!r.detect_ms) {
      path = "no restart seen";
    } else {
      // A member cut off and declared lost rejoins as a new incarnation of the same process
      // (common/daemon/member.h) unless `tandem local` killed it on the chief's verdict first.
      path = f.network() && r.last_pid == r.pid ? f.role + " rejoin (same pid, incarnation " +
                                                      std::to_string(r.after.incarnation) + ")"
                                                : f.role + " restart";
      if (f.role == "worker") {
        // The replacement's own account (worker/training_loop.cc) in its log, after the fault.
        const std::string log = ReadAll(LogOf(ctx.out_dir, f));
        const std::string mark = "joined the running job: training from step ";
        const size_t at = log.find(mark, r.log_offset);
        if (at != std::string::npos) {
          r.rolled_forward_from = std::atoll(log.c_str() + at + mark.size());
          path +=
              " + roll forward (the replacement took the survivors' dense state and trained "
              "from step " +
              std::to_string(r.rolled_forward_from) + ")";
        }
      }
      if (f.role == "ps") {
        // The shard's own account (server/ps/shard.cc) in its log, after the fault.
        const std::string log = ReadAll(LogOf(ctx.out_dir, f));
        const size_t at = log.find("recovered: restore point", r.log_offset);
        if (at != std::string::npos) {
          const size_t start = log.rfind("shard", at);
          const size_t end = log.find('\n', at);
          path += " + log replay (" +
                  log.substr(start == std::string::npos ? at : start,
                             end == std::string::npos ? std::string::npos : end - start) +
                  ")";
        }
      }
    }
  }
  if (r.rollbacks_until > r.rollbacks_at_fire)
    path += "; global rollback: the whole job restarted from the last committed checkpoint";
  if (r.after.timeline > r.before.timeline)
    path += "; global rollback (timeline " + std::to_string(r.before.timeline) + " -> " +
            std::to_string(r.after.timeline) + ")";
  return path;
}

std::vector<std::string> LocalArgv(const LocalArgs& a, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {SelfExecutable(),
                                   "local",
                                   "--config",
                                   a.config_path,
                                   "--ps",
                                   std::to_string(a.num_ps),
                                   "--workers",
                                   std::to_string(a.num_workers),
                                   "--max-restarts",
                                   std::to_string(a.max_restarts),
                                   "--max-rollbacks",
                                   std::to_string(a.max_rollbacks),
                                   "--log-level",
                                   a.log_level};
  for (const auto& s : a.sets) argv.insert(argv.end(), {"--set", s});
  for (const auto& s : extra) argv.insert(argv.end(), {"--set", s});
  if (a.netns) argv.push_back("--netns");
  return argv;
}

StatusOr<Subprocess> StartLocal(const LocalArgs& a, const std::vector<std::string>& extra,
                                const std::string& out_dir, std::vector<std::string> env = {}) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  SpawnOptions o;
  o.argv = LocalArgv(a, extra);
  // Only the faulty run arms a fault point (`env`); one armed by the caller's own environment
  // would fire in the reference run too.
  o.unset_env = {"TANDEM_FAILPOINT", "TANDEM_FAILPOINT_ONCE"};
  o.set_env = std::move(env);
  o.output_path = out_dir + "/drill-local.log";
  return Subprocess::Spawn(o);
}

// Waits for `p`; a stop signal is passed on to it (it stops its job cleanly).
ExitInfo AwaitLocal(Subprocess& p, const sigset_t& signals) {
  for (;;) {
    if (auto e = p.Wait(milliseconds(0))) return *e;
    int sig = 0;
    if (WaitStopSignal(signals, milliseconds(200), &sig)) p.Signal(SIGTERM);
  }
}

struct RunResult {
  std::string out_dir;
  ExitInfo exit;
  nlohmann::json final_line;       // the last `"final": true` line of metrics.jsonl; null if none
  StepTimeline steps;              // empty for a reference run the drill did not run itself
  std::optional<int64_t> wall_ms;  // `tandem local` start to exit
};

nlohmann::json FinalLine(const std::string& out_dir) {
  std::istringstream in(ReadAll(out_dir + "/metrics.jsonl"));
  nlohmann::json last;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.value("final", false)) last = j;
  }
  return last;
}

// Runs the job under the faults of `records` (none: the fault-free run, with `extra` settings),
// firing each when the job's step reaches it.
RunResult RunJob(const DrillArgs& args, const Context& ctx, const std::vector<std::string>& extra,
                 std::vector<FaultRecord>& records, const sigset_t& signals) {
  RunResult result;
  result.out_dir = ctx.out_dir;
  const Clock::time_point started = Clock::now();
  // A fault point is armed in every daemon's environment (the named one fires it) and fires
  // once: the marker keeps the target's replacement from dying at the same step again.
  std::vector<std::string> env;
  const std::string marker = FaultPointMarker(ctx.out_dir);
  for (const auto& r : records) {
    if (!r.fault.fault_point()) continue;
    std::error_code ec;
    fs::remove(marker, ec);
    env = {"TANDEM_FAILPOINT=" + r.fault.FailpointSpec(), "TANDEM_FAILPOINT_ONCE=" + marker};
  }
  auto p = StartLocal(args.local, extra, ctx.out_dir, std::move(env));
  if (!p.ok()) {
    std::fprintf(stderr, "tandem drill: %s\n", p.status().ToString().c_str());
    result.exit.exit_code = kExitRuntimeFailure;
    return result;
  }
  JobWatcher watcher(ctx.out_dir);
  int64_t step = -1;
  size_t next = 0;
  for (;;) {
    const bool running = p->running();
    std::optional<ClusterView> view = running ? watcher.View() : std::nullopt;
    if (view && view->step > step) step = view->step;
    if (view && view->job_state == JobState::kTraining) result.steps.Saw(Clock::now(), view->step);
    if (running && !view) result.steps.Blind(Clock::now());
    for (auto& r : records) {
      RunDueNetActions(r);
      if (r.cont_at && Clock::now() >= *r.cont_at && r.net_actions.empty()) {
        if (r.fault.kind == FaultKind::kStop) ::kill(r.pid, SIGCONT);
        r.cont_at.reset();
      }
      // A fault fired well after this one owns what happens from then on (restarts, new
      // incarnations); faults fired together share it.
      const bool superseded = std::any_of(records.begin(), records.end(), [&](const auto& o) {
        return o.fired && o.fired_at - r.fired_at > std::chrono::seconds(2);
      });
      Observe(view, watcher, step, ctx, next > 0 && &r == &records[next - 1], superseded, r);
    }
    // A fault point fires inside its target: until its marker shows, the drill keeps what the
    // fault's record needs from before (the target's pid and log size, the chief's marks). It
    // fired when the marker was written (the target dies right after), up to a poll ago.
    for (auto& r : records) {
      if (!r.fault.fault_point() || r.fired || r.point_seen_at) continue;
      std::error_code ec;
      const auto written = fs::last_write_time(marker, ec);
      if (!ec) {
        const auto age = std::chrono::file_clock::now() - written;
        r.point_seen_at = Clock::now() - std::chrono::duration_cast<Clock::duration>(
                                             std::clamp(age, decltype(age)::zero(),
                                                        decltype(age)(milliseconds(args.poll_ms))));
        continue;
      }
      if (const int pid = watcher.Pid(r.fault.task()); pid > 0) r.pid = pid;
      if (view) r.before = MarksOf(*view, r.fault);
      r.log_offset = FileSize(LogOf(ctx.out_dir, r.fault));
    }
    // `@rollback N`: once `tandem local` rolled back N times and every worker of the new run
    // trains (its all-reduce group formed), with the processes in cluster.json (the chief's
    // view and the file name the same pid).
    auto due = [&](const Fault& f) {
      if (f.fault_point()) return records[next].point_seen_at.has_value();
      if (f.after_rollbacks == 0) return step >= f.step;
      if (CountRollbacks(ctx.out_dir) < static_cast<size_t>(f.after_rollbacks)) return false;
      for (const MemberView& m : view->members)
        if (m.role == config::Role::kWorker && m.state != MemberState::kTraining) return false;
      if (f.role.empty()) return true;
      const MemberView* m = FindMember(*view, f.role, f.index);
      return m != nullptr && m->pid != 0 && static_cast<int>(m->pid) == watcher.Pid(f.task());
    };
    while (running && view && view->job_state == JobState::kTraining && next < records.size() &&
           due(records[next].fault))
      Fire(ctx, watcher, view, step, records[next++]);
    if (!running) break;
    int sig = 0;
    if (WaitStopSignal(signals, milliseconds(args.poll_ms), &sig)) {
      p->Signal(SIGTERM);
      break;
    }
  }
  for (auto& r : records) {
    RunDueNetActions(r, /*all=*/true);
    if (r.cont_at && r.fault.kind == FaultKind::kStop) ::kill(r.pid, SIGCONT);
  }
  result.exit = AwaitLocal(*p, signals);
  result.wall_ms = MsSince(started);
  const Clock::time_point ended = Clock::now();
  result.final_line = FinalLine(ctx.out_dir);
  const int64_t final_step =
      result.final_line.is_object() ? result.final_line.value("step", int64_t{-1}) : -1;
  const size_t rollbacks = CountRollbacks(ctx.out_dir);
  for (size_t i = 0; i < records.size(); ++i) {
    records[i].rollbacks_until = rollbacks;
    for (size_t j = i + 1; j < records.size(); ++j)
      if (records[j].fired) {
        records[i].rollbacks_until = records[j].rollbacks_at_fire;
        break;
      }
    for (size_t j = i + 1; j < records.size(); ++j)
      if (records[j].fired && !records[i].fault.role.empty() &&
          LogOf(ctx.out_dir, records[j].fault) == LogOf(ctx.out_dir, records[i].fault)) {
        records[i].log_end = records[j].log_offset;
        break;
      }
  }
  for (auto& r : records) {
    if (!r.fired && r.error.empty())
      r.error = "never fired: the job ended at step " + std::to_string(step);
    // Progress past the fault that the polling missed, or a fault fired once the last step was
    // trained (the end of the job was what was left): the job's successful end bounds it.
    if (r.fired && !r.recovery_ms && result.exit.exited() && result.exit.exit_code == 0 &&
        (final_step > r.step_before || final_step == ctx.job->train.steps - 1)) {
      r.recovery_ms = MsSince(r.fired_at);
      r.recovery_bound_only = true;
    }
    if (r.fired) r.path = PathOf(ctx, r);
  }
  // Each fault's stall, up to the last step seen or the next fault fired (faults fired in one
  // poll share it).
  for (size_t i = 0; i < records.size(); ++i) {
    FaultRecord& r = records[i];
    if (!r.fired) continue;
    Clock::time_point until = result.steps.last_advance().value_or(ended);
    if (until <= r.fired_at) until = ended;
    for (size_t j = i + 1; j < records.size(); ++j)
      if (records[j].fired && records[j].fired_at - r.fired_at >= milliseconds(args.poll_ms)) {
        until = std::min(until, records[j].fired_at);
        break;
      }
    if (const auto pause = result.steps.LongestPause(r.fired_at, until))
      r.stall_ms = pause->count();
  }
  // A job that failed did not recover from the last fault before it failed, whatever progress
  // the lagging view showed after it.
  const bool job_ok = result.exit.exited() && result.exit.exit_code == 0;
  for (auto it = records.rbegin(); !job_ok && it != records.rend(); ++it) {
    if (!it->fired) continue;
    it->recovery_ms.reset();
    it->recovery_bound_only = false;
    it->error = "the job failed after it (tandem local: " + result.exit.ToString() + ")";
    break;
  }
  return result;
}

std::string Ms(const std::optional<int64_t>& ms) {
  if (!ms) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2fs", static_cast<double>(*ms) / 1000);
  return buf;
}

// Steps trained twice because of the fault: after a rollback, from the checkpoint resumed from
// to the highest step reached before; 0 when nothing rolled back.
int64_t StepsReplayed(const FaultRecord& r) {
  // Rolled forward: the steps from the one the replacement trained first to the highest the
  // job had completed (at most one).
  if (r.rolled_forward_from >= 0 && r.rollbacks_until == r.rollbacks_at_fire)
    return std::max<int64_t>(0, r.step_before + 1 - r.rolled_forward_from);
  if (r.step_at_failure < 0 || !r.resumed_from) return 0;
  return std::max<int64_t>(0, r.step_at_failure - *r.resumed_from);
}

nlohmann::json OrNull(const std::optional<int64_t>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json();
}

nlohmann::json RecordJson(const FaultRecord& r) {
  nlohmann::json j = {{"fault", r.fault.ToString()},
                      {"step", r.fault.step},
                      {"fired", r.fired},
                      {"fired_at_step", r.fired_at_step},
                      {"step_before", r.step_before},
                      {"pid", r.pid},
                      {"detected", r.detect_ms.has_value()},
                      {"detect_ms", OrNull(r.detect_ms)},
                      {"detected_by", r.detected_by},
                      {"recovered", r.recovery_ms.has_value()},
                      {"recovery_ms", OrNull(r.recovery_ms)},
                      {"recovery_ms_is_upper_bound", r.recovery_bound_only},
                      {"stall_ms", OrNull(r.stall_ms)},
                      {"steps_replayed", StepsReplayed(r)},
                      {"path", r.path}};
  if (!r.error.empty()) j["error"] = r.error;
  return j;
}

std::optional<int64_t> LongestPauseMs(const RunResult& r) {
  const auto pause = r.steps.LongestPause();
  if (!pause) return std::nullopt;
  return pause->count();
}

nlohmann::json RunJson(const RunResult& r) {
  const auto& f = r.final_line;
  return {{"output_dir", r.out_dir},
          {"exit", r.exit.ToString()},
          {"exit_code", r.exit.exit_code},
          {"final_step", f.is_object() ? f.value("step", nlohmann::json()) : nullptr},
          {"auc", f.is_object() ? f.value("auc", nlohmann::json()) : nullptr},
          {"model_checksum", f.is_object() ? f.value("model_checksum", "") : ""},
          {"wall_ms", OrNull(r.wall_ms)},
          {"longest_pause_ms", OrNull(LongestPauseMs(r))}};
}

void PrintTable(const std::vector<FaultRecord>& records) {
  std::printf("\n%-42s %7s %8s %9s %8s %8s  %s\n", "FAULT", "AT STEP", "DETECT", "RECOVERY",
              "STALL", "REPLAYED", "PATH");
  for (const auto& r : records) {
    std::printf(
        "%-42s %7lld %8s %9s %8s %8lld  %s\n", r.fault.ToString().c_str(),
        static_cast<long long>(r.fired_at_step), Ms(r.detect_ms).c_str(),
        r.recovery_ms ? (Ms(r.recovery_ms) + (r.recovery_bound_only ? "<" : "")).c_str() : "FAILED",
        Ms(r.stall_ms).c_str(), static_cast<long long>(StepsReplayed(r)),
        r.fired ? r.path.c_str() : r.error.c_str());
    if (!r.detected_by.empty()) std::printf("%-42s detected: %s\n", "", r.detected_by.c_str());
    if (r.fired && !r.error.empty()) std::printf("%-42s %s\n", "", r.error.c_str());
  }
}

}  // namespace

int RunDrill(const DrillArgs& args) {
  const sigset_t signals = BlockStopSignals();
  auto faults = ParseFaults(args.faults);
  if (!faults.ok()) {
    std::fprintf(stderr, "tandem drill: %s\n", faults.status().message().c_str());
    return kExitUsage;
  }
  std::vector<config::Override> overrides;
  for (const auto& s : args.local.sets) overrides.push_back({s});
  auto job = config::LoadJobConfig(args.local.config_path, overrides);
  if (!job.ok()) {
    std::fprintf(stderr, "tandem drill: %s\n", job.status().message().c_str());
    return kExitInvalid;
  }
  if (Status secured = ApplySecurity(*job); !secured.ok()) {
    std::fprintf(stderr, "tandem drill: %s\n", secured.message().c_str());
    return kExitInvalid;
  }
  const Context ctx{&*job, job->output.dir};
  // Network faults need real links to cut: both runs then put every process on a host of its
  // own (tandem local --netns), so that they differ only by the faults.
  DrillArgs run_args = args;
  for (const auto& f : *faults) run_args.local.netns = run_args.local.netns || f.network();
  std::vector<FaultRecord> records;
  for (const auto& f : *faults) {
    FaultRecord r;
    r.fault = f;
    records.push_back(r);
  }

  std::printf("tandem drill: the job under %zu fault(s); its output in %s/drill-local.log\n",
              records.size(), ctx.out_dir.c_str());
  std::fflush(stdout);
  RunResult faulty = RunJob(run_args, ctx, {}, records, signals);

  RunResult reference;
  if (!args.reference.empty()) {
    reference.out_dir = args.reference;
    reference.exit.exit_code = 0;
    reference.final_line = FinalLine(args.reference);
  } else {
    const std::string suffix = "-reference";
    const std::string out = job->output.dir + suffix;
    std::error_code ec;
    for (const auto& d : {out, job->checkpoint.dir + suffix, job->ps.data_dir + suffix})
      fs::remove_all(d, ec);
    std::printf("tandem drill: the same job without faults; its output in %s/drill-local.log\n",
                out.c_str());
    std::fflush(stdout);
    std::vector<FaultRecord> none;
    reference = RunJob(run_args, Context{&*job, out},
                       {"output.dir=" + out, "checkpoint.dir=" + job->checkpoint.dir + suffix,
                        "ps.data_dir=" + job->ps.data_dir + suffix},
                       none, signals);
  }

  PrintTable(records);
  bool all_recovered = true;
  for (const auto& r : records) all_recovered = all_recovered && r.recovery_ms.has_value();
  const int64_t k = job->train.embedding_staleness;
  nlohmann::json report = {{"faults", nlohmann::json::array()},
                           {"run", RunJson(faulty)},
                           {"reference", RunJson(reference)},
                           {"embedding_staleness", k},
                           {"detection",
                            "the chief's view (lost member, new incarnation, new "
                            "term) or a new pid in cluster.json, polled every " +
                                std::to_string(args.poll_ms) + " ms"}};
  for (const auto& r : records) report["faults"].push_back(RecordJson(r));
  const std::string sum = report["run"]["model_checksum"];
  const std::string ref_sum = report["reference"]["model_checksum"];
  const bool job_ok = faulty.exit.exited() && faulty.exit.exit_code == 0;
  const bool ref_ok =
      !ref_sum.empty() && (reference.exit.exited() && reference.exit.exit_code == 0);
  const bool sums_equal = !sum.empty() && sum == ref_sum;
  const auto& auc = report["run"]["auc"];
  const auto& ref_auc = report["reference"]["auc"];
  report["checksums_equal"] = sums_equal;
  report["auc_difference"] = auc.is_number() && ref_auc.is_number()
                                 ? nlohmann::json(auc.get<double>() - ref_auc.get<double>())
                                 : nlohmann::json();
  const bool ok = all_recovered && job_ok && ref_ok && (k > 0 || sums_equal);
  report["all_recovered"] = all_recovered;
  report["ok"] = ok;
  // What the faults cost in time: the faulty run's wall time over the fault-free run's.
  report["time_lost_ms"] = faulty.wall_ms && reference.wall_ms
                               ? nlohmann::json(*faulty.wall_ms - *reference.wall_ms)
                               : nlohmann::json();

  std::printf("%-34s %s\n", "job under faults", faulty.exit.ToString().c_str());
  std::printf("%-34s %s\n", "fault-free run", reference.out_dir.c_str());
  // The floor a fault's STALL is read against: the chief hears of steps with heartbeats.
  std::printf("%-34s %s under faults, %s without (steps as the chief saw them)\n",
              "longest pause of the step", Ms(LongestPauseMs(faulty)).c_str(),
              Ms(LongestPauseMs(reference)).c_str());
  if (faulty.wall_ms && reference.wall_ms)
    std::printf("%-34s %s vs %s (fault-free): the faults cost %s\n", "wall time",
                Ms(faulty.wall_ms).c_str(), Ms(reference.wall_ms).c_str(),
                Ms(*faulty.wall_ms - *reference.wall_ms).c_str());
  std::printf("%-34s %s vs %s (fault-free)\n", "final AUC", auc.dump().c_str(),
              ref_auc.dump().c_str());
  std::printf("%-34s %s vs %s: %s%s\n", "model_checksum", sum.empty() ? "-" : sum.c_str(),
              ref_sum.empty() ? "-" : ref_sum.c_str(), sums_equal ? "equal" : "DIFFERENT",
              k > 0 ? " (k > 0: not required)" : "");
  std::printf("%-34s %s\n", "drill", ok ? "PASSED" : "FAILED");
  const std::string json_path = ctx.out_dir + "/drill.json";
  std::ofstream(json_path) << report.dump(2) << "\n";
  std::printf("report: %s\n", json_path.c_str());
  std::printf("plot:   scripts/plot_metrics.py %s/metrics.jsonl --faults %s\n", ctx.out_dir.c_str(),
              json_path.c_str());
  return ok ? kExitOk : kExitRuntimeFailure;
}

}  // namespace tandem::cli
