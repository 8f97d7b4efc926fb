// Reading a committed checkpoint outside a running job (`tandem checksum --checkpoint`,
// `export`, `eval`): its manifest, its config, each shard's rows opened from the durable copy,
// and the whole model frozen in memory.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/config/job_config.h"
#include "common/status.h"
#include "server/chief/checkpoint_manifest.h"
#include "server/ps/embedding_store.h"
#include "worker/frozen_model.h"

namespace tandem::offline {

// A checkpoint as `--checkpoint DIR` names it. A value type.
struct OpenedCheckpoint {
  std::string root;  // checkpoint.dir: the manifest's file paths are relative to it
  chief::Manifest manifest;
};

// DIR/MANIFEST (DIR is one ckpt-<step> directory) or the checkpoint DIR's LATEST names (DIR is
// checkpoint.dir; a damaged LATEST falls back as LoadLatest does, with a warning on stderr).
// kNotFound when there is none; kDataLoss for a damaged manifest; kUnavailable for I/O errors.
StatusOr<OpenedCheckpoint> OpenCheckpoint(const std::string& dir);

// The job config stored in the manifest.
StatusOr<config::JobConfig> CheckpointJobConfig(const OpenedCheckpoint& ckpt);

// Opens one shard part (a manifest part other than "dense") of `ckpt` as a store: its durable
// copy materialised under `scratch` (which must exist; the caller removes it) and rebuilt into a
// live RocksDB directory there. Errors as MaterializePart and EmbeddingStore::Open.
StatusOr<std::unique_ptr<ps::EmbeddingStore>> OpenCheckpointShard(const OpenedCheckpoint& ckpt,
                                                                  const chief::ManifestPart& part,
                                                                  const config::JobConfig& job,
                                                                  const std::string& scratch);

// A private temporary directory, removed with its content when this goes away.
class ScratchDir {
 public:
  static StatusOr<std::unique_ptr<ScratchDir>> Create(const std::string& prefix);
  ~ScratchDir();
  const std::string& path() const { return path_; }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

 private:
  explicit ScratchDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// The model of `ckpt`, frozen: its config, the dense parameters of its dense file and every
// materialised row of every shard (embeddings only). With `verify`, every file's CRC32C is
// checked first, else presence and sizes. kDataLoss naming a damaged or missing file, or a
// dense file of another step; kInvalidArgument for a checkpoint without a dense part or whose
// config this build cannot read.
// TODO(perf): holds every row in memory; a table larger than memory needs a streaming merge.
StatusOr<worker::FrozenModel> ReadCheckpointModel(const OpenedCheckpoint& ckpt, bool verify);

}  // namespace tandem::offline
