// PS recovery benchmark (issue 7, "Benchmarks"): a shard of --rows rows (default 10^6) whose
// log holds --pushes pushes (default 10^5) after its newest restore point is reopened, as after
// a kill -9: Shard::Open hard-links the restore point into a fresh live DB and replays the log
// (PROTOCOLS §6). Baseline, in the same run: reopening the same restore point with nothing to
// replay. Medians of --reps opens, each on a fresh copy of the directory; one JSON line each
// (DESIGN §12), progress on stderr. One table (dim 16, Adagrad), k = 0, one worker, RocksDB.
// Each logged push is one step of --rows-per-push (default 32) rows drawn from the table.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "bench/bench_json.h"
#include "bench/shard_steps.h"
#include "common/testing/test_util.h"
#include "server/ps/shard.h"

namespace tandem::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kDim = 16;

struct Args {
  uint64_t rows = 1'000'000;
  uint64_t pushes = 100'000;
  uint64_t rows_per_push = 32;
  int reps = 3;
};

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void Check(const Status& s, const std::string& what) {
  if (s.ok()) return;
  std::fprintf(stderr, "ps_replay_bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(1);
}

ps::ShardOptions Options(const std::string& dir) { return OneTableShard(dir, kDim); }

void Push(ps::Shard* shard, int64_t step, std::span<const uint64_t> ids,
          const std::vector<float>& grads) {
  Check(PushStep(shard, step, kDim, ids, grads), "push of step " + std::to_string(step));
}

// Opens a fresh copy of `dir` and returns the seconds Shard::Open took; checks the step.
double TimedOpen(const std::string& dir, const std::string& scratch, int64_t want_step) {
  std::error_code ec;
  fs::remove_all(scratch, ec);
  fs::copy(dir, scratch, fs::copy_options::recursive, ec);
  if (ec) {
    std::fprintf(stderr, "ps_replay_bench: copy %s: %s\n", dir.c_str(), ec.message().c_str());
    std::exit(1);
  }
  const auto t0 = Clock::now();
  auto shard = ps::Shard::Open(Options(scratch));
  const double s = Seconds(t0);
  Check(shard.status(), "open " + scratch);
  if ((*shard)->applied_step() != want_step) {
    std::fprintf(stderr, "ps_replay_bench: reopened at step %lld, expected %lld\n",
                 static_cast<long long>((*shard)->applied_step()),
                 static_cast<long long>(want_step));
    std::exit(1);
  }
  return s;
}

int Run(const Args& a) {
  testing::TempDir tmp;
  const std::string with_log = tmp.File("replay"), without = tmp.File("reopen");
  std::vector<float> grads;
  {
    auto shard = ps::Shard::Open(Options(with_log));
    Check(shard.status(), "open");
    std::fprintf(stderr, "filling %llu rows...\n", static_cast<unsigned long long>(a.rows));
    std::vector<uint64_t> ids;
    int64_t step = 0;
    for (uint64_t i = 0; i < a.rows; i += 1'000'000) {
      ids.clear();
      for (uint64_t j = i; j < std::min(a.rows, i + 1'000'000); ++j) ids.push_back(IdOf(j));
      grads.assign(ids.size() * kDim, 0.01f);
      Push(shard->get(), step++, ids, grads);
    }
    Check((*shard)->TakeRestorePoint(), "restore point");
  }
  // The baseline: the same restore point, nothing logged after it.
  std::error_code ec;
  fs::copy(with_log, without, fs::copy_options::recursive, ec);
  int64_t last = 0;
  {
    auto shard = ps::Shard::Open(Options(with_log));
    Check(shard.status(), "reopen");
    last = (*shard)->applied_step();
    // Open takes a restore point at start-up: start the measured log after it.
    std::fprintf(stderr, "logging %llu pushes of %llu rows...\n",
                 static_cast<unsigned long long>(a.pushes),
                 static_cast<unsigned long long>(a.rows_per_push));
    std::mt19937_64 rng(7);
    std::vector<uint64_t> ids;
    grads.assign(a.rows_per_push * kDim, 0.001f);
    for (uint64_t p = 0; p < a.pushes; ++p) {
      ids.clear();
      while (ids.size() < a.rows_per_push) {
        const uint64_t id = IdOf(rng() % a.rows);
        if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
      }
      Push(shard->get(), ++last, ids, grads);
    }
  }
  const int64_t base_step = last - static_cast<int64_t>(a.pushes);
  std::vector<double> replay, reopen;
  for (int r = 0; r < a.reps; ++r) {
    replay.push_back(TimedOpen(with_log, tmp.File("scratch"), last));
    reopen.push_back(TimedOpen(without, tmp.File("scratch"), base_step));
    std::fprintf(stderr, "  rep %d: replay %.3f s, reopen %.3f s\n", r + 1, replay.back(),
                 reopen.back());
  }
  const double m_replay = Median(replay), m_reopen = Median(reopen);
  PrintFigure("ps_recovery_replay_s", m_replay, "s", false, "reopen_restore_point_s", m_reopen);
  std::fprintf(stderr, "replay: %.0f log records/s beyond the reopen\n",
               static_cast<double>(a.pushes) / std::max(1e-9, m_replay - m_reopen));
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  tandem::bench::Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const uint64_t v = std::strtoull(argv[i + 1], nullptr, 10);
    if (flag == "--rows")
      a.rows = v;
    else if (flag == "--pushes")
      a.pushes = v;
    else if (flag == "--rows-per-push")
      a.rows_per_push = v;
    else if (flag == "--reps")
      a.reps = static_cast<int>(std::max<uint64_t>(1, v));
  }
  return tandem::bench::Run(a);
}
