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
  const std::string latest = dir.path() + "/ckpt/LATEST";
  const auto deadline = Clock::now() + std::chrono::seconds(240);
  bool killed = false;
  while (sup.Tick()) {
    ASSERT_LT(Clock::now(), deadline) << sup.Report() << ReadFile(dir.File("chief:0.log"));
    if (!killed) {
      const auto j = nlohmann::json::parse(ReadFile(latest), nullptr, false);
      if (j.is_object() && j.value("step", -1) >= 300) {
        sup.process("worker:0").Signal(SIGKILL);
        sup.process("worker:1").Signal(SIGKILL);
        killed = true;
      }
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  ASSERT_TRUE(killed) << sup.Report();
  // Everyone ended with 0 in the end, after restarts of the failed run.
  EXPECT_GE(sup.starts("chief:0"), 2) << sup.Report();
  const auto lines = ReadJsonLines(dir.path() + "/out/metrics.jsonl");
  ASSERT_FALSE(lines.empty()) << sup.Report();
  ASSERT_TRUE(lines.back().value("final", false)) << lines.back().dump() << "\n" << sup.Report();
  EXPECT_EQ(lines.back()["model_checksum"].get<std::string>(), want) << sup.Report();
}

}  // namespace
}  // namespace tandem::testing
