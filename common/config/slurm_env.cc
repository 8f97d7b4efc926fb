// A daemon's task and cluster from a Slurm heterogeneous job (slurm_env.h).
#include "common/config/slurm_env.h"

#include <charconv>
#include <cstdint>
#include <cstdlib>

namespace tandem::config {
namespace {

constexpr size_t kMaxHosts = 1'000'000;
constexpr int kComponents = 3;  // 0 chief, 1 ps, 2 worker

int ComponentOf(Role role) {
  switch (role) {
    case Role::kChief:
      return 0;
    case Role::kPs:
      return 1;
    case Role::kWorker:
      break;
  }
  return 2;
}

constexpr Role kComponentRoles[kComponents] = {Role::kChief, Role::kPs, Role::kWorker};

std::optional<uint64_t> ParseDigits(std::string_view digits) {
  if (digits.empty()) return std::nullopt;
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return value;
}

std::string Padded(uint64_t value, size_t width) {
  std::string text = std::to_string(value);
  if (text.size() < width) text.insert(0, width - text.size(), '0');
  return text;
}

// The names one bracket stands for: "01-03,07" -> 01 02 03 07.
Status ExpandRange(std::string_view body, const std::string& hostlist,
                   std::vector<std::string>* out) {
  if (body.empty()) return Status::InvalidArgument("host list \"" + hostlist + "\": empty []");
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    if (comma == std::string_view::npos) comma = body.size();
    std::string_view item = body.substr(start, comma - start);
    size_t dash = item.find('-');
    std::string_view lo_text = item.substr(0, dash);
    std::string_view hi_text = dash == std::string_view::npos ? lo_text : item.substr(dash + 1);
    std::optional<uint64_t> lo = ParseDigits(lo_text);
    std::optional<uint64_t> hi = ParseDigits(hi_text);
    if (!lo || !hi || *hi < *lo) {
      return Status::InvalidArgument("host list \"" + hostlist + "\": bad range \"" +
                                     std::string(item) +
                                     "\" (expected N or LOW-HIGH, LOW <= HIGH)");
    }
    if (*hi - *lo >= kMaxHosts || out->size() + (*hi - *lo) >= kMaxHosts) {
      return Status::InvalidArgument("host list \"" + hostlist + "\" names more than " +
                                     std::to_string(kMaxHosts) + " hosts");
    }
    // Counted from 0, so a range ending at UINT64_MAX cannot wrap around and never end.
    for (uint64_t n = 0; n <= *hi - *lo; ++n) out->push_back(Padded(*lo + n, lo_text.size()));
    start = comma + 1;
  }
  return Status::Ok();
}

// One comma-free host expression: literal text and brackets, e.g. "a[1-2]b[3-4]".
Status ExpandHostExpression(std::string_view expr, const std::string& hostlist,
                            std::vector<std::string>* out) {
  std::vector<std::string> names = {""};
  size_t pos = 0;
  while (pos < expr.size()) {
    size_t open = expr.find('[', pos);
    if (open == std::string_view::npos) {
      if (expr.find(']', pos) != std::string_view::npos) {
        return Status::InvalidArgument("host list \"" + hostlist + "\": unbalanced ']'");
      }
      if (pos > 0) {
        return Status::InvalidArgument("host list \"" + hostlist + "\": text \"" +
                                       std::string(expr.substr(pos)) +
                                       "\" after the last ']' (as scontrol, not a host name)");
      }
      for (std::string& name : names) name += expr.substr(pos);
      break;
    }
    std::string_view prefix = expr.substr(pos, open - pos);
    if (prefix.find(']') != std::string_view::npos) {
      return Status::InvalidArgument("host list \"" + hostlist + "\": unbalanced ']'");
    }
    size_t close = expr.find(']', open);
    if (close == std::string_view::npos) {
      return Status::InvalidArgument("host list \"" + hostlist + "\": '[' without ']'");
    }
    std::string_view body = expr.substr(open + 1, close - open - 1);
    if (body.find('[') != std::string_view::npos) {
      return Status::InvalidArgument("host list \"" + hostlist + "\": nested '['");
    }
    std::vector<std::string> values;
    TANDEM_RETURN_IF_ERROR(ExpandRange(body, hostlist, &values));
    if (names.size() * values.size() + out->size() > kMaxHosts) {
      return Status::InvalidArgument("host list \"" + hostlist + "\" names more than " +
                                     std::to_string(kMaxHosts) + " hosts");
    }
    std::vector<std::string> next;
    next.reserve(names.size() * values.size());
    for (const std::string& name : names) {
      for (const std::string& value : values) next.push_back(name + std::string(prefix) + value);
    }
    names = std::move(next);
    pos = close + 1;
  }
  for (std::string& name : names) {
    if (name.empty()) return Status::InvalidArgument("host list \"" + hostlist + "\": empty name");
    out->push_back(std::move(name));
  }
  return Status::Ok();
}

std::optional<std::string> Get(const EnvLookup& env, const std::string& name) { return env(name); }

StatusOr<std::string> Require(const EnvLookup& env, const std::string& name,
                              const std::string& why) {
  std::optional<std::string> value = env(name);
  if (!value || value->empty()) {
    return Status::InvalidArgument(name + " is " + (value ? "empty" : "unset") + ": " + why);
  }
  return *value;
}

StatusOr<int64_t> RequireInt(const EnvLookup& env, const std::string& name, int64_t min,
                             int64_t max, const std::string& why) {
  TANDEM_ASSIGN_OR_RETURN(std::string text, Require(env, name, why));
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min || value > max) {
    return Status::InvalidArgument(name + "=\"" + text + "\": expected an integer in " +
                                   std::to_string(min) + ".." + std::to_string(max));
  }
  return value;
}

std::string HostPort(const std::string& host, int port) {
  // An IPv6 literal as a node name goes in brackets.
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

// One component: the node of each of its tasks, in task order (block distribution).
struct Component {
  std::vector<std::string> nodes;       // its node list, expanded
  std::vector<std::string> task_nodes;  // task i runs on task_nodes[i]
};

StatusOr<Component> ReadComponent(const EnvLookup& env, int c) {
  const std::string suffix = "_HET_GROUP_" + std::to_string(c);
  const std::string why = "component " + std::to_string(c) + " (" +
                          std::string(RoleName(kComponentRoles[c])) +
                          ") of tandem's heterogeneous job (srun passes it to every step)";
  Component component;
  const std::string nodes_var = "SLURM_JOB_NODELIST" + suffix;
  TANDEM_ASSIGN_OR_RETURN(std::string nodelist, Require(env, nodes_var, why));
  auto nodes = ExpandHostlist(nodelist);
  if (!nodes.ok()) return nodes.status().WithContext(nodes_var);
  component.nodes = std::move(*nodes);
  if (component.nodes.empty()) return Status::InvalidArgument(nodes_var + " names no node");
  const std::string tasks_var = "SLURM_TASKS_PER_NODE" + suffix;
  TANDEM_ASSIGN_OR_RETURN(std::string tasks_text, Require(env, tasks_var, why));
  auto tasks = ExpandTasksPerNode(tasks_text);
  if (!tasks.ok()) return tasks.status().WithContext(tasks_var);
  if (tasks->size() != component.nodes.size()) {
    return Status::InvalidArgument(tasks_var + "=\"" + tasks_text + "\" gives " +
                                   std::to_string(tasks->size()) + " node(s), " + nodes_var +
                                   "=\"" + nodelist + "\" names " +
                                   std::to_string(component.nodes.size()));
  }
  for (size_t n = 0; n < tasks->size(); ++n) {
    for (int t = 0; t < (*tasks)[n]; ++t) {
      if (component.task_nodes.size() >= kMaxHosts) {
        return Status::InvalidArgument(tasks_var + "=\"" + tasks_text + "\": too many tasks");
      }
      component.task_nodes.push_back(component.nodes[n]);
    }
  }
  if (component.task_nodes.empty()) {
    return Status::InvalidArgument(tasks_var + "=\"" + tasks_text + "\" gives no task");
  }
  // SLURM_NTASKS_HET_GROUP_C, when set, must agree.
  const std::string ntasks_var = "SLURM_NTASKS" + suffix;
  if (std::optional<std::string> ntasks = Get(env, ntasks_var)) {
    if (*ntasks != std::to_string(component.task_nodes.size())) {
      return Status::InvalidArgument(ntasks_var + "=\"" + *ntasks + "\" disagrees with " +
                                     tasks_var + "=\"" + tasks_text + "\" (" +
                                     std::to_string(component.task_nodes.size()) + " tasks)");
    }
  }
  return component;
}

}  // namespace

EnvLookup ProcessEnvironment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    return value ? std::optional<std::string>(value) : std::nullopt;
  };
}

StatusOr<std::vector<std::string>> ExpandHostlist(const std::string& hostlist) {
  std::vector<std::string> hosts;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= hostlist.size(); ++i) {
    const char ch = i < hostlist.size() ? hostlist[i] : ',';
    if (ch == '[') {
      if (++depth > 1) return Status::InvalidArgument("host list \"" + hostlist + "\": nested '['");
    } else if (ch == ']') {
      if (--depth < 0)
        return Status::InvalidArgument("host list \"" + hostlist + "\": unbalanced ']'");
    } else if (ch == ',' && depth == 0) {
      std::string_view expr = std::string_view(hostlist).substr(start, i - start);
      // "n1,,n2" is n1 n2, as scontrol reads it.
      if (!expr.empty()) TANDEM_RETURN_IF_ERROR(ExpandHostExpression(expr, hostlist, &hosts));
      start = i + 1;
    } else if (ch == ' ' || ch == '\t' || ch == '\n') {
      return Status::InvalidArgument("host list \"" + hostlist + "\": whitespace in a host list");
    }
  }
  if (depth != 0) return Status::InvalidArgument("host list \"" + hostlist + "\": '[' without ']'");
  return hosts;
}

StatusOr<std::vector<int>> ExpandTasksPerNode(const std::string& text) {
  std::vector<int> counts;
  if (text.empty()) return Status::InvalidArgument("tasks per node: empty");
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string_view item = std::string_view(text).substr(start, comma - start);
    std::string_view count_text = item;
    uint64_t repeat = 1;
    if (size_t paren = item.find('('); paren != std::string_view::npos) {
      count_text = item.substr(0, paren);
      std::string_view rest = item.substr(paren);
      std::optional<uint64_t> r;
      if (rest.size() > 3 && rest.substr(0, 2) == "(x" && rest.back() == ')') {
        r = ParseDigits(rest.substr(2, rest.size() - 3));
      }
      if (!r || *r == 0) {
        return Status::InvalidArgument("tasks per node \"" + text + "\": bad item \"" +
                                       std::string(item) + "\" (expected N or N(xR))");
      }
      repeat = *r;
    }
    std::optional<uint64_t> count = ParseDigits(count_text);
    if (!count || *count > 1'000'000) {
      return Status::InvalidArgument("tasks per node \"" + text + "\": bad item \"" +
                                     std::string(item) + "\" (expected N or N(xR))");
    }
    if (repeat > kMaxHosts || counts.size() + repeat > kMaxHosts) {
      return Status::InvalidArgument("tasks per node \"" + text + "\": more than " +
                                     std::to_string(kMaxHosts) + " nodes");
    }
    counts.insert(counts.end(), repeat, static_cast<int>(*count));
    start = comma + 1;
  }
  return counts;
}

bool InSlurmHetJob(const EnvLookup& env) { return env("SLURM_HET_SIZE").has_value(); }

StatusOr<ResolvedTask> ResolveSlurmTask(Role role, const EnvLookup& env, JobConfig* job) {
  const std::string layout =
      "tandem's Slurm job has 3 components: 0 chief, 1 ps, 2 worker (scripts/slurm/tandem.sbatch)";
  TANDEM_ASSIGN_OR_RETURN(int64_t het_size, RequireInt(env, "SLURM_HET_SIZE", 1, 1000, layout));
  if (het_size != kComponents) {
    return Status::InvalidArgument("SLURM_HET_SIZE=" + std::to_string(het_size) + ": " + layout);
  }
  std::vector<Component> components;
  for (int c = 0; c < kComponents; ++c) {
    TANDEM_ASSIGN_OR_RETURN(Component component, ReadComponent(env, c));
    components.push_back(std::move(component));
  }
  if (components[0].task_nodes.size() != 1) {
    return Status::InvalidArgument(
        "SLURM_TASKS_PER_NODE_HET_GROUP_0 gives component 0 (the chief) " +
        std::to_string(components[0].task_nodes.size()) + " tasks: there is one chief");
  }
  const int c = ComponentOf(role);
  const Component& mine = components[c];
  const std::string group = std::to_string(c);
  const std::string one_step = "run `tandem " + std::string(RoleName(role)) +
                               "` as one step over all of component " + group +
                               "'s tasks: " + "srun --het-group=" + group;
  TANDEM_ASSIGN_OR_RETURN(int64_t step_tasks,
                          RequireInt(env, "SLURM_STEP_NUM_TASKS", 1, 100'000'000, one_step));
  if (static_cast<size_t>(step_tasks) != mine.task_nodes.size()) {
    return Status::InvalidArgument("SLURM_STEP_NUM_TASKS=" + std::to_string(step_tasks) +
                                   ", but component " + group + " (" + std::string(RoleName(role)) +
                                   ") has " + std::to_string(mine.task_nodes.size()) +
                                   " task(s): " + one_step);
  }
  TANDEM_ASSIGN_OR_RETURN(int64_t procid,
                          RequireInt(env, "SLURM_PROCID", 0, step_tasks - 1, one_step));
  const std::string& node = mine.task_nodes[procid];
  if (std::optional<std::string> nodename = Get(env, "SLURMD_NODENAME")) {
    if (*nodename != node) {
      return Status::InvalidArgument(
          "SLURMD_NODENAME=" + *nodename + ", but block distribution puts task " +
          std::to_string(procid) + " of component " + group + " on " + node +
          ": start the step with the default distribution (srun -m block)");
    }
  }
  const int64_t tasks =
      static_cast<int64_t>(components[1].task_nodes.size() + components[2].task_nodes.size());
  TANDEM_ASSIGN_OR_RETURN(
      int64_t base, Get(env, "TANDEM_SLURM_BASE_PORT")
                        ? RequireInt(env, "TANDEM_SLURM_BASE_PORT", 1, 65535 - tasks,
                                     "the chief's port; ps:i listens at +1+i, worker:r at +1+N+r")
                        : StatusOr<int64_t>(kDefaultSlurmBasePort));
  if (base + tasks > 65535) {
    return Status::InvalidArgument("TANDEM_SLURM_BASE_PORT unset: the default " +
                                   std::to_string(kDefaultSlurmBasePort) + " leaves no port for " +
                                   std::to_string(tasks) + " tasks; set it lower");
  }
  ClusterConfig cluster;
  int port = static_cast<int>(base);
  cluster.chief.push_back(HostPort(components[0].task_nodes[0], port++));
  for (const std::string& host : components[1].task_nodes) {
    cluster.ps.push_back(HostPort(host, port++));
  }
  for (const std::string& host : components[2].task_nodes) {
    cluster.workers.push_back(HostPort(host, port++));
  }
  for (const auto* list : {&cluster.chief, &cluster.ps, &cluster.workers}) {
    for (const std::string& address : *list) {
      TANDEM_RETURN_IF_ERROR(ValidateAddress(address).WithContext("Slurm node name in " + address));
    }
  }
  ResolvedTask resolved;
  resolved.task = TaskId{role, static_cast<int>(procid)};
  resolved.address = (role == Role::kChief ? cluster.chief
                      : role == Role::kPs  ? cluster.ps
                                           : cluster.workers)[procid];
  const std::optional<std::string> job_id = Get(env, "SLURM_JOB_ID");
  resolved.cluster_from = "Slurm heterogeneous job" + (job_id ? " " + *job_id : std::string()) +
                          " (1 chief, " + std::to_string(components[1].task_nodes.size()) +
                          " ps, " + std::to_string(components[2].task_nodes.size()) +
                          " workers; ports from " + std::to_string(base) + ")";
  resolved.task_from =
      "Slurm (component " + group + ", SLURM_PROCID " + std::to_string(procid) + ")";
  job->cluster = std::move(cluster);
  return resolved;
}

StatusOr<ResolvedTask> ResolveDaemonTask(Role role, const std::optional<std::string>& task_flag,
                                         const std::optional<std::string>& tf_config,
                                         const EnvLookup& env, const std::string& config_path,
                                         JobConfig* job) {
  if (task_flag || tf_config) return ResolveTask(task_flag, tf_config, config_path, job);
  if (InSlurmHetJob(env)) return ResolveSlurmTask(role, env, job);
  std::string message =
      "no task given: pass --task TYPE:INDEX, set TF_CONFIG with a \"task\", or run in a Slurm "
      "heterogeneous job (scripts/slurm/tandem.sbatch)";
  if (env("SLURM_JOB_ID")) {
    message += "; this Slurm job is not heterogeneous (no SLURM_HET_SIZE)";
  }
  return Status::FailedPrecondition(message);
}

}  // namespace tandem::config
