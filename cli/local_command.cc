#include "cli/local_command.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "cli/cluster_file.h"
#include "cli/netns.h"
#include "common/chief_client.h"
#include "common/config/job_config.h"
#include "common/daemon/security_setup.h"
#include "common/daemon/stop_signals.h"
#include "common/exit_codes.h"
#include "common/job_id.h"
#include "common/subprocess.h"
#include "worker/bad_line_report.h"
#include "worker/device/device_info.h"

namespace tandem::cli {

using daemon::ApplySecurity;
using daemon::BlockStopSignals;
using daemon::WaitStopSignal;
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

struct Child {
  config::Role role = config::Role::kWorker;
  int index = 0;
  std::string task() const { return config::TaskId{role, index}.ToString(); }
  std::string ready_file;
  std::string log_file;
  std::optional<Subprocess> process;
  std::string endpoint;
  std::string port = "0";  // once bound, a restart binds the same port: peers know it
  int host = 0;            // --netns: the host (namespace) it runs on
  int restarts = 0;
  bool new_run = false;   // chief: its first start in a run (see --new-run)
  bool finished = false;  // exited 0 (or 75): not restarted
  std::optional<ExitInfo> last_exit;
};

// The address list of `role` with this child's own slot at its known port, on its own host.
std::string Addresses(int n, const Child& c, config::Role role, const std::string& ip) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) {
    if (i) s += ",";
    s += c.role == role && c.index == i ? ip + ":" + c.port : std::string("127.0.0.1:0");
  }
  return s + "]";
}

// The GPUs `local` hands out to workers, one each in turn (CUDA_VISIBLE_DEVICES): those the
// supervisor itself may use, else every device found; none without CUDA or a device.
std::vector<std::string> WorkerGpus() {
  std::vector<std::string> ids;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::string list(visible), id;
    std::istringstream in(list);
    while (std::getline(in, id, ','))
      if (!id.empty()) ids.push_back(id);
    return ids;
  }
  const int count = device::ProbeDevices().device_count;
  for (int i = 0; i < count; ++i) ids.push_back(std::to_string(i));
  return ids;
}

Status StartChild(const LocalArgs& args, const std::string& job_hex, const std::string& chief_port,
                  const HostNetwork* net, bool cuda_workers, Child* c) {
  std::error_code ec;
  std::filesystem::remove(c->ready_file, ec);
  SpawnOptions o;
  if (net != nullptr) o.argv = net->Exec(c->host);
  const std::string ip = net != nullptr ? net->Address(c->host) : "127.0.0.1";
  const std::string chief_ip = net != nullptr ? net->Address(0) : "127.0.0.1";
  o.argv.insert(o.argv.end(), {SelfExecutable(), std::string(config::RoleName(c->role)), "--config",
                               args.config_path, "--task", c->task()});
  for (const auto& s : args.sets) o.argv.insert(o.argv.end(), {"--set", s});
  // The counts come from --ps/--workers; ports are 0 and read back from the ready file, except
  // the chief's (every member must find it) and a restarted child's own.
  o.argv.insert(
      o.argv.end(),
      {"--set", "cluster.chief=[" + chief_ip + ":" + chief_port + "]", "--set",
       "cluster.ps=" + Addresses(args.num_ps, *c, config::Role::kPs, ip), "--set",
       "cluster.workers=" + Addresses(args.num_workers, *c, config::Role::kWorker, ip), "--job-id",
       job_hex, "--ready-file", c->ready_file, "--log-level", args.log_level});
  // On a host of its own the collective runs over the host's one interface.
  if (net != nullptr) o.argv.insert(o.argv.end(), {"--set", "collective.iface=eth0"});
  // `local` starts every process of a run itself: no member outlived an earlier chief. A chief
  // restarted within the run rejoins it.
  if (c->new_run) o.argv.push_back("--new-run");
  c->new_run = false;
  o.unset_env = {"TF_CONFIG"};  // DESIGN §1: `local` ignores it and removes it from children
  // Worker i trains on GPU i (modulo the GPUs there are), seen in the worker as device 0. Only
  // a CUDA job probes: opening the CUDA libraries costs a CPU job ~0.35 s at every start.
  if (c->role == config::Role::kWorker && cuda_workers) {
    static const std::vector<std::string> gpus = WorkerGpus();
    if (!gpus.empty())
      o.set_env = {"CUDA_VISIBLE_DEVICES=" + gpus[static_cast<size_t>(c->index) % gpus.size()]};
  }
  o.output_path = c->log_file;
  auto p = Subprocess::Spawn(o);
  if (!p.ok()) return p.status();
  c->process.emplace(std::move(p).value());
  return Status::Ok();
}

std::string Tail(const std::string& path, size_t max_bytes) {
  std::ifstream in(path);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return all.size() > max_bytes ? all.substr(all.size() - max_bytes) : all;
}

// Waits for the child's ready file; fails if it exits first or time runs out.
Status AwaitReady(Child* c, Clock::time_point deadline) {
  for (;;) {
    std::ifstream in(c->ready_file);
    if (in) {
      auto j = nlohmann::json::parse(in, nullptr, false);
      if (!j.is_discarded() && j.contains("address")) {
        c->endpoint = j["address"].get<std::string>();
        c->port = c->endpoint.substr(c->endpoint.rfind(':') + 1);
        return Status::Ok();
      }
    }
    if (!c->process->running())
      return Status::Unavailable(c->task() + " exited (" + c->process->exit_info()->ToString() +
                                 ") before binding; its log:\n" + Tail(c->log_file, 2000));
    if (Clock::now() > deadline)
      return Status::DeadlineExceeded(c->task() + " did not bind in time");
    std::this_thread::sleep_for(milliseconds(20));
  }
}

void WriteCluster(const std::string& path, const std::string& job_hex, const std::string& keys,
                  const HostNetwork* net, std::vector<Child>& children) {
  ClusterFile f{job_hex, {}, {}};
  if (!keys.empty()) f.security_keys = std::filesystem::absolute(keys).string();
  for (auto& c : children)
    f.members.push_back({c.task(), c.endpoint, c.process ? c.process->pid() : 0,
                         net != nullptr ? net->Namespace(c.host) : "",
                         net != nullptr ? net->Link(c.host) : ""});
  if (Status s = WriteClusterFile(path, f); !s.ok())
    std::fprintf(stderr, "tandem local: %s\n", s.ToString().c_str());
}

// Stops every child still running: SIGTERM, then SIGKILL after `grace`.
// SIGTERM to every child, then SIGKILL to those still running when `grace` has passed (one
// deadline for all: children stuck at once do not add up their waits).
void StopAll(std::vector<Child>& children, milliseconds grace) {
  for (auto& c : children)
    if (c.process && c.process->running()) c.process->Signal(SIGTERM);
  const auto deadline = Clock::now() + grace;
  for (auto& c : children) {
    if (!c.process || c.last_exit) continue;
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    c.last_exit = c.process->Stop(std::max(left, milliseconds(0)));
  }
}

std::string Duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", static_cast<long>(t / 3600),
                  static_cast<long>(t % 3600 / 60));
  else
    std::snprintf(buf, sizeof buf, "%ldm%02lds", static_cast<long>(t / 60),
                  static_cast<long>(t % 60));
  return buf;
}

std::string Num(double v, const char* fmt) {
  if (!std::isfinite(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// The "tasks" object of metrics.jsonl's final line (each label's figures; written only when the
// job has several labels), or null. The chief's view carries the first label's alone.
// ordered_json: the labels stay in data.labels order, as written.
nlohmann::ordered_json FinalTasks(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  nlohmann::ordered_json tasks;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("\"final\"") == std::string::npos) continue;
    auto j = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.value("final", false) && j.contains("tasks") && j["tasks"].is_object())
      tasks = j["tasks"];
  }
  return tasks;
}

double Figure(const nlohmann::ordered_json& task, const char* key) {
  const auto it = task.find(key);
  return it != task.end() && it->is_number() ? it->get<double>() : NAN;
}

std::string ProgressLine(const ClusterView& v, int up, int expected) {
  const int64_t done = v.step + 1;
  std::string line =
      "step " + std::to_string(std::max<int64_t>(done, 0)) + "/" + std::to_string(v.total_steps);
  line += " | " + Num(v.samples_per_sec / 1000.0, "%.1f") + "k samples/s";
  line += " | loss " + Num(v.loss, "%.4f");
  line += " | auc " + Num(v.auc, "%.4f");
  // ETA from the mean step rate since training began.
  double step_rate = NAN;
  if (v.elapsed_ms > 0 && done > 0)
    step_rate = static_cast<double>(done) / (static_cast<double>(v.elapsed_ms) / 1000.0);
  line += " | ETA " +
          Duration(step_rate > 0 ? static_cast<double>(v.total_steps - done) / step_rate : NAN);
  line += " | up " + std::to_string(up) + "/" + std::to_string(expected);
  line += " | " + std::string(Name(v.job_state));
  std::string held;
  for (const MemberView& m : v.members)
    if (!m.waiting_on.empty() && !m.waiting_on.ends_with(kWaitingGoesOn))
      held +=
          (held.empty() ? "" : ", ") + config::TaskId{m.role, static_cast<int>(m.index)}.ToString();
  if (!held.empty()) line += ", waiting on " + held;
  return line;
}

// One start of the whole job, supervised until it ends: the chief first, then every other
// member; then the chief's view is shown, dead children are restarted (or the job is given up)
// until every process has left, and the final block is printed.
class JobAttempt {
 public:
  JobAttempt(const LocalArgs& args, const config::JobConfig& job, const JobId& job_id,
             const sigset_t& stop_signals, const HostNetwork* net)
      : args_(args),
        job_(job),
        job_id_(job_id),
        job_hex_(job_id.ToHex()),
        out_(job.output.dir),
        stop_signals_(stop_signals),
        net_(net),
        cuda_(job.train.device == "cuda") {}

  // `chief_port_io`: where the previous attempt's chief was bound ("0": anywhere), then where
  // this one's is. `process_failed`: a child crashed or was declared lost and the job did not end
  // well, without a stop asked from outside.
  int Run(std::string* chief_port_io, bool* process_failed) {
    AddChildren(config::Role::kChief, 1);
    AddChildren(config::Role::kPs, args_.num_ps);
    AddChildren(config::Role::kWorker, args_.num_workers);
    for (size_t k = 0; k < children_.size(); ++k) children_[k].host = static_cast<int>(k);
    std::printf("tandem local: job %s: 1 chief, %d ps, %d workers, %ld steps; logs in %s/logs\n",
                job_hex_.c_str(), args_.num_ps, args_.num_workers,
                static_cast<long>(job_.train.steps), out_.c_str());
    if (std::optional<int> failed = StartAll(chief_port_io)) return *failed;
    ConnectToTheChief();
    while (SuperviseOnce()) {
    }
    if (tty_) std::printf("\n");
    return Report(process_failed);
  }

 private:
  void AddChildren(config::Role role, int n) {
    const std::string name(config::RoleName(role));
    for (int i = 0; i < n; ++i) {
      Child c;
      c.role = role;
      c.index = i;
      c.ready_file = out_ + "/run/" + name + "-" + std::to_string(i) + ".json";
      c.log_file = out_ + "/logs/" + name + "-" + std::to_string(i) + ".log";
      children_.push_back(std::move(c));
    }
  }

  int FailStart(const Status& s, Child& c) {
    std::fprintf(stderr, "tandem local: %s\n", s.message().c_str());
    StopAll(children_, milliseconds(5000));
    return c.process && c.process->exit_info() && c.process->exit_info()->exit_code == kExitInvalid
               ? kExitInvalid
               : kExitRuntimeFailure;
  }

  // The chief first: every other member is told its port. The exit status when a child cannot
  // start, nullopt once every process is bound.
  std::optional<int> StartAll(std::string* chief_port_io) {
    const auto start_deadline = Clock::now() + std::chrono::seconds(args_.start_timeout_s);
    Child& chief = children_[0];
    chief.new_run = true;
    chief.port = *chief_port_io;  // bind where the previous attempt's chief was, if any
    if (Status s = StartChild(args_, job_hex_, *chief_port_io, net_, cuda_, &chief); !s.ok())
      return FailStart(s, chief);
    if (Status s = AwaitReady(&chief, start_deadline); !s.ok()) return FailStart(s, chief);
    chief_port_ = chief.port;
    *chief_port_io = chief_port_;
    for (size_t i = 1; i < children_.size(); ++i)
      if (Status s = StartChild(args_, job_hex_, chief_port_, net_, cuda_, &children_[i]); !s.ok())
        return FailStart(s, children_[i]);
    for (size_t i = 1; i < children_.size(); ++i)
      if (Status s = AwaitReady(&children_[i], start_deadline); !s.ok())
        return FailStart(s, children_[i]);
    cluster_path_ = out_ + "/cluster.json";
    WriteCluster(cluster_path_, job_hex_, job_.security.keys, net_, children_);
    std::printf("tandem local: %d processes bound; chief at %s; cluster file %s\n",
                static_cast<int>(children_.size()), chief.endpoint.c_str(), cluster_path_.c_str());
    return std::nullopt;
  }

  // Only the chief's view reaches the terminal: one live line on a TTY, plain lines otherwise.
  void ConnectToTheChief() {
    ChiefClientOptions co;
    co.chief_endpoint = children_[0].endpoint;
    co.identity.job_id = job_id_;
    co.identity.role = wire::Role::TOOL;
    tool_ = std::make_unique<ChiefClient>(&context_, co);
    tty_ = ::isatty(STDOUT_FILENO) == 1;
    last_plain_ = Clock::now();
  }

  // One pass of the supervision: false once every process has left or the wait is over.
  bool SuperviseOnce() {
    if (!HandleStopSignal()) return false;
    // Once the chief has left (the job ended) nobody answers: asking would wait out the whole
    // timeout after every job (issue 21: end-of-job time).
    auto chief_running = [this] {
      return std::any_of(children_.begin(), children_.end(), [](Child& c) {
        return c.role == config::Role::kChief && !c.finished && c.process && c.process->running();
      });
    };
    // A chief that leaves while the request is out never answers it: the wait ends with it.
    auto view = chief_running() ? tool_->View(milliseconds(1000), [&] { return !chief_running(); })
                                : StatusOr<ClusterView>(Status::Unavailable("the chief has left"));
    if (view.ok()) last_view_ = *view;
    int up = 0;
    bool changed = false;
    for (auto& c : children_) SuperviseChild(c, view, &up, &changed);
    if (changed) WriteCluster(cluster_path_, job_hex_, job_.security.keys, net_, children_);
    StopIfEveryWorkerLeft();
    if (view.ok()) ShowProgress(*view, up);
    const bool all_exited =
        std::all_of(children_.begin(), children_.end(), [](const Child& c) { return c.finished; });
    if (all_exited) return false;
    // Members leave on their own once the job has ended; do not wait for stragglers forever.
    // A failed job's checkpoint is committed and its members may be blocked on the member that
    // failed it: a short grace then, before they are stopped.
    const bool failed = last_view_ && last_view_->job_state == JobState::kFailed;
    const auto grace = failed ? std::chrono::milliseconds(1000)
                              : std::chrono::milliseconds(job_.collective.timeout_ms + 20000);
    if ((ended_at_ && Clock::now() - *ended_at_ > grace) ||
        (stop_asked_ && Clock::now() - *stop_asked_ > grace)) {
      gave_up_ = true;
      return false;
    }
    return true;
  }

  // Waits a moment for a stop signal: the first asks the chief to stop the job, a second stops
  // every process now (false).
  bool HandleStopSignal() {
    int sig = 0;
    // 100 ms: how late the exit of the last process (the job's end) is noticed.
    if (WaitStopSignal(stop_signals_, milliseconds(100), &sig)) {
      if (stop_asked_) {
        std::printf("\ntandem local: second stop signal: stopping every process now\n");
        return false;
      }
      stop_asked_ = Clock::now();
      user_stop_ = true;
      std::printf("\ntandem local: stopping the job (again to stop at once)\n");
      auto r = tool_->StopJob("stop signal to tandem local");
      stop_told_ = r.ok();
      if (!r.ok())
        std::printf("tandem local: the chief did not answer: %s\n", r.status().ToString().c_str());
    } else if (stop_asked_ && !stop_told_) {
      // The chief was away (killed and being restarted): ask its successor.
      stop_told_ = tool_->StopJob("stop signal to tandem local").ok();
    }
    return true;
  }

  // A running child the chief declared lost is killed; an exited one is left, restarted, or
  // given up on.
  void SuperviseChild(Child& c, const StatusOr<ClusterView>& view, int* up, bool* changed) {
    if (c.finished) return;
    if (c.process->running()) {
      ++*up;
      // The chief's verdict: a member it declared lost is killed, then restarted below.
      if (view.ok())
        for (const auto& m : view->members)
          if (m.role == c.role && static_cast<int>(m.index) == c.index &&
              m.state == MemberState::kLost && m.pid == static_cast<uint32_t>(c.process->pid())) {
            std::printf("\ntandem local: the chief declared %s lost (%s); killing pid %d\n",
                        c.task().c_str(), m.lost_reason.c_str(), c.process->pid());
            c.process->Signal(SIGKILL);
            child_failed_ = true;
          }
      return;
    }
    const ExitInfo e = *c.process->exit_info();
    c.last_exit = e;
    if (e.exited() && (e.exit_code == kExitOk || Replaced(c, e, view))) {
      c.finished = true;
      return;
    }
    bool job_over = last_view_ && IsTerminal(last_view_->job_state);
    bool stopping = stop_asked_.has_value();
    // A child that refuses its input (exit 3) would fail the same way after a rollback.
    if (!user_stop_ && !(e.exited() && e.exit_code == kExitInvalid)) child_failed_ = true;
    if (c.role == config::Role::kChief) {
      // The members still need a chief after the job ended or a stop was asked: to commit the
      // final checkpoint and to tell them the job ended. It rejoins the run (PROTOCOLS §10).
      const bool others_run = std::any_of(children_.begin(), children_.end(), [](const Child& o) {
        return o.role != config::Role::kChief && !o.finished;
      });
      job_over = job_over && !others_run;
      stopping = stopping && !others_run;
    }
    if (job_over || stopping || c.restarts >= args_.max_restarts) {
      if (!job_over && !stopping) {
        failure_ = c.task() + " ended (" + e.ToString() + ") " + std::to_string(c.restarts) +
                   " times; giving up (its log: " + c.log_file + ")";
        std::printf("\ntandem local: %s\n", failure_.c_str());
        tool_->StopJob(failure_).status().IgnoreError();
        stop_asked_ = Clock::now();
      }
      c.finished = true;
      return;
    }
    c.restarts++;
    std::printf("\ntandem local: %s ended (%s); restarting (%d of %d)\n", c.task().c_str(),
                e.ToString().c_str(), c.restarts, args_.max_restarts);
    if (StartChild(args_, job_hex_, chief_port_, net_, cuda_, &c).ok() &&
        AwaitReady(&c, Clock::now() + std::chrono::seconds(args_.start_timeout_s)).ok())
      *changed = true;
  }

  // Fenced (75): another incarnation holds the rank, unless the chief declared this one lost
  // and nobody replaced it yet (it saw the verdict before it was killed): restart it then.
  static bool Replaced(const Child& c, const ExitInfo& e, const StatusOr<ClusterView>& view) {
    return e.exited() && e.exit_code == kExitFenced &&
           !(view.ok() &&
             std::any_of(view->members.begin(), view->members.end(), [&](const auto& m) {
               return m.role == c.role && static_cast<int>(m.index) == c.index &&
                      (m.state == MemberState::kLost ||
                       m.pid == static_cast<uint32_t>(c.process->pid()));
             }));
  }

  // Every worker exited 0 but the chief never heard the job end: a worker reports its result
  // once, and a chief killed at that moment restarts without it. Ask the chief to stop the job
  // then, or the shards would wait for its end forever.
  void StopIfEveryWorkerLeft() {
    const bool workers_gone = std::all_of(children_.begin(), children_.end(), [](Child& c) {
      return c.role != config::Role::kWorker ||
             (c.finished && c.last_exit && c.last_exit->exit_code == 0);
    });
    if (workers_gone && !workers_gone_at_) workers_gone_at_ = Clock::now();
    if (workers_gone_at_ && !stop_asked_ && !(last_view_ && IsTerminal(last_view_->job_state)) &&
        Clock::now() - *workers_gone_at_ > milliseconds(2 * job_.chief.heartbeat_timeout_ms)) {
      std::printf(
          "\ntandem local: every worker has exited but the job has not ended: stopping it\n");
      stop_asked_ = Clock::now();
      stop_told_ = tool_->StopJob("every worker exited before the chief heard the job end").ok();
    }
  }

  // Says once what holds a member (a PS whose disk is full refuses pushes, and the job waits
  // for it rather than fail into a rollback onto the same disk), and when it no longer does.
  void ShowWaits(const ClusterView& view) {
    for (const MemberView& m : view.members) {
      const std::string who = config::TaskId{m.role, static_cast<int>(m.index)}.ToString();
      std::string& shown = waits_shown_[who];
      if (m.waiting_on == shown) continue;
      if (tty_) std::printf("\r\033[K");
      // A member that goes on meanwhile (rank 0 keeping its metrics lines) says so itself.
      if (m.waiting_on.ends_with(kWaitingGoesOn))
        std::printf("tandem local: %s: %s\n", who.c_str(), m.waiting_on.c_str());
      else if (!m.waiting_on.empty())
        std::printf("tandem local: %s is %s; the job waits until it can (free space there)\n",
                    who.c_str(), m.waiting_on.c_str());
      else
        std::printf("tandem local: %s goes on\n", who.c_str());
      shown = m.waiting_on;
    }
  }

  void ShowProgress(const ClusterView& view, int up) {
    ShowWaits(view);
    const std::string line = ProgressLine(view, up, static_cast<int>(children_.size()));
    if (tty_) {
      std::printf("\r\033[K%s", line.c_str());
      std::fflush(stdout);
    } else if (Clock::now() - last_plain_ >= std::chrono::seconds(args_.plain_progress_every_s) ||
               IsTerminal(view.job_state)) {
      if (!IsTerminal(view.job_state) || !ended_at_) std::printf("%s\n", line.c_str());
      last_plain_ = Clock::now();
    }
    if (IsTerminal(view.job_state) && !ended_at_) ended_at_ = Clock::now();
  }

  // Stops what is left and prints the final block; the exit status.
  int Report(bool* process_failed) {
    // A failed job is rolled back or given up: its members need no clean exit (the checkpoint
    // it goes back to is committed), and those blocked on the member that failed would only
    // stall.
    const bool job_failed = last_view_ && last_view_->job_state == JobState::kFailed;
    StopAll(children_, milliseconds(job_failed ? 2000 : 10000));
    int bad_exits = 0;
    for (auto& c : children_) {
      if (!c.last_exit) continue;
      if (!c.last_exit->exited() || (c.last_exit->exit_code != 0 && c.last_exit->exit_code != 75)) {
        ++bad_exits;
        std::printf("tandem local: %s ended with %s (log %s)\n", c.task().c_str(),
                    c.last_exit->ToString().c_str(), c.log_file.c_str());
      }
    }
    if (gave_up_)
      std::printf("tandem local: some processes did not leave in time and were stopped\n");
    if (!last_view_) {
      std::printf("tandem local: the chief never answered (log %s)\n",
                  children_[0].log_file.c_str());
      return kExitRuntimeFailure;
    }
    const ClusterView& v = *last_view_;
    PrintFinalBlock(v);
    if (!failure_.empty() || v.job_state == JobState::kFailed || !IsTerminal(v.job_state)) {
      *process_failed = child_failed_ && !user_stop_;
      return kExitRuntimeFailure;
    }
    return bad_exits == 0 ? kExitOk : kExitRuntimeFailure;
  }

  void PrintFinalBlock(const ClusterView& v) const {
    std::printf("tandem local: job %s after step %ld of %ld, %s\n",
                std::string(Name(v.job_state)).c_str(), static_cast<long>(v.step),
                static_cast<long>(v.total_steps),
                Duration(static_cast<double>(v.elapsed_ms) / 1000.0).c_str());
    if (v.job_state == JobState::kDone) {
      std::printf("  final auc      %s", Num(v.auc, "%.5f").c_str());
      if (std::isfinite(v.teacher_auc))
        std::printf("   (teacher auc %s: the best achievable)", Num(v.teacher_auc, "%.5f").c_str());
      std::printf("\n  final logloss  %s\n", Num(v.logloss, "%.5f").c_str());
      PrintTasks();
      std::printf("  last loss      %s\n", Num(v.loss, "%.5f").c_str());
      // Once done, each worker reports its mean rate over the run (eval excluded).
      std::printf("  samples/s      %s (mean over the steps this run trained)\n",
                  Num(v.samples_per_sec, "%.0f").c_str());
      std::printf("  model_checksum %s\n", v.model_checksum.c_str());
    } else if (!v.detail.empty()) {
      std::printf("  %s\n", v.detail.c_str());
    }
    PrintBadLines(v);
    std::printf("  outputs: %s/metrics.jsonl, %s/tensorboard, logs in %s/logs\n", out_.c_str(),
                out_.c_str(), out_.c_str());
  }

  // One line per label when there are several (the figures above are the first label's).
  void PrintTasks() const {
    const nlohmann::ordered_json tasks = FinalTasks(out_ + "/metrics.jsonl");
    if (!tasks.is_object() || tasks.size() < 2) return;
    size_t width = 0;
    for (const auto& [label, _] : tasks.items()) width = std::max(width, label.size());
    for (const auto& [label, task] : tasks.items()) {
      std::printf("  label %-*s auc %s  logloss %s", static_cast<int>(width), label.c_str(),
                  Num(Figure(task, "auc"), "%.5f").c_str(),
                  Num(Figure(task, "logloss"), "%.5f").c_str());
      const double teacher = Figure(task, "teacher_auc");
      if (std::isfinite(teacher)) std::printf("  teacher auc %s", Num(teacher, "%.5f").c_str());
      std::printf("\n");
    }
  }

  // Malformed lines are skipped below data.max_bad_fraction: said here, or a dirty file would go
  // unnoticed (issue 18). The count is the chief's (every worker's heartbeats); the reports are
  // in the files the workers keep under output.dir/bad_lines. A worker that failed may not have
  // told the chief its last count, so the larger of the two is shown.
  void PrintBadLines(const ClusterView& v) const {
    const std::vector<worker::BadLinesFile> files = worker::ReadAllBadLinesFiles(out_);
    int64_t in_files = 0;
    for (const auto& f : files) in_files += f.count;
    const int64_t count = std::max(v.bad_lines, in_files);
    std::printf("  malformed lines %lld", static_cast<long long>(count));
    if (count > 0)
      std::printf(
          " (skipped, below data.max_bad_fraction %g; reports in %s/bad_lines and the "
          "worker logs)",
          job_.data.max_bad_fraction, out_.c_str());
    std::printf("\n");
    size_t shown = 0;
    for (const auto& f : files)
      for (const auto& r : f.reports)
        if (shown++ < worker::kShownBadReports) std::printf("    %s\n", r.c_str());
  }

  const LocalArgs& args_;
  const config::JobConfig& job_;
  const JobId& job_id_;
  const std::string job_hex_;
  const std::string out_;
  const sigset_t& stop_signals_;
  const HostNetwork* net_;
  const bool cuda_;              // train.device: cuda: children get GPUs handed out
  std::vector<Child> children_;  // the chief first, then ps 0.., then workers 0..
  std::string chief_port_;
  std::string cluster_path_;
  zmq::context_t context_{1};
  std::unique_ptr<ChiefClient> tool_;
  bool tty_ = false;
  Clock::time_point last_plain_;
  std::optional<ClusterView> last_view_;
  std::map<std::string, std::string> waits_shown_;  // ShowWaits: the last text of each member
  std::optional<Clock::time_point> stop_asked_, ended_at_, workers_gone_at_;
  bool stop_told_ = false;     // the chief answered the stop request (it may be restarting)
  bool user_stop_ = false;     // a stop signal reached tandem local
  bool child_failed_ = false;  // a child crashed or was declared lost
  bool gave_up_ = false;
  std::string failure_;
};

}  // namespace

int RunLocal(const LocalArgs& args) {
  const sigset_t stop_signals = BlockStopSignals();
  // Progress lines must appear as they happen, also when stdout is a file or a pipe.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (args.num_ps < 1 || args.num_workers < 1) {
    std::fprintf(stderr, "tandem local: --ps and --workers must be >= 1\n");
    return kExitUsage;
  }
  std::vector<config::Override> overrides;
  for (const auto& s : args.sets) overrides.push_back({s});
  auto job = config::LoadJobConfig(args.config_path, overrides);
  if (!job.ok()) {
    std::fprintf(stderr, "tandem local: %s\n", job.status().message().c_str());
    return kExitInvalid;
  }
  if (Status secured = ApplySecurity(*job); !secured.ok()) {
    std::fprintf(stderr, "tandem local: %s\n", secured.message().c_str());
    return kExitInvalid;
  }
  auto job_id = LoadOrCreateJobId(job->checkpoint.dir);
  if (!job_id.ok()) {
    std::fprintf(stderr, "tandem local: %s\n", job_id.status().ToString().c_str());
    return kExitRuntimeFailure;
  }
  // A job that failed because a process failed is rolled back: every process is stopped and the
  // whole job started again, resuming from the last committed checkpoint (at k = 0 it then ends
  // with the model of a run without the failure).
  std::unique_ptr<HostNetwork> net;
  if (args.netns) {
    // One host per process; the subnet and names from this process's pid, so that two jobs on
    // one machine never share them.
    const int pid = static_cast<int>(::getpid());
    auto made = HostNetwork::Create(HostNetwork::OwnPrefix(), "198.19." + std::to_string(pid % 250),
                                    1 + args.num_ps + args.num_workers, /*attach_caller=*/true);
    if (!made.ok()) {
      std::fprintf(stderr, "tandem local: --netns: %s\n", made.status().message().c_str());
      return kExitRuntimeFailure;
    }
    net = std::move(made).value();
    std::printf(
        "tandem local: every process on a host of its own: namespaces %s..%s on the switch "
        "%s (198.19.%d.0/24)\n",
        net->Namespace(0).c_str(), net->Namespace(net->hosts() - 1).c_str(), net->Switch().c_str(),
        pid % 250);
  }
  std::string chief_port = "0";  // a rollback restarts the chief on the same port
  for (int rollback = 0;; ++rollback) {
    bool process_failed = false;
    JobAttempt attempt(args, *job, *job_id, stop_signals, net.get());
    const int status = attempt.Run(&chief_port, &process_failed);
    if (status == kExitOk || !process_failed || rollback >= args.max_rollbacks) return status;
    std::printf(
        "tandem local: the job failed after a process failed: rolling back, the whole job "
        "starts again from the last committed checkpoint (rollback %d of %d)\n",
        rollback + 1, args.max_rollbacks);
  }
}

}  // namespace tandem::cli
