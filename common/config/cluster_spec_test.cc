#include "common/config/cluster_spec.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

namespace tandem::config {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A job whose config file names chief a:1, ps b:2 and c:3, workers d:4 and e:5.
JobConfig ConfigJob() {
  JobConfig job;
  job.cluster.chief = {"a:1"};
  job.cluster.ps = {"b:2", "c:3"};
  job.cluster.workers = {"d:4", "e:5"};
  return job;
}

constexpr char kTfCluster[] =
    R"("cluster": {"chief": ["h:10"], "ps": ["h:11"], "worker": ["h:12", "h:13", "h:14"]})";

std::string TfConfig(const std::string& task_type, int index) {
  return std::string("{") + kTfCluster + R"(, "task": {"type": ")" + task_type + R"(", "index": )" +
         std::to_string(index) + "}}";
}

TEST(ClusterSpecTest, RoleNamesAndTaskIdText) {
  EXPECT_EQ(RoleName(Role::kChief), "chief");
  EXPECT_EQ(RoleName(Role::kPs), "ps");
  EXPECT_EQ(RoleName(Role::kWorker), "worker");
  EXPECT_EQ((TaskId{Role::kPs, 3}).ToString(), "ps:3");
  EXPECT_EQ((TaskId{Role::kWorker, 0}).ToString(), "worker:0");
}

TEST(ClusterSpecTest, ParseTaskIdAcceptsEachRole) {
  for (const TaskId& id :
       {TaskId{Role::kChief, 0}, TaskId{Role::kPs, 3}, TaskId{Role::kWorker, 12}}) {
    StatusOr<TaskId> parsed = ParseTaskId(id.ToString());
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, id);
  }
}

TEST(ClusterSpecTest, ParseTaskIdRejectsBadText) {
  for (const char* text : {"worker", "worker:", "worker:-1", "worker:x", "worker:1x", ":1",
                           "chief:1", "Worker:0", "worker:99999999999"}) {
    StatusOr<TaskId> parsed = ParseTaskId(text);
    EXPECT_FALSE(parsed.ok()) << text;
    EXPECT_TRUE(parsed.status().IsInvalidArgument()) << text << ": " << parsed.status();
  }
}

TEST(ClusterSpecTest, ParseTaskIdNamesMissingRole) {
  StatusOr<TaskId> parsed = ParseTaskId("evaluator:0");
  ASSERT_FALSE(parsed.ok());
  EXPECT_TRUE(Contains(parsed.status().message(), "evaluator")) << parsed.status();
  EXPECT_TRUE(Contains(parsed.status().message(), "tandem has no such role")) << parsed.status();
}

TEST(ClusterSpecTest, TaskFlagUsesConfigCluster) {
  JobConfig job = ConfigJob();
  StatusOr<ResolvedTask> r = ResolveTask("ps:1", std::nullopt, "job.yaml", &job);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->task, (TaskId{Role::kPs, 1}));
  EXPECT_EQ(r->address, "c:3");
  EXPECT_EQ(r->cluster_from, "config job.yaml");
  EXPECT_EQ(r->task_from, "--task");
  EXPECT_EQ(job.cluster, ConfigJob().cluster);
}

TEST(ClusterSpecTest, TfConfigReplacesClusterAndGivesTask) {
  JobConfig job = ConfigJob();
  StatusOr<ResolvedTask> r = ResolveTask(std::nullopt, TfConfig("worker", 2), "job.yaml", &job);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->task, (TaskId{Role::kWorker, 2}));
  EXPECT_EQ(r->address, "h:14");
  EXPECT_EQ(r->cluster_from, "TF_CONFIG");
  EXPECT_EQ(r->task_from, "TF_CONFIG");
  EXPECT_EQ(job.cluster.chief, std::vector<std::string>{"h:10"});
  EXPECT_EQ(job.cluster.ps, std::vector<std::string>{"h:11"});
  EXPECT_EQ(job.cluster.workers, (std::vector<std::string>{"h:12", "h:13", "h:14"}));
}

TEST(ClusterSpecTest, TaskFlagAndTfConfigAgree) {
  JobConfig job = ConfigJob();
  StatusOr<ResolvedTask> r = ResolveTask("chief:0", TfConfig("chief", 0), "job.yaml", &job);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->task_from, "--task and TF_CONFIG");
  EXPECT_EQ(r->address, "h:10");
}

TEST(ClusterSpecTest, TaskFlagWithTfConfigClusterOnly) {
  JobConfig job = ConfigJob();
  std::string tf = std::string("{") + kTfCluster + "}";
  StatusOr<ResolvedTask> r = ResolveTask("worker:1", tf, "job.yaml", &job);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->address, "h:13");
  EXPECT_EQ(r->cluster_from, "TF_CONFIG");
  EXPECT_EQ(r->task_from, "--task");
}

TEST(ClusterSpecTest, TfConfigTaskOnlyUsesConfigCluster) {
  JobConfig job = ConfigJob();
  StatusOr<ResolvedTask> r = ResolveTask(
      std::nullopt, R"({"task": {"type": "worker", "index": 1}, "environment": "cloud"})",
      "job.yaml", &job);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->address, "e:5");
  EXPECT_EQ(r->cluster_from, "config job.yaml");
  EXPECT_EQ(r->task_from, "TF_CONFIG");
}

TEST(ClusterSpecTest, TaskFlagDisagreesWithTfConfig) {
  JobConfig job = ConfigJob();
  StatusOr<ResolvedTask> r = ResolveTask("ps:1", TfConfig("worker", 0), "job.yaml", &job);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument());
  EXPECT_EQ(r.status().message(), "--task ps:1 disagrees with TF_CONFIG task worker:0");
  EXPECT_EQ(job.cluster, ConfigJob().cluster) << "a failed resolution must not touch the job";
  // Same role, different index is a disagreement too.
  r = ResolveTask("worker:1", TfConfig("worker", 0), "job.yaml", &job);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), "--task worker:1")) << r.status();
  EXPECT_TRUE(Contains(r.status().message(), "TF_CONFIG task worker:0")) << r.status();
}

TEST(ClusterSpecTest, NoTaskIsFailedPrecondition) {
  JobConfig job = ConfigJob();
  StatusOr<ResolvedTask> r = ResolveTask(std::nullopt, std::nullopt, "job.yaml", &job);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsFailedPrecondition()) << r.status();
  r = ResolveTask(std::nullopt, std::string("{") + kTfCluster + "}", "job.yaml", &job);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsFailedPrecondition()) << r.status();
}

TEST(ClusterSpecTest, TfConfigTaskTypeTandemLacks) {
  JobConfig job = ConfigJob();
  for (const char* type : {"evaluator", "master"}) {
    StatusOr<ResolvedTask> r = ResolveTask(std::nullopt, TfConfig(type, 0), "job.yaml", &job);
    ASSERT_FALSE(r.ok()) << type;
    EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();
    EXPECT_TRUE(Contains(r.status().message(), std::string("\"") + type + "\"")) << r.status();
    EXPECT_TRUE(Contains(r.status().message(), "tandem has no such role")) << r.status();
  }
}

TEST(ClusterSpecTest, TfConfigClusterTypeTandemLacks) {
  JobConfig job = ConfigJob();
  StatusOr<ResolvedTask> r = ResolveTask(
      "worker:0",
      R"({"cluster": {"chief": ["h:1"], "ps": ["h:2"], "worker": ["h:3"], "evaluator": ["h:4"]}})",
      "job.yaml", &job);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument());
  EXPECT_TRUE(Contains(r.status().message(), "\"evaluator\"")) << r.status();
  EXPECT_TRUE(Contains(r.status().message(), "tandem has no such role")) << r.status();
}

TEST(ClusterSpecTest, TfConfigClusterNeedsEveryList) {
  JobConfig job = ConfigJob();
  StatusOr<ResolvedTask> r = ResolveTask(
      "worker:0", R"({"cluster": {"ps": ["h:2"], "worker": ["h:3"]}})", "job.yaml", &job);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument());
  EXPECT_TRUE(Contains(r.status().message(), "cluster.chief is missing")) << r.status();
  r = ResolveTask("worker:0", R"({"cluster": {"chief": ["h:1"], "ps": [], "worker": ["h:3"]}})",
                  "job.yaml", &job);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), "cluster.ps")) << r.status();
  r = ResolveTask("worker:0",
                  R"({"cluster": {"chief": ["h:1", "h:9"], "ps": ["h:2"], "worker": ["h:3"]}})",
                  "job.yaml", &job);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), "exactly one")) << r.status();
}

TEST(ClusterSpecTest, TfConfigBadAddress) {
  JobConfig job = ConfigJob();
  StatusOr<ResolvedTask> r = ResolveTask(
      "worker:0", R"({"cluster": {"chief": ["h:1"], "ps": ["h:99999"], "worker": ["h:3"]}})",
      "job.yaml", &job);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument());
  EXPECT_TRUE(Contains(r.status().message(), "cluster.ps")) << r.status();
  EXPECT_TRUE(Contains(r.status().message(), "port")) << r.status();
}

TEST(ClusterSpecTest, TfConfigNotJson) {
  JobConfig job = ConfigJob();
  for (const char* tf : {"{\"cluster\": ", "[1, 2]", "", "{\"task\": {\"type\": \"worker\"}}",
                         "{\"task\": {\"type\": \"worker\", \"index\": \"0\"}}",
                         "{\"task\": {\"type\": \"worker\", \"index\": -1}}"}) {
    StatusOr<ResolvedTask> r = ResolveTask(std::nullopt, std::string(tf), "job.yaml", &job);
    ASSERT_FALSE(r.ok()) << tf;
    EXPECT_TRUE(r.status().IsInvalidArgument()) << tf << ": " << r.status();
    EXPECT_TRUE(Contains(r.status().message(), "TF_CONFIG")) << r.status();
  }
}

TEST(ClusterSpecTest, IndexOutOfRange) {
  JobConfig job = ConfigJob();
  StatusOr<ResolvedTask> r = ResolveTask("worker:2", std::nullopt, "job.yaml", &job);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument());
  EXPECT_TRUE(Contains(r.status().message(), "worker:2")) << r.status();
  EXPECT_TRUE(Contains(r.status().message(), "config job.yaml")) << r.status();
  r = ResolveTask(std::nullopt, TfConfig("ps", 1), "job.yaml", &job);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument());
  EXPECT_TRUE(Contains(r.status().message(), "ps:1")) << r.status();
  EXPECT_TRUE(Contains(r.status().message(), "TF_CONFIG")) << r.status();
  r = ResolveTask(std::nullopt, TfConfig("chief", 1), "job.yaml", &job);
  EXPECT_TRUE(r.status().IsInvalidArgument()) << r.status();
}

TEST(ClusterSpecTest, BadTaskFlagIsInvalidArgumentEvenWithTfConfig) {
  JobConfig job = ConfigJob();
  StatusOr<ResolvedTask> r = ResolveTask("evaluator:0", TfConfig("worker", 0), "job.yaml", &job);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument());
  EXPECT_TRUE(Contains(r.status().message(), "evaluator")) << r.status();
}

// ZeroMQ binds numbers and interface names; a DNS name is bound on every interface and
// advertised by its name (the training operator's TF_CONFIG: configs/k8s/).
TEST(ClusterSpecTest, BindAddressKeepsNumbersAndInterfacesAndBindsNamesEverywhere) {
  for (const char* address : {"10.0.0.1:7000", "127.0.0.1:0", "[::1]:7000", "*:7001", "lo:7002"}) {
    const BindAddress b = BindAddressFor(address);
    EXPECT_EQ(b.bind, address);
    EXPECT_EQ(b.advertise, "") << address;
  }
  // Names that resolve to no address of this host (".invalid" never resolves, RFC 6761).
  BindAddress b = BindAddressFor("tandem-ps-1.default.svc.invalid:2222");
  EXPECT_EQ(b.bind, "0.0.0.0:2222");
  EXPECT_EQ(b.advertise, "tandem-ps-1.default.svc.invalid");
  EXPECT_TRUE(b.every_interface);
  b = BindAddressFor("hostA.invalid:0");
  EXPECT_EQ(b.bind, "0.0.0.0:0");
  EXPECT_EQ(b.advertise, "hostA.invalid");
  b = BindAddressFor("localhost:7000");
  EXPECT_EQ(b.bind, "127.0.0.1:7000");
  EXPECT_EQ(b.advertise, "localhost");
  EXPECT_FALSE(b.every_interface);
}

// A name of this host (a Slurm node's) binds the one address it resolves to, not every interface.
TEST(BindAddressTest, ANameOfThisHostBindsItsAddressAlone) {
  // /etc/hosts maps "localhost" and, on Debian, the host's own name; ip6-localhost is IPv6 only.
  EXPECT_EQ(LocalAddressOf("localhost"), "127.0.0.1");
  EXPECT_EQ(LocalAddressOf("name.invalid"), "");
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof name - 1), 0);
  const std::string local = LocalAddressOf(name);
  if (local.empty()) {
    ADD_FAILURE() << "this host's name " << name << " resolves to none of its addresses";
    return;
  }
  const BindAddress b = BindAddressFor(std::string(name) + ":7100");
  EXPECT_EQ(b.bind, local + ":7100");
  EXPECT_EQ(b.advertise, name);
  EXPECT_FALSE(b.every_interface);
}

}  // namespace
}  // namespace tandem::config
