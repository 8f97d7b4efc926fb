#include "offline/bundle.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/crc32c.h"
#include "common/durable_file.h"
#include "common/embedding/table_spec.h"
#include "common/errno_status.h"
#include "worker/dense_state.h"

namespace tandem::offline {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

static_assert(std::endian::native == std::endian::little, "table files are little-endian");

constexpr char kTableMagic[8] = {'T', 'N', 'D', 'M', 'E', 'M', 'B', '\0'};
constexpr uint32_t kTableFormatVersion = 1;
constexpr size_t kTableHeaderBytes = 32;
constexpr char kBundleFormat[] = "tandem-bundle";
constexpr char kConfigFile[] = "config.yaml";
constexpr char kDenseFile[] = "dense.ckpt";

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <typename T>
T Get(std::string_view bytes, size_t at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof(T));
  return v;
}

std::string Hex8(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

std::string Crc(std::string_view bytes) { return Hex8(Crc32c(bytes.data(), bytes.size())); }

StatusOr<std::string> ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    return fs::exists(path, ec) ? Status::Unavailable("cannot read " + path)
                                : Status::NotFound(path + ": no such file");
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Status::Unavailable("read error in " + path);
  return bytes;
}

// The manifest's text with its own CRC, computed over the dump without that field.
std::string SealManifest(json j) {
  j.erase("manifest_crc32c");
  const std::string body = j.dump(2);
  j["manifest_crc32c"] = Crc(body);
  return j.dump(2) + "\n";
}

}  // namespace

std::string EncodeTableFile(const worker::FrozenTable& table) {
  std::string out;
  out.reserve(kTableHeaderBytes + table.ids.size() * 8 + table.values.size() * 4);
  out.append(kTableMagic, sizeof(kTableMagic));
  Put<uint32_t>(&out, kTableFormatVersion);
  Put<uint32_t>(&out, table.table);
  Put<uint32_t>(&out, table.dim);
  Put<uint32_t>(&out, 0);
  Put<uint64_t>(&out, table.ids.size());
  out.append(reinterpret_cast<const char*>(table.ids.data()), table.ids.size() * sizeof(uint64_t));
  out.append(reinterpret_cast<const char*>(table.values.data()),
             table.values.size() * sizeof(float));
  return out;
}

StatusOr<worker::FrozenTable> DecodeTableFile(std::string_view bytes, const std::string& name) {
  if (bytes.size() < kTableHeaderBytes || std::memcmp(bytes.data(), kTableMagic, 8) != 0)
    return Status::DataLoss(name + ": not an embedding table file (bad magic)");
  if (Get<uint32_t>(bytes, 8) != kTableFormatVersion)
    return Status::DataLoss(name + ": unknown table format version " +
                            std::to_string(Get<uint32_t>(bytes, 8)));
  worker::FrozenTable t;
  t.table = Get<uint32_t>(bytes, 12);
  t.dim = Get<uint32_t>(bytes, 16);
  const uint64_t rows = Get<uint64_t>(bytes, 24);
  const uint64_t row_bytes = sizeof(uint64_t) + uint64_t{t.dim} * sizeof(float);
  if (t.dim == 0 || rows > bytes.size() / row_bytes ||
      kTableHeaderBytes + rows * row_bytes != bytes.size())
    return Status::DataLoss(name + ": " + std::to_string(rows) + " rows of dim " +
                            std::to_string(t.dim) + " do not fit its " +
                            std::to_string(bytes.size()) + " bytes");
  t.ids.resize(rows);
  t.values.resize(rows * t.dim);
  std::memcpy(t.ids.data(), bytes.data() + kTableHeaderBytes, rows * sizeof(uint64_t));
  std::memcpy(t.values.data(), bytes.data() + kTableHeaderBytes + rows * sizeof(uint64_t),
              t.values.size() * sizeof(float));
  for (size_t i = 1; i < t.ids.size(); ++i)
    if (t.ids[i - 1] >= t.ids[i])
      return Status::DataLoss(name + ": ids are not ascending at row " + std::to_string(i));
  return t;
}

namespace {

// Writes the bundle's files into `dir` (which exists and is empty), the manifest last.
Status WriteBundleFiles(const worker::FrozenModel& model, const BundleOrigin& origin,
                        const std::string& dir) {
  json files = json::array(), tables = json::array();
  auto add = [&](const std::string& path, const std::string& bytes) -> Status {
    TANDEM_RETURN_IF_ERROR(WriteFileDurably(dir + "/" + path, bytes));
    files.push_back({{"path", path}, {"size", bytes.size()}, {"crc32c", Crc(bytes)}});
    return Status::Ok();
  };
  TANDEM_RETURN_IF_ERROR(add(kConfigFile, model.job.ToYaml()));
  TANDEM_RETURN_IF_ERROR(add(kDenseFile, worker::EncodeDenseState(model.dense)));
  std::error_code ec;
  fs::create_directory(dir + "/tables", ec);
  if (ec) return Status::Unavailable("create " + dir + "/tables: " + ec.message());
  const auto specs = embedding::TableSpecsFromConfig(model.job);
  for (size_t i = 0; i < model.tables.size(); ++i) {
    const std::string path = "tables/" + specs[i].name + ".emb";
    TANDEM_RETURN_IF_ERROR(add(path, EncodeTableFile(model.tables[i])));
    tables.push_back({{"name", specs[i].name},
                      {"table", model.tables[i].table},
                      {"dim", model.tables[i].dim},
                      {"rows", model.tables[i].ids.size()},
                      {"path", path}});
  }
  const json manifest = {{"format", kBundleFormat},
                         {"format_version", kBundleFormatVersion},
                         {"step", model.step},
                         {"job_id", origin.job_id},
                         {"config_hash", model.job.ComputationHash()},
                         {"checkpoint", origin.checkpoint},
                         {"tables", std::move(tables)},
                         {"files", std::move(files)}};
  json sealed = manifest;
  if (origin.base_step >= 0) sealed["base_step"] = origin.base_step;
  return WriteFileDurably(dir + "/" + kBundleManifest, SealManifest(sealed));
}

}  // namespace

Status WriteBundle(const worker::FrozenModel& model, const BundleOrigin& origin,
                   const std::string& out_dir) {
  TANDEM_RETURN_IF_ERROR(worker::ValidateFrozenModel(model));
  std::error_code ec;
  fs::path out = fs::absolute(fs::path(out_dir)).lexically_normal();
  if (!out.has_filename()) out = out.parent_path();  // "dir/" names dir
  if (fs::exists(out, ec) && (!fs::is_directory(out, ec) || !fs::is_empty(out, ec)))
    return Status::AlreadyExists(out_dir + " exists and is not an empty directory");
  const fs::path parent = out.parent_path();
  const std::string name = out.filename().string();
  // A sibling on the same file system, so the final rename is atomic; hidden, so nothing
  // mistakes it for a bundle.
  const fs::path tmp = parent / ("." + name + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return Status::Unavailable("create " + tmp.string() + ": " + ec.message());
  Status s = WriteBundleFiles(model, origin, tmp.string());
  // rename(2) replaces an empty directory, and fails on a non-empty one: a bundle written
  // meanwhile by someone else is never replaced.
  if (s.ok() && ::rename(tmp.c_str(), out.c_str()) != 0) {
    const int err = errno;
    s = err == ENOTEMPTY || err == EEXIST
            ? Status::AlreadyExists(out_dir + " was filled while the bundle was written")
            : ErrnoToStatus(err, "rename " + tmp.string() + " to " + out_dir);
  }
  if (!s.ok()) {
    fs::remove_all(tmp, ec);
    return s;
  }
  return FsyncDir(parent.string());
}

namespace {

struct BundleFile {
  std::string path;
  uint64_t size = 0;
  std::string crc32c;
};

// The manifest, its self-CRC checked, and the list of files it names.
StatusOr<json> ReadManifest(const std::string& dir, std::vector<BundleFile>* files) {
  const std::string name = dir + "/" + kBundleManifest;
  auto text = ReadWhole(name);
  if (!text.ok()) {
    if (text.status().IsNotFound())
      return Status::NotFound(dir + " is not a bundle (no " + kBundleManifest + ")");
    return text.status();
  }
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("manifest_crc32c") ||
      !j["manifest_crc32c"].is_string())
    return Status::DataLoss(name + ": corrupt manifest (not a sealed JSON object)");
  if (SealManifest(j) != *text) return Status::DataLoss(name + ": corrupt manifest (CRC32C)");
  if (j.value("format", "") != kBundleFormat)
    return Status::DataLoss(name + ": not a tandem bundle manifest");
  if (j.value("format_version", 0) != kBundleFormatVersion)
    return Status::InvalidArgument(
        name + ": bundle format version " + std::to_string(j.value("format_version", 0)) +
        " (this build reads " + std::to_string(kBundleFormatVersion) + ")");
  try {
    for (const auto& f : j.at("files"))
      files->push_back(
          {f.at("path").get<std::string>(), f.at("size").get<uint64_t>(), f.at("crc32c")});
  } catch (const json::exception& e) {
    return Status::DataLoss(name + ": malformed file list (" + e.what() + ")");
  }
  return j;
}

// A file of the bundle, read once and checked against the manifest before use.
StatusOr<std::string> ReadChecked(const std::string& dir, const BundleFile& f) {
  if (f.path.empty() || f.path[0] == '/' || f.path.find("..") != std::string::npos)
    return Status::DataLoss(std::string(kBundleManifest) + " names an unsafe path " + f.path);
  auto bytes = ReadWhole(dir + "/" + f.path);
  if (!bytes.ok())
    return bytes.status().IsNotFound() ? Status::DataLoss(dir + "/" + f.path + " is missing")
                                       : bytes.status();
  if (bytes->size() != f.size)
    return Status::DataLoss(dir + "/" + f.path + ": " + std::to_string(bytes->size()) +
                            " bytes, the manifest says " + std::to_string(f.size));
  if (Crc(*bytes) != f.crc32c)
    return Status::DataLoss(dir + "/" + f.path + ": CRC32C mismatch (corrupt)");
  return bytes;
}

}  // namespace

namespace {

StatusOr<worker::FrozenModel> ReadBundleFiles(const std::string& dir, bool delta) {
  std::vector<BundleFile> files;
  TANDEM_ASSIGN_OR_RETURN(json manifest, ReadManifest(dir, &files));
  if (delta && !manifest.contains("base_step"))
    return Status::InvalidArgument(dir + " is a whole bundle, not a delta bundle");
  // Every file is checked before any is used: a damaged bundle is refused whole.
  std::vector<std::string> contents;
  for (const auto& f : files) {
    TANDEM_ASSIGN_OR_RETURN(std::string bytes, ReadChecked(dir, f));
    contents.push_back(std::move(bytes));
  }
  auto content_of = [&](const std::string& path) -> const std::string* {
    for (size_t i = 0; i < files.size(); ++i)
      if (files[i].path == path) return &contents[i];
    return nullptr;
  };
  if (!delta && manifest.contains("base_step"))
    return Status::InvalidArgument(dir + " is a delta bundle (the rows changed after step " +
                                   manifest["base_step"].dump() +
                                   "): serve it over its base with tandem serve");
  worker::FrozenModel model;
  model.step = manifest.value("step", int64_t{-1});
  const std::string* config = content_of(kConfigFile);
  const std::string* dense = content_of(kDenseFile);
  if (config == nullptr || dense == nullptr)
    return Status::DataLoss(dir + ": the manifest lists no " + kConfigFile + " or " + kDenseFile);
  TANDEM_ASSIGN_OR_RETURN(model.job, config::ParseJobConfig(*config, dir + "/" + kConfigFile, {}));
  TANDEM_ASSIGN_OR_RETURN(model.dense, worker::DecodeDenseState(*dense, dir + "/" + kDenseFile));
  for (const auto& spec : embedding::TableSpecsFromConfig(model.job)) {
    const std::string path = "tables/" + spec.name + ".emb";
    const std::string* bytes = content_of(path);
    if (bytes == nullptr) return Status::DataLoss(dir + ": the manifest lists no " + path);
    TANDEM_ASSIGN_OR_RETURN(worker::FrozenTable t, DecodeTableFile(*bytes, dir + "/" + path));
    model.tables.push_back(std::move(t));
  }
  TANDEM_RETURN_IF_ERROR(worker::ValidateFrozenModel(model).WithContext(dir));
  return model;
}

}  // namespace

StatusOr<worker::FrozenModel> ReadBundle(const std::string& dir) {
  return ReadBundleFiles(dir, /*delta=*/false);
}

StatusOr<worker::FrozenModel> ReadDeltaBundle(const std::string& dir) {
  return ReadBundleFiles(dir, /*delta=*/true);
}

StatusOr<BundleHeader> OpenBundle(const std::string& dir, bool verify_tables) {
  std::vector<BundleFile> files;
  TANDEM_ASSIGN_OR_RETURN(json manifest, ReadManifest(dir, &files));
  BundleHeader h;
  h.dir = dir;
  const BundleFile* config = nullptr;
  const BundleFile* dense = nullptr;
  for (const auto& f : files) {
    if (f.path == kConfigFile) config = &f;
    if (f.path == kDenseFile) dense = &f;
  }
  if (config == nullptr || dense == nullptr)
    return Status::DataLoss(dir + ": the manifest lists no " + kConfigFile + " or " + kDenseFile);
  try {
    h.step = manifest.at("step").get<int64_t>();
    h.base_step = manifest.value("base_step", int64_t{-1});
  } catch (const json::exception& e) {
    return Status::DataLoss(dir + "/" + kBundleManifest + ": malformed step (" + e.what() + ")");
  }
  TANDEM_ASSIGN_OR_RETURN(std::string config_text, ReadChecked(dir, *config));
  TANDEM_ASSIGN_OR_RETURN(h.job, config::ParseJobConfig(config_text, dir + "/" + kConfigFile, {}));
  TANDEM_ASSIGN_OR_RETURN(std::string dense_bytes, ReadChecked(dir, *dense));
  TANDEM_ASSIGN_OR_RETURN(worker::DenseState state,
                          worker::DecodeDenseState(dense_bytes, dir + "/" + kDenseFile));
  h.dense = worker::WithoutOptimizerState(std::move(state));
  for (const auto& spec : embedding::TableSpecsFromConfig(h.job)) {
    const std::string path = "tables/" + spec.name + ".emb";
    const BundleFile* file = nullptr;
    for (const auto& f : files)
      if (f.path == path) file = &f;
    if (file == nullptr) return Status::DataLoss(dir + ": the manifest lists no " + path);
    if (verify_tables) {
      TANDEM_RETURN_IF_ERROR(ReadChecked(dir, *file).status());
    } else {
      std::error_code ec;
      const uint64_t size = fs::file_size(dir + "/" + path, ec);
      if (ec) return Status::DataLoss(dir + "/" + path + " is missing");
      if (size != file->size)
        return Status::DataLoss(dir + "/" + path + ": " + std::to_string(size) +
                                " bytes, the manifest says " + std::to_string(file->size));
    }
    h.table_files.push_back(dir + "/" + path);
  }
  return h;
}

StatusOr<std::unique_ptr<MappedTableFile>> MappedTableFile::Open(const std::string& path,
                                                                 uint32_t dim) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? Status::DataLoss(path + " is missing")
                           : ErrnoToStatus(errno, "open " + path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoToStatus(err, "stat " + path);
  }
  std::unique_ptr<MappedTableFile> t(new MappedTableFile());
  t->path_ = path;
  t->size_ = static_cast<size_t>(st.st_size);
  if (t->size_ < kTableHeaderBytes) {
    ::close(fd);
    return Status::DataLoss(path + ": not an embedding table file (too short)");
  }
  void* base = ::mmap(nullptr, t->size_, PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file
  if (base == MAP_FAILED) return ErrnoToStatus(err, "mmap " + path);
  t->base_ = base;
  const std::string_view bytes(static_cast<const char*>(base), t->size_);
  if (std::memcmp(bytes.data(), kTableMagic, 8) != 0)
    return Status::DataLoss(path + ": not an embedding table file (bad magic)");
  if (Get<uint32_t>(bytes, 8) != kTableFormatVersion)
    return Status::DataLoss(path + ": unknown table format version " +
                            std::to_string(Get<uint32_t>(bytes, 8)));
  t->table_ = Get<uint32_t>(bytes, 12);
  t->dim_ = Get<uint32_t>(bytes, 16);
  const uint64_t rows = Get<uint64_t>(bytes, 24);
  const uint64_t row_bytes = sizeof(uint64_t) + uint64_t{t->dim_} * sizeof(float);
  if (t->dim_ != dim)
    return Status::DataLoss(path + ": rows of dim " + std::to_string(t->dim_) +
                            ", the config says " + std::to_string(dim));
  if (rows > t->size_ / row_bytes || kTableHeaderBytes + rows * row_bytes != t->size_)
    return Status::DataLoss(path + ": " + std::to_string(rows) + " rows of dim " +
                            std::to_string(t->dim_) + " do not fit its " +
                            std::to_string(t->size_) + " bytes");
  const char* ids = bytes.data() + kTableHeaderBytes;
  t->ids_ = {reinterpret_cast<const uint64_t*>(ids), rows};
  t->values_ = reinterpret_cast<const float*>(ids + rows * sizeof(uint64_t));
  return t;
}

MappedTableFile::~MappedTableFile() {
  if (base_ != nullptr) ::munmap(base_, size_);
}

int64_t MappedTableFile::Find(uint64_t id) const {
  const auto it = std::lower_bound(ids_.begin(), ids_.end(), id);
  return it != ids_.end() && *it == id ? it - ids_.begin() : -1;
}

Status MappedTableFile::CheckOrder() const {
  for (size_t i = 1; i < ids_.size(); ++i)
    if (ids_[i - 1] >= ids_[i])
      return Status::DataLoss(path_ + ": ids are not ascending at row " + std::to_string(i));
  return Status::Ok();
}

}  // namespace tandem::offline
