// PsClient: the worker's view of the sharded embedding tables (DESIGN §3-§4, PROTOCOLS §2, §6,
// §9). Pull de-duplicates ids per table, fans them out to every shard in parallel and
// reassembles the rows in request order; Push sends exactly one push per shard per step (empty
// where the worker has no rows there). Both retry until their timeout: NOT_READY is resent at
// once (a parked pull, never a timeout), RETRY / OVERLOADED / unreachable after a back-off. A
// shard that answers OVERLOADED is up and takes the request later (its queue, push buffer or disk
// is full): the timeout then counts from its last such answer, so a worker waits out a full disk
// (said every few seconds) instead of failing the job into a rollback onto the same disk.
// Push payloads are kept until each shard reports the step applied and are resent to a shard
// that comes back with a new incarnation.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/checkpoint_layout.h"
#include "common/embedding_client.h"
#include "common/flat_id_index.h"
#include "common/model_checksum.h"
#include "common/status.h"
#include "common/wire/rpc_client.h"
#include "common/wire_precision.h"

namespace tandem {

struct PsClientOptions {
  std::vector<std::string> shards;                 // shard endpoints, index = shard id
  std::vector<uint32_t> dims;                      // embedding dim per table id
  std::chrono::milliseconds attempt_budget{5000};  // per request attempt
  std::chrono::milliseconds timeout{120000};       // a whole Pull or Push
  // Polled while a Pull, Push or Checksum waits (at least every 100 ms): true ends it with
  // kCancelled. A worker sets it when the chief announces a new generation, so that a pull
  // parked for a lost worker's push gives way to recovery (PROTOCOLS §8).
  std::function<bool()> interrupted;
  // Called on each OVERLOADED answer (a shard whose queue or disk is full holds the request).
  std::function<void()> on_overloaded;
  // ps.wire_precision: pulled rows are asked for, and gradients pushed, at this precision.
  WirePrecision wire_precision = WirePrecision::kFp32;
};

struct PsClientStats {
  uint64_t attempts = 0;
  uint64_t not_ready = 0;
  uint64_t retries = 0;
  uint64_t resent_pushes = 0;
};

// Requires external synchronization (one thread).
class PsClient : public EmbeddingClient {
 public:
  PsClient(zmq::context_t* context, wire::Identity identity, PsClientOptions options);

  // rows->at(i) gets tables[i].ids.size() * dim floats, row j for tables[i].ids[j].
  // kAborted when a shard answers STALE; kInvalidArgument for INVALID; kDeadlineExceeded;
  // kCancelled when options.interrupted said so. A pull for the step given to MarkRecoveryStep,
  // or for the step after it, may be answered from pre-images: a replacement goes on from the
  // step the group redoes, and the lost rank's late pushes of the next step may let a shard
  // apply that one before the replacement pulls it (at k = 0 a shard's pre-images are those of
  // its last apply, so a pull of the step it applied last reads exactly the version it needs).
  Status Pull(int64_t step, std::span<const TableIds> tables,
              std::vector<std::vector<float>>* rows) override {
    const bool recovering =
        recovery_step_ >= 0 && (step == recovery_step_ || step == recovery_step_ + 1);
    return Pull(step, tables, rows, /*from_pre_images=*/recovering);
  }
  Status Pull(int64_t step, std::span<const TableIds> tables, std::vector<std::vector<float>>* rows,
              bool from_pre_images);
  // One push per shard for `step`, keyed (timeline, step, rank = identity.index).
  Status Push(int64_t step, std::span<const TableGrads> tables) override {
    return Push(step, tables, /*skip=*/false);
  }
  Status Push(int64_t step, std::span<const TableGrads> tables, bool skip);
  void MarkCheckpointStep(int64_t step) override { checkpoint_step_ = step; }
  void MarkRecoveryStep(int64_t step) override { recovery_step_ = step; }
  bool LastPullAskedEveryShard() const override { return last_pull_asked_all_; }

  // The embedding part of model_checksum (DESIGN §12): the sum of every shard's part, each taken
  // once that shard has applied `step` (-1: whatever it holds). A shard already past `step`
  // answers with its current state, so call it when no more pushes are coming (the end of
  // training). `rows` (if not null) gets the number of materialised rows over all shards.
  // Retries like Pull; kDeadlineExceeded when a shard never gets there; kInvalidArgument for
  // step < -1.
  StatusOr<ModelChecksum> Checksum(int64_t step, uint64_t* rows = nullptr);
  // Every shard's part of checkpoint `step` (JSON each, by shard), once each has applied `step`
  // and copied its restore point to the durable copy (PROTOCOLS §7).
  // `retained`: the committed checkpoints the chief keeps (the shards may collect the rest);
  // `kind`: what a shard may make of its part (a delta only for the job's last checkpoint).
  StatusOr<std::vector<std::string>> CheckpointParts(int64_t step,
                                                     const std::vector<int64_t>& retained = {},
                                                     PartKind kind = PartKind::kFull);

  void SetIdentity(const wire::Identity& identity) { rpc_.SetIdentity(identity); }
  int64_t shard_applied_step(size_t shard) const { return shards_[shard].applied; }
  size_t retained_pushes() const;
  PsClientStats stats() const { return stats_; }

 private:
  struct Payload {
    bool skip = false;
    bool checkpoint = false;  // a checkpoint cut after this step (MarkCheckpointStep)
    std::vector<uint32_t> tables;
    std::vector<std::vector<uint64_t>> ids;
    std::vector<std::vector<float>> grads;
    // ps.wire_precision bf16/fp16: grads as they travel (grads itself is then empty).
    std::vector<std::vector<uint16_t>> half_grads;
  };
  struct ShardState {
    int handle = -1;
    uint64_t incarnation = 0;  // last seen in a reply header
    int64_t applied = -1;
    // Push payloads not yet reported applied. Shared with frames in flight, which point into
    // them instead of copying.
    std::map<int64_t, std::shared_ptr<const Payload>> retained;
  };
  using OnReply = std::function<Status(size_t shard, wire::InMessage&)>;
  // Sends build(shard) for every shard in `targets`, retrying as the class comment says, and
  // hands each successful reply to on_reply.
  Status CallShards(const std::vector<size_t>& targets,
                    const std::function<wire::OutMessage(size_t)>& build, const OnReply& on_reply,
                    std::chrono::steady_clock::time_point deadline);
  // Updates incarnation/applied from a reply; returns true if the shard restarted.
  bool Observe(size_t shard, const wire::InMessage& reply);
  wire::OutMessage BuildPush(int64_t step, const std::shared_ptr<const Payload>& payload) const;
  Status ResendRetained(size_t shard, std::chrono::steady_clock::time_point deadline);

  PsClientOptions options_;
  wire::RpcClient rpc_;
  std::vector<ShardState> shards_;
  PsClientStats stats_;
  std::vector<FlatIdIndex> dedupe_;   // per request table, reused
  int64_t checkpoint_step_ = -1;      // MarkCheckpointStep
  int64_t recovery_step_ = -1;        // MarkRecoveryStep
  bool last_pull_asked_all_ = false;  // LastPullAskedEveryShard
};

}  // namespace tandem
