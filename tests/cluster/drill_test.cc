// `tandem drill` (issue 7 item 2) on short jobs: PS kill, PS SIGSTOP and chief kill are survived
// with the fault-free run's model; a malformed --faults is a usage error; a killed or stopped
// worker is rolled forward (PROTOCOLS §8), two at once rolled back; k = 2; scenarios 9 and 13;
// PS kills and a PS dead inside a restore point with a table 20x the cache.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "common/subprocess.h"
#include "common/testing/test_util.h"
#include "gtest/gtest.h"
#include "tests/cluster/local_job_util.h"

namespace tandem::testing {
namespace {

using std::chrono::milliseconds;

// SmallJob with `steps` steps and a checkpoint every 50.
void WriteJob(const TempDir& dir, int64_t steps) {
  std::string yaml = SmallJob(dir.path(), steps);
  const std::string key = "checkpoint:\n  dir: " + dir.path() + "/ckpt\n";
  yaml.replace(yaml.find(key), key.size(), key + "  every_steps: 50\n  keep: 2\n");
  WriteFile(dir.File("job.yaml"), yaml);
}

CommandResult Drill(const TempDir& dir, const std::string& faults,
                    std::vector<std::string> extra = {},
                    milliseconds timeout = milliseconds(110000)) {
  std::vector<std::string> argv = {TANDEM_BINARY, "drill", "--config",  dir.File("job.yaml"),
                                   "--ps",        "2",     "--workers", "2",
                                   "--faults",    faults};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto r = RunCommand(argv, {}, {}, timeout);
  KillLeftovers(dir.path() + "/out");
  KillLeftovers(dir.path() + "/out-reference");
  return r;
}

// A drill that must pass: it ended in time with exit 0 and a report whose model_checksums are
// equal. Returns the report (null, after failing the test, when there is none).
nlohmann::json PassedReport(const TempDir& dir, const CommandResult& r) {
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit.exit_code, 0) << r.output;
  auto report = nlohmann::json::parse(ReadFile(dir.path() + "/out/drill.json"), nullptr, false);
  if (!report.is_object()) {
    ADD_FAILURE() << "no drill.json: " << r.output;
    return nlohmann::json();
  }
  EXPECT_EQ(report.value("checksums_equal", false), true) << report.dump(2);
  return report;
}

// A drill of `faults` on WriteJob(dir, steps) that must pass (PassedReport); its report, with
// exactly `n` faults (null, after failing the test, otherwise).
nlohmann::json PassingDrill(const TempDir& dir, int64_t steps, const std::string& faults, size_t n,
                            std::vector<std::string> extra = {}) {
  WriteJob(dir, steps);
  nlohmann::json report = PassedReport(dir, Drill(dir, faults, std::move(extra)));
  if (!report.is_object() || report["faults"].size() != n) {
    ADD_FAILURE() << "expected " << n << " faults: " << report.dump(2);
    return nlohmann::json();
  }
  return report;
}

bool RolledForward(const nlohmann::json& fault) {
  return fault.value("path", "").find("roll forward") != std::string::npos;
}

// The report's only fault, which must have been recovered by a roll forward and no rollback.
nlohmann::json RolledForwardOnly(const nlohmann::json& report) {
  const auto& fault = report["faults"][0];
  EXPECT_TRUE(fault.value("recovered", false)) << report.dump(2);
  EXPECT_TRUE(RolledForward(fault)) << report.dump(2);
  EXPECT_EQ(fault.value("path", "").find("rollback"), std::string::npos) << report.dump(2);
  return fault;
}

TEST(DrillTest, PsKillPsStopAndChiefKillRecoverWithTheFaultFreeModel) {
  TempDir dir;
  WriteJob(dir, 400);
  auto r = Drill(dir, "kill ps:0 @step 100; stop ps:1 @step 200 for 2s; kill chief @step 300");
  const nlohmann::json report = PassedReport(dir, r);
  ASSERT_TRUE(report.is_object());
  EXPECT_EQ(report.value("ok", false), true) << report.dump(2);
  EXPECT_EQ(report["run"].value("model_checksum", ""),
            report["reference"].value("model_checksum", ""));
  ASSERT_EQ(report["faults"].size(), 3u) << report.dump(2);
  for (const auto& f : report["faults"]) {
    EXPECT_TRUE(f.value("fired", false)) << f;
    EXPECT_TRUE(f.value("recovered", false)) << f;
    EXPECT_GE(f.value("fired_at_step", int64_t{0}), f.value("step", int64_t{0})) << f;
  }
  EXPECT_NE(report["faults"][0].value("path", "").find("ps restart"), std::string::npos)
      << report.dump(2);
  EXPECT_NE(report["faults"][2].value("path", "").find("chief restart"), std::string::npos)
      << report.dump(2);
  // At k = 0 no step completes while a PS is stopped: the step stood still for most of the 2 s
  // (the chief's view can show a step of before the stop up to a heartbeat later). The pauses
  // of both runs are measured.
  const auto& stop = report["faults"][1];
  ASSERT_TRUE(stop["stall_ms"].is_number()) << stop.dump(2);
  EXPECT_GE(stop["stall_ms"].get<int64_t>(), 1000) << stop.dump(2);
  EXPECT_TRUE(report["reference"]["longest_pause_ms"].is_number()) << report.dump(2);
  EXPECT_TRUE(report["faults"][0]["stall_ms"].is_number()) << report.dump(2);
  EXPECT_TRUE(report["time_lost_ms"].is_number()) << report.dump(2);
  EXPECT_NE(r.output.find("the faults cost"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("PASSED"), std::string::npos) << r.output;
}

uint64_t DirBytes(const std::string& path) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(path))
    if (e.is_regular_file()) total += e.file_size();
  return total;
}

// Recovery at the size it exists for (issue 21): every drill above keeps the table in memory
// (ps.storage: memory). Here each shard's cache holds 1/20 of its rows at most, so a restarted
// shard restores a RocksDB restore point and replays its log through a cache that evicts, and
// the kills land around checkpoints (every 50 steps) whose final part is a delta of the change
// log. ps:1 dies inside a restore point (the fault point `die-in-restore-point`: its first one
// of a step >= 150, rows written and RocksDB's checkpoint made, no marker yet), so it comes back
// from the one before (the checkpoint of that cut still commits). Both runs of the drill have the
// same cache; HugeTableTest ties that model to the all-in-memory one.
TEST(DrillTest, PsKillsWithTheTableFarLargerThanTheCacheEndWithTheFaultFreeModel) {
  TempDir dir;
  constexpr int64_t kCacheBytes = 600000;
  const nlohmann::json report = PassingDrill(
      dir, 300,
      "kill ps:0 @step 80; die-in-restore-point ps:1 @step 150; kill ps:0 @step 230; kill "
      "worker:1 @step 260",
      4,
      {"--set", "data.synthetic.vocab=300000", "--set", "data.synthetic.zipf=1.05", "--set",
       "data.synthetic.eval_rows=2000", "--set", "ps.storage=rocksdb", "--set",
       "ps.cache_bytes=" + std::to_string(kCacheBytes), "--set",
       "ps.max_dirty_bytes=" + std::to_string(kCacheBytes / 4)});
  ASSERT_TRUE(report.is_object());
  for (const auto& f : report["faults"]) EXPECT_TRUE(f.value("recovered", false)) << f.dump(2);
  for (int i = 0; i < 3; ++i)
    EXPECT_NE(report["faults"][i].value("path", "").find("ps restart + log replay"),
              std::string::npos)
        << report.dump(2);
  // ps:1 died in the restore point, and came back from an older one.
  const std::string ps1 = ReadFile(dir.path() + "/out/logs/ps-1.log");
  const std::string point = "fault point die-in-restore-point fires at step ";
  const size_t fired = ps1.find(point);
  ASSERT_NE(fired, std::string::npos) << ps1;
  const int64_t died_in = std::atoll(ps1.c_str() + fired + point.size());
  EXPECT_GE(died_in, 150);
  const std::string back = "shard 1 recovered: restore point step ";
  const size_t recovered = ps1.find(back, fired);
  ASSERT_NE(recovered, std::string::npos) << ps1;
  EXPECT_LT(std::atoll(ps1.c_str() + recovered + back.size()), died_in) << ps1;
  // It died in a checkpoint's cut (steps 49, 99, ...), which still commits at k = 0: the replay
  // ends at the cut and the part request takes the restore point then.
  EXPECT_EQ((died_in + 1) % 50, 0) << died_in;
  EXPECT_NE(ReadFile(dir.path() + "/out/logs/chief-0.log")
                .find("checkpoint of step " + std::to_string(died_in) + " committed"),
            std::string::npos);
  // The rows did not fit: each shard's live RocksDB of the faulty run is 20x its cache or more.
  for (int i = 0; i < 2; ++i) {
    const std::string live = dir.path() + "/ps/shard-" + std::to_string(i) + "/live";
    ASSERT_TRUE(std::filesystem::exists(live)) << live;
    EXPECT_GE(DirBytes(live), 20u * kCacheBytes) << live;
  }
}

TEST(DrillTest, MalformedSpecExitsTwoNamingTheProblem) {
  TempDir dir;
  WriteJob(dir, 100);
  auto r = Drill(dir, "kill ps:0 @step 100; stop ps:1 @step 200");
  EXPECT_EQ(r.exit.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("fault 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("'stop' needs 'for DURATION'"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/out/cluster.json")) << "no job may start";
}

// A killed worker is rolled forward (PROTOCOLS §8): the replacement takes the survivor's dense
// state and recomputes at most one step; nothing rolls back and the job ends with the fault-free
// run's model.
TEST(DrillTest, WorkerKillRollsForwardWithTheFaultFreeModel) {
  TempDir dir;
  const nlohmann::json report = PassingDrill(dir, 400, "kill worker:1 @step 120", 1);
  ASSERT_TRUE(report.is_object());
  const nlohmann::json fault = RolledForwardOnly(report);
  EXPECT_LE(fault.value("steps_replayed", 99), 1) << report.dump(2);
  EXPECT_EQ(ReadFile(dir.path() + "/out/drill-local.log").find("rolling back"), std::string::npos);
  EXPECT_NE(ReadFile(dir.path() + "/out/logs/worker-1.log").find("joined the running job"),
            std::string::npos);
}

// The fault point a timed kill rarely hits (common/failpoint.h): worker:1 dies once its
// all-reduce of step 120 returned, before its push of 120 left. The drill arms it in the faulty
// run's environment only, sees it fire through its marker, and the job ends with the fault-free
// run's model: the survivor undid its step 120 and the replacement recomputed it.
TEST(DrillTest, AWorkerDeadBetweenItsAllReduceAndItsPushRollsForwardWithTheFaultFreeModel) {
  TempDir dir;
  const nlohmann::json report = PassingDrill(dir, 300, "die-after-allreduce worker:1 @step 120", 1);
  ASSERT_TRUE(report.is_object());
  const nlohmann::json fault = RolledForwardOnly(report);
  EXPECT_TRUE(fault.value("fired", false)) << report.dump(2);
  EXPECT_EQ(fault.value("fired_at_step", int64_t{0}), 120) << report.dump(2);
  EXPECT_NE(ReadFile(dir.path() + "/out/logs/worker-1.log")
                .find("fault point die-after-allreduce fires at step 120"),
            std::string::npos);
  EXPECT_NE(ReadFile(dir.path() + "/out/logs/worker-0.log").find("undid its step 120"),
            std::string::npos);
  // Only the faulty run armed it.
  EXPECT_EQ(ReadFile(dir.path() + "/out-reference/logs/worker-1.log").find("fault point"),
            std::string::npos);
}

// Both workers killed at once: no replica survives to roll forward from, so the job fails and
// `tandem local` rolls it back to the last committed checkpoint; at k = 0 it still ends with the
// fault-free run's model.
TEST(DrillTest, TwoWorkersKilledAtOnceAreRecoveredByAGlobalRollbackWithTheFaultFreeModel) {
  TempDir dir;
  WriteJob(dir, 400);
  // A line every step, so that any step trained between the checkpoint (step 99) and the kill
  // is logged again after it, however far the chief's view lags the workers.
  auto r = Drill(dir, "kill worker:0 @step 110; kill worker:1 @step 110",
                 {"--set", "train.log_every_steps=1"});
  const nlohmann::json report = PassedReport(dir, r);
  ASSERT_TRUE(report.is_object());
  ASSERT_EQ(report["faults"].size(), 2u);
  for (const auto& f : report["faults"]) EXPECT_TRUE(f.value("recovered", false)) << f.dump(2);
  EXPECT_NE(report["faults"][1].value("path", "").find("global rollback"), std::string::npos)
      << report.dump(2);
  const std::string local = ReadFile(dir.path() + "/out/drill-local.log");
  EXPECT_NE(local.find("rolling back"), std::string::npos) << local;
  EXPECT_NE(local.find("no replica survived"), std::string::npos) << local;
  // The steps trained again after the rollback are marked as replays in metrics.jsonl, and the
  // file still ends with exactly one final line.
  const auto lines = ReadJsonLines(dir.path() + "/out/metrics.jsonl");
  ASSERT_FALSE(lines.empty());
  EXPECT_TRUE(std::any_of(lines.begin(), lines.end(),
                          [](const auto& l) { return l.value("replay", false); }));
  EXPECT_EQ(std::count_if(lines.begin(), lines.end(),
                          [](const auto& l) { return l.value("final", false); }),
            1);
  EXPECT_TRUE(lines.back().value("final", false));
}

// The chief and a worker killed together: the worker's recovery waits for the restarted chief
// (which never saw the loss) and then rolls forward; the model is the fault-free run's.
TEST(DrillTest, AWorkerLostWhileTheChiefIsDownIsRolledForwardOnceItIsBack) {
  TempDir dir;
  const nlohmann::json report =
      PassingDrill(dir, 400, "kill chief @step 120; kill worker:1 @step 120", 2);
  ASSERT_TRUE(report.is_object());
  for (const auto& f : report["faults"]) EXPECT_TRUE(f.value("recovered", false)) << f.dump(2);
  EXPECT_TRUE(RolledForward(report["faults"][1])) << report.dump(2);
  EXPECT_EQ(ReadFile(dir.path() + "/out/drill-local.log").find("rolling back"), std::string::npos);
}

// Scenario 20: a worker killed while the job recovers from a rollback (both workers lost at
// once): the job still resumes from the same checkpoint, the new loss is rolled forward, and
// the model is the fault-free run's.
TEST(DrillTest, Scenario20AWorkerKilledDuringARollbackIsRolledForward) {
  TempDir dir;
  const nlohmann::json report = PassingDrill(
      dir, 400, "kill worker:0 @step 120; kill worker:1 @step 120; kill worker:1 @rollback 1", 3);
  ASSERT_TRUE(report.is_object());
  for (const auto& f : report["faults"]) EXPECT_TRUE(f.value("fired", false)) << f.dump(2);
  EXPECT_TRUE(report["faults"][2].value("recovered", false)) << report.dump(2);
  EXPECT_TRUE(RolledForward(report["faults"][2])) << report.dump(2);
  const std::string local = ReadFile(dir.path() + "/out/drill-local.log");
  // One rollback only: the second loss did not restart it.
  EXPECT_EQ(local.find("rollback 2 of"), std::string::npos) << local;
}

// At k = 2 a killed worker is rolled forward too (the survivor keeps its state, the newcomer
// takes it); the drill compares the models by AUC: within 0.02 of the fault-free run. k = 2 is
// not exact: over 38 runs of this drill (2026-12-06) the fault-free runs alone spanned 0.777 to
// 0.789, and one pair in 38 differed by 0.0104, which the former bound of 0.01 failed.
TEST(DrillTest, AtStalenessTwoAWorkerKillRollsForwardWithinAnAucOfTheFaultFreeRun) {
  TempDir dir;
  WriteJob(dir, 400);
  auto r = Drill(dir, "kill worker:0 @step 150", {"--set", "train.embedding_staleness=2"});
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.exit.exit_code, 0) << r.output;
  auto report = nlohmann::json::parse(ReadFile(dir.path() + "/out/drill.json"), nullptr, false);
  ASSERT_TRUE(report.is_object()) << r.output;
  ASSERT_EQ(report["faults"].size(), 1u);
  EXPECT_TRUE(report["faults"][0].value("recovered", false)) << report.dump(2);
  EXPECT_NE(report["faults"][0].value("path", "").find("roll forward"), std::string::npos)
      << report.dump(2);
  const double auc = report["run"].value("auc", 0.0);
  const double ref = report["reference"].value("auc", 1.0);
  EXPECT_GT(auc, 0.6) << report.dump(2);
  EXPECT_NEAR(auc, ref, 0.02) << report.dump(2);
}

// Scenario 13: a PS stopped for longer than ps.watchdog_ms is declared lost, killed by its
// supervisor and restarted on its data directory; it replays its log and nothing is lost.
TEST(DrillTest, Scenario13APsStoppedPastItsWatchdogIsRestartedAndLosesNothing) {
  TempDir dir;
  const nlohmann::json report =
      PassingDrill(dir, 400, "stop ps:0 @step 150 for 10s", 1, {"--set", "ps.watchdog_ms=3000"});
  ASSERT_TRUE(report.is_object());
  const auto& fault = report["faults"][0];
  EXPECT_TRUE(fault.value("recovered", false)) << report.dump(2);
  EXPECT_NE(fault.value("path", "").find("ps restart"), std::string::npos) << report.dump(2);
  EXPECT_EQ(fault.value("path", "").find("rollback"), std::string::npos) << report.dump(2);
  EXPECT_NE(ReadFile(dir.path() + "/out/drill-local.log").find("declared ps:0 lost"),
            std::string::npos);
}

// A lost PS machine (killed, its data directory deleted): the restarted shard sees it is far
// behind the workers and fails the job at once, instead of the workers waiting on it until their
// requests time out; the whole job rolls back to the last checkpoint and ends with the
// fault-free model (the lost shard restored from the durable copy).
TEST(DrillTest, LostPsFailsTheJobAtOnceAndTheRollbackEndsWithTheFaultFreeModel) {
  TempDir dir;
  WriteJob(dir, 300);
  auto r = Drill(dir, "lose ps:1 @step 120");
  const nlohmann::json report = PassedReport(dir, r);
  ASSERT_TRUE(report.is_object());
  ASSERT_EQ(report["faults"].size(), 1u);
  const auto& fault = report["faults"][0];
  EXPECT_TRUE(fault.value("recovered", false)) << report.dump(2);
  EXPECT_NE(fault.value("path", "").find("global rollback"), std::string::npos) << report.dump(2);
  // The steps between the checkpoint and the failure were trained again.
  EXPECT_GT(fault.value("steps_replayed", 0), 0) << report.dump(2);
  // Far below the workers' request timeout (120 s): the shard's verdict, not a timeout.
  ASSERT_TRUE(fault["recovery_ms"].is_number()) << report.dump(2);
  EXPECT_LT(fault["recovery_ms"].get<double>(), 60000.0) << report.dump(2);
  EXPECT_NE(ReadFile(dir.path() + "/out/logs/ps-1.log").find("lost its data"), std::string::npos)
      << "the restarted shard did not say why it failed the job";  // Every member of the failed run
                                                                   // left on the failure or on the
                                                                   // supervisor's SIGTERM: the
  // workers' step in flight waited on the lost shard, and the chief on its members, for a grace
  // the rollback does not need, until `tandem local` killed them.
  const std::string local = ReadFile(dir.path() + "/out/drill-local.log");
  size_t killed = 0;
  for (size_t at = local.find("killed by signal"); at != std::string::npos;
       at = local.find("killed by signal", at + 1))
    ++killed;
  EXPECT_EQ(killed, 1u) << "only the fault's own kill:\n" << local;
  EXPECT_NE(local.find("ps:1 ended (killed by signal"), std::string::npos) << local;
}

// The rest of the fault kinds, in one short job: a worker killed before the first checkpoint
// and a worker stopped past the heartbeat timeout (declared lost, killed by its supervisor) are
// rolled forward; then scenario 9: LATEST is corrupted, a PS dies (it recovers from its own
// restore point and log) and both workers die at once: the rollback finds an intact checkpoint
// without LATEST's help. The job ends with the fault-free model.
TEST(DrillTest, WorkerStopCorruptLatestAndAKillBeforeTheFirstCheckpointEndWithTheSameModel) {
  TempDir dir;
  WriteJob(dir, 300);
  auto r = Drill(dir,
                 "kill worker:1 @step 30; stop worker:0 @step 120 for 7s; corrupt-latest @step "
                 "200; kill ps:0 @step 205; kill worker:0 @step 210; kill worker:1 @step 210",
                 {"--max-rollbacks", "4"}, milliseconds(200000));
  const nlohmann::json report = PassedReport(dir, r);
  ASSERT_TRUE(report.is_object());
  ASSERT_EQ(report["faults"].size(), 6u) << report.dump(2);
  for (const auto& f : report["faults"]) EXPECT_TRUE(f.value("recovered", false)) << f.dump(2);
  for (int i : {0, 1}) EXPECT_TRUE(RolledForward(report["faults"][i])) << report.dump(2);
  EXPECT_NE(report["faults"][1].value("detected_by", "").find("lost"), std::string::npos)
      << report.dump(2);
  EXPECT_NE(report["faults"][5].value("path", "").find("global rollback"), std::string::npos)
      << report.dump(2);
}

// Network faults (issue 17 item 5): every process on a host of its own (tandem local --netns,
// which needs root: CI is root), links cut and routes blackholed. A partition shorter than the
// heartbeat timeout passes unnoticed; a longer one is a loss rolled forward; a cut-off chief
// declares nobody lost; a flapping PS link is ridden out; a cut between the two workers only,
// longer than collective.timeout_ms, breaks their group with nobody lost: they regroup under a
// new generation and roll forward. The job ends with the fault-free model every time.
TEST(DrillTest, NetworkPartitionsAndAFlapEndWithTheFaultFreeModel) {
  TempDir dir;
  nlohmann::json report = PassingDrill(
      dir, 1200,
      "partition worker:1 @step 100 for 1s; partition worker:1 @step 300 for 4s;"
      "partition chief @step 550 for 4s; flap ps:1 @step 750 2x;"
      "partition worker:0,worker:1 @step 950 for 12s",
      5, {"--set", "chief.heartbeat_timeout_ms=2000", "--set", "collective.timeout_ms=10000"});
  if (!report.is_object()) return;
  const auto path = [&](int i) { return report["faults"][i].value("path", ""); };
  EXPECT_NE(path(0).find("no loss declared, no restart"), std::string::npos) << report.dump(2);
  EXPECT_NE(path(1).find("roll forward"), std::string::npos) << report.dump(2);
  EXPECT_NE(report["faults"][1].value("detected_by", "").find("declared worker:1 lost"),
            std::string::npos)
      << report.dump(2);
  EXPECT_NE(path(2).find("declared nobody lost"), std::string::npos) << report.dump(2);
  EXPECT_NE(path(3).find("no restart"), std::string::npos) << report.dump(2);
  EXPECT_NE(path(4).find("no restart"), std::string::npos) << report.dump(2);
  EXPECT_NE(path(4).find("regroup"), std::string::npos) << report.dump(2);
  EXPECT_NE(ReadFile(dir.path() + "/out/logs/chief-0.log").find("may be cut off"),
            std::string::npos);
  for (const auto& f : report["faults"]) EXPECT_TRUE(f.value("recovered", false)) << f.dump(2);
}

}  // namespace
}  // namespace tandem::testing
