#include "worker/data/pipeline.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "common/testing/test_util.h"
#include "worker/data/synthetic.h"

namespace tandem::data {
namespace {

const Schema kSmall{3, 4};

PipelineOptions Options(int world, int rank, int batch, int64_t start_step = 0, int threads = 1) {
  PipelineOptions o;
  o.threads = threads;
  o.world = world;
  o.rank = rank;
  o.batch = batch;
  o.start_step = start_step;
  return o;
}

std::unique_ptr<RecordSource> Synthetic(int64_t n) {
  SyntheticSpec spec;
  spec.seed = 4;
  spec.schema = kSmall;
  spec.vocab = 30;
  return std::make_unique<SyntheticSource>(spec, n);
}

// All samples of rank `rank`'s slice, in order.
std::vector<Sample> Samples(const Batch& batch) {
  std::vector<Sample> out(batch.size, Sample(batch.schema));
  for (int i = 0; i < batch.size; ++i) batch.Get(i, &out[i]);
  return out;
}

TEST(Batch, DedupInverseRebuildsIds) {
  auto source = Synthetic(1000);
  BatchReader reader(source.get(), 1, Options(1, 0, 64));
  Batch batch;
  ASSERT_TRUE(reader.ReadStep(3, &batch).ok());
  for (int f = 0; f < kSmall.num_categorical; ++f) {
    EXPECT_LT(batch.unique_ids[f].size(), 64u);  // Zipf over 30 values repeats
    for (int i = 0; i < batch.size; ++i) {
      EXPECT_EQ(batch.unique_ids[f][batch.inverse[f][i]], batch.ids[f][i]);
    }
    EXPECT_EQ(batch.inverse[f][0], 0u);  // first-occurrence order
  }
}

TEST(Pipeline, DeliversTheSameBatchesAsDirectReadsAndStops) {
  PipelineOptions opts = Options(2, 1, 16, 5);
  opts.queue_depth = 2;
  auto direct_source = Synthetic(100);
  BatchReader direct(direct_source.get(), 9, opts);
  Pipeline pipeline(Synthetic(100), 9, opts);
  pipeline.Start();
  Batch want;
  for (int64_t step = 5; step < 25; ++step) {  // several epochs of 100
    auto got = pipeline.Next();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(direct.ReadStep(step, &want).ok());
    EXPECT_EQ((*got)->step, step);
    EXPECT_EQ((*got)->first_position, (step * 2 + 1) * 16);
    EXPECT_EQ(Samples(**got), Samples(want));
    EXPECT_EQ((*got)->unique_ids, want.unique_ids);
    pipeline.Recycle(std::move(*got));
  }
  const auto t0 = std::chrono::steady_clock::now();
  pipeline.Stop();  // the producer is blocked on a full queue
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_EQ(pipeline.Next().status().code(), StatusCode::kCancelled);
}

TEST(Pipeline, RanksTogetherSeeTheOneWorkerBatch) {
  std::vector<Sample> want;
  {
    auto src = Synthetic(90);
    BatchReader reader(src.get(), 2, Options(1, 0, 24));
    Batch b;
    ASSERT_TRUE(reader.ReadStep(3, &b).ok());  // crosses the epoch boundary at 90
    want = Samples(b);
  }
  for (int m : {2, 4}) {
    std::vector<Sample> got;
    for (int r = 0; r < m; ++r) {
      Pipeline p(Synthetic(90), 2, Options(m, r, 24 / m, 3));
      p.Start();
      auto b = p.Next();
      ASSERT_TRUE(b.ok());
      for (auto& s : Samples(**b)) got.push_back(s);
    }
    EXPECT_EQ(got, want) << "M=" << m;
  }
}

std::string CriteoText(int rows, int bad_row) {
  SyntheticSpec spec;
  spec.seed = 1;
  spec.schema = kSmall;
  spec.vocab = 30;
  const SyntheticGenerator gen(spec);
  RawRecord raw;
  std::string text;
  for (int n = 0; n < rows; ++n) {
    gen.GenerateRaw(n, &raw);
    if (n == bad_row) {
      text += "1\tnot a number\n";
    } else {
      AppendCriteoLine(raw, &text);
    }
  }
  return text;
}

// Every field of every batch, bit for bit (memcmp of the float arrays, so -0 and NaN count).
void ExpectSameBatch(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.schema, b.schema);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.first_position, b.first_position);
  EXPECT_EQ(a.size, b.size);
  EXPECT_EQ(a.bad_count, b.bad_count);
  auto bits = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  EXPECT_TRUE(bits(a.label, b.label));
  EXPECT_TRUE(bits(a.weight, b.weight));
  EXPECT_TRUE(bits(a.dense, b.dense));
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.offsets, b.offsets);
  EXPECT_EQ(a.unique_ids, b.unique_ids);
  EXPECT_EQ(a.inverse, b.inverse);
}

// The batches of `steps` steps from a fresh pipeline; the batches are never recycled so that
// each is a distinct object.
std::vector<std::unique_ptr<Batch>> Drain(std::unique_ptr<RecordSource> source,
                                          const PipelineOptions& opts, int steps) {
  Pipeline p(std::move(source), 5, opts);
  p.Start();
  std::vector<std::unique_ptr<Batch>> out;
  for (int i = 0; i < steps; ++i) {
    auto b = p.Next();
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) break;
    out.push_back(std::move(*b));
  }
  return out;
}

// PROTOCOLS §15 scenario 22: a malformed line is a weight-0 sample in its own position.
TEST(Pipeline, ABadLineShiftsNothing) {
  testing::TempDir dir;
  testing::WriteFile(dir.File("good.tsv"), CriteoText(200, -1));
  testing::WriteFile(dir.File("bad.tsv"), CriteoText(200, 57));
  auto good = CriteoSource::Open({dir.File("good.tsv")}, kSmall, 16);
  auto bad = CriteoSource::Open({dir.File("bad.tsv")}, kSmall, 16);
  ASSERT_TRUE(good.ok() && bad.ok());
  BatchReader rg(good->get(), 3, Options(1, 0, 50));
  BatchReader rb(bad->get(), 3, Options(1, 0, 50));
  Batch bg, bb;
  int differing = 0;
  for (int64_t step = 0; step < 4; ++step) {
    ASSERT_TRUE(rg.ReadStep(step, &bg).ok() && rb.ReadStep(step, &bb).ok());
    const auto sg = Samples(bg), sb = Samples(bb);
    for (int i = 0; i < 50; ++i) {
      if (sg[i] == sb[i]) continue;
      ++differing;
      EXPECT_EQ(sb[i].weight, 0.0f);
      EXPECT_EQ(bb.bad_count, 1);
    }
  }
  EXPECT_EQ(differing, 1);
  EXPECT_EQ((*bad)->bad_log().count(), 1);
  EXPECT_EQ((*bad)->bad_log().reports()[0].rfind(dir.File("bad.tsv") + ":58:", 0), 0u);
}

TEST(Pipeline, TooManyBadLinesStopTheJobWithAClearMessage) {
  testing::TempDir dir;
  testing::WriteFile(dir.File("bad.tsv"), CriteoText(100, 7));
  auto src = CriteoSource::Open({dir.File("bad.tsv")}, kSmall, 16);
  ASSERT_TRUE(src.ok());
  PipelineOptions opts = Options(1, 0, 100);
  opts.max_bad_fraction = 0.001;
  Pipeline p(std::move(*src), 1, opts);
  p.Start();
  auto b = p.Next();
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(b.status().IsInvalidArgument());
  EXPECT_NE(b.status().message().find("max_bad_fraction"), std::string::npos) << b.status();
  EXPECT_NE(b.status().message().find("bad.tsv:8:"), std::string::npos) << b.status();
  EXPECT_EQ(p.Next().status(), b.status());  // sticky
  EXPECT_EQ(p.bad_count(), 1);

  // 1 bad line in 1000 with the default bound trains and is reported.
  testing::WriteFile(dir.File("ok.tsv"), CriteoText(1000, 500));
  auto ok_src = CriteoSource::Open({dir.File("ok.tsv")}, kSmall);
  ASSERT_TRUE(ok_src.ok());
  Pipeline q(std::move(*ok_src), 1, opts);
  q.Start();
  for (int i = 0; i < 15; ++i) ASSERT_TRUE(q.Next().ok()) << i;
  EXPECT_GE(q.bad_count(), 1);
  ASSERT_FALSE(q.bad_reports().empty());
  EXPECT_NE(q.bad_reports()[0].find("ok.tsv:501:"), std::string::npos);
}

TEST(Pipeline, ThreadCountChangesNothingDelivered) {
  testing::TempDir dir;
  testing::WriteFile(dir.File("d.tsv"), CriteoText(300, 77));  // a bad line too
  for (bool criteo : {false, true}) {
    auto source = [&]() -> std::unique_ptr<RecordSource> {
      if (!criteo) return Synthetic(150);
      auto s = CriteoSource::Open({dir.File("d.tsv")}, kSmall, 16);
      EXPECT_TRUE(s.ok()) << s.status();
      return std::move(*s);
    };
    // Rank 1 of 2 from step 3: 20 steps cross several epochs and blocks.
    PipelineOptions opts = Options(2, 1, 13, 3);
    opts.queue_depth = 3;
    const auto want = Drain(source(), opts, 20);
    ASSERT_EQ(want.size(), 20u);
    for (int threads : {2, 4}) {
      opts.threads = threads;
      const auto got = Drain(source(), opts, 20);
      ASSERT_EQ(got.size(), 20u);
      for (int i = 0; i < 20; ++i) {
        SCOPED_TRACE(::testing::Message()
                     << "criteo=" << criteo << " threads=" << threads << " i=" << i);
        EXPECT_EQ(got[i]->step, 3 + i);
        ExpectSameBatch(*got[i], *want[i]);
      }
    }
  }
}

TEST(Pipeline, SeveralThreadsStopMidStreamAndReportBadLinesInStepOrder) {
  PipelineOptions opts = Options(1, 0, 8, 0, 4);
  opts.queue_depth = 2;  // fewer slots than threads: two threads wait for the consumer
  Pipeline p(Synthetic(100), 1, opts);
  p.Start();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(p.Next().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the threads block
  const auto t0 = std::chrono::steady_clock::now();
  p.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_EQ(p.Next().status().code(), StatusCode::kCancelled);

  // The same failure as with one thread: the batch with the bad line fails the bound, and the
  // batches before it arrive first.
  testing::TempDir dir;
  testing::WriteFile(dir.File("bad.tsv"), CriteoText(400, 250));
  int want_delivered = -1;
  for (int threads : {1, 3}) {
    auto src = CriteoSource::Open({dir.File("bad.tsv")}, kSmall, 16);
    ASSERT_TRUE(src.ok());
    PipelineOptions o = Options(1, 0, 10, 0, threads);
    o.max_bad_fraction = 0.001;
    Pipeline q(std::move(*src), 1, o);
    q.Start();
    int delivered = 0;
    StatusOr<std::unique_ptr<Batch>> b = q.Next();
    for (; b.ok(); b = q.Next()) ++delivered;
    EXPECT_TRUE(b.status().IsInvalidArgument()) << b.status();
    EXPECT_NE(b.status().message().find("bad.tsv:251:"), std::string::npos) << b.status();
    EXPECT_EQ(q.bad_count(), 1);
    EXPECT_GT(delivered, 0);
    if (threads == 1) want_delivered = delivered;
    EXPECT_EQ(delivered, want_delivered) << "threads=" << threads;
  }
}

}  // namespace
}  // namespace tandem::data
