// Shared by the benchmarks that drive a ps::Shard or its store directly (checkpoint_bench,
// ps_replay_bench, shard_cold_bench, row_file_bench): ids in random key order, a Zipf stream of
// them, and one k = 0 step of one worker on table 0.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/ps/shard.h"

namespace tandem::bench {

// A bijection of uint64 (splitmix64's finaliser): row i's id, so ids look like hashed features
// and RocksDB sees them in random key order, as in a job.
inline uint64_t IdOf(uint64_t i) {
  uint64_t z = i + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// `steps` steps of `draws` Zipf(`zipf`) draws of ranks in [0, vocab), each mapped to its id
// (IdOf), de-duplicated and sorted as a worker's dedup leaves them: the same stream every call.
inline std::vector<std::vector<uint64_t>> ZipfSteps(uint64_t vocab, double zipf, uint64_t draws,
                                                    int steps) {
  std::vector<double> cdf(vocab);
  double sum = 0;
  for (uint64_t k = 0; k < vocab; ++k) cdf[k] = (sum += 1.0 / std::pow(double(k + 1), zipf));
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(0, sum);
  std::vector<std::vector<uint64_t>> out(steps);
  for (auto& ids : out) {
    ids.reserve(draws);
    for (uint64_t d = 0; d < draws; ++d) {
      const uint64_t rank = std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin();
      ids.push_back(IdOf(std::min(rank, vocab - 1)));
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  }
  return out;
}

// One shard (k = 0, one worker) of one table C1 of `dim` floats (Adagrad) in `dir`, taking
// restore points only where the caller does.
inline ps::ShardOptions OneTableShard(const std::string& dir, uint32_t dim) {
  embedding::TableSpec t;
  t.table_id = 0;
  t.name = "C1";
  t.dim = dim;
  t.optimizer = embedding::OptimizerKind::kAdagrad;
  ps::ShardOptions o;
  o.num_workers = 1;
  o.staleness = 0;
  o.tables = {t};
  o.dir = dir;
  o.max_rows_per_push = 1'000'000;
  o.restore_point_every_bytes = 1ull << 50;
  return o;
}

// Rank 0 pushes `ids` (distinct, dim floats of `grads` each) as step `step` to table 0; the shard
// (k = 0, M = 1) applies it at once. kInternal when it did not.
inline Status PushStep(ps::Shard* shard, int64_t step, uint32_t dim, std::span<const uint64_t> ids,
                       const std::vector<float>& grads) {
  ps::PushInput in;
  in.timeline = shard->timeline();
  in.step = step;
  in.rank = 0;
  in.incarnation = 1;
  in.tables.push_back({0, dim, ids, std::span<const float>(grads.data(), ids.size() * dim)});
  TANDEM_RETURN_IF_ERROR(shard->Push(in).status());
  if (shard->applied_step() != step)
    return Status::Internal("step " + std::to_string(step) + " not applied after its push");
  return Status::Ok();
}

}  // namespace tandem::bench
