#include "server/ps/open_files.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>

namespace tandem::ps {
namespace {

TEST(OpenFilesTest, AStoreKeepsAQuarterOfTheLimitOpenWithinItsBounds) {
  EXPECT_EQ(MaxOpenTablesFor(0), kMinOpenTables);
  EXPECT_EQ(MaxOpenTablesFor(1024), kMinOpenTables);  // a login shell's usual soft limit
  EXPECT_EQ(MaxOpenTablesFor(4096), 1024);
  EXPECT_EQ(MaxOpenTablesFor(65536), kMaxOpenTables);  // the shipped units' LimitNOFILE
  EXPECT_EQ(MaxOpenTablesFor(uint64_t{1} << 40), kMaxOpenTables);
}

// The soft limit goes up to the hard one (at most kOpenFileLimitWanted), and MaxOpenTables
// follows it. Restores the limit it found.
TEST(OpenFilesTest, RaisingTheSoftLimitReachesTheHardOneAndTheBudgetFollows) {
  rlimit found{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &found), 0);
  ASSERT_GE(found.rlim_max, 512u) << "this test needs a hard RLIMIT_NOFILE of at least 512";
  rlimit low = found;
  low.rlim_cur = 512;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  EXPECT_EQ(MaxOpenTables(), kMinOpenTables);
  const uint64_t want = std::min<uint64_t>(found.rlim_max, kOpenFileLimitWanted);
  EXPECT_EQ(RaiseOpenFileLimit(), want);
  rlimit now{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &now), 0);
  EXPECT_EQ(now.rlim_cur, want);
  EXPECT_EQ(MaxOpenTables(), MaxOpenTablesFor(want));
  EXPECT_EQ(RaiseOpenFileLimit(), want);  // already there: unchanged
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &found), 0);
}

}  // namespace
}  // namespace tandem::ps
