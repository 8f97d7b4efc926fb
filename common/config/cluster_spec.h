// Which task this process is and where the cluster lives: from `--task TYPE:INDEX` and the
// job config, or from TensorFlow's TF_CONFIG environment variable (DESIGN §1).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/job_config.h"
#include "common/status.h"

namespace tandem::config {

enum class Role { kChief, kPs, kWorker };

// The one name of each role: in `--task`, TF_CONFIG, `tandem status` and the logs.
std::string_view RoleName(Role role);  // "chief" | "ps" | "worker"
std::optional<Role> ParseRole(std::string_view name);

struct TaskId {
  Role role = Role::kWorker;
  int index = 0;
  std::string ToString() const;  // "worker:0"
  friend bool operator==(const TaskId&, const TaskId&) = default;
};

// Parses "chief:0", "ps:3", "worker:1" (index >= 0; chief only 0).
StatusOr<TaskId> ParseTaskId(const std::string& text);

struct ResolvedTask {
  TaskId task;
  std::string address;       // this task's "host:port" from the cluster
  std::string cluster_from;  // "config FILE" or "TF_CONFIG"
  std::string task_from;     // "--task" or "TF_CONFIG" or "--task and TF_CONFIG"
};

// Resolves the task and cluster for a daemon. `tf_config` is the value of TF_CONFIG (nullopt
// when unset); the caller reads the environment. When TF_CONFIG names a cluster, its
// "chief"/"ps"/"worker" lists replace cluster.* in `job` (TensorFlow's precedence: the
// environment describes the actual deployment). Errors (kInvalidArgument, exit 3):
// TF_CONFIG not valid JSON; a task type tandem lacks (e.g. "evaluator", "master") in its cluster
// or task; `--task` and TF_CONFIG's task disagree (the message names both); index out of range.
// kFailedPrecondition (usage, exit 2) when neither `--task` nor TF_CONFIG gives a task.
StatusOr<ResolvedTask> ResolveTask(const std::optional<std::string>& task_flag,
                                   const std::optional<std::string>& tf_config,
                                   const std::string& config_path, JobConfig* job);

// How a daemon binds its task's "host:port". ZeroMQ binds numeric addresses and interface names
// only, so a task named by a DNS name (Kubernetes: the training operator's TF_CONFIG names
// every task "<job>-<type>-<i>.<namespace>.svc:<port>", a StatefulSet's cluster its pods'
// "<pod>.<service>:<port>", a Slurm node's name) is bound by address and advertised by its
// name, which the chief and the peers resolve when they connect: a name that resolves to an
// address of one of this host's interfaces binds that address alone; a name that does not (yet)
// resolve here (a pod before its Service publishes it) binds every IPv4 interface at its port,
// which the daemon warns about. "localhost" binds 127.0.0.1.
struct BindAddress {
  std::string bind;              // what the daemon binds: the address itself, or "0.0.0.0:PORT"
  std::string advertise;         // the host it tells others; empty: the bound address as it is
  bool every_interface = false;  // bound 0.0.0.0 for a name that is no address of this host
};
BindAddress BindAddressFor(const std::string& address);

// The IPv4 address `host` resolves to that one of this host's interfaces has, or "".
std::string LocalAddressOf(const std::string& host);

}  // namespace tandem::config
