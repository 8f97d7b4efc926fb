#include "worker/data/binary_format.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "common/testing/test_util.h"
#include "worker/data/synthetic.h"

namespace tandem::data {
namespace {

SyntheticSpec Spec(uint64_t seed, int64_t vocab, Schema schema = {}, uint32_t stream = 0) {
  SyntheticSpec s;
  s.seed = seed;
  s.vocab = vocab;
  s.schema = schema;
  s.stream = stream;
  return s;
}

Sample Numbered(int n, const Schema& schema = {}) {
  Sample s(schema);
  s.labels[0] = n % 2;
  s.weight = 1;
  for (size_t d = 0; d < s.dense.size(); ++d) s.dense[d] = n + 0.25f * d;
  for (size_t f = 0; f < s.cat.size(); ++f) s.cat[f] = uint64_t(n) << 20 | f;
  return s;
}

std::string WriteNumbered(const std::string& path, int rows) {
  auto w = BinaryWriter::Create(path, {});
  EXPECT_TRUE(w.ok());
  for (int n = 0; n < rows; ++n) EXPECT_TRUE((*w)->Append(Numbered(n)).ok());
  EXPECT_TRUE((*w)->Finish().ok());
  return path;
}

TEST(Binary, RoundTripAndSeek) {
  testing::TempDir dir;
  const std::string path = WriteNumbered(dir.File("a.bin"), 5000);  // crosses a buffer flush
  auto r = BinaryReader::Open(path, Schema{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->num_records(), 5000);
  Sample s;
  for (int n : {4999, 0, 1234, 3}) {  // any order: O(1) seek
    ASSERT_TRUE((*r)->Read(n, &s).ok());
    EXPECT_EQ(s, Numbered(n)) << n;
  }
  EXPECT_EQ((*r)->Read(5000, &s).code(), StatusCode::kOutOfRange);
}

TEST(Binary, TruncatedFileIsDataLoss) {
  testing::TempDir dir;
  const std::string path = WriteNumbered(dir.File("t.bin"), 10);
  ASSERT_EQ(::truncate(path.c_str(), kBinaryHeaderSize + 9 * BinaryRecordSize({}) + 7), 0);
  auto r = BinaryReader::Open(path);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsDataLoss()) << r.status();
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos);
  ASSERT_EQ(::truncate(path.c_str(), 20), 0);  // not even a header
  EXPECT_TRUE(BinaryReader::Open(path).status().IsDataLoss());
}

TEST(Binary, WrongMagicVersionOrFieldsAreInvalidArgument) {
  testing::TempDir dir;
  const std::string path = WriteNumbered(dir.File("m.bin"), 3);
  std::string bytes = testing::ReadFile(path);
  std::string bad_magic = bytes;
  bad_magic[0] = 'X';
  testing::WriteFile(dir.File("magic.bin"), bad_magic);
  auto r = BinaryReader::Open(dir.File("magic.bin"));
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();
  EXPECT_NE(r.status().message().find("bad magic"), std::string::npos);

  std::string bad_version = bytes;
  bad_version[8] = 2;
  testing::WriteFile(dir.File("version.bin"), bad_version);
  r = BinaryReader::Open(dir.File("version.bin"));
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();
  EXPECT_NE(r.status().message().find("version 2"), std::string::npos);

  r = BinaryReader::Open(path, Schema{13, 27});
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();

  std::string garbage(1000, '\xff');
  std::copy(bytes.begin(), bytes.begin() + 12, garbage.begin());  // good magic+version only
  testing::WriteFile(dir.File("garbage.bin"), garbage);
  EXPECT_TRUE(BinaryReader::Open(dir.File("garbage.bin")).status().IsDataLoss());
}

TEST(Binary, ConvertKeepsLinePositionsAndCountsBadRows) {
  testing::TempDir dir;
  const SyntheticSpec spec = Spec(3, 50);
  const SyntheticGenerator gen(spec);
  RawRecord raw;
  std::string text;
  for (int n = 0; n < 20; ++n) {
    gen.GenerateRaw(n, &raw);
    if (n == 4) text += "1\tbroken\n";
    AppendCriteoLine(raw, &text);
  }
  testing::WriteFile(dir.File("in.tsv"), text);
  auto result = Convert({dir.File("in.tsv")}, dir.File("out.bin"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->rows, 21);
  EXPECT_EQ(result->bad_rows, 1);
  ASSERT_EQ(result->bad_reports.size(), 1u);
  EXPECT_EQ(result->bad_reports[0].rfind(dir.File("in.tsv") + ":5:", 0), 0u);
  auto r = BinaryReader::Open(dir.File("out.bin"));
  ASSERT_TRUE(r.ok());
  Sample got, want;
  ASSERT_TRUE((*r)->Read(4, &got).ok());
  EXPECT_EQ(got.weight, 0.0f);
  for (int n : {0, 5, 19}) {
    ASSERT_TRUE((*r)->Read(n + (n >= 4), &got).ok());
    gen.Generate(n, &want);
    EXPECT_EQ(got, want) << n;  // TSV text and direct generation agree bit for bit
  }
}

}  // namespace
}  // namespace tandem::data
