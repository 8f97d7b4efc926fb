#include "server/ps/push_log.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "common/crc32c.h"
#include "common/durable_file.h"
#include "common/errno_status.h"
#include "common/log.h"

namespace tandem::ps {

// The format is little-endian and Append writes the id and gradient arrays straight from the
// caller's memory, so the code assumes a little-endian host (every machine we target).
static_assert(std::endian::native == std::endian::little);

namespace {

namespace fs = std::filesystem;

constexpr size_t kRecordHeaderBytes = 8;   // u32 length, u32 crc32c
constexpr size_t kFixedPayloadBytes = 48;  // lsn .. table count
constexpr size_t kTableHeaderBytes = 16;   // table id, row count, dim, dtype
constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 30;
constexpr uint32_t kDtypeF32 = 0;
constexpr size_t kLsnDigits = 20;
// Direct I/O: offsets, sizes and buffers aligned to 4 KiB suit every logical block size in use;
// records pass through a 1 MiB chunk (larger ones in several writes).
constexpr size_t kBlock = kDirectIoBlock;
constexpr size_t kChunk = size_t{1} << 20;

// The tail of a segment written with direct I/O: zeros up to the next block.
bool IsZeroPadding(const uint8_t* p, size_t n) {
  if (n >= kBlock) return false;
  for (size_t i = 0; i < n; ++i)
    if (p[i] != 0) return false;
  return true;
}

void Put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, sizeof v); }
void Put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, sizeof v); }
uint32_t Get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::string SegmentPath(const std::string& dir, uint64_t first_lsn) {
  char name[kLsnDigits + 8];
  std::snprintf(name, sizeof name, "%020llu.log", static_cast<unsigned long long>(first_lsn));
  return dir + "/" + name;
}

// A read-only view of a file's first `size` bytes.
class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile() {
    if (size_ > 0) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  Status Map(int fd, size_t size, const std::string& path) {
    if (size == 0) return Status::Ok();  // mmap rejects empty ranges
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return ErrnoToStatus(errno, "mmap " + path);
    ::madvise(p, size, MADV_SEQUENTIAL);
    data_ = static_cast<const uint8_t*>(p);
    size_ = size;
    return Status::Ok();
  }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Checks that payload[0, n) is exactly one well-formed payload; fills *out when it is non-null.
Status ParsePayload(const uint8_t* p, size_t n, PushRecord* out) {
  if (n < kFixedPayloadBytes) return Status::DataLoss("payload shorter than its fixed part");
  const uint32_t num_tables = Get32(p + 44);
  if (out != nullptr) {
    PushHeader& h = out->header;
    h.lsn = Get64(p);
    h.timeline = Get64(p + 8);
    h.step = static_cast<int64_t>(Get64(p + 16));
    h.rank = Get32(p + 24);
    h.shard = Get32(p + 28);
    h.incarnation = Get64(p + 32);
    h.flags = Get32(p + 40);
    out->tables.clear();
  }
  size_t off = kFixedPayloadBytes;
  for (uint32_t t = 0; t < num_tables; ++t) {
    if (n - off < kTableHeaderBytes) return Status::DataLoss("table header past the end");
    const uint32_t rows = Get32(p + off + 4);
    const uint32_t dim = Get32(p + off + 8);
    if (Get32(p + off + 12) != kDtypeF32) return Status::DataLoss("unknown dtype");
    const uint64_t ids_bytes = uint64_t{rows} * sizeof(uint64_t);
    const uint64_t num_grads = uint64_t{rows} * dim;  // < 2^64: both factors are u32
    const size_t body = n - off - kTableHeaderBytes;
    if (ids_bytes > body || num_grads > (body - ids_bytes) / sizeof(float))
      return Status::DataLoss("table rows past the end");
    if (out != nullptr) {
      PushTable& table = out->tables.emplace_back();
      table.table_id = Get32(p + off);
      table.dim = dim;
      table.ids.resize(rows);
      table.grads.resize(num_grads);
      if (rows > 0) std::memcpy(table.ids.data(), p + off + kTableHeaderBytes, ids_bytes);
      if (num_grads > 0) {
        std::memcpy(table.grads.data(), p + off + kTableHeaderBytes + ids_bytes,
                    num_grads * sizeof(float));
      }
    }
    off += kTableHeaderBytes + ids_bytes + num_grads * sizeof(float);
  }
  if (off != n) return Status::DataLoss("bytes left after the last table");
  return Status::Ok();
}

// Checks the record at data[off]; on success sets *record_bytes (header + payload).
Status CheckRecordAt(const uint8_t* data, size_t size, size_t off, size_t* record_bytes) {
  if (size - off < kRecordHeaderBytes) return Status::DataLoss("incomplete record header");
  const uint32_t length = Get32(data + off);
  if (length < kFixedPayloadBytes || length > kMaxPayloadBytes)
    return Status::DataLoss("implausible record length " + std::to_string(length));
  if (length > size - off - kRecordHeaderBytes) return Status::DataLoss("incomplete record");
  const uint8_t* payload = data + off + kRecordHeaderBytes;
  if (Crc32c(payload, length) != Get32(data + off + 4)) return Status::DataLoss("bad crc");
  TANDEM_RETURN_IF_ERROR(ParsePayload(payload, length, nullptr));
  *record_bytes = kRecordHeaderBytes + length;
  return Status::Ok();
}

// True if a well-formed record with lsn >= next_lsn starts anywhere after data[bad_off]: then
// the damage at bad_off is not a torn tail but lost data. The LSN filter keeps the search about
// linear: garbage rarely passes it, so few candidates cost a CRC.
bool ValidRecordFollows(const uint8_t* data, size_t size, size_t bad_off, uint64_t next_lsn) {
  const uint64_t max_records = (size - bad_off) / (kRecordHeaderBytes + kFixedPayloadBytes);
  for (size_t y = bad_off + 1; size - y >= kRecordHeaderBytes + kFixedPayloadBytes; ++y) {
    const uint32_t length = Get32(data + y);
    if (length < kFixedPayloadBytes || length > size - y - kRecordHeaderBytes) continue;
    const uint64_t lsn = Get64(data + y + kRecordHeaderBytes);
    if (lsn < next_lsn || lsn - next_lsn > max_records) continue;
    size_t record_bytes = 0;
    if (CheckRecordAt(data, size, y, &record_bytes).ok()) return true;
  }
  return false;
}

struct ScanResult {
  uint64_t last_lsn = 0;
  size_t valid_bytes = 0;  // < file size: a torn tail or padding to drop (newest segment only)
  std::string tail_reason;
  bool padding = false;  // what follows valid_bytes is a direct write's zero padding
};

// Validates every record of one segment whose first record must carry `first_lsn`.
Status ScanRecords(const std::string& path, const uint8_t* data, size_t size, uint64_t first_lsn,
                   bool newest, ScanResult* result) {
  uint64_t next = first_lsn;
  size_t off = 0;
  while (off < size) {
    size_t record_bytes = 0;
    Status s = CheckRecordAt(data, size, off, &record_bytes);
    const std::string where = path + " at offset " + std::to_string(off);
    if (!s.ok() && IsZeroPadding(data + off, size - off)) break;
    if (s.ok()) {
      const uint64_t lsn = Get64(data + off + kRecordHeaderBytes);
      if (lsn != next) {
        return Status::DataLoss(where + ": lsn " + std::to_string(lsn) + ", expected " +
                                std::to_string(next));
      }
      ++next;
      off += record_bytes;
      continue;
    }
    if (!newest) return Status::DataLoss(where + " (older segment): " + s.message());
    if (ValidRecordFollows(data, size, off, next))
      return Status::DataLoss(where + ": " + s.message() + ", followed by valid records");
    result->tail_reason = s.message();
    break;
  }
  result->last_lsn = next - 1;
  result->valid_bytes = off;
  result->padding = result->tail_reason.empty() && off < size;
  return Status::Ok();
}

// Lists `<dir>/<20 digits>.log` in LSN order; other files are left alone.
StatusOr<std::vector<std::pair<uint64_t, std::string>>> ListSegmentFiles(const std::string& dir) {
  std::vector<std::pair<uint64_t, std::string>> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() != kLsnDigits + 4 || !name.ends_with(".log")) continue;
    uint64_t lsn = 0;
    auto [ptr, err] = std::from_chars(name.data(), name.data() + kLsnDigits, lsn);
    if (err != std::errc() || ptr != name.data() + kLsnDigits || lsn == 0) continue;
    files.emplace_back(lsn, dir + "/" + name);
  }
  if (ec) return Status::Unavailable("list " + dir + ": " + ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

// Fills the record header and table headers into *head (sized here) and lists the record's
// pieces in *iov, pointing at the caller's id/grad arrays. The lsn and crc are set later.
StatusOr<uint64_t> BuildRecord(const PushHeader& h, std::span<const PushTableView> tables,
                               std::vector<uint8_t>* head, std::vector<iovec>* iov) {
  if (tables.size() > UINT32_MAX) return Status::InvalidArgument("too many tables");
  head->assign(kRecordHeaderBytes + kFixedPayloadBytes + kTableHeaderBytes * tables.size(), 0);
  uint8_t* p = head->data() + kRecordHeaderBytes;
  Put64(p + 8, h.timeline);
  Put64(p + 16, static_cast<uint64_t>(h.step));
  Put32(p + 24, h.rank);
  Put32(p + 28, h.shard);
  Put64(p + 32, h.incarnation);
  Put32(p + 40, h.flags);
  Put32(p + 44, static_cast<uint32_t>(tables.size()));
  iov->assign(1, iovec{head->data(), kRecordHeaderBytes + kFixedPayloadBytes});
  uint64_t payload = kFixedPayloadBytes;
  for (size_t t = 0; t < tables.size(); ++t) {
    const PushTableView& tv = tables[t];
    // Division, not multiplication: a huge ids.size() * dim must not wrap around to a match.
    const bool sizes_match =
        tv.dim == 0 ? tv.grads.empty()
                    : tv.grads.size() % tv.dim == 0 && tv.grads.size() / tv.dim == tv.ids.size();
    if (tv.ids.size() > UINT32_MAX || !sizes_match) {
      return Status::InvalidArgument("table " + std::to_string(tv.table_id) + ": " +
                                     std::to_string(tv.grads.size()) + " gradients for " +
                                     std::to_string(tv.ids.size()) + " ids of dim " +
                                     std::to_string(tv.dim));
    }
    uint8_t* th = head->data() + kRecordHeaderBytes + kFixedPayloadBytes + kTableHeaderBytes * t;
    Put32(th, tv.table_id);
    Put32(th + 4, static_cast<uint32_t>(tv.ids.size()));
    Put32(th + 8, tv.dim);
    Put32(th + 12, kDtypeF32);
    iov->push_back({th, kTableHeaderBytes});
    // writev takes non-const bases but only reads them.
    if (!tv.ids.empty())
      iov->push_back({const_cast<uint64_t*>(tv.ids.data()), tv.ids.size_bytes()});
    if (!tv.grads.empty())
      iov->push_back({const_cast<float*>(tv.grads.data()), tv.grads.size_bytes()});
    payload += kTableHeaderBytes + tv.ids.size_bytes() + tv.grads.size_bytes();
    if (payload > kMaxPayloadBytes) return Status::InvalidArgument("push record over 1 GiB");
  }
  Put32(head->data(), static_cast<uint32_t>(payload));
  return kRecordHeaderBytes + payload;
}

// Sets the lsn and the crc over the whole payload (iov[0] past the record header, then the rest).
void SealRecord(uint64_t lsn, std::vector<uint8_t>* head, const std::vector<iovec>& iov) {
  Put64(head->data() + kRecordHeaderBytes, lsn);
  uint32_t crc =
      Crc32cExtend(0, head->data() + kRecordHeaderBytes, iov[0].iov_len - kRecordHeaderBytes);
  for (size_t i = 1; i < iov.size(); ++i) crc = Crc32cExtend(crc, iov[i].iov_base, iov[i].iov_len);
  Put32(head->data() + 4, crc);
}

}  // namespace

// Owns one file descriptor.
class PushLog::ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  const int fd_;
};

PushLog::PushLog(const PushLogOptions& options) : options_(options) {}

PushLog::~PushLog() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    flush_cv_.Signal();
  }
  if (flusher_.joinable()) flusher_.join();
  // A clean close leaves the file at its last record; Open would cut the padding anyway.
  MutexLock lock(&mu_);
  if (direct_ && !segments_.empty() && broken_.ok())
    (void)::ftruncate(current_->get(), static_cast<off_t>(segments_.back().bytes));
}

StatusOr<std::unique_ptr<PushLog>> PushLog::Open(const PushLogOptions& options) {
  if (options.dir.empty()) return Status::InvalidArgument("push log dir is empty");
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec) return Status::Unavailable("create " + options.dir + ": " + ec.message());
  TANDEM_ASSIGN_OR_RETURN(auto files, ListSegmentFiles(options.dir));
  std::vector<Segment> segments;
  for (auto& [lsn, path] : files) segments.push_back({std::move(path), lsn, lsn - 1, 0});
  // `new` because the constructor is private: only Open makes a PushLog.
  std::unique_ptr<PushLog> log(new PushLog(options));
  TANDEM_RETURN_IF_ERROR(log->Recover(std::move(segments)));
  if (options.durability == Durability::kMachine)
    log->flusher_ = std::thread([p = log.get()] { p->FlushLoop(); });
  return StatusOr<std::unique_ptr<PushLog>>(std::move(log));
}

// Validates the segments found by Open, repairs a torn tail and opens the newest for appends.
Status PushLog::Recover(std::vector<Segment> segments) {
  MutexLock lock(&mu_);  // nothing runs concurrently yet; taken for the annotations
  uint64_t expected = segments.empty() ? 1 : segments.front().first_lsn;
  for (size_t i = 0; i < segments.size(); ++i) {
    Segment& seg = segments[i];
    const bool newest = i + 1 == segments.size();
    if (seg.first_lsn != expected) {
      return Status::DataLoss(seg.path + ": starts at lsn " + std::to_string(seg.first_lsn) +
                              ", expected " + std::to_string(expected) + " (segment missing?)");
    }
    TANDEM_RETURN_IF_ERROR(ScanAndRepair(&seg, newest));
    // Roll never leaves an empty segment behind a newer one.
    if (!newest && seg.bytes == 0) return Status::DataLoss(seg.path + ": empty older segment");
    expected = seg.last_lsn + 1;
    total_bytes_ += seg.bytes;
  }
  last_lsn_ = expected - 1;
  synced_lsn_ = last_lsn_;
  segments_ = std::move(segments);
  if (segments_.empty()) return CreateSegmentLocked(1);
  return OpenNewestForAppend();
}

// Scans one segment; in the newest one, cuts a torn tail off the file.
Status PushLog::ScanAndRepair(Segment* seg, bool newest) {
  ScopedFd fd(::open(seg->path.c_str(), (newest ? O_RDWR : O_RDONLY) | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoToStatus(errno, "open " + seg->path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoToStatus(errno, "stat " + seg->path);
  const size_t size = static_cast<size_t>(st.st_size);
  MappedFile map;
  TANDEM_RETURN_IF_ERROR(map.Map(fd.get(), size, seg->path));
  ScanResult scan;
  TANDEM_RETURN_IF_ERROR(ScanRecords(seg->path, map.data(), size, seg->first_lsn, newest, &scan));
  seg->last_lsn = scan.last_lsn;
  seg->bytes = scan.valid_bytes;
  // An older segment keeps its padding (it is opened read-only); Replay stops at seg->bytes.
  const bool torn = scan.valid_bytes < size && (newest || !scan.padding);
  if (torn) {
    // Only an unacknowledged write can be torn (a crash mid-write, or power loss before its
    // fdatasync), so dropping it loses nothing that was promised.
    if (!scan.padding) {
      TLOG_WARN("push log {}: dropping torn tail at offset {} ({} bytes): {}", seg->path,
                scan.valid_bytes, size - scan.valid_bytes, scan.tail_reason);
    }
    if (::ftruncate(fd.get(), static_cast<off_t>(scan.valid_bytes)) != 0)
      return ErrnoToStatus(errno, "truncate " + seg->path);
  }
  // A cut must be durable before new records land after it. In machine mode, records that a
  // killed process wrote but never synced must be durable too before anything is acknowledged
  // on their strength (a resent push that is already logged is acknowledged, PROTOCOLS §2.1).
  if ((torn || options_.durability == Durability::kMachine) && ::fdatasync(fd.get()) != 0)
    return ErrnoToStatus(errno, "fdatasync " + seg->path);
  return Status::Ok();
}

Status PushLog::OpenNewestForAppend() {
  const Segment& seg = segments_.back();
  TANDEM_RETURN_IF_ERROR(OpenForAppendLocked(seg.path, /*create=*/false));
  if (!direct_) return Status::Ok();
  // The next direct write starts at the last whole block, so it needs the bytes after it.
  const size_t keep = seg.bytes - BlockFloor(seg.bytes);
  if (keep == 0) return Status::Ok();
  ScopedFd in(::open(seg.path.c_str(), O_RDONLY | O_CLOEXEC));
  if (in.get() < 0) return ErrnoToStatus(errno, "open " + seg.path);
  const ssize_t n = ::pread(in.get(), tail_.get(), keep, static_cast<off_t>(BlockFloor(seg.bytes)));
  if (n < 0) return ErrnoToStatus(errno, "read " + seg.path);
  if (static_cast<size_t>(n) != keep) return Status::DataLoss(seg.path + ": shorter than scanned");
  return Status::Ok();
}

// Opens `path` for appends: O_DIRECT when asked for and the file system takes it, else
// O_APPEND (after a failed write is truncated away, the next write lands at the new end).
Status PushLog::OpenForAppendLocked(const std::string& path, bool create) {
  const int flags = O_WRONLY | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0);
  int fd = -1;
  direct_ = false;
  if (options_.direct_io && !direct_refused_) {
    fd = ::open(path.c_str(), flags | O_DIRECT, 0644);
    if (fd < 0 && errno != EINVAL) return ErrnoToStatus(errno, "open " + path);
    if (fd >= 0 && chunk_ == nullptr) {
      chunk_ = AllocateAligned(kChunk);
      tail_ = AllocateAligned(kBlock);
      if (chunk_ == nullptr || tail_ == nullptr) {
        ::close(fd);
        return Status::ResourceExhausted("push log: no memory for the direct I/O chunk");
      }
    }
    direct_ = fd >= 0;
  }
  if (fd < 0) {
    // EINVAL from O_DIRECT (tmpfs before Linux 6.6, some FUSE file systems) may come after the
    // file was created, so the buffered open must not insist on creating it.
    fd = ::open(path.c_str(), (flags & ~O_EXCL) | O_APPEND, 0644);
    if (fd < 0) return ErrnoToStatus(errno, (create ? "create " : "open ") + path);
  }
  current_ = std::make_shared<ScopedFd>(fd);
  return Status::Ok();
}

Status PushLog::CreateSegmentLocked(uint64_t first_lsn) {
  const std::string path = SegmentPath(options_.dir, first_lsn);
  TANDEM_RETURN_IF_ERROR(OpenForAppendLocked(path, /*create=*/true));
  segments_.push_back({path, first_lsn, first_lsn - 1, 0});
  // The file exists now, so it must be the one we append to whatever happens next: records
  // in an older segment after it would break LSN continuity on reopen.
  Status s = FsyncDir(options_.dir);
  if (!s.ok()) broken_ = s;
  return s;
}

Status PushLog::Append(PushHeader* header, std::span<const PushTableView> tables) {
  std::vector<uint8_t> head;
  std::vector<iovec> iov;
  TANDEM_ASSIGN_OR_RETURN(const uint64_t record_bytes, BuildRecord(*header, tables, &head, &iov));
  MutexLock lock(&mu_);
  TANDEM_RETURN_IF_ERROR(BrokenLocked());
  const uint64_t lsn = last_lsn_ + 1;
  // TODO(perf): the crc covers the lsn, so it is computed under the lock; precompute the rest
  // and combine if appends ever contend here.
  SealRecord(lsn, &head, iov);
  TANDEM_RETURN_IF_ERROR(WriteRecordLocked(&iov, lsn, record_bytes));
  if (options_.durability == Durability::kMachine) {
    flush_cv_.Signal();
    TANDEM_RETURN_IF_ERROR(WaitSyncedLocked(lsn));
  }
  header->lsn = lsn;
  return Status::Ok();
}

StatusOr<uint64_t> PushLog::Reserve(std::span<const PushTableView> tables) {
  std::vector<uint8_t> head;
  std::vector<iovec> iov;
  TANDEM_ASSIGN_OR_RETURN(const uint64_t record_bytes,
                          BuildRecord(PushHeader{}, tables, &head, &iov));
  MutexLock lock(&mu_);
  TANDEM_RETURN_IF_ERROR(BrokenLocked());
  if (!direct_ || direct_refused_ || fallocate_refused_)
    return Status::Unimplemented("push log: no reservation without direct writes and fallocate");
  const Segment& seg = segments_.back();
  // Exactly the blocks the direct write covers: the file then has the size that write gives it,
  // and what lies past the last record is zeros, which Open cuts off the newest segment.
  const uint64_t from = BlockFloor(seg.bytes), to = BlockCeil(seg.bytes + record_bytes);
  if (::fallocate(current_->get(), 0, static_cast<off_t>(from), static_cast<off_t>(to - from)) !=
      0) {
    if (errno == EOPNOTSUPP || errno == ENOSYS) {
      fallocate_refused_ = true;
      return Status::Unimplemented("push log: " + seg.path + " has no fallocate");
    }
    return ErrnoToStatus(errno,
                         "reserve " + std::to_string(record_bytes) + " bytes in " + seg.path);
  }
  return last_lsn_ + 1;
}

Status PushLog::WriteRecordLocked(std::vector<iovec>* iov, uint64_t lsn, uint64_t record_bytes) {
  Segment& seg = segments_.back();
  int fd = current_->get();
  int direct_errno = 0;
  Status s = direct_ ? WriteDirectLocked(fd, *iov, seg.bytes, &direct_errno) : WriteAll(fd, iov);
  if (!s.ok() && direct_errno == EINVAL) {
    // O_DIRECT was taken at open, but not our 4 KiB alignment: the same record, buffered.
    TLOG_WARN("push log {}: {}; writing buffered from now on", seg.path, s.ToString());
    direct_refused_ = true;
    if (::ftruncate(fd, static_cast<off_t>(seg.bytes)) != 0) {
      broken_ = ErrnoToStatus(errno, "truncate " + seg.path + " after a refused direct write");
      synced_cv_.SignalAll();
      return broken_;
    }
    TANDEM_RETURN_IF_ERROR(OpenForAppendLocked(seg.path, /*create=*/false));
    fd = current_->get();
    s = WriteAll(fd, iov);
  }
  if (s.ok()) {
    seg.bytes += record_bytes;
    seg.last_lsn = lsn;
    total_bytes_ += record_bytes;
    last_lsn_ = lsn;
    return Status::Ok();
  }
  // Cut any partial record off, so the next record follows the last good one.
  if (::ftruncate(fd, static_cast<off_t>(seg.bytes)) != 0) {
    broken_ = ErrnoToStatus(errno, "truncate " + seg.path + " after a failed write");
    synced_cv_.SignalAll();
  }
  return s.WithContext("append lsn " + std::to_string(lsn) + " to " + seg.path);
}

// Writes every byte of *iov (consumed as it goes), retrying short writes and EINTR.
Status PushLog::WriteAll(int fd, std::vector<iovec>* iov) const {
  size_t i = 0;
  while (i < iov->size()) {
    const int count = static_cast<int>(std::min<size_t>(iov->size() - i, IOV_MAX));
    const ssize_t n = options_.write_for_test ? options_.write_for_test(fd, &(*iov)[i], count, -1)
                                              : ::writev(fd, &(*iov)[i], count);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, "write");
    if (n == 0) return Status::Unavailable("write made no progress");
    for (size_t left = static_cast<size_t>(n); left > 0;) {
      iovec& v = (*iov)[i];
      const size_t used = std::min(left, v.iov_len);
      v.iov_base = static_cast<uint8_t*>(v.iov_base) + used;
      v.iov_len -= used;
      left -= used;
      if (v.iov_len == 0) ++i;
    }
  }
  return Status::Ok();
}

// Writes the record in *iov at file offset `start` with O_DIRECT: whole blocks from the one that
// holds `start` (its first bytes come from tail_), the last one padded with zeros. tail_ takes
// the new partial block only once everything is written, so a failed write leaves it as it was.
Status PushLog::WriteDirectLocked(int fd, const std::vector<iovec>& iov, uint64_t start,
                                  int* failed_errno) {
  // The caller's context names the segment's path.
  const std::string what = "the open segment";
  uint8_t* buf = chunk_.get();
  uint64_t offset = BlockFloor(start);
  size_t fill = start - offset;
  std::memcpy(buf, tail_.get(), fill);
  for (const iovec& v : iov) {
    const uint8_t* p = static_cast<const uint8_t*>(v.iov_base);
    for (size_t left = v.iov_len; left > 0;) {
      const size_t n = std::min(left, kChunk - fill);
      std::memcpy(buf + fill, p, n);
      fill += n;
      p += n;
      left -= n;
      if (fill == kChunk) {
        TANDEM_RETURN_IF_ERROR(
            WriteDirectAt(fd, buf, kChunk, offset, what, options_.write_for_test, failed_errno));
        offset += kChunk;
        fill = 0;
      }
    }
  }
  const size_t whole = BlockFloor(fill), padded = BlockCeil(fill);
  std::memset(buf + fill, 0, padded - fill);
  if (padded > 0) {
    TANDEM_RETURN_IF_ERROR(
        WriteDirectAt(fd, buf, padded, offset, what, options_.write_for_test, failed_errno));
  }
  std::memcpy(tail_.get(), buf + whole, fill - whole);
  return Status::Ok();
}

// Machine mode: blocks (mu_ released while waiting) until an fdatasync covering `lsn` is done.
Status PushLog::WaitSyncedLocked(uint64_t lsn) {
  while (synced_lsn_ < lsn && broken_.ok()) synced_cv_.Wait();
  return synced_lsn_ >= lsn ? Status::Ok() : broken_;
}

Status PushLog::BrokenLocked() const {
  if (broken_.ok()) return Status::Ok();
  return Status::FailedPrecondition("push log unusable until reopened: " + broken_.ToString());
}

// The group-commit flusher: one fdatasync covers every record written before it starts; syncs
// start at most every options_.group so that concurrent appends share them.
void PushLog::FlushLoop() {
  auto next_sync = std::chrono::steady_clock::time_point::min();
  mu_.Lock();
  while (true) {
    while (!stop_ && (synced_lsn_ >= last_lsn_ || !broken_.ok())) flush_cv_.Wait();
    if (synced_lsn_ >= last_lsn_ || !broken_.ok()) break;  // stopping, nothing left to sync
    while (!stop_ && std::chrono::steady_clock::now() < next_sync) flush_cv_.WaitUntil(next_sync);
    next_sync = std::chrono::steady_clock::now() + options_.group;
    // Every unsynced record is in current_: Roll syncs the old segment before switching.
    const uint64_t target = last_lsn_;
    const std::shared_ptr<ScopedFd> file = current_;
    const std::string path = segments_.back().path;
    mu_.Unlock();
    const int rc = ::fdatasync(file->get());
    const int err = errno;
    mu_.Lock();
    ++sync_count_;
    if (rc != 0) {
      // After a failed fdatasync the kernel may have dropped the dirty pages (and a retry would
      // falsely succeed), so the log stops accepting appends.
      broken_ = ErrnoToStatus(err, "fdatasync " + path);
    } else {
      synced_lsn_ = std::max(synced_lsn_, target);
    }
    synced_cv_.SignalAll();
  }
  mu_.Unlock();
}

Status PushLog::Replay(uint64_t after_lsn,
                       const std::function<Status(const PushRecord&)>& fn) const {
  struct Source {
    std::string path;
    std::unique_ptr<ScopedFd> fd;
    uint64_t bytes;
  };
  std::vector<Source> sources;
  {
    // Open the files under the lock so that DeleteThrough cannot unlink one in between; reading
    // needs no lock: records below the snapshotted sizes never change.
    MutexLock lock(&mu_);
    if (after_lsn < segments_.front().first_lsn - 1) {
      return Status::OutOfRange("push log records after lsn " + std::to_string(after_lsn) +
                                " were deleted; the oldest kept is " +
                                std::to_string(segments_.front().first_lsn));
    }
    for (const Segment& seg : segments_) {
      if (seg.last_lsn <= after_lsn || seg.bytes == 0) continue;
      int fd = ::open(seg.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return ErrnoToStatus(errno, "open " + seg.path);
      sources.push_back({seg.path, std::make_unique<ScopedFd>(fd), seg.bytes});
    }
  }
  PushRecord record;
  for (const Source& src : sources) {
    MappedFile map;
    TANDEM_RETURN_IF_ERROR(map.Map(src.fd->get(), src.bytes, src.path));
    for (size_t off = 0; off < src.bytes;) {
      size_t record_bytes = 0;
      Status s = CheckRecordAt(map.data(), src.bytes, off, &record_bytes);
      if (!s.ok()) return s.WithContext(src.path + " at offset " + std::to_string(off));
      const uint8_t* payload = map.data() + off + kRecordHeaderBytes;
      off += record_bytes;
      if (Get64(payload) <= after_lsn) continue;
      TANDEM_RETURN_IF_ERROR(ParsePayload(payload, record_bytes - kRecordHeaderBytes, &record));
      TANDEM_RETURN_IF_ERROR(fn(record));
    }
  }
  return Status::Ok();
}

Status PushLog::Roll() {
  MutexLock lock(&mu_);
  TANDEM_RETURN_IF_ERROR(BrokenLocked());
  if (segments_.back().bytes == 0) return Status::Ok();  // the next record already begins it
  // An older segment ends at its last record (Open requires it of every segment but the newest).
  if (direct_ && ::ftruncate(current_->get(), static_cast<off_t>(segments_.back().bytes)) != 0) {
    broken_ = ErrnoToStatus(errno, "truncate " + segments_.back().path + " to its last record");
    synced_cv_.SignalAll();
    return broken_;
  }
  if (options_.durability == Durability::kMachine && synced_lsn_ < last_lsn_) {
    // Synced under the lock on purpose (STYLE rule zero): Roll is rare (one per restore point),
    // and finishing the old segment on disk before any record enters the new one means damage
    // in an older segment is always real data loss, which Open can then refuse.
    if (::fdatasync(current_->get()) != 0) {
      broken_ = ErrnoToStatus(errno, "fdatasync " + segments_.back().path);
      synced_cv_.SignalAll();
      return broken_;
    }
    ++sync_count_;
    synced_lsn_ = last_lsn_;
    synced_cv_.SignalAll();
  }
  return CreateSegmentLocked(last_lsn_ + 1);
}

Status PushLog::DeleteThrough(uint64_t lsn) {
  MutexLock delete_lock(&delete_mu_);
  std::vector<std::string> doomed;
  {
    MutexLock lock(&mu_);
    // Segments are in LSN order, so the deletable ones are a prefix; back() is the open one.
    size_t n = 0;
    while (n + 1 < segments_.size() && segments_[n].last_lsn <= lsn) {
      total_bytes_ -= segments_[n].bytes;
      doomed.push_back(segments_[n].path);
      ++n;
    }
    segments_.erase(segments_.begin(), segments_.begin() + static_cast<ptrdiff_t>(n));
  }
  if (doomed.empty()) return Status::Ok();
  // Oldest first and stopping at the first failure: the files left are always a contiguous
  // run of LSNs, which is what Open requires.
  for (const std::string& path : doomed) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      return ErrnoToStatus(errno, "unlink " + path);
  }
  return FsyncDir(options_.dir);
}

uint64_t PushLog::last_lsn() const {
  MutexLock lock(&mu_);
  return last_lsn_;
}

uint64_t PushLog::total_bytes() const {
  MutexLock lock(&mu_);
  return total_bytes_;
}

bool PushLog::alarm() const { return total_bytes() > options_.max_bytes; }

uint64_t PushLog::sync_count() const {
  MutexLock lock(&mu_);
  return sync_count_;
}

bool PushLog::direct_io() const {
  MutexLock lock(&mu_);
  return direct_;
}

}  // namespace tandem::ps
