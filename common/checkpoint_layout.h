// Where checkpoint files live under checkpoint.dir (PROTOCOLS §7), shared by the chief (which
// writes manifests), the shards (their durable copies) and worker rank 0 (the dense file).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace tandem {

// "ckpt-000000000042": the directory of checkpoint 42 (its MANIFEST and dense.ckpt).
inline std::string CheckpointDirName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "ckpt-%012lld", static_cast<long long>(step));
  return buf;
}

// "shards/shard-3": a shard's durable copy, relative to checkpoint.dir.
inline std::string ShardDurableDir(uint32_t shard) {
  return "shards/shard-" + std::to_string(shard);
}

inline constexpr char kDenseCheckpointFile[] = "dense.ckpt";

// What a shard may make of a checkpoint part (server/ps/durable_copy.h): full, or a delta of its
// previous full part when that copies less than a full one would (kDeltaIfCheaper), or whenever
// it has one (kDelta). Only the job's last checkpoint asks for a delta (checkpoint.final_part).
enum class PartKind { kFull, kDeltaIfCheaper, kDelta };

// checkpoint.final_part's value ("cheaper", "delta", "full") as a PartKind.
inline PartKind FinalPartKind(const std::string& final_part) {
  if (final_part == "delta") return PartKind::kDelta;
  if (final_part == "full") return PartKind::kFull;
  return PartKind::kDeltaIfCheaper;
}

}  // namespace tandem
