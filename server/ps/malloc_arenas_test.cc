#include "server/ps/malloc_arenas.h"

#include <gtest/gtest.h>

namespace tandem::ps {
namespace {

TEST(MallocArenasTest, TheEnvironmentWinsWhereItHoldsAPositiveNumber) {
  EXPECT_EQ(MallocArenaLimit(nullptr), kMallocArenas);
  EXPECT_EQ(MallocArenaLimit("1"), 1);
  EXPECT_EQ(MallocArenaLimit("16"), 16);
  for (const char* bad : {"", "0", "-2", "four", "4x", "99999999999999999999", "2000"})
    EXPECT_EQ(MallocArenaLimit(bad), kMallocArenas) << "'" << bad << "'";
}

}  // namespace
}  // namespace tandem::ps
