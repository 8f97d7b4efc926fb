#include "worker/data/binary_format.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include "common/config/job_config.h"
#include "common/testing/test_util.h"
#include "worker/data/record_source.h"
#include "worker/data/synthetic.h"
#include "worker/data/text_format.h"

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

// A preloaded reader (data.memory_bytes) reads from memory what the file held when it was
// loaded: the same samples and raw bytes as a reader that preads, through clones too, and not
// the bytes written over the file afterwards.
TEST(Binary, PreloadedReadsEqualFileReadsAndIgnoreLaterWrites) {
  testing::TempDir dir;
  const std::string path = WriteNumbered(dir.File("p.bin"), 3000);
  auto file = BinaryReader::Open(path, Schema{});
  auto mem = BinaryReader::Open(path, Schema{});
  ASSERT_TRUE(file.ok() && mem.ok());
  EXPECT_EQ((*mem)->records_bytes(), 3000 * BinaryRecordSize({}));
  ASSERT_TRUE((*mem)->Preload().ok());
  EXPECT_TRUE((*mem)->preloaded());
  EXPECT_FALSE((*file)->preloaded());
  auto clone = (*mem)->Clone();
  ASSERT_TRUE(clone.ok()) << clone.status();
  EXPECT_TRUE((*clone)->preloaded());
  Sample a, b, c;
  for (int n : {2999, 0, 1500, 7}) {
    ASSERT_TRUE((*file)->Read(n, &a).ok());
    ASSERT_TRUE((*mem)->Read(n, &b).ok());
    ASSERT_TRUE((*clone)->Read(n, &c).ok());
    EXPECT_EQ(a, Numbered(n));
    EXPECT_EQ(b, a);
    EXPECT_EQ(c, a);
  }
  std::vector<char> raw_file, raw_mem;
  ASSERT_TRUE((*file)->ReadRaw(10, 100, &raw_file).ok());
  ASSERT_TRUE((*mem)->ReadRaw(10, 100, &raw_mem).ok());
  EXPECT_EQ(raw_mem, raw_file);
  EXPECT_EQ((*mem)->Read(3000, &b).code(), StatusCode::kOutOfRange);
  // Record 5's label overwritten in place: the file reader sees it, the loaded copy does not.
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const float label = 7.0f;
  ASSERT_EQ(::pwrite(fd, &label, 4, kBinaryHeaderSize + 5 * BinaryRecordSize({})), 4);
  ::close(fd);
  ASSERT_TRUE((*file)->Read(5, &a).ok());
  ASSERT_TRUE((*mem)->Read(5, &b).ok());
  EXPECT_EQ(a.labels[0], 7.0f);
  EXPECT_EQ(b, Numbered(5));
}

// BinarySource loads files in order while their records fit the budget, the rest stay on disk,
// and every record reads the same either way.
TEST(Binary, SourcePreloadsTheFilesThatFitItsBudget) {
  testing::TempDir dir;
  const std::vector<std::string> paths = {WriteNumbered(dir.File("a.bin"), 100),
                                          WriteNumbered(dir.File("b.bin"), 300),
                                          WriteNumbered(dir.File("c.bin"), 100)};
  const uint64_t rec = BinaryRecordSize({});
  for (uint64_t budget : {uint64_t{0}, 100 * rec, 250 * rec, 500 * rec}) {
    auto src = BinarySource::Open(paths, Schema{}, budget);
    ASSERT_TRUE(src.ok()) << src.status();
    // 100 * rec and 250 * rec: a.bin fits, b.bin does not, c.bin then fits only the larger.
    const uint64_t want = budget == 0           ? 0
                          : budget == 100 * rec ? 100 * rec
                          : budget == 250 * rec ? 200 * rec
                                                : 500 * rec;
    EXPECT_EQ((*src)->preloaded_bytes(), want) << budget;
    auto clone = (*src)->Clone();
    ASSERT_TRUE(clone.ok());
    Sample s;
    for (int64_t i :
         {int64_t{0}, int64_t{99}, int64_t{100}, int64_t{399}, int64_t{400}, int64_t{499}}) {
      const int n = static_cast<int>(i < 100 ? i : i < 400 ? i - 100 : i - 400);
      ASSERT_TRUE((*src)->Read(i, &s).ok());
      EXPECT_EQ(s, Numbered(n)) << budget << " " << i;
      ASSERT_TRUE((*clone)->Read(i, &s).ok());
      EXPECT_EQ(s, Numbered(n)) << budget << " " << i;
    }
  }
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
  bad_version[8] = 3;  // 1 and 2 are both read
  testing::WriteFile(dir.File("version.bin"), bad_version);
  r = BinaryReader::Open(dir.File("version.bin"));
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();
  EXPECT_NE(r.status().message().find("version 3"), std::string::npos);

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

// The multi-hot job of issue 18: a shared table, a mean-pooled bag, a weighted bag, two labels.
constexpr char kMultiHotJob[] = R"(data:
  format: synthetic
  num_dense: 2
  labels: [click, buy]
features:
  item: {table: items}
  hist: {table: items, max_len: 4, pooling: mean}
  tags: {max_len: 3, weighted: true}
model: {interaction: concat, top_mlp: [8, 2]}
)";

config::JobConfig MultiHotJob() {
  auto job = config::ParseJobConfig(kMultiHotJob, "job.yaml", {});
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *job : config::JobConfig{};
}

uint32_t U32At(const std::string& bytes, size_t at) {
  uint32_t v;
  std::memcpy(&v, bytes.data() + at, 4);
  return v;
}
uint64_t U64At(const std::string& bytes, size_t at) {
  uint64_t v;
  std::memcpy(&v, bytes.data() + at, 8);
  return v;
}
void PutU32(std::string* bytes, size_t at, uint32_t v) { std::memcpy(bytes->data() + at, &v, 4); }
void PutU64(std::string* bytes, size_t at, uint64_t v) { std::memcpy(bytes->data() + at, &v, 8); }

TEST(BinaryV2, MultiHotWeightedTwoLabelRoundTripEqualsTheGenerator) {
  testing::TempDir dir;
  const Schema schema = SchemaFromConfig(MultiHotJob());
  ASSERT_EQ(BinaryVersionFor(schema), kBinaryVersionV2);
  const SyntheticSpec spec = Spec(9, 40, schema);
  const SyntheticGenerator gen(spec);
  const int rows = 3000;  // crosses a buffer flush
  auto aucs = WriteSyntheticBinaryTasks(dir.File("m.bin"), spec, rows);
  ASSERT_TRUE(aucs.ok()) << aucs.status();
  ASSERT_EQ(aucs->size(), 2u);
  EXPECT_EQ(U32At(testing::ReadFile(dir.File("m.bin")), 8), 2u);  // version
  auto r = BinaryReader::Open(dir.File("m.bin"), schema);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->version(), 2u);
  ASSERT_EQ((*r)->num_records(), rows);
  Sample got, want(schema);
  std::vector<Sample> sequential;
  bool saw_bag = false, saw_empty = false, saw_weight = false;
  for (int n = 0; n < rows; ++n) {
    ASSERT_TRUE((*r)->Read(n, &got).ok()) << n;
    gen.Generate(n, &want);
    ASSERT_EQ(got, want) << n;
    sequential.push_back(got);
    saw_bag |= got.offsets[2] - got.offsets[1] > 1;
    saw_empty |= got.offsets[3] == got.offsets[2];
    for (float w : got.id_weights) saw_weight |= w != 1.0f;
  }
  EXPECT_TRUE(saw_bag && saw_empty && saw_weight);  // the test covers what it claims to
  // Direct seeks, in any order and through a clone, read what sequential reading read; so does
  // a reader that loaded the file into memory, and its clone.
  auto clone = (*r)->Clone();
  ASSERT_TRUE(clone.ok()) << clone.status();
  auto mem = BinaryReader::Open(dir.File("m.bin"), schema);
  ASSERT_TRUE(mem.ok());
  ASSERT_TRUE((*mem)->Preload().ok());
  auto mem_clone = (*mem)->Clone();
  ASSERT_TRUE(mem_clone.ok()) << mem_clone.status();
  ASSERT_TRUE((*mem_clone)->preloaded());
  for (int n : {rows - 1, 0, 1777, 5, 2048, 1}) {
    ASSERT_TRUE((*r)->Read(n, &got).ok());
    EXPECT_EQ(got, sequential[n]) << n;
    ASSERT_TRUE((*clone)->Read(n, &got).ok());
    EXPECT_EQ(got, sequential[n]) << n;
    ASSERT_TRUE((*mem)->Read(n, &got).ok());
    EXPECT_EQ(got, sequential[n]) << n;
    ASSERT_TRUE((*mem_clone)->Read(n, &got).ok());
    EXPECT_EQ(got, sequential[n]) << n;
  }
  EXPECT_EQ((*r)->Read(rows, &got).code(), StatusCode::kOutOfRange);
}

// The default schema still writes version 1, byte for byte the layout documented in
// binary_format.h (spelled out here independently of the writer).
TEST(BinaryV2, DefaultSchemaStillWritesVersionOneBytes) {
  testing::TempDir dir;
  const SyntheticSpec spec = Spec(4, 100);
  const int rows = 40;
  ASSERT_TRUE(WriteSyntheticBinary(dir.File("d.bin"), spec, rows).ok());
  const SyntheticGenerator gen(spec);
  std::string want(kBinaryHeaderSize, '\0');
  std::memcpy(want.data(), "TNDMDATA", 8);
  PutU32(&want, 8, 1);
  PutU32(&want, 12, 13);
  PutU32(&want, 16, 26);
  PutU32(&want, 20, 8 + 4 * 13 + 8 * 26);
  PutU64(&want, 24, rows);
  Sample s;
  for (int n = 0; n < rows; ++n) {
    gen.Generate(n, &s);
    want.append(reinterpret_cast<const char*>(s.labels.data()), 4);
    want.append(reinterpret_cast<const char*>(&s.weight), 4);
    want.append(reinterpret_cast<const char*>(s.dense.data()), 4 * 13);
    want.append(reinterpret_cast<const char*>(s.cat.data()), 8 * 26);
  }
  EXPECT_EQ(testing::ReadFile(dir.File("d.bin")), want);
}

class CorruptV2 : public ::testing::Test {
 protected:
  void SetUp() override {
    schema_ = SchemaFromConfig(MultiHotJob());
    ASSERT_TRUE(WriteSyntheticBinaryTasks(dir_.File("good.bin"), Spec(2, 30, schema_), 10).ok());
    bytes_ = testing::ReadFile(dir_.File("good.bin"));
    records_ = U64At(bytes_, 40);
    index_ = U64At(bytes_, 48);
  }
  // Writes `bytes` and opens it: the error, or OK.
  Status OpenBad(const std::string& bytes) {
    testing::WriteFile(dir_.File("bad.bin"), bytes);
    return BinaryReader::Open(dir_.File("bad.bin"), schema_).status();
  }
  void ExpectDataLoss(const Status& s, const std::string& why) {
    EXPECT_TRUE(s.IsDataLoss()) << why << ": " << s;
    EXPECT_NE(s.message().find(dir_.File("bad.bin")), std::string::npos) << why << ": " << s;
  }
  uint64_t IndexAt(int n) const { return U64At(bytes_, index_ + 8 * n); }

  testing::TempDir dir_;
  Schema schema_;
  std::string bytes_;
  uint64_t records_ = 0, index_ = 0;
};

TEST_F(CorruptV2, TruncatedOrUnfinishedFilesAreDataLoss) {
  ExpectDataLoss(OpenBad(bytes_.substr(0, bytes_.size() - 4)), "truncated index");
  ExpectDataLoss(OpenBad(bytes_.substr(0, index_)), "no index");
  ExpectDataLoss(OpenBad(bytes_.substr(0, 40)), "no header");
  std::string unfinished = bytes_;
  PutU64(&unfinished, 24, 0);
  PutU64(&unfinished, 48, 0);
  ExpectDataLoss(OpenBad(unfinished), "unfinished writer");
  std::string huge = bytes_;
  PutU64(&huge, 24, ~uint64_t{0});
  ExpectDataLoss(OpenBad(huge), "huge count");
}

TEST_F(CorruptV2, BadIndexIsDataLoss) {
  std::string decreasing = bytes_;
  PutU64(&decreasing, index_ + 8 * 4, IndexAt(3) - 1);
  ExpectDataLoss(OpenBad(decreasing), "decreasing");
  std::string beyond = bytes_;
  PutU64(&beyond, index_ + 8 * 10, IndexAt(10) + 8);
  ExpectDataLoss(OpenBad(beyond), "end beyond the records");
  std::string first = bytes_;
  PutU64(&first, index_, 4);
  ExpectDataLoss(OpenBad(first), "first offset not 0");
  std::string short_record = bytes_;  // shorter than labels + weight + dense + counts
  PutU64(&short_record, index_ + 8 * 5, IndexAt(4) + 3);
  ExpectDataLoss(OpenBad(short_record), "record shorter than its fixed part");
  std::string records_at = bytes_;
  PutU64(&records_at, 40, records_ + 8);
  ExpectDataLoss(OpenBad(records_at), "records offset");
  std::string feature = bytes_;
  PutU32(&feature, kBinaryHeaderSize + 8 * 1, 0);  // max_len 0
  ExpectDataLoss(OpenBad(feature), "feature entry");
  std::string labels = bytes_;
  PutU32(&labels, 20, 0);
  ExpectDataLoss(OpenBad(labels), "no labels");
}

TEST_F(CorruptV2, InconsistentCountsAreDataLossOnRead) {
  // Record 2's counts sit after 2 labels, the weight and 2 dense values.
  const uint64_t counts = records_ + IndexAt(2) + 4 * (2 + 1 + 2);
  for (uint32_t delta : {1u, 1000u}) {
    std::string bad = bytes_;
    PutU32(&bad, counts + 4, U32At(bytes_, counts + 4) + delta);
    ASSERT_TRUE(OpenBad(bad).ok());  // the index is sound; the record is not
    for (bool preload : {false, true}) {
      auto r = BinaryReader::Open(dir_.File("bad.bin"), schema_);
      ASSERT_TRUE(r.ok());
      if (preload) {
        ASSERT_TRUE((*r)->Preload().ok());
      }
      Sample s;
      ExpectDataLoss((*r)->Read(2, &s), "counts disagree with the length");
      EXPECT_TRUE((*r)->Read(1, &s).ok());
      EXPECT_TRUE((*r)->Read(3, &s).ok());
    }
  }
}

TEST_F(CorruptV2, AnotherShapeIsRefusedNamingBoth) {
  Schema other = schema_;
  other.weighted[2] = false;
  auto r = BinaryReader::Open(dir_.File("good.bin"), other);
  ASSERT_TRUE(r.status().IsInvalidArgument()) << r.status();
  EXPECT_NE(r.status().message().find("3/1w), the job expects"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("2 labels"), std::string::npos) << r.status();
  r = BinaryReader::Open(dir_.File("good.bin"), Schema{});
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();
  // A version 1 file for a multi-hot job.
  ASSERT_TRUE(WriteSyntheticBinary(dir_.File("v1.bin"), Spec(2, 30), 5).ok());
  r = BinaryReader::Open(dir_.File("v1.bin"), schema_);
  ASSERT_TRUE(r.status().IsInvalidArgument()) << r.status();
  EXPECT_NE(r.status().message().find("13 dense, 26 features, 1 label, the job expects 2 dense"),
            std::string::npos)
      << r.status();
}

TEST(BinaryV2, ConvertsTheTextFormatKeepingPositions) {
  testing::TempDir dir;
  const config::JobConfig job = MultiHotJob();
  const Schema schema = SchemaFromConfig(job);
  auto layout = TextLayout::FromConfig(job);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const SyntheticSpec spec = Spec(6, 60, schema);
  ASSERT_TRUE(WriteSyntheticText(dir.File("in.txt"), spec, *layout, 200).ok());
  std::string text = testing::ReadFile(dir.File("in.txt"));
  size_t at = 0;
  for (int line = 0; line < 7; ++line) at = text.find('\n', at) + 1;
  text.insert(at, "1\tnot\ta line\n");  // becomes line 8, record 7
  testing::WriteFile(dir.File("in.txt"), text);
  EXPECT_TRUE(Convert({dir.File("in.txt")}, dir.File("x.bin"), schema).status().IsInvalidArgument())
      << "Criteo lines cannot fill a multi-hot schema";
  auto result = Convert({dir.File("in.txt")}, dir.File("out.bin"), schema, &*layout);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->rows, 201);
  EXPECT_EQ(result->bad_rows, 1);
  ASSERT_EQ(result->bad_reports.size(), 1u);
  EXPECT_EQ(result->bad_reports[0].rfind(dir.File("in.txt") + ":8:", 0), 0u)
      << result->bad_reports[0];
  auto r = BinaryReader::Open(dir.File("out.bin"), schema);
  ASSERT_TRUE(r.ok()) << r.status();
  const SyntheticGenerator gen(spec);
  Sample got, want(schema);
  ASSERT_TRUE((*r)->Read(7, &got).ok());
  EXPECT_EQ(got.weight, 0.0f);
  for (int n = 0; n < 200; ++n) {
    ASSERT_TRUE((*r)->Read(n + (n >= 7), &got).ok());
    gen.Generate(n, &want);
    ASSERT_EQ(got, want) << n;  // text and direct generation agree bit for bit
  }
}

}  // namespace
}  // namespace tandem::data
