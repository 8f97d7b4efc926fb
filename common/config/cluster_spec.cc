// Task and cluster resolution for the daemons: `--task TYPE:INDEX`, the job config's cluster
// lists and TensorFlow's TF_CONFIG (DESIGN §1).
#include "common/config/cluster_spec.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>

#include <charconv>
#include <nlohmann/json.hpp>

namespace tandem::config {
namespace {

// TF_CONFIG names the worker list "worker"; the job config says "workers".
std::string_view TfName(Role role) { return role == Role::kWorker ? "worker" : RoleName(role); }

Status NoSuchRole(std::string_view where, std::string_view type) {
  return Status::InvalidArgument(std::string(where) + " names task type \"" + std::string(type) +
                                 "\": tandem has no such role (roles: chief, ps, worker)");
}

std::vector<std::string>& ListFor(ClusterConfig& cluster, Role role) {
  switch (role) {
    case Role::kChief:
      return cluster.chief;
    case Role::kPs:
      return cluster.ps;
    case Role::kWorker:
      break;
  }
  return cluster.workers;
}

// Reads TF_CONFIG's "cluster": every list required, each address valid, no other task types.
StatusOr<ClusterConfig> ParseTfCluster(const nlohmann::json& json) {
  if (!json.is_object()) return Status::InvalidArgument("TF_CONFIG cluster must be an object");
  for (const auto& [type, addresses] : json.items()) {
    if (!ParseRole(type)) return NoSuchRole("TF_CONFIG cluster", type);
  }
  ClusterConfig cluster;
  for (Role role : {Role::kChief, Role::kPs, Role::kWorker}) {
    std::string where = "TF_CONFIG cluster." + std::string(TfName(role));
    auto it = json.find(std::string(TfName(role)));
    if (it == json.end()) return Status::InvalidArgument(where + " is missing");
    if (!it->is_array() || it->empty()) {
      return Status::InvalidArgument(where + " must be a non-empty list of \"host:port\"");
    }
    for (const nlohmann::json& address : *it) {
      if (!address.is_string()) {
        return Status::InvalidArgument(where + " has a non-string entry " + address.dump());
      }
      TANDEM_RETURN_IF_ERROR(ValidateAddress(address.get<std::string>()).WithContext(where));
      ListFor(cluster, role).push_back(address.get<std::string>());
    }
  }
  if (cluster.chief.size() != 1) {
    return Status::InvalidArgument("TF_CONFIG cluster.chief must have exactly one address, has " +
                                   std::to_string(cluster.chief.size()));
  }
  return cluster;
}

StatusOr<TaskId> ParseTfTask(const nlohmann::json& json) {
  if (!json.is_object() || !json.contains("type") || !json["type"].is_string() ||
      !json.contains("index") || !json["index"].is_number_integer()) {
    return Status::InvalidArgument(
        "TF_CONFIG task must be {\"type\": \"chief|ps|worker\", \"index\": N}, got " + json.dump());
  }
  std::string type = json["type"].get<std::string>();
  std::optional<Role> role = ParseRole(type);
  if (!role) return NoSuchRole("TF_CONFIG task", type);
  int64_t index = json["index"].get<int64_t>();
  if (index < 0 || index > std::numeric_limits<int>::max()) {
    return Status::InvalidArgument("TF_CONFIG task index must be >= 0, got " +
                                   std::to_string(index));
  }
  return TaskId{*role, static_cast<int>(index)};
}

// What TF_CONFIG says; both parts optional.
struct TfConfig {
  std::optional<ClusterConfig> cluster;
  std::optional<TaskId> task;
};

StatusOr<TfConfig> ParseTfConfig(const std::string& text) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(std::string("TF_CONFIG is not valid JSON: ") + e.what());
  }
  if (!json.is_object()) return Status::InvalidArgument("TF_CONFIG must be a JSON object");
  // Other keys ("environment", "rpc_layer") are TensorFlow's own and mean nothing here.
  TfConfig tf;
  if (json.contains("cluster")) {
    TANDEM_ASSIGN_OR_RETURN(tf.cluster, ParseTfCluster(json["cluster"]));
  }
  if (json.contains("task")) {
    TANDEM_ASSIGN_OR_RETURN(tf.task, ParseTfTask(json["task"]));
  }
  return tf;
}

// Picks the task from `--task` and TF_CONFIG; they must agree when both are given.
StatusOr<TaskId> ChooseTask(const std::optional<TaskId>& flag, const std::optional<TaskId>& tf,
                            std::string* task_from) {
  if (flag && tf && !(*flag == *tf)) {
    return Status::InvalidArgument("--task " + flag->ToString() +
                                   " disagrees with TF_CONFIG task " + tf->ToString());
  }
  if (!flag && !tf) {
    return Status::FailedPrecondition(
        "no task given: pass --task TYPE:INDEX or set TF_CONFIG with a \"task\"");
  }
  *task_from = flag && tf ? "--task and TF_CONFIG" : flag ? "--task" : "TF_CONFIG";
  return flag ? *flag : *tf;
}

}  // namespace

std::string TaskId::ToString() const {
  return std::string(RoleName(role)) + ":" + std::to_string(index);
}

StatusOr<TaskId> ParseTaskId(const std::string& text) {
  size_t colon = text.find(':');
  if (colon == std::string::npos) {
    return Status::InvalidArgument("task \"" + text + "\": expected TYPE:INDEX, e.g. worker:0");
  }
  std::string type = text.substr(0, colon);
  std::optional<Role> role = ParseRole(type);
  if (!role) return NoSuchRole("task \"" + text + "\"", type);
  std::string_view digits = std::string_view(text).substr(colon + 1);
  int index = -1;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || index < 0) {
    return Status::InvalidArgument("task \"" + text + "\": index must be an integer >= 0");
  }
  if (*role == Role::kChief && index != 0) {
    return Status::InvalidArgument("task \"" + text + "\": there is one chief, chief:0");
  }
  return TaskId{*role, index};
}

StatusOr<ResolvedTask> ResolveTask(const std::optional<std::string>& task_flag,
                                   const std::optional<std::string>& tf_config,
                                   const std::string& config_path, JobConfig* job) {
  std::optional<TaskId> flag_task;
  if (task_flag) {
    TANDEM_ASSIGN_OR_RETURN(flag_task, ParseTaskId(*task_flag));
  }
  TfConfig tf;
  if (tf_config) {
    TANDEM_ASSIGN_OR_RETURN(tf, ParseTfConfig(*tf_config));
  }
  ResolvedTask resolved;
  TANDEM_ASSIGN_OR_RETURN(resolved.task, ChooseTask(flag_task, tf.task, &resolved.task_from));
  // TensorFlow's precedence: the environment describes the actual deployment.
  ClusterConfig cluster = tf.cluster ? *tf.cluster : job->cluster;
  resolved.cluster_from = tf.cluster ? "TF_CONFIG" : "config " + config_path;
  const std::vector<std::string>& addresses = ListFor(cluster, resolved.task.role);
  if (static_cast<size_t>(resolved.task.index) >= addresses.size()) {
    return Status::InvalidArgument("task " + resolved.task.ToString() + " is out of range: the " +
                                   "cluster (from " + resolved.cluster_from + ") has " +
                                   std::to_string(addresses.size()) + " " +
                                   std::string(RoleName(resolved.task.role)) + " address(es)");
  }
  resolved.address = addresses[resolved.task.index];
  job->cluster = std::move(cluster);  // only once everything is valid
  return resolved;
}

BindAddress BindAddressFor(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return {address, ""};
  const std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  in_addr ipv4{};
  // IPv6 comes in brackets; "*" is ZeroMQ's every interface; a network interface by its name.
  if (host.empty() || host.front() == '[' || host == "*" ||
      ::inet_pton(AF_INET, host.c_str(), &ipv4) == 1 || ::if_nametoindex(host.c_str()) != 0) {
    return {address, ""};
  }
  if (host == "localhost") return {"127.0.0.1:" + port, host};
  if (std::string local = LocalAddressOf(host); !local.empty()) return {local + ":" + port, host};
  return {"0.0.0.0:" + port, host, /*every_interface=*/true};
}

namespace {

// Linux's lo answers all of 127.0.0.0/8 (Debian names the host 127.0.1.1 in /etc/hosts).
bool IsLocal(in_addr a, const ifaddrs* interfaces) {
  if ((ntohl(a.s_addr) >> 24) == 127) return true;
  for (const ifaddrs* i = interfaces; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET &&
        reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == a.s_addr)
      return true;
  }
  return false;
}

}  // namespace

std::string LocalAddressOf(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return "";
  ifaddrs* interfaces = nullptr;
  if (::getifaddrs(&interfaces) != 0) interfaces = nullptr;
  std::string local;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const in_addr addr = reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr;
    char text[INET_ADDRSTRLEN];
    if (IsLocal(addr, interfaces) && ::inet_ntop(AF_INET, &addr, text, sizeof text) != nullptr) {
      local = text;
      break;
    }
  }
  if (interfaces != nullptr) ::freeifaddrs(interfaces);
  ::freeaddrinfo(found);
  return local;
}

}  // namespace tandem::config
