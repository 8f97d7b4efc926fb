// Runs one of the three daemons (chief, ps, worker): config and task first (exit 3 before any
// port is bound), then the RPC server, then wait for SIGTERM/SIGINT and stop cleanly.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/config/cluster_spec.h"

namespace tandem::cli {

struct DaemonArgs {
  config::Role role = config::Role::kWorker;
  std::string config_path;
  std::vector<std::string> sets;    // --set key=value
  std::optional<std::string> task;  // --task TYPE:INDEX
  std::string job_id;               // --job-id HEX; empty: checkpoint.dir/job_id
  uint64_t incarnation = 0;         // --incarnation: the last one the chief issued (0: none)
  std::string ready_file;           // --ready-file: JSON {address, pid, ...} written after bind
  std::string log_level = "info";
  bool new_run = false;  // --new-run (chief): every process was started afresh; see ChiefService
};

// Returns the process exit status (PROTOCOLS §12). `tf_config` is TF_CONFIG's value, if set.
int RunDaemon(const DaemonArgs& args, const std::optional<std::string>& tf_config);

// Writes `text` to `path` atomically (tmp + rename).
bool WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace tandem::cli
