// A whole `tandem local` job whose disk fills up mid-run (issue 21's failure paths). Every file of
// the job (PS data, checkpoints, outputs, logs) is on one 1 GiB tmpfs (about four times what the
// job needs), mounted in a mount namespace of `tandem local`'s own (it goes away with it), which
// the test fills through /proc/PID/root once training has passed step 85, leaving 8 MiB (a
// checkpoint every 20 steps: restore points and checkpoint copies meet the full disk too), and
// empties 15 s later. The shards must refuse pushes while the disk is full, `tandem
// local` must say which shard holds the job and why, nothing may crash, restart or roll back, and
// the job must then end with exit 0 and the model checksum of the same job on a disk that never
// filled. Before, the PS aborted on an assertion inside RocksDB's own info-log writer after ENOSPC,
// and `tandem local` restarted it and rolled the job back onto the same full disk. Needs root
// (mount), as CI has.
#include <gtest/gtest.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
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
// What the filler leaves: room for a few more steps' push-log records, not for the SST of a
// memtable flush, so RocksDB meets the full disk too (its flushes and the restore point of the
// checkpoint at step 99), not only the push log.
constexpr uint64_t kLeftFree = uint64_t{8} << 20;

// SmallJob on RocksDB with caches far smaller than the table, so that every step writes rows
// back, and a checkpoint every 100 steps.
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

// Every log of a running job, for a failure's message (they go with its tmpfs).
std::string JobLogs(const std::string& root) {
  std::string all;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root + "/out/logs", ec))
    all += "==> " + e.path().filename().string() + "\n" + ReadFile(e.path().string());
  return all;
}

TEST(LocalDiskFullTest, AJobWhoseDiskFillsWaitsThenEndsWithTheModelOfARunWithout) {
  ASSERT_EQ(::geteuid(), 0u) << "this test mounts a tmpfs in a mount namespace: run it as root "
                                "(CI does)";
  TempDir ref_dir;
  WriteFile(ref_dir.File("job.yaml"), SmallJob(ref_dir.path(), kSteps));
  const CommandResult ref = Local(ref_dir, 2, 2, kSets);
  ASSERT_EQ(ref.exit.exit_code, 0) << ref.output;
  const std::string want = Checksum(ref.output);
  ASSERT_FALSE(want.empty()) << ref.output;

  TempDir dir;
  const std::string disk = dir.path() + "/disk";
  WriteFile(dir.File("job.yaml"), SmallJob(disk, kSteps));
  SpawnOptions o;
  o.argv = {"/usr/bin/unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            "mkdir -p \"$0\" && mount -t tmpfs -o size=1g tandem-local-disk-full \"$0\" && "
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
  o.unset_env = {"TF_CONFIG"};
  o.output_path = dir.File("local.log");
  auto p = Subprocess::Spawn(o);
  ASSERT_TRUE(p.ok()) << p.status();
  // Whatever happens below, the job and its namespace end with the test.
  struct Ender {
    Subprocess* p;
    ~Ender() {
      if (p->running()) p->Stop(milliseconds(20000));
    }
  } ender{&*p};
  const std::string root = "/proc/" + std::to_string(p->pid()) + "/root" + disk;

  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (p->running() && ReportedStep(root + "/out/metrics.jsonl") < 85 && Clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(20));
  ASSERT_TRUE(p->running()) << ReadFile(dir.File("local.log"));
  ASSERT_GE(ReportedStep(root + "/out/metrics.jsonl"), 85) << ReadFile(dir.File("local.log"));
  ASSERT_LE(FreeBytes(root), uint64_t{1} << 30) << "the job is not on the small tmpfs";

  const std::string filler = root + "/filler";
  {
    std::ofstream out(filler, std::ios::binary);
    const std::string block(1 << 20, 'x');
    while (FreeBytes(root) > kLeftFree + block.size() && out.write(block.data(), block.size()) &&
           out.flush()) {
    }
  }
  ASSERT_LT(FreeBytes(root), kLeftFree + (uint64_t{2} << 20));

  deadline = Clock::now() + std::chrono::seconds(60);
  while (p->running() &&
         ReadFile(dir.File("local.log")).find("is refusing pushes") == std::string::npos &&
         Clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(100));
  const std::string full = ReadFile(dir.File("local.log"));
  ASSERT_NE(full.find("is refusing pushes until it can write"), std::string::npos) << full;
  EXPECT_NE(full.find("No space left on device (ENOSPC)"), std::string::npos) << full;

  // Long past the shards' one-second retries, and RocksDB's own recovery attempts.
  std::this_thread::sleep_for(std::chrono::seconds(15));
  ASSERT_TRUE(p->running()) << ReadFile(dir.File("local.log"));
  // The shards' logs of the pause, kept past the tmpfs (it goes with the job).
  std::string shard_logs;
  for (int i = 0; i < 2; ++i)
    shard_logs += ReadFile(root + "/out/logs/ps-" + std::to_string(i) + ".log");
  WriteFile(dir.File("ps-logs-while-full.log"), shard_logs);
  std::filesystem::remove(filler);

  auto e = p->Wait(milliseconds(180000));
  ASSERT_TRUE(e.has_value()) << "the job did not end once space was back\n"
                             << ReadFile(dir.File("local.log")) << "\nits logs:\n"
                             << JobLogs(root);
  const std::string output = ReadFile(dir.File("local.log"));
  EXPECT_EQ(e->exit_code, 0) << output << "\nthe shards' logs while the disk was full:\n"
                             << shard_logs;
  EXPECT_NE(output.find("job done after step " + std::to_string(kSteps - 1)), std::string::npos)
      << output;
  EXPECT_NE(output.find(" goes on\n"), std::string::npos) << output;
  // The progress lines of the pause name the shards it waits on.
  EXPECT_NE(output.find(", waiting on ps:"), std::string::npos) << output;
  EXPECT_EQ(output.find("restarting"), std::string::npos) << output;
  EXPECT_EQ(output.find("rolling back"), std::string::npos) << output;
  EXPECT_EQ(Checksum(output), want) << output;
}

}  // namespace
}  // namespace tandem::testing
