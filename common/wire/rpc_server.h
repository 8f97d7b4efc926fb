// RpcServer: a ZeroMQ ROUTER socket served by one I/O thread that validates every request and
// dispatches it to lanes of handler threads (PROTOCOLS §13). A handler answers through a
// Responder, now or later from any thread, so a parked request holds no thread. Pushes and pulls
// live on separate lanes so that parked pulls can never delay a push.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "common/metrics/prometheus.h"
#include "common/status.h"
#include "common/sync.h"
#include "common/wire/curve_keys.h"
#include "common/wire/identity.h"
#include "common/wire/message.h"

namespace tandem::wire {

namespace internal {
class ReplySink;
}
struct ZapDomain;
class ZapRegistration;

// Handler threads of one lane share one bounded queue.
struct LaneOptions {
  std::string name = "default";
  int threads = 2;                        // handler threads, >= 1
  size_t max_queued = 65536;              // requests beyond this are answered OVERLOADED
  uint64_t max_queued_bytes = 256 << 20;  // so are requests beyond this many queued bytes
};

struct ServerOptions {
  std::string bind_endpoint = "tcp://127.0.0.1:0";  // port 0: the bound port is read back
  // When set, endpoint() names this host with the bound port instead of the bound address: a
  // server bound on every interface for a task its cluster names by DNS name.
  std::string advertise_host;
  std::vector<LaneOptions> lanes = {LaneOptions{}};
  DecodeLimits limits;
  int64_t max_frame_bytes = 1ll << 30;  // ZMQ_MAXMSGSIZE: larger frames disconnect the peer
  int hwm = 20000;                      // send/receive high-water marks, in messages
  // CURVE: admit only clients holding these (the cluster's) keys. nullopt: DefaultCurveKeys(),
  // which is nullopt without `security.keys` (no authentication).
  std::optional<CurveKeys> curve;
  // Connections beyond this are refused at their handshake (security.max_connections).
  int64_t max_connections = 4096;
  // Requests of one connection queued, running or parked at once; more are answered OVERLOADED
  // (security.max_in_flight_per_client), so one client cannot take every lane slot.
  int64_t max_in_flight_per_client = 4096;
};

// Answers one request exactly once, from any thread. Move-only. Destroying an unanswered
// Responder answers INTERNAL, so a request never meets silence by accident.
class Responder {
 public:
  Responder(Responder&&) noexcept;
  Responder& operator=(Responder&&) noexcept;
  Responder(const Responder&) = delete;
  ~Responder();

  uint64_t request_id() const { return request_id_; }
  // When the sender stops waiting; time_point::max() without a budget.
  std::chrono::steady_clock::time_point deadline() const { return deadline_; }
  // A reply envelope with the header filled (request id echoed, isReply, code OK).
  OutMessage NewReply() const;
  void Send(OutMessage reply);
  void SendError(ReplyCode code, std::string_view message);
  // Answers STALE/RETRY with the receiver's view so the sender can catch up.
  void SendView(ReplyCode code, std::string_view message, uint64_t applied_step_or_minus1);
  bool answered() const { return sink_ == nullptr; }
  // The client connection the request came on (ZeroMQ's routing id: one per client socket).
  // Empty once answered.
  std::string peer() const {
    return std::string(static_cast<const char*>(routing_id_.data()), routing_id_.size());
  }

 private:
  friend class RpcServer;
  Responder(std::shared_ptr<internal::ReplySink> sink, zmq::message_t routing_id,
            uint64_t request_id, std::chrono::steady_clock::time_point deadline);
  // Drops the request without an answer (its budget ran out in the queue).
  void Abandon();

  std::shared_ptr<internal::ReplySink> sink_;  // shared with the server; null once answered
  zmq::message_t routing_id_;
  uint64_t request_id_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  // SetMetrics: the request's latency, from receipt to the reply, goes here.
  metrics::Histogram* latency_ = nullptr;
  std::chrono::steady_clock::time_point received_at_;
};

// Runs on a lane thread (or the I/O thread for kInlineLane). REQUIRES: answers via `responder`.
using Handler = std::function<void(InMessage& request, Responder responder)>;

struct Rejection {
  ReplyCode code;
  std::string message;
};
// Runs on the I/O thread for every decoded request before dispatch (fencing checks). Returns
// nullopt to admit. Must be cheap and must not block.
using Gate = std::function<std::optional<Rejection>(const InMessage& request)>;

struct ServerStats {
  uint64_t received = 0;  // well-formed requests
  uint64_t replied = 0;
  uint64_t dropped_malformed = 0;  // could not be decoded: dropped without a reply
  uint64_t invalid = 0;            // decoded but failed validation: INVALID reply
  uint64_t wrong_job = 0;
  uint64_t gated = 0;  // refused by the Gate
  uint64_t unimplemented = 0;
  uint64_t overloaded = 0;
  uint64_t expired = 0;                 // budget ran out in the queue: dropped
  uint64_t failed_sends = 0;            // ROUTER_MANDATORY: peer gone
  uint64_t handler_errors = 0;          // a handler threw
  uint64_t client_in_flight_limit = 0;  // OVERLOADED: max_in_flight_per_client reached
  // Connections: handshakes that failed (no keys, wrong keys, wrong server key, over the limit),
  // and of those the ones the ZAP handler refused, by reason.
  uint64_t refused_handshakes = 0;
  uint64_t refused_key = 0;
  uint64_t refused_mechanism = 0;
  uint64_t refused_connection_limit = 0;
  int64_t connections = 0;  // live, as the socket monitor counts them
};

// Safe for concurrent use after Start(); Handle/SetGate only before Start().
class RpcServer {
 public:
  static constexpr int kInlineLane = -1;  // run on the I/O thread: only for trivial handlers

  RpcServer(zmq::context_t* context, ServerOptions options, Identity identity);
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;
  ~RpcServer();

  void Handle(Envelope::Body::Which body, int lane, Handler handler);
  void SetGate(Gate gate);
  // Before Start(): requests and reply latency per RPC (tandem_rpc_requests_total,
  // tandem_rpc_latency_seconds, labelled rpc="pullRequest" and so on) and the server's stats
  // (tandem_rpc_server_events_total{event}) go to `registry` (not owned; must outlive this).
  void SetMetrics(metrics::Registry* registry);
  // Binds and starts the threads. kUnavailable when the address cannot be bound.
  Status Start();
  void Stop();

  // "tcp://127.0.0.1:PORT" with the port actually bound.
  std::string endpoint() const { return endpoint_; }
  ServerStats stats() const;
  Identity identity() const;
  // Incarnation, generation and so on change during a job; replies carry the current values.
  void SetIdentity(const Identity& identity);

 private:
  struct Queued;
  struct Lane;
  void IoLoop();
  void LaneLoop(Lane* lane);
  void HandleIncoming(std::vector<zmq::message_t>& frames);
  void Dispatch(zmq::message_t routing_id, InMessage message);
  void RejectNow(const zmq::message_t& routing_id, uint64_t request_id, ReplyCode code,
                 std::string_view message, uint16_t unimplemented_tag = 0);
  void FlushReplies();
  bool SendFrames(std::vector<zmq::message_t>& frames);
  void DrainMonitor();

  zmq::context_t* const context_;
  const ServerOptions options_;
  std::shared_ptr<internal::ReplySink> sink_;
  std::map<uint16_t, std::pair<int, Handler>> handlers_;
  Gate gate_;
  std::unique_ptr<zmq::socket_t> router_;   // owned by the I/O thread once started
  std::unique_ptr<zmq::socket_t> monitor_;  // the router's connection events (I/O thread)
  std::map<uint32_t, bool> accepted_fds_;   // connections the monitor saw accepted (I/O thread)
  std::unique_ptr<ZapRegistration> zap_;
  std::chrono::steady_clock::time_point last_refusal_log_{};
  uint64_t unlogged_refusals_ = 0;
  std::string endpoint_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::thread io_thread_;
  std::atomic<bool> stopping_{false};
  bool started_ = false;
  std::vector<std::vector<zmq::message_t>> deferred_;  // replies that met a full peer queue (I/O)

  struct AtomicStats;
  std::unique_ptr<AtomicStats> stats_;
  std::shared_ptr<ZapDomain> zap_domain_;  // shared with the ZAP thread and metrics
  struct RpcMetrics {
    metrics::Counter* requests = nullptr;
    metrics::Histogram* latency = nullptr;
  };
  // The I/O thread's: per body tag, created on first use.
  RpcMetrics* MetricsFor(uint16_t tag);
  metrics::Registry* registry_ = nullptr;
  std::map<uint16_t, RpcMetrics> rpc_metrics_;
};

}  // namespace tandem::wire
