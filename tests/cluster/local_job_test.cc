// Whole jobs as a user runs them: `tandem local` (chief, PS shards and workers as processes on
// 127.0.0.1) and the daemons started by hand, with the chief's view read by `tandem status`.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "common/subprocess.h"
#include "common/testing/notify_listener.h"
#include "common/testing/test_util.h"
#include "tests/cluster/local_job_util.h"

namespace tandem::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// The shards' durable pools hold what the kept checkpoints need, not every SST ever copied: at
// most the files the present manifests list plus one older checkpoint's.
void ExpectPoolsHoldOnlyWhatKeptCheckpointsNeed(const std::string& ckpt, int shards) {
  for (int shard = 0; shard < shards; ++shard) {
    const std::string prefix = "shards/shard-" + std::to_string(shard) + "/sst/";
    std::set<std::string> listed;
    size_t most_in_one = 0;
    for (const auto& entry : std::filesystem::directory_iterator(ckpt)) {
      if (!std::filesystem::exists(entry.path() / "MANIFEST")) continue;
      const auto m = nlohmann::json::parse(ReadFile((entry.path() / "MANIFEST").string()));
      size_t in_this = 0;
      for (const auto& part : m["parts"])
        for (const auto& file : part["files"])
          if (file["path"].get<std::string>().rfind(prefix, 0) == 0) {
            listed.insert(file["path"].get<std::string>());
            ++in_this;
          }
      most_in_one = std::max(most_in_one, in_this);
    }
    size_t pooled = 0;
    for (const auto& entry : std::filesystem::directory_iterator(ckpt + "/" + prefix))
      pooled += entry.is_regular_file();
    EXPECT_GT(listed.size(), 0u);
    EXPECT_LE(pooled, listed.size() + most_in_one) << "shard " << shard;
  }
}

TEST(LocalJobTest, TwoPsTwoWorkersReachTheTeachersAuc) {
  TempDir dir;
  WriteFile(dir.File("job.yaml"), SmallJob(dir.path(), 5000));
  auto r = Local(dir, 2, 2);
  ASSERT_EQ(r.exit.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("job done after step 4999 of 5000"), std::string::npos) << r.output;
  auto lines = ReadJsonLines(dir.path() + "/out/metrics.jsonl");
  ASSERT_GE(lines.size(), 2u);
  const auto& final_line = lines.back();
  ASSERT_TRUE(final_line.value("final", false)) << final_line;
  const double auc = final_line["auc"].get<double>();
  const double teacher = final_line["teacher_auc"].get<double>();
  EXPECT_GT(auc, teacher - 0.02) << "model " << auc << " teacher " << teacher;
  EXPECT_EQ(final_line["model_checksum"].get<std::string>().size(), 32u);
  // The step lines: the global-batch loss falls, and the time breakdown is there.
  const auto& first = lines.front();
  for (const char* key : {"step", "timeline", "loss", "samples_per_sec", "data_s", "pull_s",
                          "compute_s", "allreduce_s", "push_s", "wait_s"})
    EXPECT_TRUE(first.contains(key)) << key << " missing from " << first;
  EXPECT_LT(lines[lines.size() - 2]["loss"].get<double>(), first["loss"].get<double>());
  // Only the chief's summary reached the terminal; each process logged to its own file.
  EXPECT_EQ(r.output.find("registered with the chief"), std::string::npos) << r.output;
  for (const char* log : {"chief-0", "ps-0", "ps-1", "worker-0", "worker-1"})
    EXPECT_TRUE(std::filesystem::exists(dir.path() + "/out/logs/" + log + ".log")) << log;
  bool has_events = false;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() + "/out/tensorboard"))
    has_events |= e.path().filename().string().find("tfevents") != std::string::npos;
  EXPECT_TRUE(has_events);
  // Every child has exited.
  auto cluster = nlohmann::json::parse(ReadFile(dir.path() + "/out/cluster.json"));
  ASSERT_EQ(cluster["members"].size(), 5u);
  for (const auto& m : cluster["members"])
    EXPECT_NE(::kill(m["pid"].get<int>(), 0), 0) << m["task"] << " still runs";
}

// The supervisor of a CPU job never opens the CUDA libraries: probing for GPUs to hand out cost
// every `tandem local` start ~0.35 s (the plugin, cuBLAS, cuBLASLt and cuDNN), and nothing uses
// them.
TEST(LocalJobTest, ACpuJobsSupervisorLeavesTheCudaLibrariesUnloaded) {
  TempDir dir;
  WriteFile(dir.File("job.yaml"), SmallJob(dir.path(), 100000));
  const SpawnOptions o = LocalSpawn(dir, 1, 1, "local.log");
  auto local = Subprocess::Spawn(o);
  ASSERT_TRUE(local.ok()) << local.status();
  // cluster.json lists the worker once every process has started.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (ClusterPid(dir.path() + "/out", "worker:0") == 0) {
    if (std::chrono::steady_clock::now() > deadline || !local->running()) {
      ADD_FAILURE() << "the job did not start: " << ReadFile(o.output_path);
      break;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  const std::string maps = ReadFile("/proc/" + std::to_string(local->pid()) + "/maps");
  EXPECT_FALSE(maps.empty());
  for (const char* lib : {"tandem-cuda.so", "libcublas", "libcudnn"})
    EXPECT_EQ(maps.find(lib), std::string::npos) << lib << " is mapped by tandem local";
  local->Signal(SIGTERM);
  auto e = local->Wait(milliseconds(60000));
  ASSERT_TRUE(e.has_value()) << ReadFile(o.output_path);
  EXPECT_EQ(e->exit_code, 0) << ReadFile(o.output_path);
}

TEST(LocalJobTest, TwoIdenticalRunsEndWithTheSameModelChecksum) {
  std::string checksums[2];
  for (auto& checksum : checksums) {
    TempDir dir;
    WriteFile(dir.File("job.yaml"), SmallJob(dir.path(), 60));
    auto r = Local(dir, 2, 2);
    ASSERT_EQ(r.exit.exit_code, 0) << r.output;
    auto lines = ReadJsonLines(dir.path() + "/out/metrics.jsonl");
    ASSERT_FALSE(lines.empty());
    checksum = lines.back()["model_checksum"].get<std::string>();
    EXPECT_NE(r.output.find("model_checksum " + checksum), std::string::npos) << r.output;
  }
  EXPECT_EQ(checksums[0], checksums[1]);
}

// Checkpoints and resume at k = 0: a job stopped by SIGTERM takes a final checkpoint, and the
// same command resumes it from LATEST; the model at the end is the uninterrupted run's, bit for
// bit.
TEST(LocalJobTest, StoppedAndResumedJobEndsWithTheUninterruptedRunsModel) {
  auto write_job = [](const TempDir& dir) {
    std::string yaml = SmallJob(dir.path(), 1500);
    const std::string key = "checkpoint:\n  dir: " + dir.path() + "/ckpt\n";
    yaml.replace(yaml.find(key), key.size(), key + "  every_steps: 200\n  keep: 2\n");
    WriteFile(dir.File("job.yaml"), yaml);
  };
  TempDir straight;
  write_job(straight);
  auto r = Local(straight, 2, 2);
  ASSERT_EQ(r.exit.exit_code, 0) << r.output;
  const std::string expected =
      ReadJsonLines(straight.path() + "/out/metrics.jsonl").back()["model_checksum"];
  // It checkpointed its last step: starting it again says it has finished (exit 3).
  auto again = Local(straight, 2, 2);
  EXPECT_EQ(again.exit.exit_code, 3) << again.output;
  EXPECT_NE(again.output.find("has finished"), std::string::npos) << again.output;
  // With more steps it trains on from there.
  again = Local(straight, 2, 2, {"train.steps=1600"});
  EXPECT_EQ(again.exit.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("job done after step 1599 of 1600"), std::string::npos)
      << again.output;

  TempDir split;
  write_job(split);
  // Stop it between two scheduled checkpoints.
  StopLocalJobAfterStep(split, 2, 2, 450, milliseconds(50));
  if (HasFailure()) return;
  const std::string metrics = split.path() + "/out/metrics.jsonl";
  auto latest = nlohmann::json::parse(ReadFile(split.path() + "/ckpt/LATEST"));
  const int64_t stop_step = latest["step"].get<int64_t>();
  EXPECT_GE(stop_step, 450);
  EXPECT_LT(stop_step, 1499);
  EXPECT_NE(stop_step % 200, 199) << "the final checkpoint should be the stop step's own";
  // The checkpoint's model_checksum is the stopped job's (its shards and dense file).
  auto first_line = [](const std::string& out) { return out.substr(0, out.find('\n')); };
  auto of_checkpoint =
      RunCommand({TANDEM_BINARY, "checksum", "--checkpoint", split.path() + "/ckpt", "--verify"});
  ASSERT_EQ(of_checkpoint.exit.exit_code, 0) << of_checkpoint.output;
  auto of_job = RunCommand({TANDEM_BINARY, "checksum", "--config", split.File("job.yaml"), "--ps",
                            "2", "--workers", "2"});
  ASSERT_EQ(of_job.exit.exit_code, 0) << of_job.output;
  EXPECT_EQ(first_line(of_checkpoint.output).size(), 32u) << of_checkpoint.output;
  EXPECT_EQ(first_line(of_checkpoint.output), first_line(of_job.output));
  // keep: 2 — only the newest two checkpoints remain.
  int ckpt_dirs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(split.path() + "/ckpt"))
    ckpt_dirs += entry.path().filename().string().rfind("ckpt-", 0) == 0;
  EXPECT_EQ(ckpt_dirs, 2);

  // The same command again resumes from LATEST and finishes the job.
  r = Local(split, 2, 2);
  ASSERT_EQ(r.exit.exit_code, 0) << r.output;
  EXPECT_NE(ReadFile(split.path() + "/out/logs/chief-0.log")
                .find("resuming from the checkpoint of step " + std::to_string(stop_step)),
            std::string::npos);
  auto lines = ReadJsonLines(metrics);
  ASSERT_TRUE(lines.back().value("final", false));
  EXPECT_EQ(lines.back()["model_checksum"].get<std::string>(), expected);
  // Steps before the stop come from the first run, the rest from the second: no step twice.
  std::set<int64_t> steps;
  for (const auto& line : lines) {
    if (line.contains("loss") && !line.contains("final")) {
      EXPECT_TRUE(steps.insert(line["step"].get<int64_t>()).second) << line;
    }
  }

  // An intact copy for the resume under another computation below: the SST corrupted next may
  // be shared by every kept checkpoint (the durable copy copies only new SSTs, and most of the
  // table's rarely change), which leaves none to resume from.
  TempDir changed;
  std::filesystem::copy(split.path() + "/ckpt", changed.path() + "/ckpt",
                        std::filesystem::copy_options::recursive);

  // A flipped byte in the durable copy is found by --verify, naming the file: an SST the LATEST
  // checkpoint lists (the pool also holds SSTs only older checkpoints needed).
  const auto pointer = nlohmann::json::parse(ReadFile(split.path() + "/ckpt/LATEST"));
  const auto manifest = nlohmann::json::parse(
      ReadFile(split.path() + "/ckpt/" + pointer["manifest"].get<std::string>()));
  std::string victim;
  for (const auto& part : manifest["parts"])
    for (const auto& file : part["files"])
      if (victim.empty() && file["path"].get<std::string>().find("/sst/") != std::string::npos &&
          file["size"].get<uint64_t>() > 200)
        victim = split.path() + "/ckpt/" + file["path"].get<std::string>();
  ASSERT_FALSE(victim.empty());
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    char c = 0;
    f.read(&c, 1);
    f.seekp(100);
    c = static_cast<char>(c ^ 0x5a);
    f.write(&c, 1);
  }
  auto corrupt =
      RunCommand({TANDEM_BINARY, "checksum", "--checkpoint", split.path() + "/ckpt", "--verify"});
  EXPECT_EQ(corrupt.exit.exit_code, 3) << corrupt.output;
  EXPECT_NE(corrupt.output.find(std::filesystem::path(victim).filename().string()),
            std::string::npos)
      << corrupt.output;

  // A resume under a different computation is refused, naming the key.
  write_job(changed);
  r = Local(changed, 2, 2, {"train.batch_size=64", "checkpoint.resume=required"});
  EXPECT_EQ(r.exit.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("train.batch_size"), std::string::npos) << r.output;
}

TEST(LocalJobTest, EverySecondsCheckpointsAreCommittedWhileTraining) {
  TempDir dir;
  std::string yaml = SmallJob(dir.path(), 1500);
  const std::string key = "checkpoint:\n  dir: " + dir.path() + "/ckpt\n";
  yaml.replace(yaml.find(key), key.size(), key + "  every_seconds: 1\n");
  WriteFile(dir.File("job.yaml"), yaml);
  auto r = Local(dir, 1, 2);
  ASSERT_EQ(r.exit.exit_code, 0) << r.output;
  const std::string chief_log = ReadFile(dir.path() + "/out/logs/chief-0.log");
  int commits = 0;
  for (size_t at = chief_log.find("committed"); at != std::string::npos;
       at = chief_log.find("committed", at + 1))
    ++commits;
  EXPECT_GE(commits, 2) << chief_log;
  EXPECT_NE(ReadFile(dir.path() + "/out/logs/worker-0.log").find("(every_seconds)"),
            std::string::npos);
  auto verified =
      RunCommand({TANDEM_BINARY, "checksum", "--checkpoint", dir.path() + "/ckpt", "--verify"});
  EXPECT_EQ(verified.exit.exit_code, 0) << verified.output;
}

TEST(LocalJobTest, DurablePoolsKeepOnlyWhatTheKeptCheckpointsNeed) {
  TempDir dir;
  std::string yaml = SmallJob(dir.path(), 1500);
  const std::string key = "checkpoint:\n  dir: " + dir.path() + "/ckpt\n";
  // Some 60 checkpoints with keep 2: without collection the pools would keep every flush's SST.
  yaml.replace(yaml.find(key), key.size(), key + "  every_steps: 25\n  keep: 2\n");
  WriteFile(dir.File("job.yaml"), yaml);
  auto r = Local(dir, 2, 1);
  ASSERT_EQ(r.exit.exit_code, 0) << r.output;
  ExpectPoolsHoldOnlyWhatKeptCheckpointsNeed(dir.path() + "/ckpt", 2);
  auto verified =
      RunCommand({TANDEM_BINARY, "checksum", "--checkpoint", dir.path() + "/ckpt", "--verify"});
  EXPECT_EQ(verified.exit.exit_code, 0) << verified.output;
}

TEST(LocalJobTest, SigtermStopsTheWholeJobAndEveryChildExits0) {
  TempDir dir;
  WriteFile(dir.File("job.yaml"), SmallJob(dir.path(), 1000000));
  const SpawnOptions o = LocalSpawn(dir, 1, 2, "local.log");
  auto local = Subprocess::Spawn(o);
  ASSERT_TRUE(local.ok());
  const std::string metrics = dir.path() + "/out/metrics.jsonl";
  ASSERT_TRUE(WaitForFile(metrics, milliseconds(60000))) << ReadFile(dir.File("local.log"));
  local->Signal(SIGTERM);
  auto e = local->Wait(milliseconds(60000));
  ASSERT_TRUE(e.has_value()) << ReadFile(dir.File("local.log"));
  EXPECT_EQ(e->exit_code, 0) << ReadFile(dir.File("local.log"));
  const std::string out = ReadFile(dir.File("local.log"));
  EXPECT_NE(out.find("job stopped"), std::string::npos) << out;
  auto cluster = nlohmann::json::parse(ReadFile(dir.path() + "/out/cluster.json"));
  for (const auto& m : cluster["members"])
    EXPECT_NE(::kill(m["pid"].get<int>(), 0), 0) << m["task"] << " still runs";
  // Stopped is not finished: no final line.
  for (const auto& line : ReadJsonLines(metrics)) EXPECT_FALSE(line.contains("final")) << line;
  for (const char* log : {"worker-0", "worker-1", "ps-0", "chief-0"})
    EXPECT_NE(ReadFile(dir.path() + "/out/logs/" + std::string(log) + ".log").find("stop"),
              std::string::npos)
        << log;
}

TEST(LocalJobTest, StatusDirListsEveryProcessAndACrashedPsIsRestartedAndTrainingGoesOn) {
  TempDir dir;
  WriteFile(dir.File("job.yaml"), SmallJob(dir.path(), 1000000));
  const SpawnOptions o = LocalSpawn(dir, 2, 1, "local.log");
  auto local = Subprocess::Spawn(o);
  ASSERT_TRUE(local.ok());
  const std::string out = dir.path() + "/out";
  auto status = [&] { return StatusJson(out); };
  auto worker_step = [](const nlohmann::json& j) -> int64_t {
    if (!j.contains("members")) return -1;
    for (const auto& m : j["members"])
      if (m["role"] == "worker") return m["step"].get<int64_t>();
    return -1;
  };
  // Wait for training, then every process is listed and up.
  std::pair<int, nlohmann::json> s;
  auto deadline = Clock::now() + std::chrono::seconds(60);
  do {
    ASSERT_LT(Clock::now(), deadline) << ReadFile(dir.File("local.log"));
    std::this_thread::sleep_for(milliseconds(200));
    s = status();
  } while (worker_step(s.second) < 20);
  EXPECT_EQ(s.first, 0) << s.second.dump();
  ASSERT_EQ(s.second["members"].size(), 4u) << s.second.dump();
  int ps_pid = 0;
  uint64_t ps_incarnation = 0;
  for (const auto& m : s.second["members"]) {
    EXPECT_NE(m["state"], "lost") << m;
    if (m["role"] == "ps" && m["index"] == 0) {
      ps_pid = m["pid"].get<int>();
      ps_incarnation = m["incarnation"].get<uint64_t>();
    }
  }
  ASSERT_GT(ps_pid, 0) << s.second.dump();

  // kill -9 a shard: `tandem local` restarts it on its port, the chief admits the new
  // incarnation (its probe finds the old one gone), the shard recovers from its restore point
  // and push log, and the worker goes on training.
  ::kill(ps_pid, SIGKILL);
  const int64_t step_at_kill = worker_step(status().second);
  deadline = Clock::now() + std::chrono::seconds(60);
  for (;;) {
    ASSERT_LT(Clock::now(), deadline)
        << s.second.dump() << ReadFile(dir.File("local.log")) << ReadFile(out + "/logs/ps-0.log");
    std::this_thread::sleep_for(milliseconds(200));
    s = status();
    bool ps_back = false;
    if (s.second.contains("members"))
      for (const auto& m : s.second["members"])
        if (m["role"] == "ps" && m["index"] == 0 && m["state"] != "lost" &&
            m["incarnation"].get<uint64_t>() > ps_incarnation)
          ps_back = true;
    if (ps_back && worker_step(s.second) > step_at_kill + 20) break;
  }
  EXPECT_NE(ReadFile(dir.File("local.log")).find("ps:0 ended"), std::string::npos);

  local->Signal(SIGTERM);
  auto e = local->Wait(milliseconds(60000));
  ASSERT_TRUE(e.has_value()) << ReadFile(dir.File("local.log"));
  EXPECT_EQ(e->exit_code, 0) << ReadFile(dir.File("local.log"));
  // The job is over: the chief is gone, and status says so with exit 1.
  EXPECT_EQ(status().first, 1);
}

TEST(LocalJobTest, AWorkerTheChiefDeclaresLostIsKilledAndRestarted) {
  TempDir dir;
  WriteFile(dir.File("job.yaml"), SmallJob(dir.path(), 1000000));
  const SpawnOptions o = LocalSpawn(dir, 1, 1, "local.log", {"--max-restarts", "1"});
  auto local = Subprocess::Spawn(o);
  ASSERT_TRUE(local.ok());
  const std::string metrics = dir.path() + "/out/metrics.jsonl";
  ASSERT_TRUE(WaitForFile(metrics, milliseconds(60000))) << ReadFile(dir.File("local.log"));
  auto cluster = nlohmann::json::parse(ReadFile(dir.path() + "/out/cluster.json"));
  int worker_pid = 0;
  for (const auto& m : cluster["members"])
    if (m["task"] == "worker:0") worker_pid = m["pid"].get<int>();
  ASSERT_GT(worker_pid, 0);
  // A hung worker (SIGSTOP) never exits by itself: only the chief's verdict gets it killed.
  const auto stopped_at = Clock::now();
  ::kill(worker_pid, SIGSTOP);
  bool killed = false;
  while (!killed && Clock::now() - stopped_at < std::chrono::seconds(30)) {
    std::this_thread::sleep_for(milliseconds(100));
    killed = ReadFile(dir.File("local.log")).find("declared worker:0 lost") != std::string::npos;
  }
  ASSERT_TRUE(killed) << ReadFile(dir.File("local.log"));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - stopped_at).count(), 10.0);
  // Restarted (recovering its place in the job is the recovery issue's work): the job then ends
  // one way or another, and `tandem local` exits with every child gone.
  bool restarted = false;
  for (int i = 0; i < 100 && !restarted; ++i) {
    std::this_thread::sleep_for(milliseconds(100));
    restarted = ReadFile(dir.File("local.log")).find("worker:0 ended") != std::string::npos;
  }
  EXPECT_TRUE(restarted) << ReadFile(dir.File("local.log"));
  local->Signal(SIGTERM);
  auto e = local->Wait(milliseconds(90000));
  ASSERT_TRUE(e.has_value()) << ReadFile(dir.File("local.log"));
  EXPECT_NE(::kill(worker_pid, 0), 0) << "the hung worker still exists";
  cluster = nlohmann::json::parse(ReadFile(dir.path() + "/out/cluster.json"));
  for (const auto& m : cluster["members"])
    EXPECT_NE(::kill(m["pid"].get<int>(), 0), 0) << m["task"] << " still runs\n"
                                                 << ReadFile(dir.File("local.log"));
}

// The daemons started one by one, as on bare metal: the chief first, the others told its port.
// Whether `text` appears in the file at `path` within `timeout`.
bool WaitForLine(const std::string& path, const std::string& text,
                 std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (ReadFile(path).find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

class HandStartedCluster : public ::testing::Test {
 protected:
  struct Proc {
    std::optional<Subprocess> p;
    std::string log;
  };

  void SetUp() override { WriteFile(dir_.File("job.yaml"), SmallJob(dir_.path(), 1000000)); }
  void TearDown() override {
    for (auto& [name, proc] : procs_)
      if (proc.p && proc.p->running()) proc.p->Stop(milliseconds(5000));
  }

  std::vector<std::string> Sets() const {
    return {"--set", "cluster.chief=[127.0.0.1:" + chief_port_ + "]"};
  }

  void Start(const std::string& role, const std::string& task, bool wait_ready = true,
             std::vector<std::string> env = {}) {
    Proc& proc = procs_[task];
    proc.log = dir_.File(task + ".log");
    const std::string ready = dir_.File(task + ".ready");
    SpawnOptions o;
    o.argv = {TANDEM_BINARY, role, "--config",     dir_.File("job.yaml"),
              "--task",      task, "--ready-file", ready};
    if (role != "chief") {
      auto s = Sets();
      o.argv.insert(o.argv.end(), s.begin(), s.end());
    }
    o.unset_env = {"TF_CONFIG"};
    o.set_env = std::move(env);
    o.output_path = proc.log;
    auto p = Subprocess::Spawn(o);
    ASSERT_TRUE(p.ok()) << p.status();
    proc.p.emplace(std::move(p).value());
    if (!wait_ready) return;
    ASSERT_TRUE(WaitForFile(ready, milliseconds(20000))) << ReadFile(proc.log);
    if (role == "chief") {
      auto j = nlohmann::json::parse(ReadFile(ready));
      const std::string ep = j["address"].get<std::string>();
      chief_port_ = ep.substr(ep.rfind(':') + 1);
    }
  }

  nlohmann::json Status() {
    std::vector<std::string> argv = {TANDEM_BINARY, "status", "--config", dir_.File("job.yaml"),
                                     "--json"};
    auto s = Sets();
    argv.insert(argv.end(), s.begin(), s.end());
    auto r = RunCommand(argv, {}, {}, milliseconds(10000));
    const auto brace = r.output.find('{');
    if (brace == std::string::npos) return nlohmann::json();
    return nlohmann::json::parse(r.output.substr(brace), nullptr, false);
  }

  static const nlohmann::json* Member(const nlohmann::json& status, const std::string& role,
                                      int index) {
    if (!status.contains("members")) return nullptr;
    for (const auto& m : status["members"])
      if (m["role"] == role && m["index"] == index) return &m;
    return nullptr;
  }

  TempDir dir_;
  std::string chief_port_;
  std::map<std::string, Proc> procs_;
};

TEST_F(HandStartedCluster, StatusListsEveryProcessAndTheChiefReportsAKilledWorkerLost) {
  Start("chief", "chief:0");
  Start("ps", "ps:0");
  Start("worker", "worker:0");
  // Training under way: every process listed, up, with its step.
  nlohmann::json status;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (;;) {
    status = Status();
    const auto* w = Member(status, "worker", 0);
    if (w && (*w)["step"].get<int64_t>() >= 5) break;
    ASSERT_LT(Clock::now(), deadline) << status.dump() << ReadFile(procs_["worker:0"].log);
    std::this_thread::sleep_for(milliseconds(200));
  }
  EXPECT_EQ(status["job_state"], "training") << status.dump();
  for (auto [role, index] : {std::pair<std::string, int>{"chief", 0}, {"ps", 0}, {"worker", 0}}) {
    const auto* m = Member(status, role, index);
    ASSERT_NE(m, nullptr) << role << " missing from " << status.dump();
    EXPECT_NE((*m)["state"], "lost") << status.dump();
  }

  // kill -9: the chief declares the worker lost within the heartbeat timeout (plus its probe).
  const auto killed_at = Clock::now();
  procs_["worker:0"].p->Signal(SIGKILL);
  double detected_s = -1;
  while (Clock::now() - killed_at < std::chrono::seconds(20)) {
    status = Status();
    const auto* w = Member(status, "worker", 0);
    if (w && (*w)["state"] == "lost") {
      detected_s = std::chrono::duration<double>(Clock::now() - killed_at).count();
      break;
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  ASSERT_GT(detected_s, 0) << status.dump() << ReadFile(procs_["chief:0"].log);
  // heartbeat_timeout_ms 5000 + a probe (<= 1 s) + a monitor tick and the status round trip.
  EXPECT_LT(detected_s, 7.5) << status.dump();
  EXPECT_NE(ReadFile(procs_["chief:0"].log).find("lost"), std::string::npos);

  // SIGTERM to the chief stops the job; chief and PS exit 0.
  procs_["chief:0"].p->Signal(SIGTERM);
  auto e = procs_["chief:0"].p->Wait(milliseconds(60000));
  ASSERT_TRUE(e.has_value()) << ReadFile(procs_["chief:0"].log);
  EXPECT_EQ(e->exit_code, 0) << ReadFile(procs_["chief:0"].log);
  e = procs_["ps:0"].p->Wait(milliseconds(30000));
  ASSERT_TRUE(e.has_value()) << ReadFile(procs_["ps:0"].log);
  EXPECT_EQ(e->exit_code, 0) << ReadFile(procs_["ps:0"].log);
}

TEST_F(HandStartedCluster, ASecondLiveIncarnationOfARankIsRefusedWith75) {
  Start("chief", "chief:0");
  Start("ps", "ps:0");
  Start("worker", "worker:0");
  // A second worker:0 while the first is alive is refused: exit 75, "do not restart".
  std::vector<std::string> argv = {TANDEM_BINARY,         "worker", "--config",
                                   dir_.File("job.yaml"), "--task", "worker:0"};
  auto s = Sets();
  argv.insert(argv.end(), s.begin(), s.end());
  auto r = RunCommand(argv, {}, {"TF_CONFIG"}, milliseconds(30000));
  EXPECT_EQ(r.exit.exit_code, 75) << r.output;
  EXPECT_NE(r.output.find("worker:0"), std::string::npos) << r.output;
  EXPECT_TRUE(procs_["worker:0"].p->running()) << ReadFile(procs_["worker:0"].log);
}

TEST_F(HandStartedCluster, SigtermToAWorkerStopsTheWholeJobAndEveryDaemonExits0) {
  Start("chief", "chief:0");
  Start("ps", "ps:0");
  Start("worker", "worker:0");
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (;;) {
    const nlohmann::json status = Status();
    const auto* w = Member(status, "worker", 0);
    if (w && (*w)["step"].get<int64_t>() >= 5) break;
    ASSERT_LT(Clock::now(), deadline) << ReadFile(procs_["worker:0"].log);
    std::this_thread::sleep_for(milliseconds(200));
  }
  procs_["worker:0"].p->Signal(SIGTERM);
  for (const char* task : {"worker:0", "ps:0", "chief:0"}) {
    auto e = procs_[task].p->Wait(milliseconds(60000));
    ASSERT_TRUE(e.has_value()) << task << " did not exit\n" << ReadFile(procs_[task].log);
    EXPECT_TRUE(e->exited() && e->exit_code == 0) << task << ": " << e->ToString() << "\n"
                                                  << ReadFile(procs_[task].log);
  }
  EXPECT_NE(ReadFile(procs_["chief:0"].log).find("job stopped"), std::string::npos)
      << ReadFile(procs_["chief:0"].log);
}

// Scenario 14 on bare metal (no supervisor kills it): worker:1 is stopped past the heartbeat
// timeout and declared lost; a replacement started by hand rolls forward from worker:0's state;
// then the stopped process continues. It is told it was replaced, exits 75 and changes nothing:
// the job ends with the model of a run without any of this.
TEST_F(HandStartedCluster, AZombieWorkerExits75AndTheRolledForwardJobEndsWithTheFaultFreeModel) {
  auto two_workers = [](std::string yaml) {
    const std::string one = "  workers: [\"127.0.0.1:0\"]\n";
    yaml.replace(yaml.find(one), one.size(), "  workers: [\"127.0.0.1:0\", \"127.0.0.1:0\"]\n");
    return yaml;
  };
  constexpr int64_t kSteps = 1200;
  WriteFile(dir_.File("job.yaml"), two_workers(SmallJob(dir_.path(), kSteps)));
  TempDir ref;
  WriteFile(ref.File("job.yaml"), two_workers(SmallJob(ref.path(), kSteps)));
  auto reference = Local(ref, 1, 2);
  ASSERT_EQ(reference.exit.exit_code, 0) << reference.output;
  const std::string want =
      ReadJsonLines(ref.path() + "/out/metrics.jsonl").back()["model_checksum"].get<std::string>();

  Start("chief", "chief:0");
  Start("ps", "ps:0");
  Start("worker", "worker:0");
  Start("worker", "worker:1");
  auto wait_for = [&](const std::string& what, const std::function<bool(const nlohmann::json&)>& ok,
                      std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    for (;;) {
      const nlohmann::json status = Status();
      if (ok(status)) return true;
      if (Clock::now() > deadline) {
        ADD_FAILURE() << "timed out waiting for " << what << ": " << status.dump();
        return false;
      }
      std::this_thread::sleep_for(milliseconds(100));
    }
  };
  auto state_of = [&](const nlohmann::json& st, int index) {
    const auto* w = Member(st, "worker", index);
    return w ? (*w)["state"].get<std::string>() : std::string();
  };
  ASSERT_TRUE(wait_for(
      "step 100",
      [&](const nlohmann::json& st) {
        const auto* w = Member(st, "worker", 1);
        return w && (*w)["step"].get<int64_t>() >= 100;
      },
      std::chrono::seconds(90)));
  Proc zombie = std::move(procs_["worker:1"]);
  procs_.erase("worker:1");
  struct KillOnExit {  // a failed check must not leave a stopped process behind
    Proc* proc;
    ~KillOnExit() {
      if (proc->p && proc->p->running()) {
        proc->p->Signal(SIGKILL);
        proc->p->Wait(milliseconds(5000));
      }
    }
  } kill_on_exit{&zombie};
  zombie.p->Signal(SIGSTOP);
  ASSERT_TRUE(wait_for(
      "worker:1 declared lost", [&](const nlohmann::json& st) { return state_of(st, 1) == "lost"; },
      std::chrono::seconds(30)));
  Start("worker", "worker:1");  // the replacement
  ASSERT_TRUE(WaitForLine(procs_["worker:1"].log, "joined the running job", milliseconds(60000)))
      << ReadFile(procs_["worker:1"].log);
  zombie.p->Signal(SIGCONT);
  auto e = zombie.p->Wait(milliseconds(30000));
  ASSERT_TRUE(e.has_value()) << "the zombie did not exit\n" << ReadFile(zombie.log);
  EXPECT_TRUE(e->exited() && e->exit_code == 75) << e->ToString() << "\n" << ReadFile(zombie.log);
  EXPECT_NE(ReadFile(zombie.log).find("replaced"), std::string::npos) << ReadFile(zombie.log);

  for (const char* task : {"worker:0", "worker:1"}) {
    auto done = procs_[task].p->Wait(milliseconds(180000));
    ASSERT_TRUE(done.has_value()) << task << " did not finish\n" << ReadFile(procs_[task].log);
    EXPECT_EQ(done->exit_code, 0) << task << "\n" << ReadFile(procs_[task].log);
  }
  const auto lines = ReadJsonLines(dir_.path() + "/out/metrics.jsonl");
  ASSERT_FALSE(lines.empty());
  ASSERT_TRUE(lines.back().value("final", false)) << lines.back().dump();
  EXPECT_EQ(lines.back()["model_checksum"].get<std::string>(), want)
      << "the rolled-forward job with a zombie ended with another model";
}

// Scenario 16: daemons left over from another job, pointed at today's chief: each is answered
// WRONG_JOB, exits 75 (do not restart) and changes nothing; the job trains on.
TEST_F(HandStartedCluster, Scenario16DaemonsOfAnotherJobAreAnsweredWrongJobAndExit75) {
  Start("chief", "chief:0");
  Start("ps", "ps:0");
  Start("worker", "worker:0");
  const nlohmann::json before = Status();
  for (const char* task : {"worker:0", "ps:0"}) {
    std::vector<std::string> argv = {
        TANDEM_BINARY, std::string(task).substr(0, std::string(task).find(':')),
        "--config",    dir_.File("job.yaml"),
        "--task",      task,
        "--job-id",    "0123456789abcdef0123456789abcdef"};
    auto s = Sets();
    argv.insert(argv.end(), s.begin(), s.end());
    auto r = RunCommand(argv, {}, {"TF_CONFIG"}, milliseconds(30000));
    EXPECT_EQ(r.exit.exit_code, 75) << task << ": " << r.output;
    EXPECT_NE(r.output.find("not 0123456789abcdef0123456789abcdef"), std::string::npos)
        << task << ": " << r.output;
  }
  const nlohmann::json status = Status();
  for (auto [role, index] : {std::pair<std::string, int>{"ps", 0}, {"worker", 0}}) {
    const auto* m = Member(status, role, index);
    const auto* was = Member(before, role, index);
    ASSERT_TRUE(m != nullptr && was != nullptr) << before.dump() << status.dump();
    EXPECT_EQ((*m)["incarnation"], (*was)["incarnation"]) << status.dump();
    EXPECT_NE((*m)["state"], "lost") << status.dump();
  }
  EXPECT_TRUE(procs_["worker:0"].p->running()) << ReadFile(procs_["worker:0"].log);
}

// No replacement for a lost worker within recovery.max_wait_s: the survivor gives up naming the
// missing rank, the job fails with that reason, and LATEST stays a valid checkpoint.
TEST_F(HandStartedCluster, NoReplacementWithinMaxWaitFailsTheJobNamingTheRankAndKeepsLatest) {
  std::string yaml = SmallJob(dir_.path(), 1000000);
  const std::string one = "  workers: [\"127.0.0.1:0\"]\n";
  yaml.replace(yaml.find(one), one.size(), "  workers: [\"127.0.0.1:0\", \"127.0.0.1:0\"]\n");
  const std::string ckpt = "checkpoint:\n  dir: " + dir_.path() + "/ckpt\n";
  yaml.replace(yaml.find(ckpt), ckpt.size(),
               ckpt + "  every_steps: 50\nrecovery:\n  max_wait_s: 4\n");
  WriteFile(dir_.File("job.yaml"), yaml);
  Start("chief", "chief:0");
  Start("ps", "ps:0");
  Start("worker", "worker:0");
  Start("worker", "worker:1");
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  for (;;) {
    const nlohmann::json status = Status();
    if (status.value("last_checkpoint_step", int64_t{-1}) >= 49) break;
    ASSERT_LT(Clock::now(), deadline) << status.dump() << ReadFile(procs_["worker:0"].log);
    std::this_thread::sleep_for(milliseconds(200));
  }
  procs_["worker:1"].p->Signal(SIGKILL);
  auto e = procs_["worker:0"].p->Wait(milliseconds(40000));
  ASSERT_TRUE(e.has_value()) << "the survivor waited on\n" << ReadFile(procs_["worker:0"].log);
  EXPECT_EQ(e->exit_code, 1) << ReadFile(procs_["worker:0"].log);
  const std::string log = ReadFile(procs_["worker:0"].log);
  EXPECT_NE(log.find("no replacement joined within recovery.max_wait_s = 4 s: worker:1"),
            std::string::npos)
      << log;
  const nlohmann::json status = Status();
  EXPECT_EQ(status.value("job_state", ""), "failed") << status.dump();
  EXPECT_NE(status.value("detail", "").find("worker:1"), std::string::npos) << status.dump();
  auto sum =
      RunCommand({TANDEM_BINARY, "checksum", "--checkpoint", dir_.path() + "/ckpt", "--verify"}, {},
                 {}, milliseconds(60000));
  EXPECT_EQ(sum.exit.exit_code, 0) << sum.output;
}

// Under systemd (Type=notify, WatchdogSec): the chief says READY once bound, a PS once
// registered, and both then ping the watchdog at the heartbeat interval (PROTOCOLS §12).
TEST_F(HandStartedCluster, DaemonsNotifySystemdReadyAndPingItsWatchdog) {
  NotifyListener chief_socket(dir_.File("chief.notify"));
  NotifyListener ps_socket(dir_.File("ps.notify"));
  ASSERT_TRUE(chief_socket.bound() && ps_socket.bound());
  Start("chief", "chief:0", true, {"NOTIFY_SOCKET=" + dir_.File("chief.notify")});
  Start("ps", "ps:0", true, {"NOTIFY_SOCKET=" + dir_.File("ps.notify")});
  for (NotifyListener* socket : {&chief_socket, &ps_socket}) {
    std::vector<std::string> got;
    for (int i = 0; i < 20 && got.size() < 4; ++i) {
      std::string m = socket->Receive(milliseconds(1000));
      if (!m.empty()) got.push_back(m);
    }
    ASSERT_GE(got.size(), 3u) << ReadFile(procs_["chief:0"].log);
    const auto ready = std::find_if(got.begin(), got.end(),
                                    [](const std::string& m) { return m.starts_with("READY=1"); });
    ASSERT_NE(ready, got.end()) << got.front();
    // Pings keep coming after READY (the heartbeat interval is 200 ms).
    EXPECT_GE(std::count(ready, got.end(), std::string("WATCHDOG=1")), 2) << *ready;
  }
}

// /metrics (metrics.port: 0 = an ephemeral port, named in the ready file): every daemon serves
// the Prometheus text format, and its counters move as the job trains.
TEST_F(HandStartedCluster, EveryDaemonServesMetricsWhoseCountersMoveAsTheJobTrains) {
  WriteFile(dir_.File("job.yaml"), SmallJob(dir_.path(), 1000000) + "metrics:\n  port: 0\n");
  Start("chief", "chief:0");
  Start("ps", "ps:0");
  Start("worker", "worker:0");
  auto scrape = [&](const std::string& task) {
    const auto ready = nlohmann::json::parse(ReadFile(dir_.File(task + ".ready")));
    httplib::Client client("127.0.0.1", ready.value("metrics_port", 0));
    client.set_read_timeout(5, 0);
    auto res = client.Get("/metrics");
    EXPECT_TRUE(res && res->status == 200) << task;
    return res ? res->body : std::string();
  };
  // The value of the sample line that starts with `prefix` (name and labels), or -1.
  auto value = [](const std::string& text, const std::string& prefix) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line))
      if (line.starts_with(prefix + " ")) return std::stod(line.substr(prefix.size() + 1));
    return -1.0;
  };
  const std::regex sample(R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? [-+0-9.eEInfNa]+$)");
  auto well_formed = [&](const std::string& text) {
    std::istringstream in(text);
    std::string line;
    int samples = 0;
    while (std::getline(in, line)) {
      if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) continue;
      EXPECT_TRUE(std::regex_match(line, sample)) << line;
      ++samples;
    }
    return samples;
  };
  const std::string push = "tandem_rpc_requests_total{rpc=\"pushRequest\"}";
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  std::string ps = scrape("ps:0");
  while (value(ps, push) < 1) {
    ASSERT_LT(Clock::now(), deadline) << ps << ReadFile(procs_["worker:0"].log);
    std::this_thread::sleep_for(milliseconds(200));
    ps = scrape("ps:0");
  }
  std::this_thread::sleep_for(milliseconds(500));
  const std::string later = scrape("ps:0");
  EXPECT_GT(well_formed(later), 20);
  EXPECT_GT(value(later, push), value(ps, push)) << "the push counter did not move";
  EXPECT_GT(value(later, "tandem_ps_rows_applied_total"),
            value(ps, "tandem_ps_rows_applied_total"));
  EXPECT_GT(value(later, "tandem_rpc_latency_seconds_count{rpc=\"pullRequest\"}"), 0) << later;
  EXPECT_GE(value(later, "tandem_ps_rocksdb{property=\"rocksdb.estimate-num-keys\"}"), 0);
  const std::string worker = scrape("worker:0");
  EXPECT_GT(well_formed(worker), 3);
  EXPECT_GE(value(worker, "tandem_worker_step"), 0) << worker;
  const std::string chief = scrape("chief:0");
  EXPECT_GT(well_formed(chief), 5);
  EXPECT_EQ(value(chief, "tandem_members{state=\"up\"}"), 2) << chief;
  EXPECT_GT(value(chief, "tandem_rpc_requests_total{rpc=\"heartbeat\"}"), 0) << chief;
}

}  // namespace
}  // namespace tandem::testing
