// Data benchmarks (DESIGN §12): Criteo parse throughput against two baselines — merely
// splitting the same in-memory buffer into lines and fields, and reading the same file without
// parsing (read(2) into a buffer, page cache warm) — and binary record reads against raw pread
// of the same bytes. Prints one JSON line per figure.
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

namespace tandem::data {
namespace {

constexpr int64_t kRows = 200000;
constexpr int kReps = 5;

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

int main() {
  using namespace tandem::data;
  char dir[] = "/tmp/data_bench_XXXXXX";
  if (!::mkdtemp(dir)) return 1;
  const std::string tsv = std::string(dir) + "/d.tsv", bin = std::string(dir) + "/d.bin";
  SyntheticSpec spec;
  if (!WriteSyntheticCriteo(tsv, spec, kRows).ok() ||
      !WriteSyntheticBinary(bin, spec, kRows).ok()) {
    return 1;
  }
  BenchParse(tsv);
  BenchReadParse(tsv);
  BenchBinary(bin);
  ::unlink(tsv.c_str());
  ::unlink(bin.c_str());
  ::rmdir(dir);
  return 0;
}
