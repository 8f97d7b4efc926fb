// The binary packed format: a 64-byte header then fixed-size little-endian records, so record n
// is at header + n * record_size and a reader seeks in O(1) (DESIGN §2).
//   header: magic "TNDMDATA" | version u32 = 1 | num_dense u32 | num_categorical u32 |
//           record_size u32 | record count u64 | reserved (zero) to 64 bytes
//   record: label f32 | weight f32 | dense f32 x num_dense | cat u64 x num_categorical
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/data/record.h"

namespace tandem::data {

inline constexpr char kBinaryMagic[8] = {'T', 'N', 'D', 'M', 'D', 'A', 'T', 'A'};
inline constexpr uint32_t kBinaryVersion = 1;
inline constexpr size_t kBinaryHeaderSize = 64;

size_t BinaryRecordSize(const Schema& schema);

// Reads one binary file with pread. Thread-compatible: Read uses a per-reader scratch buffer,
// so each thread opens its own reader.
class BinaryReader {
 public:
  // Opens `path` and checks it: a short file or a record count that disagrees with the file
  // size is kDataLoss; wrong magic, wrong version, or field counts other than `expect` (when
  // given) are kInvalidArgument.
  static StatusOr<std::unique_ptr<BinaryReader>> Open(const std::string& path,
                                                      std::optional<Schema> expect = {});
  ~BinaryReader();

  const Schema& schema() const { return schema_; }
  int64_t num_records() const { return count_; }
  const std::string& path() const { return path_; }

  // Reads record n (0-based) into `out`. REQUIRES: out sized for schema().
  Status Read(int64_t n, Sample* out) const;
  // Reads `count` records from n as raw bytes into `bytes` (benchmarks, bulk tools).
  Status ReadRaw(int64_t n, int64_t count, std::vector<char>* bytes) const;

 private:
  BinaryReader() = default;
  Status Pread(void* dst, size_t len, uint64_t offset) const;

  int fd_ = -1;
  std::string path_;
  Schema schema_;
  size_t record_size_ = 0;
  int64_t count_ = 0;
  mutable std::vector<char> scratch_;  // Read's record buffer; see Read for thread safety
};

// Writes a binary file: records are buffered, the header (with the final count) is written by
// Finish. A file without Finish has count 0 in its header and fails to open as truncated data.
class BinaryWriter {
 public:
  static StatusOr<std::unique_ptr<BinaryWriter>> Create(const std::string& path,
                                                        const Schema& schema);
  ~BinaryWriter();
  Status Append(const Sample& sample);
  Status Finish();
  int64_t count() const { return count_; }

 private:
  BinaryWriter() = default;
  Status Flush();
  Status WriteHeader();

  int fd_ = -1;
  std::string path_;
  Schema schema_;
  int64_t count_ = 0;
  std::vector<char> buf_;
};

struct ConvertResult {
  int64_t rows = 0;      // lines read, malformed ones included (written with weight 0)
  int64_t bad_rows = 0;  // malformed lines
  std::vector<std::string> bad_reports;  // the first few, "file:line: reason"
};

// Converts Criteo TSV files, in order, to one binary file. Malformed lines become weight-0
// records so that record n of the output is line n of the input (positions shift nothing).
StatusOr<ConvertResult> Convert(const std::vector<std::string>& in_tsv_paths,
                                const std::string& out_path, const Schema& schema = {});

}  // namespace tandem::data
