#include "server/ps/shard_validation.h"

#include <cmath>
#include <string>
#include <vector>

#include "common/flat_id_index.h"
#include "common/slot_map.h"

namespace tandem::ps {

bool AllFinite(const float* g, uint32_t dim) {
  for (uint32_t j = 0; j < dim; ++j)
    if (!std::isfinite(g[j])) return false;
  return true;
}

Status ValidatePullIds(const ShardOptions& options, uint32_t table, std::span<const uint64_t> ids) {
  if (table >= options.tables.size())
    return Status::InvalidArgument("unknown table " + std::to_string(table));
  if (ids.size() > options.max_rows_per_push)
    return Status::InvalidArgument("too many ids: " + std::to_string(ids.size()));
  if (options.num_shards == 1) return Status::Ok();  // every key is ours
  for (uint64_t id : ids) {
    if (ShardOf(table, id, options.num_shards) != options.shard_index)
      return Status::InvalidArgument("table " + std::to_string(table) + " id " +
                                     std::to_string(id) + " does not belong to shard " +
                                     std::to_string(options.shard_index));
  }
  return Status::Ok();
}

Status ValidatePushInput(const ShardOptions& options, const PushInput& p) {
  if (p.rank >= options.num_workers)
    return Status::InvalidArgument("rank " + std::to_string(p.rank) +
                                   " >= " + std::to_string(options.num_workers) + " workers");
  if (p.step < 0) return Status::InvalidArgument("negative step");
  std::vector<bool> seen(options.tables.size(), false);
  for (const auto& t : p.tables) {
    const std::string where =
        "step " + std::to_string(p.step) + " table " + std::to_string(t.table_id);
    if (t.table_id >= options.tables.size()) return Status::InvalidArgument("unknown " + where);
    if (seen[t.table_id]) return Status::InvalidArgument(where + " appears twice in one push");
    seen[t.table_id] = true;
    const embedding::TableSpec& spec = options.tables[t.table_id];
    if (t.dim != spec.dim)
      return Status::InvalidArgument(where + ": dim " + std::to_string(t.dim) + ", table has " +
                                     std::to_string(spec.dim));
    if (t.ids.size() > options.max_rows_per_push)
      return Status::InvalidArgument(where + ": " + std::to_string(t.ids.size()) +
                                     " rows is too many");
    if (t.grads.size() != t.ids.size() * t.dim)
      return Status::InvalidArgument(where + ": " + std::to_string(t.ids.size()) + " ids but " +
                                     std::to_string(t.grads.size()) + " gradient values");
    TANDEM_RETURN_IF_ERROR(ValidatePullIds(options, t.table_id, t.ids).WithContext(where));
    // Unique ids per table let a step with one contributor skip the merge.
    thread_local FlatIdIndex seen_ids;
    seen_ids.Reset(t.ids.size());
    size_t repeated = t.ids.size();
    seen_ids.InsertAll(t.ids.data(), t.ids.size(), [&](size_t j, uint32_t, bool inserted) {
      if (!inserted && repeated == t.ids.size()) repeated = j;
    });
    if (repeated < t.ids.size())
      return Status::InvalidArgument(where + " id " + std::to_string(t.ids[repeated]) +
                                     " appears twice");
    if (options.nan_policy == NanPolicy::kReject) {
      for (size_t i = 0; i < t.ids.size(); ++i) {
        if (!AllFinite(&t.grads[i * t.dim], t.dim))
          return Status::InvalidArgument(where + " id " + std::to_string(t.ids[i]) +
                                         ": NaN or Inf gradient");
      }
    }
  }
  return Status::Ok();
}

}  // namespace tandem::ps
