#include "worker/data/criteo_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstring>

#include "common/errno_status.h"
#include "worker/data/categorical_id.h"

namespace tandem::data {
namespace {

constexpr size_t kChunk = 1 << 20;

// Hex digit values; 0xff marks a byte that is not a hex digit (from_chars base 16 accepts both
// cases and nothing else: no sign, no "0x").
constexpr std::array<uint8_t, 256> kHexValue = [] {
  std::array<uint8_t, 256> t{};
  t.fill(0xff);
  for (int c = 0; c < 10; ++c) t['0' + c] = static_cast<uint8_t>(c);
  for (int c = 0; c < 6; ++c) t['a' + c] = t['A' + c] = static_cast<uint8_t>(10 + c);
  return t;
}();

// More digits than these may overflow; such rare fields go through from_chars, which defines
// the accepted range (leading zeros included).
constexpr ptrdiff_t kMaxSafeDecimalDigits = 18;  // 10^18 - 1 < 2^63
constexpr ptrdiff_t kMaxSafeHexDigits = 16;

// MissingId of the first fields, hashed once rather than per empty field.
constexpr int kCachedMissingIds = 64;
uint64_t CachedMissingId(int field) {
  static const std::array<uint64_t, kCachedMissingIds> ids = [] {
    std::array<uint64_t, kCachedMissingIds> t{};
    for (int f = 0; f < kCachedMissingIds; ++f) t[f] = MissingId(f);
    return t;
  }();
  return field < kCachedMissingIds ? ids[field] : MissingId(field);
}

bool Fail(const Schema& schema, Sample* out, const char** why, const char* reason) {
  MakeBadSample(schema, out);
  if (why) *why = reason;
  return false;
}

}  // namespace

// One pass over the line: each field is parsed while its end is searched for, so every byte is
// read once (the old split-then-from_chars read each twice and paid a memchr call per field).
// Accepted text, values and failure reasons are those of the field-wise from_chars parse.
bool ParseCriteoLine(std::string_view line, const Schema& schema, Sample* out, const char** why) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const char* p = line.data();
  const char* const end = p + line.size();
  // Label: exactly "0" or "1" before the first tab (or the end).
  if (p == end || (*p != '0' && *p != '1') || (p + 1 != end && p[1] != '\t')) {
    return Fail(schema, out, why, "bad label (want 0 or 1)");
  }
  out->labels[0] = *p == '1' ? 1.0f : 0.0f;
  // Invariant below: `more` says whether another field follows, and then p is its first byte.
  bool more = p + 1 != end;
  p += more ? 2 : 1;  // never past `end`

  const float* table = DenseTransformTable();
  float* dense = out->dense.data();
  for (int i = 0; i < schema.num_dense; ++i) {
    if (!more) return Fail(schema, out, why, "too few fields");
    const char* q = p;
    const bool negative = q != end && *q == '-';
    q += negative;
    const char* const digits = q;
    uint64_t v = 0;
    for (; q != end && static_cast<unsigned>(*q - '0') < 10; ++q) v = v * 10 + (*q - '0');
    if (q != end && *q != '\t') return Fail(schema, out, why, "bad integer field");
    if (q == p) {
      dense[i] = 0;  // missing integer: transform(0)
    } else if (q == digits) {
      return Fail(schema, out, why, "bad integer field");  // a lone "-"
    } else if (q - digits > kMaxSafeDecimalDigits) {
      int64_t wide = 0;
      const auto r = std::from_chars(p, q, wide);
      if (r.ec != std::errc() || r.ptr != q) return Fail(schema, out, why, "bad integer field");
      dense[i] = DenseTransform(wide);
    } else if (negative || v == 0) {
      dense[i] = 0;  // log(1 + max(x, 0))
    } else {
      dense[i] = v < static_cast<uint64_t>(kDenseTableSize)
                     ? table[v]
                     : DenseTransform(static_cast<int64_t>(v));
    }
    more = q != end;
    p = q + more;
  }

  uint64_t* cat = out->cat.data();
  for (int i = 0; i < schema.num_categorical; ++i) {
    if (!more) return Fail(schema, out, why, "too few fields");
    const char* q = p;
    uint64_t v = 0;
    for (; q != end; ++q) {
      const uint8_t d = kHexValue[static_cast<uint8_t>(*q)];
      if (d > 15) break;
      v = v << 4 | d;
    }
    if (q != end && *q != '\t') return Fail(schema, out, why, "bad hex categorical field");
    // Ids are keyed by table, so features that share a table share ids.
    const int table = schema.table_of(i);
    if (q == p) {
      cat[i] = CachedMissingId(table);
    } else {
      if (q - p > kMaxSafeHexDigits) {
        const auto r = std::from_chars(p, q, v, 16);
        if (r.ec != std::errc() || r.ptr != q)
          return Fail(schema, out, why, "bad hex categorical field");
      }
      cat[i] = internal::CategoricalIdInline(table, v);
    }
    more = q != end;
    p = q + more;
  }
  if (more) return Fail(schema, out, why, "too many fields");
  out->weight = 1;
  return true;
}

void BadLineLog::Add(std::string_view file, int64_t line_number, const char* why) {
  ++count_;
  if (reports_.size() >= kMaxReports) return;
  std::string r(file);
  r += ':' + std::to_string(line_number) + ": malformed line: " + (why ? why : "?");
  reports_.push_back(std::move(r));
}

LineReader::~LineReader() {
  if (fd_ >= 0) ::close(fd_);
}

Status LineReader::Open(const std::string& path) {
  path_ = path;
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) return ErrnoToStatus(errno, "open " + path);
  buf_.resize(kChunk);
  return Status::Ok();
}

// Moves the unread tail to the front and reads more; returns false when nothing new came.
bool LineReader::Fill() {
  if (eof_) return false;
  base_ += begin_;
  std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
  end_ -= begin_;
  begin_ = 0;
  if (end_ == buf_.size()) buf_.resize(buf_.size() * 2);  // a line longer than the buffer
  ssize_t n;
  do n = ::read(fd_, buf_.data() + end_, buf_.size() - end_);
  while (n < 0 && errno == EINTR);
  if (n < 0) {
    status_ = ErrnoToStatus(errno, "read " + path_);
    eof_ = true;
    return false;
  }
  if (n == 0) eof_ = true;
  end_ += static_cast<size_t>(n);
  return n > 0;
}

bool LineReader::Next(std::string_view* line) {
  size_t scanned = 0;  // bytes after begin_ already known to hold no '\n'
  for (;;) {
    const char* from = buf_.data() + begin_ + scanned;
    const void* nl = std::memchr(from, '\n', end_ - begin_ - scanned);
    if (nl != nullptr) {
      const size_t pos = static_cast<const char*>(nl) - buf_.data();
      *line = std::string_view(buf_.data() + begin_, pos - begin_);
      line_offset_ = base_ + begin_;
      begin_ = pos + 1;
      ++line_number_;
      return true;
    }
    scanned = end_ - begin_;
    if (!Fill()) break;  // Fill keeps the unread tail, now starting at begin_ = 0
  }
  if (!status_.ok() || begin_ == end_) return false;
  *line = std::string_view(buf_.data() + begin_, end_ - begin_);  // last line, no '\n'
  line_offset_ = base_ + begin_;
  begin_ = end_;
  ++line_number_;
  return true;
}

}  // namespace tandem::data
