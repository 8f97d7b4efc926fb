// The dense state of one replica as a file (`output.dir/model/dense.ckpt`, and the dense file
// of a checkpoint, PROTOCOLS §7): every dense tensor with its optimizer slots and the
// optimizer's scalar state, exactly what Trainer::DenseChecksum visits, so the dense part of
// model_checksum (DESIGN §12) can be computed from the file alone.
//
// Format (every integer little-endian, every float its IEEE-754 bits):
//   8 bytes magic "TNDMDNS\0", u32 format version (1), i64 step,
//   u32 optimizer name length, name ("sgd" | "adam" | "adamw" | "adagrad"),
//   u32 tensor count, per tensor in model order:
//     u32 name length, name, u32 rank, rank x i64 dims, u64 value count, f32 values,
//     u64 slot count, f32 slots (the optimizer's per-parameter arrays for this tensor, one
//     array after the other: adam m then v),
//   u64 scalar count, f32 optimizer scalars (adam: beta1^t, beta2^t),
//   u32 CRC32C of every byte before it.
// The magic, the version after it and the trailing CRC32C frame every future version too.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/model_checksum.h"
#include "common/status.h"

namespace tandem::model {
class Model;
}

namespace tandem::worker {

class Trainer;

inline constexpr uint32_t kDenseStateFormatVersion = 1;

struct DenseTensor {
  std::string name;            // "bottom_mlp.0.weight" (model::ParamInfo::name)
  std::vector<int64_t> shape;  // {out, in} or {out}
  std::vector<float> values;   // product(shape) floats
  std::vector<float> slots;    // arrays x values.size() floats (0 arrays: none)
};

// A copy of one replica's dense state. A value type: copy freely.
struct DenseState {
  int64_t step = -1;                 // the last step trained into it
  std::string optimizer;             // "sgd" | "adam" | "adamw" | "adagrad"
  std::vector<DenseTensor> tensors;  // model order
  std::vector<float> optimizer_scalars;
};

// Size and CRC32C of a written file, as a checkpoint manifest records them.
struct DenseFileInfo {
  uint64_t size_bytes = 0;
  uint32_t crc32c = 0;  // of the whole file, trailer included
};

// Copies the trainer's dense state in memory (cheap next to a step), e.g. to write it from
// another thread while training goes on.
DenseState SnapshotDenseState(const Trainer& trainer, int64_t step);

// The file's bytes, and back. Decode: kDataLoss (message naming `name`) for a bad magic, a CRC
// mismatch, truncation or trailing bytes; kInvalidArgument for an unknown format version.
std::string EncodeDenseState(const DenseState& state);
StatusOr<DenseState> DecodeDenseState(std::string_view bytes, const std::string& name);

// Writes `state` durably: `path`.tmp, fsync, rename over `path`, fsync of the directory
// (created when missing). `info` (may be null) receives the file's size and CRC32C. Errors from
// errno (kResourceExhausted for ENOSPC, ...), naming the file.
Status WriteDenseStateFile(const std::string& path, const DenseState& state,
                           DenseFileInfo* info = nullptr);
// SnapshotDenseState + WriteDenseStateFile.
Status WriteDenseState(const std::string& path, int64_t step, const Trainer& trainer);

// Reads and checks a file. kNotFound when it does not exist; otherwise as DecodeDenseState.
StatusOr<DenseState> ReadDenseState(const std::string& path);

// The dense part of model_checksum; equals Trainer::DenseChecksum() of the trainer it came
// from, bit for bit.
ModelChecksum DenseStateChecksum(const DenseState& state);

// Loads `state` into `trainer` (parameters, optimizer slots and scalars). kInvalidArgument,
// changing nothing, when the optimizer, tensor names, shapes or slot counts do not match the
// trainer's model.
Status RestoreDenseState(const DenseState& state, Trainer* trainer);

// The parameters of `state` alone (a serving bundle holds no optimizer state; slots, scalars and
// a trailing loss_scale tensor are ignored). kInvalidArgument, changing nothing, when the tensor
// names or shapes do not match `model`.
Status RestoreDenseParams(const DenseState& state, model::Model* model);

// `state` without what only training needs: optimizer slots and scalars, the fp16 loss scaler.
DenseState WithoutOptimizerState(DenseState state);

}  // namespace tandem::worker
