#include "worker/data/binary_format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>

#include "common/errno_status.h"
#include "worker/data/criteo_reader.h"

namespace tandem::data {
namespace {

static_assert(std::endian::native == std::endian::little, "the format is little-endian");

constexpr size_t kWriteBuffer = 1 << 20;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t num_dense;
  uint32_t num_categorical;
  uint32_t record_size;
  uint64_t count;
  char reserved[kBinaryHeaderSize - 32];
};
static_assert(sizeof(Header) == kBinaryHeaderSize);

Status WriteAll(int fd, const char* p, size_t n, uint64_t offset, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return ErrnoToStatus(errno, "write " + path);
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return Status::Ok();
}

Status CheckHeader(const Header& h, const std::string& path, const std::optional<Schema>& expect) {
  if (std::memcmp(h.magic, kBinaryMagic, sizeof(kBinaryMagic)) != 0) {
    return Status::InvalidArgument(path + ": not a tandem binary data file (bad magic)");
  }
  if (h.version != kBinaryVersion) {
    return Status::InvalidArgument(path + ": unsupported binary data version " +
                                   std::to_string(h.version) + " (this build reads " +
                                   std::to_string(kBinaryVersion) + ")");
  }
  const Schema s{static_cast<int>(h.num_dense), static_cast<int>(h.num_categorical)};
  if (h.num_dense > 1u << 16 || h.num_categorical > 1u << 16 ||
      h.record_size != BinaryRecordSize(s)) {
    return Status::DataLoss(path + ": corrupt header (field counts or record size)");
  }
  if (expect && (expect->num_dense != s.num_dense || expect->num_categorical != s.num_categorical ||
                 !expect->single_hot())) {
    return Status::InvalidArgument(
        path + ": field counts " + std::to_string(s.num_dense) + " dense / " +
        std::to_string(s.num_categorical) + " categorical, the job expects " +
        std::to_string(expect->num_dense) + " / " + std::to_string(expect->num_categorical));
  }
  return Status::Ok();
}

}  // namespace

size_t BinaryRecordSize(const Schema& s) {
  return 2 * sizeof(float) + sizeof(float) * s.num_dense + sizeof(uint64_t) * s.num_categorical;
}

StatusOr<std::unique_ptr<BinaryReader>> BinaryReader::Open(const std::string& path,
                                                           std::optional<Schema> expect) {
  std::unique_ptr<BinaryReader> r(new BinaryReader);
  r->path_ = path;
  r->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  // Whatever keeps us from opening it, the input is not there for this job (exit 3), as for the
  // text readers (record_source.cc).
  if (r->fd_ < 0) return Status::NotFound(ErrnoToStatus(errno, "open " + path).message());
  struct stat st;
  if (::fstat(r->fd_, &st) != 0) return ErrnoToStatus(errno, "stat " + path);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kBinaryHeaderSize) {
    return Status::DataLoss(path + ": truncated binary data file (" + std::to_string(size) +
                            " bytes, shorter than the header)");
  }
  Header h;
  TANDEM_RETURN_IF_ERROR(r->Pread(&h, sizeof(h), 0));
  TANDEM_RETURN_IF_ERROR(CheckHeader(h, path, expect));
  r->schema_ = Schema{static_cast<int>(h.num_dense), static_cast<int>(h.num_categorical)};
  r->record_size_ = h.record_size;
  // Division, not multiplication, so a corrupt huge count cannot overflow.
  if ((size - kBinaryHeaderSize) % r->record_size_ != 0 ||
      (size - kBinaryHeaderSize) / r->record_size_ != h.count) {
    return Status::DataLoss(path + ": truncated or corrupt binary data file: header says " +
                            std::to_string(h.count) + " records, file size " +
                            std::to_string(size) + " bytes");
  }
  r->count_ = static_cast<int64_t>(h.count);
  r->scratch_.resize(r->record_size_);
  return r;
}

BinaryReader::~BinaryReader() {
  if (fd_ >= 0) ::close(fd_);
}

Status BinaryReader::Pread(void* dst, size_t len, uint64_t offset) const {
  char* p = static_cast<char*>(dst);
  while (len > 0) {
    const ssize_t n = ::pread(fd_, p, len, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, "read " + path_);
    if (n == 0) return Status::DataLoss(path_ + ": file shrank while reading");
    p += n;
    len -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

// Uses the shared scratch buffer, so concurrent callers must use distinct readers; the
// pipeline owns one reader per thread.
Status BinaryReader::Read(int64_t n, Sample* out) const {
  if (n < 0 || n >= count_) {
    return Status::OutOfRange(path_ + ": record " + std::to_string(n) + " of " +
                              std::to_string(count_));
  }
  TANDEM_RETURN_IF_ERROR(
      Pread(scratch_.data(), record_size_, kBinaryHeaderSize + uint64_t(n) * record_size_));
  const char* p = scratch_.data();
  out->labels.resize(1);
  std::memcpy(out->labels.data(), p, 4);
  std::memcpy(&out->weight, p + 4, 4);
  std::memcpy(out->dense.data(), p + 8, 4 * out->dense.size());
  std::memcpy(out->cat.data(), p + 8 + 4 * out->dense.size(), 8 * out->cat.size());
  return Status::Ok();
}

Status BinaryReader::ReadRaw(int64_t n, int64_t count, std::vector<char>* bytes) const {
  if (n < 0 || count < 0 || n + count > count_) return Status::OutOfRange(path_ + ": ReadRaw");
  bytes->resize(static_cast<size_t>(count) * record_size_);
  return Pread(bytes->data(), bytes->size(), kBinaryHeaderSize + uint64_t(n) * record_size_);
}

StatusOr<std::unique_ptr<BinaryWriter>> BinaryWriter::Create(const std::string& path,
                                                             const Schema& schema) {
  std::unique_ptr<BinaryWriter> w(new BinaryWriter);
  w->path_ = path;
  w->schema_ = schema;
  w->fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd_ < 0) return ErrnoToStatus(errno, "create " + path);
  TANDEM_RETURN_IF_ERROR(w->WriteHeader());  // count 0 until Finish
  w->buf_.reserve(kWriteBuffer);
  return w;
}

BinaryWriter::~BinaryWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Status BinaryWriter::WriteHeader() {
  Header h{};
  std::memcpy(h.magic, kBinaryMagic, sizeof(kBinaryMagic));
  h.version = kBinaryVersion;
  h.num_dense = static_cast<uint32_t>(schema_.num_dense);
  h.num_categorical = static_cast<uint32_t>(schema_.num_categorical);
  h.record_size = static_cast<uint32_t>(BinaryRecordSize(schema_));
  h.count = static_cast<uint64_t>(count_);
  return WriteAll(fd_, reinterpret_cast<const char*>(&h), sizeof(h), 0, path_);
}

Status BinaryWriter::Append(const Sample& s) {
  const auto put = [this](const void* p, size_t n) {
    buf_.insert(buf_.end(), static_cast<const char*>(p), static_cast<const char*>(p) + n);
  };
  put(s.labels.data(), 4);
  put(&s.weight, 4);
  put(s.dense.data(), 4 * s.dense.size());
  put(s.cat.data(), 8 * s.cat.size());
  ++count_;
  return buf_.size() >= kWriteBuffer ? Flush() : Status::Ok();
}

Status BinaryWriter::Flush() {
  const uint64_t records_in_buf = buf_.size() / BinaryRecordSize(schema_);
  const uint64_t offset =
      kBinaryHeaderSize + (uint64_t(count_) - records_in_buf) * BinaryRecordSize(schema_);
  TANDEM_RETURN_IF_ERROR(WriteAll(fd_, buf_.data(), buf_.size(), offset, path_));
  buf_.clear();
  return Status::Ok();
}

Status BinaryWriter::Finish() {
  TANDEM_RETURN_IF_ERROR(Flush());
  TANDEM_RETURN_IF_ERROR(WriteHeader());
  if (::close(fd_) != 0) {
    const int err = errno;
    fd_ = -1;
    return ErrnoToStatus(err, "close " + path_);
  }
  fd_ = -1;
  return Status::Ok();
}

StatusOr<ConvertResult> Convert(const std::vector<std::string>& in_tsv_paths,
                                const std::string& out_path, const Schema& schema) {
  TANDEM_ASSIGN_OR_RETURN(auto writer, BinaryWriter::Create(out_path, schema));
  BadLineLog bad;
  for (const auto& path : in_tsv_paths) {
    TANDEM_RETURN_IF_ERROR(
        ForEachCriteoLine(path, schema, &bad, [&](const Sample& s) { return writer->Append(s); }));
  }
  ConvertResult result{writer->count(), bad.count(), bad.reports()};
  TANDEM_RETURN_IF_ERROR(writer->Finish());
  return result;
}

}  // namespace tandem::data
