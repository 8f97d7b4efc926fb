// The daemons' task and cluster from a Slurm heterogeneous job (scripts/slurm/README.md), and
// the order in which `--task`, TF_CONFIG and Slurm are consulted.
//
// tandem's Slurm job has three components: 0 the chief (1 task), 1 the PS shards (N tasks),
// 2 the workers (M tasks), and each role runs as its own step (`srun --het-group=C`) over all of
// its component's tasks. A task's role is its subcommand (`tandem ps` runs in component 1), its
// index is SLURM_PROCID within the step, and the cluster is built from every component's node
// list and tasks per node (SLURM_JOB_NODELIST_HET_GROUP_C, SLURM_TASKS_PER_NODE_HET_GROUP_C,
// which srun passes to every task of every step) with block distribution: chief at
// BASE, ps:i at BASE+1+i, worker:r at BASE+1+N+r on its node, BASE from TANDEM_SLURM_BASE_PORT
// (default 7000). Slurm 22.05 sets no SLURM_HET_JOB_ID in a task's environment (only in
// prolog/epilog scripts); SLURM_HET_SIZE marks a heterogeneous job.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/config/cluster_spec.h"
#include "common/config/job_config.h"
#include "common/status.h"

namespace tandem::config {

// Reads one environment variable; nullopt when unset. Tests pass a map.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// The process environment (std::getenv).
EnvLookup ProcessEnvironment();

// Expands a Slurm host list as `scontrol show hostnames` does: "node[01-03,07],login" ->
// node01 node02 node03 node07 login; "a[1-2]b[3-4]" -> a1b3 a1b4 a2b3 a2b4; a range keeps the
// zero padding of its first bound ("n[098-101]" -> n098 .. n101). Errors (kInvalidArgument):
// unbalanced brackets, an empty or non-numeric range, a descending range, text after the last
// bracket, more than 1,000,000 names.
StatusOr<std::vector<std::string>> ExpandHostlist(const std::string& hostlist);

// Expands Slurm's tasks per node, "2(x3),1" -> 2 2 2 1. Counts >= 0.
StatusOr<std::vector<int>> ExpandTasksPerNode(const std::string& text);

constexpr int kDefaultSlurmBasePort = 7000;

// True when the environment is a task of a Slurm heterogeneous job (SLURM_HET_SIZE is set).
bool InSlurmHetJob(const EnvLookup& env);

// The task and cluster of daemon `role` from the Slurm variables above. Replaces job->cluster
// once everything is valid. Errors (kInvalidArgument, naming the variable): a variable missing
// or malformed; SLURM_HET_SIZE not 3; a chief component with other than 1 task; a step that
// does not run exactly its component's tasks (SLURM_STEP_NUM_TASKS); SLURM_PROCID out of
// range; SLURMD_NODENAME not the node block distribution puts the task on; a base port that
// leaves no room for every task's port.
StatusOr<ResolvedTask> ResolveSlurmTask(Role role, const EnvLookup& env, JobConfig* job);

// What a daemon (`tandem chief|ps|worker`, the subcommand's `role`) runs as, in this order:
//   1. `--task` and/or TF_CONFIG: ResolveTask (the config's or TF_CONFIG's cluster); Slurm's
//      variables are then ignored, whatever they say.
//   2. neither, in a Slurm heterogeneous job: ResolveSlurmTask.
//   3. neither, outside one: kFailedPrecondition (usage, exit 2) naming the three ways.
StatusOr<ResolvedTask> ResolveDaemonTask(Role role, const std::optional<std::string>& task_flag,
                                         const std::optional<std::string>& tf_config,
                                         const EnvLookup& env, const std::string& config_path,
                                         JobConfig* job);

}  // namespace tandem::config
