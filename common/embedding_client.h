// EmbeddingClient: what a trainer needs from the embedding tables, whether they live on
// parameter-server shards (PsClient) or in this process (LocalEmbeddingTable, for single-process
// training and tests). Both apply the same row initialiser and sparse-optimizer math.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace tandem {

struct TableIds {
  uint32_t table = 0;
  std::span<const uint64_t> ids;  // may repeat
  // The caller says the ids are distinct (a batch's unique ids), so a client may skip its own
  // de-duplication. A repeat then costs only its bytes: each position still gets its row.
  bool unique = false;
};

struct TableGrads {
  uint32_t table = 0;
  std::span<const uint64_t> ids;  // unique within the table
  std::span<const float> grads;   // ids.size() * dim
};

class EmbeddingClient {
 public:
  virtual ~EmbeddingClient() = default;
  // rows->at(i) gets tables[i].ids.size() * dim floats, row j for tables[i].ids[j], as of the
  // version a pull for `step` must see.
  virtual Status Pull(int64_t step, std::span<const TableIds> tables,
                      std::vector<std::vector<float>>* rows) = 0;
  // The row gradients of `step` (each id once per table, summed over its samples).
  virtual Status Push(int64_t step, std::span<const TableGrads> tables) = 0;
  // Announces that a checkpoint is taken after `step`, before that step is pushed: the push
  // then asks each shard to cut there (PROTOCOLS §3, §7). Clients without shards ignore it.
  virtual void MarkCheckpointStep(int64_t step) { (void)step; }
  // Recovery of a lost worker (PROTOCOLS §8): pulls for `step` may be answered by a shard that
  // already applied it, from the pre-images of that apply. Clients without shards ignore it.
  virtual void MarkRecoveryStep(int64_t step) { (void)step; }
  // Whether the last successful Pull asked every shard. At k = 0 such a pull for step s was
  // answered only once every shard had applied s - 1, so every rank's pushes of s - 1 are
  // known to have landed (a roll forward then need not undo s - 1).
  virtual bool LastPullAskedEveryShard() const { return false; }
};

}  // namespace tandem
