#include "worker/data/criteo_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace tandem::data {
namespace {

constexpr size_t kChunk = 1 << 20;

// Splits off the next tab-separated field; returns false when none is left.
bool NextField(std::string_view* rest, bool* done, std::string_view* field) {
  if (*done) return false;
  const size_t tab = rest->find('\t');
  if (tab == std::string_view::npos) {
    *field = *rest;
    *done = true;
  } else {
    *field = rest->substr(0, tab);
    rest->remove_prefix(tab + 1);
  }
  return true;
}

bool ParseLabel(std::string_view f, float* label) {
  if (f == "0") return *label = 0, true;
  if (f == "1") return *label = 1, true;
  return false;
}

bool ParseInt(std::string_view f, float* out) {
  if (f.empty()) return *out = 0, true;  // missing integer: transform(0)
  int64_t v = 0;
  auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
  if (ec != std::errc() || end != f.data() + f.size()) return false;
  *out = DenseTransform(v);
  return true;
}

bool ParseHex(std::string_view f, int field, uint64_t* out) {
  if (f.empty()) return *out = MissingId(field), true;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), v, 16);
  if (ec != std::errc() || end != f.data() + f.size()) return false;  // also rejects "-1"
  *out = CategoricalId(field, v);
  return true;
}

bool Fail(Sample* out, const char** why, const char* reason) {
  MakeBadSample(out);
  if (why) *why = reason;
  return false;
}

}  // namespace

bool ParseCriteoLine(std::string_view line, const Schema& schema, Sample* out, const char** why) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  bool done = false;
  std::string_view field;
  if (!NextField(&line, &done, &field) || !ParseLabel(field, &out->label)) {
    return Fail(out, why, "bad label (want 0 or 1)");
  }
  for (int i = 0; i < schema.num_dense; ++i) {
    if (!NextField(&line, &done, &field)) return Fail(out, why, "too few fields");
    if (!ParseInt(field, &out->dense[i])) return Fail(out, why, "bad integer field");
  }
  for (int i = 0; i < schema.num_categorical; ++i) {
    if (!NextField(&line, &done, &field)) return Fail(out, why, "too few fields");
    if (!ParseHex(field, i, &out->cat[i])) return Fail(out, why, "bad hex categorical field");
  }
  if (!done) return Fail(out, why, "too many fields");
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
  if (fd_ < 0) return Status::NotFound(path + ": " + std::strerror(errno));
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
    status_ = Status::Unavailable(path_ + ": read: " + std::strerror(errno));
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
