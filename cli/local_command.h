// `tandem local`: starts a chief, N PS shards and M workers as child processes on 127.0.0.1
// (every port bound as 0 and read back), writes output.dir/cluster.json, checks that each
// answers, and then either stops them (default, until training lands) or supervises them until
// SIGTERM/SIGINT (`--hold`), restarting a child that crashes (Restart=on-failure).
#pragma once

#include <string>
#include <vector>

namespace tandem::cli {

struct LocalArgs {
  std::string config_path;
  std::vector<std::string> sets;
  int num_ps = 1;
  int num_workers = 1;
  bool hold = false;
  int start_timeout_s = 30;
  std::string log_level = "info";
};

int RunLocal(const LocalArgs& args);

}  // namespace tandem::cli
