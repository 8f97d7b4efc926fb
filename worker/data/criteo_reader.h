// Criteo TSV: `label \t I1..In \t C1..Cm`, empty fields allowed, integers possibly negative,
// categoricals hex. Parsing works on a string_view and allocates nothing per field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "worker/data/record.h"

namespace tandem::data {

// Parses one line (without its '\n'; a trailing '\r' is ignored) into `out`, which must be sized
// for `schema`. Returns false for a malformed line (wrong field count, bad label, bad integer,
// bad hex) and then leaves `out` as MakeBadSample and sets `*why` to the reason.
bool ParseCriteoLine(std::string_view line, const Schema& schema, Sample* out,
                     const char** why = nullptr);

// Keeps the count of malformed lines and the text of the first few, for the caller to log.
class BadLineLog {
 public:
  static constexpr int kMaxReports = 5;
  void Add(std::string_view file, int64_t line_number, const char* why);
  int64_t count() const { return count_; }
  const std::vector<std::string>& reports() const { return reports_; }

 private:
  int64_t count_ = 0;
  std::vector<std::string> reports_;  // "file:line: reason"
};

// Reads a file line by line into a reused buffer (one read(2) per chunk, not per line).
class LineReader {
 public:
  LineReader() = default;
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  Status Open(const std::string& path);
  // Sets *line to the next line (valid until the next call) and returns true, or returns false
  // at the end of the file; a read error is returned through status().
  bool Next(std::string_view* line);
  const Status& status() const { return status_; }
  int64_t line_number() const { return line_number_; }   // 1-based number of the last line
  uint64_t line_offset() const { return line_offset_; }  // byte offset of the last line
  const std::string& path() const { return path_; }

 private:
  bool Fill();

  int fd_ = -1;
  std::string path_;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;
  uint64_t base_ = 0;  // file offset of buf_[0]
  uint64_t line_offset_ = 0;
  bool eof_ = false;
  int64_t line_number_ = 0;
  Status status_;
};

// Parses a whole file: calls `fn(sample)` per line (malformed ones as weight-0 samples, also
// added to `bad`). Used by Convert and tools; the training path reads through CriteoSource.
template <typename Fn>
Status ForEachCriteoLine(const std::string& path, const Schema& schema, BadLineLog* bad, Fn fn) {
  LineReader reader;
  TANDEM_RETURN_IF_ERROR(reader.Open(path));
  Sample sample(schema);
  std::string_view line;
  while (reader.Next(&line)) {
    const char* why = nullptr;
    if (!ParseCriteoLine(line, schema, &sample, &why)) bad->Add(path, reader.line_number(), why);
    TANDEM_RETURN_IF_ERROR(fn(sample));
  }
  return reader.status();
}

}  // namespace tandem::data
