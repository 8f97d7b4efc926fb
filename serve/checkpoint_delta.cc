#include "serve/checkpoint_delta.h"

#include <algorithm>
#include <cstring>

#include "common/checkpoint_layout.h"
#include "worker/dense_state.h"

namespace tandem::serve {

StatusOr<std::vector<worker::FrozenTable>> ChangedRows(
    const CheckpointRows& newer, const std::vector<ps::CheckpointPart>& older_parts,
    const RowSource& current, const std::vector<embedding::TableSpec>& specs, DeltaStats* stats) {
  if (older_parts.size() != newer.parts().size())
    return Status::FailedPrecondition("checkpoint " + std::to_string(newer.step()) + " has " +
                                      std::to_string(newer.parts().size()) +
                                      " shards, the served one " +
                                      std::to_string(older_parts.size()));
  std::vector<std::vector<uint64_t>> ids(specs.size());
  std::vector<std::pair<uint32_t, uint64_t>> keys;
  for (uint32_t shard = 0; shard < older_parts.size(); ++shard) {
    TANDEM_RETURN_IF_ERROR(newer.KeysNotIn(shard, older_parts[shard], &keys));
    for (const auto& [table, id] : keys) ids[table].push_back(id);
  }
  std::vector<worker::FrozenTable> changed(specs.size());
  std::vector<float> fresh, served;
  std::vector<uint8_t> fresh_found, served_found;
  for (uint32_t t = 0; t < specs.size(); ++t) {
    worker::FrozenTable& out = changed[t];
    out.table = t;
    out.dim = specs[t].dim;
    auto& want = ids[t];
    if (want.empty()) continue;
    // Each shard's keys came sorted; sorted overall, so the result is in id order.
    std::sort(want.begin(), want.end());
    const size_t n = want.size(), dim = out.dim;
    fresh.assign(n * dim, 0.0f);
    served.assign(n * dim, 0.0f);
    fresh_found.assign(n, 0);
    served_found.assign(n, 0);
    TANDEM_RETURN_IF_ERROR(newer.Read(t, want, fresh.data(), fresh_found.data()));
    TANDEM_RETURN_IF_ERROR(current.Read(t, want, served.data(), served_found.data()));
    if (stats != nullptr) stats->rows_read += n;
    for (size_t i = 0; i < n; ++i) {
      if (!fresh_found[i]) continue;  // a key of the SST that is no longer a row
      const float* a = &fresh[i * dim];
      if (served_found[i] && std::memcmp(a, &served[i * dim], dim * sizeof(float)) == 0) continue;
      out.ids.push_back(want[i]);
      out.values.insert(out.values.end(), a, a + dim);
    }
    if (stats != nullptr) stats->rows_changed += out.ids.size();
  }
  return changed;
}

StatusOr<worker::FrozenModel> ReadCheckpointDelta(const offline::OpenedCheckpoint& newer,
                                                  int64_t since, const std::string& scratch,
                                                  DeltaStats* stats) {
  if (since >= newer.manifest.step)
    return Status::InvalidArgument("--since " + std::to_string(since) +
                                   " is not older than the checkpoint's step " +
                                   std::to_string(newer.manifest.step));
  auto older = offline::OpenCheckpoint(newer.root + "/" + CheckpointDirName(since));
  if (!older.ok())
    return older.status().IsNotFound()
               ? Status::NotFound("no committed checkpoint of step " + std::to_string(since) +
                                  " in " + newer.root + " (checkpoint.keep may have removed it)")
               : older.status();
  TANDEM_RETURN_IF_ERROR(chief::VerifyManifestFiles(newer.root, newer.manifest, true, nullptr));
  TANDEM_RETURN_IF_ERROR(chief::VerifyManifestFiles(older->root, older->manifest, true, nullptr));
  worker::FrozenModel model;
  TANDEM_ASSIGN_OR_RETURN(model.job, offline::CheckpointJobConfig(newer));
  TANDEM_ASSIGN_OR_RETURN(config::JobConfig old_job, offline::CheckpointJobConfig(*older));
  if (old_job.ComputationHash() != model.job.ComputationHash())
    return Status::InvalidArgument("the checkpoints of steps " + std::to_string(since) + " and " +
                                   std::to_string(newer.manifest.step) +
                                   " were trained under different configs");
  model.step = newer.manifest.step;
  TANDEM_ASSIGN_OR_RETURN(worker::DenseState dense,
                          worker::ReadDenseState(newer.root + "/" + CheckpointDirName(model.step) +
                                                 "/" + kDenseCheckpointFile));
  model.dense = worker::WithoutOptimizerState(std::move(dense));
  constexpr uint64_t kCache = 64ull << 20;
  TANDEM_ASSIGN_OR_RETURN(auto new_rows, CheckpointRows::Open(newer, model.job, scratch, kCache));
  TANDEM_ASSIGN_OR_RETURN(auto old_rows, CheckpointRows::Open(*older, model.job, scratch, kCache));
  const auto specs = embedding::TableSpecsFromConfig(model.job);
  TANDEM_ASSIGN_OR_RETURN(model.tables,
                          ChangedRows(*new_rows, old_rows->parts(), *old_rows, specs, stats));
  return model;
}

}  // namespace tandem::serve
