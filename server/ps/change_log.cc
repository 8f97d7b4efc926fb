#include "server/ps/change_log.h"

#include <fcntl.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/write_batch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "common/crc32c.h"
#include "common/errno_status.h"
#include "common/log.h"
#include "server/ps/file_io.h"

namespace tandem::ps {
namespace {

namespace fs = std::filesystem;

// Appends reach the file in writes of about this size: a writeback batch is a few KiB.
constexpr size_t kBufferBytes = 1 << 20;
constexpr size_t kHeaderBytes = 8;
// A record larger than this is damage, not a batch (FlushDirty writes batches of ~4 MiB).
constexpr uint32_t kMaxRecordBytes = 1u << 30;

// A replayed SST segment is given to readers in WriteBatches of about this many bytes.
constexpr size_t kSstBatchBytes = 4 << 20;

std::string SegmentPath(const std::string& dir, uint64_t seq, const char* suffix = ".log") {
  char name[32];
  std::snprintf(name, sizeof name, "%016llu%s", static_cast<unsigned long long>(seq), suffix);
  return dir + "/" + name;
}

Status ForEachSstBatch(const std::string& path,
                       const std::function<Status(std::string&& batch_rep)>& fn) {
  rocksdb::Options options;
  rocksdb::SstFileReader reader(options);
  rocksdb::Status st = reader.Open(path);
  if (!st.ok()) return Status::DataLoss("change log: " + path + ": " + st.ToString());
  std::unique_ptr<rocksdb::Iterator> it(reader.NewIterator(rocksdb::ReadOptions()));
  rocksdb::WriteBatch batch;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    batch.Put(it->key(), it->value()).PermitUncheckedError();
    if (batch.GetDataSize() >= kSstBatchBytes) {
      TANDEM_RETURN_IF_ERROR(fn(std::string(batch.Data())));
      batch.Clear();
    }
  }
  if (!it->status().ok())
    return Status::DataLoss("change log: " + path + ": " + it->status().ToString());
  if (batch.Count() > 0) return fn(std::string(batch.Data()));
  return Status::Ok();
}

void PutU32(char* at, uint32_t v) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<char>(v >> (8 * i));
}

uint32_t GetU32(const unsigned char* at) {
  return uint32_t{at[0]} | uint32_t{at[1]} << 8 | uint32_t{at[2]} << 16 | uint32_t{at[3]} << 24;
}

}  // namespace

ChangeLog::ChangeLog(std::string dir, uint64_t segment_bytes)
    : dir_(std::move(dir)), segment_bytes_(std::max<uint64_t>(1, segment_bytes)) {}

ChangeLog::~ChangeLog() {
  MutexLock lock(&mu_);
  if (fd_ >= 0) ::close(fd_);
}

StatusOr<std::unique_ptr<ChangeLog>> ChangeLog::Open(const std::string& dir,
                                                     uint64_t segment_bytes) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) return ErrnoToStatus(ec.value(), "change log: remove " + dir);
  fs::create_directories(dir, ec);
  if (ec) return ErrnoToStatus(ec.value(), "change log: mkdir " + dir);
  std::unique_ptr<ChangeLog> log(new ChangeLog(dir, segment_bytes));
  log->buffer_ = AllocateAligned(kBufferBytes);
  if (log->buffer_ == nullptr)
    return Status::ResourceExhausted("change log: no memory for its buffer");
  return log;
}

void ChangeLog::FlushBufferLocked(bool all) {
  size_t out = all ? used_ : BlockFloor(used_);
  if (out == 0) return;
  if (open_.complete) {
    Status s;
    if (direct_) {
      // Zero padding up to the block; cut away by the ftruncate at the seal.
      const size_t padded = BlockCeil(out);
      std::memset(buffer_.get() + out, 0, padded - out);
      int failed_errno = 0;
      s = WriteDirectAt(fd_, buffer_.get(), padded, written_, open_.path, nullptr, &failed_errno);
      if (!s.ok() && failed_errno == EINVAL) {
        // Took O_DIRECT at open, refuses this alignment: buffered from here on, same bytes.
        TLOG_WARN("change log: {}; writing buffered", s.ToString());
        direct_ = false;
        s = !DropDirectIo(fd_) || ::lseek(fd_, static_cast<off_t>(written_), SEEK_SET) < 0
                ? ErrnoToStatus(errno, "change log: leave direct I/O on " + open_.path)
                : WriteAll(fd_, reinterpret_cast<const char*>(buffer_.get()), out, open_.path);
      }
    } else {
      s = WriteAll(fd_, reinterpret_cast<const char*>(buffer_.get()), out, open_.path);
    }
    if (!s.ok()) {
      // Once per segment: the store goes on, and the next checkpoint part is copied in full.
      TLOG_WARN("change log: {} (the parts that need this segment are copied in full)",
                s.ToString());
      open_.complete = false;
    }
  }
  written_ += out;
  used_ -= out;
  std::memmove(buffer_.get(), buffer_.get() + out, used_);
}

void ChangeLog::Append(std::string_view batch_rep) {
  char header[kHeaderBytes];
  PutU32(header, static_cast<uint32_t>(batch_rep.size()));
  PutU32(header + 4, Crc32c(batch_rep.data(), batch_rep.size()));
  MutexLock lock(&mu_);
  if (fd_ < 0) {
    open_ = ChangeSegment{seq_, SegmentPath(dir_, seq_), 0, 0, true};
    written_ = 0;
    StatusOr<int> fd = CreateForCopy(open_.path);
    if (fd.ok()) {
      fd_ = *fd;
      direct_ = (::fcntl(fd_, F_GETFL) & O_DIRECT) != 0;
    } else {
      TLOG_WARN("change log: {}", fd.status().ToString());
      open_.complete = false;
      fd_ = ::open("/dev/null", O_WRONLY | O_CLOEXEC);  // the segment stays incomplete
      direct_ = false;
    }
  }
  open_.crc32c = Crc32cExtend(open_.crc32c, header, kHeaderBytes);
  open_.crc32c = Crc32cExtend(open_.crc32c, batch_rep.data(), batch_rep.size());
  open_.size_bytes += kHeaderBytes + batch_rep.size();
  // A record may be larger than the buffer (FlushDirty's batches are ~4 MiB): copied in pieces,
  // whole blocks written out whenever the buffer is full.
  for (std::string_view piece : {std::string_view(header, kHeaderBytes), batch_rep}) {
    while (!piece.empty()) {
      const size_t n = std::min(piece.size(), kBufferBytes - used_);
      std::memcpy(buffer_.get() + used_, piece.data(), n);
      used_ += n;
      piece.remove_prefix(n);
      if (used_ == kBufferBytes) FlushBufferLocked(/*all=*/false);
    }
  }
  if (open_.size_bytes >= segment_bytes_) {
    CloseOpenLocked();  // sealed: it may be copied to the durable copy before the next cut
    ++seq_;
  }
}

void ChangeLog::CloseOpenLocked() {
  if (fd_ < 0) return;
  FlushBufferLocked(/*all=*/true);
  // A direct segment's last block was written padded: cut it to its records.
  if (direct_ && open_.complete && written_ % kDirectIoBlock != 0 &&
      ::ftruncate(fd_, static_cast<off_t>(written_)) != 0) {
    TLOG_WARN("change log: {}", ErrnoToStatus(errno, "truncate " + open_.path).ToString());
    open_.complete = false;
  }
  if (::close(fd_) != 0 && open_.complete) {
    TLOG_WARN("change log: {}", ErrnoToStatus(errno, "close " + open_.path).ToString());
    open_.complete = false;
  }
  fd_ = -1;
  sealed_.push_back(std::move(open_));
  open_ = ChangeSegment{};
}

bool ChangeLog::AdoptSst(const std::string& sst_path, uint64_t size_bytes, uint32_t crc32c) {
  MutexLock lock(&mu_);
  if (fd_ >= 0) {  // the appends before this file, sealed
    CloseOpenLocked();
    ++seq_;
  }
  const std::string path = SegmentPath(dir_, seq_, ".sst");
  if (::rename(sst_path.c_str(), path.c_str()) != 0) {
    TLOG_WARN("change log: {} (its rows are appended instead)",
              ErrnoToStatus(errno, "move " + sst_path + " to " + path).ToString());
    return false;
  }
  sealed_.push_back(ChangeSegment{seq_, path, size_bytes, crc32c, true, true});
  ++seq_;
  return true;
}

uint64_t ChangeLog::Cut() {
  MutexLock lock(&mu_);
  CloseOpenLocked();
  return seq_++;
}

std::vector<ChangeSegment> ChangeLog::Sealed(uint64_t after, uint64_t through) const {
  MutexLock lock(&mu_);
  std::vector<ChangeSegment> out;
  for (const ChangeSegment& s : sealed_)
    if (s.seq > after && s.seq <= through) out.push_back(s);
  return out;
}

void ChangeLog::DropThrough(uint64_t seq) {
  for (const std::string& path : DetachThrough(seq)) ::unlink(path.c_str());
}

std::vector<std::string> ChangeLog::DetachThrough(uint64_t seq) {
  MutexLock lock(&mu_);
  std::vector<ChangeSegment> kept;
  std::vector<std::string> detached;
  for (ChangeSegment& s : sealed_) {
    if (s.seq > seq) {
      kept.push_back(std::move(s));
    } else {
      detached.push_back(std::move(s.path));
    }
  }
  sealed_ = std::move(kept);
  return detached;
}

Status ForEachChangeRecord(const std::string& path,
                           const std::function<Status(std::string&& batch_rep)>& fn) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoToStatus(errno, "change log: open " + path);
  if (path.ends_with(".sst")) return ForEachSstBatch(path, fn);
  // Buffered reads: segments are read once, front to back.
  std::string buf;
  size_t at = 0;
  bool eof = false;
  const auto fill = [&](size_t need) -> Status {
    while (buf.size() - at < need && !eof) {
      buf.erase(0, at);
      at = 0;
      const size_t old = buf.size();
      buf.resize(old + std::max<size_t>(need, kBufferBytes));
      const ssize_t n = ::read(fd.get(), buf.data() + old, buf.size() - old);
      if (n < 0) {
        buf.resize(old);
        if (errno == EINTR) continue;
        return ErrnoToStatus(errno, "change log: read " + path);
      }
      buf.resize(old + static_cast<size_t>(n));
      if (n == 0) eof = true;
    }
    return Status::Ok();
  };
  uint64_t offset = 0;
  for (;;) {
    TANDEM_RETURN_IF_ERROR(fill(kHeaderBytes));
    if (buf.size() == at) return Status::Ok();
    const auto torn = [&] {
      return Status::DataLoss("change log: " + path + ": torn or damaged record at byte " +
                              std::to_string(offset));
    };
    if (buf.size() - at < kHeaderBytes) return torn();
    const auto* h = reinterpret_cast<const unsigned char*>(buf.data() + at);
    const uint32_t size = GetU32(h), crc = GetU32(h + 4);
    if (size > kMaxRecordBytes) return torn();
    TANDEM_RETURN_IF_ERROR(fill(kHeaderBytes + size));
    if (buf.size() - at < kHeaderBytes + size) return torn();
    const char* payload = buf.data() + at + kHeaderBytes;
    if (Crc32c(payload, size) != crc) return torn();
    TANDEM_RETURN_IF_ERROR(fn(std::string(payload, size)));
    at += kHeaderBytes + size;
    offset += kHeaderBytes + size;
  }
}

}  // namespace tandem::ps
