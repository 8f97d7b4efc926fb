// The rows that changed between two committed checkpoints, found from the files the newer one
// added: an SST is immutable and every row written after a checkpoint lands in a newer SST, so
// the rows changed after checkpoint S are among the keys of the SSTs that checkpoint S' holds
// and S does not. Those rows are read from S' and compared with what is being served; only the
// ones that differ are applied. (A compaction rewrites unchanged rows into new SSTs: they are
// read and compared, never applied.) A delta part (durable_copy.h) adds the keys its change log
// segments write: the rows changed after its base.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "serve/row_source.h"
#include "server/ps/durable_copy.h"
#include "worker/frozen_model.h"

namespace tandem::serve {

struct DeltaStats {
  uint64_t rows_read = 0;     // candidate rows read from the newer checkpoint
  uint64_t rows_changed = 0;  // of those, the ones whose row differs from `current`'s
};

// Per table (by table id): the rows of `newer` that differ from `current` (or that `current`
// lacks), among the rows in SSTs of `newer` that `older_parts` (by shard: the checkpoint that
// `current` serves) lacks. kFailedPrecondition when the shard counts differ (re-partitioned:
// every file is new; open the newer checkpoint whole instead).
StatusOr<std::vector<worker::FrozenTable>> ChangedRows(
    const CheckpointRows& newer, const std::vector<ps::CheckpointPart>& older_parts,
    const RowSource& current, const std::vector<embedding::TableSpec>& specs, DeltaStats* stats);

// `tandem export --since`: the model of checkpoint `newer` (config, dense state) with, as its
// tables, only the rows changed after the committed checkpoint of step `since` in the same
// directory (kNotFound when that one is no longer kept; kInvalidArgument when it is not older
// or was trained under another config). Checkpoints are opened under `scratch`.
StatusOr<worker::FrozenModel> ReadCheckpointDelta(const offline::OpenedCheckpoint& newer,
                                                  int64_t since, const std::string& scratch,
                                                  DeltaStats* stats);

}  // namespace tandem::serve
