// Where records come from: Criteo TSV files, binary files, or the generator, each addressed by
// record index in file order (lines for text). The Order turns global positions into indices.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/config/job_config.h"
#include "common/status.h"
#include "worker/data/binary_format.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/order.h"
#include "worker/data/record.h"
#include "worker/data/synthetic.h"
#include "worker/data/text_format.h"

namespace tandem::data {

// Thread-compatible; each reading thread owns its source.
class RecordSource {
 public:
  virtual ~RecordSource() = default;
  virtual const Schema& schema() const = 0;
  virtual int64_t num_records() const = 0;  // per epoch
  // The global order for this source (permutation or block shuffle), keyed by the job seed.
  virtual Order MakeOrder(uint64_t seed) const = 0;
  // Reads record `index` (file order). A malformed record becomes a weight-0 sample and is
  // added to bad_log(); only I/O failures are errors.
  virtual Status Read(int64_t index, Sample* out) = 0;
  // A second source over the same records with its own file handles and buffers and an empty
  // bad-line log, for another reading thread (Pipeline with threads > 1).
  virtual StatusOr<std::unique_ptr<RecordSource>> Clone() const {
    return Status::Unimplemented("this record source cannot be read by several threads");
  }
  const BadLineLog& bad_log() const { return bad_; }

 protected:
  BadLineLog bad_;
};

// Text files, concatenated in the given order: Criteo TSV, or the general text format when a
// layout is given. Open scans them once (memchr only) to index blocks of `block_lines` lines;
// Read parses lines from the current block, read whole.
class CriteoSource : public RecordSource {
 public:
  static constexpr int64_t kBlockLines = 4096;
  static StatusOr<std::unique_ptr<CriteoSource>> Open(const std::vector<std::string>& paths,
                                                      const Schema& schema,
                                                      int64_t block_lines = kBlockLines,
                                                      const TextLayout* layout = nullptr);
  ~CriteoSource() override;
  const Schema& schema() const override { return schema_; }
  int64_t num_records() const override { return num_records_; }
  Order MakeOrder(uint64_t seed) const override;
  Status Read(int64_t index, Sample* out) override;
  StatusOr<std::unique_ptr<RecordSource>> Clone() const override;

 private:
  struct Block {
    int file;
    uint64_t offset, end;  // byte range in the file
    int64_t first_record;  // global line index of its first line
    int64_t first_line;    // 1-based line number in its file
    int64_t lines;
  };
  CriteoSource() = default;
  Status IndexFile(int file, int64_t block_lines);
  Status LoadBlock(size_t k);

  Schema schema_;
  std::optional<TextLayout> layout_;  // general text format; none = Criteo
  std::vector<std::string> paths_;
  std::vector<int> fds_;
  std::vector<Block> blocks_;
  int64_t num_records_ = 0;
  size_t cached_ = SIZE_MAX;  // block held in buf_
  std::vector<char> buf_;
  std::vector<std::string_view> lines_;  // into buf_
};

// Binary files, concatenated in the given order.
class BinarySource : public RecordSource {
 public:
  // Files are read into memory (BinaryReader::Preload), in the given order, while their records
  // together fit `memory_bytes` (data.memory_bytes); the rest are read a record at a time.
  static StatusOr<std::unique_ptr<BinarySource>> Open(const std::vector<std::string>& paths,
                                                      const Schema& schema,
                                                      uint64_t memory_bytes = 0);
  uint64_t preloaded_bytes() const { return preloaded_bytes_; }
  const Schema& schema() const override { return schema_; }
  int64_t num_records() const override { return starts_.back(); }
  Order MakeOrder(uint64_t seed) const override;
  Status Read(int64_t index, Sample* out) override;
  StatusOr<std::unique_ptr<RecordSource>> Clone() const override;

 private:
  Schema schema_;
  std::vector<std::unique_ptr<BinaryReader>> readers_;
  std::vector<int64_t> starts_{0};  // first record of each file, then the total
  uint64_t preloaded_bytes_ = 0;
};

// The generator as a source of `num_records` records per epoch.
class SyntheticSource : public RecordSource {
 public:
  SyntheticSource(const SyntheticSpec& spec, int64_t num_records)
      : gen_(spec), num_records_(num_records) {}
  const Schema& schema() const override { return gen_.spec().schema; }
  int64_t num_records() const override { return num_records_; }
  Order MakeOrder(uint64_t seed) const override { return Order::Permuted(num_records_, seed); }
  Status Read(int64_t index, Sample* out) override;
  StatusOr<std::unique_ptr<RecordSource>> Clone() const override {
    return std::unique_ptr<RecordSource>(
        std::make_unique<SyntheticSource>(gen_.spec(), num_records_));
  }

 private:
  SyntheticGenerator gen_;
  int64_t num_records_;
};

// Sorted paths matching a glob (or the path itself when it has no wildcard).
StatusOr<std::vector<std::string>> ExpandGlob(const std::string& pattern);

// Records per epoch of the generator's train stream when data.format is synthetic: large, so
// a run rarely repeats a record, and finite, so the order is still a permutation.
inline constexpr int64_t kSyntheticTrainRecords = int64_t{1} << 40;

// The data schema of a job: data.num_dense, the features (or C1..Cn), data.labels.
Schema SchemaFromConfig(const config::JobConfig& job);

// The train (or eval) source that `job` describes. Synthetic eval has
// data.synthetic_eval_rows records of stream 1.
StatusOr<std::unique_ptr<RecordSource>> OpenSource(const config::JobConfig& job, uint64_t seed,
                                                   bool eval);

}  // namespace tandem::data
