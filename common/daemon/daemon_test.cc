// The shared daemon start-up (daemon.h) with a role that only records what it is asked: the
// order of the calls, what a refusal or a bad config does, and the ready file.
#include "common/daemon/daemon.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/exit_codes.h"
#include "common/metrics/prometheus.h"
#include "common/testing/test_util.h"

namespace tandem::daemon {
namespace {

class RecordingRole : public DaemonRole {
 public:
  std::vector<std::string> calls;
  std::optional<int> refuse;  // Prepare's answer
  int run_status = kExitOk;
  int stopped_with = -1;
  bool server_was_serving_in_run = false;

  std::vector<wire::LaneOptions> Lanes(const config::JobConfig&) const override {
    const_cast<RecordingRole*>(this)->calls.push_back("lanes");
    return {};
  }
  std::optional<int> Prepare(const RoleContext& ctx) override {
    calls.push_back("prepare");
    EXPECT_NE(ctx.server, nullptr);
    EXPECT_EQ(ctx.host, "127.0.0.1");
    return refuse;
  }
  void Started(const RoleContext&, metrics::Registry* registry) override {
    calls.push_back("started");
    EXPECT_NE(registry, nullptr);
  }
  void Ready(const RoleContext&) override { calls.push_back("ready"); }
  int Run(const RoleContext& ctx) override {
    calls.push_back("run");
    server_was_serving_in_run = !ctx.server->endpoint().empty();
    return run_status;
  }
  void Stopped(int status) override {
    calls.push_back("stopped");
    stopped_with = status;
  }
};

struct Job {
  testing::TempDir dir;
  DaemonArgs args;
  Job() {
    testing::WriteFile(dir.File("job.yaml"),
                       "cluster:\n  chief: [\"127.0.0.1:0\"]\n"
                       "  ps: [\"127.0.0.1:0\"]\n"
                       "  workers: [\"127.0.0.1:0\"]\n"
                       "checkpoint:\n  dir: " +
                           dir.path() + "/ckpt\n");
    args.role = config::Role::kPs;
    args.config_path = dir.File("job.yaml");
    args.task = "ps:0";
    args.ready_file = dir.File("ready.json");
  }
};

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(DaemonTest, CallsTheRoleInOrderAndWritesTheReadyFile) {
  Job job;
  RecordingRole role;
  role.run_status = 42;
  EXPECT_EQ(RunDaemon(job.args, std::nullopt, &role), 42);
  EXPECT_EQ(role.calls,
            (std::vector<std::string>{"lanes", "prepare", "started", "ready", "run", "stopped"}));
  EXPECT_EQ(role.stopped_with, 42);
  EXPECT_TRUE(role.server_was_serving_in_run);
  auto ready = nlohmann::json::parse(Read(job.args.ready_file), nullptr, false);
  ASSERT_FALSE(ready.is_discarded()) << Read(job.args.ready_file);
  EXPECT_EQ(ready.value("task", ""), "ps:0");
  EXPECT_EQ(ready.value("pid", 0), ::getpid());
  EXPECT_TRUE(ready.value("address", "").starts_with("tcp://127.0.0.1:"));
  EXPECT_EQ(ready.value("job_id", "").size(), 32u);
}

TEST(DaemonTest, ARoleThatRefusesInPrepareNeverRunsNorBinds) {
  Job job;
  RecordingRole role;
  role.refuse = kExitFenced;
  EXPECT_EQ(RunDaemon(job.args, std::nullopt, &role), kExitFenced);
  EXPECT_EQ(role.calls, (std::vector<std::string>{"lanes", "prepare"}));
  EXPECT_FALSE(std::ifstream(job.args.ready_file).good());
}

TEST(DaemonTest, BadConfigOrTaskExitsBeforeTheRoleIsAsked) {
  Job job;
  RecordingRole role;
  testing::WriteFile(job.args.config_path, "train:\n  steps: -5\n");
  EXPECT_EQ(RunDaemon(job.args, std::nullopt, &role), kExitInvalid);
  EXPECT_TRUE(role.calls.empty());

  Job other;
  other.args.task = "worker:0";  // `tandem ps` given a worker's task
  EXPECT_EQ(RunDaemon(other.args, std::nullopt, &role), kExitInvalid);
  other.args.task = "ps:7";  // no such task in the cluster
  EXPECT_NE(RunDaemon(other.args, std::nullopt, &role), kExitOk);
  EXPECT_TRUE(role.calls.empty());
}

// A role releases what it holds in Stopped (DaemonRole::Stopped): by then /metrics no longer
// answers (a scrape would read the state being released), and the registry its requests'
// answers report to still lives (counted here; an ASan build catches a use after it).
class ReleasingRole : public RecordingRole {
 public:
  std::string ready_file;
  metrics::Counter* released = nullptr;
  bool metrics_answered_in_run = false;
  bool metrics_answered_in_stopped = true;

  void Started(const RoleContext& ctx, metrics::Registry* registry) override {
    RecordingRole::Started(ctx, registry);
    released = registry->counter("test_released_total", "requests released in Stopped");
  }
  int Run(const RoleContext& ctx) override {
    metrics_answered_in_run = MetricsAnswer();
    return RecordingRole::Run(ctx);
  }
  void Stopped(int status) override {
    RecordingRole::Stopped(status);
    metrics_answered_in_stopped = MetricsAnswer();
    released->Add();
  }

 private:
  bool MetricsAnswer() const {
    auto ready = nlohmann::json::parse(Read(ready_file), nullptr, false);
    const int port = ready.is_discarded() ? 0 : ready.value("metrics_port", 0);
    if (port == 0) return false;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool connected = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    ::close(fd);
    return connected;
  }
};

TEST(DaemonTest, StoppedRunsAfterMetricsStopAndBeforeTheRegistryGoes) {
  Job job;
  testing::WriteFile(job.args.config_path, Read(job.args.config_path) + "metrics:\n  port: 0\n");
  ReleasingRole role;
  role.ready_file = job.args.ready_file;
  EXPECT_EQ(RunDaemon(job.args, std::nullopt, &role), kExitOk);
  EXPECT_TRUE(role.metrics_answered_in_run);
  EXPECT_FALSE(role.metrics_answered_in_stopped);
  EXPECT_EQ(role.calls.back(), "stopped");
}

}  // namespace
}  // namespace tandem::daemon
