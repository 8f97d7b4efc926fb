// Shared helpers for the shard tests: small table specs, temp shard directories, pushes built
// from plain vectors.
#pragma once

#include <map>
#include <vector>

#include "common/embedding/initializer.h"
#include "common/embedding/sparse_optimizer.h"
#include "common/slot_map.h"
#include "common/testing/test_util.h"
#include "server/ps/shard.h"

namespace tandem::ps::testing {

inline embedding::TableSpec Spec(uint32_t id, uint32_t dim, embedding::OptimizerKind opt) {
  embedding::TableSpec t;
  t.table_id = id;
  t.name = "C" + std::to_string(id + 1);
  t.dim = dim;
  t.optimizer = opt;
  t.lr = 0.1f;
  return t;
}

inline ShardOptions SmallShard(const std::string& dir, uint32_t workers, int64_t k = 0) {
  ShardOptions o;
  o.num_workers = workers;
  o.staleness = k;
  o.tables = {Spec(0, 4, embedding::OptimizerKind::kAdagrad),
              Spec(1, 8, embedding::OptimizerKind::kSgd)};
  o.dir = dir;
  o.cache_bytes = 1 << 20;
  return o;
}

// A push whose rows it owns; input() gives the views the Shard takes.
struct OwnedPush {
  int64_t step = 0;
  uint32_t rank = 0;
  uint64_t incarnation = 1;
  std::vector<PushTable> tables;
  PushInput input() const {
    PushInput in;
    in.step = step;
    in.rank = rank;
    in.incarnation = incarnation;
    for (const auto& t : tables) in.tables.push_back({t.table_id, t.dim, t.ids, t.grads});
    return in;
  }
};

// Deterministic gradients for (step, rank, table, id).
inline std::vector<float> Grad(int64_t step, uint32_t rank, uint32_t table, uint64_t id,
                               uint32_t dim) {
  std::vector<float> g(dim);
  for (uint32_t j = 0; j < dim; ++j)
    g[j] = static_cast<float>(
               static_cast<int64_t>((step * 7 + rank * 13 + table * 5 + id * 3 + j) % 17) - 8) *
           0.01f;
  return g;
}

// The rows of `ids` of `table` on a 1-shard job, as a push of (step, rank).
inline OwnedPush MakePush(int64_t step, uint32_t rank,
                          const std::map<uint32_t, std::vector<uint64_t>>& ids,
                          const ShardOptions& o) {
  OwnedPush p;
  p.step = step;
  p.rank = rank;
  for (const auto& [table, list] : ids) {
    PushTable t;
    t.table_id = table;
    t.dim = o.tables[table].dim;
    for (uint64_t id : list) {
      if (ShardOf(table, id, o.num_shards) != o.shard_index) continue;
      t.ids.push_back(id);
      auto g = Grad(step, rank, table, id, t.dim);
      t.grads.insert(t.grads.end(), g.begin(), g.end());
    }
    p.tables.push_back(std::move(t));
  }
  return p;
}

// Every stored row, keyed (table, id), as raw bytes.
inline std::map<std::pair<uint32_t, uint64_t>, std::vector<uint8_t>> Rows(Shard* shard) {
  std::map<std::pair<uint32_t, uint64_t>, std::vector<uint8_t>> out;
  auto s = shard->store()->ForEachRow([&](uint32_t table, uint64_t id, const uint8_t* row) {
    out[{table, id}] = std::vector<uint8_t>(row, row + shard->options().tables[table].row_bytes());
  });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

}  // namespace tandem::ps::testing
