// `tandem serve`: flags in, serve/serve_main.h's process started, stopped on SIGTERM/SIGINT
// after the requests in flight are answered.
#pragma once

#include <string>

#include "serve/serve_main.h"

namespace tandem::cli {

struct ServeArgs {
  serve::ServeOptions options;
  std::string unknown = "initial";
  double cache_mb = 256;
  double max_body_mb = 32;
  std::string token_file;  // the bearer token, read from a file (not the command line)
  std::string log_level = "info";
};

// Exit 0 after a stop signal; 2 for bad flags; 3 for a bundle that cannot be served (named);
// 1 when the port cannot be bound.
int RunServe(ServeArgs args);

}  // namespace tandem::cli
