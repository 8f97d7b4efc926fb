// Checkpoint benchmark (issue 6, "Benchmarks"), in one process against the real ps::Shard and
// durable copy. Every figure is the median of --reps runs, printed as one JSON line (DESIGN §12)
// beside a baseline measured in the same run; progress and per-run values go to stderr.
//
//  1. One shard (k = 0, 1 worker, RocksDB storage, one dim-16 Adagrad table: 144-byte rows) is
//     filled with --rows rows (default 10 million, pushes of 1M distinct ids), and its first
//     checkpoint part is taken: it copies everything.
//  2. Baseline "full dump": every file of a restore point of that table copied into an empty
//     durable root (CopyToDurable with no previous part): a non-incremental checkpoint.
//  3. For n = 10^4, 10^5, 10^6 changed rows (random existing ids, one push step): the training
//     stall (Shard::TakeRestorePoint: flush of dirty rows + memtable, RocksDB checkpoint,
//     marker) and the total (stall + CheckpointPartAt, which reuses that restore point and copies
//     only the SSTs the durable pool lacks), each against the full dump; also the bytes copied.
//     n = 10^4 runs 8 checkpoints in a row and also reports their mean: with random ids every
//     L0 -> L1 compaction (each 4 flushes) rewrites all of L1, and the checkpoint after it
//     copies that, so the median alone would hide what incremental checkpoints cost over time.
//  4. Resume from the newest durable part: presence/size check, MaterializePart into a fresh
//     shard directory seeded as a restore point, Shard::Open on it (RebuildLiveDb + store open)
//     and one pull-sized read; against reading every byte of the part sequentially. Both start
//     with the part's files dropped from the page cache (posix_fadvise DONTNEED), as after a move
//     to another host; and again with every byte of the part in the page cache (a restart on
//     the same host).
//
// Before each measured push the bench waits until RocksDB's background compactions settle (the
// live DB's SST set and sizes stop changing), so that their CPU and disk use do not land in one
// figure by chance. Compaction outputs are new SSTs: the next checkpoint copies them, and that
// cost is in its total (and bytes) as it would be in a job.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_json.h"
#include "bench/shard_steps.h"
#include "common/log.h"
#include "common/testing/test_util.h"
#include "server/ps/durable_copy.h"
#include "server/ps/restore_marker.h"
#include "server/ps/shard.h"

namespace tandem::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kDim = 16;
constexpr uint64_t kMaxIdsPerPush = 1'000'000;
constexpr int kSmallRuns = 8;

struct Args {
  uint64_t rows = 10'000'000;
  int reps = 3;
  // Ids read after a resume: one two-hosts.yaml worker batch (2048 samples) x 26 tables.
  uint64_t batch = 2048 * 26;
};

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / v.size();
}

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

[[noreturn]] void Die(const std::string& what, const Status& s) {
  std::fprintf(stderr, "checkpoint_bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(1);
}
void Check(const Status& s, const std::string& what) {
  if (!s.ok()) Die(what, s);
}

std::string Human(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", bytes / 1e6);
  return buf;
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec)) total += it->file_size(ec);
  return total;
}

// `rows` sizes the cache so that it holds the whole table (see the top of Run).
ps::ShardOptions Options(const std::string& dir, uint64_t rows) {
  ps::ShardOptions o = bench::OneTableShard(dir, kDim);
  o.max_rows_per_push = kMaxIdsPerPush;
  o.cache_bytes = std::max<uint64_t>(o.cache_bytes, rows * 2 * o.tables[0].row_bytes());
  return o;
}

void PushStep(ps::Shard* shard, int64_t step, std::span<const uint64_t> ids,
              const std::vector<float>& grads) {
  Check(bench::PushStep(shard, step, kDim, ids, grads), "push of step " + std::to_string(step));
}

// Waits (at most 120 s) until the live DB's SST files and their sizes have not changed for 1 s:
// RocksDB's background flushes and compactions are done.
void SettleCompactions(const std::string& live_dir) {
  std::map<std::string, uint64_t> last;
  auto t0 = Clock::now();
  auto stable_since = Clock::now();
  while (Seconds(t0) < 120) {
    std::map<std::string, uint64_t> now;
    std::error_code ec;
    for (fs::directory_iterator it(live_dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.ends_with(".sst")) now[name] = it->file_size(ec);
    }
    if (now != last) {
      last = std::move(now);
      stable_since = Clock::now();
    } else if (Seconds(stable_since) >= 1) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::fprintf(stderr, "  (compactions still running after 120 s; going on)\n");
}

// Drops the files of `part` from the page cache, so that the next read comes from the disk.
void DropFromPageCache(const std::string& durable_root, const ps::CheckpointPart& part) {
  ::sync();
  for (const auto& f : part.files) {
    const std::string path = durable_root + "/" + f.path;
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Baseline for resume: read every byte of the part, file after file, into one buffer.
uint64_t ReadSequentially(const std::string& durable_root, const ps::CheckpointPart& part) {
  std::vector<char> buf(4 << 20);
  uint64_t total = 0;
  for (const auto& f : part.files) {
    const std::string path = durable_root + "/" + f.path;
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) {
      std::fprintf(stderr, "checkpoint_bench: cannot open %s\n", path.c_str());
      std::exit(1);
    }
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    for (;;) {
      ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n < 0) {
        std::fprintf(stderr, "checkpoint_bench: read %s failed\n", path.c_str());
        std::exit(1);
      }
      if (n == 0) break;
      total += static_cast<uint64_t>(n);
    }
    ::close(fd);
  }
  return total;
}

// Rebuilds a shard at `shard_dir` (must not exist) from `part` in the durable copy, the way a
// restore does: presence and sizes checked, the part materialised as the directory's only
// restore point (marker written after it), the shard opened on it (hard-linked live DB), then
// one read of `ids`.
// `phases` gets the seconds of: check + materialise + marker, Shard::Open, the read.
void Resume(const std::string& durable_root, const ps::CheckpointPart& part, uint64_t timeline,
            uint64_t rows, const std::string& shard_dir, std::span<const uint64_t> ids,
            double phases[3]) {
  auto t0 = Clock::now();
  Check(ps::VerifyPart(durable_root, part, /*full=*/false), "verify part (sizes)");
  ps::RestoreMarker m;
  m.timeline = timeline;
  m.step = part.step;
  m.replay_from_lsn = 1;  // the new directory's log is empty
  m.name = ps::RestorePointName(m);
  const std::string point = shard_dir + "/restore/" + m.name;
  fs::create_directories(shard_dir + "/restore");
  Check(ps::MaterializePart(durable_root, part, point), "materialize part");
  Check(ps::WriteRestoreMarker(point + ".done", m), "write restore marker");
  phases[0] = Seconds(t0);
  t0 = Clock::now();
  auto shard = ps::Shard::Open(Options(shard_dir, rows));
  if (!shard.ok()) Die("open resumed shard", shard.status());
  phases[1] = Seconds(t0);
  if ((*shard)->applied_step() != part.step) {
    std::fprintf(stderr, "checkpoint_bench: resumed shard is at step %lld, part is of step %lld\n",
                 static_cast<long long>((*shard)->applied_step()),
                 static_cast<long long>(part.step));
    std::exit(1);
  }
  std::vector<float> out(ids.size() * kDim);
  t0 = Clock::now();
  Check((*shard)->Read(0, ids, out.data()), "read after resume");
  phases[2] = Seconds(t0);
}

int Run(const Args& a) {
  testing::TempDir tmp;
  if (tmp.path().empty()) {
    std::fprintf(stderr, "checkpoint_bench: cannot create a temporary directory\n");
    return 1;
  }
  const std::string shard_dir = tmp.path() + "/shard";
  const std::string live_dir = shard_dir + "/live";
  const std::string durable = tmp.path() + "/durable";
  std::fprintf(stderr, "checkpoint_bench: %llu rows, %d reps, in %s\n",
               static_cast<unsigned long long>(a.rows), a.reps, tmp.path().c_str());

  std::mt19937_64 rng(42);
  std::vector<float> grads(kMaxIdsPerPush * kDim);
  {
    std::uniform_real_distribution<float> u(-0.01f, 0.01f);
    for (float& g : grads) g = u(rng);
  }

  // 1. Fill the table, then take the first checkpoint part (everything is new to the pool).
  // The cache holds the whole table (ps.cache_bytes = 2 x table bytes): every changed row is
  // still dirty at the checkpoint, the most a stall can have to flush. With a cache smaller than
  // the table the store's miss path is slow when it evicts heavily (most misses are read again
  // with a Get after the MultiGet), and filling 10M rows took minutes here.
  auto opened = ps::Shard::Open(Options(shard_dir, a.rows));
  if (!opened.ok()) Die("open shard", opened.status());
  std::unique_ptr<ps::Shard> shard = std::move(opened).value();
  int64_t step = 0;
  auto t0 = Clock::now();
  std::vector<uint64_t> ids;
  for (uint64_t off = 0; off < a.rows; off += kMaxIdsPerPush, ++step) {
    const uint64_t n = std::min(kMaxIdsPerPush, a.rows - off);
    ids.resize(n);
    for (uint64_t i = 0; i < n; ++i) ids[i] = IdOf(off + i);
    PushStep(shard.get(), step, ids, grads);
    // As a shard bounding its replay does (ps.restore_point_every_bytes): the dirty rows go to
    // RocksDB step by step and compactions overlap the next push, instead of one 10M-row flush
    // piling up L0 files until RocksDB delays writes.
    Check(shard->TakeRestorePoint(), "restore point while filling");
    std::fprintf(stderr, "  step %lld: %llu rows, %.1f s\n", static_cast<long long>(step),
                 static_cast<unsigned long long>(off + n), Seconds(t0));
  }
  std::fprintf(stderr, "filled %llu rows in %.1f s; waiting for compactions\n",
               static_cast<unsigned long long>(a.rows), Seconds(t0));
  SettleCompactions(live_dir);
  // The restore point of the last fill step predates the compactions just waited for; an empty
  // step gives the first part a restore point of the settled DB.
  PushStep(shard.get(), step, {}, grads);
  int64_t prev_step = step++;
  t0 = Clock::now();
  auto first = shard->CheckpointPartAt(prev_step, durable, {prev_step});
  if (!first.ok()) Die("first checkpoint part", first.status());
  std::fprintf(stderr, "first checkpoint part (step %lld): %.2f s, %s in %llu files copied\n",
               static_cast<long long>(prev_step), Seconds(t0), Human(first->bytes_copied).c_str(),
               static_cast<unsigned long long>(first->files_copied));
  ps::CheckpointPart last_part = *first;

  // 2. Baseline: a full dump of the newest restore point into an empty durable root.
  const auto points = ps::ListRestorePoints(shard_dir);
  if (points.empty()) {
    std::fprintf(stderr, "checkpoint_bench: no restore point after the first part\n");
    return 1;
  }
  const std::string restore_point = shard_dir + "/restore/" + points.back().name;
  std::vector<double> full_s;
  uint64_t full_bytes = 0;
  for (int r = 0; r < a.reps; ++r) {
    const std::string root = tmp.path() + "/full-dump";
    t0 = Clock::now();
    auto part = ps::CopyToDurable(restore_point, root, 0, prev_step, nullptr);
    full_s.push_back(Seconds(t0));
    if (!part.ok()) Die("full dump", part.status());
    full_bytes = part->bytes_copied;
    std::fprintf(stderr, "full dump %d: %.2f s, %s in %llu files\n", r, full_s.back(),
                 Human(part->bytes_copied).c_str(),
                 static_cast<unsigned long long>(part->files_copied));
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  const double full = Median(full_s);
  const std::string full_name = "full dump (every file of a restore point of the " +
                                std::to_string(a.rows) + "-row table into an empty durable root)";

  // 3. Incremental checkpoints after n changed rows.
  std::vector<uint64_t> all_ns = {10'000, 100'000, 1'000'000};
  for (uint64_t n : all_ns) {
    if (n > a.rows || n > kMaxIdsPerPush) continue;
    std::vector<double> stall_s, total_s, bytes;
    // n = 10^4 runs at least kSmallRuns checkpoints in a row: enough L0 files for RocksDB to
    // compact L0 into L1 at least once, so that their mean shows the amortised cost.
    const int runs = n == all_ns.front() ? std::max(a.reps, kSmallRuns) : a.reps;
    for (int r = 0; r < runs; ++r) {
      // n distinct existing rows, at random.
      std::vector<uint64_t> changed;
      changed.reserve(n);
      {
        std::uniform_int_distribution<uint64_t> u(0, a.rows - 1);
        std::vector<bool> taken(a.rows);
        for (uint64_t i = 0; i < n;) {
          uint64_t k = u(rng);
          if (!taken[k]) {
            taken[k] = true;
            changed.push_back(IdOf(k));
            ++i;
          }
        }
      }
      SettleCompactions(live_dir);
      PushStep(shard.get(), step, changed, grads);
      // The stall is TakeRestorePoint; its FlushDirty is called first on its own only to show
      // the split on stderr (nothing else runs on the shard, so the work is the same).
      t0 = Clock::now();
      Check(shard->store()->FlushDirty(), "flush dirty rows");
      const double flush_dirty = Seconds(t0);
      Check(shard->TakeRestorePoint(), "restore point");
      const double stall = Seconds(t0);
      auto part = shard->CheckpointPartAt(step, durable, {prev_step, step});
      const double total = Seconds(t0);
      if (!part.ok()) Die("checkpoint part of step " + std::to_string(step), part.status());
      stall_s.push_back(stall);
      total_s.push_back(total);
      bytes.push_back(static_cast<double>(part->bytes_copied));
      std::fprintf(stderr,
                   "n=%llu run %d: stall %.3f s (dirty rows to RocksDB %.3f s), total %.3f s, "
                   "copied %s in %llu files (part: %zu files, live DB %s)\n",
                   static_cast<unsigned long long>(n), r, stall, flush_dirty, total,
                   Human(part->bytes_copied).c_str(),
                   static_cast<unsigned long long>(part->files_copied), part->files.size(),
                   Human(DirBytes(live_dir)).c_str());
      last_part = *part;
      prev_step = step++;
    }
    char tag[16];
    std::snprintf(tag, sizeof tag, "1e%d", static_cast<int>(std::lround(std::log10(double(n)))));
    const std::string suffix = std::string("_") + tag + "_changed_rows";
    PrintFigure("checkpoint_stall" + suffix, Median(stall_s), "s", false, full_name, full);
    PrintFigure("checkpoint_total" + suffix, Median(total_s), "s", false, full_name, full);
    PrintFigure("checkpoint_bytes_copied" + suffix, Median(bytes), "bytes", false,
                "bytes of the full dump", static_cast<double>(full_bytes));
    if (runs >= kSmallRuns) {
      // Compaction outputs are new SSTs, copied by the next checkpoint: the mean over the
      // sequence is the cost per checkpoint that a job pays in the long run.
      const std::string seq =
          suffix + "_mean_of_" + std::to_string(runs) + "_consecutive_with_compactions";
      PrintFigure("checkpoint_total" + seq, Mean(total_s), "s", false, full_name, full);
      PrintFigure("checkpoint_bytes_copied" + seq, Mean(bytes), "bytes", false,
                  "bytes of the full dump", static_cast<double>(full_bytes));
    }
  }

  // 4. Resume from the newest durable part, against reading its bytes sequentially.
  uint64_t part_bytes = 0;
  for (const auto& f : last_part.files) part_bytes += f.size_bytes;
  std::vector<uint64_t> batch(std::min(a.batch, a.rows));
  {
    std::uniform_int_distribution<uint64_t> u(0, a.rows - 1);
    std::vector<bool> taken(a.rows);
    for (uint64_t i = 0; i < batch.size();) {
      uint64_t k = u(rng);
      if (!taken[k]) {
        taken[k] = true;
        batch[i++] = IdOf(k);
      }
    }
  }
  const uint64_t timeline = shard->timeline();
  shard.reset();  // as after a stop: the live DB is closed
  std::vector<double> resume_s, read_s, warm_resume_s, warm_read_s;
  for (int r = 0; r < a.reps; ++r) {
    const std::string dir = tmp.path() + "/resumed";
    std::error_code ec;
    DropFromPageCache(durable, last_part);
    t0 = Clock::now();
    double phases[3];
    Resume(durable, last_part, timeline, a.rows, dir, batch, phases);
    resume_s.push_back(Seconds(t0));
    fs::remove_all(dir, ec);

    DropFromPageCache(durable, last_part);
    t0 = Clock::now();
    const uint64_t read = ReadSequentially(durable, last_part);
    read_s.push_back(Seconds(t0));
    // Warm: every byte of the part is in the page cache now (as on a restart on the same host).
    t0 = Clock::now();
    ReadSequentially(durable, last_part);
    warm_read_s.push_back(Seconds(t0));
    t0 = Clock::now();
    double warm_phases[3];
    Resume(durable, last_part, timeline, a.rows, dir, batch, warm_phases);
    warm_resume_s.push_back(Seconds(t0));
    fs::remove_all(dir, ec);
    if (read != part_bytes) {
      std::fprintf(stderr, "checkpoint_bench: read %llu bytes of the part, expected %llu\n",
                   static_cast<unsigned long long>(read),
                   static_cast<unsigned long long>(part_bytes));
      return 1;
    }
    std::fprintf(stderr,
                 "resume %d, cold: %.3f s (materialise %.3f s, open %.3f s, read %zu ids %.3f s), "
                 "sequential read of %s %.3f s; warm: resume %.3f s (read %.3f s), sequential "
                 "read %.3f s\n",
                 r, resume_s.back(), phases[0], phases[1], batch.size(), phases[2],
                 Human(part_bytes).c_str(), read_s.back(), warm_resume_s.back(), warm_phases[2],
                 warm_read_s.back());
  }
  const std::string read_name = "sequential read of every byte of the part (" +
                                std::to_string(last_part.files.size()) + " files, " +
                                Human(part_bytes) + ")";
  const std::string rows_tag = std::to_string(a.rows) + "_rows";
  PrintFigure("checkpoint_resume_cold_" + rows_tag, Median(resume_s), "s", false,
              read_name + ", cold page cache", Median(read_s));
  PrintFigure("checkpoint_resume_warm_" + rows_tag, Median(warm_resume_s), "s", false,
              read_name + ", warm page cache", Median(warm_read_s));
  return 0;
}

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long long v = std::atoll(argv[i + 1]);
    if (v <= 0) return false;
    if (flag == "--rows") {
      a->rows = static_cast<uint64_t>(v);
    } else if (flag == "--reps") {
      a->reps = static_cast<int>(v);
    } else if (flag == "--batch") {
      a->batch = static_cast<uint64_t>(v);
    } else {
      return false;
    }
  }
  return argc % 2 == 1;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  tandem::bench::Args args;
  if (!tandem::bench::ParseArgs(argc, argv, &args)) {
    std::fprintf(stderr, "usage: checkpoint_bench [--rows N] [--reps N] [--batch IDS]\n");
    return 2;
  }
  tandem::log::Init("checkpoint_bench", "warn");
  return tandem::bench::Run(args);
}
