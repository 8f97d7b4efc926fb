#include "common/failpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "common/testing/test_util.h"

namespace tandem::failpoint {
namespace {

Status ArmWith(const char* spec, const std::string& task) {
  ::setenv("TANDEM_FAILPOINT", spec, 1);
  Status s = Arm(task);
  ::unsetenv("TANDEM_FAILPOINT");
  return s;
}

TEST(FailpointTest, MalformedSpecsAreErrorsNamingTheForm) {
  for (const char* bad :
       {"worker:1", "worker:1 die-after-allreduce", "worker:1 die-after-allreduce 5",
        "worker:1 die-after-allreduce @step x", "worker:1 die-after-allreduce @step -1",
        "worker:1 die-after-allreduce @step 5 now"}) {
    Status s = ArmWith(bad, "worker:1");
    EXPECT_TRUE(s.IsInvalidArgument()) << bad;
    EXPECT_NE(s.message().find("<task> <point> @step <n>"), std::string::npos) << s.ToString();
  }
  Status s = ArmWith("worker:1 no-such-point @step 5", "worker:0");
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_NE(s.message().find("no fault point 'no-such-point'"), std::string::npos);
}

// One test: arming is process-wide and happens once in a daemon.
TEST(FailpointTest, FiresForItsTaskAndStepOnlyAndOncePerMarker) {
  EXPECT_TRUE(ArmWith("worker:1 die-after-allreduce @step 7", "worker:0").ok());
  EXPECT_FALSE(Fires("die-after-allreduce", 7)) << "armed for another task";
  testing::TempDir dir;
  const std::string marker = dir.File("fired");
  ::setenv("TANDEM_FAILPOINT_ONCE", marker.c_str(), 1);
  EXPECT_TRUE(ArmWith("worker:1 die-after-allreduce @step 7", "worker:1").ok());
  ::unsetenv("TANDEM_FAILPOINT_ONCE");
  EXPECT_FALSE(Fires("die-after-allreduce", 6));
  EXPECT_FALSE(std::filesystem::exists(marker));
  EXPECT_TRUE(Fires("die-after-allreduce", 7));
  EXPECT_TRUE(std::filesystem::exists(marker));
  EXPECT_FALSE(Fires("die-after-allreduce", 7)) << "the marker says it fired before";
}

// A restore point is taken at some steps only: its point fires at the first one at or after the
// armed step, once, while Fires keeps to the exact step. (Arming again replaces the point.)
TEST(FailpointTest, AtOrAfterFiresAtTheFirstStepFromTheArmedOneAndOnce) {
  testing::TempDir dir;
  const std::string marker = dir.File("fired");
  ::setenv("TANDEM_FAILPOINT_ONCE", marker.c_str(), 1);
  EXPECT_TRUE(ArmWith("ps:1 die-in-restore-point @step 100", "ps:1").ok());
  ::unsetenv("TANDEM_FAILPOINT_ONCE");
  EXPECT_FALSE(FiresAtOrAfter("die-in-restore-point", 99));
  EXPECT_FALSE(FiresAtOrAfter("die-after-allreduce", 149)) << "another point";
  EXPECT_FALSE(Fires("die-in-restore-point", 149)) << "Fires wants the step itself";
  EXPECT_FALSE(std::filesystem::exists(marker));
  EXPECT_TRUE(FiresAtOrAfter("die-in-restore-point", 149));
  EXPECT_TRUE(std::filesystem::exists(marker));
  EXPECT_FALSE(FiresAtOrAfter("die-in-restore-point", 199)) << "the marker says it fired before";
}

}  // namespace
}  // namespace tandem::failpoint
