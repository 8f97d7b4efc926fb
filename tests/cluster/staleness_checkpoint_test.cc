// Checkpoints at k >= 1 (PROTOCOLS §3, §7, scenarios 11 and 18 of §15): the shards cut at the
// announced step while later steps' pushes wait, checkpoints announced by worker 0's clock
// (every_seconds) land on one step for every process even while one worker is repeatedly
// stopped, a SIGTERM stop checkpoints and the job resumes from it.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "common/subprocess.h"
#include "common/testing/test_util.h"
#include "gtest/gtest.h"
#include "tests/cluster/local_job_util.h"

namespace tandem::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

TEST(StalenessCheckpointTest, KOneJobCheckpointsWhileAWorkerLagsStopsAndResumes) {
  TempDir dir;
  std::string yaml = SmallJob(dir.path(), 1500);
  const std::string ckpt = "checkpoint:\n  dir: " + dir.path() + "/ckpt\n";
  yaml.replace(yaml.find(ckpt), ckpt.size(),
               ckpt + "  every_steps: 250\n  every_seconds: 1\n  keep: 3\n");
  const std::string train = "train:\n";
  yaml.replace(yaml.find(train), train.size(), train + "  embedding_staleness: 1\n");
  WriteFile(dir.File("job.yaml"), yaml);

  SpawnOptions o;
  o.argv = {TANDEM_BINARY, "local", "--config",  dir.File("job.yaml"),
            "--ps",        "2",     "--workers", "2"};
  o.output_path = dir.File("first.log");
  auto first = Subprocess::Spawn(o);
  ASSERT_TRUE(first.ok()) << first.status();
  // Worker 1 is stopped for 150 ms out of every 400 while the others run on: its pushes and
  // its part of every all-reduce come late.
  const std::string metrics = dir.path() + "/out/metrics.jsonl";
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  int lagging = 0;
  for (;;) {
    ASSERT_LT(Clock::now(), deadline) << ReadFile(dir.File("first.log"));
    if (lagging == 0 && std::filesystem::exists(dir.path() + "/out/cluster.json"))
      lagging = ClusterPid(dir.path() + "/out", "worker:1");
    if (lagging > 0) {
      ::kill(lagging, SIGSTOP);
      std::this_thread::sleep_for(milliseconds(150));
      ::kill(lagging, SIGCONT);
    }
    std::this_thread::sleep_for(milliseconds(250));
    if (!std::filesystem::exists(metrics)) continue;
    auto lines = ReadJsonLines(metrics);
    if (!lines.empty() && lines.back().value("step", 0) >= 700) break;
  }
  ASSERT_GT(lagging, 0);
  first->Signal(SIGTERM);
  auto e = first->Wait(milliseconds(60000));
  ASSERT_TRUE(e.has_value());
  ASSERT_EQ(e->exit_code, 0) << ReadFile(dir.File("first.log"));

  // Checkpoints were announced by the clock and by the schedule, and each was committed.
  const std::string worker0 = ReadFile(dir.path() + "/out/logs/worker-0.log");
  EXPECT_NE(worker0.find("(every_seconds)"), std::string::npos) << worker0;
  const std::string chief = ReadFile(dir.path() + "/out/logs/chief-0.log");
  EXPECT_NE(chief.find("checkpoint of step 249 committed"), std::string::npos) << chief;
  EXPECT_EQ(chief.find("not committed"), std::string::npos) << chief;
  EXPECT_EQ(worker0.find("not committed"), std::string::npos) << worker0;
  auto latest = nlohmann::json::parse(ReadFile(dir.path() + "/ckpt/LATEST"));
  const int64_t stop_step = latest["step"].get<int64_t>();
  EXPECT_GE(stop_step, 700);
  // The stop step's checkpoint verifies, and it is the stopped shards' and dense state's model:
  // the shards applied nothing after the step they cut at.
  auto of_checkpoint =
      RunCommand({TANDEM_BINARY, "checksum", "--checkpoint", dir.path() + "/ckpt", "--verify"});
  ASSERT_EQ(of_checkpoint.exit.exit_code, 0) << of_checkpoint.output;
  auto of_job = RunCommand(
      {TANDEM_BINARY, "checksum", "--config", dir.File("job.yaml"), "--ps", "2", "--workers", "2"});
  ASSERT_EQ(of_job.exit.exit_code, 0) << of_job.output;
  auto first_line = [](const std::string& out) { return out.substr(0, out.find('\n')); };
  EXPECT_EQ(first_line(of_checkpoint.output), first_line(of_job.output));

  // Started again, it resumes from there and finishes.
  auto r = Local(dir, 2, 2);
  ASSERT_EQ(r.exit.exit_code, 0) << r.output;
  EXPECT_NE(ReadFile(dir.path() + "/out/logs/chief-0.log")
                .find("resuming from the checkpoint of step " + std::to_string(stop_step)),
            std::string::npos);
  auto lines = ReadJsonLines(metrics);
  ASSERT_TRUE(lines.back().value("final", false));
  EXPECT_GT(lines.back()["auc"].get<double>(), 0.6);
}

}  // namespace
}  // namespace tandem::testing
