// A real `tandem ps` daemon trained through PsClient, killed with SIGKILL in the middle of a
// stream of acknowledged pushes while its small cache churns, and restarted on the same data
// directory: its rows must equal an in-test reference that applied every push exactly once.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstring>
#include <random>
#include <set>
#include <thread>

#include "common/config/job_config.h"
#include "common/ps_client.h"
#include "server/ps/shard.h"
#include "server/ps/shard_options.h"
#include "tests/cluster/daemon_fixture.h"

namespace tandem::testing {
namespace {

using std::chrono::milliseconds;

std::string FreePort() {
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::router);
  s.bind("tcp://127.0.0.1:0");
  std::string ep = s.get(zmq::sockopt::last_endpoint);
  return ep.substr(ep.rfind(':') + 1);
}

std::string PsConfig(const std::string& dir, const std::string& port) {
  return "cluster:\n"
         "  chief: [\"127.0.0.1:0\"]\n"
         "  ps: [\"127.0.0.1:" +
         port +
         "\"]\n"
         "  workers: [\"127.0.0.1:0\"]\n"
         "model:\n  embedding_dim: 8\n  bottom_mlp: [16, 8]\n"
         "data:\n  num_categorical: 2\n"
         "tables:\n  default:\n    optimizer: adagrad\n    lr: 0.05\n"
         "ps:\n  data_dir: " +
         dir +
         "/ps\n  cache_bytes: 32768\n"
         "checkpoint:\n  dir: " +
         dir + "/ckpt\n";
}

Subprocess StartPs(const TempDir& dir, int incarnation) {
  const std::string ready = dir.File("ready-" + std::to_string(incarnation));
  SpawnOptions o;
  o.argv = {
      TANDEM_BINARY, "ps",    "--config",      dir.File("job.yaml"),        "--task",       "ps:0",
      "--job-id",    kJobHex, "--incarnation", std::to_string(incarnation), "--ready-file", ready};
  o.output_path = dir.File("ps.log");
  auto p = Subprocess::Spawn(o);
  EXPECT_TRUE(p.ok());
  EXPECT_TRUE(WaitForFile(ready, milliseconds(30000))) << ReadFile(dir.File("ps.log"));
  return std::move(p).value();
}

TEST(PsProcessTest, KillNineMidStreamLosesNothingAndAppliesOnce) {
  TempDir dir;
  const std::string port = FreePort();
  WriteFile(dir.File("job.yaml"), PsConfig(dir.path(), port));
  auto job = config::LoadJobConfig(dir.File("job.yaml"), {});
  ASSERT_TRUE(job.ok()) << job.status();

  // The reference: the same shard logic in memory, fed every push once.
  auto ref_options = ps::ShardOptionsFromConfig(*job, 0);
  ref_options.dir = dir.path() + "/reference";
  ref_options.memory_only = true;
  auto ref = std::move(ps::Shard::Open(ref_options)).value();

  auto daemon = std::make_unique<Subprocess>(StartPs(dir, 1));
  zmq::context_t ctx(1);
  wire::Identity me;
  me.job_id = *ParseJobId(kJobHex);
  me.role = wire::Role::WORKER;
  me.incarnation = 1;
  PsClientOptions co;
  co.shards = {"tcp://127.0.0.1:" + port};
  co.dims = {8, 8};
  co.attempt_budget = milliseconds(1000);
  PsClient client(&ctx, me, co);

  // Kill -9 at a random moment during the stream; restart on the same directory.
  std::mt19937_64 rng(42);
  const int kSteps = 120;
  const int kill_at = 40 + static_cast<int>(rng() % 40);
  std::thread killer;
  std::vector<uint64_t> all_ids;
  for (int64_t step = 0; step < kSteps; ++step) {
    if (step == kill_at) {
      const auto delay = milliseconds(rng() % 20);
      killer = std::thread([&, delay] {
        std::this_thread::sleep_for(delay);
        daemon->Signal(SIGKILL);
        daemon->Wait(milliseconds(10000));
        daemon = std::make_unique<Subprocess>(StartPs(dir, 2));
      });
    }
    std::vector<std::vector<uint64_t>> ids(2);
    std::vector<std::vector<float>> grads(2);
    for (uint32_t t = 0; t < 2; ++t) {
      std::set<uint64_t> unique;
      while (unique.size() < 300) unique.insert(rng() % 5000);
      ids[t].assign(unique.begin(), unique.end());
      for (size_t i = 0; i < ids[t].size() * 8; ++i)
        grads[t].push_back(static_cast<float>(static_cast<int>(rng() % 200) - 100) * 0.001f);
    }
    TableGrads tg[2] = {{0, ids[0], grads[0]}, {1, ids[1], grads[1]}};
    Status s = client.Push(step, tg);
    ASSERT_TRUE(s.ok()) << "step " << step << ": " << s << "\n" << ReadFile(dir.File("ps.log"));
    ps::PushInput in;
    in.step = step;
    for (uint32_t t = 0; t < 2; ++t) in.tables.push_back({t, 8, ids[t], grads[t]});
    ASSERT_TRUE(ref->Push(in).ok());
  }
  killer.join();
  // The second incarnation recovered by replaying the pushes logged since its restore point.
  const std::string log = ReadFile(dir.File("ps.log"));
  const size_t second = log.find("inc=2");
  ASSERT_NE(second, std::string::npos) << log;
  const size_t rec = log.find("log records replayed", second);
  ASSERT_NE(rec, std::string::npos) << log;
  const size_t comma = log.rfind(", ", rec);
  EXPECT_GT(std::stoul(log.substr(comma + 2, rec - comma - 2)), 0u) << log.substr(second, 400);

  std::vector<uint64_t> every(5000);
  for (uint64_t i = 0; i < every.size(); ++i) every[i] = i;
  for (uint32_t t = 0; t < 2; ++t) {
    std::vector<std::vector<float>> rows;
    TableIds ti{t, every};
    ASSERT_TRUE(client.Pull(kSteps, {&ti, 1}, &rows).ok());
    std::vector<float> expect(every.size() * 8);
    ASSERT_TRUE(ref->Read(t, every, expect.data()).ok());
    ASSERT_EQ(rows[0].size(), expect.size());
    size_t differ = 0;
    for (size_t i = 0; i < expect.size(); ++i)
      differ += std::memcmp(&rows[0][i], &expect[i], 4) != 0;
    EXPECT_EQ(differ, 0u) << "table " << t << ": " << differ << " values differ from the reference";
  }
  daemon->Signal(SIGTERM);
  auto e = daemon->Wait(milliseconds(20000));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 0);
}

}  // namespace
}  // namespace tandem::testing
