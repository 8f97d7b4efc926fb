// A probe for issue 21's storage decision, not a tandem feature: what the RocksDB tier costs a
// row of the cold path, against what a table of rows addressed by hash in a mapped file would
// cost, on the same stream of ids in the same run.
//
// Both tiers hold --rows rows of 144 B (dim 16, Adagrad: RowMeta, embedding, state) whose ids
// are drawn Zipf(--zipf), --draws draws a step (unique ids, sorted, as a worker sends them). A
// step reads its rows (the pull) and then changes each in place (the push's apply, a stand-in
// for Adagrad: the same bytes touched). Four arms, interleaved over --reps:
//   - store, cache 1/100: EmbeddingStore (RocksDB, the store's own options, stage, write-back)
//     with ps.cache_bytes a hundredth of the table, as `scripts/bench.sh scale` at 1/100;
//   - store, all cached: the same store with every row in its cache, read once before the steps
//     (the baseline of the first);
//   - file: the rows in buckets of 4 KiB of a MAP_SHARED file, 26 slots a bucket, 3/4 full, no
//     cache in front: every access goes through the mapping (page cache); the pages the steps
//     dirtied are written back (fdatasync) before the clock stops. No durability, no restore point,
//     no checkpoint: what a tier made of such a file would need on top is not here;
//   - array: the same buckets in anonymous memory (the baseline of the file).
// Figures: rows/s of each arm (steps after the first fifth), and the tier's cost a row, the
// difference of the per-row times of an arm and its baseline: the cost of the misses, write-backs
// and compactions for the store, of the mapping for the file. The process's CPU a row (all
// threads, RocksDB's compactions among them) and the whole machine's (the kernel's writeback
// threads among them) are printed on stderr.
// What the file arm leaves out: a run of a few seconds with one fdatasync a step. In a job such
// a file lost badly (docs/ARCHITECTURE.md, "a read tier in a mapped file tried": the kernel
// writes every dirty page back within seconds and each next write faults on it), so its figure
// is a floor, not what a tier made of such a file would cost.
//
// Usage: row_file_bench [--rows R] [--zipf Z] [--draws D] [--steps S] [--reps N] [--dir D]
//                       [--only ARM]
//   defaults 8000000, 1.05, 32768, 300, 2, a temporary directory. --only ARM runs one arm
//   (store_cold, store_all, file, array) and prints no figures: for a profiler. The table of 8 M
//   rows is the size of `bench/scale_bench.sh --steps 600 --rows 2457600`'s (1.2 GB of rows).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_json.h"
#include "bench/shard_steps.h"
#include "common/embedding/table_spec.h"
#include "common/testing/test_util.h"
#include "server/ps/embedding_store.h"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kDim = 16;
constexpr size_t kRowBytes = 16 + 4 * (kDim + kDim);  // RowMeta, embedding, Adagrad state

struct Args {
  uint64_t rows = 8'000'000;
  double zipf = 1.05;
  uint64_t draws = 32768;
  int steps = 300;
  int reps = 2;
  std::string dir;
  std::string only;  // one arm (store_cold, store_all, file, array), for a profiler: no figures
};

void Check(const Status& s, const std::string& what) {
  if (s.ok()) return;
  std::fprintf(stderr, "row_file_bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(1);
}

// The machine's busy time (all CPUs, jiffies as seconds) and this process's CPU seconds.
double MachineBusySeconds() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  return static_cast<double>(user + nice + system + irq + softirq) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}
double ProcessCpuSeconds() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return r.ru_utime.tv_sec + r.ru_stime.tv_sec + 1e-6 * (r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

struct Result {
  double rows_per_sec = 0, process_us_per_row = 0, machine_us_per_row = 0;
};

// Runs the steps through `read` and `update` (each given a step's ids), timing the steady part.
// `finish` ends the timed part (the file's writeback of what the steps dirtied).
template <typename Read, typename Update, typename Finish>
Result Drive(const std::vector<std::vector<uint64_t>>& steps, Read read, Update update,
             Finish finish) {
  const size_t warm = steps.size() / 5;
  uint64_t rows = 0;
  Clock::time_point t0 = Clock::now();
  double cpu0 = 0, busy0 = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    if (s == warm) {
      t0 = Clock::now();
      cpu0 = ProcessCpuSeconds();
      busy0 = MachineBusySeconds();
    }
    read(steps[s]);
    update(steps[s]);
    if (s >= warm) rows += steps[s].size();
  }
  finish();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  const double n = static_cast<double>(rows);
  return {n / wall, 1e6 * (ProcessCpuSeconds() - cpu0) / n,
          1e6 * (MachineBusySeconds() - busy0) / n};
}

// What the apply does to a row's bytes, in both tiers: the embedding and the state change.
void Touch(uint8_t* row) {
  float* f = reinterpret_cast<float*>(row + 16);
  for (uint32_t k = 0; k < 2 * kDim; ++k) f[k] += 0.001f;
  reinterpret_cast<uint64_t*>(row)[1] += 1;
}

Result StoreArm(const Args& a, const std::string& dir, uint64_t cache_bytes,
                const std::vector<std::vector<uint64_t>>& steps) {
  ps::StoreOptions o;
  o.db_dir = dir;
  embedding::TableSpec t;
  t.table_id = 0;
  t.dim = kDim;
  t.optimizer = embedding::OptimizerKind::kAdagrad;
  o.tables = {t};
  o.cache_bytes = cache_bytes;
  o.max_dirty_bytes = std::max<uint64_t>(64ull << 20, cache_bytes / 4);
  auto store = ps::EmbeddingStore::Open(o);
  Check(store.status(), "open the store");
  // Every row stored, as after a long job: written in id order, a million at a time.
  {
    std::vector<uint64_t> ids;
    for (uint64_t r = 0; r < a.rows; ++r) ids.push_back(IdOf(r));
    std::sort(ids.begin(), ids.end());
    std::vector<uint8_t> rows(1'000'000 * kRowBytes, 0);
    for (size_t from = 0; from < ids.size(); from += 1'000'000) {
      const size_t n = std::min<size_t>(1'000'000, ids.size() - from);
      Check((*store)->WriteRows(0, {ids.data() + from, n}, rows.data()), "write the rows");
    }
    // A cache that holds the table is filled first, so that its steps never read RocksDB (as
    // in the all-in-cache job, where no row leaves the cache).
    if (cache_bytes >= a.rows * kRowBytes * 2) {
      std::vector<float> out(1'000'000 * kDim);
      for (size_t from = 0; from < ids.size(); from += 1'000'000) {
        const size_t n = std::min<size_t>(1'000'000, ids.size() - from);
        Check((*store)->Read(0, {ids.data() + from, n}, out.data()), "fill the cache");
      }
    }
  }
  std::vector<float> out;
  return Drive(
      steps,
      [&](const std::vector<uint64_t>& ids) {
        out.resize(ids.size() * kDim);
        Check((*store)->Read(0, ids, out.data()), "read");
      },
      [&](const std::vector<uint64_t>& ids) {
        Check((*store)->UpdateDistinct(
                  0, ids, [](size_t, embedding::RowRef row, bool) { Touch(row.bytes); }),
              "update");
      },
      [] {});
}

// Rows addressed by hash: bucket b of 4 KiB holds a count and up to kSlots (id, row) slots; an
// id lives in the first bucket from its hash's that has it or room.
class Buckets {
 public:
  static constexpr size_t kBucketBytes = 4096;
  static constexpr size_t kSlotBytes = 8 + kRowBytes;
  static constexpr size_t kSlots = (kBucketBytes - 8) / kSlotBytes;

  Buckets(uint8_t* base, uint64_t buckets) : base_(base), n_(buckets) {}
  static uint64_t BucketsFor(uint64_t rows) { return rows * 4 / (3 * kSlots) + 1; }

  // The row of `id`, or a new slot for it when `insert`; nullptr when absent.
  uint8_t* Find(uint64_t id, bool insert) {
    for (uint64_t b = (id * 0x9e3779b97f4a7c15ull) % n_;; b = (b + 1) % n_) {
      uint8_t* bucket = base_ + b * kBucketBytes;
      uint64_t& count = *reinterpret_cast<uint64_t*>(bucket);
      for (uint64_t k = 0; k < count; ++k) {
        uint8_t* slot = bucket + 8 + k * kSlotBytes;
        if (std::memcmp(slot, &id, 8) == 0) return slot + 8;
      }
      if (count < kSlots) {
        if (!insert) return nullptr;
        uint8_t* slot = bucket + 8 + count++ * kSlotBytes;
        std::memcpy(slot, &id, 8);
        return slot + 8;
      }
    }
  }

 private:
  uint8_t* base_;
  uint64_t n_;
};

Result BucketArm(const Args& a, const std::string& path,
                 const std::vector<std::vector<uint64_t>>& steps) {
  const uint64_t buckets = Buckets::BucketsFor(a.rows);
  const size_t bytes = buckets * Buckets::kBucketBytes;
  int fd = -1;
  void* p = nullptr;
  if (path.empty()) {
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  } else {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0)
      Check(Status::Internal(path), "create");
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (p == MAP_FAILED) Check(Status::Internal("mmap"), "map the buckets");
  Buckets table(static_cast<uint8_t*>(p), buckets);
  for (uint64_t r = 0; r < a.rows; ++r) std::memset(table.Find(IdOf(r), true), 0, kRowBytes);
  if (fd >= 0) ::fdatasync(fd);  // the loading's writeback is not the steps'
  std::vector<float> out;
  Result res = Drive(
      steps,
      [&](const std::vector<uint64_t>& ids) {
        out.resize(ids.size() * kDim);
        for (size_t i = 0; i < ids.size(); ++i) {
          const uint8_t* row = table.Find(ids[i], false);
          std::memcpy(&out[i * kDim], row + 16, kDim * sizeof(float));
        }
      },
      [&](const std::vector<uint64_t>& ids) {
        for (uint64_t id : ids) Touch(table.Find(id, false));
      },
      // Every page the steps dirtied written back once, inside the timed part: in a long run
      // the kernel writes a page dirty for 30 s, which coalesces at least as many changes.
      [&] {
        if (fd >= 0) ::fdatasync(fd);
      });
  ::munmap(p, bytes);
  if (fd >= 0) ::close(fd);
  return res;
}

void Print(const char* what, const Result& r) {
  std::fprintf(stderr,
               "row_file_bench: %-22s %10.0f rows/s  %6.2f us CPU a row (process)  %6.2f us "
               "(machine)\n",
               what, r.rows_per_sec, r.process_us_per_row, r.machine_us_per_row);
}

int Main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--rows")
      a.rows = std::stoull(v);
    else if (k == "--zipf")
      a.zipf = std::stod(v);
    else if (k == "--draws")
      a.draws = std::stoull(v);
    else if (k == "--steps")
      a.steps = std::stoi(v);
    else if (k == "--reps")
      a.reps = std::stoi(v);
    else if (k == "--dir")
      a.dir = v;
    else if (k == "--only")
      a.only = v;
    else {
      std::fprintf(stderr,
                   "usage: row_file_bench [--rows R] [--zipf Z] [--draws D] [--steps S] "
                   "[--reps N] [--dir D] [--only ARM]\n");
      return 2;
    }
  }
  std::optional<testing::TempDir> temp;
  if (a.dir.empty()) {
    temp.emplace();
    a.dir = temp->path();
  }
  const auto steps = ZipfSteps(a.rows, a.zipf, a.draws, a.steps);
  if (!a.only.empty()) {
    const uint64_t table = a.rows * kRowBytes;
    const std::string d = a.dir + "/only";
    std::filesystem::create_directories(d);
    if (a.only == "store_cold")
      Print("store, cache 1/100", StoreArm(a, d, table / 100, steps));
    else if (a.only == "store_all")
      Print("store, all cached", StoreArm(a, d, 4 * table, steps));
    else if (a.only == "file")
      Print("file", BucketArm(a, d + "/rows.file", steps));
    else if (a.only == "array")
      Print("array", BucketArm(a, "", steps));
    else {
      std::fprintf(stderr, "row_file_bench: unknown arm %s\n", a.only.c_str());
      return 2;
    }
    std::filesystem::remove_all(d);
    return 0;
  }
  const uint64_t table_bytes = a.rows * kRowBytes;
  std::vector<double> store_cold, store_all, file, array;
  for (int rep = 0; rep < a.reps; ++rep) {
    const std::string d = a.dir + "/rep" + std::to_string(rep);
    std::filesystem::create_directories(d);
    Result r = StoreArm(a, d + "/cold", table_bytes / 100, steps);
    Print("store, cache 1/100", r);
    store_cold.push_back(r.rows_per_sec);
    r = StoreArm(a, d + "/all", 4 * table_bytes, steps);
    Print("store, all cached", r);
    store_all.push_back(r.rows_per_sec);
    r = BucketArm(a, d + "/rows.file", steps);
    Print("file", r);
    file.push_back(r.rows_per_sec);
    r = BucketArm(a, "", steps);
    Print("array", r);
    array.push_back(r.rows_per_sec);
    std::filesystem::remove_all(d);
  }
  const double sc = Median(store_cold), sa = Median(store_all), f = Median(file),
               ar = Median(array);
  PrintFigure("row_file_bench_store_cold", sc, "rows/s", true, "the store with every row cached",
              sa);
  PrintFigure("row_file_bench_file", f, "rows/s", true, "the same buckets in anonymous memory", ar);
  // The tiers' own cost a row: what a miss-and-write-back tier adds to a row's time.
  PrintFigure("row_file_bench_tier_us_per_row_file", 1e6 * (1 / f - 1 / ar), "us", false,
              "the RocksDB tier's cost a row (store at 1/100 less all cached)",
              1e6 * (1 / sc - 1 / sa));
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) { return tandem::bench::Main(argc, argv); }
