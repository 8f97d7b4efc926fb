#include "worker/data/binary_format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <new>

#include "common/errno_status.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/text_format.h"

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

struct HeaderV2 {
  char magic[8];
  uint32_t version;
  uint32_t num_dense;
  uint32_t num_categorical;
  uint32_t num_labels;
  uint64_t count;
  uint32_t flags;
  uint32_t reserved0;
  uint64_t records_offset;
  uint64_t index_offset;
  char reserved[kBinaryHeaderSize - 56];
};
static_assert(sizeof(HeaderV2) == kBinaryHeaderSize);

struct FeatureEntry {
  uint32_t max_len;
  uint16_t table;
  uint16_t flags;
};
static_assert(sizeof(FeatureEntry) == 8);

constexpr uint32_t kHasWeights = 1;  // HeaderV2::flags
constexpr uint16_t kWeighted = 1;    // FeatureEntry::flags
constexpr uint32_t kMaxFields = 1u << 16;
constexpr uint32_t kMaxLen = 1u << 20;  // far above any bag; bounds a corrupt entry

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

// "13 dense, 26 features, 1 label" plus, where any feature is not single-hot on its own table,
// each feature's max_len/table (and "w" when weighted): enough to see why two shapes differ.
std::string ShapeString(const Schema& s) {
  std::string out = std::to_string(s.num_dense) + " dense, " + std::to_string(s.num_categorical) +
                    " features, " + std::to_string(s.num_labels) +
                    (s.num_labels == 1 ? " label" : " labels");
  bool plain = true;
  for (int f = 0; f < s.num_categorical; ++f) {
    plain &= s.max_len_of(f) == 1 && s.table_of(f) == f && !s.weighted_of(f);
  }
  if (plain) return out;
  out += " (max_len/table per feature:";
  for (int f = 0; f < s.num_categorical; ++f) {
    out += " " + std::to_string(s.max_len_of(f)) + "/" + std::to_string(s.table_of(f)) +
           (s.weighted_of(f) ? "w" : "");
  }
  return out + ")";
}

// The part of a schema a file pins: counts, and per feature the bag bound, the table that keys
// its ids and whether ids carry weights. Pooling is the model's business.
bool SameShape(const Schema& a, const Schema& b) {
  if (a.num_dense != b.num_dense || a.num_categorical != b.num_categorical ||
      a.num_labels != b.num_labels) {
    return false;
  }
  for (int f = 0; f < a.num_categorical; ++f) {
    if (a.max_len_of(f) != b.max_len_of(f) || a.table_of(f) != b.table_of(f) ||
        a.weighted_of(f) != b.weighted_of(f)) {
      return false;
    }
  }
  return true;
}

Status ShapeMismatch(const std::string& path, const Schema& file, const Schema& job) {
  return Status::InvalidArgument(path + ": data shape " + ShapeString(file) + ", the job expects " +
                                 ShapeString(job));
}

Status CheckHeaderV1(const Header& h, const std::string& path,
                     const std::optional<Schema>& expect) {
  const Schema s{static_cast<int>(h.num_dense), static_cast<int>(h.num_categorical)};
  if (h.num_dense > kMaxFields || h.num_categorical > kMaxFields ||
      h.record_size != BinaryRecordSize(s)) {
    return Status::DataLoss(path + ": corrupt header (field counts or record size)");
  }
  if (!expect) return Status::Ok();
  if (BinaryVersionFor(*expect) != kBinaryVersion) {
    return ShapeMismatch(path, s, *expect);
  }
  if (expect->num_dense != s.num_dense || expect->num_categorical != s.num_categorical) {
    return Status::InvalidArgument(
        path + ": field counts " + std::to_string(s.num_dense) + " dense / " +
        std::to_string(s.num_categorical) + " categorical, the job expects " +
        std::to_string(expect->num_dense) + " / " + std::to_string(expect->num_categorical));
  }
  return Status::Ok();
}

size_t FixedPartV2(const Schema& s) {
  return sizeof(float) * (static_cast<size_t>(s.num_labels) + 1 + s.num_dense) +
         sizeof(uint32_t) * s.num_categorical;
}

}  // namespace

uint32_t BinaryVersionFor(const Schema& schema) {
  if (!schema.single_hot()) return kBinaryVersionV2;
  // Version 1 keys feature f's ids by table f; a shared table needs version 2's feature entries.
  for (int f = 0; f < schema.num_categorical; ++f) {
    if (schema.table_of(f) != f) return kBinaryVersionV2;
  }
  return kBinaryVersion;
}

size_t BinaryRecordSize(const Schema& s) {
  return 2 * sizeof(float) + sizeof(float) * s.num_dense + sizeof(uint64_t) * s.num_categorical;
}

Status BinaryReader::OpenFile() {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  // Whatever keeps us from opening it, the input is not there for this job (exit 3), as for the
  // text readers (record_source.cc).
  if (fd_ < 0) return Status::NotFound(ErrnoToStatus(errno, "open " + path_).message());
  struct stat st;
  if (::fstat(fd_, &st) != 0) return ErrnoToStatus(errno, "stat " + path_);
  file_size_ = static_cast<uint64_t>(st.st_size);
  if (file_size_ < kBinaryHeaderSize) {
    return Status::DataLoss(path_ + ": truncated binary data file (" + std::to_string(file_size_) +
                            " bytes, shorter than the header)");
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<BinaryReader>> BinaryReader::Open(const std::string& path,
                                                           std::optional<Schema> expect) {
  std::unique_ptr<BinaryReader> r(new BinaryReader);
  r->path_ = path;
  TANDEM_RETURN_IF_ERROR(r->OpenFile());
  const uint64_t size = r->file_size_;
  Header h;
  TANDEM_RETURN_IF_ERROR(r->Pread(&h, sizeof(h), 0));
  if (std::memcmp(h.magic, kBinaryMagic, sizeof(kBinaryMagic)) != 0) {
    return Status::InvalidArgument(path + ": not a tandem binary data file (bad magic)");
  }
  r->version_ = h.version;
  if (h.version == kBinaryVersion) {
    TANDEM_RETURN_IF_ERROR(CheckHeaderV1(h, path, expect));
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
    r->records_end_ = size;
    r->scratch_.resize(r->record_size_);
    return r;
  }
  if (h.version != kBinaryVersionV2) {
    return Status::InvalidArgument(path + ": unsupported binary data version " +
                                   std::to_string(h.version) + " (this build reads 1 and 2)");
  }
  HeaderV2 h2;
  std::memcpy(&h2, &h, sizeof(h2));
  const auto corrupt = [&](const std::string& why) {
    return Status::DataLoss(path + ": corrupt binary data file (" + why + ")");
  };
  if (h2.num_dense > kMaxFields || h2.num_categorical > kMaxFields || h2.num_labels < 1 ||
      h2.num_labels > kMaxFields || (h2.flags & ~kHasWeights) != 0) {
    return corrupt("header field counts or flags");
  }
  const uint64_t nc = h2.num_categorical;
  if (h2.records_offset != kBinaryHeaderSize + sizeof(FeatureEntry) * nc) {
    return corrupt("records offset " + std::to_string(h2.records_offset));
  }
  // An unfinished writer leaves index_offset 0; division keeps a huge count from overflowing.
  if (h2.index_offset < h2.records_offset || h2.index_offset > size ||
      (size - h2.index_offset) % sizeof(uint64_t) != 0 ||
      (size - h2.index_offset) / sizeof(uint64_t) != h2.count + 1) {
    return Status::DataLoss(path + ": truncated or corrupt binary data file: header says " +
                            std::to_string(h2.count) + " records indexed at " +
                            std::to_string(h2.index_offset) + ", file size " +
                            std::to_string(size) + " bytes");
  }
  Schema s{static_cast<int>(h2.num_dense), static_cast<int>(nc), static_cast<int>(h2.num_labels)};
  std::vector<FeatureEntry> entries(nc);
  TANDEM_RETURN_IF_ERROR(r->Pread(entries.data(), sizeof(FeatureEntry) * nc, kBinaryHeaderSize));
  int tables = 0;
  for (uint64_t f = 0; f < nc; ++f) {
    const FeatureEntry& e = entries[f];
    // Tables are numbered by first use (record.h), so feature f names at most table `tables`.
    if (e.max_len < 1 || e.max_len > kMaxLen || e.table > tables || (e.flags & ~kWeighted) != 0) {
      return corrupt("feature " + std::to_string(f) + " entry");
    }
    tables = std::max(tables, e.table + 1);
    s.max_len.push_back(static_cast<int>(e.max_len));
    s.table.push_back(e.table);
    s.weighted.push_back((e.flags & kWeighted) != 0);
  }
  if (((h2.flags & kHasWeights) != 0) != s.any_weighted()) {
    return corrupt("weights flag disagrees with the weighted features");
  }
  if (expect && !SameShape(s, *expect)) return ShapeMismatch(path, s, *expect);
  r->schema_ = std::move(s);
  r->count_ = static_cast<int64_t>(h2.count);
  r->records_offset_ = h2.records_offset;
  r->records_end_ = h2.index_offset;
  auto index = std::make_shared<std::vector<uint64_t>>(h2.count + 1);
  TANDEM_RETURN_IF_ERROR(
      r->Pread(index->data(), sizeof(uint64_t) * index->size(), h2.index_offset));
  const uint64_t records_bytes = h2.index_offset - h2.records_offset;
  const uint64_t fixed = FixedPartV2(r->schema_);
  if ((*index)[0] != 0 || index->back() != records_bytes) {
    return corrupt("index does not span the records section");
  }
  for (uint64_t n = 0; n < h2.count; ++n) {
    // Subtraction after the order check, so a decreasing pair cannot wrap around.
    if ((*index)[n + 1] < (*index)[n] || (*index)[n + 1] - (*index)[n] < fixed) {
      return corrupt("index entry " + std::to_string(n) + " out of order or too short");
    }
  }
  r->index_ = std::move(index);
  return r;
}

StatusOr<std::unique_ptr<BinaryReader>> BinaryReader::Clone() const {
  if (version_ == kBinaryVersion) {
    TANDEM_ASSIGN_OR_RETURN(auto r, Open(path_, schema_));
    if (r->records_end_ != records_end_) {
      return Status::DataLoss(path_ + ": file changed while training");
    }
    r->image_ = image_;
    return r;
  }
  std::unique_ptr<BinaryReader> r(new BinaryReader);
  r->path_ = path_;
  TANDEM_RETURN_IF_ERROR(r->OpenFile());
  HeaderV2 now, was;
  TANDEM_RETURN_IF_ERROR(r->Pread(&now, sizeof(now), 0));
  TANDEM_RETURN_IF_ERROR(Pread(&was, sizeof(was), 0));
  // The shared index is only good for the same bytes.
  if (r->file_size_ != file_size_ || std::memcmp(&now, &was, sizeof(now)) != 0) {
    return Status::DataLoss(path_ + ": file changed while training");
  }
  r->version_ = version_;
  r->schema_ = schema_;
  r->count_ = count_;
  r->records_offset_ = records_offset_;
  r->records_end_ = records_end_;
  r->index_ = index_;
  r->image_ = image_;
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

Status BinaryReader::Preload() {
  if (image_ != nullptr) return Status::Ok();
  const uint64_t bytes = records_bytes();
  std::shared_ptr<char[]> image(new (std::nothrow) char[std::max<uint64_t>(bytes, 1)]);
  if (image == nullptr) {
    return Status::ResourceExhausted(path_ + ": cannot allocate " + std::to_string(bytes) +
                                     " bytes to read the file into memory (data.memory_bytes)");
  }
  constexpr uint64_t kChunk = uint64_t{16} << 20;
  for (uint64_t done = 0; done < bytes; done += kChunk) {
    TANDEM_RETURN_IF_ERROR(
        Pread(image.get() + done, std::min(kChunk, bytes - done), records_offset_ + done));
  }
  image_ = std::move(image);
  return Status::Ok();
}

StatusOr<const char*> BinaryReader::RecordBytes(uint64_t offset, size_t len) const {
  if (image_ != nullptr) return image_.get() + (offset - records_offset_);
  if (scratch_.size() < len) scratch_.resize(len);
  TANDEM_RETURN_IF_ERROR(Pread(scratch_.data(), len, offset));
  return static_cast<const char*>(scratch_.data());
}

uint64_t BinaryReader::RecordBegin(int64_t n) const {
  return version_ == kBinaryVersion ? kBinaryHeaderSize + uint64_t(n) * record_size_
                                    : records_offset_ + (*index_)[n];
}

// Uses the shared scratch buffer, so concurrent callers must use distinct readers; the
// pipeline owns one reader per thread.
Status BinaryReader::Read(int64_t n, Sample* out) const {
  if (n < 0 || n >= count_) {
    return Status::OutOfRange(path_ + ": record " + std::to_string(n) + " of " +
                              std::to_string(count_));
  }
  if (version_ != kBinaryVersion) return ReadV2(n, out);
  TANDEM_ASSIGN_OR_RETURN(const char* p, RecordBytes(RecordBegin(n), record_size_));
  out->labels.resize(1);
  std::memcpy(out->labels.data(), p, 4);
  std::memcpy(&out->weight, p + 4, 4);
  std::memcpy(out->dense.data(), p + 8, 4 * out->dense.size());
  std::memcpy(out->cat.data(), p + 8 + 4 * out->dense.size(), 8 * out->cat.size());
  return Status::Ok();
}

Status BinaryReader::ReadV2(int64_t n, Sample* out) const {
  const uint64_t len = (*index_)[n + 1] - (*index_)[n];
  TANDEM_ASSIGN_OR_RETURN(const char* p, RecordBytes(RecordBegin(n), len));
  const Schema& s = schema_;
  const auto take = [&p](void* dst, size_t bytes) {
    std::memcpy(dst, p, bytes);
    p += bytes;
  };
  out->labels.resize(s.num_labels);
  take(out->labels.data(), 4 * out->labels.size());
  take(&out->weight, 4);
  out->dense.resize(s.num_dense);
  take(out->dense.data(), 4 * out->dense.size());
  out->offsets.resize(static_cast<size_t>(s.num_categorical) + 1);
  out->offsets[0] = 0;
  uint64_t total = 0;
  for (int f = 0; f < s.num_categorical; ++f) {
    uint32_t k;
    take(&k, 4);
    // Bounded per feature, so the sum cannot overflow and offsets fit u32 for sane schemas.
    if (k > static_cast<uint32_t>(s.max_len_of(f))) {
      return Status::DataLoss(path_ + ": corrupt record " + std::to_string(n) + ": feature " +
                              std::to_string(f) + " has " + std::to_string(k) + " ids, max_len " +
                              std::to_string(s.max_len_of(f)));
    }
    total += k;
    out->offsets[f + 1] = static_cast<uint32_t>(total);
  }
  const bool weights = s.any_weighted();
  const uint64_t want = FixedPartV2(s) + total * (sizeof(uint64_t) + (weights ? 4 : 0));
  if (want != len) {
    return Status::DataLoss(path_ + ": corrupt record " + std::to_string(n) + ": " +
                            std::to_string(len) + " bytes, its id counts need " +
                            std::to_string(want));
  }
  out->cat.resize(total);
  take(out->cat.data(), 8 * total);
  if (weights) {
    out->id_weights.resize(total);
    take(out->id_weights.data(), 4 * total);
  } else {
    out->id_weights.clear();
  }
  return Status::Ok();
}

Status BinaryReader::ReadRaw(int64_t n, int64_t count, std::vector<char>* bytes) const {
  if (n < 0 || count < 0 || n + count > count_) return Status::OutOfRange(path_ + ": ReadRaw");
  const uint64_t begin = RecordBegin(n);
  const uint64_t end =
      version_ == kBinaryVersion ? RecordBegin(n + count) : records_offset_ + (*index_)[n + count];
  bytes->resize(end - begin);
  if (image_ != nullptr) {
    std::memcpy(bytes->data(), image_.get() + (begin - records_offset_), bytes->size());
    return Status::Ok();
  }
  return Pread(bytes->data(), bytes->size(), begin);
}

StatusOr<std::unique_ptr<BinaryWriter>> BinaryWriter::Create(const std::string& path,
                                                             const Schema& schema) {
  std::unique_ptr<BinaryWriter> w(new BinaryWriter);
  w->path_ = path;
  w->schema_ = schema;
  w->version_ = BinaryVersionFor(schema);
  w->records_offset_ = w->version_ == kBinaryVersion
                           ? kBinaryHeaderSize
                           : kBinaryHeaderSize + sizeof(FeatureEntry) * schema.num_categorical;
  w->fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd_ < 0) return ErrnoToStatus(errno, "create " + path);
  TANDEM_RETURN_IF_ERROR(w->WriteHeader());  // count 0 (and no index) until Finish
  if (w->version_ == kBinaryVersionV2) {
    std::vector<FeatureEntry> entries;
    for (int f = 0; f < schema.num_categorical; ++f) {
      entries.push_back({static_cast<uint32_t>(schema.max_len_of(f)),
                         static_cast<uint16_t>(schema.table_of(f)),
                         static_cast<uint16_t>(schema.weighted_of(f) ? kWeighted : 0)});
    }
    TANDEM_RETURN_IF_ERROR(WriteAll(w->fd_, reinterpret_cast<const char*>(entries.data()),
                                    sizeof(FeatureEntry) * entries.size(), kBinaryHeaderSize,
                                    path));
  }
  w->buf_.reserve(kWriteBuffer);
  return w;
}

BinaryWriter::~BinaryWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Status BinaryWriter::WriteHeader() {
  if (version_ == kBinaryVersion) {
    Header h{};
    std::memcpy(h.magic, kBinaryMagic, sizeof(kBinaryMagic));
    h.version = kBinaryVersion;
    h.num_dense = static_cast<uint32_t>(schema_.num_dense);
    h.num_categorical = static_cast<uint32_t>(schema_.num_categorical);
    h.record_size = static_cast<uint32_t>(BinaryRecordSize(schema_));
    h.count = static_cast<uint64_t>(count_);
    return WriteAll(fd_, reinterpret_cast<const char*>(&h), sizeof(h), 0, path_);
  }
  HeaderV2 h{};
  std::memcpy(h.magic, kBinaryMagic, sizeof(kBinaryMagic));
  h.version = kBinaryVersionV2;
  h.num_dense = static_cast<uint32_t>(schema_.num_dense);
  h.num_categorical = static_cast<uint32_t>(schema_.num_categorical);
  h.num_labels = static_cast<uint32_t>(schema_.num_labels);
  h.count = static_cast<uint64_t>(count_);
  h.flags = schema_.any_weighted() ? kHasWeights : 0;
  h.records_offset = records_offset_;
  // Before Finish the index is not there: 0 makes a reader call the file unfinished.
  h.index_offset =
      index_.size() == static_cast<size_t>(count_) + 1 ? records_offset_ + flushed_ : 0;
  return WriteAll(fd_, reinterpret_cast<const char*>(&h), sizeof(h), 0, path_);
}

Status BinaryWriter::Append(const Sample& s) {
  const auto put = [this](const void* p, size_t n) {
    buf_.insert(buf_.end(), static_cast<const char*>(p), static_cast<const char*>(p) + n);
  };
  if (version_ == kBinaryVersion) {
    put(s.labels.data(), 4);
    put(&s.weight, 4);
    put(s.dense.data(), 4 * s.dense.size());
    put(s.cat.data(), 8 * s.cat.size());
    ++count_;
    return buf_.size() >= kWriteBuffer ? Flush() : Status::Ok();
  }
  const Schema& sc = schema_;
  const size_t nc = static_cast<size_t>(sc.num_categorical);
  const bool weights = sc.any_weighted();
  if (s.labels.size() != static_cast<size_t>(sc.num_labels) ||
      s.dense.size() != static_cast<size_t>(sc.num_dense) || s.offsets.size() != nc + 1 ||
      s.offsets[0] != 0 || s.offsets[nc] != s.cat.size() ||
      (weights && !s.id_weights.empty() && s.id_weights.size() != s.cat.size())) {
    return Status::InvalidArgument(path_ + ": record " + std::to_string(count_) +
                                   " does not match the schema " + ShapeString(sc));
  }
  for (size_t f = 0; f < nc; ++f) {
    if (s.offsets[f + 1] < s.offsets[f] ||
        s.offsets[f + 1] - s.offsets[f] > static_cast<uint32_t>(sc.max_len_of(int(f)))) {
      return Status::InvalidArgument(path_ + ": record " + std::to_string(count_) + ": feature " +
                                     std::to_string(f) + " has a bag longer than " +
                                     std::to_string(sc.max_len_of(int(f))) + " ids");
    }
  }
  index_.push_back(flushed_ + buf_.size());
  put(s.labels.data(), 4 * s.labels.size());
  put(&s.weight, 4);
  put(s.dense.data(), 4 * s.dense.size());
  for (size_t f = 0; f < nc; ++f) {
    const uint32_t k = s.offsets[f + 1] - s.offsets[f];
    put(&k, 4);
  }
  put(s.cat.data(), 8 * s.cat.size());
  if (weights && !s.id_weights.empty()) {
    put(s.id_weights.data(), 4 * s.id_weights.size());
  } else if (weights) {
    const float one = 1.0f;  // a source without weights: all 1, as Batch::Set reads it
    for (size_t k = 0; k < s.cat.size(); ++k) put(&one, 4);
  }
  ++count_;
  return buf_.size() >= kWriteBuffer ? Flush() : Status::Ok();
}

Status BinaryWriter::Flush() {
  TANDEM_RETURN_IF_ERROR(
      WriteAll(fd_, buf_.data(), buf_.size(), records_offset_ + flushed_, path_));
  flushed_ += buf_.size();
  buf_.clear();
  return Status::Ok();
}

Status BinaryWriter::Finish() {
  TANDEM_RETURN_IF_ERROR(Flush());
  if (version_ == kBinaryVersionV2) {
    index_.push_back(flushed_);
    TANDEM_RETURN_IF_ERROR(WriteAll(fd_, reinterpret_cast<const char*>(index_.data()),
                                    sizeof(uint64_t) * index_.size(), records_offset_ + flushed_,
                                    path_));
  }
  TANDEM_RETURN_IF_ERROR(WriteHeader());
  if (::close(fd_) != 0) {
    const int err = errno;
    fd_ = -1;
    return ErrnoToStatus(err, "close " + path_);
  }
  fd_ = -1;
  return Status::Ok();
}

namespace {

// ForEachCriteoLine for the general text format.
template <typename Fn>
Status ForEachTextLine(const std::string& path, const TextLayout& layout, const Schema& schema,
                       BadLineLog* bad, Fn fn) {
  LineReader reader;
  TANDEM_RETURN_IF_ERROR(reader.Open(path));
  Sample sample(schema);
  std::string_view line;
  while (reader.Next(&line)) {
    const char* why = nullptr;
    if (!ParseTextLine(line, layout, schema, &sample, &why)) {
      bad->Add(path, reader.line_number(), why);
    }
    TANDEM_RETURN_IF_ERROR(fn(sample));
  }
  return reader.status();
}

}  // namespace

StatusOr<ConvertResult> Convert(const std::vector<std::string>& in_paths,
                                const std::string& out_path, const Schema& schema,
                                const TextLayout* layout) {
  if (!layout && !schema.single_hot()) {
    return Status::InvalidArgument(
        "Criteo TSV holds one label and one id per feature; convert a multi-hot, weighted or "
        "multi-label schema from the text format (data.format text)");
  }
  TANDEM_ASSIGN_OR_RETURN(auto writer, BinaryWriter::Create(out_path, schema));
  BadLineLog bad;
  const auto append = [&](const Sample& s) { return writer->Append(s); };
  for (const auto& path : in_paths) {
    TANDEM_RETURN_IF_ERROR(layout ? ForEachTextLine(path, *layout, schema, &bad, append)
                                  : ForEachCriteoLine(path, schema, &bad, append));
  }
  ConvertResult result{writer->count(), bad.count(), bad.reports()};
  TANDEM_RETURN_IF_ERROR(writer->Finish());
  return result;
}

}  // namespace tandem::data
