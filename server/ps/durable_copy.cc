#include "server/ps/durable_copy.h"

#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_checksum.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>
#include <system_error>
#include <utility>

#include "common/crc32c.h"
#include "common/durable_file.h"
#include "server/ps/embedding_store.h"
#include "server/ps/file_io.h"
#include "server/ps/rocks_info_log.h"

namespace tandem::ps {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kPoolDir = "sst";
constexpr std::string_view kStepPrefix = "step-";
constexpr std::string_view kLogDir = "log";
constexpr std::string_view kTmpSuffix = ".tmp";

Status ErrorCodeStatus(const std::error_code& ec, const std::string& what) {
  return ErrnoToStatus(ec.value(), what);
}

// The one place here where a rocksdb::Status becomes ours (STYLE §2).
Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  const std::string msg = what + ": " + s.ToString();
  if (s.IsNotFound() || s.IsPathNotFound()) return Status::NotFound(msg);
  if (s.IsCorruption()) return Status::DataLoss(msg);
  if (s.IsNoSpace()) return Status::ResourceExhausted(msg);
  return Status::Unavailable(msg);
}

Status FsyncPath(const std::string& path, int flags) {
  Fd fd(::open(path.c_str(), flags | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoToStatus(errno, "open " + path);
  if (::fsync(fd.get()) != 0) return ErrnoToStatus(errno, "fsync " + path);
  return Status::Ok();
}

// Creates `dir` and its missing parents; each new entry is made durable by an fsync of the
// directory that holds it.
Status CreateDirsDurably(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return Status::Ok();
  if (dir.has_parent_path() && dir.parent_path() != dir) {
    TANDEM_RETURN_IF_ERROR(CreateDirsDurably(dir.parent_path()));
  }
  if (!fs::create_directory(dir, ec) && ec) return ErrorCodeStatus(ec, "mkdir " + dir.string());
  return FsyncDir(dir.has_parent_path() ? dir.parent_path().string() : ".");
}

StatusOr<FileSum> ReadSum(const std::string& path) { return StreamFile(path); }

// Writes `from` to `to`.tmp, neither fsynced nor renamed yet (CopyJob::Commit does both, for
// every file of a part at once). Not WriteFileDurably: SST files are streamed (they can be
// gigabytes) through a CRC check, and a part's files share one directory fsync. With `expected`, a
// copy whose CRC differs is refused with kDataLoss and removed.
StatusOr<FileSum> Stage(const std::string& from, const std::string& to,
                        std::optional<uint32_t> expected, bool read_direct = false) {
  const std::string tmp = to + std::string(kTmpSuffix);
  TANDEM_ASSIGN_OR_RETURN(int fd, CreateForCopy(tmp));
  Fd out(fd);
  StatusOr<FileSum> sum = StreamFile(from, out.get(), tmp, read_direct);
  Status s = sum.status();
  if (s.ok() && expected && sum->crc32c != *expected) {
    char msg[96];
    std::snprintf(msg, sizeof msg, ": CRC32C %08x, RocksDB recorded %08x", sum->crc32c, *expected);
    s = Status::DataLoss("restore point file " + from + msg);
  }
  if (out.Close() != 0 && s.ok()) s = ErrnoToStatus(errno, "close " + tmp);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  return sum;
}

// Size of a regular file, or nullopt when it is absent (or not a regular file).
std::optional<uint64_t> FileSize(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return static_cast<uint64_t>(st.st_size);
}

std::string Hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// RocksDB's recorded CRC32C of each live SST of the restore point, by file number. Opening it
// read-only reads the MANIFEST (and a few table footers); it writes nothing there. The options
// that matter for a read-only open match embedding_store.cc's RocksOptions: the default
// (bytewise) comparator and the block-based table format.
StatusOr<std::map<uint64_t, uint32_t>> RecordedSstChecksums(const std::string& dir) {
  rocksdb::Options options;
  options.create_if_missing = false;
  options.info_log = std::make_shared<NullInfoLog>();
  options.max_open_files = 20;  // RocksDB's minimum: the table cache preloads few footers
  options.file_checksum_gen_factory = rocksdb::GetFileChecksumGenCrc32cFactory();
  rocksdb::DB* raw = nullptr;
  TANDEM_RETURN_IF_ERROR(
      FromRocks(rocksdb::DB::OpenForReadOnly(options, dir, &raw), "open restore point " + dir));
  std::unique_ptr<rocksdb::DB> db(raw);
  std::unique_ptr<rocksdb::FileChecksumList> list(rocksdb::NewFileChecksumList());
  TANDEM_RETURN_IF_ERROR(
      FromRocks(db->GetLiveFilesChecksumInfo(list.get()), "file checksums of " + dir));
  std::vector<uint64_t> numbers;
  std::vector<std::string> sums, funcs;
  TANDEM_RETURN_IF_ERROR(
      FromRocks(list->GetAllFileChecksums(&numbers, &sums, &funcs), "file checksums of " + dir));
  std::map<uint64_t, uint32_t> out;
  for (size_t i = 0; i < numbers.size(); ++i) {
    // Files written before the factory was set have no checksum; the copy computes one.
    if (const std::optional<uint32_t> crc = RocksFileCrc32c(funcs[i], sums[i]))
      out[numbers[i]] = *crc;
  }
  db->Close().PermitUncheckedError();  // read-only: nothing to lose
  return out;
}

// "000012.sst" -> 12; nullopt for anything else.
std::optional<uint64_t> SstNumber(const std::string& name) {
  if (!name.ends_with(".sst") || name.size() == 4) return std::nullopt;
  uint64_t n = 0;
  for (char c : std::string_view(name).substr(0, name.size() - 4)) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<uint64_t>(c - '0');
  }
  return n;
}

std::string PoolPath(const std::string& db_name, uint32_t crc) {
  return std::string(kPoolDir) + "/" + db_name.substr(0, db_name.size() - 4) + "-" + Hex32(crc) +
         ".sst";
}

// The state one CopyToDurable works with. Files are copied in three phases, so that a part
// costs one journal commit's worth of waiting rather than one per file: every new file is
// written as <name>.tmp (Stage), then each is fsynced, then each renamed, then each directory
// fsynced once. A crash before the renames leaves only .tmp files (never named by a part;
// CollectGarbage removes them); a renamed file was fsynced first, so a visible pool file is
// always complete; and nothing is named by a committed checkpoint before CopyToDurable returns.
struct CopyJob {
  std::string source_dir;
  fs::path root;
  std::string step_dir;  // relative to root
  std::map<uint64_t, uint32_t> recorded;
  std::map<std::string, const CheckpointFile*> previous;          // by path
  std::map<std::string, const CheckpointFile*> previous_by_name;  // non-SSTs, by db_name
  std::vector<std::string> staged;  // final paths whose .tmp is written, not yet synced
  CheckpointPart part;

  ~CopyJob() {
    for (const std::string& to : staged) ::unlink((to + std::string(kTmpSuffix)).c_str());
  }

  Status Commit() {
    for (const std::string& to : staged) {
      TANDEM_RETURN_IF_ERROR(FsyncPath(to + std::string(kTmpSuffix), O_RDONLY));
    }
    for (const std::string& to : staged) {
      const std::string tmp = to + std::string(kTmpSuffix);
      if (::rename(tmp.c_str(), to.c_str()) != 0) return ErrnoToStatus(errno, "rename " + tmp);
    }
    staged.clear();
    TANDEM_RETURN_IF_ERROR(FsyncDir((root / kPoolDir).string()));
    TANDEM_RETURN_IF_ERROR(FsyncDir((root / step_dir).string()));
    return FsyncDir(root.string());  // the step directory's own entry
  }
};

// Whether the pool already holds `file` (path, size and CRC as wanted), reading it only when
// the previous part does not vouch for it.
StatusOr<bool> PoolHolds(const CopyJob& job, const CheckpointFile& file) {
  const std::string path = (job.root / file.path).string();
  if (FileSize(path) != file.size_bytes) return false;
  auto it = job.previous.find(file.path);
  if (it != job.previous.end() && *it->second == file) return true;
  StatusOr<FileSum> sum = ReadSum(path);
  if (!sum.ok()) return sum.status().IsDataLoss() ? StatusOr<bool>(false) : sum.status();
  return sum->crc32c == file.crc32c && sum->size_bytes == file.size_bytes;
}

// The CRC32C of the restore point's file `name`: RocksDB's recorded one for an SST (nothing
// read), else computed now (small files, and SSTs from before the factory was set).
StatusOr<uint32_t> FileCrc(const std::map<uint64_t, uint32_t>& recorded, const std::string& dir,
                           const std::string& name) {
  const std::optional<uint64_t> number = SstNumber(name);
  auto rec = number ? recorded.find(*number) : recorded.end();
  if (rec != recorded.end()) return rec->second;
  TANDEM_ASSIGN_OR_RETURN(FileSum sum, ReadSum(dir + "/" + name));
  return sum.crc32c;
}

Status CopySst(CopyJob* job, const std::string& name, uint64_t size_bytes) {
  const std::string source = job->source_dir + "/" + name;
  TANDEM_ASSIGN_OR_RETURN(uint32_t crc, FileCrc(job->recorded, job->source_dir, name));
  CheckpointFile file{PoolPath(name, crc), name, size_bytes, crc, /*is_sst=*/true};
  TANDEM_ASSIGN_OR_RETURN(bool held, PoolHolds(*job, file));
  if (!held) {
    const std::string to = (job->root / file.path).string();
    TANDEM_ASSIGN_OR_RETURN(FileSum sum, Stage(source, to, crc));
    job->staged.push_back(to);
    file.size_bytes = sum.size_bytes;
    job->part.bytes_copied += sum.size_bytes;
    ++job->part.files_copied;
  }
  job->part.files.push_back(std::move(file));
  return Status::Ok();
}

// Makes `to` a hard link to `from` (a durable file of the previous part, so its data needs no
// fsync; the entry is made durable by Commit's directory fsync). False when the file system
// cannot link (then the caller copies).
bool LinkDurable(const std::string& from, const std::string& to) {
  if (from == to) return FileSize(to).has_value();  // the same step again
  const std::string tmp = to + std::string(kTmpSuffix);
  ::unlink(tmp.c_str());
  if (::link(from.c_str(), tmp.c_str()) != 0) return false;
  if (::rename(tmp.c_str(), to.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

// The small files (CURRENT, OPTIONS-*, MANIFEST-*) go in each step's directory. One that is
// identical (size and CRC32C) to the previous part's file of that name, which is present with
// that size, is hard-linked to it instead of written and fsynced again: OPTIONS and CURRENT
// rarely change between steps (the MANIFEST, appended to, usually does).
Status CopyOther(CopyJob* job, const std::string& name) {
  const std::string source = job->source_dir + "/" + name;
  CheckpointFile file{job->step_dir + "/" + name, name, 0, 0, /*is_sst=*/false};
  const std::string to = (job->root / file.path).string();
  auto prev = job->previous_by_name.find(name);
  if (prev != job->previous_by_name.end()) {
    TANDEM_ASSIGN_OR_RETURN(FileSum sum, ReadSum(source));
    const CheckpointFile& old = *prev->second;
    const std::string from = (job->root / old.path).string();
    if (sum.size_bytes == old.size_bytes && sum.crc32c == old.crc32c &&
        FileSize(from) == old.size_bytes && LinkDurable(from, to)) {
      file.size_bytes = sum.size_bytes;
      file.crc32c = sum.crc32c;
      job->part.files.push_back(std::move(file));
      return Status::Ok();
    }
  }
  TANDEM_ASSIGN_OR_RETURN(FileSum sum, Stage(source, to, std::nullopt));
  job->staged.push_back(to);
  file.size_bytes = sum.size_bytes;
  file.crc32c = sum.crc32c;
  job->part.bytes_copied += sum.size_bytes;
  ++job->part.files_copied;
  job->part.files.push_back(std::move(file));
  return Status::Ok();
}

// Regular files of `dir` by name, with their sizes.
StatusOr<std::map<std::string, uint64_t>> ListFiles(const std::string& dir) {
  std::map<std::string, uint64_t> out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const uint64_t size = it->file_size(ec);
    if (ec) break;
    out[it->path().filename().string()] = size;
  }
  if (ec) return ErrorCodeStatus(ec, "list " + dir);
  return out;
}

// A relative path inside the layout: no absolute paths, no "..", no empty components.
bool SafeRelativePath(const std::string& path) {
  if (path.empty() || path.front() == '/') return false;
  for (const auto& part : fs::path(path)) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return path.starts_with(std::string(kPoolDir) + "/") ||
         path.starts_with(std::string(kLogDir) + "/") || path.starts_with(kStepPrefix);
}

// "log/<16-digit seq>-<crc>.log" (".sst" for an SST segment, which readers tell by the name):
// where a change log segment lives in a durable root.
std::string SegmentDurablePath(const ChangeSegment& seg) {
  char name[64];
  std::snprintf(name, sizeof name, "%016llu-%s%s", static_cast<unsigned long long>(seg.seq),
                Hex32(seg.crc32c).c_str(), seg.sst ? ".sst" : ".log");
  return std::string(kLogDir) + "/" + name;
}

bool SafeName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

}  // namespace

std::string StepDirName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%012lld", static_cast<long long>(step));
  return buf;
}

StatusOr<CheckpointPart> CopyToDurable(const std::string& restore_point_dir,
                                       const std::string& durable_root, uint32_t shard,
                                       int64_t step, const CheckpointPart* previous,
                                       CopyProgress* progress) {
  std::error_code ec;
  if (!fs::is_directory(restore_point_dir, ec)) {
    return Status::NotFound("durable copy: no restore point at " + restore_point_dir);
  }
  CopyJob job;
  job.source_dir = restore_point_dir;
  job.root = durable_root;
  job.step_dir = StepDirName(step);
  job.part.shard = shard;
  job.part.step = step;
  if (previous != nullptr) {
    for (const CheckpointFile& f : previous->files) {
      job.previous[f.path] = &f;
      if (!f.is_sst && SafeRelativePath(f.path) && SafeName(f.db_name))
        job.previous_by_name[f.db_name] = &f;
    }
  }
  TANDEM_ASSIGN_OR_RETURN(job.recorded, RecordedSstChecksums(restore_point_dir));
  TANDEM_ASSIGN_OR_RETURN(auto listing, ListFiles(restore_point_dir));
  TANDEM_RETURN_IF_ERROR(CreateDirsDurably(job.root / kPoolDir));
  // Its entry in the root is made durable by Commit.
  if (!fs::create_directory(job.root / job.step_dir, ec) && ec)
    return ErrorCodeStatus(ec, "mkdir " + (job.root / job.step_dir).string());
  if (progress != nullptr) {
    uint64_t total = 0;
    for (const auto& entry : listing) total += entry.second;
    progress->bytes_total = total;
    progress->bytes_done = 0;
  }
  for (const auto& [name, size] : listing) {
    if (progress != nullptr && progress->cancel)
      return Status::Cancelled("durable copy of shard " + std::to_string(shard) + " stopped");
    Status s = SstNumber(name) ? CopySst(&job, name, size) : CopyOther(&job, name);
    if (!s.ok()) return s.WithContext("durable copy of shard " + std::to_string(shard));
    if (progress != nullptr) progress->bytes_done += size;
  }
  Status committed = job.Commit();
  if (!committed.ok())
    return committed.WithContext("durable copy of shard " + std::to_string(shard));
  std::sort(job.part.files.begin(), job.part.files.end(),
            [](const CheckpointFile& a, const CheckpointFile& b) { return a.path < b.path; });
  return std::move(job.part);
}

StatusOr<uint64_t> UploadSegment(const ChangeSegment& segment, const std::string& durable_root) {
  if (!segment.complete)
    return Status::InvalidArgument("change log segment " + segment.path + " is incomplete");
  const fs::path root(durable_root);
  const std::string to = (root / SegmentDurablePath(segment)).string();
  if (FileSize(to) == segment.size_bytes) return uint64_t{0};
  TANDEM_RETURN_IF_ERROR(CreateDirsDurably(root / kLogDir));
  // A records segment was written direct (change_log.h): none of its bytes are in the page
  // cache. An SST segment was written through it.
  TANDEM_ASSIGN_OR_RETURN(FileSum sum, Stage(segment.path, to, segment.crc32c,
                                             /*read_direct=*/!segment.sst));
  const std::string tmp = to + std::string(kTmpSuffix);
  Status s = FsyncPath(tmp, O_RDONLY);
  if (s.ok() && ::rename(tmp.c_str(), to.c_str()) != 0) s = ErrnoToStatus(errno, "rename " + tmp);
  if (s.ok()) s = FsyncDir((root / kLogDir).string());
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  return sum.size_bytes;
}

StatusOr<CheckpointPart> CopyDeltaToDurable(const std::string& restore_point_dir,
                                            const CheckpointPart& base,
                                            const std::vector<ChangeSegment>& segments,
                                            const std::string& durable_root, uint32_t shard,
                                            int64_t step, CopyProgress* progress) {
  if (base.base_step >= 0)
    return Status::InvalidArgument("delta part of step " + std::to_string(step) +
                                   ": its base (step " + std::to_string(base.step) +
                                   ") is itself a delta");
  CheckpointPart part;
  part.shard = shard;
  part.step = step;
  part.base_step = base.step;
  part.files = base.files;
  {
    // The restore point's own files: RocksDB's recorded CRCs for SSTs (nothing read), the small
    // rest read here.
    TANDEM_ASSIGN_OR_RETURN(auto recorded, RecordedSstChecksums(restore_point_dir));
    TANDEM_ASSIGN_OR_RETURN(auto listing, ListFiles(restore_point_dir));
    for (const auto& [name, size] : listing) {
      TANDEM_ASSIGN_OR_RETURN(uint32_t crc, FileCrc(recorded, restore_point_dir, name));
      part.local_files.push_back(
          CheckpointFile{"", name, size, crc, SstNumber(name).has_value(), false});
    }
  }
  if (progress != nullptr) {
    uint64_t total = 0;
    for (const ChangeSegment& seg : segments) total += seg.size_bytes;
    progress->bytes_total = total;
    progress->bytes_done = 0;
  }
  // Each segment is its own content-named file, copied whole or not at all (UploadSegment): the
  // ones the shard's thread copied ahead cost nothing here, and a copy that stops part-way leaves
  // only whole segments, which the next part reuses.
  for (const ChangeSegment& seg : segments) {
    if (progress != nullptr && progress->cancel)
      return Status::Cancelled("durable copy of shard " + std::to_string(shard) + " stopped");
    StatusOr<uint64_t> copied = UploadSegment(seg, durable_root);
    if (!copied.ok())
      return copied.status().WithContext("durable copy of shard " + std::to_string(shard));
    if (*copied > 0) {
      part.bytes_copied += *copied;
      ++part.files_copied;
    }
    part.files.push_back(CheckpointFile{SegmentDurablePath(seg),
                                        "changes-" + std::to_string(seg.seq), seg.size_bytes,
                                        seg.crc32c, /*is_sst=*/false, /*is_log=*/true});
    if (progress != nullptr) progress->bytes_done += seg.size_bytes;
  }
  std::sort(part.files.begin(), part.files.end(),
            [](const CheckpointFile& a, const CheckpointFile& b) { return a.path < b.path; });
  return part;
}

Status VerifyPart(const std::string& durable_root, const CheckpointPart& part, bool full,
                  const CheckpointPart* verified) {
  std::map<std::string, const CheckpointFile*> known;
  if (verified != nullptr)
    for (const CheckpointFile& f : verified->files) known[f.path] = &f;
  for (const CheckpointFile& file : part.files) {
    const std::string path = durable_root + "/" + file.path;
    const std::optional<uint64_t> size = FileSize(path);
    if (!size) return Status::DataLoss("durable copy: missing " + path);
    if (*size != file.size_bytes) {
      return Status::DataLoss("durable copy: " + path + " has " + std::to_string(*size) +
                              " bytes, recorded " + std::to_string(file.size_bytes));
    }
    if (!full) continue;
    auto it = known.find(file.path);
    if (it != known.end() && *it->second == file) continue;
    TANDEM_ASSIGN_OR_RETURN(FileSum sum, ReadSum(path));
    if (sum.crc32c != file.crc32c || sum.size_bytes != file.size_bytes) {
      return Status::DataLoss("durable copy: " + path + " has CRC32C " + Hex32(sum.crc32c) +
                              ", recorded " + Hex32(file.crc32c));
    }
  }
  return Status::Ok();
}

Status MaterializePart(const std::string& durable_root, const CheckpointPart& part,
                       const std::string& out_dir) {
  std::error_code ec;
  if (fs::exists(out_dir, ec)) return Status::AlreadyExists("materialize: " + out_dir);
  fs::create_directories(out_dir, ec);
  if (ec) return ErrorCodeStatus(ec, "materialize: mkdir " + out_dir);
  Status s;
  std::vector<std::string> logs;
  for (const CheckpointFile& file : part.files) {
    if (!SafeRelativePath(file.path) || !SafeName(file.db_name)) {
      s = Status::InvalidArgument("materialize: bad file entry " + file.path);
      break;
    }
    const std::string from = durable_root + "/" + file.path;
    if (file.is_log) {
      if (FileSize(from) != file.size_bytes) {
        s = Status::DataLoss("materialize: " + from + " is missing or has the wrong size");
        break;
      }
      logs.push_back(from);  // in path order, which is the log's
      continue;
    }
    const std::string to = out_dir + "/" + file.db_name;
    if (FileSize(from) != file.size_bytes) {
      s = Status::DataLoss("materialize: " + from + " is missing or has the wrong size");
      break;
    }
    std::error_code link_ec;
    if (file.is_sst) fs::create_hard_link(from, to, link_ec);
    // A link fails across file systems; then, as for the mutable files, copy.
    if (!file.is_sst || link_ec) fs::copy_file(from, to, ec);
    if (ec) {
      s = ErrorCodeStatus(ec, "materialize: copy " + from);
      break;
    }
  }
  if (s.ok() && !logs.empty()) s = ReplayChangeLogs(out_dir, logs);
  if (!s.ok()) fs::remove_all(out_dir, ec);  // ours, and incomplete
  return s;
}

Status CollectGarbage(const std::string& durable_root,
                      const std::vector<CheckpointPart>& retained) {
  std::set<std::string> keep_files, keep_dirs;
  for (const CheckpointPart& part : retained) {
    keep_dirs.insert(StepDirName(part.step));
    for (const CheckpointFile& f : part.files) {
      keep_files.insert(f.path);
      // A delta part's base files live in its base's step directory.
      if (f.path.starts_with(kStepPrefix)) keep_dirs.insert(f.path.substr(0, f.path.find('/')));
    }
  }
  std::error_code ec;
  if (!fs::is_directory(durable_root, ec)) return Status::Ok();
  std::vector<fs::path> doomed;
  // The unreferenced files of `dir` (the pool or a kept step dir; "name/file" in keep_files).
  const auto sweep = [&](const fs::path& dir, const std::string& name) {
    std::error_code list_ec;
    fs::directory_iterator it(dir, list_ec);
    for (; !list_ec && it != fs::directory_iterator(); it.increment(list_ec)) {
      const std::string rel = name + "/" + it->path().filename().string();
      if (!keep_files.count(rel)) doomed.push_back(it->path());
    }
    return list_ec;
  };
  fs::directory_iterator it(durable_root, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code type_ec;
    if (!it->is_directory(type_ec)) continue;
    if (name == kPoolDir || name == kLogDir ||
        (name.starts_with(kStepPrefix) && keep_dirs.count(name))) {
      ec = sweep(it->path(), name);
    } else if (name.starts_with(kStepPrefix)) {
      doomed.push_back(it->path());
    }
    if (ec) break;
  }
  if (ec) return ErrorCodeStatus(ec, "garbage collection in " + durable_root);
  for (const fs::path& p : doomed) {
    fs::remove_all(p, ec);
    if (ec) return ErrorCodeStatus(ec, "garbage collection: remove " + p.string());
  }
  return Status::Ok();
}

nlohmann::json CheckpointPartToJson(const CheckpointPart& part) {
  nlohmann::json files = nlohmann::json::array();
  for (const CheckpointFile& f : part.files) {
    nlohmann::json j = {{"path", f.path},
                        {"db_name", f.db_name},
                        {"size", f.size_bytes},
                        {"crc32c", Hex32(f.crc32c)},
                        {"sst", f.is_sst}};
    if (f.is_log) j["log"] = true;
    files.push_back(std::move(j));
  }
  nlohmann::json j = {{"shard", part.shard},
                      {"step", part.step},
                      {"files", std::move(files)},
                      {"bytes_copied", part.bytes_copied},
                      {"files_copied", part.files_copied}};
  if (part.base_step >= 0) {
    j["base_step"] = part.base_step;
    nlohmann::json local = nlohmann::json::array();
    for (const CheckpointFile& f : part.local_files)
      local.push_back({{"db_name", f.db_name},
                       {"size", f.size_bytes},
                       {"crc32c", Hex32(f.crc32c)},
                       {"sst", f.is_sst}});
    j["local_files"] = std::move(local);
  }
  return j;
}

namespace {

// An object's "crc32c": exactly 8 hex digits; nullopt otherwise. REQUIRES: j is an object.
std::optional<uint32_t> CrcFromJson(const nlohmann::json& j) {
  const std::string crc = j.contains("crc32c") && j.at("crc32c").is_string()
                              ? j.at("crc32c").get<std::string>()
                              : std::string();
  char* end = nullptr;
  const unsigned long v = std::strtoul(crc.c_str(), &end, 16);
  if (crc.size() != 8 || end != crc.c_str() + 8 || !std::isxdigit(static_cast<uint8_t>(crc[0])))
    return std::nullopt;
  return static_cast<uint32_t>(v);
}

// REQUIRES: j is an object. May throw nlohmann::json::exception (caught by the caller).
StatusOr<CheckpointFile> FileFromJson(const nlohmann::json& j) {
  CheckpointFile f;
  if (!j.contains("path") || !j.at("path").is_string() ||
      !SafeRelativePath(j.at("path").get<std::string>()))
    return Status::InvalidArgument("checkpoint part: bad file path");
  f.path = j.at("path").get<std::string>();
  const std::string where = "checkpoint part: file " + f.path + ": ";
  if (!j.contains("db_name") || !j.at("db_name").is_string() ||
      !SafeName(j.at("db_name").get<std::string>()))
    return Status::InvalidArgument(where + "bad db_name");
  f.db_name = j.at("db_name").get<std::string>();
  if (!j.contains("size") || !j.at("size").is_number_unsigned())
    return Status::InvalidArgument(where + "bad size");
  f.size_bytes = j.at("size").get<uint64_t>();
  const std::optional<uint32_t> crc = CrcFromJson(j);
  if (!crc) return Status::InvalidArgument(where + "bad crc32c");
  f.crc32c = *crc;
  if (!j.contains("sst") || !j.at("sst").is_boolean())
    return Status::InvalidArgument(where + "bad sst");
  f.is_sst = j.at("sst").get<bool>();
  if (f.is_sst != f.path.starts_with(std::string(kPoolDir) + "/"))
    return Status::InvalidArgument(where + "sst does not match its path");
  if (j.contains("log") && !j.at("log").is_boolean())
    return Status::InvalidArgument(where + "bad log");
  f.is_log = j.contains("log") && j.at("log").get<bool>();
  if (f.is_log != f.path.starts_with(std::string(kLogDir) + "/"))
    return Status::InvalidArgument(where + "log does not match its path");
  return f;
}

bool IsUnsigned(const nlohmann::json& j, const char* key, uint64_t max) {
  return j.contains(key) && j.at(key).is_number_unsigned() && j.at(key).get<uint64_t>() <= max;
}

StatusOr<CheckpointPart> PartFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return Status::InvalidArgument("checkpoint part: not an object");
  CheckpointPart part;
  if (!IsUnsigned(j, "shard", UINT32_MAX))
    return Status::InvalidArgument("checkpoint part: bad shard");
  part.shard = j.at("shard").get<uint32_t>();
  if (!j.contains("step") || !j.at("step").is_number_integer())
    return Status::InvalidArgument("checkpoint part: bad step");
  part.step = j.at("step").get<int64_t>();
  if (!j.contains("files") || !j.at("files").is_array())
    return Status::InvalidArgument("checkpoint part: bad files");
  for (const nlohmann::json& f : j.at("files")) {
    if (!f.is_object()) return Status::InvalidArgument("checkpoint part: a file is not an object");
    TANDEM_ASSIGN_OR_RETURN(CheckpointFile file, FileFromJson(f));
    part.files.push_back(std::move(file));
  }
  for (const char* key : {"bytes_copied", "files_copied"}) {
    if (j.contains(key) && !IsUnsigned(j, key, UINT64_MAX))
      return Status::InvalidArgument(std::string("checkpoint part: bad ") + key);
  }
  part.bytes_copied = j.contains("bytes_copied") ? j.at("bytes_copied").get<uint64_t>() : 0;
  part.files_copied = j.contains("files_copied") ? j.at("files_copied").get<uint64_t>() : 0;
  if (j.contains("base_step")) {
    if (!j.at("base_step").is_number_integer() || j.at("base_step").get<int64_t>() < 0 ||
        j.at("base_step").get<int64_t>() >= part.step)
      return Status::InvalidArgument("checkpoint part: bad base_step");
    part.base_step = j.at("base_step").get<int64_t>();
    if (j.contains("local_files")) {
      if (!j.at("local_files").is_array())
        return Status::InvalidArgument("checkpoint part: bad local_files");
      for (const nlohmann::json& f : j.at("local_files")) {
        if (!f.is_object() || !f.contains("db_name") || !f.at("db_name").is_string() ||
            !SafeName(f.at("db_name").get<std::string>()) || !IsUnsigned(f, "size", UINT64_MAX) ||
            !f.contains("sst") || !f.at("sst").is_boolean())
          return Status::InvalidArgument("checkpoint part: bad local file");
        const std::optional<uint32_t> crc = CrcFromJson(f);
        if (!crc) return Status::InvalidArgument("checkpoint part: bad local file crc32c");
        part.local_files.push_back(CheckpointFile{"", f.at("db_name").get<std::string>(),
                                                  f.at("size").get<uint64_t>(), *crc,
                                                  f.at("sst").get<bool>(), false});
      }
    }
  }
  const bool has_logs = std::any_of(part.files.begin(), part.files.end(),
                                    [](const CheckpointFile& f) { return f.is_log; });
  if (has_logs && part.base_step < 0)
    return Status::InvalidArgument("checkpoint part: change log segments in a full part");
  return part;
}

}  // namespace

// The checks above make the json accessors safe; the catch is a backstop, so that no
// exception leaves this function (STYLE §2).
StatusOr<CheckpointPart> CheckpointPartFromJson(const nlohmann::json& j) {
  try {
    return PartFromJson(j);
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(std::string("checkpoint part: ") + e.what());
  }
}

std::optional<uint32_t> RocksFileCrc32c(std::string_view func_name, std::string_view checksum) {
  // FileChecksumGenCrc32c::Name(): the only RocksDB file checksum we know how to read.
  if (func_name != "FileChecksumCrc32c" || checksum.size() != 4) return std::nullopt;
  uint32_t v = 0;
  for (char c : checksum) v = v << 8 | static_cast<uint8_t>(c);
  return v;
}

}  // namespace tandem::ps
