#include "serve/http_api.h"

#include <httplib.h>
#include <openssl/crypto.h>

#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "serve/request.h"

namespace tandem::serve {

namespace {

// The reason of the refusal being answered on this thread, for the logger that counts it.
thread_local const char* t_reason = nullptr;

void Refuse(httplib::Response& res, int status, const char* reason, const std::string& message) {
  t_reason = reason;
  res.status = status;
  res.set_content(EncodeError(message), "application/json");
}

// Which endpoint a path is, as the requests counter labels it.
const char* Endpoint(const std::string& path) {
  if (path == "/metrics") return "metrics";
  if (path == "/ready") return "ready";
  if (path.rfind("/v1/models/", 0) == 0) {
    if (path.find(":predict") != std::string::npos) return "predict";
    if (path.size() >= 9 && path.compare(path.size() - 9, 9, "/metadata") == 0) return "metadata";
    return "status";
  }
  return "other";
}

bool TokenMatches(const std::string& header, const std::string& token) {
  const std::string want = "Bearer " + token;
  // Constant time in the token's length: a mismatch position leaks nothing.
  return header.size() == want.size() &&
         CRYPTO_memcmp(header.data(), want.data(), want.size()) == 0;
}

}  // namespace

struct HttpApi::Handlers {
  HttpOptions options;
  const ServedModel* served = nullptr;
  metrics::Registry* registry = nullptr;
  std::atomic<int> in_flight{0};
  metrics::Histogram* latency = nullptr;
  metrics::Histogram* batch = nullptr;
  metrics::Counter* unknown_ids = nullptr;
  metrics::Counter* instances = nullptr;

  // The version a request for `name` (and `version`, when given) is answered by, or null after
  // answering the refusal.
  std::shared_ptr<const ModelVersion> Resolve(const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    if (name != options.model_name) {
      Refuse(res, 404, "model_not_found", "Servable not found for request: Latest(" + name + ")");
      return nullptr;
    }
    auto v = served->current();
    if (v == nullptr) {
      Refuse(res, 503, "not_ready", "no model version is loaded yet");
      return nullptr;
    }
    const std::string version = req.matches.size() > 2 ? std::string(req.matches[2]) : "";
    if (!version.empty() && version != std::to_string(v->step())) {
      Refuse(res, 404, "version_not_found",
             "version " + version + " of " + name + " is not served (serving " +
                 std::to_string(v->step()) + ")");
      return nullptr;
    }
    return v;
  }

  void Predict(const httplib::Request& req, httplib::Response& res, const std::string& body) {
    const auto start = std::chrono::steady_clock::now();
    struct Leave {
      std::atomic<int>* n;
      ~Leave() { n->fetch_sub(1); }
    };
    if (in_flight.fetch_add(1) >= options.max_concurrent) {
      in_flight.fetch_sub(1);
      Refuse(res, 503, "overloaded",
             "more than " + std::to_string(options.max_concurrent) + " requests in flight");
      return;
    }
    Leave leave{&in_flight};
    auto v = Resolve(req, res);
    if (v == nullptr) return;
    RequestError error = RequestError::kNone;
    auto parsed =
        ParsePredictRequest(body, v->schema(), options.max_instances, &error, v->sparse_names());
    if (!parsed.ok()) {
      Refuse(res, RequestErrorHttpStatus(error), RequestErrorName(error),
             parsed.status().message());
      return;
    }
    std::vector<float> probs;
    int64_t unknown = 0;
    tandem::Status s = v->Score(parsed->samples, &probs, &unknown);
    if (!s.ok()) {
      TLOG_ERROR("serve: scoring failed: {}", s.ToString());
      Refuse(res, 500, "internal", s.ToString());
      return;
    }
    res.set_content(EncodePredictResponse(probs, v->tasks(), v->step(), parsed->columnar),
                    "application/json");
    unknown_ids->Add(static_cast<uint64_t>(unknown));
    instances->Add(parsed->samples.size());
    batch->Observe(static_cast<double>(parsed->samples.size()));
    latency->Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }

  void ModelStatus(const httplib::Request& req, httplib::Response& res) {
    auto v = Resolve(req, res);
    if (v == nullptr) return;
    const nlohmann::json body = {{"model_version_status",
                                  {{{"version", std::to_string(v->step())},
                                    {"state", "AVAILABLE"},
                                    {"status", {{"error_code", "OK"}, {"error_message", ""}}}}}}};
    res.set_content(body.dump(), "application/json");
  }

  void Metadata(const httplib::Request& req, httplib::Response& res) {
    auto v = Resolve(req, res);
    if (v == nullptr) return;
    nlohmann::json dense = nlohmann::json::array(), categorical = nlohmann::json::array();
    for (int i = 1; i <= v->schema().num_dense; ++i) dense.push_back("I" + std::to_string(i));
    for (int i = 1; i <= v->schema().num_categorical; ++i) {
      categorical.push_back(v->sparse_names().empty() ? "C" + std::to_string(i)
                                                      : v->sparse_names()[i - 1]);
    }
    const nlohmann::json body = {
        {"model_spec", {{"name", options.model_name}, {"version", std::to_string(v->step())}}},
        {"metadata",
         {{"dense_features", dense},
          {"categorical_features", categorical},
          {"tasks", v->job().data.labels},
          {"max_instances", options.max_instances}}}};
    res.set_content(body.dump(), "application/json");
  }

  void Count(const httplib::Request& req, const httplib::Response& res) {
    registry
        ->counter("tandem_serve_requests_total", "HTTP requests answered, by endpoint and status.",
                  {{"endpoint", Endpoint(req.path)}, {"code", std::to_string(res.status)}})
        ->Add();
    if (res.status >= 400) {
      const char* reason = t_reason;
      if (reason == nullptr)
        reason = res.status == 413   ? "body_too_large"
                 : res.status == 404 ? "not_found"
                 : res.status == 400 ? "bad_http"
                                     : "other";
      registry
          ->counter("tandem_serve_errors_total", "Requests refused, by reason.",
                    {{"reason", reason}})
          ->Add();
    }
    t_reason = nullptr;
  }
};

StatusOr<std::unique_ptr<HttpApi>> HttpApi::Start(const HttpOptions& options,
                                                  const ServedModel* served,
                                                  metrics::Registry* registry) {
  std::unique_ptr<HttpApi> api(new HttpApi());
  api->handlers_ = std::make_unique<Handlers>();
  Handlers* h = api->handlers_.get();
  h->options = options;
  h->served = served;
  h->registry = registry;
  h->latency = registry->histogram("tandem_serve_request_seconds",
                                   "Predict latency, from the request read to the answer built.",
                                   {}, metrics::LatencyBuckets());
  h->batch = registry->histogram("tandem_serve_batch_size", "Instances per predict request.", {},
                                 {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096});
  h->unknown_ids = registry->counter("tandem_serve_unknown_ids_total",
                                     "Lookups of ids the served model has no row for.");
  h->instances = registry->counter("tandem_serve_instances_total", "Instances scored.");
  registry->AddCollector([h](std::vector<metrics::Registry::Sample>* out) {
    auto v = h->served->current();
    out->push_back({"tandem_serve_model_version",
                    "The training step of the served version.",
                    "gauge",
                    {},
                    v ? static_cast<double>(v->step()) : -1.0});
    out->push_back({"tandem_serve_in_flight",
                    "Predict requests being answered.",
                    "gauge",
                    {},
                    static_cast<double>(h->in_flight.load())});
  });
  if (options.tls_cert.empty() != options.tls_key.empty())
    return Status::InvalidArgument("--tls-cert and --tls-key go together");
  if (!options.tls_cert.empty()) {
    api->server_ =
        std::make_unique<httplib::SSLServer>(options.tls_cert.c_str(), options.tls_key.c_str());
    if (!api->server_->is_valid())
      return Status::InvalidArgument("cannot load the TLS certificate " + options.tls_cert +
                                     " or key " + options.tls_key);
  } else {
    api->server_ = std::make_unique<httplib::Server>();
  }
  httplib::Server& s = *api->server_;
  // Enough threads that a request beyond the bound is still read and answered 503 at once,
  // while max_concurrent ones are scored.
  const int threads = 2 * options.max_concurrent + 4;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  // Without it every answer waits for the client's delayed ACK (~40 ms): httplib leaves Nagle on.
  s.set_tcp_nodelay(true);
  s.set_payload_max_length(options.max_body_bytes);
  s.set_read_timeout(options.read_timeout_seconds, 0);
  s.set_write_timeout(options.read_timeout_seconds, 0);
  s.set_keep_alive_timeout(options.read_timeout_seconds);
  s.set_pre_routing_handler([h](const httplib::Request& req, httplib::Response& res) {
    t_reason = nullptr;
    if (h->options.token.empty() || req.path == "/ready")
      return httplib::Server::HandlerResponse::Unhandled;
    if (TokenMatches(req.get_header_value("Authorization"), h->options.token))
      return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("WWW-Authenticate", "Bearer");
    Refuse(res, 401, "unauthorized", "a bearer token is required");
    return httplib::Server::HandlerResponse::Handled;
  });
  s.set_logger(
      [h](const httplib::Request& req, const httplib::Response& res) { h->Count(req, res); });
  s.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (res.body.empty()) {
          const std::string text = res.status == 404   ? "no such endpoint"
                                   : res.status == 413 ? "request body too large"
                                                       : "HTTP " + std::to_string(res.status);
          res.set_content(EncodeError(text), "application/json");
        }
        return httplib::Server::HandlerResponse::Handled;
      }));
  // Read through a content reader: the plain handler would parse a body sent as a form (what
  // `curl -d` says it sends, as TF Serving's own examples do) and refuse one over 8 KiB.
  s.Post(
      R"(/v1/models/([^/:]+)(?:/versions/(\d+))?:predict)",
      [h](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& read) {
        // A declared length over the bound is refused before a byte of the body is read;
        // a chunked body when it crosses the bound. The unread rest makes the connection
        // useless: it is closed.
        const uint64_t max = h->options.max_body_bytes;
        bool too_large = req.get_header_value<uint64_t>("Content-Length") > max;
        std::string body;
        if (!too_large)
          read([&](const char* data, size_t n) {
            too_large = body.size() + n > max;
            if (!too_large) body.append(data, n);
            return !too_large;
          });
        if (too_large) {
          res.set_header("Connection", "close");
          Refuse(res, 413, "body_too_large",
                 "the request body exceeds " + std::to_string(max) + " bytes");
          return;
        }
        h->Predict(req, res, body);
      });
  s.Get(R"(/v1/models/([^/:]+)(?:/versions/(\d+))?)",
        [h](const httplib::Request& req, httplib::Response& res) { h->ModelStatus(req, res); });
  s.Get(R"(/v1/models/([^/:]+)(?:/versions/(\d+))?/metadata)",
        [h](const httplib::Request& req, httplib::Response& res) { h->Metadata(req, res); });
  s.Get("/metrics", [registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry->Render(), "text/plain; version=0.0.4");
  });
  s.Get("/ready", [h](const httplib::Request&, httplib::Response& res) {
    auto v = h->served->current();
    if (v == nullptr) {
      Refuse(res, 503, "not_ready", "no model version is loaded yet");
      return;
    }
    res.set_content("ready: version " + std::to_string(v->step()) + "\n", "text/plain");
  });
  const int bound = options.port == 0
                        ? s.bind_to_any_port(options.host)
                        : (s.bind_to_port(options.host, options.port) ? options.port : -1);
  if (bound < 0)
    return Status::Unavailable("serve: cannot bind " + options.host + ":" +
                               std::to_string(options.port));
  api->port_ = bound;
  httplib::Server* server = api->server_.get();
  api->thread_ = std::thread([server] { server->listen_after_bind(); });
  return api;
}

void HttpApi::Stop() {
  if (server_ == nullptr) return;
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

HttpApi::~HttpApi() { Stop(); }

}  // namespace tandem::serve
