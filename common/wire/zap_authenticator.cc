#include "common/wire/zap_authenticator.h"

#include <zmq.h>

#include <cerrno>
#include <chrono>
#include <map>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/sync.h"

namespace tandem::wire {
namespace {

using Clock = std::chrono::steady_clock;

// One per context with at least one registered domain.
struct ZapThread {
  std::atomic<bool> stop{false};
  std::thread thread;
  Mutex mu;
  std::map<std::string, std::shared_ptr<ZapDomain>> domains GUARDED_BY(mu);
  int registrations GUARDED_BY(mu) = 0;
  Clock::time_point last_log GUARDED_BY(mu) = Clock::time_point::min();
  uint64_t unlogged GUARDED_BY(mu) = 0;
};

Mutex registry_mu;
std::map<void*, std::unique_ptr<ZapThread>>& Registry() {
  static std::map<void*, std::unique_ptr<ZapThread>> threads;
  return threads;
}
uint64_t next_domain GUARDED_BY(registry_mu) = 0;

std::string Z85(const zmq::message_t& key) {
  if (key.size() != 32) return {};
  char out[41];
  if (zmq_z85_encode(out, static_cast<const uint8_t*>(key.data()), 32) == nullptr) return {};
  return out;
}

// A refusal is logged with its reason, at most once every 10 s per context (a client retrying
// without keys reconnects ten times a second); the lines in between are counted in the next one.
void LogRefusal(ZapThread* z, const std::string& domain, const std::string& address,
                const std::string& why) {
  MutexLock lock(&z->mu);
  const auto now = Clock::now();
  if (z->last_log != Clock::time_point::min() && now - z->last_log < std::chrono::seconds(10)) {
    ++z->unlogged;
    return;
  }
  TLOG_WARN("refused a connection from {} ({}): {}{}", address.empty() ? "?" : address, domain, why,
            z->unlogged > 0 ? " (and " + std::to_string(z->unlogged) + " refusals before)" : "");
  z->last_log = now;
  z->unlogged = 0;
}

// Returns {status code, status text} for one request (RFC 27 frames after the delimiter).
std::pair<std::string, std::string> Decide(ZapThread* z, std::vector<zmq::message_t>& f) {
  if (f.size() < 6 || f[0].to_string() != "1.0") return {"500", "malformed ZAP request"};
  const std::string domain = f[2].to_string();
  const std::string address = f[3].to_string();
  const std::string mechanism = f[5].to_string();
  std::shared_ptr<ZapDomain> d;
  {
    MutexLock lock(&z->mu);
    auto it = z->domains.find(domain);
    if (it != z->domains.end()) d = it->second;
  }
  // Only our own sockets name domains, and a domain is unregistered when its server stops: this
  // is a handshake on a socket being closed. Refusing it would be worse than useless: libzmq
  // treats a refusal as a protocol error and the client never reconnects that endpoint, also
  // not to the server restarted on the same port. Admitted, it dies with the closing socket and
  // the client reconnects.
  if (d == nullptr) return {"200", "OK"};
  if (d->client_key) {
    if (mechanism != "CURVE") {
      d->refused_mechanism++;
      LogRefusal(z, domain, address, "mechanism " + mechanism + ", not CURVE (no cluster keys?)");
      return {"400", "CURVE required"};
    }
    if (f.size() < 7 || Z85(f[6]) != *d->client_key) {
      d->refused_key++;
      LogRefusal(z, domain, address, "a CURVE key that is not the cluster's");
      return {"400", "unknown client key"};
    }
  }
  // Every request is a connection the socket monitor will count (ACCEPTED comes before the
  // handshake), but the server's I/O thread may not have read that event yet: wait for it
  // (briefly: a stalled I/O thread must not stall every handshake), so that this connection
  // is in live_connections when the bound is checked.
  const uint64_t seen = ++d->handshakes_total;
  const auto until = Clock::now() + std::chrono::milliseconds(200);
  while (d->accepted_total.load() < seen && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  if (d->live_connections.load() > d->max_connections) {
    d->refused_connections++;
    LogRefusal(z, domain, address,
               "more than security.max_connections = " + std::to_string(d->max_connections));
    return {"400", "too many connections"};
  }
  return {"200", "OK"};
}

void Serve(zmq::context_t* context, ZapThread* z, zmq::socket_t* socket) {
  zmq::pollitem_t item{socket->handle(), 0, ZMQ_POLLIN, 0};
  while (!z->stop.load()) {
    try {
      if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) <= 0) continue;
      std::vector<zmq::message_t> frames;
      for (bool more = true; more;) {
        zmq::message_t part;
        if (!socket->recv(part, zmq::recv_flags::dontwait)) break;
        more = part.more();
        if (frames.size() < 16) frames.push_back(std::move(part));
      }
      auto [code, text] = Decide(z, frames);
      const std::string request_id = frames.size() > 1 ? frames[1].to_string() : "";
      const std::string reply[] = {"1.0", request_id, code, text, "", ""};
      for (size_t i = 0; i < 6; ++i)
        socket->send(zmq::buffer(reply[i]),
                     i + 1 < 6 ? zmq::send_flags::sndmore : zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      if (e.num() == ETERM) break;
      TLOG_ERROR("ZAP handler: {}", e.what());
    }
  }
  (void)context;
}

}  // namespace

StatusOr<std::unique_ptr<ZapRegistration>> RegisterZapDomain(zmq::context_t* context,
                                                             std::shared_ptr<ZapDomain> domain) {
  MutexLock lock(&registry_mu);
  auto& threads = Registry();
  auto it = threads.find(context->handle());
  if (it == threads.end()) {
    auto z = std::make_unique<ZapThread>();
    // Bound here, not on the thread, so that no server's handshake can come before the handler.
    auto socket = std::make_shared<zmq::socket_t>(*context, zmq::socket_type::rep);
    // The handler of the context's previous servers (torn down when the last of them went) may
    // still hold the endpoint: libzmq unbinds a closed socket's inproc endpoints on its reaper
    // thread, after zmq_close returns. A server started right after another was destroyed (a
    // restart in the same process) waits for that, up to 5 s, instead of failing to start.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    for (;;) {
      try {
        socket->set(zmq::sockopt::linger, 0);
        socket->bind("inproc://zeromq.zap.01");
        break;
      } catch (const zmq::error_t& e) {
        if (e.num() != EADDRINUSE || std::chrono::steady_clock::now() > deadline)
          return Status::Unavailable(std::string("cannot bind the ZAP handler: ") + e.what());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ZapThread* raw = z.get();
    z->thread = std::thread([context, raw, socket] { Serve(context, raw, socket.get()); });
    it = threads.emplace(context->handle(), std::move(z)).first;
  }
  ZapThread* z = it->second.get();
  domain->name = "tandem-" + std::to_string(next_domain++);
  {
    MutexLock zl(&z->mu);
    z->domains[domain->name] = domain;
    z->registrations++;
  }
  return std::make_unique<ZapRegistration>(context, std::move(domain));
}

ZapRegistration::~ZapRegistration() {
  std::unique_ptr<ZapThread> done;
  {
    MutexLock lock(&registry_mu);
    auto& threads = Registry();
    auto it = threads.find(context_->handle());
    if (it == threads.end()) return;
    ZapThread* z = it->second.get();
    MutexLock zl(&z->mu);
    z->domains.erase(domain_->name);
    if (--z->registrations == 0) {
      done = std::move(it->second);
      threads.erase(it);
    }
  }
  if (done) {
    done->stop = true;
    done->thread.join();  // closes the REP socket, so the context can terminate
  }
}

}  // namespace tandem::wire
