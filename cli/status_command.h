// `tandem status`: asks every process of a cluster whether it answers, from the config's
// addresses (--config) or from a local cluster's output.dir/cluster.json (--dir).
#pragma once

#include <string>
#include <vector>

namespace tandem::cli {

struct StatusArgs {
  std::string config_path;
  std::vector<std::string> sets;
  std::string dir;
  std::string job_id;  // overrides the one found in checkpoint.dir or cluster.json
  bool json = false;
  int timeout_ms = 2000;
};

// Exit 0 when every process answers, 1 when some do not, 3 for a bad config, 2 for bad usage.
int RunStatus(const StatusArgs& args);

}  // namespace tandem::cli
