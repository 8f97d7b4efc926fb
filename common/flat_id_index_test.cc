#include "common/flat_id_index.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace tandem {
namespace {

TEST(FlatIdIndexTest, InsertNumbersDistinctIdsInFirstUseOrder) {
  FlatIdIndex idx;
  idx.Reset(4);
  EXPECT_EQ(idx.Insert(42), std::make_pair(0u, true));
  EXPECT_EQ(idx.Insert(7), std::make_pair(1u, true));
  EXPECT_EQ(idx.Insert(42), std::make_pair(0u, false));
  EXPECT_EQ(idx.size(), 2u);
  EXPECT_EQ(idx.Find(7), 1u);
  EXPECT_EQ(idx.Find(8), FlatIdIndex::kAbsent);
  idx.Reset(4);  // forgets
  EXPECT_EQ(idx.Find(42), FlatIdIndex::kAbsent);
  EXPECT_EQ(idx.size(), 0u);
}

// InsertAll (prefetching ahead) gives each position what Insert one at a time gives, repeats
// and sequential ids included, for sizes around the prefetch distance.
TEST(FlatIdIndexTest, InsertAllMatchesInsertOneByOne) {
  std::mt19937_64 rng(3);
  for (size_t n : {0, 1, 7, 8, 9, 100, 70000}) {
    std::vector<uint64_t> ids(n);
    for (size_t j = 0; j < n; ++j) ids[j] = j % 3 == 0 ? j / 3 : rng() % (n + 1);
    FlatIdIndex one, all;
    one.Reset(n);
    all.Reset(n);
    std::vector<std::pair<uint32_t, bool>> want, got;
    for (uint64_t id : ids) want.push_back(one.Insert(id));
    std::vector<size_t> positions;
    all.InsertAll(ids.data(), ids.size(), [&](size_t j, uint32_t index, bool inserted) {
      positions.push_back(j);
      got.emplace_back(index, inserted);
    });
    EXPECT_EQ(got, want) << n << " ids";
    ASSERT_EQ(positions.size(), n);
    for (size_t j = 0; j < n; ++j) ASSERT_EQ(positions[j], j);
    EXPECT_EQ(all.size(), one.size());
  }
}

}  // namespace
}  // namespace tandem
