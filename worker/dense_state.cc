#include "worker/dense_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "common/crc32c.h"
#include "common/durable_file.h"
#include "common/errno_status.h"
#include "worker/trainer.h"

namespace tandem::worker {
namespace {

constexpr char kMagic[8] = {'T', 'N', 'D', 'M', 'D', 'N', 'S', '\0'};
constexpr size_t kCrcBytes = 4;

std::string_view OptimizerName(model::DenseOptimizerKind kind) {
  switch (kind) {
    case model::DenseOptimizerKind::kSgd:
      return "sgd";
    case model::DenseOptimizerKind::kAdam:
      return "adam";
    case model::DenseOptimizerKind::kAdamW:
      return "adamw";
    case model::DenseOptimizerKind::kAdagrad:
      return "adagrad";
  }
  return "unknown";
}

// Little-endian encoding, whatever the host's byte order.
class Writer {
 public:
  template <typename T>
  void Int(T v) {
    auto u = static_cast<std::make_unsigned_t<T>>(v);
    for (size_t i = 0; i < sizeof(T); ++i) out_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
  }
  void String(std::string_view s) {
    Int(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void Floats(const std::vector<float>& v) {
    Int(static_cast<uint64_t>(v.size()));
    if constexpr (std::endian::native == std::endian::little) {
      out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    } else {
      for (float f : v) Int(std::bit_cast<uint32_t>(f));
    }
  }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

// Bounds-checked reads; any failure is truncation (the CRC already matched, so only a writer
// bug or a crafted file gets here).
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  bool Int(T* v) {
    if (in_.size() < sizeof(T)) return false;
    std::make_unsigned_t<T> u = 0;
    for (size_t i = 0; i < sizeof(T); ++i)
      u |= static_cast<std::make_unsigned_t<T>>(static_cast<uint8_t>(in_[i])) << (8 * i);
    *v = static_cast<T>(u);
    in_.remove_prefix(sizeof(T));
    return true;
  }
  bool String(std::string* s) {
    uint32_t n = 0;
    if (!Int(&n) || in_.size() < n) return false;
    s->assign(in_.substr(0, n));
    in_.remove_prefix(n);
    return true;
  }
  bool Floats(std::vector<float>* v) {
    uint64_t n = 0;
    if (!Int(&n) || in_.size() / sizeof(float) < n) return false;
    v->resize(n);
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(v->data(), in_.data(), n * sizeof(float));
      in_.remove_prefix(n * sizeof(float));
    } else {
      for (auto& f : *v) {
        uint32_t bits = 0;
        Int(&bits);
        f = std::bit_cast<float>(bits);
      }
    }
    return true;
  }
  bool Tensor(DenseTensor* t) {
    uint32_t rank = 0;
    if (!String(&t->name) || !Int(&rank) || in_.size() / sizeof(int64_t) < rank) return false;
    t->shape.resize(rank);
    for (auto& d : t->shape)
      if (!Int(&d)) return false;
    return Floats(&t->values) && Floats(&t->slots);
  }
  bool empty() const { return in_.empty(); }

 private:
  std::string_view in_;
};

// Closes on every path out of ReadDenseState.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// WriteFileDurably, after creating the directory: after a crash `path` holds the old or the new
// bytes, never a torn file, and once this returns the new ones survive a power loss.
Status WriteAtomically(const std::string& path, std::string_view bytes) {
  namespace fs = std::filesystem;
  fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) parent = ".";
  std::error_code ec;
  const bool created = fs::create_directories(parent, ec);
  if (ec) return ErrnoToStatus(ec.value(), "create directory " + parent.string());
  // A new directory's own entry must reach the disk too (one level is what our callers create).
  if (created && parent.has_parent_path())
    TANDEM_RETURN_IF_ERROR(FsyncDir(parent.parent_path().string()));
  return WriteFileDurably(path, bytes);
}

}  // namespace

DenseState SnapshotDenseState(const Trainer& trainer, int64_t step) {
  DenseState s;
  s.step = step;
  s.optimizer = std::string(OptimizerName(trainer.optimizer().options().kind));
  const model::Model& model = trainer.model();
  const auto params = model.params();
  const auto state = trainer.optimizer().state();
  // The same walk as Trainer::DenseChecksum.
  const size_t n = params.size();
  const size_t arrays = n == 0 ? 0 : state.size() / n;
  for (const auto& info : model.param_info()) {
    DenseTensor t;
    t.name = info.name;
    t.shape = info.shape;
    const auto values = params.subspan(info.offset, info.size);
    t.values.assign(values.begin(), values.end());
    for (size_t a = 0; a < arrays; ++a) {
      const auto slot = state.subspan(a * n + info.offset, info.size);
      t.slots.insert(t.slots.end(), slot.begin(), slot.end());
    }
    s.tensors.push_back(std::move(t));
  }
  const auto scalars = state.subspan(arrays * n);
  s.optimizer_scalars.assign(scalars.begin(), scalars.end());
  if (const model::LossScaler* scaler = trainer.loss_scaler()) {
    const auto v = scaler->State();
    s.tensors.push_back(
        {kLossScaleTensor, {static_cast<int64_t>(v.size())}, {v.begin(), v.end()}, {}});
  }
  return s;
}

std::string EncodeDenseState(const DenseState& state) {
  Writer w;
  w.bytes().append(kMagic, sizeof(kMagic));
  w.Int(kDenseStateFormatVersion);
  w.Int(state.step);
  w.String(state.optimizer);
  w.Int(static_cast<uint32_t>(state.tensors.size()));
  for (const auto& t : state.tensors) {
    w.String(t.name);
    w.Int(static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) w.Int(d);
    w.Floats(t.values);
    w.Floats(t.slots);
  }
  w.Floats(state.optimizer_scalars);
  w.Int(Crc32c(w.bytes().data(), w.bytes().size()));
  return std::move(w.bytes());
}

StatusOr<DenseState> DecodeDenseState(std::string_view bytes, const std::string& name) {
  constexpr size_t kHeader = sizeof(kMagic) + sizeof(uint32_t);
  if (bytes.size() < kHeader || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    return Status::DataLoss(name + ": not a dense state file (bad magic)");
  if (bytes.size() < kHeader + kCrcBytes)
    return Status::DataLoss(name + ": truncated (" + std::to_string(bytes.size()) + " bytes)");
  const std::string_view body = bytes.substr(0, bytes.size() - kCrcBytes);
  uint32_t want = 0;
  Reader(bytes.substr(body.size())).Int(&want);
  if (Crc32c(body.data(), body.size()) != want)
    return Status::DataLoss(name + ": CRC32C mismatch (corrupt or truncated, " +
                            std::to_string(bytes.size()) + " bytes)");
  Reader r(body.substr(sizeof(kMagic)));
  uint32_t version = 0;
  r.Int(&version);
  if (version != kDenseStateFormatVersion)
    return Status::InvalidArgument(name + ": unknown dense state format version " +
                                   std::to_string(version) + " (this build reads " +
                                   std::to_string(kDenseStateFormatVersion) + ")");
  DenseState s;
  uint32_t count = 0;
  bool ok = r.Int(&s.step) && r.String(&s.optimizer) && r.Int(&count);
  for (uint32_t i = 0; ok && i < count; ++i) {
    DenseTensor t;
    ok = r.Tensor(&t);
    s.tensors.push_back(std::move(t));
  }
  ok = ok && r.Floats(&s.optimizer_scalars) && r.empty();
  if (!ok) return Status::DataLoss(name + ": malformed dense state (records do not fit the file)");
  return s;
}

Status WriteDenseStateFile(const std::string& path, const DenseState& state, DenseFileInfo* info) {
  const std::string bytes = EncodeDenseState(state);
  TANDEM_RETURN_IF_ERROR(WriteAtomically(path, bytes).WithContext("dense state " + path));
  if (info != nullptr) {
    info->size_bytes = bytes.size();
    info->crc32c = Crc32c(bytes.data(), bytes.size());
  }
  return Status::Ok();
}

Status WriteDenseState(const std::string& path, int64_t step, const Trainer& trainer) {
  return WriteDenseStateFile(path, SnapshotDenseState(trainer, step));
}

StatusOr<DenseState> ReadDenseState(const std::string& path) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) return ErrnoToStatus(errno, "open dense state " + path);
  std::string bytes;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, "read dense state " + path);
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
  }
  return DecodeDenseState(bytes, path);
}

ModelChecksum DenseStateChecksum(const DenseState& state) {
  ModelChecksum sum;
  for (const auto& t : state.tensors) sum.AddDenseTensor(t.name, t.shape, t.values, t.slots);
  const std::vector<int64_t> scalar_shape = {static_cast<int64_t>(state.optimizer_scalars.size())};
  sum.AddDenseTensor("optimizer.scalars", scalar_shape, state.optimizer_scalars, {});
  return sum;
}

namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

Status RestoreDenseState(const DenseState& state, Trainer* trainer) {
  model::Model& model = trainer->model();
  const auto& infos = model.param_info();
  const std::string want_opt(OptimizerName(trainer->optimizer().options().kind));
  if (state.optimizer != want_opt)
    return Status::InvalidArgument("dense state of step " + std::to_string(state.step) +
                                   " was trained with " + state.optimizer + ", the job uses " +
                                   want_opt);
  // fp16 training adds the loss scaler's state as one more tensor after the model's.
  model::LossScaler* scaler = trainer->mutable_loss_scaler();
  const size_t want_tensors = infos.size() + (scaler != nullptr ? 1 : 0);
  if (state.tensors.size() != want_tensors)
    return Status::InvalidArgument("dense state has " + std::to_string(state.tensors.size()) +
                                   " tensors, the model " + std::to_string(want_tensors) +
                                   (scaler != nullptr ? " (fp16: with loss_scale)" : ""));
  model::LossScaler loaded;
  if (scaler != nullptr) {
    const DenseTensor& t = state.tensors.back();
    if (t.name != kLossScaleTensor || t.values.size() != 2)
      return Status::InvalidArgument(
          "dense state has no loss_scale [2] tensor after the model's (" + t.name +
          ShapeString(t.shape) + ")");
    TANDEM_RETURN_IF_ERROR(loaded.Load(t.values[0], t.values[1]));
  }
  const size_t n = static_cast<size_t>(model.num_params());
  const size_t state_size = trainer->optimizer().state().size();
  const size_t arrays = n == 0 ? 0 : state_size / n;
  for (size_t i = 0; i < infos.size(); ++i) {
    const DenseTensor& t = state.tensors[i];
    const auto& info = infos[i];
    if (t.name != info.name || t.shape != info.shape ||
        t.values.size() != static_cast<size_t>(info.size) ||
        t.slots.size() != arrays * static_cast<size_t>(info.size))
      return Status::InvalidArgument(
          "dense state tensor " + std::to_string(i) + " is " + t.name + ShapeString(t.shape) +
          " with " + std::to_string(t.slots.size()) + " slot values; the model has " + info.name +
          ShapeString(info.shape));
  }
  if (arrays * n + state.optimizer_scalars.size() != state_size)
    return Status::InvalidArgument(
        "dense state has " + std::to_string(state.optimizer_scalars.size()) +
        " optimizer scalars, the optimizer " + std::to_string(state_size - arrays * n));
  std::vector<float> opt(state_size);
  for (size_t i = 0; i < infos.size(); ++i) {
    const DenseTensor& t = state.tensors[i];
    const size_t off = static_cast<size_t>(infos[i].offset), size = t.values.size();
    for (size_t a = 0; a < arrays; ++a)
      std::copy_n(t.slots.begin() + a * size, size, opt.begin() + a * n + off);
  }
  std::copy(state.optimizer_scalars.begin(), state.optimizer_scalars.end(),
            opt.begin() + arrays * n);
  TANDEM_RETURN_IF_ERROR(trainer->mutable_optimizer().LoadState(opt));
  if (scaler != nullptr) *scaler = loaded;
  auto params = model.params();
  for (size_t i = 0; i < infos.size(); ++i)
    std::copy(state.tensors[i].values.begin(), state.tensors[i].values.end(),
              params.begin() + infos[i].offset);
  return Status::Ok();
}

Status RestoreDenseParams(const DenseState& state, model::Model* model) {
  const auto& infos = model->param_info();
  size_t n = state.tensors.size();
  if (n == infos.size() + 1 && state.tensors.back().name == kLossScaleTensor) --n;
  if (n != infos.size())
    return Status::InvalidArgument("dense state has " + std::to_string(n) +
                                   " model tensors, the model " + std::to_string(infos.size()));
  for (size_t i = 0; i < n; ++i) {
    const DenseTensor& t = state.tensors[i];
    if (t.name != infos[i].name || t.shape != infos[i].shape ||
        t.values.size() != static_cast<size_t>(infos[i].size))
      return Status::InvalidArgument("dense state tensor " + std::to_string(i) + " is " + t.name +
                                     ShapeString(t.shape) + "; the model has " + infos[i].name +
                                     ShapeString(infos[i].shape));
  }
  auto params = model->params();
  for (size_t i = 0; i < n; ++i)
    std::copy(state.tensors[i].values.begin(), state.tensors[i].values.end(),
              params.begin() + infos[i].offset);
  return Status::Ok();
}

DenseState WithoutOptimizerState(DenseState state) {
  if (!state.tensors.empty() && state.tensors.back().name == kLossScaleTensor)
    state.tensors.pop_back();
  for (auto& t : state.tensors) t.slots.clear();
  state.optimizer_scalars.clear();
  return state;
}

}  // namespace tandem::worker
