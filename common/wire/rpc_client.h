// RpcClient: one DEALER socket per server (PROTOCOLS §13: ZMQ_IMMEDIATE, linger 0), requests
// pipelined and matched to replies by request id, a bound on in-flight bytes per server, and a
// deadline on every wait. Send to many servers, then wait for all replies.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "common/status.h"
#include "common/wire/curve_keys.h"
#include "common/wire/identity.h"
#include "common/wire/message.h"

namespace tandem::wire {

struct ClientOptions {
  uint64_t max_in_flight_bytes = 512ull << 20;  // per server; Send waits (up to its budget)
  DecodeLimits limits;
  int hwm = 20000;  // send/receive high-water marks, in messages
  // CURVE: this process's keys (the cluster's). nullopt: DefaultCurveKeys(), nullopt without
  // `security.keys`. A server whose handshake fails is never connected: Send reports it
  // unreachable when its budget runs out.
  std::optional<CurveKeys> curve;
  // The server's public key; empty: curve->public_key (every server holds the cluster's keys).
  std::string curve_server_key;
  // A request whose connection closes before its reply ends at once with kUnavailable instead
  // of at its deadline: the server died (a restarted one gets the request again from the
  // caller's retry, which waits for the new connection). Seen through a socket monitor.
  bool fail_on_disconnect = false;
};

struct ClientStats {
  uint64_t sent = 0;
  uint64_t replies = 0;
  uint64_t late_replies = 0;  // for requests already given up on
  uint64_t malformed_replies = 0;
  uint64_t lost_requests = 0;  // ended by their connection closing (fail_on_disconnect)
};

// Requires external synchronization: one thread uses a client (ZeroMQ sockets are not
// thread-safe).
class RpcClient {
 public:
  using Clock = std::chrono::steady_clock;

  RpcClient(zmq::context_t* context, Identity identity, ClientOptions options = {});
  RpcClient(const RpcClient&) = delete;
  RpcClient& operator=(const RpcClient&) = delete;
  ~RpcClient();

  // Connects (asynchronously) and returns the server's handle.
  StatusOr<int> Connect(const std::string& endpoint);
  void SetIdentity(const Identity& identity) { identity_ = identity; }
  const Identity& identity() const { return identity_; }

  // Stamps the header (identity, new request id, `budget`) and sends. Waits up to `budget` for a
  // connection and for room under the in-flight bound, draining replies meanwhile.
  // kUnavailable when the server is not reachable within the budget. `stop` (if set) is polled
  // at least every 20 ms while it waits: once it returns true the send ends with kCancelled
  // (a process that is stopping does not wait for a server that is gone).
  StatusOr<uint64_t> Send(int server, OutMessage message, std::chrono::milliseconds budget,
                          const std::function<bool()>& stop = {});

  // The reply to `request_id` (any reply code: check ReplyStatus), or kDeadlineExceeded.
  // A request given up on is forgotten; its late reply is dropped.
  StatusOr<InMessage> Wait(uint64_t request_id, Clock::time_point deadline);
  // `stop` (if set) is polled at least every 100 ms: once it returns true the wait ends as if
  // the deadline had passed.
  std::vector<StatusOr<InMessage>> WaitAll(std::span<const uint64_t> request_ids,
                                           Clock::time_point deadline,
                                           const std::function<bool()>& stop = {});

  StatusOr<InMessage> Call(int server, OutMessage message, std::chrono::milliseconds budget);
  // As above; the wait also ends (kDeadlineExceeded) within 100 ms of `stop` returning true.
  StatusOr<InMessage> Call(int server, OutMessage message, std::chrono::milliseconds budget,
                           const std::function<bool()>& stop);
  // Sends every message, then waits for all replies until one common deadline.
  std::vector<StatusOr<InMessage>> CallAll(std::vector<std::pair<int, OutMessage>> messages,
                                           std::chrono::milliseconds budget);

  ClientStats stats() const { return stats_; }

 private:
  struct Pending {
    int server;
    uint64_t bytes;
    std::optional<InMessage> reply;
    bool lost = false;  // its connection closed first (fail_on_disconnect)
  };
  struct Socket {
    std::unique_ptr<zmq::socket_t> dealer;
    std::unique_ptr<zmq::socket_t> monitor;  // PAIR of the dealer's disconnect events, or null
  };
  // Receives whatever has arrived within `until`; returns after the first batch or the deadline.
  void Pump(Clock::time_point until);
  void ReceiveFrom(int server);
  void Forget(uint64_t request_id);
  StatusOr<Socket> OpenSocket(const std::string& endpoint);
  void Reopen(int server);
  // Reads `server`'s monitor: on a disconnect, its requests still unanswered are lost.
  void ReadMonitor(int server);
  bool Finished(const Pending& p) const { return p.reply.has_value() || p.lost; }

  zmq::context_t* const context_;
  Identity identity_;
  const ClientOptions options_;
  std::vector<Socket> sockets_;
  std::vector<std::string> endpoints_;
  std::vector<bool> reopen_;  // unreachable for a whole budget: a new socket at the next Send
  std::vector<uint64_t> in_flight_bytes_;
  std::unordered_map<uint64_t, Pending> pending_;
  uint64_t next_request_id_;
  ClientStats stats_;
};

}  // namespace tandem::wire
