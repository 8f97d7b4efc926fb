// Issue 18 end to end in one process: multi-hot and sequence features pooled by sum and mean,
// two features sharing a table, tables of different widths and two labels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "worker/evaluator.h"
#include "worker/trainer_test_util.h"

namespace tandem::worker {
namespace {

config::JobConfig MultiHotJob() {
  auto job = config::ParseJobConfig(R"(data:
  format: synthetic
  num_dense: 4
  labels: [click, conversion]
  synthetic: {vocab: 200, zipf: 1.1, eval_rows: 8000}
features:
  user: {table: users}
  item: {table: items}
  history: {table: items, max_len: 12, pooling: mean}
  tags: {table: tags, max_len: 4, pooling: sum, weighted: true}
  site: {}
tables:
  default: {optimizer: adagrad, lr: 0.3, init: {dist: uniform, scale: 0.01}}
  users: {dim: 8}
  items: {dim: 16}
  tags: {dim: 8}
model: {embedding_dim: 8, interaction: concat, bottom_mlp: [32, 8], top_mlp: [64, 2]}
train: {batch_size: 256, seed: 7, dense_optimizer: adam, dense_lr: 0.01, loss_weights: [1, 1]}
)",
                                    "multi_hot.yaml", {});
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *job : config::JobConfig{};
}

TEST(MultiHotTrainerTest, BatchesCarryBagsAndSharedTablesDeduplicateAcrossFeatures) {
  auto run = testing::MakeTrainerRun(MultiHotJob());
  ASSERT_NE(run, nullptr);
  ASSERT_TRUE(run->reader->ReadStep(0, &run->batch).ok());
  const data::Batch& b = run->batch;
  ASSERT_EQ(b.unique_ids.size(), 4u);  // users, items, tags, site
  ASSERT_EQ(b.offsets.size(), 5u);     // five features
  EXPECT_EQ(b.label.size(), 2u * 256);
  // history's bags vary in length, some are empty, none is longer than max_len.
  int64_t empty = 0, longest = 0;
  for (int i = 0; i < b.size; ++i) {
    const int64_t len = b.offsets[2][i + 1] - b.offsets[2][i];
    empty += len == 0;
    longest = std::max(longest, len);
  }
  EXPECT_GT(empty, 0);
  EXPECT_EQ(longest, 12);
  // tags carry per-id weights, the other features none.
  EXPECT_EQ(b.id_weights[3].size(), b.ids[3].size());
  EXPECT_TRUE(b.id_weights[2].empty());
  EXPECT_TRUE(std::any_of(b.id_weights[3].begin(), b.id_weights[3].end(),
                          [](float w) { return w != 1.0f; }));
  // item and history share the items table: every id either looks up is in its unique list once.
  std::set<uint64_t> items(b.unique_ids[1].begin(), b.unique_ids[1].end());
  EXPECT_EQ(items.size(), b.unique_ids[1].size());
  for (int f : {1, 2}) {
    for (size_t k = 0; k < b.ids[f].size(); ++k) {
      EXPECT_EQ(b.unique_ids[1][b.inverse[f][k]], b.ids[f][k]);
    }
  }
  auto st = run->trainer->Step(run->batch);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_TRUE(std::isfinite(st->loss));
}

TEST(MultiHotTrainerTest, SameConfigGivesTheSameChecksumAndTheJobShapeChangesIt) {
  auto a = testing::MakeTrainerRun(MultiHotJob());
  auto b = testing::MakeTrainerRun(MultiHotJob());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(std::isfinite(a->MeanLoss(0, 30)));
  EXPECT_TRUE(std::isfinite(b->MeanLoss(0, 30)));
  EXPECT_EQ(a->Checksum().Hex(), b->Checksum().Hex());
  auto other = MultiHotJob();
  other.train.loss_weights = {1, 0.5};
  auto c = testing::MakeTrainerRun(other);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(std::isfinite(c->MeanLoss(0, 30)));
  EXPECT_NE(a->Checksum().Hex(), c->Checksum().Hex());
  // dot over mixed widths: the 16-wide items table is projected to the bottom MLP's 8.
  auto dot = MultiHotJob();
  dot.model.interaction = "dot";
  auto d1 = testing::MakeTrainerRun(dot);
  auto d2 = testing::MakeTrainerRun(dot);
  ASSERT_NE(d1, nullptr);
  ASSERT_NE(d2, nullptr);
  EXPECT_TRUE(std::isfinite(d1->MeanLoss(0, 30)));
  EXPECT_TRUE(std::isfinite(d2->MeanLoss(0, 30)));
  EXPECT_EQ(d1->Checksum().Hex(), d2->Checksum().Hex());
  EXPECT_NE(d1->Checksum().Hex(), a->Checksum().Hex());
}

// The issue's bar: each task within 0.02 of its teacher's AUC on held-out data (both reach about
// 0.01 below after 12000 steps).
TEST(MultiHotTrainerTest, EachTaskReachesItsTeachersAuc) {
  constexpr int64_t kSteps = 12000;
  const auto job = MultiHotJob();
  auto run = testing::MakeTrainerRun(job);
  ASSERT_NE(run, nullptr);
  auto evaluator = Evaluator::Create(job, 0, 1);
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  auto before = (*evaluator)->Run(run->trainer.get(), nullptr, 0);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_TRUE(std::isfinite(run->MeanLoss(0, kSteps)));
  auto after = (*evaluator)->Run(run->trainer.get(), nullptr, kSteps);
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->tasks.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    const TaskEval& t = after->tasks[k];
    EXPECT_GT(t.auc, before->tasks[k].auc + 0.05) << "task " << k;
    EXPECT_GT(t.auc, t.teacher_auc - 0.02)
        << "task " << k << " model " << t.auc << " teacher " << t.teacher_auc;
    EXPECT_TRUE(std::isfinite(t.logloss));
    std::printf("task %zu: model AUC %.4f, teacher %.4f, logloss %.4f\n", k, t.auc, t.teacher_auc,
                t.logloss);
  }
  EXPECT_EQ(after->auc, after->tasks[0].auc);
}

}  // namespace
}  // namespace tandem::worker
