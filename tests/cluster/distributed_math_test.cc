// The distributed math in one process, over real sockets: parameter-server shards (RpcServer +
// PsService + Shard on 127.0.0.1) and M trainer threads joined by Gloo, each running the
// worker's training loop. The core property of DESIGN §4: at k = 0, M workers with batch b
// compute what one worker with batch M*b computes on the same records.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <thread>

#include "common/config/job_config.h"
#include "common/ps_client.h"
#include "common/testing/test_util.h"
#include "common/wire/rpc_server.h"
#include "server/ps/ps_service.h"
#include "server/ps/shard.h"
#include "server/ps/shard_options.h"
#include "tests/cluster/count_far.h"
#include "worker/collective/collective.h"
#include "worker/collective/gloo_collective.h"
#include "worker/data/pipeline.h"
#include "worker/data/record_source.h"
#include "worker/device/backend_factory.h"
#include "worker/training_loop.h"

namespace tandem {
namespace {

using testing::CountFar;

std::string Loopbacks(int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += i ? ",\"127.0.0.1:0\"" : "\"127.0.0.1:0\"";
  return s + "]";
}

config::JobConfig Job(const std::string& dir, int ps, int workers, int64_t batch, int64_t steps,
                      int64_t k, const std::string& dense_optimizer = "sgd",
                      double dense_lr = 0.05) {
  auto job = config::ParseJobConfig(
      "cluster:\n  chief: [\"127.0.0.1:0\"]\n  ps: " + Loopbacks(ps) +
          "\n  workers: " + Loopbacks(workers) +
          "\n"
          "data:\n  format: synthetic\n  num_categorical: 8\n  synthetic:\n    vocab: 300\n"
          "    eval_rows: 8000\n"
          "model:\n  embedding_dim: 8\n  bottom_mlp: [16, 8]\n  top_mlp: [16, 1]\n"
          "tables:\n  default:\n    optimizer: adagrad\n    lr: 0.2\n"
          "train:\n  batch_size: " +
          std::to_string(batch) + "\n  steps: " + std::to_string(steps) +
          "\n  embedding_staleness: " + std::to_string(k) + "\n  seed: 11\n  dense_optimizer: " +
          dense_optimizer + "\n  dense_lr: " + std::to_string(dense_lr) +
          "\n  log_every_steps: 5\n"
          "ps:\n  data_dir: " +
          dir + "/ps\n  storage: memory\n",
      "math.yaml", {});
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

// N shards served on loopback for the life of the object.
struct Shards {
  zmq::context_t context{1};
  std::vector<std::unique_ptr<ps::Shard>> shards;
  std::vector<std::unique_ptr<wire::RpcServer>> servers;
  std::vector<std::unique_ptr<ps::PsService>> services;
  std::vector<std::string> endpoints;

  explicit Shards(const config::JobConfig& job) {
    for (uint32_t i = 0; i < job.cluster.ps.size(); ++i) {
      auto shard = ps::Shard::Open(ps::ShardOptionsFromConfig(job, i));
      EXPECT_TRUE(shard.ok()) << shard.status();
      shards.push_back(std::move(shard).value());
      wire::ServerOptions so;
      so.lanes = ps::PsLanes(2);
      wire::Identity id;
      id.role = wire::Role::PS;
      id.index = i;
      id.incarnation = 1;
      servers.push_back(std::make_unique<wire::RpcServer>(&context, so, id));
      services.push_back(
          std::make_unique<ps::PsService>(shards.back().get(), servers.back().get()));
      services.back()->Register();
      EXPECT_TRUE(servers.back()->Start().ok());
      endpoints.push_back(servers.back()->endpoint());
    }
  }
  ~Shards() {
    for (auto& s : servers) s->Stop();
  }
};

std::unique_ptr<PsClient> Client(zmq::context_t* context, const config::JobConfig& job,
                                 const std::vector<std::string>& endpoints, uint32_t rank) {
  wire::Identity id;
  id.role = wire::Role::WORKER;
  id.index = rank;
  id.incarnation = 1;
  PsClientOptions o;
  o.shards = endpoints;
  o.dims.assign(static_cast<size_t>(job.data.num_categorical),
                static_cast<uint32_t>(job.model.embedding_dim));
  o.timeout = std::chrono::milliseconds(30000);
  return std::make_unique<PsClient>(context, id, o);
}

struct TrainedCluster {
  std::vector<worker::TrainingResult> results;  // per rank
  std::vector<std::string> endpoints;
  std::unique_ptr<Shards> shards;
};

// Trains `job` with M = cluster.workers.size() threads; the shards stay up for inspection.
TrainedCluster Train(const config::JobConfig& job, const std::string& store_dir) {
  TrainedCluster run;
  run.shards = std::make_unique<Shards>(job);
  const int world = static_cast<int>(job.cluster.workers.size());
  run.results.resize(static_cast<size_t>(world));
  std::vector<Status> status(static_cast<size_t>(world));
  auto store = collective::FileStore::Open(store_dir);
  EXPECT_TRUE(store.ok());
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      zmq::context_t context(1);
      auto client = Client(&context, job, run.shards->endpoints, static_cast<uint32_t>(r));
      auto prefetch = Client(&context, job, run.shards->endpoints, static_cast<uint32_t>(r));
      std::unique_ptr<collective::GlooCollective> gloo;
      if (world > 1) {
        collective::GlooOptions go;
        go.rank = r;
        go.size = world;
        go.store = store->get();
        go.prefix = "gen-1";
        go.hostname = "127.0.0.1";
        go.timeout_ms = 30000;
        auto g = collective::GlooCollective::Create(go);
        if (!g.ok()) {
          status[static_cast<size_t>(r)] = g.status();
          return;
        }
        gloo = std::move(g).value();
      }
      auto backend = device::CreateBackend(job.train);
      worker::TrainingLoopOptions o;
      o.job = &job;
      o.rank = r;
      o.world = world;
      o.embeddings = client.get();
      o.prefetch_embeddings = prefetch.get();
      o.collective = gloo.get();
      o.backend = backend->get();
      if (r == 0) o.sparse_checksum = [&](int64_t last) { return client->Checksum(last); };
      auto res = worker::RunTrainingLoop(o);
      if (!res.ok()) {
        status[static_cast<size_t>(r)] = res.status();
        return;
      }
      run.results[static_cast<size_t>(r)] = std::move(res).value();
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : status) EXPECT_TRUE(s.ok()) << s;
  return run;
}

// Every id the first `steps` global batches touch, per table.
std::vector<std::vector<uint64_t>> TouchedIds(const config::JobConfig& job, int64_t steps) {
  auto source = data::OpenSource(job, job.train.seed, false);
  EXPECT_TRUE(source.ok());
  data::PipelineOptions po;
  po.batch = static_cast<int>(job.train.batch_size * job.cluster.workers.size());
  data::BatchReader reader(source->get(), job.train.seed, po);
  std::vector<std::set<uint64_t>> ids(static_cast<size_t>(job.data.num_categorical));
  data::Batch batch;
  for (int64_t s = 0; s < steps; ++s) {
    EXPECT_TRUE(reader.ReadStep(s, &batch).ok());
    for (size_t t = 0; t < ids.size(); ++t)
      ids[t].insert(batch.unique_ids[t].begin(), batch.unique_ids[t].end());
  }
  std::vector<std::vector<uint64_t>> out;
  for (auto& s : ids) out.emplace_back(s.begin(), s.end());
  return out;
}

std::vector<std::vector<float>> PullRows(TrainedCluster* run, const config::JobConfig& job,
                                         const std::vector<std::vector<uint64_t>>& ids) {
  zmq::context_t context(1);
  auto client = Client(&context, job, run->shards->endpoints, 0);
  std::vector<TableIds> want;
  for (size_t t = 0; t < ids.size(); ++t) want.push_back({static_cast<uint32_t>(t), ids[t]});
  std::vector<std::vector<float>> rows;
  Status s = client->Pull(job.train.steps, want, &rows);
  EXPECT_TRUE(s.ok()) << s;
  return rows;
}

TEST(DistributedMathTest, TwoWorkersWithBatchBEqualOneWorkerWithBatch2B) {
  testing::TempDir two_dir, one_dir;
  const int64_t steps = 30;
  const auto two = Job(two_dir.path(), 2, 2, 64, steps, 0);
  const auto one = Job(one_dir.path(), 2, 1, 128, steps, 0);
  TrainedCluster a = Train(two, two_dir.File("store"));
  TrainedCluster b = Train(one, one_dir.File("store"));
  ASSERT_EQ(a.results.size(), 2u);
  ASSERT_EQ(b.results.size(), 1u);
  ASSERT_TRUE(a.results[0].completed);
  ASSERT_TRUE(b.results[0].completed);
  // Both replicas of the 2-worker run hold the same dense model, bit for bit.
  EXPECT_EQ(a.results[0].dense_params, a.results[1].dense_params);
  EXPECT_EQ(a.results[0].dense_checksum.Hex(), a.results[1].dense_checksum.Hex());
  // And it is the 1-worker model within fp32 reassociation.
  EXPECT_EQ(CountFar(a.results[0].dense_params, b.results[0].dense_params, 1e-5), 0);
  const auto ids = TouchedIds(one, steps);
  size_t touched = 0;
  for (const auto& t : ids) touched += t.size();
  ASSERT_GT(touched, 100u);
  const auto rows_a = PullRows(&a, two, ids);
  const auto rows_b = PullRows(&b, one, ids);
  for (size_t t = 0; t < ids.size(); ++t)
    EXPECT_EQ(CountFar(rows_a[t], rows_b[t], 1e-5), 0) << "table " << t;
  // The loss of the global batch is the same number on both, up to reassociation.
  EXPECT_NEAR(a.results[0].last_loss, b.results[0].last_loss, 1e-5);
  EXPECT_NEAR(a.results[0].auc, b.results[0].auc, 1e-3);
}

TEST(DistributedMathTest, TrainingMovesEveryPartOfTheModel) {
  // The equivalence above would hold trivially if nothing trained: check that it did.
  testing::TempDir dir;
  const auto job = Job(dir.path(), 2, 2, 64, 30, 0);
  TrainedCluster a = Train(job, dir.File("store"));
  ASSERT_TRUE(a.results[0].completed);
  const auto ids = TouchedIds(job, 30);
  const auto rows = PullRows(&a, job, ids);
  // Rows pulled at step 0 are the initial values.
  zmq::context_t context(1);
  testing::TempDir fresh_dir;
  const auto fresh_job = Job(fresh_dir.path(), 2, 2, 64, 30, 0);
  Shards fresh(fresh_job);
  auto client = Client(&context, fresh_job, fresh.endpoints, 0);
  std::vector<TableIds> want;
  for (size_t t = 0; t < ids.size(); ++t) want.push_back({static_cast<uint32_t>(t), ids[t]});
  std::vector<std::vector<float>> initial;
  ASSERT_TRUE(client->Pull(0, want, &initial).ok());
  for (size_t t = 0; t < ids.size(); ++t)
    EXPECT_GT(CountFar(rows[t], initial[t], 1e-3), static_cast<int64_t>(rows[t].size() / 2));
  EXPECT_LT(a.results[0].last_loss, 0.69);
}

TEST(DistributedMathTest, TwoIdenticalRunsGiveTheSameModelChecksum) {
  testing::TempDir d1, d2;
  TrainedCluster a = Train(Job(d1.path(), 2, 2, 32, 20, 0, "adam"), d1.File("store"));
  TrainedCluster b = Train(Job(d2.path(), 2, 2, 32, 20, 0, "adam"), d2.File("store"));
  ASSERT_FALSE(a.results[0].model_checksum.empty());
  EXPECT_EQ(a.results[0].model_checksum, b.results[0].model_checksum);
  EXPECT_TRUE(b.results[1].model_checksum.empty());  // only rank 0 computes it
  EXPECT_EQ(a.results[0].dense_params, b.results[0].dense_params);
}

TEST(DistributedMathTest, StalenessTwoTrainsLikeSynchronous) {
  testing::TempDir d0, d2;
  TrainedCluster a = Train(Job(d0.path(), 2, 2, 64, 3000, 0, "adam", 0.01), d0.File("store"));
  TrainedCluster b = Train(Job(d2.path(), 2, 2, 64, 3000, 2, "adam", 0.01), d2.File("store"));
  ASSERT_TRUE(a.results[0].completed);
  ASSERT_TRUE(b.results[0].completed);
  EXPECT_GT(a.results[0].auc, 0.76);  // trained well past the start (0.5)
  EXPECT_NEAR(a.results[0].auc, b.results[0].auc, 0.01)
      << "k=0 " << a.results[0].auc << " k=2 " << b.results[0].auc;
  // Every rank ends with the same eval figures: the histograms are summed across ranks.
  EXPECT_EQ(b.results[0].auc, b.results[1].auc);
}

}  // namespace
}  // namespace tandem
