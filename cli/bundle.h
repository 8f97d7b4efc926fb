// The serving bundle `tandem export` writes and `tandem predict` reads: a directory holding
// everything needed to score records, nothing needed to train on.
//
//   MANIFEST.json   written last: {"format": "tandem-bundle", "format_version": 1, "step",
//                   "job_id", "config_hash", "checkpoint", "tables": [{"name", "table", "dim",
//                   "rows", "path"}], "files": [{"path", "size", "crc32c" (8 hex digits)}],
//                   "manifest_crc32c"} (the CRC32C of the manifest without that field, as
//                   checkpoint manifests carry theirs)
//   config.yaml     the job config the model was trained under (model, tables, data, seed)
//   dense.ckpt      dense parameters, worker/dense_state.h's format without optimizer state
//   tables/<name>.emb  one per embedding table, all integers little-endian:
//                   8 bytes magic "TNDMEMB\0", u32 format version (1), u32 table, u32 dim,
//                   u32 zero, u64 rows, rows x u64 ids (ascending, each once),
//                   rows x dim x f32 embeddings (in id order); 32-byte header, so every array
//                   is 8-byte aligned for a reader that maps the file
//
// The bundle is built in a hidden sibling directory and renamed into place, so a crash never
// leaves a directory under the bundle's name that looks complete.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "worker/frozen_model.h"

namespace tandem::cli {

inline constexpr char kBundleManifest[] = "MANIFEST.json";
inline constexpr int kBundleFormatVersion = 1;

// Where a bundle came from, recorded in its manifest. A value type.
struct BundleOrigin {
  std::string job_id;      // 32 hex chars
  std::string checkpoint;  // the checkpoint directory it was exported from
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

// One table file's bytes, and back (kDataLoss naming `name` for anything malformed).
std::string EncodeTableFile(const worker::FrozenTable& table);
StatusOr<worker::FrozenTable> DecodeTableFile(std::string_view bytes, const std::string& name);

}  // namespace tandem::cli
