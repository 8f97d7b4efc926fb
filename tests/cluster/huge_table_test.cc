// A table far larger than the PS caches (issue "Huge tables for real"): the same `tandem local`
// job once with every row in the cache and once with caches a twentieth of the table, so most
// pulls miss, rows are evicted and written back to RocksDB, and checkpoints copy a live DB the
// cache cannot hold. At k = 0 the cache must not change the model: both end with one checksum.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/embedding/table_spec.h"
#include "common/subprocess.h"
#include "common/testing/test_util.h"
#include "tests/cluster/local_job_util.h"

namespace tandem::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr int kPs = 2;
constexpr int kWorkers = 2;
constexpr int64_t kSteps = 200;
constexpr int64_t kAllInMemoryCache = int64_t{1} << 30;  // per shard; the table is ~30 MB

// SmallJob's rows (dim 8, adagrad): what a stored row costs, as the PS lays it out.
uint64_t RowBytes() {
  embedding::TableSpec spec;
  spec.dim = 8;
  spec.optimizer = embedding::OptimizerKind::kAdagrad;
  return spec.row_bytes();
}

// SmallJob with a vocabulary large enough that the rows touched in kSteps steps make a table
// of tens of MB, on RocksDB (not ps.storage: memory), checkpointing four times. The dirty
// bound is a quarter of the cache, as the default is for caches of 256 MiB or more (under that
// it is 64 MiB, more than these caches): so the rows written ahead of eviction are tested here.
std::vector<std::string> JobSets(int64_t cache_bytes) {
  return {"data.synthetic.vocab=300000",
          "data.synthetic.zipf=1.05",
          "data.synthetic.eval_rows=2000",
          "ps.storage=rocksdb",
          "ps.cache_bytes=" + std::to_string(cache_bytes),
          "ps.max_dirty_bytes=" + std::to_string(cache_bytes / 4),
          "checkpoint.every_steps=" + std::to_string(kSteps / 4),
          "metrics.port=0"};
}

// The value of the unlabelled sample `name` in a Prometheus text page, or -1.
double Sample(const std::string& page, const std::string& name) {
  std::istringstream in(page);
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with(name + " ")) return std::stod(line.substr(name.size() + 1));
  return -1;
}

// The bound /metrics port a shard logged, or 0 while it has not.
int MetricsPort(const std::string& log_path) {
  static const std::regex bound(R"(metrics on http://[^:]+:(\d+)/metrics)");
  const std::string log = ReadFile(log_path);
  std::smatch m;
  return std::regex_search(log, m, bound) ? std::stoi(m[1]) : 0;
}

// The highest values every shard's /metrics showed while the job ran: the shards exit with the
// job, so their counters can only be read during it.
struct ShardCounters {
  double evicted = -1;
  double writebacks = -1;
  double written_ahead = -1;
  double misses = -1;
  double cache_bytes_max = -1;
};

struct JobRun {
  ExitInfo exit;
  std::string output;
  std::vector<ShardCounters> shards;
};

JobRun RunWatched(const TempDir& dir, const std::vector<std::string>& sets) {
  SpawnOptions o;
  o.argv = {TANDEM_BINARY, "local",
            "--config",    dir.File("job.yaml"),
            "--ps",        std::to_string(kPs),
            "--workers",   std::to_string(kWorkers)};
  for (const auto& s : sets) o.argv.insert(o.argv.end(), {"--set", s});
  o.unset_env = {"TF_CONFIG"};
  o.output_path = dir.File("local.log");
  JobRun run;
  run.shards.resize(kPs);
  auto p = Subprocess::Spawn(o);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return run;
  std::vector<int> ports(kPs, 0);
  const auto deadline = Clock::now() + std::chrono::seconds(150);
  while (p->running() && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(300));
    for (int i = 0; i < kPs; ++i) {
      if (ports[i] == 0)
        ports[i] = MetricsPort(dir.path() + "/out/logs/ps-" + std::to_string(i) + ".log");
      if (ports[i] == 0) continue;
      httplib::Client client("127.0.0.1", ports[i]);
      client.set_connection_timeout(1, 0);
      client.set_read_timeout(2, 0);
      auto res = client.Get("/metrics");
      if (!res || res->status != 200) continue;
      ShardCounters& c = run.shards[i];
      c.evicted = std::max(c.evicted, Sample(res->body, "tandem_ps_rows_evicted_total"));
      c.writebacks = std::max(c.writebacks, Sample(res->body, "tandem_ps_cache_writebacks_total"));
      c.written_ahead =
          std::max(c.written_ahead, Sample(res->body, "tandem_ps_cache_written_ahead_total"));
      c.misses = std::max(c.misses, Sample(res->body, "tandem_ps_cache_misses_total"));
      c.cache_bytes_max = std::max(c.cache_bytes_max, Sample(res->body, "tandem_ps_cache_bytes"));
    }
  }
  auto e = p->Wait(milliseconds(1000));
  EXPECT_TRUE(e.has_value()) << "tandem local did not finish in time";
  run.exit = e ? *e : p->Stop(milliseconds(5000));
  run.output = ReadFile(dir.File("local.log"));
  return run;
}

// `tandem checksum` of a stopped job's shards: its model_checksum and the rows stored.
std::pair<std::string, uint64_t> ShardChecksum(const TempDir& dir,
                                               const std::vector<std::string>& sets) {
  std::vector<std::string> argv = {
      TANDEM_BINARY, "checksum",          "--config",  dir.File("job.yaml"),
      "--ps",        std::to_string(kPs), "--workers", std::to_string(kWorkers)};
  for (const auto& s : sets) argv.insert(argv.end(), {"--set", s});
  auto r = RunCommand(argv, {}, {"TF_CONFIG"}, milliseconds(60000));
  EXPECT_EQ(r.exit.exit_code, 0) << r.output;
  std::smatch m;
  if (!std::regex_search(r.output, m, std::regex(R"(rows: (\d+))"))) {
    ADD_FAILURE() << "no row count in: " << r.output;
    return {"", 0};
  }
  return {r.output.substr(0, r.output.find('\n')), std::stoull(m[1])};
}

uint64_t DirBytes(const std::string& path) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(path))
    if (e.is_regular_file()) total += e.file_size();
  return total;
}

// Both runs: exit 0, the final line, and committed checkpoints. Returns the final checksum.
std::string ExpectFinishedAndCheckpointed(const TempDir& dir, const JobRun& run) {
  EXPECT_EQ(run.exit.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("job done after step " + std::to_string(kSteps - 1)), std::string::npos)
      << run.output;
  const auto lines = ReadJsonLines(dir.path() + "/out/metrics.jsonl");
  if (lines.empty() || !lines.back().value("final", false)) {
    ADD_FAILURE() << "no final metrics line; " << run.output;
    return "";
  }
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/ckpt/LATEST"));
  const std::string chief_log = ReadFile(dir.path() + "/out/logs/chief-0.log");
  for (int64_t step = kSteps / 4 - 1; step < kSteps; step += kSteps / 4)
    EXPECT_NE(chief_log.find("checkpoint of step " + std::to_string(step) + " committed"),
              std::string::npos)
        << step;
  return lines.back()["model_checksum"].get<std::string>();
}

TEST(HugeTableTest, TableTwentyTimesItsCacheEndsWithTheAllInMemoryModel) {
  TempDir memory;
  WriteFile(memory.File("job.yaml"), SmallJob(memory.path(), kSteps));
  const auto memory_sets = JobSets(kAllInMemoryCache);
  const JobRun in_memory = RunWatched(memory, memory_sets);
  const std::string expected = ExpectFinishedAndCheckpointed(memory, in_memory);
  ASSERT_FALSE(expected.empty());
  // 0, not -1: its /metrics was read, and the whole table fitted.
  for (int i = 0; i < kPs; ++i) EXPECT_EQ(in_memory.shards[i].evicted, 0) << "shard " << i;
  const auto [memory_sum, rows] = ShardChecksum(memory, memory_sets);
  EXPECT_EQ(memory_sum, expected);
  const uint64_t table_bytes = rows * RowBytes();
  // A twentieth of each shard's part, with room for shards that hold a little less than half.
  const int64_t cache = static_cast<int64_t>(table_bytes / kPs / 25);
  ASSERT_GE(cache, 512 << 10) << rows << " rows: the table is too small to mean anything";
  RecordProperty("table_rows", std::to_string(rows));
  RecordProperty("cache_bytes_per_shard", std::to_string(cache));

  TempDir small;
  WriteFile(small.File("job.yaml"), SmallJob(small.path(), kSteps));
  const auto small_sets = JobSets(cache);
  const JobRun cached = RunWatched(small, small_sets);
  EXPECT_EQ(ExpectFinishedAndCheckpointed(small, cached), expected);

  // The table really was >= 20x the cache: in rows the shards stored and in RocksDB on disk.
  const auto [small_sum, small_rows] = ShardChecksum(small, small_sets);
  EXPECT_EQ(small_sum, expected);
  // The final checkpoint's sum, every row read back from the durable copy and summed, equals the
  // sum the shards kept through 200 steps of evictions and writebacks (never scanned before).
  auto verified =
      RunCommand({TANDEM_BINARY, "checksum", "--checkpoint", small.path() + "/ckpt", "--verify"},
                 {}, {"TF_CONFIG"}, milliseconds(60000));
  EXPECT_EQ(verified.exit.exit_code, 0) << verified.output;
  // (stdout's checksum line and stderr's progress lines, interleaved)
  EXPECT_NE(("\n" + verified.output).find("\n" + expected + "\n"), std::string::npos)
      << verified.output;
  EXPECT_NE(verified.output.find("every row summed"), std::string::npos) << verified.output;
  EXPECT_EQ(small_rows, rows);
  ASSERT_GE(small_rows * RowBytes(), 20u * kPs * static_cast<uint64_t>(cache));
  for (int i = 0; i < kPs; ++i) {
    // The end of the job copied what the shard wrote since the checkpoint of step 149, not
    // what compaction rewrote since: the final part is a delta, which --verify read back above.
    const std::string ps_log =
        ReadFile(small.path() + "/out/logs/ps-" + std::to_string(i) + ".log");
    const std::string delta =
        "the final part is step " + std::to_string(kSteps / 4 * 3 - 1) + " plus ";
    EXPECT_NE(ps_log.find(delta), std::string::npos) << "shard " << i << ": " << ps_log;
    const std::string live = small.path() + "/ps/shard-" + std::to_string(i) + "/live";
    EXPECT_GE(DirBytes(live), 20u * static_cast<uint64_t>(cache)) << live;
    // Rows went through the cache and out of it, and it stayed within its budget.
    const ShardCounters& c = cached.shards[i];
    EXPECT_GT(c.evicted, 0) << "shard " << i;
    // Dirty rows leave it by eviction or, beyond ps.max_dirty_bytes (a quarter of the cache
    // here), written ahead of it: most of them so with a cache this full.
    EXPECT_GE(c.writebacks, 0) << "shard " << i;
    EXPECT_GT(c.written_ahead, 0) << "shard " << i;
    EXPECT_GT(c.misses, 0) << "shard " << i;
    EXPECT_GT(c.cache_bytes_max, 0) << "shard " << i;
    EXPECT_LE(c.cache_bytes_max, static_cast<double>(cache)) << "shard " << i;
    RecordProperty("shard" + std::to_string(i) + "_evicted", std::to_string(c.evicted));
    RecordProperty("shard" + std::to_string(i) + "_cache_bytes_max",
                   std::to_string(c.cache_bytes_max));
    RecordProperty("shard" + std::to_string(i) + "_live_bytes", std::to_string(DirBytes(live)));
  }
}

}  // namespace
}  // namespace tandem::testing
