// Data benchmarks (DESIGN §12): Criteo parse throughput against two baselines — merely
// splitting the same in-memory buffer into lines and fields, and reading the same file without
// parsing (read(2) into a buffer, page cache warm) — and binary record reads against raw pread
// of the same bytes; and the general text format (issue 18: multi-hot lists, several labels)
// read and parsed per line against reading the same file's lines without parsing. Prints one
// JSON line per figure.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_json.h"
#include "worker/data/binary_format.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/synthetic.h"
#include "worker/data/text_format.h"

namespace tandem::data {
namespace {

constexpr int64_t kRows = 200000;
constexpr int kReps = 5;
// The text benchmark's rows: ~1 KB each (8 bags of mean length 20), ~40 MB in all.
constexpr int64_t kTextRows = 40000;
constexpr int kTextDense = 13, kTextFeatures = 8, kTextMaxLen = 40, kTextLabels = 2;

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Baseline: finds every line and field boundary with memchr, touching each byte like the parser.
size_t SplitOnly(const std::string& buf) {
  size_t fields = 0;
  const char* p = buf.data();
  const char* end = p + buf.size();
  while (p < end) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
    if (!nl) nl = end;
    for (const char* f = p; f < nl; ++fields) {
      const char* tab = static_cast<const char*>(std::memchr(f, '\t', nl - f));
      f = tab ? tab + 1 : nl;
    }
    p = nl + 1;
  }
  return fields;
}

size_t ParseAll(const std::string& buf, Sample* s) {
  size_t good = 0;
  const char* p = buf.data();
  const char* end = p + buf.size();
  while (p < end) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
    if (!nl) nl = end;
    good += ParseCriteoLine(std::string_view(p, nl - p), Schema{}, s);
    p = nl + 1;
  }
  return good;
}

std::string ReadWhole(const std::string& path) {
  std::string out;
  LineReader r;
  if (!r.Open(path).ok()) return out;
  std::string_view line;
  while (r.Next(&line)) out.append(line).push_back('\n');
  return out;
}

void BenchParse(const std::string& tsv) {
  const std::string buf = ReadWhole(tsv);
  Sample sample;
  std::vector<double> parse, split;
  size_t sink = 0;
  for (int rep = 0; rep < kReps; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    sink += SplitOnly(buf);
    split.push_back(Seconds(t0));
    t0 = std::chrono::steady_clock::now();
    sink += ParseAll(buf, &sample);
    parse.push_back(Seconds(t0));
  }
  const double mb = buf.size() / 1e6;
  const double tp = bench::Median(parse), ts = bench::Median(split);
  bench::PrintFigure("criteo_parse_mb_per_s", mb / tp, "MB/s", true, "memchr_split_lines_fields",
                     mb / ts);
  bench::PrintFigure("criteo_parse_lines_per_s", kRows / tp, "lines/s", true,
                     "memchr_split_lines_fields", kRows / ts);
  if (sink == 42) std::puts("");  // keeps the work observable
}

// Baseline: read(2) of the whole file into a reused buffer, no parsing; returns bytes read.
size_t ReadOnly(const std::string& path, std::vector<char>* buf) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  size_t total = 0;
  for (ssize_t n; (n = ::read(fd, buf->data(), buf->size())) > 0;) total += n;
  ::close(fd);
  return total;
}

// What a reader of the file does: LineReader (1 MiB read(2) chunks) and a parse per line.
size_t ReadAndParse(const std::string& path, Sample* s) {
  LineReader r;
  if (!r.Open(path).ok()) return 0;
  size_t good = 0;
  std::string_view line;
  while (r.Next(&line)) good += ParseCriteoLine(line, Schema{}, s);
  return good;
}

void BenchReadParse(const std::string& tsv) {
  std::vector<char> buf(1 << 20);
  Sample sample;
  std::vector<double> parse, read;
  size_t sink = ReadOnly(tsv, &buf);  // warms the page cache
  for (int rep = 0; rep < kReps; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    sink += ReadOnly(tsv, &buf);
    read.push_back(Seconds(t0));
    t0 = std::chrono::steady_clock::now();
    sink += ReadAndParse(tsv, &sample);
    parse.push_back(Seconds(t0));
  }
  bench::PrintFigure("criteo_read_parse_lines_per_s", kRows / bench::Median(parse), "lines/s", true,
                     "read2_same_file_no_parse", kRows / bench::Median(read));
  if (sink == 42) std::puts("");
}

// 2 labels, 13 dense values, 8 multi-hot features of its own table each with bag lengths uniform
// in [0, 40] (mean 20): a recommendation log's shape rather than Criteo's.
Schema TextSchema() {
  Schema schema(kTextDense, kTextFeatures, kTextLabels);
  for (int f = 0; f < kTextFeatures; ++f) {
    schema.table.push_back(f);
    schema.max_len.push_back(kTextMaxLen);
    schema.mean.push_back(false);
  }
  return schema;
}

// The layout FromConfig gives without data.text.columns: labels, I1..In, then the features.
TextLayout TextColumns() {
  TextLayout layout;
  for (int i = 0; i < kTextLabels; ++i) layout.columns.push_back({TextLayout::Kind::kLabel, i});
  for (int i = 0; i < kTextDense; ++i) layout.columns.push_back({TextLayout::Kind::kDense, i});
  for (int i = 0; i < kTextFeatures; ++i) layout.columns.push_back({TextLayout::Kind::kFeature, i});
  return layout;
}

// Baseline: LineReader alone, every line found but none parsed; returns the bytes seen.
size_t ReadLinesOnly(const std::string& path) {
  LineReader r;
  if (!r.Open(path).ok()) return 0;
  size_t bytes = 0;
  std::string_view line;
  while (r.Next(&line)) bytes += line.size();
  return bytes;
}

size_t ReadAndParseText(const std::string& path, const TextLayout& layout, const Schema& schema,
                        Sample* s) {
  LineReader r;
  if (!r.Open(path).ok()) return 0;
  size_t good = 0;
  std::string_view line;
  while (r.Next(&line)) good += ParseTextLine(line, layout, schema, s);
  return good;
}

void BenchText(const std::string& path, const TextLayout& layout, const Schema& schema) {
  Sample sample(schema);
  std::vector<double> parse, read;
  const size_t bytes = ReadLinesOnly(path);  // also warms the page cache
  size_t sink = 0, good = 0;
  for (int rep = 0; rep < kReps; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    sink += ReadLinesOnly(path);
    read.push_back(Seconds(t0));
    t0 = std::chrono::steady_clock::now();
    good = ReadAndParseText(path, layout, schema, &sample);
    parse.push_back(Seconds(t0));
  }
  // A malformed line parses faster than a good one: the figure would flatter the parser.
  if (good != static_cast<size_t>(kTextRows)) {
    std::fprintf(stderr, "data_bench: %zu of %lld text lines parsed\n", good,
                 static_cast<long long>(kTextRows));
    return;
  }
  bench::PrintFigure("text_multi_hot_read_parse_lines_per_s", kTextRows / bench::Median(parse),
                     "lines/s", true, "linereader_same_file_no_parse",
                     kTextRows / bench::Median(read));
  // Per byte too, beside criteo_parse_mb_per_s: a text line here is ~5x a Criteo line.
  const double mb = static_cast<double>(bytes) / 1e6;
  bench::PrintFigure("text_multi_hot_read_parse_mb_per_s", mb / bench::Median(parse), "MB/s", true,
                     "linereader_same_file_no_parse", mb / bench::Median(read));
  if (sink == 42) std::puts("");
}

void BenchBinary(const std::string& bin) {
  auto reader = BinaryReader::Open(bin);
  if (!reader.ok()) return;
  const int fd = ::open(bin.c_str(), O_RDONLY);
  const size_t total = (*reader)->num_records() * BinaryRecordSize({});
  std::vector<char> raw(1 << 20);
  Sample sample;
  std::vector<double> records, pread;
  for (int rep = 0; rep < kReps; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t n = 0; n < (*reader)->num_records(); ++n)
      (*reader)->Read(n, &sample).IgnoreError();
    records.push_back(Seconds(t0));
    t0 = std::chrono::steady_clock::now();
    for (size_t off = 0; off < total; off += raw.size()) {
      if (::pread(fd, raw.data(), std::min(raw.size(), total - off), kBinaryHeaderSize + off) < 0)
        break;
    }
    pread.push_back(Seconds(t0));
  }
  ::close(fd);
  const double mb = total / 1e6;
  bench::PrintFigure("binary_read_mb_per_s", mb / bench::Median(records), "MB/s", true,
                     "raw_pread_1MiB_same_bytes", mb / bench::Median(pread));
}

}  // namespace
}  // namespace tandem::data

// `--only criteo|binary|text` runs one part (e.g. `scripts/bench.sh data -- --only text`).
int main(int argc, char** argv) {
  using namespace tandem::data;
  std::string only;
  if (argc == 3 && std::string(argv[1]) == "--only") {
    only = argv[2];
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: data_bench [--only criteo|binary|text]\n");
    return 2;
  }
  const auto wanted = [&](const char* part) { return only.empty() || only == part; };
  char dir[] = "/tmp/data_bench_XXXXXX";
  if (!::mkdtemp(dir)) return 1;
  const std::string tsv = std::string(dir) + "/d.tsv", bin = std::string(dir) + "/d.bin";
  const std::string text = std::string(dir) + "/d.txt";
  SyntheticSpec spec;
  int rc = 0;
  if (wanted("criteo")) {
    if (WriteSyntheticCriteo(tsv, spec, kRows).ok()) {
      BenchParse(tsv);
      BenchReadParse(tsv);
    } else {
      rc = 1;
    }
  }
  if (wanted("binary")) {
    if (WriteSyntheticBinary(bin, spec, kRows).ok())
      BenchBinary(bin);
    else
      rc = 1;
  }
  if (wanted("text")) {
    SyntheticSpec text_spec;
    text_spec.schema = TextSchema();
    const TextLayout layout = TextColumns();
    if (WriteSyntheticText(text, text_spec, layout, kTextRows).ok())
      BenchText(text, layout, text_spec.schema);
    else
      rc = 1;
  }
  ::unlink(tsv.c_str());
  ::unlink(bin.c_str());
  ::unlink(text.c_str());
  ::rmdir(dir);
  return rc;
}
