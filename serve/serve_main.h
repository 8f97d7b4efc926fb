// The `tandem serve` process: a served model (a bundle, or a checkpoint directory followed as
// it grows), its HTTP API and its metrics, started and stopped as one. cli/serve_command.cc
// parses the flags and waits for the stop signal.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/metrics/prometheus.h"
#include "common/status.h"
#include "serve/checkpoint_follower.h"
#include "serve/http_api.h"
#include "serve/served_model.h"

namespace tandem::serve {

struct ServeOptions {
  std::string model;                // a bundle directory, or
  std::vector<std::string> deltas;  // with --model: delta bundles applied in order
  std::string follow;               // a checkpoint.dir to follow
  std::string state_dir;            // --follow: where checkpoints are opened; empty: default
  uint64_t cache_bytes = 256ull << 20;
  double poll_seconds = 1.0;
  uint64_t max_delta_rows = 1u << 22;
  bool verify = false;  // --model: check every table file's CRC32C before serving
  VersionOptions version;
  HttpOptions http;
};

class ServeProcess {
 public:
  // Loads --model (or starts following) and starts the HTTP API. Errors: the bundle's
  // (kDataLoss, kInvalidArgument, kNotFound) and the bind's (kUnavailable).
  static StatusOr<std::unique_ptr<ServeProcess>> Start(const ServeOptions& options);
  ~ServeProcess();
  // Stops taking requests, answers the ones in flight, stops following.
  void Stop();

  int port() const { return http_->port(); }
  bool ready() const { return served_.current() != nullptr; }
  const ServedModel& served() const { return served_; }

 private:
  ServeProcess() = default;
  metrics::Registry registry_;
  ServedModel served_;
  std::unique_ptr<CheckpointFollower> follower_;
  std::unique_ptr<HttpApi> http_;
  std::string owned_state_dir_;  // removed at the end
};

}  // namespace tandem::serve
