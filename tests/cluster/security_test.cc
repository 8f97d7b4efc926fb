// security.keys end to end (issue 9): `tandem keys`, a chief, a PS and a worker started by hand
// with CURVE on. Clients without the cluster's keys, with another cluster's keys, or with only the
// server's public key are refused by the PS and the chief before any of their requests reaches
// server code; a client holding the keys is served, and so is `tandem status`.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/job_id.h"
#include "common/subprocess.h"
#include "common/testing/test_util.h"
#include "common/wire/curve_keys.h"
#include "common/wire/diagnostics.h"
#include "common/wire/rpc_client.h"
#include "tests/cluster/local_job_util.h"

namespace tandem::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

class SecureCluster : public ::testing::Test {
 protected:
  void TearDown() override {
    for (auto& [task, p] : procs_)
      if (p.running()) p.Stop(milliseconds(5000));
  }

  std::vector<std::string> Sets() const {
    return {"--set", "cluster.chief=[127.0.0.1:" + chief_port_ + "]"};
  }

  nlohmann::json Ready(const std::string& task) {
    return nlohmann::json::parse(ReadFile(dir_.File(task + ".ready")));
  }

  void Start(const std::string& role, const std::string& task) {
    SpawnOptions o;
    o.argv = {TANDEM_BINARY, role, "--config",     dir_.File("job.yaml"),
              "--task",      task, "--ready-file", dir_.File(task + ".ready")};
    if (role != "chief") {
      auto s = Sets();
      o.argv.insert(o.argv.end(), s.begin(), s.end());
    }
    o.unset_env = {"TF_CONFIG"};
    o.output_path = dir_.File(task + ".log");
    auto p = Subprocess::Spawn(o);
    ASSERT_TRUE(p.ok()) << p.status();
    procs_.emplace(task, std::move(p).value());
    ASSERT_TRUE(WaitForFile(dir_.File(task + ".ready"), milliseconds(20000)))
        << ReadFile(dir_.File(task + ".log"));
    if (role == "chief") {
      const std::string ep = Ready(task)["address"].get<std::string>();
      chief_port_ = ep.substr(ep.rfind(':') + 1);
    }
  }

  std::string Scrape(const std::string& task) {
    httplib::Client client("127.0.0.1", Ready(task).value("metrics_port", 0));
    client.set_read_timeout(5, 0);
    auto res = client.Get("/metrics");
    EXPECT_TRUE(res && res->status == 200) << task;
    return res ? res->body : std::string();
  }

  // The value of the sample line that starts with `prefix`, or 0 when there is none.
  static double Value(const std::string& text, const std::string& prefix) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line))
      if (line.starts_with(prefix + " ")) return std::stod(line.substr(prefix.size() + 1));
    return 0;
  }

  // A push to `endpoint` from a client with `options`: the transport's status, or the reply's.
  static Status Push(const std::string& endpoint, wire::ClientOptions options) {
    zmq::context_t context(1);
    wire::Identity id;
    id.role = wire::Role::WORKER;
    wire::RpcClient client(&context, id, std::move(options));
    auto h = client.Connect(endpoint);
    if (!h.ok()) return h.status();
    wire::OutMessage m;
    m.envelope().getBody().initPushRequest();
    auto reply = client.Call(*h, std::move(m), milliseconds(1500));
    if (!reply.ok()) return reply.status();
    return wire::ReplyStatus(*reply);
  }

  Status Ping(const std::string& endpoint, wire::ClientOptions options) {
    zmq::context_t context(1);
    wire::Identity id;
    id.role = wire::Role::TOOL;
    std::string hex = ReadFile(dir_.path() + "/ckpt/job_id");
    while (!hex.empty() && std::isspace(static_cast<unsigned char>(hex.back()))) hex.pop_back();
    auto job = ParseJobId(hex);
    if (!job.ok()) return job.status();
    id.job_id = *job;
    wire::RpcClient client(&context, id, std::move(options));
    auto h = client.Connect(endpoint);
    if (!h.ok()) return h.status();
    auto pong = wire::Ping(&client, *h, milliseconds(5000));
    return pong.status();
  }

  TempDir dir_;
  std::string chief_port_;
  std::map<std::string, Subprocess> procs_;
};

TEST_F(SecureCluster, OnlyHoldersOfTheClusterKeysAreServedByThePsAndTheChief) {
  const std::string keys_dir = dir_.File("keys");
  auto made = RunCommand({TANDEM_BINARY, "keys", "--out", keys_dir});
  ASSERT_EQ(made.exit.exit_code, 0) << made.output;
  // The cluster's keys are never replaced by accident.
  auto again = RunCommand({TANDEM_BINARY, "keys", "--out", keys_dir});
  EXPECT_EQ(again.exit.exit_code, 1) << again.output;
  EXPECT_NE(again.output.find("exists"), std::string::npos) << again.output;
  auto keys = wire::LoadCurveKeys(keys_dir);
  ASSERT_TRUE(keys.ok()) << keys.status();

  WriteFile(dir_.File("job.yaml"), SmallJob(dir_.path(), 1000000) + "metrics:\n  port: 0\n" +
                                       "security:\n  keys: " + keys_dir + "\n");
  Start("chief", "chief:0");
  Start("ps", "ps:0");
  const std::string ps = Ready("ps:0")["address"].get<std::string>();
  const std::string chief = Ready("chief:0")["address"].get<std::string>();

  auto other = wire::GenerateCurveKeys();
  ASSERT_TRUE(other.ok());
  wire::ClientOptions none, wrong, public_only, holder;
  wrong.curve = *other;
  public_only.curve = *other;
  public_only.curve_server_key = keys->public_key;  // the public half is no secret
  holder.curve = *keys;
  for (const std::string& ep : {ps, chief}) {
    for (const auto* o : {&none, &wrong, &public_only}) {
      Status s = Push(ep, *o);
      EXPECT_TRUE(s.IsUnavailable()) << ep << ": " << s;
    }
  }
  // Nothing of theirs reached server code: no push counted, not even as invalid.
  const std::string ps_metrics = Scrape("ps:0");
  EXPECT_EQ(Value(ps_metrics, "tandem_rpc_requests_total{rpc=\"pushRequest\"}"), 0) << ps_metrics;
  EXPECT_EQ(Value(ps_metrics, "tandem_rpc_server_events_total{event=\"invalid\"}"), 0);
  EXPECT_EQ(Value(ps_metrics, "tandem_ps_rows_applied_total"), 0);
  EXPECT_GE(Value(ps_metrics, "tandem_rpc_server_events_total{event=\"refused_handshake\"}"), 3)
      << ps_metrics;
  EXPECT_GE(Value(ps_metrics, "tandem_rpc_refused_connections_total{reason=\"key\"}"), 1);
  const std::string chief_metrics = Scrape("chief:0");
  EXPECT_GE(Value(chief_metrics, "tandem_rpc_server_events_total{event=\"refused_handshake\"}"), 3)
      << chief_metrics;
  EXPECT_NE(ReadFile(dir_.File("ps:0.log")).find("refused a connection"), std::string::npos);

  // The holder of the keys is served by both.
  Status served = Ping(ps, holder);
  EXPECT_TRUE(served.ok()) << served;
  served = Ping(chief, holder);
  EXPECT_TRUE(served.ok()) << served;

  // A whole job trains with CURVE on every socket, and `tandem status` (which loads the keys
  // from the config) sees it.
  Start("worker", "worker:0");
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  int64_t step = -1;
  while (step < 5) {
    ASSERT_LT(Clock::now(), deadline) << ReadFile(dir_.File("worker:0.log"));
    std::vector<std::string> argv = {TANDEM_BINARY, "status", "--config", dir_.File("job.yaml"),
                                     "--json"};
    for (const auto& s : Sets()) argv.push_back(s);
    auto r = RunCommand(argv, {}, {}, milliseconds(10000));
    const auto brace = r.output.find('{');
    if (brace != std::string::npos) {
      auto j = nlohmann::json::parse(r.output.substr(brace), nullptr, false);
      if (j.contains("members"))
        for (const auto& m : j["members"])
          if (m["role"] == "worker") step = m["step"].get<int64_t>();
    }
    std::this_thread::sleep_for(milliseconds(200));
  }
  EXPECT_GT(Value(Scrape("ps:0"), "tandem_ps_rows_applied_total"), 0);
  procs_.at("chief:0").Signal(SIGTERM);
  for (const char* task : {"chief:0", "ps:0", "worker:0"}) {
    auto e = procs_.at(task).Wait(milliseconds(60000));
    ASSERT_TRUE(e.has_value()) << task << ReadFile(dir_.File(std::string(task) + ".log"));
    EXPECT_EQ(e->exit_code, 0) << ReadFile(dir_.File(std::string(task) + ".log"));
  }
}

TEST_F(SecureCluster, ADaemonWhoseKeyFileIsMissingOrLooseRefusesToStartWithExit3) {
  WriteFile(dir_.File("job.yaml"),
            SmallJob(dir_.path(), 1000) + "security:\n  keys: " + dir_.File("nokeys") + "\n");
  auto r =
      RunCommand({TANDEM_BINARY, "chief", "--config", dir_.File("job.yaml"), "--task", "chief:0"},
                 {}, {"TF_CONFIG"}, milliseconds(20000));
  EXPECT_EQ(r.exit.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("tandem keys --out"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tandem::testing
