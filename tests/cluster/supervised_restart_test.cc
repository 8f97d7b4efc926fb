// Bare metal (configs/systemd/): every daemon started on its own and restarted by its supervisor
// as systemd's `Restart=on-failure` with `RestartPreventExitStatus=75 2 3` does, with nothing
// else driving the job. A fault no survivor can roll forward from (both workers killed at once)
// must end, on its own, with the model of a run without the fault: the failed job's daemons
// exit for a restart and the restarted chief starts the job again from its last checkpoint.
#include <gtest/gtest.h>
#include <signal.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "common/subprocess.h"
#include "common/testing/test_util.h"
#include "tests/cluster/local_job_util.h"
#include "tests/cluster/unit_supervisor.h"

namespace tandem::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Ticks `sup` until every daemon is down for good, SIGKILLing `victims` at once when LATEST
// names step `at` or later. False, after a test failure, at the 240 s deadline or without a kill.
bool SuperviseKillingAt(Supervisor& sup, const TempDir& dir, int64_t at,
                        const std::vector<std::string>& victims) {
  const std::string latest = dir.path() + "/ckpt/LATEST";
  const auto deadline = Clock::now() + std::chrono::seconds(240);
  bool killed = false;
  while (sup.Tick()) {
    if (Clock::now() >= deadline) {
      ADD_FAILURE() << "not done within 240 s: " << sup.Report()
                    << ReadFile(dir.File("chief:0.log"));
      return false;
    }
    if (!killed) {
      const auto j = nlohmann::json::parse(ReadFile(latest), nullptr, false);
      if (j.is_object() && j.value("step", -1) >= at) {
        for (const auto& task : victims) sup.process(task).Signal(SIGKILL);
        killed = true;
      }
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  if (!killed) ADD_FAILURE() << "the job ended before LATEST reached step " << at << sup.Report();
  return killed;
}

// The model_checksum of the job's final metrics line; "" after a test failure when there is none.
std::string FinalChecksum(const Supervisor& sup, const TempDir& dir) {
  const auto lines = ReadJsonLines(dir.path() + "/out/metrics.jsonl");
  if (lines.empty() || !lines.back().value("final", false)) {
    ADD_FAILURE() << "no final line: " << (lines.empty() ? "" : lines.back().dump()) << "\n"
                  << sup.Report();
    return "";
  }
  return lines.back().value("model_checksum", "");
}

TEST(SupervisedRestartTest, BothWorkersKilledAtOnceTheJobRollsBackOnItsOwnToTheFaultFreeModel) {
  constexpr int64_t kSteps = 1000;
  TempDir ref;
  std::string yaml = SmallJob(ref.path(), kSteps);
  const std::string one = "  workers: [\"127.0.0.1:0\"]\n";
  yaml.replace(yaml.find(one), one.size(), "  workers: [\"127.0.0.1:0\", \"127.0.0.1:0\"]\n");
  WriteFile(ref.File("job.yaml"), yaml);
  auto reference = Local(ref, 1, 2, {"checkpoint.every_steps=100"});
  ASSERT_EQ(reference.exit.exit_code, 0) << reference.output;
  const std::string want =
      ReadJsonLines(ref.path() + "/out/metrics.jsonl").back()["model_checksum"].get<std::string>();

  TempDir dir;
  yaml = SmallJob(dir.path(), kSteps);
  yaml.replace(yaml.find(one), one.size(), "  workers: [\"127.0.0.1:0\", \"127.0.0.1:0\"]\n");
  WriteFile(dir.File("job.yaml"), yaml);
  // Every start (and restart) binds the same chief port, as a unit's fixed address would.
  const std::vector<std::string> sets = {"--set", "cluster.chief=[127.0.0.1:" + FreePort() + "]",
                                         "--set", "checkpoint.every_steps=100"};
  Supervisor sup(dir);
  sup.Start("chief", "chief:0", {}, sets);
  sup.Start("ps", "ps:0", {}, sets);
  sup.Start("worker", "worker:0", {}, sets);
  sup.Start("worker", "worker:1", {}, sets);

  // Both workers killed at once after the checkpoint of step 300 is committed.
  ASSERT_TRUE(SuperviseKillingAt(sup, dir, 300, {"worker:0", "worker:1"}));
  // Everyone ended with 0 in the end, after restarts of the failed run.
  EXPECT_GE(sup.starts("chief:0"), 2) << sup.Report();
  EXPECT_EQ(FinalChecksum(sup, dir), want);
}

// A power cut: every daemon killed at once, each restarted by its supervisor. The restarted
// chief first expects the run's members back; the first to come is a new process, so it starts
// the job again from the last checkpoint. A shard that opened in between kept what it had
// applied for the rejoin that never came: it must see that the job starts over and restart to
// restore the checkpoint, or it serves rows of later steps than the workers' restored dense
// state (it did, found 2026-12-06). Shards now wait for the chief's decision before they open.
TEST(SupervisedRestartTest, EveryDaemonKilledAtOnceResumesFromTheCheckpointWithTheFaultFreeModel) {
  constexpr int64_t kSteps = 600;
  auto write_job = [](const TempDir& d) {
    std::string yaml = SmallJob(d.path(), kSteps);
    const std::string one = "  workers: [\"127.0.0.1:0\"]\n";
    yaml.replace(yaml.find(one), one.size(), "  workers: [\"127.0.0.1:0\", \"127.0.0.1:0\"]\n");
    const std::string ps = "  ps: [\"127.0.0.1:0\"]\n";
    yaml.replace(yaml.find(ps), ps.size(), "  ps: [\"127.0.0.1:0\", \"127.0.0.1:0\"]\n");
    WriteFile(d.File("job.yaml"), yaml);
  };
  TempDir ref;
  write_job(ref);
  auto reference = Local(ref, 2, 2, {"checkpoint.every_steps=100"});
  ASSERT_EQ(reference.exit.exit_code, 0) << reference.output;
  const std::string want =
      ReadJsonLines(ref.path() + "/out/metrics.jsonl").back()["model_checksum"].get<std::string>();

  TempDir dir;
  write_job(dir);
  std::vector<std::string> sets = {"--set", "checkpoint.every_steps=100"};
  for (const std::string role : {"chief", "ps", "workers"}) {
    std::string list;
    for (int i = 0; i < (role == "chief" ? 1 : 2); ++i)
      list += std::string(i ? "," : "") + "127.0.0.1:" + FreePort();
    sets.insert(sets.end(), {"--set", "cluster." + role + "=[" + list + "]"});
  }
  Supervisor sup(dir);
  const std::vector<std::pair<std::string, std::string>> daemons = {{"chief", "chief:0"},
                                                                    {"ps", "ps:0"},
                                                                    {"ps", "ps:1"},
                                                                    {"worker", "worker:0"},
                                                                    {"worker", "worker:1"}};
  for (const auto& [role, task] : daemons) sup.Start(role, task, {}, sets);

  std::vector<std::string> tasks;
  for (const auto& d : daemons) tasks.push_back(d.second);
  ASSERT_TRUE(SuperviseKillingAt(sup, dir, 200, tasks));
  for (const auto& task : tasks) EXPECT_GE(sup.starts(task), 2) << sup.Report();
  EXPECT_EQ(FinalChecksum(sup, dir), want) << ReadFile(dir.File("ps:0.log"));
  // The shards waited for the chief's decision and restored the checkpoint at once: no shard
  // served a later step to a pull of the resumed run (at k = 0 one did, and the pull's STALE
  // failed the job for a second start; at k > 0 nothing noticed).
  const std::string chief = ReadFile(dir.File("chief:0.log"));
  EXPECT_EQ(chief.find("job failed"), std::string::npos) << chief;
  for (const char* ps : {"ps:0.log", "ps:1.log"})
    EXPECT_NE(ReadFile(dir.File(ps)).find("restored to the checkpoint of step"), std::string::npos)
        << ps;
}

}  // namespace
}  // namespace tandem::testing
