#include "server/ps/shard_restore.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <system_error>
#include <utility>

#include "common/checkpoint_layout.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "common/slot_map.h"
#include "server/ps/embedding_store.h"
#include "server/ps/file_io.h"
#include "server/ps/restore_marker.h"

namespace tandem::ps {
namespace {

namespace fs = std::filesystem;

// Re-partitioning writes rows in batches of this many per table, and flushes admission
// counters every this many, bounding its memory whatever the table size.
constexpr size_t kRowBatch = 4096;
constexpr size_t kCounterBatch = 1 << 16;
// The read-only stores of old parts only scan RocksDB; they need next to no cache.
constexpr uint64_t kScanCacheBytes = 1 << 20;

// A file the checkpoint lists that is gone is lost, as is one the medium fails under.
Status RestoreErrno(int err, const std::string& what) {
  Status s = ErrnoToStatus(err, what);
  return s.IsNotFound() || err == EIO ? Status::DataLoss(s.message()) : s;
}

StatusOr<FileSum> Stream(const std::string& path, int out_fd) {
  StatusOr<FileSum> sum = StreamFile(path, out_fd, "a copy of " + path);
  if (sum.status().IsNotFound()) return Status::DataLoss(sum.status().message());
  return sum;
}

bool Matches(const FileSum& sum, const CheckpointFile& file) {
  return sum.size_bytes == file.size_bytes && sum.crc32c == file.crc32c;
}

// Replaces `to` with the durable copy's file at `from`, checked against `file` while copying.
// A new file renamed over `to`: the old one may be a hard link shared with live/ or another
// restore point, which must not change. Not WriteFileDurably: the file is streamed (an SST can
// be gigabytes) through a CRC check, and SyncDir makes the directory durable once for all.
Status FetchAgain(const std::string& from, const std::string& to, const CheckpointFile& file) {
  const std::string tmp = to + ".fetch";
  Status s;
  {
    Fd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (out.get() < 0) return RestoreErrno(errno, "create " + tmp);
    StatusOr<FileSum> sum = Stream(from, out.get());
    s = sum.status();
    if (s.ok() && !Matches(*sum, file))
      s = Status::DataLoss("durable copy " + from + " fails its checksum too (" +
                           std::to_string(sum->size_bytes) + " bytes, recorded " +
                           std::to_string(file.size_bytes) + ")");
    if (s.ok() && ::fsync(out.get()) != 0) s = RestoreErrno(errno, "fsync " + tmp);
  }
  if (s.ok() && ::rename(tmp.c_str(), to.c_str()) != 0) s = RestoreErrno(errno, "rename " + tmp);
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

// fsyncs every regular file of `dir` and the directory: a restore point's marker promises that
// its files are durable.
Status SyncDir(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file()) continue;
    Fd fd(::open(e.path().c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0 || ::fsync(fd.get()) != 0)
      return RestoreErrno(errno, "fsync " + e.path().string());
  }
  if (ec) return Status::Unavailable("list " + dir + ": " + ec.message());
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0) return RestoreErrno(errno, "fsync " + dir);
  return Status::Ok();
}

// The shard directory's LOCK, held while the directory is prepared (the one Shard::Open takes).
class DirLock {
 public:
  static StatusOr<std::unique_ptr<DirLock>> Take(const std::string& dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return Status::Unavailable("cannot create " + dir + ": " + ec.message());
    const std::string path = dir + "/LOCK";
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return RestoreErrno(errno, "open " + path);
    auto lock = std::unique_ptr<DirLock>(new DirLock(fd));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0)
      return Status::FailedPrecondition(dir + " is in use by another process");
    return lock;
  }
  ~DirLock() { ::close(fd_); }  // releases the flock
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  explicit DirLock(int fd) : fd_(fd) {}
  int fd_;
};

std::string DurableRoot(const RestoreSource& source, uint32_t shard) {
  return source.checkpoint_dir + "/" + ShardDurableDir(shard);
}

Status CheckSource(const ShardOptions& options, const RestoreSource& source) {
  if (source.step < 0) return Status::InvalidArgument("restore: no checkpoint step");
  if (source.num_ps == 0 || source.parts.size() != source.num_ps)
    return Status::InvalidArgument("restore: the checkpoint of step " +
                                   std::to_string(source.step) + " lists " +
                                   std::to_string(source.parts.size()) + " shard parts for " +
                                   std::to_string(source.num_ps) + " shards");
  for (uint32_t i = 0; i < source.parts.size(); ++i) {
    if (source.parts[i].shard != i || source.parts[i].step != source.step)
      return Status::InvalidArgument("restore: part " + std::to_string(i) + " is shard " +
                                     std::to_string(source.parts[i].shard) + " of step " +
                                     std::to_string(source.parts[i].step));
  }
  if (options.num_shards == 0 || options.shard_index >= options.num_shards)
    return Status::InvalidArgument("restore: shard index out of range");
  return Status::Ok();
}

// How many of the part's files `dir` holds under their RocksDB names with the right size.
// The files a local restore point of `part` holds: a full part's own, or a delta's local_files.
const std::vector<CheckpointFile>& LocalFiles(const CheckpointPart& part) {
  return part.base_step >= 0 ? part.local_files : part.files;
}

size_t FilesPresent(const std::string& dir, const CheckpointPart& part) {
  size_t n = 0;
  for (const CheckpointFile& f : LocalFiles(part)) {
    struct stat st;
    const std::string path = dir + "/" + f.db_name;
    n += ::stat(path.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) == f.size_bytes;
  }
  return n;
}

// The local restore point at the checkpoint's step and timeline that is most like the part (a
// shard may hold several at one step: the checkpoint's, and one a clean stop took after it).
std::optional<RestoreMarker> PickLocal(const ShardOptions& options, const RestoreSource& source,
                                       const CheckpointPart& part) {
  std::optional<RestoreMarker> best;
  size_t best_present = 0;
  for (const RestoreMarker& m : ListRestorePoints(options.dir)) {
    if (m.step != source.step || m.timeline != source.manifest_timeline) continue;
    const size_t present = FilesPresent(options.dir + "/restore/" + m.name, part);
    if (!best || present >= best_present) {
      best = m;
      best_present = present;
    }
  }
  return best;
}

// Makes `dir` hold exactly the part's files: a file that is missing or fails its size or CRC is
// fetched again from the durable copy (logged, and named in `repaired`); files the part does
// not list are removed.
Status RepairLocal(const ShardOptions& options, const std::string& durable_root,
                   const CheckpointPart& part, const std::string& dir, RestoreReport* report) {
  std::set<std::string> listed;
  for (const CheckpointFile& f : LocalFiles(part)) {
    listed.insert(f.db_name);
    const std::string local = dir + "/" + f.db_name;
    StatusOr<FileSum> sum = Stream(local, -1);
    if (sum.ok() && Matches(*sum, f)) continue;
    const std::string why = !sum.ok() ? sum.status().message()
                                      : std::to_string(sum->size_bytes) + " bytes, CRC32C mismatch";
    // A delta part's restore point files are in no durable copy: the caller rebuilds the part
    // from its base and change log instead.
    if (part.base_step >= 0)
      return Status::DataLoss("restore point file " + local + " is damaged (" + why + ")");
    const std::string from = durable_root + "/" + f.path;
    TANDEM_RETURN_IF_ERROR(FetchAgain(from, local, f).WithContext("repairing " + local));
    TLOG_WARN("shard {}: restore point file {} is damaged ({}): repaired from the durable copy {}",
              options.shard_index, local, why, from);
    report->repaired.push_back(local);
  }
  std::error_code ec;
  std::vector<fs::path> extra;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (!listed.count(e.path().filename().string())) extra.push_back(e.path());
  if (ec) return Status::Unavailable("list " + dir + ": " + ec.message());
  for (const fs::path& p : extra) fs::remove_all(p, ec);
  return SyncDir(dir);
}

// Path 1: the local restore point `local`, renamed to `target` and repaired.
Status RestoreLocal(const ShardOptions& options, const RestoreSource& source,
                    const RestoreMarker& local, const std::string& target, RestoreReport* report) {
  const std::string restore = options.dir + "/restore/";
  std::error_code ec;
  if (local.name != target) {
    fs::remove(restore + target + ".done", ec);
    fs::remove_all(restore + target, ec);
    fs::rename(restore + local.name, restore + target, ec);
    if (ec) return Status::Unavailable("rename " + restore + local.name + ": " + ec.message());
  }
  report->kind = RestoreKind::kLocal;
  const CheckpointPart& part = source.parts[options.shard_index];
  return RepairLocal(options, DurableRoot(source, options.shard_index), part, restore + target,
                     report);
}

// Path 2: this shard's part of the durable copy, verified in full, becomes `target`.
Status RestoreDurable(const ShardOptions& options, const RestoreSource& source,
                      const std::string& target, RestoreReport* report) {
  const std::string root = DurableRoot(source, options.shard_index);
  const CheckpointPart& part = source.parts[options.shard_index];
  TANDEM_RETURN_IF_ERROR(VerifyPart(root, part, /*full=*/true));
  const std::string dir = options.dir + "/restore/" + target;
  std::error_code ec;
  fs::remove(dir + ".done", ec);
  fs::remove_all(dir, ec);
  TANDEM_RETURN_IF_ERROR(MaterializePart(root, part, dir));
  report->kind = RestoreKind::kDurable;
  return SyncDir(dir);
}

StoreOptions StoreFor(const ShardOptions& options, const std::string& dir, bool read_only) {
  StoreOptions so;
  so.db_dir = dir;
  so.tables = options.tables;
  so.seed = options.seed;
  so.cache_bytes = read_only ? kScanCacheBytes : options.cache_bytes;
  so.read_only = read_only;
  return so;
}

// Rows of one table waiting to be written, and the counters waiting for a flush.
struct RowBuffer {
  std::vector<uint64_t> ids;
  std::vector<uint8_t> rows;
};

// Copies the rows and admission counters of the materialized old part at `dir` that belong to
// this shard into `out`.
Status CopyOwnedRows(const ShardOptions& options, const std::string& dir, EmbeddingStore* out,
                     RestoreReport* report) {
  TANDEM_ASSIGN_OR_RETURN(auto in, EmbeddingStore::Open(StoreFor(options, dir, true)));
  const auto mine = [&](uint32_t table, uint64_t id) {
    return ShardOf(table, id, options.num_shards) == options.shard_index;
  };
  std::map<uint32_t, RowBuffer> buffers;
  Status failed;
  const auto drain = [&](uint32_t table, RowBuffer& b) {
    if (failed.ok() && !b.ids.empty()) failed = out->WriteRows(table, b.ids, b.rows.data());
    b.ids.clear();
    b.rows.clear();
  };
  TANDEM_RETURN_IF_ERROR(in->ForEachRow([&](uint32_t table, uint64_t id, const uint8_t* row) {
    if (!mine(table, id)) return;
    RowBuffer& b = buffers[table];
    b.ids.push_back(id);
    b.rows.insert(b.rows.end(), row, row + options.tables[table].row_bytes());
    ++report->rows;
    if (b.ids.size() >= kRowBatch) drain(table, b);
  }));
  for (auto& [table, b] : buffers) drain(table, b);
  size_t counters = 0;
  TANDEM_RETURN_IF_ERROR(in->ForEachAdmissionCount([&](uint32_t table, uint64_t id, uint64_t n) {
    if (!mine(table, id) || !failed.ok()) return;
    failed = out->SetAdmissionCount(table, id, n);
    if (failed.ok() && ++counters % kCounterBatch == 0) failed = out->FlushDirty();
  }));
  return failed;
}

// Path 3: every old part, verified in full, read; this shard's rows go into a fresh store at
// live/, whose checkpoint becomes `target`.
Status Repartition(const ShardOptions& options, const RestoreSource& source,
                   const std::string& target, RestoreReport* report) {
  for (uint32_t j = 0; j < source.num_ps; ++j)
    TANDEM_RETURN_IF_ERROR(VerifyPart(DurableRoot(source, j), source.parts[j], /*full=*/true));
  const std::string restore = options.dir + "/restore/";
  const std::string live = options.dir + "/live";
  std::error_code ec;
  fs::remove_all(live, ec);
  fs::remove(restore + target + ".done", ec);
  fs::remove_all(restore + target, ec);
  report->kind = RestoreKind::kRepartitioned;
  TANDEM_ASSIGN_OR_RETURN(auto out, EmbeddingStore::Open(StoreFor(options, live, false)));
  for (uint32_t j = 0; j < source.num_ps; ++j) {
    const std::string tmp = restore + "old-part-" + std::to_string(j) + ".tmp";
    fs::remove_all(tmp, ec);
    TANDEM_RETURN_IF_ERROR(MaterializePart(DurableRoot(source, j), source.parts[j], tmp));
    Status s = CopyOwnedRows(options, tmp, out.get(), report);
    fs::remove_all(tmp, ec);
    TANDEM_RETURN_IF_ERROR(s.WithContext("re-partitioning old shard " + std::to_string(j)));
  }
  TANDEM_RETURN_IF_ERROR(out->CreateCheckpoint(restore + target));
  return SyncDir(restore + target);
}

// Marks `target` complete, then deletes what belongs to the abandoned history: every other
// restore point, the push log and the live DB.
Status Finish(const ShardOptions& options, const RestoreMarker& marker) {
  const std::string restore = options.dir + "/restore/";
  TANDEM_RETURN_IF_ERROR(WriteRestoreMarker(restore + marker.name + ".done", marker));
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (const auto& e : fs::directory_iterator(restore, ec)) {
    const std::string name = e.path().filename().string();
    if (name != marker.name && name != marker.name + ".done") doomed.push_back(e.path());
  }
  if (ec) return Status::Unavailable("list " + restore + ": " + ec.message());
  doomed.push_back(options.dir + "/log");
  doomed.push_back(options.dir + "/live");
  for (const fs::path& p : doomed) {
    fs::remove_all(p, ec);
    if (ec) return Status::Unavailable("remove " + p.string() + ": " + ec.message());
  }
  return Status::Ok();
}

}  // namespace

StatusOr<RestoreReport> PrepareShardForResume(const ShardOptions& options,
                                              const RestoreSource& source) {
  TANDEM_RETURN_IF_ERROR(CheckSource(options, source));
  TANDEM_ASSIGN_OR_RETURN(auto lock, DirLock::Take(options.dir));
  std::error_code ec;
  fs::create_directories(options.dir + "/restore", ec);
  if (ec) return Status::Unavailable("cannot create " + options.dir + "/restore: " + ec.message());
  // The new push log starts at LSN 1 (PushLog::Open on an empty directory), so replay after
  // this restore point must start there too, or the first records would be skipped.
  RestoreMarker marker;
  marker.timeline = source.run_timeline;
  marker.step = source.step;
  marker.replay_from_lsn = 1;
  marker.name = RestorePointName(marker);
  RestoreReport report;
  if (source.num_ps != options.num_shards) {
    TANDEM_RETURN_IF_ERROR(Repartition(options, source, marker.name, &report));
  } else if (auto local = PickLocal(options, source, source.parts[options.shard_index])) {
    Status s = RestoreLocal(options, source, *local, marker.name, &report);
    if (!s.ok() && s.IsDataLoss() && source.parts[options.shard_index].base_step >= 0) {
      TLOG_WARN(
          "shard {}: {}: the checkpoint's part is a delta, restoring it from the durable "
          "copy instead",
          options.shard_index, s.message());
      report.repaired.clear();
      s = RestoreDurable(options, source, marker.name, &report);
    }
    TANDEM_RETURN_IF_ERROR(s);
  } else {
    TANDEM_RETURN_IF_ERROR(RestoreDurable(options, source, marker.name, &report));
  }
  TANDEM_RETURN_IF_ERROR(Finish(options, marker));
  return report;
}

Status ClearShardForFreshStart(const ShardOptions& options, bool* cleared) {
  if (cleared != nullptr) *cleared = false;
  std::error_code ec;
  if (!fs::exists(options.dir, ec)) return Status::Ok();
  TANDEM_ASSIGN_OR_RETURN(auto lock, DirLock::Take(options.dir));
  for (const auto& entry : fs::directory_iterator(options.dir, ec)) {
    if (entry.path().filename() == "LOCK") continue;  // held by us until we return
    fs::remove_all(entry.path(), ec);
    if (ec)
      return Status::Unavailable("cannot remove " + entry.path().string() + ": " + ec.message());
    if (cleared != nullptr) *cleared = true;
  }
  if (ec) return Status::Unavailable("cannot list " + options.dir + ": " + ec.message());
  return SyncDir(options.dir);
}

}  // namespace tandem::ps
