#include "serve/row_source.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "common/testing/test_util.h"

namespace tandem::serve {
namespace {

worker::FrozenTable Table(uint32_t table, uint32_t dim, std::vector<uint64_t> ids, float base) {
  worker::FrozenTable t;
  t.table = table;
  t.dim = dim;
  t.ids = std::move(ids);
  for (size_t i = 0; i < t.ids.size(); ++i)
    for (uint32_t d = 0; d < dim; ++d) t.values.push_back(base + static_cast<float>(t.ids[i]) + d);
  return t;
}

// A base that holds table 0's even ids 0..18 (row value = id), as a bundle would.
class EvenRows : public RowSource {
 public:
  Status Read(uint32_t table, std::span<const uint64_t> ids, float* out,
              uint8_t* found) const override {
    if (table != 0) return Status::InvalidArgument("unknown table");
    for (size_t i = 0; i < ids.size(); ++i) {
      found[i] = ids[i] % 2 == 0 && ids[i] < 20;
      if (found[i]) out[i * 2] = out[i * 2 + 1] = static_cast<float>(ids[i]);
    }
    return Status::Ok();
  }
  Rows rows_held() const override { return {0, 10}; }
};

TEST(MergeRowsTest, NewerRowsWinAndOrderIsKept) {
  const auto older = Table(0, 2, {1, 3, 5, 7}, 0.0f);
  const auto newer = Table(0, 2, {0, 3, 8}, 100.0f);
  const auto m = MergeRows(older, newer);
  EXPECT_EQ(m.ids, (std::vector<uint64_t>{0, 1, 3, 5, 7, 8}));
  ASSERT_EQ(m.values.size(), 12u);
  EXPECT_EQ(m.values[0], 100.0f);   // 0 from newer
  EXPECT_EQ(m.values[2], 1.0f);     // 1 from older
  EXPECT_EQ(m.values[4], 103.0f);   // 3: newer wins
  EXPECT_EQ(m.values[11], 109.0f);  // 8 from newer, second dim
  EXPECT_EQ(MergeRows(older, Table(0, 2, {}, 0)).ids, older.ids);
  EXPECT_EQ(MergeRows(Table(0, 2, {}, 0), newer).ids, newer.ids);
}

TEST(DeltaRowsTest, ChangedRowsOverrideTheBaseAndAbsentOnesStayAbsent) {
  auto base = std::make_shared<EvenRows>();
  std::vector<worker::FrozenTable> changed = {Table(0, 2, {2, 3}, 1000.0f)};
  DeltaRows rows(base, changed);
  const std::vector<uint64_t> ids = {0, 2, 3, 5, 40};
  std::vector<float> out(ids.size() * 2, -1.0f);
  std::vector<uint8_t> found(ids.size());
  ASSERT_TRUE(rows.Read(0, ids, out.data(), found.data()).ok());
  EXPECT_EQ(found, (std::vector<uint8_t>{1, 1, 1, 0, 0}));
  EXPECT_EQ(out[0], 0.0f);     // base
  EXPECT_EQ(out[2], 1002.0f);  // changed over base
  EXPECT_EQ(out[4], 1003.0f);  // new row
  EXPECT_EQ(out[6], -1.0f);    // absent: untouched
  EXPECT_EQ(rows.rows(), 2u);
  EXPECT_EQ(rows.rows_held().in_memory, 2u);
  EXPECT_EQ(rows.rows_held().on_disk, 10u);
  EXPECT_FALSE(rows.Read(1, ids, out.data(), found.data()).ok());  // the base's error
}

TEST(BundleRowsTest, ReadsTheMappedTableFiles) {
  testing::TempDir dir;
  auto parsed = config::ParseJobConfig(
      "", "job.yaml",
      {config::Override{"data.num_categorical=2"}, config::Override{"model.embedding_dim=4"},
       config::Override{"model.bottom_mlp=[8, 4]"}});
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const config::JobConfig job = *parsed;
  const auto specs = embedding::TableSpecsFromConfig(job);
  worker::FrozenModel m;
  m.job = job;
  m.step = 9;
  for (uint32_t t = 0; t < 2; ++t)
    m.tables.push_back(Table(t, specs[t].dim, {5, 9, 1u << 30}, t * 10.0f));
  offline::BundleHeader h;
  h.job = job;
  for (uint32_t t = 0; t < 2; ++t) {
    h.table_files.push_back(dir.File("t" + std::to_string(t) + ".emb"));
    testing::WriteFile(h.table_files[t], offline::EncodeTableFile(m.tables[t]));
  }
  auto rows = BundleRows::Open(h);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ((*rows)->rows(), 6u);
  const std::vector<uint64_t> ids = {9, 4, 1u << 30};
  std::vector<float> out(ids.size() * 4, -1.0f);
  std::vector<uint8_t> found(ids.size());
  ASSERT_TRUE((*rows)->Read(1, ids, out.data(), found.data()).ok());
  EXPECT_EQ(found, (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(out[0], 19.0f);
  EXPECT_EQ(out[4], -1.0f);
  EXPECT_EQ(out[8], 10.0f + (1u << 30));
  EXPECT_FALSE((*rows)->Read(2, ids, out.data(), found.data()).ok());
  // A truncated table file is refused by name.
  const std::string bytes = testing::ReadFile(h.table_files[0]);
  testing::WriteFile(h.table_files[0], bytes.substr(0, bytes.size() - 4));
  auto bad = BundleRows::Open(h);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("t0.emb"), std::string::npos) << bad.status().ToString();
}

}  // namespace
}  // namespace tandem::serve
