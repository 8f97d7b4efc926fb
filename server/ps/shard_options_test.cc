#include "server/ps/shard_options.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tandem::ps {
namespace {

ShardOptions Resolve(const std::vector<std::string>& sets) {
  std::vector<config::Override> overrides;
  for (const std::string& s : sets) overrides.push_back(config::Override{s});
  auto job = config::ParseJobConfig("", "job.yaml", overrides);
  EXPECT_TRUE(job.ok()) << job.status();
  return ShardOptionsFromConfig(job.ok() ? *job : config::JobConfig{}, 0);
}

// The default bound is a quarter of a large cache, and 64 MiB for any cache smaller than
// 256 MiB: what a restore point's flush may write is bytes, whatever the cache.
TEST(ShardOptionsTest, DefaultDirtyBoundIsAQuarterOfTheCacheAndNeverUnder64MiB) {
  constexpr uint64_t kMiB = 1 << 20;
  EXPECT_EQ(DefaultMaxDirtyBytes(10 * kMiB), 64 * kMiB);
  EXPECT_EQ(DefaultMaxDirtyBytes(256 * kMiB), 64 * kMiB);
  EXPECT_EQ(DefaultMaxDirtyBytes(6144 * kMiB), 1536 * kMiB);
  EXPECT_EQ(Resolve({"ps.cache_bytes=10690607"}).max_dirty_bytes, 64 * kMiB);
  EXPECT_EQ(Resolve({"ps.cache_bytes=2147483648"}).max_dirty_bytes, 512 * kMiB);
  // An explicit bound is taken as given, however small; -1 is none.
  EXPECT_EQ(Resolve({"ps.cache_bytes=10690607", "ps.max_dirty_bytes=2672651"}).max_dirty_bytes,
            2672651u);
  EXPECT_EQ(Resolve({"ps.cache_bytes=10690607", "ps.max_dirty_bytes=-1"}).max_dirty_bytes, 0u);
}

}  // namespace
}  // namespace tandem::ps
