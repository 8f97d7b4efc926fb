#include "common/config/slurm_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace tandem::config {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

using Env = std::map<std::string, std::string>;

EnvLookup Lookup(const Env& env) {
  return [env](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

// What srun gives a task of tandem's heterogeneous job (as Slurm 22.05 sets it): the chief on
// node01; 3 PS shards, two on node02 and one on node03; 4 workers on gpu[1-2], two each.
Env HetJobEnv(int step_tasks, int procid, const std::string& node) {
  return {
      {"SLURM_JOB_ID", "42"},
      {"SLURM_HET_SIZE", "3"},
      {"SLURM_JOB_NODELIST_HET_GROUP_0", "node01"},
      {"SLURM_JOB_NODELIST_HET_GROUP_1", "node[02-03]"},
      {"SLURM_JOB_NODELIST_HET_GROUP_2", "gpu[1-2]"},
      {"SLURM_TASKS_PER_NODE_HET_GROUP_0", "1"},
      {"SLURM_TASKS_PER_NODE_HET_GROUP_1", "2,1"},
      {"SLURM_TASKS_PER_NODE_HET_GROUP_2", "2(x2)"},
      {"SLURM_NTASKS_HET_GROUP_0", "1"},
      {"SLURM_NTASKS_HET_GROUP_1", "3"},
      {"SLURM_NTASKS_HET_GROUP_2", "4"},
      {"SLURM_STEP_NUM_TASKS", std::to_string(step_tasks)},
      {"SLURM_PROCID", std::to_string(procid)},
      {"SLURMD_NODENAME", node},
      {"SLURM_JOB_NODELIST", "ignored"},
      {"TANDEM_SLURM_BASE_PORT", "9000"},
  };
}

JobConfig ConfigJob() {
  JobConfig job;
  job.cluster.chief = {"a:1"};
  job.cluster.ps = {"b:2"};
  job.cluster.workers = {"d:4"};
  return job;
}

TEST(SlurmHostlistTest, ExpandsAsScontrolDoes) {
  struct Case {
    std::string in;
    std::vector<std::string> out;
  };
  for (const Case& c : std::vector<Case>{
           {"node01", {"node01"}},
           {"node[01-03,07],gpu[1-2],login",
            {"node01", "node02", "node03", "node07", "gpu1", "gpu2", "login"}},
           {"a[1-2]b[3-4]", {"a1b3", "a1b4", "a2b3", "a2b4"}},
           {"n[8-10]", {"n8", "n9", "n10"}},
           {"n[098-101]", {"n098", "n099", "n100", "n101"}},
           {"a[01-2]", {"a01", "a02"}},
           {"127.0.0.[1-3]", {"127.0.0.1", "127.0.0.2", "127.0.0.3"}},
           {"n1,,n2", {"n1", "n2"}},
           {"[1-2]", {"1", "2"}},
           {"", {}},
       }) {
    StatusOr<std::vector<std::string>> hosts = ExpandHostlist(c.in);
    ASSERT_TRUE(hosts.ok()) << c.in << ": " << hosts.status();
    EXPECT_EQ(*hosts, c.out) << c.in;
  }
}

TEST(SlurmHostlistTest, RejectsMalformedLists) {
  for (const char* text :
       {"n[1-2", "n1-2]", "n[3-1]", "n[a-b]", "n[]", "n[1-]", "n[-1]", "n[1,]", "x[1-3]y", "n[[1]]",
        "n[1-2] ", "n[0-99999999]", "a[0-999]b[0-9999]", "n[99999999999999999999]"}) {
    StatusOr<std::vector<std::string>> hosts = ExpandHostlist(text);
    EXPECT_FALSE(hosts.ok()) << text;
    EXPECT_TRUE(hosts.status().IsInvalidArgument()) << text << ": " << hosts.status();
    EXPECT_TRUE(Contains(hosts.status().message(), text)) << hosts.status();
  }
}

// The top of the 64-bit range is one host (a loop counting up to it once never ended).
TEST(SlurmHostlistTest, ARangeEndingAtTheLargestNumberEnds) {
  StatusOr<std::vector<std::string>> hosts =
      ExpandHostlist("n[18446744073709551614-18446744073709551615]");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_EQ(*hosts, (std::vector<std::string>{"n18446744073709551614", "n18446744073709551615"}));
}

TEST(SlurmHostlistTest, TasksPerNode) {
  EXPECT_EQ(*ExpandTasksPerNode("1"), (std::vector<int>{1}));
  EXPECT_EQ(*ExpandTasksPerNode("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(*ExpandTasksPerNode("4,1(x2)"), (std::vector<int>{4, 1, 1}));
  for (const char* text : {"", "x", "2(x)", "2(x0)", "2(3)", "2(x3", "-1", "1,", "(x2)"}) {
    StatusOr<std::vector<int>> counts = ExpandTasksPerNode(text);
    EXPECT_FALSE(counts.ok()) << text;
    EXPECT_TRUE(counts.status().IsInvalidArgument()) << text;
  }
}

TEST(SlurmTaskTest, EachRoleFromItsComponent) {
  struct Case {
    Role role;
    int step_tasks, procid;
    std::string node, address;
  };
  for (const Case& c : std::vector<Case>{{Role::kChief, 1, 0, "node01", "node01:9000"},
                                         {Role::kPs, 3, 0, "node02", "node02:9001"},
                                         {Role::kPs, 3, 1, "node02", "node02:9002"},
                                         {Role::kPs, 3, 2, "node03", "node03:9003"},
                                         {Role::kWorker, 4, 0, "gpu1", "gpu1:9004"},
                                         {Role::kWorker, 4, 3, "gpu2", "gpu2:9007"}}) {
    JobConfig job = ConfigJob();
    StatusOr<ResolvedTask> r =
        ResolveSlurmTask(c.role, Lookup(HetJobEnv(c.step_tasks, c.procid, c.node)), &job);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->task, (TaskId{c.role, c.procid}));
    EXPECT_EQ(r->address, c.address);
    EXPECT_EQ(job.cluster.chief, (std::vector<std::string>{"node01:9000"}));
    EXPECT_EQ(job.cluster.ps,
              (std::vector<std::string>{"node02:9001", "node02:9002", "node03:9003"}));
    EXPECT_EQ(job.cluster.workers,
              (std::vector<std::string>{"gpu1:9004", "gpu1:9005", "gpu2:9006", "gpu2:9007"}));
    EXPECT_TRUE(Contains(r->cluster_from, "Slurm heterogeneous job 42")) << r->cluster_from;
    EXPECT_TRUE(Contains(r->task_from, "SLURM_PROCID " + std::to_string(c.procid))) << r->task_from;
  }
}

TEST(SlurmTaskTest, DefaultBasePortAndNoNodeName) {
  Env env = HetJobEnv(4, 1, "");
  env.erase("TANDEM_SLURM_BASE_PORT");
  env.erase("SLURMD_NODENAME");
  JobConfig job = ConfigJob();
  StatusOr<ResolvedTask> r = ResolveSlurmTask(Role::kWorker, Lookup(env), &job);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->address, "gpu1:" + std::to_string(kDefaultSlurmBasePort + 5));
  EXPECT_EQ(job.cluster.chief[0], "node01:" + std::to_string(kDefaultSlurmBasePort));
}

// Each malformed or missing variable is an InvalidArgument that names it; the config's cluster
// is left as it was.
TEST(SlurmTaskTest, BadVariablesAreNamed) {
  struct Case {
    std::string var, value;  // value "<unset>" erases it
    Role role = Role::kPs;
  };
  for (const Case& c : std::vector<Case>{
           {"SLURM_HET_SIZE", "2"},
           {"SLURM_HET_SIZE", "three"},
           {"SLURM_JOB_NODELIST_HET_GROUP_1", "<unset>"},
           {"SLURM_JOB_NODELIST_HET_GROUP_1", ""},
           {"SLURM_JOB_NODELIST_HET_GROUP_1", "node[02-03"},
           {"SLURM_JOB_NODELIST_HET_GROUP_2", "gpu[2-1]"},
           {"SLURM_TASKS_PER_NODE_HET_GROUP_1", "<unset>"},
           {"SLURM_TASKS_PER_NODE_HET_GROUP_1", "2(x)"},
           {"SLURM_TASKS_PER_NODE_HET_GROUP_1", "3"},  // 1 count, 2 nodes
           {"SLURM_TASKS_PER_NODE_HET_GROUP_0", "2"},  // two chiefs
           {"SLURM_NTASKS_HET_GROUP_2", "5"},          // disagrees with 2(x2)
           {"SLURM_STEP_NUM_TASKS", "<unset>"},        // not under srun
           {"SLURM_STEP_NUM_TASKS", "8"},              // a step over every component
           {"SLURM_PROCID", "3"},                      // past the step's tasks
           {"SLURM_PROCID", "-1"},
           {"SLURM_PROCID", "1x"},
           {"SLURM_PROCID", "<unset>"},
           {"SLURMD_NODENAME", "node03"},  // not block distribution
           {"TANDEM_SLURM_BASE_PORT", "0"},
           {"TANDEM_SLURM_BASE_PORT", "65530"},  // no room for 8 ports
           {"TANDEM_SLURM_BASE_PORT", "http"},
       }) {
    Env env = HetJobEnv(3, 1, "node02");
    if (c.value == "<unset>") {
      env.erase(c.var);
    } else {
      env[c.var] = c.value;
    }
    JobConfig job = ConfigJob();
    StatusOr<ResolvedTask> r = ResolveSlurmTask(c.role, Lookup(env), &job);
    ASSERT_FALSE(r.ok()) << c.var << "=" << c.value;
    EXPECT_TRUE(r.status().IsInvalidArgument()) << c.var << "=" << c.value << ": " << r.status();
    EXPECT_TRUE(Contains(r.status().message(), c.var))
        << c.var << "=" << c.value << ": " << r.status();
    EXPECT_EQ(job.cluster, ConfigJob().cluster) << c.var;
  }
}

TEST(SlurmTaskTest, StepOverAnotherComponentIsRefused) {
  // `srun --het-group=2 tandem ps`: the step has the workers' 4 tasks, not the 3 shards.
  JobConfig job = ConfigJob();
  StatusOr<ResolvedTask> r = ResolveSlurmTask(Role::kPs, Lookup(HetJobEnv(4, 0, "node02")), &job);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status().message(), "srun --het-group=1")) << r.status();
}

TEST(SlurmTaskTest, PrecedenceTaskFlagThenTfConfigThenSlurm) {
  const Env slurm = HetJobEnv(3, 2, "node03");
  {  // --task wins: the config's cluster, Slurm ignored.
    JobConfig job = ConfigJob();
    StatusOr<ResolvedTask> r =
        ResolveDaemonTask(Role::kPs, "ps:0", std::nullopt, Lookup(slurm), "job.yaml", &job);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->task, (TaskId{Role::kPs, 0}));
    EXPECT_EQ(r->address, "b:2");
    EXPECT_EQ(r->task_from, "--task");
    EXPECT_EQ(job.cluster, ConfigJob().cluster);
  }
  {  // TF_CONFIG wins over Slurm.
    JobConfig job = ConfigJob();
    const std::string tf = R"({"cluster": {"chief": ["h:10"], "ps": ["h:11"], "worker": ["h:12"]},)"
                           R"( "task": {"type": "ps", "index": 0}})";
    StatusOr<ResolvedTask> r =
        ResolveDaemonTask(Role::kPs, std::nullopt, tf, Lookup(slurm), "job.yaml", &job);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->address, "h:11");
    EXPECT_EQ(r->cluster_from, "TF_CONFIG");
  }
  {  // Neither: Slurm.
    JobConfig job = ConfigJob();
    StatusOr<ResolvedTask> r =
        ResolveDaemonTask(Role::kPs, std::nullopt, std::nullopt, Lookup(slurm), "job.yaml", &job);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->task, (TaskId{Role::kPs, 2}));
    EXPECT_EQ(r->address, "node03:9003");
    EXPECT_EQ(job.cluster.ps.size(), 3u);
  }
  {  // Neither, and no Slurm: a usage error naming the three ways.
    JobConfig job = ConfigJob();
    StatusOr<ResolvedTask> r =
        ResolveDaemonTask(Role::kPs, std::nullopt, std::nullopt, Lookup({}), "job.yaml", &job);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.status().IsFailedPrecondition()) << r.status();
    EXPECT_TRUE(Contains(r.status().message(), "--task")) << r.status();
    EXPECT_TRUE(Contains(r.status().message(), "TF_CONFIG")) << r.status();
    EXPECT_TRUE(Contains(r.status().message(), "Slurm")) << r.status();
  }
  {  // A plain (not heterogeneous) Slurm job is no source of tasks, and the message says so.
    JobConfig job = ConfigJob();
    StatusOr<ResolvedTask> r =
        ResolveDaemonTask(Role::kPs, std::nullopt, std::nullopt,
                          Lookup({{"SLURM_JOB_ID", "7"}, {"SLURM_PROCID", "0"}}), "job.yaml", &job);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.status().IsFailedPrecondition()) << r.status();
    EXPECT_TRUE(Contains(r.status().message(), "not heterogeneous")) << r.status();
  }
}

}  // namespace
}  // namespace tandem::config
