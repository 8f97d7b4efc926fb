// A real `tandem ps` whose disk fills up: its file-size limit (RLIMIT_FSIZE, set from outside
// with prlimit(2), SIGXFSZ ignored) makes the push log's writes fail with EFBIG, as ENOSPC would
// on a full disk, with no root and no special file system. The push must be refused with an
// error reply, logged and counted in /metrics, the rows left as they were and the daemon alive;
// once the limit is lifted ("space is back") the same push is accepted and applied once.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/wire/rpc_client.h"
#include "tests/cluster/daemon_fixture.h"

namespace tandem::testing {
namespace {

using std::chrono::milliseconds;
namespace fs = std::filesystem;

constexpr uint32_t kDim = 8;

struct PsDaemon {
  std::optional<Subprocess> process;
  std::string endpoint;
  int metrics_port = 0;
  std::string log_path;
};

// `ps_yaml`: more keys of the ps: section; `wrapper`: a command the daemon runs under (its argv
// follows), which must exec it in the same process.
PsDaemon StartPs(const TempDir& dir, const std::string& ps_yaml = "",
                 const std::vector<std::string>& wrapper = {}) {
  WriteFile(dir.File("job.yaml"), LoopbackConfig(dir.path()) + ps_yaml +
                                      "model:\n  embedding_dim: 8\n  bottom_mlp: [16, 8]\n"
                                      "data:\n  num_categorical: 2\n"
                                      "metrics:\n  port: 0\n");
  const std::string ready = dir.File("ps-ready.json");
  PsDaemon d;
  d.log_path = dir.File("ps.log");
  SpawnOptions o;
  o.argv = wrapper;
  for (std::string a :
       {std::string(TANDEM_BINARY), std::string("ps"), std::string("--config"),
        dir.File("job.yaml"), std::string("--task"), std::string("ps:0"), std::string("--job-id"),
        std::string(kJobHex), std::string("--ready-file"), ready})
    o.argv.push_back(std::move(a));
  o.output_path = d.log_path;
  auto p = Subprocess::Spawn(o);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return d;
  d.process.emplace(std::move(p).value());
  if (!WaitForFile(ready, std::chrono::seconds(30))) {
    ADD_FAILURE() << "ps did not start; log:\n" << ReadFile(d.log_path);
    return d;
  }
  auto j = nlohmann::json::parse(ReadFile(ready));
  d.endpoint = j["address"].get<std::string>();
  d.metrics_port = j.value("metrics_port", 0);
  return d;
}

// The value of the /metrics sample `series` (name and labels), or -1.
double Metric(int port, const std::string& series) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(5, 0);
  auto res = client.Get("/metrics");
  if (!res || res->status != 200) return -1;
  std::istringstream in(res->body);
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with(series + " ")) return std::stod(line.substr(series.size() + 1));
  return -1;
}

// What the test's client says it is: worker 0, first incarnation.
wire::Identity WorkerZero() {
  wire::Identity me;
  me.job_id = *ParseJobId(kJobHex);
  me.role = wire::Role::WORKER;
  me.index = 0;
  me.incarnation = 1;
  return me;
}

// `n` ids of table 0 (one shard owns them all) and their gradients.
struct Rows {
  std::vector<uint64_t> ids;
  std::vector<float> grads;
};
Rows MakeRows(size_t n, float grad) {
  Rows r;
  for (uint64_t id = 0; id < n; ++id) r.ids.push_back(id * 7 + 1);
  r.grads.assign(n * kDim, grad);
  return r;
}

wire::OutMessage PushMessage(int64_t step, const Rows& rows) {
  wire::OutMessage m;
  auto push = m.envelope().getBody().initPushRequest();
  push.setStep(step);
  push.setRank(0);
  auto t = push.initTables(1)[0];
  t.setTableId(0);
  t.setCount(static_cast<uint32_t>(rows.ids.size()));
  t.setDim(kDim);
  t.setIdsFrame(0);
  t.setValuesFrame(1);
  m.AddBulkCopy(rows.ids.data(), rows.ids.size() * sizeof(uint64_t));
  m.AddBulkCopy(rows.grads.data(), rows.grads.size() * sizeof(float));
  return m;
}

// The rows of `ids` as a pull for `step` sees them (version step - 1 at k = 0).
std::vector<float> PullRows(wire::RpcClient* client, int server, int64_t step,
                            const std::vector<uint64_t>& ids) {
  wire::OutMessage m;
  auto pull = m.envelope().getBody().initPullRequest();
  pull.setStep(step);
  auto t = pull.initTables(1)[0];
  t.setTableId(0);
  t.setCount(static_cast<uint32_t>(ids.size()));
  t.setIdsFrame(0);
  m.AddBulkCopy(ids.data(), ids.size() * sizeof(uint64_t));
  auto reply = client->Call(server, std::move(m), milliseconds(10000));
  EXPECT_TRUE(reply.ok()) << reply.status();
  if (!reply.ok()) return {};
  EXPECT_TRUE(wire::ReplyStatus(*reply).ok()) << wire::ReplyStatus(*reply);
  auto values = reply->BulkAs<float>(0);
  if (!values.ok()) return {};
  return {values->begin(), values->end()};
}

// The largest of the files a full disk must still let the daemon append to: its output (so
// that it can say what happened) and its push-log segments.
uint64_t LargestWrittenFile(const TempDir& dir, const std::string& log_path) {
  uint64_t largest = fs::file_size(log_path);
  for (const auto& e : fs::directory_iterator(dir.path() + "/ps/shard-0/log"))
    if (e.is_regular_file()) largest = std::max<uint64_t>(largest, e.file_size());
  return largest;
}

void SetFileSizeLimit(pid_t pid, rlim_t soft) {
  const rlimit limit{soft, RLIM_INFINITY};
  ASSERT_EQ(::prlimit(pid, RLIMIT_FSIZE, &limit, nullptr), 0) << std::strerror(errno);
}

TEST(PsDiskFullTest, PushIsRefusedLoggedAndCountedThenAcceptedOnceSpaceIsBack) {
  // Inherited by the daemon: beyond its file-size limit a write fails with EFBIG instead of
  // killing it (a real full disk raises no signal at all).
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction old {};
  ASSERT_EQ(::sigaction(SIGXFSZ, &ignore, &old), 0);
  TempDir dir;
  PsDaemon ps = StartPs(dir);
  ::sigaction(SIGXFSZ, &old, nullptr);
  ASSERT_TRUE(ps.process && !ps.endpoint.empty());
  ASSERT_GT(ps.metrics_port, 0);

  zmq::context_t ctx(1);
  wire::RpcClient client(&ctx, WorkerZero());
  auto server = client.Connect(ps.endpoint);
  ASSERT_TRUE(server.ok()) << server.status();

  // Step 0 is logged and applied while there is space.
  auto first = client.Call(*server, PushMessage(0, MakeRows(16, 0.5f)), milliseconds(10000));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(wire::ReplyStatus(*first).ok()) << wire::ReplyStatus(*first);
  const Rows big = MakeRows(4000, 0.25f);  // a 160 KB record
  const std::vector<float> before = PullRows(&client, *server, 1, big.ids);
  ASSERT_EQ(before.size(), big.ids.size() * kDim);

  // The disk is full: no file of the daemon may grow past 16 KiB beyond the largest it appends
  // to, far less than the record of the push below.
  SetFileSizeLimit(ps.process->pid(), LargestWrittenFile(dir, ps.log_path) + (16 << 10));
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto refused = client.Call(*server, PushMessage(1, big), milliseconds(10000));
    ASSERT_TRUE(refused.ok()) << refused.status();
    EXPECT_EQ(refused->reply_code(), wire::ReplyCode::OVERLOADED) << wire::ReplyStatus(*refused);
    EXPECT_FALSE(refused->envelope().getBody().isPushReply());
  }
  ASSERT_TRUE(ps.process->running()) << ReadFile(ps.log_path);
  EXPECT_EQ(Metric(ps.metrics_port, "tandem_ps_pushes_refused_total{reason=\"no_space\"}"), 2);
  EXPECT_EQ(Metric(ps.metrics_port, "tandem_ps_push_log_full"), 1);
  EXPECT_EQ(Metric(ps.metrics_port, "tandem_ps_applied_step"), 0);
  // Nothing of the refused push reached the rows (a pull of step 1 reads version 0).
  EXPECT_TRUE(PullRows(&client, *server, 1, big.ids) == before);
  EXPECT_NE(ReadFile(ps.log_path).find("push log write failed"), std::string::npos)
      << ReadFile(ps.log_path);

  // Space is back: the worker's retry of the same push is accepted as new and applied.
  SetFileSizeLimit(ps.process->pid(), RLIM_INFINITY);
  auto accepted = client.Call(*server, PushMessage(1, big), milliseconds(10000));
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  ASSERT_TRUE(wire::ReplyStatus(*accepted).ok()) << wire::ReplyStatus(*accepted);
  ASSERT_TRUE(accepted->envelope().getBody().isPushReply());
  EXPECT_FALSE(accepted->envelope().getBody().getPushReply().getDuplicate());
  EXPECT_EQ(accepted->envelope().getBody().getPushReply().getAppliedStep(), 1);
  const std::vector<float> after = PullRows(&client, *server, 2, big.ids);
  ASSERT_EQ(after.size(), before.size());
  EXPECT_NE(after, before);
  EXPECT_EQ(Metric(ps.metrics_port, "tandem_ps_push_log_full"), 0);
  EXPECT_EQ(Metric(ps.metrics_port, "tandem_ps_pushes_logged_total"), 2);
  EXPECT_NE(ReadFile(ps.log_path).find("push log writable again after 2 refused pushes"),
            std::string::npos)
      << ReadFile(ps.log_path);

  ps.process->Signal(SIGTERM);
  auto e = ps.process->Wait(milliseconds(20000));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->exit_code, 0) << ReadFile(ps.log_path);
}

// `n` ids of table 0 from `first` on (every 7th id, as MakeRows) and their gradients.
Rows RangeRows(uint64_t first, size_t n, float grad) {
  Rows r;
  for (uint64_t k = 0; k < n; ++k) r.ids.push_back((first + k) * 7 + 1);
  r.grads.assign(n * kDim, grad);
  return r;
}

uint64_t FreeBytes(const std::string& path) {
  struct statvfs v {};
  if (::statvfs(path.c_str(), &v) != 0) return 0;
  return uint64_t{v.f_bavail} * v.f_frsize;
}

// A disk that fills up under RocksDB (issue 21), not under the push log: the shard's live DB is a
// 64 MiB tmpfs, mounted in a mount namespace of the daemon's own (so it goes away with the
// daemon), and nearly filled by the test through /proc/PID/root. The rows the shard writes then
// cannot reach RocksDB. A push must be refused whole, before it is logged or any of it applied,
// the daemon must stay up and say why, and once the space is back the same pushes must give
// exactly the rows of a PS that never ran out of space. `ps_yaml` sets the cache and restore
// points. Needs root (mount), as CI has.
void FillTheStoresDiskAndCompare(const std::string& ps_yaml) {
  ASSERT_EQ(::geteuid(), 0u) << "this test mounts a small tmpfs in a mount namespace: run it as "
                                "root (CI does)";
  TempDir ref_dir, dir;
  const std::string live = dir.path() + "/ps/shard-0/live";
  PsDaemon ref = StartPs(ref_dir, ps_yaml);
  PsDaemon ps = StartPs(
      dir, ps_yaml,
      {"/usr/bin/unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
       "mkdir -p \"$0\" && mount -t tmpfs -o size=64m tandem-disk-full \"$0\" && exec \"$@\"",
       live});
  ASSERT_TRUE(ref.process && !ref.endpoint.empty());
  ASSERT_TRUE(ps.process && !ps.endpoint.empty()) << ReadFile(ps.log_path);
  ASSERT_GT(ps.metrics_port, 0);
  const std::string disk = "/proc/" + std::to_string(ps.process->pid()) + "/root" + live;
  ASSERT_LT(FreeBytes(disk), uint64_t{65} << 20) << "the live DB is not on the small tmpfs";

  zmq::context_t ctx(1);
  wire::RpcClient client(&ctx, WorkerZero());
  auto server = client.Connect(ps.endpoint);
  auto ref_server = client.Connect(ref.endpoint);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE(ref_server.ok()) << ref_server.status();

  // Leave 1 MiB: far less than one 16 MiB memtable of evicted rows.
  const std::string filler = disk + "/filler";
  {
    std::ofstream out(filler, std::ios::binary);
    const std::string block(1 << 20, 'x');
    while (FreeBytes(disk) > (uint64_t{2} << 20) && out.write(block.data(), block.size())) {
    }
  }
  ASSERT_LE(FreeBytes(disk), uint64_t{2} << 20);

  // Steps of 20,000 rows (1.6 MB of Adagrad rows), each overlapping the one before: the table
  // soon passes the cache (256 KiB) 100 times over. The reference takes every push at once; the
  // shard on the full disk may refuse them, but only whole.
  constexpr int kSteps = 40;
  int refused = 0;
  int64_t refused_step = -1;
  for (int step = 0; step < kSteps; ++step) {
    const Rows rows = RangeRows(uint64_t(step) * 15000, 20000, 0.01f * float(step % 7 + 1));
    auto r = client.Call(*ref_server, PushMessage(step, rows), milliseconds(30000));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(wire::ReplyStatus(*r).ok()) << wire::ReplyStatus(*r);
    for (int attempt = 0;; ++attempt) {
      ASSERT_LT(attempt, 200) << "step " << step << " never accepted; log:\n"
                              << ReadFile(ps.log_path);
      auto reply = client.Call(*server, PushMessage(step, rows), milliseconds(30000));
      ASSERT_TRUE(reply.ok()) << reply.status() << "\n" << ReadFile(ps.log_path);
      if (wire::ReplyStatus(*reply).ok()) {
        ASSERT_TRUE(reply->envelope().getBody().isPushReply());
        // A refused push left nothing behind: its retry is new, not a duplicate.
        EXPECT_FALSE(reply->envelope().getBody().getPushReply().getDuplicate()) << step;
        EXPECT_EQ(reply->envelope().getBody().getPushReply().getAppliedStep(), step);
        break;
      }
      ASSERT_EQ(reply->reply_code(), wire::ReplyCode::OVERLOADED) << wire::ReplyStatus(*reply);
      ASSERT_TRUE(ps.process->running()) << ReadFile(ps.log_path);
      if (refused++ == 0) {
        refused_step = step;
        // Nothing of the refused step is applied; the daemon says why.
        EXPECT_EQ(Metric(ps.metrics_port, "tandem_ps_applied_step"), step - 1);
        EXPECT_GE(
            Metric(ps.metrics_port, "tandem_ps_pushes_refused_total{reason=\"store_unwritable\"}"),
            1);
        EXPECT_EQ(Metric(ps.metrics_port, "tandem_ps_store_unwritable"), 1);
        // Space is back: the next attempts must get through.
        ASSERT_EQ(::unlink(filler.c_str()), 0) << std::strerror(errno);
      }
      std::this_thread::sleep_for(milliseconds(100));
    }
  }
  ASSERT_GT(refused, 0) << "the disk never filled: the test proved nothing; log:\n"
                        << ReadFile(ps.log_path);
  EXPECT_GE(refused_step, 1);
  EXPECT_EQ(Metric(ps.metrics_port, "tandem_ps_store_unwritable"), 0);
  const std::string log = ReadFile(ps.log_path);
  EXPECT_NE(log.find("refusing pushes until RocksDB can be written"), std::string::npos) << log;
  EXPECT_NE(log.find("RocksDB writable again"), std::string::npos) << log;
  // The worker's retries do not each leave a line.
  size_t refusal_lines = 0;
  for (size_t at = log.find("push refused"); at != std::string::npos;
       at = log.find("push refused", at + 1))
    refusal_lines++;
  EXPECT_LE(refusal_lines, 1 + size_t(refused) / 10) << log;

  // Every row, on both: bit for bit the same.
  const Rows all = RangeRows(0, (kSteps - 1) * 15000 + 20000, 0);
  for (size_t from = 0; from < all.ids.size(); from += 8000) {
    const std::vector<uint64_t> ids(all.ids.begin() + from,
                                    all.ids.begin() + std::min(all.ids.size(), from + 8000));
    const std::vector<float> want = PullRows(&client, *ref_server, kSteps, ids);
    const std::vector<float> got = PullRows(&client, *server, kSteps, ids);
    ASSERT_EQ(want.size(), ids.size() * kDim);
    ASSERT_TRUE(got == want) << "rows from " << from << " differ";
  }

  for (PsDaemon* d : {&ps, &ref}) {
    d->process->Signal(SIGTERM);
    auto e = d->process->Wait(milliseconds(30000));
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->exit_code, 0) << ReadFile(d->log_path);
  }
}

// The table 100x the cache: every step's evicted rows are drained through the memtable, whose
// flush meets the full disk; a restore point every 4 MiB pushed.
TEST(PsDiskFullTest, StoreThatCannotWriteRefusesPushesWholeAndLosesNothing) {
  FillTheStoresDiskAndCompare("  cache_bytes: 262144\n  restore_point_every_bytes: 4194304\n");
}

// The table in the cache: nothing is evicted, and the restore point every 16 MiB pushed writes
// its 16 MiB and more of dirty rows as an SST of its own (ingested), which meets the full disk.
TEST(PsDiskFullTest, ARestorePointsSstOnAFullDiskNeitherKillsTheShardNorLosesRows) {
  FillTheStoresDiskAndCompare("  cache_bytes: 268435456\n  restore_point_every_bytes: 16777216\n");
}

}  // namespace
}  // namespace tandem::testing
