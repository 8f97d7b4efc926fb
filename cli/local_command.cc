#include "cli/local_command.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "cli/cluster_file.h"
#include "cli/netns.h"
#include "cli/security_setup.h"
#include "cli/stop_signals.h"
#include "common/chief_client.h"
#include "common/config/job_config.h"
#include "common/exit_codes.h"
#include "common/job_id.h"
#include "common/subprocess.h"
#include "worker/device/device_info.h"

namespace tandem::cli {
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
                  const HostNetwork* net, Child* c) {
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
  // Worker i trains on GPU i (modulo the GPUs there are), seen in the worker as device 0.
  static const std::vector<std::string> gpus = WorkerGpus();
  if (c->role == config::Role::kWorker && !gpus.empty())
    o.set_env = {"CUDA_VISIBLE_DEVICES=" + gpus[static_cast<size_t>(c->index) % gpus.size()]};
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
  return line;
}

}  // namespace

static int RunOnce(const LocalArgs& args, const config::JobConfig& job_config,
                   const JobId& job_id_value, const sigset_t& stop_signals, const HostNetwork* net,
                   std::string* chief_port_io, bool* process_failed);

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
    const int status =
        RunOnce(args, *job, *job_id, stop_signals, net.get(), &chief_port, &process_failed);
    if (status == kExitOk || !process_failed || rollback >= args.max_rollbacks) return status;
    std::printf(
        "tandem local: the job failed after a process failed: rolling back, the whole job "
        "starts again from the last committed checkpoint (rollback %d of %d)\n",
        rollback + 1, args.max_rollbacks);
  }
}

// One start of the whole job, supervised until it ends. `process_failed`: a child crashed or was
// declared lost and the job did not end well, without a stop asked from outside.
static int RunOnce(const LocalArgs& args, const config::JobConfig& job_config,
                   const JobId& job_id_value, const sigset_t& stop_signals, const HostNetwork* net,
                   std::string* chief_port_io, bool* process_failed) {
  const config::JobConfig* job = &job_config;
  const JobId* job_id = &job_id_value;
  const std::string job_hex = job_id->ToHex();
  const std::string out = job->output.dir;
  std::vector<Child> children;
  auto add = [&](config::Role role, int n) {
    const std::string name(config::RoleName(role));
    for (int i = 0; i < n; ++i) {
      Child c;
      c.role = role;
      c.index = i;
      c.ready_file = out + "/run/" + name + "-" + std::to_string(i) + ".json";
      c.log_file = out + "/logs/" + name + "-" + std::to_string(i) + ".log";
      children.push_back(std::move(c));
    }
  };
  add(config::Role::kChief, 1);
  add(config::Role::kPs, args.num_ps);
  add(config::Role::kWorker, args.num_workers);
  for (size_t k = 0; k < children.size(); ++k) children[k].host = static_cast<int>(k);
  const int expected = static_cast<int>(children.size());
  std::printf("tandem local: job %s: 1 chief, %d ps, %d workers, %ld steps; logs in %s/logs\n",
              job_hex.c_str(), args.num_ps, args.num_workers, static_cast<long>(job->train.steps),
              out.c_str());

  // The chief first: every other member is told its port.
  const auto start_deadline = Clock::now() + std::chrono::seconds(args.start_timeout_s);
  Child& chief = children[0];
  chief.new_run = true;
  auto fail_start = [&](const Status& s, Child& c) {
    std::fprintf(stderr, "tandem local: %s\n", s.message().c_str());
    StopAll(children, milliseconds(5000));
    return c.process && c.process->exit_info() && c.process->exit_info()->exit_code == kExitInvalid
               ? kExitInvalid
               : kExitRuntimeFailure;
  };
  chief.port = *chief_port_io;  // bind where the previous attempt's chief was, if any
  if (Status s = StartChild(args, job_hex, *chief_port_io, net, &chief); !s.ok())
    return fail_start(s, chief);
  if (Status s = AwaitReady(&chief, start_deadline); !s.ok()) return fail_start(s, chief);
  const std::string chief_port = chief.port;
  *chief_port_io = chief_port;
  for (size_t i = 1; i < children.size(); ++i)
    if (Status s = StartChild(args, job_hex, chief_port, net, &children[i]); !s.ok())
      return fail_start(s, children[i]);
  for (size_t i = 1; i < children.size(); ++i)
    if (Status s = AwaitReady(&children[i], start_deadline); !s.ok())
      return fail_start(s, children[i]);
  const std::string cluster_path = out + "/cluster.json";
  WriteCluster(cluster_path, job_hex, job->security.keys, net, children);
  std::printf("tandem local: %d processes bound; chief at %s; cluster file %s\n", expected,
              chief.endpoint.c_str(), cluster_path.c_str());

  // Only the chief's view reaches the terminal: one live line on a TTY, plain lines otherwise.
  ChiefClientOptions co;
  co.chief_endpoint = chief.endpoint;
  co.identity.job_id = *job_id;
  co.identity.role = wire::Role::TOOL;
  zmq::context_t context(1);
  ChiefClient tool(&context, co);
  const bool tty = ::isatty(STDOUT_FILENO) == 1;
  auto last_plain = Clock::now();
  std::optional<ClusterView> last_view;
  std::optional<Clock::time_point> stop_asked, ended_at, workers_gone_at;
  bool stop_told = false;     // the chief answered the stop request (it may be restarting)
  bool user_stop = false;     // a stop signal reached tandem local
  bool child_failed = false;  // a child crashed or was declared lost
  bool gave_up = false;
  std::string failure;
  for (;;) {
    int sig = 0;
    if (WaitStopSignal(stop_signals, milliseconds(250), &sig)) {
      if (stop_asked) {
        std::printf("\ntandem local: second stop signal: stopping every process now\n");
        break;
      }
      stop_asked = Clock::now();
      user_stop = true;
      std::printf("\ntandem local: stopping the job (again to stop at once)\n");
      auto r = tool.StopJob("stop signal to tandem local");
      stop_told = r.ok();
      if (!r.ok())
        std::printf("tandem local: the chief did not answer: %s\n", r.status().ToString().c_str());
    } else if (stop_asked && !stop_told) {
      // The chief was away (killed and being restarted): ask its successor.
      stop_told = tool.StopJob("stop signal to tandem local").ok();
    }
    // Once the chief has left (the job ended) nobody answers: asking would wait out the whole
    // timeout after every job (issue 21: end-of-job time).
    const bool chief_running = std::any_of(children.begin(), children.end(), [](Child& c) {
      return c.role == config::Role::kChief && !c.finished && c.process && c.process->running();
    });
    auto view = chief_running ? tool.View(milliseconds(1000))
                              : StatusOr<ClusterView>(Status::Unavailable("the chief has left"));
    if (view.ok()) last_view = *view;

    int up = 0;
    bool changed = false;
    for (auto& c : children) {
      if (c.finished) continue;
      if (c.process->running()) {
        ++up;
        // The chief's verdict: a member it declared lost is killed, then restarted below.
        if (view.ok())
          for (const auto& m : view->members)
            if (m.role == c.role && static_cast<int>(m.index) == c.index &&
                m.state == MemberState::kLost && m.pid == static_cast<uint32_t>(c.process->pid())) {
              std::printf("\ntandem local: the chief declared %s lost (%s); killing pid %d\n",
                          c.task().c_str(), m.lost_reason.c_str(), c.process->pid());
              c.process->Signal(SIGKILL);
              child_failed = true;
            }
        continue;
      }
      const ExitInfo e = *c.process->exit_info();
      c.last_exit = e;
      // Fenced (75): another incarnation holds the rank, unless the chief declared this one
      // lost and nobody replaced it yet (it saw the verdict before it was killed): restart it.
      const bool replaced =
          e.exited() && e.exit_code == kExitFenced &&
          !(view.ok() &&
            std::any_of(view->members.begin(), view->members.end(), [&](const auto& m) {
              return m.role == c.role && static_cast<int>(m.index) == c.index &&
                     (m.state == MemberState::kLost ||
                      m.pid == static_cast<uint32_t>(c.process->pid()));
            }));
      if (e.exited() && (e.exit_code == kExitOk || replaced)) {
        c.finished = true;
        continue;
      }
      bool job_over = last_view && IsTerminal(last_view->job_state);
      bool stopping = stop_asked.has_value();
      // A child that refuses its input (exit 3) would fail the same way after a rollback.
      if (!user_stop && !(e.exited() && e.exit_code == kExitInvalid)) child_failed = true;
      if (c.role == config::Role::kChief) {
        // The members still need a chief after the job ended or a stop was asked: to commit the
        // final checkpoint and to tell them the job ended. It rejoins the run (PROTOCOLS §10).
        const bool others_run = std::any_of(children.begin(), children.end(), [](const Child& o) {
          return o.role != config::Role::kChief && !o.finished;
        });
        job_over = job_over && !others_run;
        stopping = stopping && !others_run;
      }
      if (job_over || stopping || c.restarts >= args.max_restarts) {
        if (!job_over && !stopping) {
          failure = c.task() + " ended (" + e.ToString() + ") " + std::to_string(c.restarts) +
                    " times; giving up (its log: " + c.log_file + ")";
          std::printf("\ntandem local: %s\n", failure.c_str());
          tool.StopJob(failure).status().IgnoreError();
          stop_asked = Clock::now();
        }
        c.finished = true;
        continue;
      }
      c.restarts++;
      std::printf("\ntandem local: %s ended (%s); restarting (%d of %d)\n", c.task().c_str(),
                  e.ToString().c_str(), c.restarts, args.max_restarts);
      if (StartChild(args, job_hex, chief_port, net, &c).ok() &&
          AwaitReady(&c, Clock::now() + std::chrono::seconds(args.start_timeout_s)).ok())
        changed = true;
    }
    if (changed) WriteCluster(cluster_path, job_hex, job->security.keys, net, children);
    // Every worker exited 0 but the chief never heard the job end: a worker reports its result
    // once, and a chief killed at that moment restarts without it. Ask the chief to stop the job
    // then, or the shards would wait for its end forever.
    const bool workers_gone = std::all_of(children.begin(), children.end(), [](Child& c) {
      return c.role != config::Role::kWorker ||
             (c.finished && c.last_exit && c.last_exit->exit_code == 0);
    });
    if (workers_gone && !workers_gone_at) workers_gone_at = Clock::now();
    if (workers_gone_at && !stop_asked && !(last_view && IsTerminal(last_view->job_state)) &&
        Clock::now() - *workers_gone_at > milliseconds(2 * job->chief.heartbeat_timeout_ms)) {
      std::printf(
          "\ntandem local: every worker has exited but the job has not ended: stopping it\n");
      stop_asked = Clock::now();
      stop_told = tool.StopJob("every worker exited before the chief heard the job end").ok();
    }

    if (view.ok()) {
      const std::string line = ProgressLine(*view, up, expected);
      if (tty) {
        std::printf("\r\033[K%s", line.c_str());
        std::fflush(stdout);
      } else if (Clock::now() - last_plain >= std::chrono::seconds(args.plain_progress_every_s) ||
                 IsTerminal(view->job_state)) {
        if (!IsTerminal(view->job_state) || !ended_at) std::printf("%s\n", line.c_str());
        last_plain = Clock::now();
      }
      if (IsTerminal(view->job_state) && !ended_at) ended_at = Clock::now();
    }
    const bool all_exited =
        std::all_of(children.begin(), children.end(), [](const Child& c) { return c.finished; });
    if (all_exited) break;
    // Members leave on their own once the job has ended; do not wait for stragglers forever.
    // A failed job's checkpoint is committed and its members may be blocked on the member that
    // failed it: a short grace then, before they are stopped.
    const bool failed = last_view && last_view->job_state == JobState::kFailed;
    const auto grace = failed ? std::chrono::milliseconds(1000)
                              : std::chrono::milliseconds(job->collective.timeout_ms + 20000);
    if ((ended_at && Clock::now() - *ended_at > grace) ||
        (stop_asked && Clock::now() - *stop_asked > grace)) {
      gave_up = true;
      break;
    }
  }
  if (tty) std::printf("\n");
  // A failed job is rolled back or given up: its members need no clean exit (the checkpoint it
  // goes back to is committed), and those blocked on the member that failed would only stall.
  const bool job_failed = last_view && last_view->job_state == JobState::kFailed;
  StopAll(children, milliseconds(job_failed ? 2000 : 10000));
  int bad_exits = 0;
  for (auto& c : children) {
    if (!c.last_exit) continue;
    if (!c.last_exit->exited() || (c.last_exit->exit_code != 0 && c.last_exit->exit_code != 75)) {
      ++bad_exits;
      std::printf("tandem local: %s ended with %s (log %s)\n", c.task().c_str(),
                  c.last_exit->ToString().c_str(), c.log_file.c_str());
    }
  }
  if (gave_up) std::printf("tandem local: some processes did not leave in time and were stopped\n");

  if (!last_view) {
    std::printf("tandem local: the chief never answered (log %s)\n", chief.log_file.c_str());
    return kExitRuntimeFailure;
  }
  const ClusterView& v = *last_view;
  std::printf("tandem local: job %s after step %ld of %ld, %s\n",
              std::string(Name(v.job_state)).c_str(), static_cast<long>(v.step),
              static_cast<long>(v.total_steps),
              Duration(static_cast<double>(v.elapsed_ms) / 1000.0).c_str());
  if (v.job_state == JobState::kDone) {
    std::printf("  final auc      %s", Num(v.auc, "%.5f").c_str());
    if (std::isfinite(v.teacher_auc))
      std::printf("   (teacher auc %s: the best achievable)", Num(v.teacher_auc, "%.5f").c_str());
    std::printf("\n  final logloss  %s\n", Num(v.logloss, "%.5f").c_str());
    std::printf("  last loss      %s\n", Num(v.loss, "%.5f").c_str());
    // Once done, each worker reports its mean rate over the run (eval excluded).
    std::printf("  samples/s      %s (mean over the steps this run trained)\n",
                Num(v.samples_per_sec, "%.0f").c_str());
    std::printf("  model_checksum %s\n", v.model_checksum.c_str());
  } else if (!v.detail.empty()) {
    std::printf("  %s\n", v.detail.c_str());
  }
  std::printf("  outputs: %s/metrics.jsonl, %s/tensorboard, logs in %s/logs\n", out.c_str(),
              out.c_str(), out.c_str());
  if (!failure.empty() || v.job_state == JobState::kFailed || !IsTerminal(v.job_state)) {
    *process_failed = child_failed && !user_stop;
    return kExitRuntimeFailure;
  }
  return bad_exits == 0 ? kExitOk : kExitRuntimeFailure;
}

}  // namespace tandem::cli
