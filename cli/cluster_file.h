// output.dir/cluster.json: every bound address of a local cluster, written by `tandem local`
// and read by `tandem status --dir` (DESIGN §12).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::cli {

struct ClusterMember {
  std::string task;      // "ps:0"
  std::string endpoint;  // "tcp://127.0.0.1:40123"
  int pid = 0;
  // `tandem local --netns`: the member's network namespace and its host's bridge port (what
  // `tandem drill` takes down for a partition); empty otherwise.
  std::string netns, link;
};

struct ClusterFile {
  std::string job_id;  // hex
  std::vector<ClusterMember> members;
  // The job's security.keys (absolute), so that `tandem status --dir` can talk to a protected
  // chief; empty without keys.
  std::string security_keys;
};

Status WriteClusterFile(const std::string& path, const ClusterFile& file);
StatusOr<ClusterFile> ReadClusterFile(const std::string& path);

}  // namespace tandem::cli
