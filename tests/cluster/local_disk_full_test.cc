// A whole `tandem local` job whose disks fill up mid-run (issue 21's failure paths). The PS data
// is on one 1 GiB tmpfs (about four times what the job needs),
// checkpoint.dir on a 512 MiB one inside it, both mounted in a mount namespace of `tandem
// local`'s own (they go away with it). The test fills them through /proc/PID/root and empties
// each 15 s later: the first once training has passed step 85, leaving 8 MiB (with a checkpoint
// every 20 steps, the push log, RocksDB's flushes, restore points and checkpoint copies all meet
// it), then checkpoint.dir alone after step 200. The shards must refuse pushes, or hold their
// checkpoint parts, while there is no space, `tandem local` must say which shard holds the job
// and why, nothing may crash, restart or roll back, and the job must then end with exit 0 and
// the model checksum of the same job on a disk that never filled. Before, the PS aborted on an
// assertion inside RocksDB's own info-log writer after ENOSPC, a checkpoint part that met a full
// disk failed the job (the final one too), and `tandem local` rolled the job back onto the same
// full disk. That test needs root (mount), as CI has; the others, the chief alone or worker 0
// alone unable to write, do not.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/cluster/local_job_util.h"

namespace tandem::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr int64_t kSteps = 400;
// What the first filler leaves: room for a few more steps' push-log records, not for the SST of
// a memtable flush, so RocksDB meets the full disk too (its flushes and restore points), not
// only the push log.
constexpr uint64_t kLeftFree = uint64_t{8} << 20;

// SmallJob on RocksDB with caches far smaller than the table, so that every step writes rows
// back, and a checkpoint every 20 steps.
const std::vector<std::string> kSets = {
    "data.synthetic.vocab=300000", "data.synthetic.zipf=1.05", "data.synthetic.eval_rows=2000",
    "ps.storage=rocksdb",          "ps.cache_bytes=2000000",   "ps.max_dirty_bytes=500000",
    "checkpoint.every_steps=20",   "train.log_every_steps=10"};

uint64_t FreeBytes(const std::string& path) {
  struct statvfs v {};
  if (::statvfs(path.c_str(), &v) != 0) return 0;
  return uint64_t{v.f_bavail} * v.f_frsize;
}

std::string Checksum(const std::string& output) {
  std::smatch m;
  return std::regex_search(output, m, std::regex(R"(model_checksum ([0-9a-f]+))")) ? m[1].str()
                                                                                   : "";
}

// The highest step metrics.jsonl reports so far (-1: none yet); lines being written are skipped.
int64_t ReportedStep(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  std::string line;
  int64_t step = -1;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer())
      step = std::max(step, j["step"].get<int64_t>());
  }
  return step;
}

// Every log of the job, for a failure's message.
std::string JobLogs(const TempDir& dir) {
  std::string all;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() + "/out/logs", ec))
    all += "==> " + e.path().filename().string() + "\n" + ReadFile(e.path().string());
  return all;
}

// What metrics.jsonl says that does not depend on timing: each step line's step and loss, each
// eval line's step and AUC, the final line's AUC and checksum, in file order.
std::vector<std::string> MetricsContent(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  std::vector<std::string> content;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) {
      content.push_back("not JSON: " + line);
    } else if (j.contains("final")) {
      content.push_back("final auc " + j["auc"].dump() + " " + j["model_checksum"].dump());
    } else if (j.contains("samples_per_sec")) {
      content.push_back("step " + j["step"].dump() + " loss " + j["loss"].dump());
    } else {
      content.push_back("eval " + j["step"].dump() + " auc " + j["auc"].dump());
    }
  }
  return content;
}

// The model checksum of the job of `steps` steps on a disk that never fills ("" after a test
// failure when that job failed), and when asked what its metrics.jsonl says.
std::string ReferenceChecksum(int64_t steps, std::vector<std::string>* metrics = nullptr) {
  TempDir ref_dir;
  WriteFile(ref_dir.File("job.yaml"), SmallJob(ref_dir.path(), steps));
  const CommandResult ref = Local(ref_dir, 2, 2, kSets);
  EXPECT_EQ(ref.exit.exit_code, 0) << ref.output;
  const std::string sum = Checksum(ref.output);
  EXPECT_FALSE(sum.empty()) << ref.output;
  if (metrics != nullptr) *metrics = MetricsContent(ref_dir.path() + "/out/metrics.jsonl");
  return sum;
}

// `tandem local` running the job of `steps` steps (kSets, 2 PS x 2 workers) in `dir`, its
// console in dir/local.log.
StatusOr<Subprocess> StartJob(const TempDir& dir, int64_t steps) {
  WriteFile(dir.File("job.yaml"), SmallJob(dir.path(), steps));
  std::vector<std::string> sets;
  for (const std::string& s : kSets) sets.insert(sets.end(), {"--set", s});
  SpawnOptions o = LocalSpawn(dir, 2, 2, "local.log", sets);
  o.unset_env = {"TF_CONFIG"};
  return Subprocess::Spawn(o);
}

// Whatever a test does, the job it started ends with it.
struct StopAtEnd {
  Subprocess* p;
  ~StopAtEnd() {
    if (p->running()) p->Stop(milliseconds(20000));
  }
};

// The job `p` (its output in dir/local.log) ends with exit 0 after its last step, having said
// `went_on` after its pause, without a restart or a rollback, and with the model checksum `want`.
void ExpectEndsLikeARunWithout(Subprocess* p, const TempDir& dir, int64_t steps,
                               const std::string& went_on, const std::string& want) {
  auto e = p->Wait(milliseconds(180000));
  ASSERT_TRUE(e.has_value()) << "the job did not end once it could write again\n"
                             << ReadFile(dir.File("local.log")) << "\nits logs:\n"
                             << JobLogs(dir);
  const std::string output = ReadFile(dir.File("local.log"));
  EXPECT_EQ(e->exit_code, 0) << output << "\nits logs:\n" << JobLogs(dir);
  EXPECT_NE(output.find("job done after step " + std::to_string(steps - 1)), std::string::npos)
      << output;
  EXPECT_NE(output.find(went_on), std::string::npos) << output;
  EXPECT_EQ(output.find("restarting"), std::string::npos) << output;
  EXPECT_EQ(output.find("rolling back"), std::string::npos) << output;
  EXPECT_EQ(Checksum(output), want) << output;
}

// Once dir/out/metrics.jsonl reports `step`, fills the file system of `disk` up to `left`
// bytes, waits until `tandem local` (its output in dir/local.log) says `said`, holds 15 s (long
// past the shards' one-second retries and RocksDB's own recovery attempts) and empties it again.
void FillHoldAndEmpty(Subprocess* p, const TempDir& dir, const std::string& disk, int64_t step,
                      uint64_t left, const std::string& said) {
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (p->running() && ReportedStep(dir.path() + "/out/metrics.jsonl") < step &&
         Clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(20));
  ASSERT_TRUE(p->running()) << ReadFile(dir.File("local.log"));
  ASSERT_GE(ReportedStep(dir.path() + "/out/metrics.jsonl"), step)
      << ReadFile(dir.File("local.log"));
  ASSERT_LE(FreeBytes(disk), uint64_t{1} << 30) << disk << " is not on the small tmpfs";
  const std::string before = ReadFile(dir.File("local.log"));

  const std::string filler = disk + "/filler";
  {
    std::ofstream out(filler, std::ios::binary);
    const std::string block(1 << 16, 'x');
    while (FreeBytes(disk) >= left + block.size() && out.write(block.data(), block.size()) &&
           out.flush()) {
    }
  }
  ASSERT_LT(FreeBytes(disk), left + (uint64_t{1} << 20));

  auto said_now = [&] { return ReadFile(dir.File("local.log")).substr(before.size()); };
  deadline = Clock::now() + std::chrono::seconds(60);
  while (p->running() && said_now().find(said) == std::string::npos && Clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(100));
  ASSERT_NE(said_now().find(said), std::string::npos)
      << ReadFile(dir.File("local.log")) << "\nits logs:\n"
      << JobLogs(dir);
  EXPECT_NE(said_now().find("No space left on device"), std::string::npos) << said_now();

  std::this_thread::sleep_for(std::chrono::seconds(15));
  ASSERT_TRUE(p->running()) << ReadFile(dir.File("local.log")) << "\nits logs:\n" << JobLogs(dir);
  std::filesystem::remove(filler);
}

TEST(LocalDiskFullTest, AJobWhoseDiskFillsWaitsThenEndsWithTheModelOfARunWithout) {
  ASSERT_EQ(::geteuid(), 0u) << "this test mounts a tmpfs in a mount namespace: run it as root "
                                "(CI does)";
  const std::string want = ReferenceChecksum(kSteps);
  if (HasFailure()) return;

  TempDir dir;
  const std::string disk = dir.path() + "/disk";
  WriteFile(dir.File("job.yaml"), SmallJob(disk, kSteps));
  SpawnOptions o;
  o.argv = {
      "/usr/bin/unshare",
      "--mount",
      "--propagation",
      "private",
      "--",
      "sh",
      "-c",
      "mkdir -p \"$0\" && mount -t tmpfs -o size=1g tandem-local-disk-full \"$0\" && "
      "mkdir \"$0/ckpt\" && mount -t tmpfs -o size=512m tandem-local-ckpt-full \"$0/ckpt\" && "
      "exec \"$@\"",
      disk,
      TANDEM_BINARY,
      "local",
      "--config",
      dir.File("job.yaml"),
      "--ps",
      "2",
      "--workers",
      "2"};
  for (const std::string& s : kSets) o.argv.insert(o.argv.end(), {"--set", s});
  // Outputs and logs on the test's own disk: they outlive the tmpfs, for a failure's message.
  o.argv.insert(o.argv.end(), {"--set", "output.dir=" + dir.path() + "/out"});
  o.unset_env = {"TF_CONFIG"};
  o.output_path = dir.File("local.log");
  auto p = Subprocess::Spawn(o);
  ASSERT_TRUE(p.ok()) << p.status();
  StopAtEnd ender{&*p};  // and its namespace with it
  const std::string root = "/proc/" + std::to_string(p->pid()) + "/root" + disk;

  // Phase 1, the PS data's disk: pushes are refused (push log, RocksDB), and checkpoint parts
  // (restore points) wait, until it has space.
  FillHoldAndEmpty(&*p, dir, root, 85, kLeftFree, "; the job waits until it can");
  if (HasFatalFailure()) return;
  // Phase 2, checkpoint.dir alone (a tmpfs of its own): the dense file or the shards' parts wait
  // for space, each newer checkpoint replacing the one that waits, and training goes on.
  FillHoldAndEmpty(&*p, dir, root + "/ckpt", 200, 0, " is waiting for space for ");
  if (HasFatalFailure()) return;

  ExpectEndsLikeARunWithout(&*p, dir, kSteps, " goes on\n", want);
  // The progress lines of the pause name the shards it waits on.
  EXPECT_NE(ReadFile(dir.File("local.log")).find(", waiting on ps:"), std::string::npos)
      << ReadFile(dir.File("local.log"));
}

// The chief alone cannot write (its file-size limit, set from outside with prlimit: the daemons
// ignore SIGXFSZ, so its writes fail with EFBIG as on a full disk) from the start of a job until
// the job has trained its last step and 5 s more: every checkpoint's commit, the final one
// included, is refused meanwhile, and the workers' first rendezvous meets it too (the chief's
// rendezvous store). Worker 0 must wait for the chief (the final checkpoint is what ends the
// job) and say so, and the job must end with exit 0 and the model of a run without, without a
// restart or a rollback. Before, the rendezvous failed the job at once (its first version found
// this), and the chief answered the commits INTERNAL: the final checkpoint failed the job once
// Finish's budget (60 s) ran out, rolling it back; no line said why.
TEST(LocalDiskFullTest, AChiefThatCannotWriteHoldsTheCommitsAndTheJobEndsWithTheSameModel) {
  constexpr int64_t kShortSteps = 200;
  const std::string want = ReferenceChecksum(kShortSteps);
  if (HasFailure()) return;

  TempDir dir;
  auto p = StartJob(dir, kShortSteps);
  ASSERT_TRUE(p.ok()) << p.status();
  StopAtEnd ender{&*p};
  const std::string out = dir.path() + "/out";
  int chief = 0;
  for (auto deadline = Clock::now() + std::chrono::seconds(30);
       chief == 0 && p->running() && Clock::now() < deadline;
       std::this_thread::sleep_for(milliseconds(10)))
    chief = ClusterPid(out, "chief:0");
  ASSERT_GT(chief, 0) << ReadFile(dir.File("local.log"));
  rlimit full{16, RLIM_INFINITY}, lifted{RLIM_INFINITY, RLIM_INFINITY};
  ASSERT_EQ(::prlimit(chief, RLIMIT_FSIZE, &full, nullptr), 0) << std::strerror(errno);

  // Until training has ended (only the final checkpoint is left) and 5 s more.
  const std::string metrics = out + "/metrics.jsonl";
  auto deadline = Clock::now() + std::chrono::seconds(120);
  while (p->running() && ReportedStep(metrics) < kShortSteps - 1 && Clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(50));
  ASSERT_GE(ReportedStep(metrics), kShortSteps - 1) << ReadFile(dir.File("local.log"));
  std::this_thread::sleep_for(std::chrono::seconds(5));
  ASSERT_TRUE(p->running()) << ReadFile(dir.File("local.log")) << "\nits logs:\n" << JobLogs(dir);
  const std::string held = ReadFile(dir.File("local.log"));
  EXPECT_NE(held.find("worker:0 is waiting for the chief to take the commit of the checkpoint of "
                      "step " +
                      std::to_string(kShortSteps - 1)),
            std::string::npos)
      << held;
  EXPECT_NE(held.find("(EFBIG)"), std::string::npos) << held;
  EXPECT_EQ(held.find("job done"), std::string::npos) << held;
  ASSERT_EQ(::prlimit(chief, RLIMIT_FSIZE, &lifted, nullptr), 0) << std::strerror(errno);

  ExpectEndsLikeARunWithout(&*p, dir, kShortSteps, "worker:0 goes on\n", want);
}

// Worker 0 cannot write (its file-size limit, set from outside with prlimit once it has logged
// step 20) until the job waits on its last outputs and 3 s more: its metrics.jsonl lines and
// TensorBoard events, its checkpoints' dense files and model/dense.ckpt all meet it. Training
// must go on meanwhile, with `tandem local` saying that lines wait in memory, the job must
// then wait for model/dense.ckpt (said), and once the limit is lifted end with exit 0, the
// model of a run without, and a metrics.jsonl that says exactly what the run without's says.
// Before, the first step line that met the limit failed the job, which was rolled back.
TEST(LocalDiskFullTest, AWorkerThatCannotWriteItsOutputsTrainsOnAndLosesNoMetricsLine) {
  constexpr int64_t kShortSteps = 200;
  std::vector<std::string> want_metrics;
  const std::string want = ReferenceChecksum(kShortSteps, &want_metrics);
  if (HasFailure()) return;

  TempDir dir;
  auto p = StartJob(dir, kShortSteps);
  ASSERT_TRUE(p.ok()) << p.status();
  StopAtEnd ender{&*p};
  const std::string out = dir.path() + "/out";
  const std::string metrics = out + "/metrics.jsonl";
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (p->running() && ReportedStep(metrics) < 20 && Clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(10));
  const int worker = ClusterPid(out, "worker:0");
  ASSERT_GT(worker, 0) << ReadFile(dir.File("local.log"));
  rlimit full{16, RLIM_INFINITY}, lifted{RLIM_INFINITY, RLIM_INFINITY};
  ASSERT_EQ(::prlimit(worker, RLIMIT_FSIZE, &full, nullptr), 0) << std::strerror(errno);
  const int64_t held_from = ReportedStep(metrics);

  const std::string waits = "waiting for space for " + out + "/model/dense.ckpt: ";
  deadline = Clock::now() + std::chrono::seconds(120);
  while (p->running() && ReadFile(dir.File("local.log")).find(waits) == std::string::npos &&
         Clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(50));
  std::this_thread::sleep_for(std::chrono::seconds(3));
  ASSERT_TRUE(p->running()) << ReadFile(dir.File("local.log")) << "\nits logs:\n" << JobLogs(dir);
  const std::string held = ReadFile(dir.File("local.log"));
  // Said by worker 0, alone or after a periodic checkpoint's wait for space.
  EXPECT_TRUE(std::regex_search(
      held, std::regex("tandem local: worker:0: [^\n]*lines of metrics.jsonl wait in memory for "
                       "space: [^\n]*\\(training goes on\\)\n")))
      << held;
  EXPECT_NE(held.find("(EFBIG)"), std::string::npos) << held;
  EXPECT_NE(held.find(waits), std::string::npos) << held;
  EXPECT_NE(held.find("worker:0 is waiting for space for "), std::string::npos) << held;
  EXPECT_EQ(held.find("job done"), std::string::npos) << held;
  // Training went on to its end while no line reached the file (but one begun before the limit).
  EXPECT_LE(ReportedStep(metrics), held_from + 10) << held;
  ASSERT_EQ(::prlimit(worker, RLIMIT_FSIZE, &lifted, nullptr), 0) << std::strerror(errno);

  ExpectEndsLikeARunWithout(&*p, dir, kShortSteps, "worker:0 goes on\n", want);
  EXPECT_EQ(MetricsContent(metrics), want_metrics);
}

}  // namespace
}  // namespace tandem::testing
