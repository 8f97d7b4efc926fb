// `tandem local`: runs a whole job on this machine. Starts the chief, then N PS shards and M
// workers as child processes on 127.0.0.1 (every port bound as 0 and read back; TF_CONFIG
// removed from their environment), writes output.dir/cluster.json, supervises them (restarts a
// child that crashes, like systemd Restart=on-failure; kills and restarts one the chief declares
// lost), shows the chief's view as a live progress line, and prints the final metrics. SIGTERM
// or Ctrl-C asks the chief to stop the job, and every child is waited for.
#pragma once

#include <string>
#include <vector>

namespace tandem::cli {

struct LocalArgs {
  std::string config_path;
  std::vector<std::string> sets;
  int num_ps = 1;
  int num_workers = 1;
  int start_timeout_s = 30;
  int max_restarts = 3;  // per child, like systemd's StartLimitBurst
  // Whole-job restarts from the last committed checkpoint after a process failure failed the
  // job (a global rollback).
  int max_rollbacks = 2;
  std::string log_level = "info";
  // Seconds between progress lines when stdout is not a terminal.
  int plain_progress_every_s = 10;
  // Every process in a network namespace of its own on one bridge (cli/netns.h), at
  // 198.19.N.(k+1) with N from the pid of `local`: real links to cut. Needs root.
  bool netns = false;
};

int RunLocal(const LocalArgs& args);

}  // namespace tandem::cli
