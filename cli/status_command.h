// `tandem status`: asks the chief for its view of the job (DESIGN §12): the job's state, step,
// throughput, loss and AUC, the fencing numbers, and every process with its state. The chief is
// found in the config (--config: cluster.chief[0]) or in a local cluster's
// output.dir/cluster.json (--dir).
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
  int timeout_ms = 2000;  // how long the chief has to answer
};

// Exit 0 when the chief answers and every member is up (or the job is done), 1 when the chief
// does not answer or a member is not up, 2 for bad usage, 3 for a bad config (PROTOCOLS §12).
int RunStatus(const StatusArgs& args);

}  // namespace tandem::cli
