// A real `tandem ps` whose disk fills up: its file-size limit (RLIMIT_FSIZE, set from outside
// with prlimit(2), SIGXFSZ ignored) makes the push log's writes fail with EFBIG, as ENOSPC would
// on a full disk, with no root and no special file system. The push must be refused with an
// error reply, logged and counted in /metrics, the rows left as they were and the daemon alive;
// once the limit is lifted ("space is back") the same push is accepted and applied once.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

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

PsDaemon StartPs(const TempDir& dir) {
  WriteFile(dir.File("job.yaml"), LoopbackConfig(dir.path()) +
                                      "model:\n  embedding_dim: 8\n  bottom_mlp: [16, 8]\n"
                                      "data:\n  num_categorical: 2\n"
                                      "metrics:\n  port: 0\n");
  const std::string ready = dir.File("ps-ready.json");
  PsDaemon d;
  d.log_path = dir.File("ps.log");
  SpawnOptions o;
  o.argv = {TANDEM_BINARY, "ps",       "--config", dir.File("job.yaml"), "--task",
            "ps:0",        "--job-id", kJobHex,    "--ready-file",       ready};
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
  wire::Identity me;
  me.job_id = *ParseJobId(kJobHex);
  me.role = wire::Role::WORKER;
  me.index = 0;
  me.incarnation = 1;
  wire::RpcClient client(&ctx, me);
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

}  // namespace
}  // namespace tandem::testing
