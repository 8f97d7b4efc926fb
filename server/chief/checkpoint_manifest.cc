#include "server/chief/checkpoint_manifest.h"

#include <fcntl.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <type_traits>

#include "common/crc32c.h"
#include "common/durable_file.h"
#include "common/errno_status.h"

namespace tandem::chief {
namespace fs = std::filesystem;
namespace {

constexpr char kLatest[] = "LATEST";
constexpr char kLatestDurable[] = "LATEST_DURABLE";
constexpr char kManifestName[] = "MANIFEST";
constexpr char kTmpSuffix[] = ".tmp";
constexpr size_t kReadChunk = size_t{1} << 20;

// ---------------------------------------------------------------------------------------------
// Files.

// kNotFound when `path` does not exist, kUnavailable for other I/O errors.
Status ReadWholeFile(const std::string& path, std::string* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(path + ": missing");
    return ErrnoToStatus(errno, "open " + path);
  }
  out->clear();
  char buf[64 << 10];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return ErrnoToStatus(err, "read " + path);
    }
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return Status::Ok();
}

// CRC32C of a whole file, read in chunks so that large files need no large buffer.
Status FileCrc32c(const std::string& path, uint32_t* crc) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open " + path);
  std::vector<char> buf(kReadChunk);
  uint32_t c = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return ErrnoToStatus(err, "read " + path);
    }
    if (n == 0) break;
    c = Crc32cExtend(c, buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  *crc = c;
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Names

std::string Hex8(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

bool ParseHex8(const std::string& s, uint32_t* v) {
  if (s.size() != 8) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *v, 16);
  return ec == std::errc() && end == s.data() + s.size();
}

// The step of a "ckpt-<12 digits>" directory name, or -1.
int64_t StepOfDirName(const std::string& name) {
  constexpr std::string_view kPrefix = "ckpt-";
  if (name.size() != kPrefix.size() + 12 || !name.starts_with(kPrefix)) return -1;
  int64_t step = 0;
  const char* begin = name.data() + kPrefix.size();
  auto [end, ec] = std::from_chars(begin, name.data() + name.size(), step);
  if (ec != std::errc() || end != name.data() + name.size() || *begin == '-') return -1;
  return step;
}

std::string ManifestRelPath(int64_t step) { return CheckpointDirName(step) + "/" + kManifestName; }

// Relative, without "." / ".." components or empty ones: the chief reads these paths and never
// follows one outside checkpoint.dir.
bool IsSafeRelativePath(const std::string& path) {
  if (path.empty() || path.front() == '/') return false;
  size_t start = 0;
  for (;;) {
    size_t slash = path.find('/', start);
    std::string_view part(path.data() + start,
                          (slash == std::string::npos ? path.size() : slash) - start);
    if (part.empty() || part == "." || part == "..") return false;
    if (slash == std::string::npos) return true;
    start = slash + 1;
  }
}

// Steps of every ckpt-* directory, newest first; `committed_only` keeps those with a MANIFEST.
// An absent checkpoint_dir has none.
StatusOr<std::vector<int64_t>> ListSteps(const std::string& dir, bool committed_only) {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return steps;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    int64_t step = StepOfDirName(it->path().filename().string());
    if (step < 0 || !it->is_directory(ec)) continue;
    if (committed_only && !fs::exists(it->path() / kManifestName, ec)) continue;
    steps.push_back(step);
  }
  if (ec) return Status::Unavailable("list " + dir + ": " + ec.message());
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

// ---------------------------------------------------------------------------------------------
// JSON

// Every dump goes through here, so that the self-CRC is over the same bytes on both sides.
std::string Dump(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::json PartToJson(const ManifestPart& p) {
  nlohmann::json files = nlohmann::json::array();
  for (const ManifestFile& f : p.files) {
    files.push_back({{"path", f.path}, {"size", f.size}, {"crc32c", Hex8(f.crc32c)}});
  }
  return {{"name", p.name}, {"files", std::move(files)}, {"detail", p.detail}};
}

// Reads typed fields of one JSON object, naming the file and the field in errors.
class FieldReader {
 public:
  FieldReader(const nlohmann::json& j, std::string where) : j_(j), where_(std::move(where)) {}

  template <typename T>
  Status Get(const char* key, T* out) const {
    auto it = j_.find(key);
    if (it == j_.end()) return Bad(key, "is missing");
    if constexpr (std::is_same_v<T, std::string>) {
      if (!it->is_string()) return Bad(key, "is not a string");
      *out = it->template get<std::string>();
    } else if constexpr (std::is_unsigned_v<T>) {
      if (!it->is_number_unsigned()) return Bad(key, "is not an unsigned integer");
      uint64_t v = it->template get<uint64_t>();
      if (v > std::numeric_limits<T>::max()) return Bad(key, "is out of range");
      *out = static_cast<T>(v);
    } else {
      if (!it->is_number_integer()) return Bad(key, "is not an integer");
      if (it->is_number_unsigned() &&
          it->template get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()})
        return Bad(key, "is out of range");
      int64_t v = it->template get<int64_t>();
      if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max())
        return Bad(key, "is out of range");
      *out = static_cast<T>(v);
    }
    return Status::Ok();
  }

  Status Bad(const std::string& key, const std::string& what) const {
    return Status::DataLoss(where_ + ": '" + key + "' " + what);
  }

 private:
  const nlohmann::json& j_;
  const std::string where_;
};

Status FileFromJson(const nlohmann::json& j, const std::string& where, ManifestFile* f) {
  if (!j.is_object()) return Status::DataLoss(where + ": not an object");
  FieldReader r(j, where);
  std::string crc;
  TANDEM_RETURN_IF_ERROR(r.Get("path", &f->path));
  TANDEM_RETURN_IF_ERROR(r.Get("size", &f->size));
  TANDEM_RETURN_IF_ERROR(r.Get("crc32c", &crc));
  if (!ParseHex8(crc, &f->crc32c)) return r.Bad("crc32c", "is not 8 hex digits");
  if (!IsSafeRelativePath(f->path)) return r.Bad("path", "is not a relative path inside the dir");
  return Status::Ok();
}

Status PartFromJson(const nlohmann::json& j, const std::string& where, ManifestPart* p) {
  if (!j.is_object()) return Status::DataLoss(where + ": not an object");
  FieldReader r(j, where);
  TANDEM_RETURN_IF_ERROR(r.Get("name", &p->name));
  auto files = j.find("files");
  if (files == j.end() || !files->is_array()) return r.Bad("files", "is not an array");
  for (size_t i = 0; i < files->size(); ++i) {
    ManifestFile f;
    TANDEM_RETURN_IF_ERROR(
        FileFromJson((*files)[i], where + ".files[" + std::to_string(i) + "]", &f));
    p->files.push_back(std::move(f));
  }
  auto detail = j.find("detail");
  if (detail == j.end()) return r.Bad("detail", "is missing");
  p->detail = *detail;
  return Status::Ok();
}

// REQUIRES: `j` is an object whose format version is ours and whose self-CRC matched.
Status ManifestFromJson(const nlohmann::json& j, const std::string& name, Manifest* m) {
  FieldReader r(j, name);
  m->format_version = kManifestFormatVersion;
  TANDEM_RETURN_IF_ERROR(r.Get("step", &m->step));
  if (m->step < 0) return r.Bad("step", "is negative");
  TANDEM_RETURN_IF_ERROR(r.Get("job_id", &m->job_id));
  TANDEM_RETURN_IF_ERROR(r.Get("timeline", &m->timeline));
  TANDEM_RETURN_IF_ERROR(r.Get("term", &m->term));
  TANDEM_RETURN_IF_ERROR(r.Get("generation", &m->generation));
  TANDEM_RETURN_IF_ERROR(r.Get("num_ps", &m->num_ps));
  TANDEM_RETURN_IF_ERROR(r.Get("num_workers", &m->num_workers));
  TANDEM_RETURN_IF_ERROR(r.Get("slots", &m->slots));
  TANDEM_RETURN_IF_ERROR(r.Get("slot_hash", &m->slot_hash));
  TANDEM_RETURN_IF_ERROR(r.Get("config_hash", &m->config_hash));
  TANDEM_RETURN_IF_ERROR(r.Get("config_yaml", &m->config_yaml));
  TANDEM_RETURN_IF_ERROR(r.Get("determinism_class", &m->determinism_class));
  TANDEM_RETURN_IF_ERROR(r.Get("records_consumed", &m->records_consumed));
  TANDEM_RETURN_IF_ERROR(r.Get("seed", &m->seed));
  auto parts = j.find("parts");
  if (parts == j.end() || !parts->is_array()) return r.Bad("parts", "is not an array");
  m->parts.clear();
  for (size_t i = 0; i < parts->size(); ++i) {
    ManifestPart p;
    TANDEM_RETURN_IF_ERROR(
        PartFromJson((*parts)[i], name + ": parts[" + std::to_string(i) + "]", &p));
    m->parts.push_back(std::move(p));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// LATEST / LATEST_DURABLE

struct Pointer {
  std::string manifest;  // relative to checkpoint.dir
  uint32_t crc32c = 0;
  int64_t step = -1;
};

std::string EncodePointer(const Pointer& p) {
  nlohmann::json j = {{"manifest", p.manifest}, {"crc32c", Hex8(p.crc32c)}, {"step", p.step}};
  return Dump(j) + "\n";
}

// kNotFound when the file is absent, kDataLoss naming it when malformed.
StatusOr<Pointer> ReadPointer(const std::string& path) {
  std::string text;
  TANDEM_RETURN_IF_ERROR(ReadWholeFile(path, &text));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::DataLoss(path + ": corrupt (not a JSON object)");
  Pointer p;
  FieldReader r(j, path);
  std::string crc;
  TANDEM_RETURN_IF_ERROR(r.Get("manifest", &p.manifest));
  TANDEM_RETURN_IF_ERROR(r.Get("crc32c", &crc));
  TANDEM_RETURN_IF_ERROR(r.Get("step", &p.step));
  if (!ParseHex8(crc, &p.crc32c)) return r.Bad("crc32c", "is not 8 hex digits");
  if (p.step < 0 || p.manifest != ManifestRelPath(p.step))
    return r.Bad("manifest", "does not name ckpt-<step>/MANIFEST of its step");
  return p;
}

// Reads and decodes ckpt-<step>/MANIFEST; `expected_crc` (when given) is checked against its
// bytes first. kNotFound when absent; kDataLoss naming the file (or `pointer`) when bad.
StatusOr<Manifest> ReadManifest(const std::string& dir, int64_t step, const uint32_t* expected_crc,
                                const std::string& pointer) {
  const std::string path = dir + "/" + ManifestRelPath(step);
  std::string text;
  Status s = ReadWholeFile(path, &text);
  if (s.IsNotFound() && !pointer.empty())
    return Status::DataLoss(pointer + " names " + path + ", which is missing");
  TANDEM_RETURN_IF_ERROR(s);
  if (expected_crc != nullptr) {
    uint32_t crc = Crc32c(text.data(), text.size());
    if (crc != *expected_crc) {
      return Status::DataLoss(pointer + ": records CRC32C " + Hex8(*expected_crc) + ", but " +
                              path + " has " + Hex8(crc));
    }
  }
  TANDEM_ASSIGN_OR_RETURN(Manifest m, DecodeManifest(text, path));
  if (m.step != step) {
    return Status::DataLoss(path + ": holds step " + std::to_string(m.step) + ", not " +
                            std::to_string(step));
  }
  return m;
}

// The step a pointer names without checking its manifest, or -1 when absent or unreadable.
int64_t PointerStep(const std::string& path) {
  StatusOr<Pointer> p = ReadPointer(path);
  return p.ok() ? p->step : -1;
}

// ---------------------------------------------------------------------------------------------
// Config comparison

// Dotted leaf paths of a YAML document in document order, each with its value as text.
using Flat = std::vector<std::pair<std::string, std::string>>;

std::string ScalarText(const YAML::Node& n) {
  if (n.IsNull()) return "~";
  if (n.IsScalar()) return n.Scalar().empty() ? "\"\"" : n.Scalar();
  std::string out = "[";
  for (size_t i = 0; i < n.size(); ++i) out += (i ? ", " : "") + ScalarText(n[i]);
  return out + "]";
}

void Flatten(const YAML::Node& n, const std::string& prefix, Flat* out) {
  if (!n.IsMap()) {
    out->emplace_back(prefix, ScalarText(n));
    return;
  }
  for (const auto& kv : n) {
    std::string key = kv.first.Scalar();
    Flatten(kv.second, prefix.empty() ? key : prefix + "." + key, out);
  }
}

bool IsComputationKey(const std::string& path) {
  if (path == "ps.wire_precision") return true;  // rounds every pulled row and pushed gradient
  for (std::string_view s : {"model.", "data.", "train.", "tables."}) {
    if (path.starts_with(s)) return path != "train.steps";
  }
  return false;
}

// The computation keys of one config's ToYaml(): `plain` holds model/data/train keys in order,
// `defaults` tables.default.<key>, `overrides` tables.<name>.<key> (ToYaml writes only those
// that differ from the default).
struct ComputationKeys {
  Flat plain;
  Flat defaults;  // key relative to tables.default
  std::map<std::string, std::map<std::string, std::string>> overrides;  // name -> key -> value
};

ComputationKeys Collect(const config::JobConfig& c) {
  Flat flat;
  Flatten(YAML::Load(c.ToYaml()), "", &flat);
  ComputationKeys keys;
  for (auto& [path, value] : flat) {
    if (!IsComputationKey(path)) continue;
    if (!path.starts_with("tables.")) {
      keys.plain.emplace_back(path, value);
      continue;
    }
    size_t dot = path.find('.', 7);
    if (dot == std::string::npos) continue;  // an empty table section
    std::string name = path.substr(7, dot - 7), key = path.substr(dot + 1);
    if (name == "default") {
      keys.defaults.emplace_back(key, value);
    } else {
      keys.overrides[name][key] = value;
    }
  }
  return keys;
}

std::string Lookup(const Flat& flat, const std::string& key) {
  for (const auto& [k, v] : flat) {
    if (k == key) return v;
  }
  return "(absent)";
}

// Keys of `a` then those only in `b`, keeping each one's order.
std::vector<std::string> UnionKeys(const Flat& a, const Flat& b) {
  std::vector<std::string> keys;
  for (const Flat* f : {&a, &b}) {
    for (const auto& [k, v] : *f) {
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    }
  }
  return keys;
}

// "C2" before "C10".
bool TableNameLess(const std::string& x, const std::string& y) {
  return x.size() != y.size() ? x.size() < y.size() : x < y;
}

void DiffTables(const config::JobConfig& ca, const ComputationKeys& a, const config::JobConfig& cb,
                const ComputationKeys& b, std::vector<std::string>* out) {
  std::vector<std::string> names;
  for (const auto* tables : {&ca.tables, &cb.tables}) {
    for (const auto& [name, t] : *tables) {
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end(), TableNameLess);
  std::vector<std::string> per_table;
  for (const std::string& key : UnionKeys(a.defaults, b.defaults)) {
    const std::string da = Lookup(a.defaults, key), db = Lookup(b.defaults, key);
    // The default matters only through a table that follows it on both sides (or when the
    // configs list no tables at all).
    bool default_used = ca.tables.empty() && cb.tables.empty();
    for (const std::string& name : names) {
      if (!ca.tables.count(name) || !cb.tables.count(name)) continue;
      auto override_of = [&](const ComputationKeys& k) -> const std::string* {
        auto t = k.overrides.find(name);
        if (t == k.overrides.end()) return nullptr;
        auto v = t->second.find(key);
        return v == t->second.end() ? nullptr : &v->second;
      };
      const std::string* oa = override_of(a);
      const std::string* ob = override_of(b);
      if (!oa && !ob) {
        default_used = true;
        continue;
      }
      const std::string& va = oa ? *oa : da;
      const std::string& vb = ob ? *ob : db;
      if (va != vb) per_table.push_back("tables." + name + "." + key + ": " + va + " -> " + vb);
    }
    if (da != db && default_used) {
      out->push_back("tables.default." + key + ": " + da + " -> " + db);
    }
  }
  for (const std::string& name : names) {
    bool in_a = ca.tables.count(name) > 0, in_b = cb.tables.count(name) > 0;
    if (in_a != in_b) {
      out->push_back("tables." + name + ": " + (in_a ? "present" : "(absent)") + " -> " +
                     (in_b ? "present" : "(absent)"));
    }
  }
  out->insert(out->end(), per_table.begin(), per_table.end());
}

}  // namespace

// ---------------------------------------------------------------------------------------------

int64_t RecordsConsumedAfter(int64_t step, uint32_t num_workers, int64_t batch_size) {
  return (step + 1) * static_cast<int64_t>(num_workers) * batch_size;
}

std::string EncodeManifest(const Manifest& m) {
  nlohmann::json parts = nlohmann::json::array();
  for (const ManifestPart& p : m.parts) parts.push_back(PartToJson(p));
  nlohmann::json j = {{"format_version", m.format_version},
                      {"step", m.step},
                      {"job_id", m.job_id},
                      {"timeline", m.timeline},
                      {"term", m.term},
                      {"generation", m.generation},
                      {"num_ps", m.num_ps},
                      {"num_workers", m.num_workers},
                      {"slots", m.slots},
                      {"slot_hash", m.slot_hash},
                      {"config_hash", m.config_hash},
                      {"config_yaml", m.config_yaml},
                      {"determinism_class", m.determinism_class},
                      {"records_consumed", m.records_consumed},
                      {"seed", m.seed},
                      {"parts", std::move(parts)}};
  const std::string body = Dump(j);
  j["manifest_crc32c"] = Hex8(Crc32c(body.data(), body.size()));
  return Dump(j) + "\n";
}

StatusOr<Manifest> DecodeManifest(const std::string& text, const std::string& name) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::DataLoss(name + ": corrupt manifest (not a JSON object)");
  FieldReader r(j, name);
  int version = 0;
  TANDEM_RETURN_IF_ERROR(r.Get("format_version", &version));
  if (version != kManifestFormatVersion) {
    return Status::InvalidArgument(name + ": manifest format version " + std::to_string(version) +
                                   " is not readable by this build (reads " +
                                   std::to_string(kManifestFormatVersion) + ")");
  }
  std::string crc_text;
  uint32_t crc = 0;
  TANDEM_RETURN_IF_ERROR(r.Get("manifest_crc32c", &crc_text));
  if (!ParseHex8(crc_text, &crc)) return r.Bad("manifest_crc32c", "is not 8 hex digits");
  j.erase("manifest_crc32c");
  const std::string body = Dump(j);
  if (Crc32c(body.data(), body.size()) != crc)
    return Status::DataLoss(name + ": corrupt manifest (CRC32C mismatch)");
  Manifest m;
  TANDEM_RETURN_IF_ERROR(ManifestFromJson(j, name, &m));
  return m;
}

Status CommitCheckpoint(const std::string& checkpoint_dir, const Manifest& m, bool durable) {
  if (m.step < 0) return Status::InvalidArgument("commit: checkpoint step is negative");
  const std::string ckpt = checkpoint_dir + "/" + CheckpointDirName(m.step);
  std::error_code ec;
  fs::create_directories(ckpt, ec);
  if (ec) return ErrnoToStatus(ec.value(), "create " + ckpt);
  const std::string text = EncodeManifest(m);
  TANDEM_RETURN_IF_ERROR(WriteFileDurably(ckpt + "/" + kManifestName, text));
  Pointer p{ManifestRelPath(m.step), Crc32c(text.data(), text.size()), m.step};
  TANDEM_RETURN_IF_ERROR(WriteFileDurably(checkpoint_dir + "/" + kLatest, EncodePointer(p)));
  if (durable) {
    TANDEM_RETURN_IF_ERROR(
        WriteFileDurably(checkpoint_dir + "/" + kLatestDurable, EncodePointer(p)));
  }
  return Status::Ok();
}

Status MarkDurable(const std::string& checkpoint_dir, int64_t step) {
  if (PointerStep(checkpoint_dir + "/" + kLatestDurable) > step) return Status::Ok();
  const std::string path = checkpoint_dir + "/" + ManifestRelPath(step);
  std::string text;
  TANDEM_RETURN_IF_ERROR(ReadWholeFile(path, &text));
  TANDEM_RETURN_IF_ERROR(DecodeManifest(text, path).status());
  Pointer p{ManifestRelPath(step), Crc32c(text.data(), text.size()), step};
  return WriteFileDurably(checkpoint_dir + "/" + kLatestDurable, EncodePointer(p));
}

StatusOr<Manifest> LoadLatest(const std::string& checkpoint_dir, bool durable_only,
                              std::vector<std::string>* warnings, bool verify_files) {
  std::vector<std::string> problems;  // one line per bad file, each once
  auto problem = [&](const Status& s) {
    if (std::find(problems.begin(), problems.end(), s.message()) == problems.end())
      problems.push_back(s.message());
  };
  const std::string pointer = checkpoint_dir + "/" + (durable_only ? kLatestDurable : kLatest);
  StatusOr<Pointer> named = ReadPointer(pointer);
  if (named.status().IsUnavailable()) return named.status();
  std::vector<int64_t> candidates;
  std::vector<int64_t> damaged;  // manifests intact, files not
  // `named`: the pointer's own manifest, whose files only verify_files checks (LATEST_DURABLE
  // moves only once its copy is complete).
  auto check_files = [&](StatusOr<Manifest>* m, bool named) {
    if (!m->ok() || !(verify_files || (durable_only && !named))) return;
    Status files = VerifyManifestFiles(checkpoint_dir, **m, /*full=*/verify_files, nullptr);
    if (files.ok()) return;
    damaged.push_back((*m)->step);
    *m = Status::DataLoss(files.message() +
                          (verify_files
                               ? " (checkpoint of step " + std::to_string((*m)->step) + " skipped)"
                               : " (durable copy incomplete)"));
  };
  if (named.ok()) {
    StatusOr<Manifest> m = ReadManifest(checkpoint_dir, named->step, &named->crc32c, pointer);
    check_files(&m, /*named=*/true);
    if (m.ok() || m.status().IsUnavailable()) {
      if (m.ok() && warnings != nullptr)
        warnings->insert(warnings->end(), problems.begin(), problems.end());
      return m;
    }
    problem(m.status());
    // Its manifest may still be intact (rewritten by a re-commit of that step, say): prefer it.
    if (damaged.empty()) candidates.push_back(named->step);
  } else {
    problem(named.status());
  }
  TANDEM_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListSteps(checkpoint_dir, true));
  if (named.status().IsNotFound() && steps.empty())
    return Status::NotFound("no checkpoint in " + checkpoint_dir);
  for (int64_t step : steps) {
    if (candidates.empty() || step != candidates.front()) candidates.push_back(step);
  }
  for (int64_t step : candidates) {
    if (std::find(damaged.begin(), damaged.end(), step) != damaged.end()) continue;
    StatusOr<Manifest> m = ReadManifest(checkpoint_dir, step, nullptr, "");
    if (m.status().IsUnavailable()) return m.status();
    check_files(&m, /*named=*/false);
    if (m.ok()) {
      problems.push_back(pointer + ": falling back to " + checkpoint_dir + "/" +
                         ManifestRelPath(step));
      if (warnings != nullptr) warnings->insert(warnings->end(), problems.begin(), problems.end());
      return m;
    }
    if (!m.status().IsNotFound()) problem(m.status());
  }
  if (warnings != nullptr) warnings->insert(warnings->end(), problems.begin(), problems.end());
  std::string all;
  for (const std::string& p : problems) all += (all.empty() ? "" : "; ") + p;
  return Status::DataLoss("no intact checkpoint in " + checkpoint_dir + ": " + all);
}

Status VerifyManifestFiles(const std::string& checkpoint_dir, const Manifest& m, bool full,
                           std::vector<std::string>* bad_files) {
  Status first;
  for (const ManifestPart& part : m.parts) {
    for (const ManifestFile& f : part.files) {
      const std::string path = checkpoint_dir + "/" + f.path;
      std::string problem;
      std::error_code ec;
      if (!IsSafeRelativePath(f.path)) {
        problem = "is not a relative path inside the checkpoint dir";
      } else if (!fs::is_regular_file(path, ec)) {
        problem = ec && ec != std::errc::no_such_file_or_directory ? "cannot stat: " + ec.message()
                                                                   : "missing";
      } else if (uint64_t size = fs::file_size(path, ec); ec || size != f.size) {
        problem = ec ? "cannot stat: " + ec.message()
                     : "size " + std::to_string(size) + ", manifest says " + std::to_string(f.size);
      } else if (full) {
        uint32_t crc = 0;
        Status s = FileCrc32c(path, &crc);
        if (!s.ok()) {
          problem = "unreadable: " + s.message();
        } else if (crc != f.crc32c) {
          problem = "CRC32C " + Hex8(crc) + ", manifest says " + Hex8(f.crc32c);
        }
      }
      if (problem.empty()) continue;
      if (bad_files != nullptr) bad_files->push_back(f.path);
      if (first.ok()) first = Status::DataLoss(path + " (part " + part.name + "): " + problem);
    }
  }
  return first;
}

StatusOr<std::vector<std::string>> SetAsideNewer(const std::string& checkpoint_dir, int64_t step) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListSteps(checkpoint_dir, true));
  std::vector<std::string> moved;
  for (int64_t s : steps) {
    if (s <= step) continue;
    const std::string from = checkpoint_dir + "/" + CheckpointDirName(s);
    const std::string to = checkpoint_dir + "/damaged-" + CheckpointDirName(s);
    std::error_code ec;
    fs::remove_all(to, ec);
    fs::rename(from, to, ec);
    if (ec) return Status::Unavailable("rename " + from + " to " + to + ": " + ec.message());
    moved.push_back(to);
  }
  return moved;
}

Status CleanPartial(const std::string& checkpoint_dir, int64_t below_step) {
  std::error_code ec;
  if (!fs::exists(checkpoint_dir, ec)) return Status::Ok();
  std::vector<fs::path> doomed;
  auto collect_tmp = [&](const fs::path& dir) {
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().filename().string().ends_with(kTmpSuffix) && !it->is_directory(ec))
        doomed.push_back(it->path());
    }
  };
  collect_tmp(checkpoint_dir);
  TANDEM_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListSteps(checkpoint_dir, false));
  for (int64_t step : steps) {
    const fs::path dir = fs::path(checkpoint_dir) / CheckpointDirName(step);
    if (fs::exists(dir / kManifestName, ec)) {
      collect_tmp(dir);
    } else if (step < below_step) {
      doomed.push_back(dir);
    }
  }
  if (ec) return Status::Unavailable("list " + checkpoint_dir + ": " + ec.message());
  for (const fs::path& p : doomed) {
    fs::remove_all(p, ec);
    if (ec) return Status::Unavailable("remove " + p.string() + ": " + ec.message());
  }
  return Status::Ok();
}

StatusOr<std::vector<int64_t>> Retain(const std::string& checkpoint_dir, int64_t keep) {
  if (keep < 2) return Status::InvalidArgument("checkpoint.keep must be >= 2");
  TANDEM_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListSteps(checkpoint_dir, true));
  const std::set<int64_t> pinned = {PointerStep(checkpoint_dir + "/" + kLatest),
                                    PointerStep(checkpoint_dir + "/" + kLatestDurable)};
  std::vector<int64_t> kept;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (static_cast<int64_t>(i) < keep || pinned.count(steps[i])) {
      kept.push_back(steps[i]);
      continue;
    }
    const std::string dir = checkpoint_dir + "/" + CheckpointDirName(steps[i]);
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (ec) return Status::Unavailable("remove " + dir + ": " + ec.message());
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

std::vector<std::string> DifferingComputationKeys(const config::JobConfig& a,
                                                  const config::JobConfig& b) {
  ComputationKeys ka, kb;
  try {
    ka = Collect(a);
    kb = Collect(b);
  } catch (const YAML::Exception& e) {
    // ToYaml() always writes valid YAML; refuse the resume rather than guess if it ever does not.
    return {std::string("(config not comparable: ") + e.what() + ")"};
  }
  std::vector<std::string> out;
  for (const std::string& key : UnionKeys(ka.plain, kb.plain)) {
    const std::string va = Lookup(ka.plain, key), vb = Lookup(kb.plain, key);
    if (va != vb) out.push_back(key + ": " + va + " -> " + vb);
  }
  DiffTables(a, ka, b, kb, &out);
  return out;
}

}  // namespace tandem::chief
