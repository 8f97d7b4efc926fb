// configs/k8s/ on this machine, without Kubernetes: the entry script the manifests run (taken
// from their ConfigMap) maps tandem's exit statuses as each restart policy needs, passes SIGTERM
// on and takes a StatefulSet pod's task from its host name; the real `tandem chief|ps|worker`
// accept the exact TF_CONFIG the training operator writes (DNS names that do not resolve here:
// the daemon binds every interface and advertises the name); and a whole job trains through the
// entry script with TF_CONFIG in the operator's layout on 127.0.0.1.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/subprocess.h"
#include "common/testing/k8s_manifests.h"
#include "common/testing/test_util.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

const std::string kTfJob = K8sDir(TANDEM_SOURCE_DIR) + "/tfjob.yaml";

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

YAML::Node ConfigMap() {
  auto maps = OfKind(LoadYamlDocuments(kTfJob), "ConfigMap");
  EXPECT_EQ(maps.size(), 1u);
  return maps.empty() ? YAML::Node() : maps.front();
}

// Every descendant of `root`, from /proc (children before the processes they were forked by
// are irrelevant: everything is killed).
std::vector<pid_t> Descendants(pid_t root) {
  std::map<pid_t, std::vector<pid_t>> children;
  for (const fs::directory_entry& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(stat.c_str() + close + 1, " %c %d", &state, &ppid) != 2) continue;
    children[ppid].push_back(std::stoi(name));
  }
  std::vector<pid_t> out;
  std::vector<pid_t> todo = {root};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    for (pid_t c : children[p]) {
      out.push_back(c);
      todo.push_back(c);
    }
  }
  return out;
}

// The entry script under test, run as a pod runs it; everything it started is killed with it.
class Entry {
 public:
  Entry(const TempDir& dir, std::string name) : dir_(dir), name_(std::move(name)) {
    script_ = dir.File("entry.sh");
    if (!fs::exists(script_)) WriteFile(script_, ConfigMap()["data"]["entry.sh"].as<std::string>());
    log_ = dir.File(name_ + ".log");
  }
  ~Entry() { Kill(); }

  void Start(const std::vector<std::string>& args, std::vector<std::string> env = {}) {
    SpawnOptions o;
    o.argv = {"/bin/sh", script_};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    env.push_back("TANDEM_PARKED_FILE=" + parked());
    o.set_env = env;
    o.unset_env = {"TF_CONFIG", "TANDEM_RESTART_MARKERS", "TANDEM_RESTART_DELAY_S"};
    o.output_path = log_;
    auto p = Subprocess::Spawn(o);
    ASSERT_TRUE(p.ok()) << p.status();
    process_.emplace(std::move(p).value());
  }
  // Runs to the end (at most `limit`); the exit status, -1 when it had to be killed.
  int Run(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
          milliseconds limit = milliseconds(20000)) {
    Start(args, env);
    auto e = Wait(limit);
    return e ? e->exit_code : -1;
  }
  std::optional<ExitInfo> Wait(milliseconds limit) {
    if (!process_) return std::nullopt;
    auto e = process_->Wait(limit);
    if (!e) {
      ADD_FAILURE() << name_ << " still runs after " << limit.count() << " ms; log:\n" << log();
      Kill();
    }
    return e;
  }
  void Signal(int sig) {
    if (process_) process_->Signal(sig);
  }
  // SIGTERM, and the daemon behind the script leaves 0 within a minute.
  void StopExpectingExit0() {
    Signal(SIGTERM);
    auto e = Wait(milliseconds(60000));
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->exit_code, 0) << log();
  }
  bool running() { return process_ && process_->running(); }
  void Kill() {
    if (!process_ || !process_->running()) return;
    for (pid_t p : Descendants(process_->pid())) ::kill(p, SIGKILL);
    process_->Signal(SIGKILL);
    process_->Wait(milliseconds(5000));
  }
  std::string log() const { return ReadFile(log_); }
  std::string parked() const { return dir_.File(name_ + ".parked"); }

 private:
  const TempDir& dir_;
  std::string name_;
  std::string script_;
  std::string log_;
  std::optional<Subprocess> process_;
};

// A stand-in for tandem: writes its arguments to $FAKE_ARGS, then exits $FAKE_EXIT, kills
// itself with $FAKE_SIGNAL, or ($FAKE_WAIT) waits for SIGTERM and exits $FAKE_ON_TERM (its trap
// is set once $FAKE_ARGS.trapped exists).
std::string FakeTandem(const TempDir& dir) {
  const std::string path = dir.File("fake-tandem");
  WriteFile(path,
            "#!/bin/sh\n"
            "echo \"$*\" >\"$FAKE_ARGS\"\n"
            "if [ -n \"${FAKE_SIGNAL:-}\" ]; then kill -\"$FAKE_SIGNAL\" $$; fi\n"
            "if [ -n \"${FAKE_WAIT:-}\" ]; then\n"
            "  trap 'echo TERM >>\"$FAKE_ARGS\"; kill $sleeper; exit \"${FAKE_ON_TERM:-0}\"' TERM\n"
            "  echo trapped >\"$FAKE_ARGS.trapped\"\n"
            "  sleep 60 & sleeper=$!\n"
            "  wait $sleeper\n"
            "fi\n"
            "exit \"${FAKE_EXIT:-0}\"\n");
  ::chmod(path.c_str(), 0755);
  return path;
}

bool WaitUntil(const std::function<bool()>& done, milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return done();
}

// tfjob: the operator restarts 128-255 only, so 1 and 76 leave as 201 and 202; 0, 2, 3 and 75
// leave as they are (75 and the rest fail the TFJob), and a death by signal stays 128+N.
TEST(K8sEntryTest, TfJobModeLeavesWhatMustRestartIn128To255) {
  TempDir dir;
  const std::string fake = FakeTandem(dir);
  const std::string args = "FAKE_ARGS=" + dir.File("args");
  const std::map<int, int> expected = {{0, 0}, {1, 201}, {2, 2}, {3, 3}, {75, 75}, {76, 202}};
  for (const auto& [tandem, wrapper] : expected) {
    Entry entry(dir, "exit-" + std::to_string(tandem));
    EXPECT_EQ(entry.Run({"tfjob", fake, "ps", "--config", "job.yaml"},
                        {args, "FAKE_EXIT=" + std::to_string(tandem)}),
              wrapper)
        << "tandem exited " << tandem << "; log:\n"
        << entry.log();
    EXPECT_TRUE(Contains(entry.log(), "tandem ps exited " + std::to_string(tandem))) << entry.log();
    // TF_CONFIG gives the task: the command line is tandem's own, nothing added.
    EXPECT_EQ(ReadFile(dir.File("args")), "ps --config job.yaml\n");
  }
  Entry killed(dir, "killed");
  EXPECT_EQ(killed.Run({"tfjob", fake, "worker"}, {args, "FAKE_SIGNAL=KILL"}), 128 + SIGKILL)
      << killed.log();
  Entry missing(dir, "missing");
  EXPECT_EQ(missing.Run({"tfjob", dir.File("no-such-tandem"), "ps"}), 127) << missing.log();
}

// statefulset: `--task ROLE:N` from the host name NAME-N; 1, 76 and deaths by signal leave for
// the kubelet to restart.
TEST(K8sEntryTest, StatefulSetModeTakesTheTaskFromTheHostName) {
  TempDir dir;
  const std::string fake = FakeTandem(dir);
  const std::vector<std::string> env = {"FAKE_ARGS=" + dir.File("args"),
                                        "HOSTNAME=tandem-sts-worker-3"};
  for (const auto& [extra, status] : std::vector<std::pair<std::string, int>>{
           {"FAKE_EXIT=1", 1}, {"FAKE_EXIT=76", 76}, {"FAKE_SIGNAL=KILL", 128 + SIGKILL}}) {
    Entry entry(dir, "sts-" + std::to_string(status));
    std::vector<std::string> e = env;
    e.push_back(extra);
    EXPECT_EQ(entry.Run({"statefulset", fake, "worker", "--config", "job.yaml"}, e), status)
        << entry.log();
    EXPECT_EQ(ReadFile(dir.File("args")), "worker --config job.yaml --task worker:3\n");
    EXPECT_FALSE(fs::exists(entry.parked()));
  }
}

// statefulset: the kubelet restarts every exit, so after 0, 2, 3 and 75 the script stays up
// without tandem (parked: the readiness probe's file) until SIGTERM, and then exits 0.
TEST(K8sEntryTest, StatefulSetModeKeepsWhatMustNotRestartDown) {
  TempDir dir;
  const std::string fake = FakeTandem(dir);
  for (int status : {0, 2, 3, 75}) {
    Entry entry(dir, "park-" + std::to_string(status));
    entry.Start({"statefulset", fake, "ps", "--config", "job.yaml"},
                {"FAKE_ARGS=" + dir.File("args"), "HOSTNAME=tandem-sts-ps-1",
                 "FAKE_EXIT=" + std::to_string(status)});
    ASSERT_TRUE(WaitUntil([&] { return fs::exists(entry.parked()); }, milliseconds(10000)))
        << status << ": " << entry.log();
    std::this_thread::sleep_for(milliseconds(300));
    EXPECT_TRUE(entry.running()) << status << ": it must stay up; log:\n" << entry.log();
    EXPECT_TRUE(Contains(entry.log(), "not restarted")) << entry.log();
    entry.Signal(SIGTERM);
    auto e = entry.Wait(milliseconds(10000));
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->exit_code, 0) << e->ToString();
  }
  // No index in the host name: tandem is not started, and nothing restarts.
  fs::remove(dir.File("args"));
  Entry bad(dir, "bad-host");
  bad.Start({"statefulset", fake, "ps"}, {"FAKE_ARGS=" + dir.File("args"), "HOSTNAME=tandem"});
  ASSERT_TRUE(WaitUntil([&] { return fs::exists(bad.parked()); }, milliseconds(10000)))
      << bad.log();
  EXPECT_FALSE(fs::exists(dir.File("args")));
  EXPECT_TRUE(Contains(bad.log(), "no task index in the host name")) << bad.log();
}

// SIGTERM (pod deletion) reaches tandem, which stops the job; the status it then exits with is
// the script's (mapped in tfjob mode; never parked: the pod is going away).
TEST(K8sEntryTest, SigtermReachesTandemAndItsStatusIsKept) {
  TempDir dir;
  const std::string fake = FakeTandem(dir);
  for (const auto& [mode, on_term, status] : std::vector<std::tuple<std::string, int, int>>{
           {"tfjob", 0, 0}, {"tfjob", 1, 201}, {"statefulset", 0, 0}, {"statefulset", 75, 75}}) {
    const std::string args = dir.File("args-" + mode + std::to_string(on_term));
    Entry entry(dir, "term-" + mode + std::to_string(on_term));
    entry.Start({mode, fake, "worker"},
                {"FAKE_ARGS=" + args, "FAKE_WAIT=1", "FAKE_ON_TERM=" + std::to_string(on_term),
                 "HOSTNAME=tandem-sts-worker-0"});
    ASSERT_TRUE(WaitForFile(args + ".trapped", milliseconds(10000))) << entry.log();
    entry.Signal(SIGTERM);
    auto e = entry.Wait(milliseconds(10000));
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->exit_code, status) << mode << " " << on_term << ": " << entry.log();
    EXPECT_TRUE(Contains(ReadFile(args), "TERM")) << "tandem never saw SIGTERM";
  }
}

// A task that ran before waits TANDEM_RESTART_DELAY_S first (in a fresh PID namespace its pid,
// host name and address are its predecessor's); exit 0 removes its marker.
TEST(K8sEntryTest, ARestartedTaskWaitsForItsPredecessorToBeDeclaredLost) {
  TempDir dir;
  const std::string fake = FakeTandem(dir);
  const std::string markers = dir.File("restarts");
  auto env = [&](int status) {
    return std::vector<std::string>{"FAKE_ARGS=" + dir.File("args"),
                                    "FAKE_EXIT=" + std::to_string(status),
                                    "HOSTNAME=tandem-worker-1", "TANDEM_RESTART_MARKERS=" + markers,
                                    "TANDEM_RESTART_DELAY_S=2"};
  };
  Entry first(dir, "first");
  EXPECT_EQ(first.Run({"tfjob", fake, "worker"}, env(1)), 201);
  EXPECT_FALSE(Contains(first.log(), "started before")) << first.log();
  EXPECT_TRUE(fs::exists(markers + "/tandem-worker-1"));
  Entry second(dir, "second");
  const auto start = Clock::now();
  EXPECT_EQ(second.Run({"tfjob", fake, "worker"}, env(0)), 0);
  EXPECT_GE(Clock::now() - start, milliseconds(2000)) << second.log();
  EXPECT_TRUE(Contains(second.log(), "started before")) << second.log();
  EXPECT_FALSE(fs::exists(markers + "/tandem-worker-1")) << "exit 0 removes the marker";
  Entry third(dir, "third");
  EXPECT_EQ(third.Run({"tfjob", fake, "worker"}, env(0)), 0);
  EXPECT_FALSE(Contains(third.log(), "started before")) << third.log();
}

// A port nothing listens on now (bound and released).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// The ConfigMap's job.yaml, written here, and the --set flags that move its state into `dir`.
std::vector<std::string> ConfigMapJob(const TempDir& dir) {
  WriteFile(dir.File("job.yaml"), ConfigMap()["data"]["job.yaml"].as<std::string>());
  return {"--config", dir.File("job.yaml"),
          "--set",    "checkpoint.dir=" + dir.File("ckpt"),
          "--set",    "output.dir=" + dir.File("out"),
          "--set",    "ps.data_dir=" + dir.File("ps"),
          "--set",    "collective.timeout_ms=6000"};
}

std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

// The exact TF_CONFIG of each replica of the TFJob (namespace "default", DNS names that do not
// resolve here; only the port is a free one instead of 2222), through the entry script, to the
// real daemons: each takes cluster and task from it and binds its own port on every interface.
TEST(K8sEntryTest, TheOperatorsTfConfigStartsEachDaemon) {
  TempDir dir;
  const std::vector<std::string> job = ConfigMapJob(dir);
  auto tfjobs = OfKind(LoadYamlDocuments(kTfJob), "TFJob");
  ASSERT_EQ(tfjobs.size(), 1u);
  const int port = FreePort();
  auto cluster = OperatorCluster(tfjobs[0], "default");
  for (auto& [type, addresses] : cluster) {
    for (std::string& a : addresses) {
      ASSERT_TRUE(a.ends_with(":2222")) << a;
      a = a.substr(0, a.size() - 4) + std::to_string(port);
    }
  }
  auto start = [&](Entry& entry, const std::string& role, int index) {
    std::vector<std::string> args = {"tfjob", TANDEM_BINARY, role};
    args.insert(args.end(), job.begin(), job.end());
    args.insert(args.end(), {"--ready-file", dir.File(role + ".ready")});
    const std::string tf = OperatorTfConfig(cluster, role, index);
    entry.Start(args, {"TF_CONFIG=" + tf});
    return tf;
  };
  const std::string host_suffix = ".default.svc:" + std::to_string(port);
  // Started, bound, and advertised by its DNS name, with cluster and task from TF_CONFIG.
  auto start_bound = [&](Entry& entry, const std::string& role, int index) {
    start(entry, role, index);
    ASSERT_TRUE(WaitForFile(dir.File(role + ".ready"), milliseconds(20000))) << entry.log();
    auto ready = nlohmann::json::parse(ReadFile(dir.File(role + ".ready")));
    const std::string task = role + ":" + std::to_string(index);
    EXPECT_EQ(ready["address"], "tcp://tandem-" + role + "-" + std::to_string(index) + host_suffix);
    EXPECT_EQ(ready["task"], task);
    EXPECT_TRUE(Contains(FirstLine(entry.log()), "cluster from TF_CONFIG, task from TF_CONFIG"))
        << entry.log();
  };

  // The chief: bound on every interface, so 127.0.0.1 reaches it; its cluster is TF_CONFIG's.
  {
    Entry chief(dir, "chief");
    ASSERT_NO_FATAL_FAILURE(start_bound(chief, "chief", 0));
    const std::string log = chief.log();
    EXPECT_TRUE(Contains(log, "bound 0.0.0.0:" + std::to_string(port))) << log;
    WriteFile(dir.File("status.yaml"), "cluster:\n  chief: [\"127.0.0.1:" + std::to_string(port) +
                                           "\"]\ncheckpoint:\n  dir: " + dir.File("ckpt") + "\n");
    auto status = RunCommand({TANDEM_BINARY, "status", "--config", dir.File("status.yaml"),
                              "--json", "--timeout-ms", "10000"},
                             {}, {"TF_CONFIG"});
    const size_t brace = status.output.find('{');
    ASSERT_NE(brace, std::string::npos) << status.output;
    auto view = nlohmann::json::parse(status.output.substr(brace), nullptr, false);
    ASSERT_FALSE(view.is_discarded()) << status.output;
    EXPECT_FALSE(view.contains("error")) << status.output;
    std::map<std::string, int> members;
    for (const auto& m : view["members"]) {
      members[m["role"].get<std::string>()] += 1;
      if (m["role"] == "chief") {
        EXPECT_EQ(m["address"], "tcp://tandem-chief-0" + host_suffix) << "advertised by name";
      }
    }
    EXPECT_EQ(members, (std::map<std::string, int>{{"chief", 1}, {"ps", 2}, {"worker", 2}}))
        << "the TFJob's replicas: " << status.output;
    chief.StopExpectingExit0();
  }
  // A worker binds before it looks for the chief (whose name does not resolve here).
  {
    Entry worker(dir, "worker");
    ASSERT_NO_FATAL_FAILURE(start_bound(worker, "worker", 1));
    worker.StopExpectingExit0();
  }
  // A PS asks the chief which checkpoint to restore before it binds: here it gets as far as
  // asking (the chief's name does not resolve), and SIGTERM ends the wait.
  {
    Entry ps(dir, "ps");
    start(ps, "ps", 1);
    ASSERT_TRUE(WaitUntil([&] { return Contains(ps.log(), "starting: cluster from TF_CONFIG"); },
                          milliseconds(20000)))
        << ps.log();
    EXPECT_TRUE(Contains(FirstLine(ps.log()), "ps:1")) << ps.log();
    ps.StopExpectingExit0();
  }
}

// A whole job through the entry script: TF_CONFIG in the operator's layout (cluster keys, task,
// "environment": "cloud") but with 127.0.0.1 addresses, the ConfigMap's job config with a few
// steps. Every daemon trains to the end and leaves 0; the job id is made once in the shared
// checkpoint directory by four processes at once.
TEST(K8sEntryTest, AJobTrainsThroughTheEntryScriptWithTheOperatorsLayout) {
  TempDir dir;
  std::vector<std::string> job = ConfigMapJob(dir);
  for (const char* set :
       {"train.steps=20", "train.log_every_steps=10", "train.eval_every_steps=0",
        "checkpoint.every_steps=10", "data.synthetic.eval_rows=1000", "train.threads=1"}) {
    job.insert(job.end(), {"--set", set});
  }
  const std::string chief_address = "127.0.0.1:" + std::to_string(FreePort());
  const std::map<std::string, std::vector<std::string>> cluster = {
      {"chief", {chief_address}},
      {"ps", {"127.0.0.1:0"}},
      {"worker", {"127.0.0.1:0", "127.0.0.1:0"}}};
  std::vector<std::unique_ptr<Entry>> entries;
  for (const auto& [role, addresses] : cluster) {
    for (size_t i = 0; i < addresses.size(); ++i) {
      entries.push_back(std::make_unique<Entry>(dir, role + std::to_string(i)));
      std::vector<std::string> args = {"tfjob", TANDEM_BINARY, role};
      args.insert(args.end(), job.begin(), job.end());
      entries.back()->Start(args,
                            {"TF_CONFIG=" + OperatorTfConfig(cluster, role, static_cast<int>(i))});
    }
  }
  for (auto& entry : entries) {
    auto e = entry->Wait(milliseconds(90000));
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->exit_code, 0) << entry->log();
  }
  const std::string metrics = ReadFile(dir.File("out/metrics.jsonl"));
  EXPECT_TRUE(Contains(metrics, "\"final\":true")) << metrics;
  EXPECT_TRUE(fs::exists(dir.File("ckpt/job_id")));
  for (const fs::directory_entry& e : fs::directory_iterator(dir.File("ckpt"))) {
    EXPECT_FALSE(Contains(e.path().filename().string(), "job_id.tmp")) << e.path();
  }
}

}  // namespace
}  // namespace tandem::testing
