// The /metrics endpoint of a daemon (metrics.port: -1 off, 0 an ephemeral port): a small HTTP
// server (cpp-httplib, Debian) on its own thread serving a Registry's text exposition.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "common/metrics/prometheus.h"
#include "common/status.h"

namespace httplib {
class Server;
}

namespace tandem::metrics {

class MetricsHttpServer {
 public:
  // Binds host:port (0: any free port) and serves GET /metrics from `registry` (not owned; it
  // must outlive the server). kUnavailable when the port cannot be bound.
  static StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& host, int port,
                                                            const Registry* registry);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }

 private:
  MetricsHttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace tandem::metrics
