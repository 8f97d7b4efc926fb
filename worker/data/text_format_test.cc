#include "worker/data/text_format.h"

#include <gtest/gtest.h>

#include <cmath>

#include "worker/data/synthetic.h"

namespace tandem::data {
namespace {

config::JobConfig Job(const std::string& yaml) {
  auto job = config::ParseJobConfig(yaml, "job.yaml", {});
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *job : config::JobConfig{};
}

constexpr char kJob[] = R"(data:
  format: synthetic
  num_dense: 2
  labels: [click, buy]
  text: {columns: [buy, click, I2, hist, "-", item, I1]}
features:
  item: {table: items}
  hist: {table: items, max_len: 3, pooling: mean}
model: {interaction: concat, top_mlp: [8, 2]}
)";

Schema TwoFeatures(bool weighted = false) {
  Schema s{2, 2, 2};
  s.table = {0, 0};
  s.max_len = {1, 3};
  s.mean = {false, true};
  if (weighted) s.weighted = {false, true};
  return s;
}

TEST(TextFormatTest, WeightedIdsCarryTheirWeights) {
  auto layout = TextLayout::FromConfig(Job(kJob));
  ASSERT_TRUE(layout.ok());
  const Schema schema = TwoFeatures(/*weighted=*/true);
  Sample s(schema);
  const char* why = nullptr;
  ASSERT_TRUE(ParseTextLine("1\t0\t7\t12:0.5,5,9:2\t\t5\t", *layout, schema, &s, &why)) << why;
  EXPECT_EQ(s.id_weights, (std::vector<float>{1, 0.5f, 1, 2}));  // item unweighted: 1
  EXPECT_EQ(s.cat[1], CategoricalId(0, 12));
  EXPECT_FALSE(ParseTextLine("1\t0\t7\t12:x\t\t5\t", *layout, schema, &s, &why));
  EXPECT_STREQ(why, "bad id weight (want id:number)");
}

TEST(TextFormatTest, ParsesNamedColumnsListsAndSharedTables) {
  auto layout = TextLayout::FromConfig(Job(kJob));
  ASSERT_TRUE(layout.ok()) << layout.status();
  const Schema schema = TwoFeatures();
  Sample s(schema);
  const char* why = nullptr;
  ASSERT_TRUE(ParseTextLine("1\t0\t7\t12,5,12\tjunk\t5\t", *layout, schema, &s, &why)) << why;
  EXPECT_EQ(s.labels, (std::vector<float>{0, 1}));  // click = column 2, buy = column 1
  EXPECT_EQ(s.dense[0], 0.0f);                      // I1 empty
  EXPECT_EQ(s.dense[1], DenseTransform(7));
  ASSERT_EQ(s.offsets, (std::vector<uint32_t>{0, 1, 4}));
  // item 5 and the history's 5 are one id: the features share a table.
  EXPECT_EQ(s.cat[0], s.cat[2]);
  EXPECT_EQ(s.cat[1], s.cat[3]);
  EXPECT_NE(s.cat[0], s.cat[1]);
  EXPECT_EQ(s.cat[0], CategoricalId(0, 5));
  // Empty multi-hot column: an empty bag; empty single-hot: the table's missing id. A bag longer
  // than max_len keeps its first ids.
  ASSERT_TRUE(ParseTextLine("0\t1\t\t\t\t\t3.5", *layout, schema, &s, &why)) << why;
  EXPECT_EQ(s.offsets, (std::vector<uint32_t>{0, 1, 1}));
  EXPECT_EQ(s.cat[0], MissingId(0));
  EXPECT_FLOAT_EQ(s.dense[0], static_cast<float>(std::log1p(3.5)));
  ASSERT_TRUE(ParseTextLine("0\t1\t\t1,2,3,4,5\t\tab\t", *layout, schema, &s, &why)) << why;
  EXPECT_EQ(s.offsets[2] - s.offsets[1], 3u);
  EXPECT_EQ(s.cat[0], s.cat[0]);
}

TEST(TextFormatTest, MalformedLinesSayWhy) {
  auto layout = TextLayout::FromConfig(Job(kJob));
  ASSERT_TRUE(layout.ok());
  const Schema schema = TwoFeatures();
  Sample s(schema);
  struct Case {
    const char* line;
    const char* why;
  };
  for (const Case& c :
       {Case{"1\t0\t7\t1\t\t5", "too few columns"}, Case{"1\t0\t7\t1\t\t5\t\t", "too many columns"},
        Case{"2\t0\t7\t1\t\t5\t", "bad label (want 0 or 1)"},
        Case{"1\t0\tx7\t1\t\t5\t", "bad number in a dense column"},
        Case{"1\t0\t7\t1,,2\t\t5\t", "empty id in a list column"}}) {
    const char* why = nullptr;
    EXPECT_FALSE(ParseTextLine(c.line, *layout, schema, &s, &why)) << c.line;
    EXPECT_STREQ(why, c.why) << c.line;
    EXPECT_EQ(s.weight, 0.0f);
  }
}

TEST(TextFormatTest, GeneratedTextParsesToTheGeneratorsSamples) {
  const config::JobConfig job = Job(kJob);
  auto layout = TextLayout::FromConfig(job);
  ASSERT_TRUE(layout.ok());
  SyntheticSpec spec;
  spec.schema = TwoFeatures(/*weighted=*/true);
  spec.vocab = 50;
  const SyntheticGenerator gen(spec);
  RawRecord raw;
  Sample want(spec.schema), got(spec.schema);
  int multi = 0;
  for (int64_t n = 0; n < 300; ++n) {
    gen.GenerateRaw(n, &raw);
    ToSample(spec.schema, raw, &want);
    std::string line;
    AppendTextLine(raw, *layout, &line);
    line.pop_back();
    const char* why = nullptr;
    ASSERT_TRUE(ParseTextLine(line, *layout, spec.schema, &got, &why)) << line << ": " << why;
    EXPECT_EQ(got, want) << line;
    multi += got.offsets[2] - got.offsets[1] > 1;
  }
  EXPECT_GT(multi, 50);  // the history really is multi-hot
}

}  // namespace
}  // namespace tandem::data
