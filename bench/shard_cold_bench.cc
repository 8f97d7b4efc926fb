// Cold-path benchmark (issue 21): the parameter server's side of `scripts/bench.sh scale`, in one
// process and without the noise of a whole job. One ps::Shard (RocksDB storage, one dim-16
// Adagrad table, k = 0, one worker, push log on) is driven by steps that read the step's unique
// ids and push a gradient for each, as a worker's pull and push do. Ids are Zipf(--zipf) ranks
// over --vocab, --draws draws a step, mapped to random key order (IdOf), the same stream for
// every run. Runs: the cache holding every row (1 TiB, the baseline), and caches of 1/10 and
// 1/100 of the table's bytes (the stream's distinct ids x 144 B), interleaved over --reps.
//
// Each run prints to stderr; one JSON line per ratio gives the median over reps of the steady
// rows/s (the unique ids a step reads and pushes, over the wall time of the steps after the
// first fifth), against the all-in-cache run of the same rep; and lines for the median read
// and push time a step. No restore points or change log (the job's checkpoints are left out),
// one table (a job's 26 fields are 26 tables: more, smaller MultiGets), no ZeroMQ and no worker:
// what is left is what the store does when the table is larger than the cache (misses read
// from RocksDB, dirty rows written back, the compactions this sets off).
//
// Usage: shard_cold_bench [--vocab V] [--zipf Z] [--draws D] [--steps S] [--reps N] [--dir D]
//   defaults 20000000, 1.05, 32768, 600, 3, a temporary directory. --only R runs only the cache
//   ratio R (1, 0.1 or 0.01) and prints no figures: for a profiler.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/bench_json.h"
#include "bench/shard_steps.h"
#include "common/testing/test_util.h"
#include "server/ps/shard.h"
#include "server/ps/shard_options.h"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kDim = 16;
constexpr uint64_t kRowBytes = 16 + 4 * (kDim + kDim);  // RowMeta, embedding, Adagrad state

struct Args {
  uint64_t vocab = 20'000'000;
  double zipf = 1.05;
  uint64_t draws = 32768;
  int steps = 600;
  int reps = 3;
  std::string dir;
  std::string only;  // one cache ratio ("0.01"), for a profiler: no baseline, no figures
};

void Check(const Status& s, const std::string& what) {
  if (s.ok()) return;
  std::fprintf(stderr, "shard_cold_bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(1);
}

// Every step's unique ids, in the order a worker sends them (sorted, as its dedup leaves them).
std::vector<std::vector<uint64_t>> Stream(const Args& a, uint64_t* distinct) {
  std::vector<std::vector<uint64_t>> steps = ZipfSteps(a.vocab, a.zipf, a.draws, a.steps);
  std::vector<uint64_t> all;
  for (const auto& ids : steps) all.insert(all.end(), ids.begin(), ids.end());
  std::sort(all.begin(), all.end());
  *distinct = std::unique(all.begin(), all.end()) - all.begin();
  return steps;
}

struct Run {
  double rows_per_sec = 0, read_ms = 0, push_ms = 0;
  // A step's RocksDB reads (misses AbsentKeys did not answer) and rows written back.
  double stored_reads = 0, writebacks = 0;
  double rereads = 0;  // of the misses read from RocksDB, read again alone
};

Run RunOnce(const std::string& dir, uint64_t cache_bytes,
            const std::vector<std::vector<uint64_t>>& steps) {
  ps::ShardOptions o = OneTableShard(dir, kDim);
  o.cache_bytes = cache_bytes;
  o.max_dirty_bytes = ps::DefaultMaxDirtyBytes(cache_bytes);
  o.change_log = false;
  auto shard = ps::Shard::Open(o);
  Check(shard.status(), "open");
  std::vector<float> rows, grads;
  std::vector<double> read_s, push_s;
  const size_t warm = steps.size() / 5;
  uint64_t steady_rows = 0;
  Clock::time_point steady_start = Clock::now();
  ps::StoreStats before;
  for (size_t s = 0; s < steps.size(); ++s) {
    if (s == warm) {
      steady_start = Clock::now();
      before = (*shard)->store()->stats();
    }
    const auto& ids = steps[s];
    rows.resize(ids.size() * kDim);
    const auto t0 = Clock::now();
    Check((*shard)->Read(0, ids, rows.data()), "read of step " + std::to_string(s));
    const auto t1 = Clock::now();
    grads.assign(ids.size() * kDim, 0.0f);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.001f * rows[i] + 0.0001f;
    const auto t2 = Clock::now();
    Check(PushStep(shard->get(), static_cast<int64_t>(s), kDim, ids, grads), "push");
    const auto t3 = Clock::now();
    if (s >= warm) {
      steady_rows += ids.size();
      read_s.push_back(std::chrono::duration<double>(t1 - t0).count());
      push_s.push_back(std::chrono::duration<double>(t3 - t2).count());
    }
  }
  const double wall = std::chrono::duration<double>(Clock::now() - steady_start).count();
  const ps::StoreStats after = (*shard)->store()->stats();
  const double n = static_cast<double>(steps.size() - warm);
  const double reads = static_cast<double>((after.misses - after.misses_known_absent) -
                                           (before.misses - before.misses_known_absent));
  return {steady_rows / wall,
          1e3 * Median(read_s),
          1e3 * Median(push_s),
          reads / n,
          static_cast<double>(after.writebacks - before.writebacks) / n,
          static_cast<double>(after.rereads - before.rereads) / n};
}

int Main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--vocab")
      a.vocab = std::stoull(v);
    else if (k == "--zipf")
      a.zipf = std::stod(v);
    else if (k == "--draws")
      a.draws = std::stoull(v);
    else if (k == "--steps")
      a.steps = std::stoi(v);
    else if (k == "--reps")
      a.reps = std::stoi(v);
    else if (k == "--dir")
      a.dir = v;
    else if (k == "--only")
      a.only = v;
    else {
      std::fprintf(stderr, "shard_cold_bench: unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  if ((argc - 1) % 2 != 0 || a.vocab < 1 || a.steps < 5 || a.reps < 1 || a.draws < 1) {
    std::fprintf(stderr,
                 "usage: shard_cold_bench [--vocab V] [--zipf Z] [--draws D] "
                 "[--steps S] [--reps N] [--dir D] [--only R]\n");
    return 2;
  }
  testing::TempDir tmp;
  const std::string root = a.dir.empty() ? tmp.path() : a.dir;
  uint64_t distinct = 0;
  const auto steps = Stream(a, &distinct);
  const uint64_t table_bytes = distinct * kRowBytes;
  std::fprintf(stderr,
               "shard_cold_bench: %d steps, %zu unique ids in step 0, %llu distinct ids "
               "(%llu table bytes)\n",
               a.steps, steps[0].size(), static_cast<unsigned long long>(distinct),
               static_cast<unsigned long long>(table_bytes));
  const std::vector<std::pair<std::string, double>> ratios = {
      {"1", 0}, {"0.1", 0.1}, {"0.01", 0.01}};
  std::vector<std::vector<Run>> runs(ratios.size());
  for (int rep = 0; rep < a.reps; ++rep) {
    for (size_t r = 0; r < ratios.size(); ++r) {
      if (!a.only.empty() && a.only != ratios[r].first) continue;
      const uint64_t cache = ratios[r].second == 0
                                 ? uint64_t{1} << 40
                                 : static_cast<uint64_t>(ratios[r].second * table_bytes);
      const std::string dir = root + "/run-" + ratios[r].first + "-" + std::to_string(rep);
      runs[r].push_back(RunOnce(dir, cache, steps));
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
      const Run& x = runs[r].back();
      std::fprintf(
          stderr,
          "shard_cold_bench: rep %d cache %s of the table: %.0f rows/s, read "
          "%.2f ms, push %.2f ms a step; %.0f misses read from RocksDB (%.0f of them again, alone) "
          "and %.0f rows written back a step\n",
          rep + 1, ratios[r].first.c_str(), x.rows_per_sec, x.read_ms, x.push_ms, x.stored_reads,
          x.rereads, x.writebacks);
    }
  }
  if (!a.only.empty()) return 0;
  auto median_of = [&](size_t r, double Run::*f) {
    std::vector<double> v;
    for (const Run& x : runs[r]) v.push_back(x.*f);
    return Median(v);
  };
  for (size_t r = 1; r < ratios.size(); ++r) {
    // The ratio of each rep against its own all-in-cache run, then the median of those.
    std::vector<double> per_rep;
    for (int rep = 0; rep < a.reps; ++rep)
      per_rep.push_back(runs[r][rep].rows_per_sec / runs[0][rep].rows_per_sec);
    PrintFigure("shard_cold_rows_per_sec_cache_" + ratios[r].first,
                median_of(r, &Run::rows_per_sec), "rows/s", true, "every row in the cache",
                median_of(0, &Run::rows_per_sec));
    std::fprintf(stderr, "shard_cold_bench: cache %s: median of the per-rep ratios %.3f\n",
                 ratios[r].first.c_str(), Median(per_rep));
  }
  for (size_t r = 0; r < ratios.size(); ++r) {
    PrintFigure("shard_cold_read_ms_cache_" + ratios[r].first, median_of(r, &Run::read_ms), "ms",
                false, "none", 0);
    PrintFigure("shard_cold_push_ms_cache_" + ratios[r].first, median_of(r, &Run::push_ms), "ms",
                false, "none", 0);
  }
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) { return tandem::bench::Main(argc, argv); }
