#include "worker/data/synthetic.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "common/testing/test_util.h"
#include "worker/data/auc.h"
#include "worker/data/binary_format.h"

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

TEST(DeterministicExp, MatchesLibmClosely) {
  for (double x : {-30.0, -5.5, -1.0, -1e-9, 0.0, 0.3, 1.0, 2.5, 20.0, 700.0}) {
    EXPECT_NEAR(DeterministicExp(x) / std::exp(x), 1.0, 1e-14) << x;
  }
}

TEST(Synthetic, SameSeedSameBytesOtherSeedDiffers) {
  testing::TempDir dir;
  const SyntheticSpec spec = Spec(7, 1000);
  ASSERT_TRUE(WriteSyntheticCriteo(dir.File("a.tsv"), spec, 300).ok());
  ASSERT_TRUE(WriteSyntheticCriteo(dir.File("b.tsv"), spec, 300).ok());
  ASSERT_TRUE(WriteSyntheticBinary(dir.File("a.bin"), spec, 300).ok());
  ASSERT_TRUE(WriteSyntheticBinary(dir.File("b.bin"), spec, 300).ok());
  EXPECT_EQ(testing::ReadFile(dir.File("a.tsv")), testing::ReadFile(dir.File("b.tsv")));
  EXPECT_EQ(testing::ReadFile(dir.File("a.bin")), testing::ReadFile(dir.File("b.bin")));
  ASSERT_TRUE(WriteSyntheticCriteo(dir.File("c.tsv"), Spec(8, 1000), 300).ok());
  EXPECT_NE(testing::ReadFile(dir.File("a.tsv")), testing::ReadFile(dir.File("c.tsv")));
}

TEST(Synthetic, RecordIsAPureFunctionOfItsIndex) {
  const SyntheticGenerator gen(Spec(7, 1000));
  Sample a, b;
  gen.Generate(12345, &a);
  for (int n = 0; n < 10; ++n) gen.Generate(n, &b);  // other records in between
  gen.Generate(12345, &b);
  EXPECT_EQ(a, b);
  const SyntheticGenerator eval(Spec(7, 1000, {}, 1));
  eval.Generate(12345, &b);
  EXPECT_NE(a, b);
}

TEST(Synthetic, TeacherAucIsHighAndConstantScoreIsHalf) {
  const SyntheticGenerator gen(Spec(11, 10000));
  const int n = 20000;
  std::vector<double> p(n), constant(n, 0.3);
  std::vector<float> labels(n);
  Sample s;
  double positives = 0;
  for (int i = 0; i < n; ++i) {
    gen.Generate(i, &s, &p[i]);
    labels[i] = s.label();
    positives += s.label();
  }
  EXPECT_GT(TeacherAuc(p, labels), 0.7);
  EXPECT_DOUBLE_EQ(Auc(constant, labels), 0.5);
  EXPECT_GT(positives / n, 0.1);  // a CTR-like but learnable balance
  EXPECT_LT(positives / n, 0.5);
}

TEST(Synthetic, IdsFollowZipf) {
  const SyntheticGenerator gen(Spec(2, 1000));
  RawRecord raw;
  std::map<uint64_t, int> counts;
  for (int i = 0; i < 5000; ++i) {
    gen.GenerateRaw(i, &raw);
    ++counts[raw.cat[1]];
  }
  // P(rank 0) / P(rank 1) = 2^1.1 ~ 2.14; rank 0 alone is ~13 % of draws at vocab 1000.
  EXPECT_GT(counts[0], 1.6 * counts[1]);
  EXPECT_GT(counts[0], 500);
  EXPECT_LT(counts[0], 900);
}

TEST(Synthetic, WritersReturnTheTeacherAuc) {
  testing::TempDir dir;
  const SyntheticSpec spec = Spec(5, 500);
  auto tsv = WriteSyntheticCriteo(dir.File("x.tsv"), spec, 2000);
  auto bin = WriteSyntheticBinary(dir.File("x.bin"), spec, 2000);
  ASSERT_TRUE(tsv.ok() && bin.ok());
  EXPECT_DOUBLE_EQ(*tsv, *bin);
  EXPECT_GT(*tsv, 0.7);
}

}  // namespace
}  // namespace tandem::data

namespace tandem::data {
namespace {

double Logit(double p) { return std::log(p / (1.0 - p)); }

// Issue 19's teachers: task_correlation 1 gives the later label the first one's id weights (so
// with the linear teacher its logit is the first's minus the rarer bias, 0.5), 0 its own; the
// linear teacher drops the pairwise term, so the fm teacher's logits differ from it, and the
// cross teacher adds third-order products to the fm teacher.
TEST(Synthetic, CorrelatedTasksAndTheLinearTeacher) {
  Schema two(13, 26, 2);
  SyntheticSpec spec = Spec(5, 100, two);
  spec.teacher = SyntheticSpec::Teacher::kLinear;
  spec.task_correlation = 1.0;
  SyntheticGenerator same(spec);
  spec.task_correlation = 0.0;
  SyntheticGenerator own(spec);
  spec.teacher = SyntheticSpec::Teacher::kFm;
  SyntheticGenerator fm(spec);
  spec.teacher = SyntheticSpec::Teacher::kCross;
  SyntheticGenerator cross(spec);
  RawRecord a, b, c, d;
  int far = 0, fm_differs = 0, cross_differs = 0;
  for (int64_t n = 0; n < 200; ++n) {
    same.GenerateRaw(n, &a);
    own.GenerateRaw(n, &b);
    fm.GenerateRaw(n, &c);
    cross.GenerateRaw(n, &d);
    cross_differs += d.p[0] != c.p[0];
    EXPECT_NEAR(Logit(a.p[0]) - Logit(a.p[1]), 0.5, 1e-9) << n;
    EXPECT_EQ(a.p[0], b.p[0]) << n;  // task 0 does not depend on the correlation
    far += std::fabs(Logit(b.p[0]) - Logit(b.p[1]) - 0.5) > 0.1;
    fm_differs += c.p[0] != b.p[0];
  }
  EXPECT_GT(far, 150);
  EXPECT_GT(fm_differs, 150);
  EXPECT_GT(cross_differs, 150);  // the third-order term moves (nearly) every record
}

}  // namespace
}  // namespace tandem::data
