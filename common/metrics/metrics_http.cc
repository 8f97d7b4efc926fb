#include "common/metrics/metrics_http.h"

#include <httplib.h>

namespace tandem::metrics {

StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(const std::string& host,
                                                                      int port,
                                                                      const Registry* registry) {
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer());
  s->server_ = std::make_unique<httplib::Server>();
  s->server_->new_task_queue = [] { return new httplib::ThreadPool(1); };
  s->server_->Get("/metrics", [registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry->Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  const int bound = port == 0 ? s->server_->bind_to_any_port(host)
                              : (s->server_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0)
    return Status::Unavailable("metrics: cannot bind " + host + ":" + std::to_string(port));
  s->port_ = bound;
  httplib::Server* server = s->server_.get();
  s->thread_ = std::thread([server] { server->listen_after_bind(); });
  return s;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace tandem::metrics
