// Checkpoint manifests and the LATEST / LATEST_DURABLE pointers (DESIGN §5, PROTOCOLS §7): the
// chief is the only writer of these files under `checkpoint.dir`:
//
//   ckpt-<12-digit step>/MANIFEST   JSON, one per committed checkpoint (Manifest below)
//   ckpt-<12-digit step>/dense.ckpt dense state, written by worker rank 0
//   shards/shard-<i>/...            the shards' durable copies, written by the shards
//   LATEST, LATEST_DURABLE          JSON: {"manifest": "ckpt-.../MANIFEST", "crc32c": "<hex>",
//                                   "step": S}, the CRC being that of the manifest's bytes
//
// Every file is written tmp + fsync + rename + fsync(directory), so a crash leaves the old
// version or the new one. Each MANIFEST also carries a CRC32C of its own content, so a scan
// without LATEST can tell an intact manifest from a damaged one.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/checkpoint_layout.h"
#include "common/config/job_config.h"
#include "common/status.h"

namespace tandem::chief {

inline constexpr int kManifestFormatVersion = 1;

// What common/slot_map.h does: slot = XXH3-64 (seed 0) of the 12 bytes (u32 table, u64 id), both
// little-endian, mod 4096; shard = slot mod num_ps. A checkpoint written under another mapping
// cannot be re-partitioned by this build.
inline constexpr char kSlotHashName[] = "xxh3_64-seed0(le32 table|le64 id) mod 4096";

// One file of a checkpoint, as reported by the process that made it.
struct ManifestFile {
  std::string path;     // relative to checkpoint.dir, no "..", not absolute
  uint64_t size = 0;    // bytes
  uint32_t crc32c = 0;  // CRC32C of the whole file, computed once when the file was made
  friend bool operator==(const ManifestFile&, const ManifestFile&) = default;
};

// The files of one part of a checkpoint: a PS shard's durable copy ("shard-0", ...) or rank 0's
// dense state ("dense"). `detail` is the part's own description (e.g. the shard's
// CheckpointPart), stored verbatim and not interpreted here.
struct ManifestPart {
  std::string name;
  std::vector<ManifestFile> files;
  nlohmann::json detail = nlohmann::json::object();
  friend bool operator==(const ManifestPart&, const ManifestPart&) = default;
};

// A value type; copies freely.
struct Manifest {
  int format_version = kManifestFormatVersion;
  int64_t step = -1;   // the checkpoint holds the state after applying this step
  std::string job_id;  // 32 hex chars (JobId::ToHex)
  uint64_t timeline = 0;
  uint64_t term = 0;
  uint64_t generation = 0;
  uint32_t num_ps = 0;       // cluster shape when taken
  uint32_t num_workers = 0;  // M
  uint32_t slots = 4096;     // kNumSlots
  std::string slot_hash = kSlotHashName;
  std::string config_hash;        // JobConfig::ComputationHash()
  std::string config_yaml;        // the effective config, JobConfig::ToYaml()
  std::string determinism_class;  // PROTOCOLS §5
  int64_t records_consumed = 0;   // reader position: RecordsConsumedAfter(step, M, batch_size)
  uint64_t seed = 0;              // train.seed; random state is a function of (seed, step)
  std::vector<ManifestPart> parts;
  friend bool operator==(const Manifest&, const Manifest&) = default;
};

// Records read by all workers together once `step` (0-based) is applied:
// (step + 1) * num_workers * batch_size.
int64_t RecordsConsumedAfter(int64_t step, uint32_t num_workers, int64_t batch_size);

// CheckpointDirName(step): common/checkpoint_layout.h.

// The MANIFEST file's bytes (JSON, with its own CRC in "manifest_crc32c").
std::string EncodeManifest(const Manifest& m);
// kInvalidArgument for a format version this build does not read; kDataLoss naming `name` for
// anything malformed (bad JSON, missing or mistyped field, wrong self-CRC, unsafe file path).
StatusOr<Manifest> DecodeManifest(const std::string& text, const std::string& name);

// Commits `m`: writes ckpt-<step>/MANIFEST durably, then moves LATEST to it, then (when `durable`,
// i.e. the durable copy of every part is complete) LATEST_DURABLE. The directory ckpt-<step> is
// created if absent. kInvalidArgument for a manifest with step < 0; kUnavailable for I/O errors
// (LATEST is then unchanged or names the new manifest, never anything in between).
Status CommitCheckpoint(const std::string& checkpoint_dir, const Manifest& m, bool durable);

// Moves LATEST_DURABLE to the committed checkpoint of `step` once its durable copy is complete
// (it may finish after a newer checkpoint was committed). Does nothing when LATEST_DURABLE already
// names a newer step. kNotFound / kDataLoss when ckpt-<step>/MANIFEST is missing / damaged.
Status MarkDurable(const std::string& checkpoint_dir, int64_t step);

// The manifest LATEST (or LATEST_DURABLE when `durable_only`) names, after checking the pointer's
// CRC against the manifest's bytes. When the pointer is missing or damaged, or its manifest is
// bad, falls back to the first intact manifest among the one the pointer names (a re-commit of a
// step changes the manifest's bytes) and then ckpt-*/MANIFEST newest first (with
// `durable_only`, only one whose files are all present with their sizes), adding to `warnings`
// (may be null) one line naming each bad file and a last one "<pointer>: falling back to
// <manifest>". kNotFound when there is no checkpoint at all; kDataLoss, listing the bad files,
// when there are some but none is intact; kUnavailable for I/O errors other than a missing file.
// With `verify_files` (a job start, PROTOCOLS §7) every file of a candidate is read and its
// CRC32C checked, and a candidate with a damaged or missing file is skipped for the next older
// one, the file named in `warnings`: the durable copy is what makes a checkpoint restorable on
// any shard, so a checkpoint whose copy is damaged is not resumed from.
StatusOr<Manifest> LoadLatest(const std::string& checkpoint_dir, bool durable_only,
                              std::vector<std::string>* warnings, bool verify_files = false);

// Checks that every file of `m` exists under `checkpoint_dir` with its size and, when `full`,
// its CRC32C (read in chunks). Appends the path of every bad file to `bad_files` (may be null).
// kDataLoss naming the first bad file and what is wrong with it.
Status VerifyManifestFiles(const std::string& checkpoint_dir, const Manifest& m, bool full,
                           std::vector<std::string>* bad_files);

// Renames every committed ckpt-<step> with a step above `step` to damaged-ckpt-<step> (a job
// start that fell back past them: they must neither be kept by Retain in place of the checkpoints
// the run makes nor be resumed from later). Returns the directories moved.
StatusOr<std::vector<std::string>> SetAsideNewer(const std::string& checkpoint_dir, int64_t step);

// Removes ckpt-<step> directories without a MANIFEST whose step is below `below_step`, and stray
// *.tmp files in `checkpoint_dir` and in the committed ckpt-* directories (the chief is the only
// writer of those). Leaves shards/, chief/ and partial directories of steps >= `below_step`
// alone: one of those may be a checkpoint worker 0 is taking right now, while a restarted chief
// cannot tell it from an abandoned one (PROTOCOLS §10: a checkpoint taken while the chief was
// away is committed later). The chief calls it at start with the committed LATEST's step, and
// after committing step S with S: worker 0 never goes back to a step below a committed one.
Status CleanPartial(const std::string& checkpoint_dir, int64_t below_step);

// Keeps the newest `keep` committed checkpoints (ckpt-* with a MANIFEST) and the ones LATEST and
// LATEST_DURABLE name, and deletes the other committed ckpt-* directories. Directories without a
// MANIFEST (checkpoints in progress) are not touched. Returns the retained steps, ascending, for
// the shards' garbage collection. kInvalidArgument when keep < 2.
StatusOr<std::vector<int64_t>> Retain(const std::string& checkpoint_dir, int64_t keep);

// The computation-defining keys (PROTOCOLS §1: model.*, tables.*, data.*, train.* except
// train.steps) whose values differ between `a` and `b`, as "key.path: <a> -> <b>" in ToYaml()
// order. A change of tables.default.X is reported once, as tables.default.X, and a table's own
// key only where its value does not simply follow the default on both sides. Empty when a resume
// from a checkpoint made under `a` may run under `b`.
std::vector<std::string> DifferingComputationKeys(const config::JobConfig& a,
                                                  const config::JobConfig& b);

}  // namespace tandem::chief
