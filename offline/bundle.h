// The serving bundle `tandem export` writes and `tandem predict` reads: a directory holding
// everything needed to score records, nothing needed to train on.
//
//   MANIFEST.json   written last: {"format": "tandem-bundle", "format_version": 1, "step",
//                   "job_id", "config_hash", "checkpoint", ["base_step",] "tables": [{"name",
//                   "table", "dim", "rows", "path"}], "files": [{"path", "size", "crc32c" (8 hex
//                   digits)}], "manifest_crc32c"} (the CRC32C of the manifest without that field,
//                   as checkpoint manifests carry theirs)
//   config.yaml     the job config the model was trained under (model, tables, data, seed)
//   dense.ckpt      dense parameters, worker/dense_state.h's format without optimizer state
//   tables/<name>.emb  one per embedding table, all integers little-endian:
//                   8 bytes magic "TNDMEMB\0", u32 format version (1), u32 table, u32 dim,
//                   u32 zero, u64 rows, rows x u64 ids (ascending, each once),
//                   rows x dim x f32 embeddings (in id order); 32-byte header, so every array
//                   is 8-byte aligned for a reader that maps the file
//
// A delta bundle (`tandem export --since S`, for `tandem serve`) has "base_step": S and holds
// only the rows that changed after step S; its config and dense state are whole. `predict`
// refuses one: its absent rows are those of its base, not initial values.
//
// The bundle is built in a hidden sibling directory and renamed into place, so a crash never
// leaves a directory under the bundle's name that looks complete.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/job_config.h"
#include "common/status.h"
#include "worker/dense_state.h"
#include "worker/frozen_model.h"

namespace tandem::offline {

inline constexpr char kBundleManifest[] = "MANIFEST.json";
inline constexpr int kBundleFormatVersion = 1;

// Where a bundle came from, recorded in its manifest. A value type.
struct BundleOrigin {
  std::string job_id;      // 32 hex chars
  std::string checkpoint;  // the checkpoint directory it was exported from
  int64_t base_step = -1;  // a delta bundle: the step whose rows it updates; -1: a whole bundle
};

// Writes `model` as a bundle at `out_dir`. kAlreadyExists (nothing written) when `out_dir`
// exists and is not an empty directory; kResourceExhausted / kUnavailable for I/O errors, after
// which no bundle exists at `out_dir`.
Status WriteBundle(const worker::FrozenModel& model, const BundleOrigin& origin,
                   const std::string& out_dir);

// Reads a bundle, checking every file's size and CRC32C against the manifest before using it.
// kNotFound when `dir` holds no MANIFEST.json; kDataLoss naming the file for a damaged or
// missing file or manifest; kInvalidArgument for an unknown format version or a config or
// dense state that does not fit the model.
StatusOr<worker::FrozenModel> ReadBundle(const std::string& dir);
// ReadBundle for a delta bundle: its tables hold the changed rows only. kInvalidArgument for a
// whole bundle (ReadBundle refuses a delta bundle likewise).
StatusOr<worker::FrozenModel> ReadDeltaBundle(const std::string& dir);

// A bundle opened for serving: manifest, config and dense state read and checked (CRC32C); the
// table files only located and, with `verify_tables`, checked too (else their sizes), so that
// opening costs the same for any table size. Errors as ReadBundle's.
struct BundleHeader {
  std::string dir;
  int64_t step = -1;
  int64_t base_step = -1;  // a delta bundle's base step; -1 for a whole bundle
  config::JobConfig job;
  worker::DenseState dense;              // parameters only
  std::vector<std::string> table_files;  // by table id: the table file's path
};
StatusOr<BundleHeader> OpenBundle(const std::string& dir, bool verify_tables);

// A table file mapped read-only. The header is checked when it is opened; the arrays are paged
// in by the kernel as lookups touch them, so memory and opening time do not grow with the
// table, and the page cache is the row cache. Immutable, so safe for concurrent use.
class MappedTableFile {
 public:
  // kDataLoss naming `path` for a file that is not a table file of `dim`; kUnavailable for I/O.
  static StatusOr<std::unique_ptr<MappedTableFile>> Open(const std::string& path, uint32_t dim);
  ~MappedTableFile();
  MappedTableFile(const MappedTableFile&) = delete;
  MappedTableFile& operator=(const MappedTableFile&) = delete;

  uint32_t table() const { return table_; }
  uint32_t dim() const { return dim_; }
  uint64_t rows() const { return ids_.size(); }
  // Index of `id` (binary search over the ascending ids), or -1.
  int64_t Find(uint64_t id) const;
  const float* row(int64_t index) const { return values_ + static_cast<size_t>(index) * dim_; }
  // Checks that the ids ascend (a full read): what a lookup's binary search relies on.
  Status CheckOrder() const;

 private:
  MappedTableFile() = default;
  std::string path_;
  void* base_ = nullptr;
  size_t size_ = 0;
  uint32_t table_ = 0, dim_ = 0;
  std::span<const uint64_t> ids_;
  const float* values_ = nullptr;
};

// One table file's bytes, and back (kDataLoss naming `name` for anything malformed).
std::string EncodeTableFile(const worker::FrozenTable& table);
StatusOr<worker::FrozenTable> DecodeTableFile(std::string_view bytes, const std::string& name);

}  // namespace tandem::offline
