// A frozen model scores exactly as the trainer's evaluator did on the model it was frozen from;
// ids without a row read as documented. Linked into trainer_tests (main() in trainer_test.cc).
#include "worker/frozen_model.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/embedding/initializer.h"
#include "common/testing/test_util.h"
#include "worker/trainer_test_util.h"

namespace tandem::worker {
namespace {

using ::tandem::testing::TempDir;
using ::tandem::testing::WriteFile;

config::JobConfig Job(const std::string& data_yaml) {
  auto job = config::ParseJobConfig(
      data_yaml +
          "model:\n  embedding_dim: 4\n  bottom_mlp: [8, 4]\n  top_mlp: [8, 1]\n"
          "tables:\n  default:\n    lr: 0.3\n    init: {dist: uniform, scale: 0.01}\n"
          "train:\n  batch_size: 64\n  seed: 11\n  dense_optimizer: adam\n  dense_lr: 0.01\n",
      "frozen.yaml", {});
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

config::JobConfig SyntheticJob() {
  return Job(
      "data:\n  format: synthetic\n  num_categorical: 4\n  num_dense: 3\n  synthetic:\n"
      "    vocab: 50\n    zipf: 1.1\n    eval_rows: 3000\n");
}

// The trainer's rows and dense parameters, frozen.
FrozenModel Freeze(const testing::TrainerRun& run, int64_t step) {
  FrozenModel m;
  m.job = run.job;
  m.step = step;
  m.dense = WithoutOptimizerState(SnapshotDenseState(*run.trainer, step));
  const auto specs = embedding::TableSpecsFromConfig(run.job);
  m.tables.resize(specs.size());
  for (size_t t = 0; t < specs.size(); ++t) {
    m.tables[t].table = static_cast<uint32_t>(t);
    m.tables[t].dim = specs[t].dim;
  }
  run.table->ForEachRow([&](uint32_t table, uint64_t id, const uint8_t* bytes) {
    const embedding::RowRef row{const_cast<uint8_t*>(bytes)};
    FrozenTable& t = m.tables[table];
    t.ids.push_back(id);
    t.values.insert(t.values.end(), row.embedding(), row.embedding() + t.dim);
  });
  for (auto& t : m.tables) EXPECT_TRUE(t.Finish().ok());
  return m;
}

TEST(FrozenModelTest, ScoresEveryRecordExactlyAsTheTrainersEvaluator) {
  auto run = testing::MakeTrainerRun(SyntheticJob());
  ASSERT_NE(run, nullptr);
  run->MeanLoss(0, 30);
  auto evaluator = Evaluator::Create(run->job, 0, 1);
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  std::vector<float> want, got;
  (*evaluator)->set_score_sink([&](const ScoredBatch& b) {
    EXPECT_EQ(b.first_record, static_cast<int64_t>(want.size()));
    want.insert(want.end(), b.probs.begin(), b.probs.end());
    return Status::Ok();
  });
  auto trained = (*evaluator)->Run(run->trainer.get(), nullptr, 30);
  ASSERT_TRUE(trained.ok()) << trained.status();

  ScoreOptions o;
  o.sink = [&](const ScoredBatch& b) {
    got.insert(got.end(), b.probs.begin(), b.probs.end());
    return Status::Ok();
  };
  auto frozen = ScoreFrozenModel(Freeze(*run, 29), o);
  ASSERT_TRUE(frozen.ok()) << frozen.status();
  ASSERT_EQ(want.size(), 3000u);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "record " << i;
  EXPECT_EQ(frozen->eval.auc, trained->auc);
  EXPECT_EQ(frozen->eval.logloss, trained->logloss);
  EXPECT_EQ(frozen->records, 3000);
  EXPECT_EQ(frozen->bad_records, 0);
  EXPECT_GT(frozen->eval.auc, 0.5);

  // Zeros for ids without a row change the scores of records that have such ids.
  FrozenModel sparse = Freeze(*run, 29);
  for (auto& t : sparse.tables) {  // forget every other row
    FrozenTable kept{t.table, t.dim, {}, {}};
    for (size_t i = 0; i < t.ids.size(); i += 2) {
      kept.ids.push_back(t.ids[i]);
      kept.values.insert(kept.values.end(), t.values.begin() + i * t.dim,
                         t.values.begin() + (i + 1) * t.dim);
    }
    t = kept;
  }
  std::vector<float> initial, zero;
  o.sink = [&](const ScoredBatch& b) {
    initial.insert(initial.end(), b.probs.begin(), b.probs.end());
    return Status::Ok();
  };
  auto with_initial = ScoreFrozenModel(sparse, o);
  ASSERT_TRUE(with_initial.ok());
  EXPECT_GT(with_initial->unknown_lookups, 0);
  o.unknown = UnknownIds::kZero;
  o.sink = [&](const ScoredBatch& b) {
    zero.insert(zero.end(), b.probs.begin(), b.probs.end());
    return Status::Ok();
  };
  auto with_zero = ScoreFrozenModel(sparse, o);
  ASSERT_TRUE(with_zero.ok());
  EXPECT_EQ(with_zero->unknown_lookups, with_initial->unknown_lookups);
  EXPECT_NE(initial, zero);
  EXPECT_NE(initial, want);
}

TEST(FrozenEmbeddingsTest, AnIdWithoutARowReadsItsInitialValueOrZeros) {
  const auto specs = embedding::TableSpecsFromConfig(SyntheticJob());
  std::vector<FrozenTable> tables(specs.size());
  for (size_t t = 0; t < specs.size(); ++t) tables[t] = {static_cast<uint32_t>(t), 4, {}, {}};
  tables[1].ids = {5};
  tables[1].values = {1, 2, 3, 4};
  const uint64_t ids[] = {9, 5, 9};
  const TableIds want[] = {{1, ids}};
  std::vector<float> initial(4);
  embedding::InitialEmbedding(11, specs[1], 9, initial.data());
  ASSERT_NE(initial, std::vector<float>(4, 0.0f));

  FrozenEmbeddings init(&tables, specs, 11, UnknownIds::kInitial);
  std::vector<std::vector<float>> rows;
  ASSERT_TRUE(init.Pull(0, want, &rows).ok());
  std::vector<float> expect = initial;
  expect.insert(expect.end(), {1, 2, 3, 4});
  expect.insert(expect.end(), initial.begin(), initial.end());
  EXPECT_EQ(rows[0], expect);
  EXPECT_EQ(init.unknown_lookups(), 2);

  FrozenEmbeddings zero(&tables, specs, 11, UnknownIds::kZero);
  ASSERT_TRUE(zero.Pull(0, want, &rows).ok());
  EXPECT_EQ(rows[0], std::vector<float>({0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0}));
  const TableGrads grads[] = {{1, ids, initial}};
  EXPECT_TRUE(zero.Push(0, grads).IsFailedPrecondition());
}

TEST(FrozenTableTest, FinishSortsRowsByIdAndRefusesARepeatedId) {
  FrozenTable t{0, 2, {30, 10, 20}, {3, 3, 1, 1, 2, 2}};
  ASSERT_TRUE(t.Finish().ok());
  EXPECT_EQ(t.ids, std::vector<uint64_t>({10, 20, 30}));
  EXPECT_EQ(t.values, std::vector<float>({1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(t.Find(20), 1);
  EXPECT_EQ(t.Find(25), -1);
  FrozenTable twice{0, 2, {7, 3, 7}, {1, 1, 2, 2, 3, 3}};
  EXPECT_TRUE(twice.Finish().IsInvalidArgument());
  FrozenTable short_values{0, 2, {1, 2}, {1, 1, 2}};
  EXPECT_TRUE(short_values.Finish().IsInvalidArgument());
}

TEST(FrozenModelTest, ADenseStateOfAnotherModelIsRefused) {
  auto run = testing::MakeTrainerRun(SyntheticJob());
  ASSERT_NE(run, nullptr);
  FrozenModel m = Freeze(*run, 0);
  m.dense.tensors.pop_back();
  auto r = ScoreFrozenModel(m, {});
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();
  m = Freeze(*run, 0);
  m.tables.pop_back();
  r = ScoreFrozenModel(m, {});
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();
}

// Malformed lines are scored as weight-0 records left out of AUC and logloss; past
// data.max_bad_fraction scoring fails naming the first bad line.
TEST(FrozenModelTest, MalformedLinesAreSkippedUpToTheBadFraction) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 40; ++i) {
    text += std::to_string(i % 3 == 0) + "\t" + std::to_string(i) + "\t2\t\t" +
            std::to_string(i % 5) + "\t" + std::to_string(i % 7) + "\t" + std::to_string(i) +
            "\tabc\n";
    if (i == 9) text += "not a record\n";  // line 11
  }
  WriteFile(dir.File("eval.tsv"), text);
  config::JobConfig job =
      Job("data:\n  format: criteo\n  num_categorical: 4\n  num_dense: 3\n  train: " +
          dir.File("eval.tsv") + "\n  eval: " + dir.File("eval.tsv") + "\n");
  auto run = testing::MakeTrainerRun(job);
  ASSERT_NE(run, nullptr);
  FrozenModel m = Freeze(*run, 0);
  ScoreOptions o;
  o.max_bad_fraction = 0.05;
  std::vector<float> weights;
  o.sink = [&](const ScoredBatch& b) {
    weights.insert(weights.end(), b.weights.begin(), b.weights.end());
    return Status::Ok();
  };
  auto r = ScoreFrozenModel(m, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->records, 41);
  EXPECT_EQ(r->bad_records, 1);
  EXPECT_EQ(r->eval.samples, 40);
  ASSERT_EQ(weights.size(), 41u);
  EXPECT_EQ(weights[10], 0.0f);
  ASSERT_EQ(r->bad_reports.size(), 1u);
  EXPECT_NE(r->bad_reports[0].find("eval.tsv:11"), std::string::npos) << r->bad_reports[0];
  o.max_bad_fraction = 0.01;
  r = ScoreFrozenModel(m, o);
  ASSERT_TRUE(r.status().IsInvalidArgument()) << r.status();
  EXPECT_NE(r.status().message().find("eval.tsv:11"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace tandem::worker
