// The ZAP handler (ZeroMQ RFC 27) that decides which connections a server admits. libzmq asks the
// one handler bound in a context (inproc://zeromq.zap.01) before it completes any handshake on a
// socket with a ZAP domain, so one thread per context serves every server in it, each under a
// domain of its own: with CURVE only the cluster's client key is admitted, and with or without
// it a server over its connection limit admits no more.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "common/status.h"

namespace tandem::wire {

// Shared by a server's I/O thread (which counts live connections from its socket monitor) and
// the ZAP thread (which reads them and counts refusals).
struct ZapDomain {
  std::string name;                       // set by RegisterZapDomain
  std::optional<std::string> client_key;  // Z85: CURVE, only this client key; nullopt: NULL
  int64_t max_connections = 4096;
  std::atomic<int64_t> live_connections{0};
  std::atomic<uint64_t> accepted_total{0};       // by the monitor, one per accepted connection
  std::atomic<uint64_t> handshakes_total{0};     // by the ZAP thread, one per request
  std::atomic<uint64_t> refused_key{0};          // CURVE clients with another key
  std::atomic<uint64_t> refused_mechanism{0};    // e.g. NULL or PLAIN on a CURVE server
  std::atomic<uint64_t> refused_connections{0};  // over max_connections
};

// Unregisters on destruction; the context's ZAP thread stops with its last registration, so a
// context can terminate once its servers are gone.
class ZapRegistration {
 public:
  ZapRegistration(zmq::context_t* context, std::shared_ptr<ZapDomain> domain)
      : context_(context), domain_(std::move(domain)) {}
  ~ZapRegistration();
  ZapRegistration(const ZapRegistration&) = delete;
  ZapRegistration& operator=(const ZapRegistration&) = delete;
  const std::string& domain_name() const { return domain_->name; }

 private:
  zmq::context_t* const context_;
  std::shared_ptr<ZapDomain> domain_;
};

// Gives `domain` a unique name and answers ZAP requests for it from now on (starting the
// context's ZAP thread if it is the first). kUnavailable when the handler cannot bind.
StatusOr<std::unique_ptr<ZapRegistration>> RegisterZapDomain(zmq::context_t* context,
                                                             std::shared_ptr<ZapDomain> domain);

}  // namespace tandem::wire
