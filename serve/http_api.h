// The HTTP side of `tandem serve` (cpp-httplib, Debian): TF Serving's REST API over the served
// model, Prometheus metrics and a readiness probe.
//
//   POST /v1/models/<name>[/versions/<step>]:predict   request.h's shapes
//   GET  /v1/models/<name>[/versions/<step>]           the served version and its state
//   GET  /v1/models/<name>/metadata                    feature names, tasks, version
//   GET  /metrics                                      Prometheus text format
//   GET  /ready                                        200 once a version is served, else 503
//
// Every refusal is a 4xx/5xx with {"error": reason} and one count in tandem_serve_errors_total
// under its reason. Bodies above max_body_bytes are refused before they are read whole (413),
// clients that stall are cut off after read_timeout_seconds, and predicts beyond
// max_concurrent at once are answered 503 at once rather than queued. With a token, every
// endpoint but /ready wants "Authorization: Bearer <token>" (401); with a certificate and key
// it speaks HTTPS (OpenSSL).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "common/metrics/prometheus.h"
#include "common/status.h"
#include "serve/served_model.h"

namespace httplib {
class Server;
}

namespace tandem::serve {

struct HttpOptions {
  std::string host = "0.0.0.0";
  int port = 8501;  // TF Serving's REST port; 0: any free port
  std::string model_name = "tandem";
  int max_instances = 4096;
  uint64_t max_body_bytes = 32ull << 20;
  int max_concurrent = 8;
  int read_timeout_seconds = 10;
  std::string token;              // empty: no authentication
  std::string tls_cert, tls_key;  // both or neither (PEM files)
};

class HttpApi {
 public:
  // Binds and starts serving on its own threads. `served` and `registry` are not owned and must
  // outlive this. kUnavailable when the address cannot be bound; kInvalidArgument for a TLS
  // certificate or key that cannot be loaded.
  static StatusOr<std::unique_ptr<HttpApi>> Start(const HttpOptions& options,
                                                  const ServedModel* served,
                                                  metrics::Registry* registry);
  ~HttpApi();  // Stop()
  // Stops accepting connections and returns once the requests in flight are answered.
  void Stop();
  int port() const { return port_; }

  HttpApi(const HttpApi&) = delete;
  HttpApi& operator=(const HttpApi&) = delete;

 private:
  struct Handlers;
  HttpApi() = default;

  std::unique_ptr<httplib::Server> server_;
  std::unique_ptr<Handlers> handlers_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace tandem::serve
