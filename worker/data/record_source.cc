#include "worker/data/record_source.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/errno_status.h"

namespace tandem::data {

CriteoSource::~CriteoSource() {
  for (int fd : fds_) ::close(fd);
}

StatusOr<std::unique_ptr<CriteoSource>> CriteoSource::Open(const std::vector<std::string>& paths,
                                                           const Schema& schema,
                                                           int64_t block_lines,
                                                           const TextLayout* layout) {
  std::unique_ptr<CriteoSource> s(new CriteoSource);
  s->schema_ = schema;
  if (layout) s->layout_ = *layout;
  s->paths_ = paths;
  for (size_t i = 0; i < paths.size(); ++i) {
    const int fd = ::open(paths[i].c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoToStatus(errno, "open " + paths[i]);
    s->fds_.push_back(fd);
    TANDEM_RETURN_IF_ERROR(s->IndexFile(static_cast<int>(i), block_lines));
  }
  if (s->num_records_ == 0) {
    return Status::InvalidArgument(std::string(layout ? "text" : "criteo") + " data: no lines in " +
                                   (paths.empty() ? std::string("(no files)") : paths[0]) +
                                   (paths.size() > 1 ? " and the other files" : ""));
  }
  return s;
}

// Records where every block_lines-th line of the file starts; never parses.
Status CriteoSource::IndexFile(int file, int64_t block_lines) {
  LineReader reader;
  TANDEM_RETURN_IF_ERROR(reader.Open(paths_[file]));
  std::string_view line;
  int64_t in_block = 0;
  while (reader.Next(&line)) {
    if (in_block == 0) {
      blocks_.push_back({file, reader.line_offset(), 0, num_records_, reader.line_number(), 0});
    }
    ++blocks_.back().lines;
    ++num_records_;
    blocks_.back().end = reader.line_offset() + line.size();
    if (++in_block == block_lines) in_block = 0;
  }
  return reader.status();
}

Order CriteoSource::MakeOrder(uint64_t seed) const {
  std::vector<int64_t> sizes;
  sizes.reserve(blocks_.size());
  for (const Block& b : blocks_) sizes.push_back(b.lines);
  return Order::BlockShuffled(std::move(sizes), seed);
}

Status CriteoSource::LoadBlock(size_t k) {
  const Block& b = blocks_[k];
  buf_.resize(b.end - b.offset);
  for (size_t done = 0; done < buf_.size();) {
    const ssize_t n = ::pread(fds_[b.file], buf_.data() + done, buf_.size() - done,
                              static_cast<off_t>(b.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, "read " + paths_[b.file]);
    if (n == 0) return Status::DataLoss(paths_[b.file] + ": file shrank while training");
    done += static_cast<size_t>(n);
  }
  lines_.clear();
  std::string_view rest(buf_.data(), buf_.size());
  for (int64_t i = 0; i < b.lines; ++i) {
    const size_t nl = rest.find('\n');
    lines_.push_back(rest.substr(0, nl));
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
  }
  cached_ = k;
  return Status::Ok();
}

// Shares nothing but the (copied) block index, so the clone never rescans the files.
StatusOr<std::unique_ptr<RecordSource>> CriteoSource::Clone() const {
  std::unique_ptr<CriteoSource> s(new CriteoSource);
  s->schema_ = schema_;
  s->layout_ = layout_;
  s->paths_ = paths_;
  s->blocks_ = blocks_;
  s->num_records_ = num_records_;
  for (const std::string& path : paths_) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoToStatus(errno, "open " + path);
    s->fds_.push_back(fd);
  }
  return std::unique_ptr<RecordSource>(std::move(s));
}

Status CriteoSource::Read(int64_t index, Sample* out) {
  const auto it = std::upper_bound(blocks_.begin(), blocks_.end(), index,
                                   [](int64_t i, const Block& b) { return i < b.first_record; });
  const size_t k = static_cast<size_t>(it - blocks_.begin()) - 1;
  if (k != cached_) TANDEM_RETURN_IF_ERROR(LoadBlock(k));
  const Block& b = blocks_[k];
  const int64_t j = index - b.first_record;
  const char* why = nullptr;
  const bool ok = layout_ ? ParseTextLine(lines_[j], *layout_, schema_, out, &why)
                          : ParseCriteoLine(lines_[j], schema_, out, &why);
  if (!ok) {
    bad_.Add(paths_[b.file], b.first_line + j, why);
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<BinarySource>> BinarySource::Open(const std::vector<std::string>& paths,
                                                           const Schema& schema,
                                                           uint64_t memory_bytes) {
  auto s = std::make_unique<BinarySource>();
  s->schema_ = schema;
  for (const auto& path : paths) {
    TANDEM_ASSIGN_OR_RETURN(auto reader, BinaryReader::Open(path, schema));
    if (reader->records_bytes() <= memory_bytes - s->preloaded_bytes_) {  // never above it
      TANDEM_RETURN_IF_ERROR(reader->Preload());
      s->preloaded_bytes_ += reader->records_bytes();
    }
    s->starts_.push_back(s->starts_.back() + reader->num_records());
    s->readers_.push_back(std::move(reader));
  }
  if (s->num_records() == 0) return Status::InvalidArgument("binary data: no records");
  return s;
}

StatusOr<std::unique_ptr<RecordSource>> BinarySource::Clone() const {
  auto s = std::make_unique<BinarySource>();
  s->schema_ = schema_;
  s->starts_ = starts_;
  for (const auto& reader : readers_) {
    TANDEM_ASSIGN_OR_RETURN(auto copy, reader->Clone());
    if (copy->num_records() != reader->num_records()) {
      return Status::DataLoss(reader->path() + ": record count changed while training");
    }
    s->readers_.push_back(std::move(copy));
  }
  s->preloaded_bytes_ = preloaded_bytes_;
  return std::unique_ptr<RecordSource>(std::move(s));
}

Order BinarySource::MakeOrder(uint64_t seed) const { return Order::Permuted(num_records(), seed); }

Status BinarySource::Read(int64_t index, Sample* out) {
  const size_t f = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), index) -
                                       starts_.begin() - 1);
  const int64_t n = index - starts_[f];
  TANDEM_RETURN_IF_ERROR(readers_[f]->Read(n, out));
  // Converted malformed lines are weight-0 records; report them like the text reader does.
  if (out->weight == 0) bad_.Add(readers_[f]->path(), n, "weight-0 record (malformed source line)");
  return Status::Ok();
}

Status SyntheticSource::Read(int64_t index, Sample* out) {
  gen_.Generate(index, out);
  return Status::Ok();
}

StatusOr<std::vector<std::string>> ExpandGlob(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> paths;
  if (rc == 0) paths.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || paths.empty())
    return Status::NotFound("no data files match " + pattern);
  if (rc != 0) return Status::Unavailable("glob failed for " + pattern);
  std::sort(paths.begin(), paths.end());  // a fixed file order is part of the record order
  return paths;
}

Schema SchemaFromConfig(const config::JobConfig& job) {
  Schema schema{static_cast<int>(job.data.num_dense), static_cast<int>(job.data.num_categorical),
                static_cast<int>(job.data.labels.size())};
  schema.wide = config::HasWideTables(job);
  if (job.features.empty()) return schema;  // Criteo: identity tables, one id each
  const std::vector<std::string> tables = config::TableNames(job);
  for (const auto& [name, f] : job.features) {
    const std::string& table = f.table.empty() ? name : f.table;
    schema.table.push_back(
        static_cast<int>(std::find(tables.begin(), tables.end(), table) - tables.begin()));
    schema.max_len.push_back(static_cast<int>(f.max_len));
    schema.mean.push_back(f.pooling == "mean");
    schema.weighted.push_back(f.weighted);
  }
  return schema;
}

StatusOr<std::unique_ptr<RecordSource>> OpenSource(const config::JobConfig& job, uint64_t seed,
                                                   bool eval) {
  const config::DataConfig& config = job.data;
  const Schema schema = SchemaFromConfig(job);
  if (config.format == "synthetic") {
    SyntheticSpec spec{seed,
                       schema,
                       config.synthetic_vocab,
                       config.synthetic_zipf,
                       eval ? 1u : 0u,
                       TeacherFromName(config.synthetic_teacher),
                       config.synthetic_task_correlation};
    const int64_t n = eval ? config.synthetic_eval_rows : kSyntheticTrainRecords;
    if (n <= 0) return Status::InvalidArgument("data: no synthetic eval rows configured");
    return std::unique_ptr<RecordSource>(std::make_unique<SyntheticSource>(spec, n));
  }
  const std::string& pattern = eval ? config.eval : config.train;
  if (pattern.empty())
    return Status::InvalidArgument("data: no " + std::string(eval ? "eval" : "train") +
                                   " files configured");
  TANDEM_ASSIGN_OR_RETURN(auto paths, ExpandGlob(pattern));
  if (config.format == "criteo") {
    TANDEM_ASSIGN_OR_RETURN(auto s, CriteoSource::Open(paths, schema));
    return std::unique_ptr<RecordSource>(std::move(s));
  }
  if (config.format == "text") {
    TANDEM_ASSIGN_OR_RETURN(TextLayout layout, TextLayout::FromConfig(job));
    TANDEM_ASSIGN_OR_RETURN(auto s,
                            CriteoSource::Open(paths, schema, CriteoSource::kBlockLines, &layout));
    return std::unique_ptr<RecordSource>(std::move(s));
  }
  if (config.format == "binary") {
    TANDEM_ASSIGN_OR_RETURN(
        auto s, BinarySource::Open(paths, schema, static_cast<uint64_t>(config.memory_bytes)));
    return std::unique_ptr<RecordSource>(std::move(s));
  }
  return Status::InvalidArgument("data.format must be criteo, text, binary or synthetic, not " +
                                 config.format);
}

}  // namespace tandem::data
