// The parameter-server shard's RPC service (PROTOCOLS §2-§3, §13): versioned pulls on the pull
// lane (parked, holding no thread, until the version they need is applied) and pushes on the
// push lane, so parked pulls can never delay a push; the shard's part of model_checksum on the
// pull lane. Decodes and validates every message and
// turns the Shard's Status values into explicit replies.
#pragma once

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "common/sync.h"
#include "common/wire/parking_lot.h"
#include "common/wire/rpc_server.h"
#include "server/ps/shard.h"

namespace tandem::ps {

constexpr int kPushLane = 0;
constexpr int kPullLane = 1;

// Lane layout for a shard with `handler_threads` threads in all (at least one per lane).
std::vector<wire::LaneOptions> PsLanes(int handler_threads);

struct PsServiceStats {
  uint64_t pulls = 0;
  uint64_t pushes = 0;
  uint64_t parked = 0;
  uint64_t invalid = 0;
  uint64_t stale = 0;
  uint64_t checksums = 0;  // checksum requests answered with a sum
};

// Safe for concurrent use. `shard` and `server` must outlive the service.
// Rows a pull reply carries in one frame of a table's values (about 256 KiB of fp32 rows;
// TableSlice.valuesFrames), unless the reply would have more than kMaxPullReplyFrames frames.
size_t PullFrameRows(uint32_t dim);
inline constexpr size_t kMaxPullReplyFrames = 16384;

class PsService {
 public:
  PsService(Shard* shard, wire::RpcServer* server);
  // Stops a part copy in flight (between two files) and waits for it.
  ~PsService();
  PsService(const PsService&) = delete;
  PsService& operator=(const PsService&) = delete;

  // Registers the handlers and the fencing gate. Call before server->Start().
  void Register();
  PsServiceStats stats() const;
  // What holds this PS now, for the chief's view: pushes refused (Shard::refusal) or a checkpoint
  // part that met a full disk and waits for space. Empty when nothing does.
  std::string Holdup() const;

 private:
  void HandlePull(wire::InMessage& request, wire::Responder responder);
  void HandlePush(wire::InMessage& request, wire::Responder responder);
  // The shard's part of model_checksum once it has applied the requested step; RETRY (with the
  // view) before that. Runs on the pull lane: the scan holds the apply mutex, never a push
  // handler thread.
  void HandleChecksum(wire::InMessage& request, wire::Responder responder);
  // Starts the part's copy in the background and answers "copying" (with progress) until it
  // is done; then the part, or the copy's error.
  void HandleCheckpointPart(wire::InMessage& request, wire::Responder responder);
  void AnswerPull(wire::InMessage& request, wire::Responder responder);
  // Reads the rows of a parked pull's slices (validated by HandlePull) into the cache.
  void Prefetch(std::span<const TableRead> slices);
  void ReleaseParked();
  std::optional<wire::Rejection> Fence(const wire::InMessage& request);
  void RaiseIncarnation(uint32_t rank, uint64_t incarnation);
  // Logs a push refused for a reason its sender waits out by resending (a full disk, a full
  // push buffer): the first at once, then one line at most every 10 s with the count since, so
  // that a worker's retries do not fill the log of a daemon whose disk is full.
  void LogRetriedRefusal(const Status& error);

  Shard* const shard_;
  wire::RpcServer* const server_;
  wire::ParkingLot parking_;
  mutable Mutex mu_;
  std::vector<uint64_t> incarnations_ GUARDED_BY(mu_);  // highest seen per worker rank
  PsServiceStats stats_ GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point next_refusal_log_ GUARDED_BY(mu_){};
  uint64_t refusals_not_logged_ GUARDED_BY(mu_) = 0;
  // The part copy in the background: one at a time (the durable root allows no other).
  struct PartCopy {
    int64_t step = -1;
    CopyProgress progress;
    bool done = false;  // under part_mu_
    StatusOr<CheckpointPart> result = Status::Unavailable("copying");
    std::thread thread;
  };
  mutable Mutex part_mu_;
  std::unique_ptr<PartCopy> part_copy_ GUARDED_BY(part_mu_);
  // The full-disk error of the last part copy (empty once one succeeds).
  std::string part_refusal_ GUARDED_BY(part_mu_);
};

// Registers diagnostics only (a PS started without a shard, e.g. in tests of the RPC layer).
void RegisterPsDiagnostics(wire::RpcServer* server);

}  // namespace tandem::ps
