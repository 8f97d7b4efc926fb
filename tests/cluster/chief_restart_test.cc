// The chief can be killed at any time (PROTOCOLS §10, issue 6 item 4): `tandem local` restarts
// it on its port, training goes on meanwhile, the restarted chief takes a higher term, rebuilds
// membership from re-registrations and commits the next checkpoints; a chief that is merely
// stopped for longer than the heartbeat timeout declares nobody lost. At k = 0 the final
// model_checksum equals the uninterrupted run's, so nothing was lost or done twice.
#include <signal.h>
#include <sys/types.h>

#include <cctype>
#include <chrono>
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
using std::chrono::seconds;

constexpr int64_t kSteps = 600;
constexpr int64_t kEverySteps = 50;

// SmallJob with a checkpoint every kEverySteps steps.
void WriteJob(const TempDir& dir) {
  std::string yaml = SmallJob(dir.path(), kSteps);
  const std::string key = "checkpoint:\n  dir: " + dir.path() + "/ckpt\n";
  yaml.replace(yaml.find(key), key.size(),
               key + "  every_steps: " + std::to_string(kEverySteps) + "\n  keep: 2\n");
  WriteFile(dir.File("job.yaml"), yaml);
}

std::string FinalChecksum(const TempDir& dir) {
  auto lines = ReadJsonLines(dir.path() + "/out/metrics.jsonl");
  if (lines.empty() || !lines.back().value("final", false)) return "";
  return lines.back().value("model_checksum", "");
}

// The uninterrupted run's model, computed once for every test here.
const std::string& UninterruptedChecksum() {
  static const std::string checksum = [] {
    TempDir dir;
    WriteJob(dir);
    auto r = Local(dir, 2, 2, {}, milliseconds(60000));
    EXPECT_EQ(r.exit.exit_code, 0) << r.output;
    return FinalChecksum(dir);
  }();
  return checksum;
}

// The manifest LATEST names, parsed; null when there is none.
nlohmann::json LatestManifest(const TempDir& dir) {
  auto latest = nlohmann::json::parse(ReadFile(dir.path() + "/ckpt/LATEST"), nullptr, false);
  if (latest.is_discarded() || !latest.contains("manifest")) return nlohmann::json();
  return nlohmann::json::parse(
      ReadFile(dir.path() + "/ckpt/" + latest["manifest"].get<std::string>()), nullptr, false);
}

// `tandem local --ps 2 --workers 2` in the background, its output in local.log.
class BackgroundLocal {
 public:
  explicit BackgroundLocal(const TempDir& dir) : dir_(dir), out_(dir.path() + "/out") {
    SpawnOptions o;
    o.argv = {TANDEM_BINARY, "local", "--config",  dir.File("job.yaml"),
              "--ps",        "2",     "--workers", "2"};
    o.output_path = dir.File("local.log");
    auto p = Subprocess::Spawn(o);
    EXPECT_TRUE(p.ok()) << p.status();
    if (p.ok()) process_.emplace(std::move(p).value());
  }

  const std::string& out() const { return out_; }
  std::string log() const { return ReadFile(dir_.File("local.log")); }

  // Polls `tandem status` until `pred` holds on its JSON; false after `timeout`.
  bool WaitStatus(const std::function<bool(const nlohmann::json&)>& pred, milliseconds timeout,
                  nlohmann::json* last = nullptr) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      auto [code, j] = StatusJson(out_);
      if (!j.is_null() && !j.is_discarded()) {
        if (last) *last = j;
        if (pred(j)) return true;
      }
      std::this_thread::sleep_for(milliseconds(100));
    }
    return false;
  }

  std::optional<ExitInfo> Wait(milliseconds timeout) { return process_->Wait(timeout); }

 private:
  const TempDir& dir_;
  const std::string out_;
  std::optional<Subprocess> process_;  // SIGKILLed by its destructor if still running
};

int64_t Step(const nlohmann::json& status) { return status.value("step", int64_t{-1}); }

// The step of the last "checkpoint of step S committed" in `log` before offset `before`; -1.
int64_t LastCommittedBefore(const std::string& log, size_t before) {
  const std::string marker = "checkpoint of step ";
  int64_t step = -1;
  for (size_t at = log.find(marker); at != std::string::npos && at < before;
       at = log.find(marker, at + 1)) {
    size_t end = at + marker.size();
    while (end < log.size() && std::isdigit(static_cast<unsigned char>(log[end]))) ++end;
    if (end > at + marker.size() && log.compare(end, 10, " committed") == 0)
      step = std::stoll(log.substr(at + marker.size(), end - at - marker.size()));
  }
  return step;
}

TEST(ChiefRestartTest, ChiefKilledMidRunIsRestartedAndTheJobEndsWithTheSameModel) {
  const std::string expected = UninterruptedChecksum();
  ASSERT_EQ(expected.size(), 32u);
  TempDir dir;
  WriteJob(dir);
  BackgroundLocal local(dir);
  nlohmann::json s;
  ASSERT_TRUE(local.WaitStatus([](const nlohmann::json& j) { return Step(j) >= 150; },
                               milliseconds(30000), &s))
      << s.dump() << local.log();
  ASSERT_EQ(s.value("term", 0), 1) << s.dump();
  const int chief_pid = ClusterPid(local.out(), "chief:0");
  ASSERT_GT(chief_pid, 0);
  ASSERT_EQ(::kill(chief_pid, SIGKILL), 0);
  const int64_t step_at_kill = Step(s);

  // The supervisor restarts the chief on its port; the members register again with it, keeping
  // their incarnations, and it says "training" with a higher term.
  ASSERT_TRUE(local.WaitStatus(
      [](const nlohmann::json& j) {
        return j.value("term", 0) >= 2 && j.value("job_state", "") == "training";
      },
      milliseconds(20000), &s))
      << s.dump() << local.log();
  for (const auto& m : s["members"]) EXPECT_NE(m.value("state", ""), "lost") << m;

  auto e = local.Wait(milliseconds(60000));
  ASSERT_TRUE(e.has_value()) << local.log();
  EXPECT_EQ(e->exit_code, 0) << local.log();
  const std::string log = local.log();
  EXPECT_NE(log.find("chief:0 ended"), std::string::npos) << log;
  const std::string done =
      "job done after step " + std::to_string(kSteps - 1) + " of " + std::to_string(kSteps);
  EXPECT_NE(log.find(done), std::string::npos) << log;
  EXPECT_EQ(FinalChecksum(dir), expected) << "nothing lost or redone across the chief's restart";
  // A checkpoint after the kill was committed by the restarted chief.
  nlohmann::json latest = LatestManifest(dir);
  ASSERT_FALSE(latest.is_null()) << log;
  EXPECT_GE(latest.value("term", 0), 2) << latest.value("step", -1);
  EXPECT_GT(latest.value("step", int64_t{-1}), step_at_kill);
}

// SIGSTOP the chief for longer than the heartbeat timeout (5 s) across checkpoint steps: when it
// runs again it declares nobody lost (its own silence excused them), the checkpoint pending
// meanwhile (or a later one) is committed under the same term, and the model is the same.
TEST(ChiefRestartTest, StoppedChiefDeclaresNobodyLostAndCommitsAfterwards) {
  const std::string expected = UninterruptedChecksum();
  ASSERT_EQ(expected.size(), 32u);
  TempDir dir;
  WriteJob(dir);
  BackgroundLocal local(dir);
  nlohmann::json s;
  ASSERT_TRUE(local.WaitStatus([](const nlohmann::json& j) { return Step(j) >= 120; },
                               milliseconds(30000), &s))
      << s.dump() << local.log();
  const int chief_pid = ClusterPid(local.out(), "chief:0");
  ASSERT_GT(chief_pid, 0);
  const int64_t step_at_stop = Step(s);
  ASSERT_EQ(::kill(chief_pid, SIGSTOP), 0);
  // What the chief logged before it stopped (it writes nothing while stopped).
  const size_t logged_before_stop = ReadFile(local.out() + "/logs/chief-0.log").size();
  std::this_thread::sleep_for(seconds(7));
  ASSERT_EQ(::kill(chief_pid, SIGCONT), 0);

  auto e = local.Wait(milliseconds(60000));
  ASSERT_TRUE(e.has_value()) << local.log();
  EXPECT_EQ(e->exit_code, 0) << local.log();
  const std::string log = local.log();
  const std::string chief_log = ReadFile(local.out() + "/logs/chief-0.log");
  EXPECT_EQ(chief_log.find("declared lost"), std::string::npos) << chief_log;
  EXPECT_EQ(log.find("declared"), std::string::npos) << log;
  EXPECT_EQ(log.find("restarting"), std::string::npos) << log;
  EXPECT_NE(chief_log.find("the chief did not run for"), std::string::npos) << chief_log;
  EXPECT_EQ(FinalChecksum(dir), expected);
  nlohmann::json latest = LatestManifest(dir);
  ASSERT_FALSE(latest.is_null()) << log;
  EXPECT_EQ(latest.value("term", 0), 1) << "the same chief, never restarted";
  EXPECT_GT(latest.value("step", int64_t{-1}), step_at_stop);
  // The checkpoint after the last one committed before the stop is committed after it.
  const int64_t before = LastCommittedBefore(chief_log, logged_before_stop);
  const std::string next =
      "checkpoint of step " + std::to_string(before + kEverySteps) + " committed";
  const size_t at = chief_log.find(next);
  EXPECT_TRUE(at != std::string::npos && at >= logged_before_stop) << next << "\n" << chief_log;
}

// PROTOCOLS §10: "a checkpoint taken while [the chief] was away is committed when every part
// reports it". The chief is stopped first, so worker 0 certainly takes the next checkpoint and
// asks for its commit while nobody answers; then it is killed and restarted. Worker 0 must retry
// that commit with the new chief (the worker's checkpointer), which commits it under term 2.
TEST(ChiefRestartTest, CheckpointTakenWhileTheChiefWasAwayIsCommittedByItsSuccessor) {
  const std::string expected = UninterruptedChecksum();
  ASSERT_EQ(expected.size(), 32u);
  TempDir dir;
  WriteJob(dir);
  BackgroundLocal local(dir);
  nlohmann::json s;
  ASSERT_TRUE(local.WaitStatus([](const nlohmann::json& j) { return Step(j) >= 120; },
                               milliseconds(30000), &s))
      << s.dump() << local.log();
  const int chief_pid = ClusterPid(local.out(), "chief:0");
  ASSERT_GT(chief_pid, 0);
  ASSERT_EQ(::kill(chief_pid, SIGSTOP), 0);
  // Long enough for worker 0 to reach the next checkpoint step (50 steps) and ask.
  std::this_thread::sleep_for(milliseconds(2500));
  ASSERT_EQ(::kill(chief_pid, SIGKILL), 0);

  auto e = local.Wait(milliseconds(60000));
  ASSERT_TRUE(e.has_value()) << local.log();
  EXPECT_EQ(e->exit_code, 0) << local.log();
  EXPECT_EQ(FinalChecksum(dir), expected);
  const std::string chief_log = ReadFile(local.out() + "/logs/chief-0.log");
  const size_t rejoined = chief_log.find("rejoining the run");
  ASSERT_NE(rejoined, std::string::npos) << chief_log;
  const int64_t before = LastCommittedBefore(chief_log, rejoined);
  const int64_t away = before + kEverySteps;  // taken while the chief was stopped
  const std::string committed = "checkpoint of step " + std::to_string(away) + " committed";
  EXPECT_GT(chief_log.find(committed), rejoined)
      << committed << " by the restarted chief\n"
      << chief_log << ReadFile(local.out() + "/logs/worker-0.log");
}

}  // namespace
}  // namespace tandem::testing
