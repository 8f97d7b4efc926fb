// The binary packed format, little-endian, seekable to record n in O(1) (DESIGN §2).
//
// Version 1 (single-hot features, one label: Criteo's shape) has fixed-size records, so record
// n is at header + n * record_size:
//   header: magic "TNDMDATA" | version u32 = 1 | num_dense u32 | num_categorical u32 |
//           record_size u32 | record count u64 | reserved (zero) to 64 bytes
//   record: label f32 | weight f32 | dense f32 x num_dense | cat u64 x num_categorical
//
// Version 2 (issue 18: multi-hot, weighted and multi-label schemas) has variable-length records
// and an index of their offsets at the end, written last so the writer streams records:
//   header:   magic | version u32 = 2 | num_dense u32 | num_categorical u32 | num_labels u32 |
//             record count u64 | flags u32 (bit 0: records carry id weights) | reserved u32 |
//             records_offset u64 | index_offset u64 | reserved (zero) to 64 bytes
//   features: per feature: max_len u32 | table u16 | flags u16 (bit 0: weighted)
//   records:  labels f32 x num_labels | weight f32 | dense f32 x num_dense |
//             id count u32 x num_categorical | ids u64 x total | [id weights f32 x total]
//   index:    u64 x (count + 1): record n is records[index[n], index[n + 1])
// The features section pins the shape the ids were written for (tables key the ids), so a
// job whose schema differs is refused rather than trained on ids of another id space.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/data/record.h"

namespace tandem::data {

inline constexpr char kBinaryMagic[8] = {'T', 'N', 'D', 'M', 'D', 'A', 'T', 'A'};
inline constexpr uint32_t kBinaryVersion = 1;    // single-hot, one label
inline constexpr uint32_t kBinaryVersionV2 = 2;  // variable-length records
inline constexpr size_t kBinaryHeaderSize = 64;

// The version BinaryWriter writes for `schema`: 1 where it fits, so Criteo-shaped files stay
// byte for byte what they were.
uint32_t BinaryVersionFor(const Schema& schema);
// Version 1 record size.
size_t BinaryRecordSize(const Schema& schema);

// Reads one binary file with pread. Thread-compatible: Read uses a per-reader scratch buffer,
// so each thread opens its own reader.
class BinaryReader {
 public:
  // Opens `path` and checks it: a short file, a record count that disagrees with the file
  // size, or (version 2) an index out of range or decreasing is kDataLoss; wrong magic, an
  // unknown version, or a shape other than `expect` (when given) is kInvalidArgument.
  static StatusOr<std::unique_ptr<BinaryReader>> Open(const std::string& path,
                                                      std::optional<Schema> expect = {});
  ~BinaryReader();

  // A second reader of the same file for another thread; shares the (read-only) index, so a
  // clone costs an open and a header read, not a pass over the index.
  StatusOr<std::unique_ptr<BinaryReader>> Clone() const;

  // The file's shape. Version 2 files name no pooling: mean is left empty.
  const Schema& schema() const { return schema_; }
  uint32_t version() const { return version_; }
  int64_t num_records() const { return count_; }
  const std::string& path() const { return path_; }

  // Reads record n (0-based) into `out`. Version 1 REQUIRES out sized for schema(); version 2
  // sizes it. A version 2 record whose counts disagree with its length is kDataLoss.
  Status Read(int64_t n, Sample* out) const;
  // Reads `count` records from n as raw bytes into `bytes` (benchmarks, bulk tools).
  Status ReadRaw(int64_t n, int64_t count, std::vector<char>* bytes) const;

  // Bytes of the records section: what Preload keeps in memory.
  uint64_t records_bytes() const { return records_end_ - records_offset_; }
  // Reads the records section into memory once (large reads in file order); Read and ReadRaw
  // then copy from it instead of making a system call a record, which costs several
  // microseconds on a virtual machine and a tenth of a small worker's CPU. Clones made after it
  // share the copy. The bytes are those of this moment: a file rewritten later is not seen.
  Status Preload();
  bool preloaded() const { return image_ != nullptr; }

 private:
  BinaryReader() = default;
  Status Pread(void* dst, size_t len, uint64_t offset) const;
  // `len` bytes of the records section from `offset` (a file offset): from the image when
  // preloaded, else read into scratch_. Valid until the next call.
  StatusOr<const char*> RecordBytes(uint64_t offset, size_t len) const;
  Status OpenFile();
  Status ReadV2(int64_t n, Sample* out) const;
  uint64_t RecordBegin(int64_t n) const;

  int fd_ = -1;
  std::string path_;
  uint64_t file_size_ = 0;
  uint32_t version_ = 0;
  Schema schema_;
  size_t record_size_ = 0;  // version 1
  int64_t count_ = 0;
  uint64_t records_offset_ = kBinaryHeaderSize;
  uint64_t records_end_ = kBinaryHeaderSize;            // the file size (v1), index_offset (v2)
  std::shared_ptr<const char[]> image_;                 // the records section, once preloaded
  std::shared_ptr<const std::vector<uint64_t>> index_;  // version 2: count + 1 offsets
  mutable std::vector<char> scratch_;  // Read's record buffer; see Read for thread safety
};

// Writes a binary file: records are buffered, the header (with the final count) is written by
// Finish. A file without Finish has count 0 in its header and fails to open as truncated data.
class BinaryWriter {
 public:
  // Writes version 1 for single-hot one-label schemas, else version 2 (BinaryVersionFor).
  static StatusOr<std::unique_ptr<BinaryWriter>> Create(const std::string& path,
                                                        const Schema& schema);
  ~BinaryWriter();
  // A version 2 sample must match the schema (label, dense and feature counts, bags no longer
  // than max_len); one that does not is kInvalidArgument and nothing is written.
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
  uint32_t version_ = kBinaryVersion;
  int64_t count_ = 0;
  std::vector<char> buf_;
  uint64_t flushed_ = 0;         // bytes of records already written
  uint64_t records_offset_ = 0;  // version 2: where records start
  std::vector<uint64_t> index_;  // version 2: record offsets so far, relative to records_offset_
};

struct ConvertResult {
  int64_t rows = 0;      // lines read, malformed ones included (written with weight 0)
  int64_t bad_rows = 0;  // malformed lines
  std::vector<std::string> bad_reports;  // the first few, "file:line: reason"
};

struct TextLayout;

// Converts Criteo TSV files (or, given `layout`, general text files: data.format text), in
// order, to one binary file of `schema` (version per BinaryVersionFor). Malformed lines become
// weight-0 records so that record n of the output is line n of the input (positions shift
// nothing).
StatusOr<ConvertResult> Convert(const std::vector<std::string>& in_paths,
                                const std::string& out_path, const Schema& schema = {},
                                const TextLayout* layout = nullptr);

}  // namespace tandem::data
