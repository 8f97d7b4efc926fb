#include "cli/drill_faults.h"

#include "gtest/gtest.h"

namespace tandem::cli {
namespace {

using std::chrono::milliseconds;

std::string ErrorOf(std::string_view spec) {
  auto r = ParseFaults(spec);
  EXPECT_FALSE(r.ok()) << spec;
  if (r.ok()) return "";
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status().ToString();
  return r.status().message();
}

TEST(DrillFaultsTest, ParsesEveryKindInStepOrder) {
  auto r = ParseFaults(
      "kill worker:1 @step 300; kill ps:0 @step 650 ;stop worker:0 @step 900 for 8s;"
      "  kill chief @step 120; corrupt-latest @step 1500; lose ps:1 @step 1700;"
      "stop ps:1 @step 1000 for 500ms;");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 7u);
  const auto& f = *r;
  EXPECT_EQ(f[0].ToString(), "kill chief:0 @step 120");
  EXPECT_EQ(f[0].role, "chief");
  EXPECT_EQ(f[1].ToString(), "kill worker:1 @step 300");
  EXPECT_EQ(f[1].kind, FaultKind::kKill);
  EXPECT_EQ(f[1].index, 1);
  EXPECT_EQ(f[2].task(), "ps:0");
  EXPECT_EQ(f[3].kind, FaultKind::kStop);
  EXPECT_EQ(f[3].duration, milliseconds(8000));
  EXPECT_EQ(f[4].duration, milliseconds(500));
  EXPECT_EQ(f[4].step, 1000);
  EXPECT_EQ(f[5].kind, FaultKind::kCorruptLatest);
  EXPECT_EQ(f[5].task(), "");
  EXPECT_EQ(f[6].kind, FaultKind::kLose);
  EXPECT_EQ(f[6].ToString(), "lose ps:1 @step 1700");
}

// A fault point is fired by its target, armed through the faulty run's environment
// (common/failpoint.h): its spec is what TANDEM_FAILPOINT holds.
TEST(DrillFaultsTest, ParsesAFaultPointAndItsEnvironmentSpec) {
  auto r = ParseFaults("kill ps:0 @step 200; die-after-allreduce worker:1 @step 120");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  const Fault& f = (*r)[0];
  EXPECT_EQ(f.kind, FaultKind::kDieAfterAllReduce);
  EXPECT_TRUE(f.fault_point());
  EXPECT_FALSE((*r)[1].fault_point());
  EXPECT_EQ(f.ToString(), "die-after-allreduce worker:1 @step 120");
  EXPECT_EQ(f.FailpointSpec(), "worker:1 die-after-allreduce @step 120");
  EXPECT_EQ((*r)[1].FailpointSpec(), "");
}

TEST(DrillFaultsTest, AFaultPointTakesOneWorkerAStepAndComesOnce) {
  EXPECT_NE(ErrorOf("die-after-allreduce ps:0 @step 5").find("takes a worker"), std::string::npos);
  EXPECT_NE(ErrorOf("die-after-allreduce chief @step 5").find("takes a worker"), std::string::npos);
  EXPECT_NE(ErrorOf("die-after-allreduce worker:0 @rollback 1").find("not '@rollback N'"),
            std::string::npos);
  EXPECT_NE(ErrorOf("die-after-allreduce @step 5").find("unknown role '@step'"), std::string::npos);
  const std::string two =
      ErrorOf("die-after-allreduce worker:0 @step 50; die-after-allreduce worker:1 @step 90");
  EXPECT_NE(two.find("one fault point a drill"), std::string::npos) << two;
  EXPECT_NE(two.find("worker:1 @step 90"), std::string::npos) << two;
  EXPECT_NE(ErrorOf("die-before-push worker:0 @step 5").find("die-in-restore-point)"),
            std::string::npos);
}

TEST(DrillFaultsTest, ARestorePointFaultPointTakesOnePs) {
  auto r = ParseFaults("die-in-restore-point ps:1 @step 150; kill worker:0 @step 90");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  const Fault& f = (*r)[1];
  EXPECT_EQ(f.kind, FaultKind::kDieInRestorePoint);
  EXPECT_TRUE(f.fault_point());
  EXPECT_EQ(f.ToString(), "die-in-restore-point ps:1 @step 150");
  EXPECT_EQ(f.FailpointSpec(), "ps:1 die-in-restore-point @step 150");
  EXPECT_NE(ErrorOf("die-in-restore-point worker:0 @step 5").find("takes a PS"), std::string::npos);
  EXPECT_NE(ErrorOf("die-in-restore-point chief @step 5").find("takes a PS"), std::string::npos);
  EXPECT_NE(ErrorOf("die-in-restore-point ps:0 @rollback 1").find("not '@rollback N'"),
            std::string::npos);
  const std::string two =
      ErrorOf("die-after-allreduce worker:0 @step 50; die-in-restore-point ps:1 @step 90");
  EXPECT_NE(two.find("one fault point a drill"), std::string::npos) << two;
}

TEST(DrillFaultsTest, FaultsAtTheSameStepKeepTheirOrder) {
  auto r = ParseFaults("kill ps:1 @step 5; kill ps:0 @step 5; stop chief:0 @step 2 for 1.5s");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].duration, milliseconds(1500));
  EXPECT_EQ((*r)[1].task(), "ps:1");
  EXPECT_EQ((*r)[2].task(), "ps:0");
}

// A loss during a recovery (scenario 20): `@rollback N` faults come after every `@step` one.
TEST(DrillFaultsTest, RollbackTriggeredFaultsComeAfterTheStepOnes) {
  auto r = ParseFaults("kill worker:1 @rollback 1; kill worker:0 @step 50; kill ps:0 @rollback 2");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].ToString(), "kill worker:0 @step 50");
  EXPECT_EQ((*r)[1].ToString(), "kill worker:1 @rollback 1");
  EXPECT_EQ((*r)[1].after_rollbacks, 1);
  EXPECT_EQ((*r)[2].ToString(), "kill ps:0 @rollback 2");
}

TEST(DrillFaultsTest, EmptySpecIsAnError) {
  EXPECT_NE(ErrorOf("").find("no fault given"), std::string::npos);
  EXPECT_NE(ErrorOf(" ; ;").find("no fault given"), std::string::npos);
}

TEST(DrillFaultsTest, ErrorsNameTheFaultThePositionAndTheProblem) {
  EXPECT_EQ(ErrorOf("kill ps:0 @step 10; explode ps:1 @step 20"),
            "--faults: fault 2 (at character 21): unknown action 'explode' (expected kill, "
            "stop, lose, corrupt-latest, partition, flap, die-after-allreduce or "
            "die-in-restore-point)");
  EXPECT_EQ(ErrorOf("stop ps:1 @step 200"),
            "--faults: fault 1 (at character 20): 'stop' needs 'for DURATION' after the step, "
            "e.g. 'for 5s'");
  EXPECT_NE(ErrorOf("kill ps:0 @step ten").find("bad step 'ten'"), std::string::npos);
  EXPECT_NE(ErrorOf("kill ps:0 @step 0").find("bad step '0'"), std::string::npos);
  EXPECT_NE(ErrorOf("kill ps:0 @step").find("missing step number"), std::string::npos);
  EXPECT_NE(ErrorOf("kill ps:0").find("missing '@step S'"), std::string::npos);
  EXPECT_NE(ErrorOf("kill ps:0 @step100").find("with a space"), std::string::npos);
  EXPECT_NE(ErrorOf("kill ps:0 at 100").find("expected '@step S' or '@rollback N', found 'at'"),
            std::string::npos);
  EXPECT_NE(ErrorOf("kill worker:0 @rollback 0").find("bad rollback count '0'"), std::string::npos);
  EXPECT_NE(ErrorOf("kill worker:0 @rollback").find("missing count"), std::string::npos);
  EXPECT_NE(ErrorOf("kill @step 5").find("unknown role '@step'"), std::string::npos);
  EXPECT_NE(ErrorOf("kill").find("missing target"), std::string::npos);
  EXPECT_NE(ErrorOf("kill gpu:0 @step 5").find("unknown role 'gpu'"), std::string::npos);
  EXPECT_NE(ErrorOf("kill ps @step 5").find("needs an index"), std::string::npos);
  EXPECT_NE(ErrorOf("kill ps:x @step 5").find("bad index in 'ps:x'"), std::string::npos);
  EXPECT_NE(ErrorOf("kill ps:-1 @step 5").find("bad index"), std::string::npos);
  EXPECT_NE(ErrorOf("kill chief:1 @step 5").find("only chief:0"), std::string::npos);
  EXPECT_NE(ErrorOf("lose worker:0 @step 5").find("'lose' takes a PS"), std::string::npos);
  EXPECT_NE(ErrorOf("stop ps:0 @step 5 for 5").find("bad duration '5'"), std::string::npos);
  EXPECT_NE(ErrorOf("stop ps:0 @step 5 for 0s").find("bad duration"), std::string::npos);
  EXPECT_NE(ErrorOf("stop ps:0 @step 5 for").find("bad duration ''"), std::string::npos);
  EXPECT_NE(ErrorOf("kill ps:0 @step 5 for 2s").find("unexpected 'for'"), std::string::npos);
  EXPECT_NE(ErrorOf("corrupt-latest ps:0 @step 5").find("found 'ps:0'"), std::string::npos);
}

TEST(DrillFaultsTest, ParsesNetworkFaults) {
  auto r = ParseFaults(
      "partition worker:1 @step 80 for 8s; partition worker:0,worker:1 @step 200 for 15s;"
      "flap ps:1 @step 300 3x; partition chief @step 400 for 500ms");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 4u);
  const auto& f = *r;
  EXPECT_EQ(f[0].kind, FaultKind::kPartition);
  EXPECT_EQ(f[0].ToString(), "partition worker:1 @step 80 for 8000ms");
  EXPECT_TRUE(f[0].peer_task().empty());
  EXPECT_TRUE(f[0].network());
  EXPECT_EQ(f[1].task(), "worker:0");
  EXPECT_EQ(f[1].peer_task(), "worker:1");
  EXPECT_EQ(f[1].ToString(), "partition worker:0,worker:1 @step 200 for 15000ms");
  EXPECT_EQ(f[2].kind, FaultKind::kFlap);
  EXPECT_EQ(f[2].flaps, 3);
  EXPECT_EQ(f[2].duration, 6 * kFlapHalfCycle);
  EXPECT_EQ(f[2].ToString(), "flap ps:1 @step 300 3x");
  EXPECT_EQ(f[3].task(), "chief:0");
  EXPECT_FALSE(ParseFaults("kill ps:0 @step 3")->front().network());
}

TEST(DrillFaultsTest, MalformedNetworkFaultsNameTheProblem) {
  EXPECT_NE(ErrorOf("partition worker:1 @step 80").find("needs 'for DURATION'"), std::string::npos);
  EXPECT_NE(ErrorOf("partition worker:1,worker:1 @step 8 for 2s").find("and itself"),
            std::string::npos);
  EXPECT_NE(ErrorOf("partition worker:1,gpu:0 @step 8 for 2s").find("unknown role 'gpu'"),
            std::string::npos);
  EXPECT_NE(ErrorOf("flap worker:0,worker:1 @step 8 2x").find("takes one member"),
            std::string::npos);
  EXPECT_NE(ErrorOf("flap worker:0 @step 8").find("needs a count"), std::string::npos);
  EXPECT_NE(ErrorOf("flap worker:0 @step 8 0x").find("bad flap count '0x'"), std::string::npos);
  EXPECT_NE(ErrorOf("flap worker:0 @step 8 3").find("bad flap count"), std::string::npos);
  EXPECT_NE(ErrorOf("unplug worker:0 @step 8").find("partition, flap, die-after-allreduce or"),
            std::string::npos);
}

}  // namespace
}  // namespace tandem::cli
