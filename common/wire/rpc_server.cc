#include "common/wire/rpc_server.h"

#include <capnp/schema.h>
#include <kj/exception.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include <cstring>
#include <deque>
#include <unordered_map>

#include "common/log.h"
#include "common/wire/zap_authenticator.h"

namespace tandem::wire {
namespace internal {

// Where Responders leave replies for the I/O thread, which alone may touch the ROUTER socket.
// An eventfd wakes the I/O thread's zmq_poll. Outlives the server while Responders remain.
class ReplySink {
 public:
  explicit ReplySink(Identity identity) : identity_(identity), efd_(::eventfd(0, EFD_NONBLOCK)) {}
  ~ReplySink() {
    if (efd_ >= 0) ::close(efd_);
  }
  int fd() const { return efd_; }

  // Counts a request of the connection `routing_id` as in flight until its reply is pushed or
  // it is abandoned; false (nothing counted) when that connection has `limit` in flight already.
  bool Admit(const zmq::message_t& routing_id, int64_t limit) {
    MutexLock lock(&mu_);
    int64_t& n = in_flight_[routing_id.to_string()];
    if (n >= limit) return false;
    ++n;
    return true;
  }
  void Release(const zmq::message_t& routing_id) {
    MutexLock lock(&mu_);
    ReleaseLocked(routing_id);
  }

  void Push(std::vector<zmq::message_t> frames) {
    {
      MutexLock lock(&mu_);
      ReleaseLocked(frames[0]);
      if (closed_) return;
      queue_.push_back(std::move(frames));
    }
    uint64_t one = 1;
    ssize_t n = ::write(efd_, &one, sizeof(one));
    (void)n;  // EAGAIN means the counter is already non-zero: the I/O thread will wake anyway
  }
  std::deque<std::vector<zmq::message_t>> TakeAll() {
    uint64_t v;
    ssize_t n = ::read(efd_, &v, sizeof(v));
    (void)n;
    MutexLock lock(&mu_);
    std::deque<std::vector<zmq::message_t>> out;
    out.swap(queue_);
    return out;
  }
  void Close() {
    MutexLock lock(&mu_);
    closed_ = true;
    queue_.clear();
    in_flight_.clear();
  }
  Identity identity() {
    MutexLock lock(&mu_);
    return identity_;
  }
  void set_identity(const Identity& id) {
    MutexLock lock(&mu_);
    identity_ = id;
  }

 private:
  void ReleaseLocked(const zmq::message_t& routing_id) EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = in_flight_.find(routing_id.to_string());
    if (it != in_flight_.end() && --it->second <= 0) in_flight_.erase(it);
  }

  Mutex mu_;
  std::deque<std::vector<zmq::message_t>> queue_ GUARDED_BY(mu_);
  std::unordered_map<std::string, int64_t> in_flight_ GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
  Identity identity_ GUARDED_BY(mu_);
  const int efd_;
};

}  // namespace internal

namespace {
using Clock = std::chrono::steady_clock;

ServerOptions WithDefaultKeys(ServerOptions o) {
  if (!o.curve) o.curve = DefaultCurveKeys();
  return o;
}

OutMessage MakeReply(const Identity& id, uint64_t request_id, ReplyCode code,
                     std::string_view message) {
  OutMessage out;
  auto env = out.envelope();
  WriteHeader(env.initHeader(), id, request_id, 0);
  env.setIsReply(true);
  auto reply = env.initReply();
  reply.setCode(code);
  if (!message.empty()) reply.setMessage(capnp::Text::Reader(message.data(), message.size()));
  return out;
}
}  // namespace

struct RpcServer::AtomicStats {
  std::atomic<uint64_t> received{0}, replied{0}, dropped_malformed{0}, invalid{0}, wrong_job{0},
      gated{0}, unimplemented{0}, overloaded{0}, expired{0}, failed_sends{0}, handler_errors{0},
      client_in_flight_limit{0}, refused_handshakes{0};
};

struct RpcServer::Queued {
  zmq::message_t routing_id;
  InMessage message;
  Handler* handler;
  Clock::time_point deadline;
  metrics::Histogram* latency = nullptr;
  Clock::time_point received_at;
};

struct RpcServer::Lane {
  LaneOptions options;
  Mutex mu;
  CondVar cv{&mu};
  std::deque<Queued> queue GUARDED_BY(mu);
  uint64_t queued_bytes GUARDED_BY(mu) = 0;
  bool stop GUARDED_BY(mu) = false;
  std::vector<std::thread> threads;
};

// ---- Responder ----

Responder::Responder(std::shared_ptr<internal::ReplySink> sink, zmq::message_t routing_id,
                     uint64_t request_id, Clock::time_point deadline)
    : sink_(std::move(sink)),
      routing_id_(std::move(routing_id)),
      request_id_(request_id),
      deadline_(deadline) {}

Responder::Responder(Responder&& o) noexcept
    : sink_(std::move(o.sink_)),
      routing_id_(std::move(o.routing_id_)),
      request_id_(o.request_id_),
      deadline_(o.deadline_),
      latency_(o.latency_),
      received_at_(o.received_at_) {}

Responder& Responder::operator=(Responder&& o) noexcept {
  if (this != &o) {
    if (sink_) SendError(ReplyCode::INTERNAL, "request dropped by its handler");
    sink_ = std::move(o.sink_);
    routing_id_ = std::move(o.routing_id_);
    request_id_ = o.request_id_;
    deadline_ = o.deadline_;
    latency_ = o.latency_;
    received_at_ = o.received_at_;
  }
  return *this;
}

Responder::~Responder() {
  if (sink_) SendError(ReplyCode::INTERNAL, "request dropped by its handler");
}

OutMessage Responder::NewReply() const {
  Identity id = sink_ ? sink_->identity() : Identity{};
  return MakeReply(id, request_id_, ReplyCode::OK, {});
}

void Responder::Send(OutMessage reply) {
  if (!sink_) return;
  if (latency_ != nullptr)
    latency_->Observe(std::chrono::duration<double>(Clock::now() - received_at_).count());
  std::vector<zmq::message_t> frames;
  frames.push_back(std::move(routing_id_));
  for (auto& f : std::move(reply).Finish()) frames.push_back(std::move(f));
  auto sink = std::move(sink_);
  sink_ = nullptr;
  sink->Push(std::move(frames));
}

void Responder::SendError(ReplyCode code, std::string_view message) {
  if (!sink_) return;
  Send(MakeReply(sink_->identity(), request_id_, code, message));
}

void Responder::SendView(ReplyCode code, std::string_view message, uint64_t applied_step) {
  if (!sink_) return;
  Identity id = sink_->identity();
  OutMessage out = MakeReply(id, request_id_, code, message);
  auto view = out.envelope().getReply().initView();
  view.setTerm(id.term);
  view.setTimeline(id.timeline);
  view.setGeneration(id.generation);
  view.setIncarnation(id.incarnation);
  view.setAppliedStep(static_cast<int64_t>(applied_step));
  Send(std::move(out));
}

void Responder::Abandon() {
  if (sink_) sink_->Release(routing_id_);
  sink_ = nullptr;
}

// ---- RpcServer ----

RpcServer::RpcServer(zmq::context_t* context, ServerOptions options, Identity identity)
    : context_(context),
      options_(WithDefaultKeys(std::move(options))),
      sink_(std::make_shared<internal::ReplySink>(identity)),
      stats_(std::make_unique<AtomicStats>()),
      zap_domain_(std::make_shared<ZapDomain>()) {}

RpcServer::~RpcServer() { Stop(); }

void RpcServer::Handle(Envelope::Body::Which body, int lane, Handler handler) {
  if (lane != kInlineLane && (lane < 0 || lane >= static_cast<int>(options_.lanes.size()))) {
    TLOG_ERROR("RpcServer::Handle: lane {} does not exist", lane);
    std::abort();  // our own API misuse: a bug
  }
  handlers_[static_cast<uint16_t>(body)] = {lane, std::move(handler)};
}

void RpcServer::SetGate(Gate gate) { gate_ = std::move(gate); }

void RpcServer::SetMetrics(metrics::Registry* registry) {
  registry_ = registry;
  const AtomicStats* s = stats_.get();
  registry->AddCollector([s](std::vector<metrics::Registry::Sample>* out) {
    const std::pair<const char*, uint64_t> events[] = {
        {"received", s->received.load()},
        {"replied", s->replied.load()},
        {"dropped_malformed", s->dropped_malformed.load()},
        {"invalid", s->invalid.load()},
        {"wrong_job", s->wrong_job.load()},
        {"gated", s->gated.load()},
        {"unimplemented", s->unimplemented.load()},
        {"overloaded", s->overloaded.load()},
        {"expired", s->expired.load()},
        {"failed_sends", s->failed_sends.load()},
        {"handler_errors", s->handler_errors.load()},
        {"client_in_flight_limit", s->client_in_flight_limit.load()},
        {"refused_handshake", s->refused_handshakes.load()}};
    for (const auto& [event, n] : events)
      out->push_back({"tandem_rpc_server_events_total",
                      "Requests the RPC server saw, by what became of them",
                      "counter",
                      {{"event", event}},
                      static_cast<double>(n)});
  });
  registry->AddCollector([d = zap_domain_](std::vector<metrics::Registry::Sample>* out) {
    const std::pair<const char*, uint64_t> reasons[] = {
        {"key", d->refused_key.load()},
        {"mechanism", d->refused_mechanism.load()},
        {"connection_limit", d->refused_connections.load()}};
    for (const auto& [reason, n] : reasons)
      out->push_back({"tandem_rpc_refused_connections_total",
                      "Connections the ZAP handler refused, by reason",
                      "counter",
                      {{"reason", reason}},
                      static_cast<double>(n)});
    out->push_back({"tandem_rpc_connections",
                    "Live connections to the RPC server",
                    "gauge",
                    {},
                    static_cast<double>(d->live_connections.load())});
  });
}

RpcServer::RpcMetrics* RpcServer::MetricsFor(uint16_t tag) {
  if (registry_ == nullptr) return nullptr;
  auto it = rpc_metrics_.find(tag);
  if (it != rpc_metrics_.end()) return &it->second;
  std::string name = std::to_string(tag);
  for (auto field : capnp::Schema::from<Envelope::Body>().getUnionFields())
    if (field.getProto().getDiscriminantValue() == tag) name = field.getProto().getName();
  const metrics::Labels labels = {{"rpc", name}};
  RpcMetrics m;
  m.requests = registry_->counter("tandem_rpc_requests_total", "Requests served, by RPC", labels);
  m.latency = registry_->histogram("tandem_rpc_latency_seconds",
                                   "From a request's receipt to its reply, by RPC", labels,
                                   metrics::LatencyBuckets());
  return &rpc_metrics_.emplace(tag, m).first->second;
}

Identity RpcServer::identity() const { return sink_->identity(); }
void RpcServer::SetIdentity(const Identity& identity) { sink_->set_identity(identity); }

Status RpcServer::Start() {
  // Every handshake goes through the ZAP handler, with or without CURVE, so that the connection
  // limit holds either way (libzmq consults it for the NULL mechanism once a domain is set).
  if (options_.curve) zap_domain_->client_key = options_.curve->public_key;
  zap_domain_->max_connections = options_.max_connections;
  auto zap = RegisterZapDomain(context_, zap_domain_);
  if (!zap.ok()) return zap.status();
  zap_ = std::move(zap).value();
  static std::atomic<uint64_t> next_monitor{0};
  const std::string monitor_endpoint = "inproc://tandem-rpc-monitor-" + std::to_string(::getpid()) +
                                       "-" + std::to_string(next_monitor++);
  try {
    router_ = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::router);
    router_->set(zmq::sockopt::router_mandatory, 1);
    router_->set(zmq::sockopt::linger, 0);
    router_->set(zmq::sockopt::maxmsgsize, options_.max_frame_bytes);
    router_->set(zmq::sockopt::sndhwm, options_.hwm);
    router_->set(zmq::sockopt::rcvhwm, options_.hwm);
    router_->set(zmq::sockopt::zap_domain, zap_->domain_name());
    if (options_.curve) {
      router_->set(zmq::sockopt::curve_server, 1);
      router_->set(zmq::sockopt::curve_secretkey, options_.curve->secret_key);
    }
    if (zmq_socket_monitor(
            router_->handle(), monitor_endpoint.c_str(),
            ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0)
      throw zmq::error_t();
    monitor_ = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::pair);
    monitor_->set(zmq::sockopt::linger, 0);
    monitor_->connect(monitor_endpoint);
    router_->bind(options_.bind_endpoint);
    endpoint_ = router_->get(zmq::sockopt::last_endpoint);
    if (!options_.advertise_host.empty())
      endpoint_ = "tcp://" + options_.advertise_host + endpoint_.substr(endpoint_.rfind(':'));
  } catch (const zmq::error_t& e) {
    monitor_.reset();
    router_.reset();
    zap_.reset();
    return Status::Unavailable("cannot bind " + options_.bind_endpoint + ": " + e.what());
  }
  for (const auto& lo : options_.lanes) {
    auto lane = std::make_unique<Lane>();
    lane->options = lo;
    lanes_.push_back(std::move(lane));
  }
  for (auto& lane : lanes_) {
    for (int i = 0; i < std::max(1, lane->options.threads); ++i)
      lane->threads.emplace_back([this, l = lane.get()] { LaneLoop(l); });
  }
  io_thread_ = std::thread([this] { IoLoop(); });
  started_ = true;
  return Status::Ok();
}

void RpcServer::Stop() {
  if (!started_) return;
  started_ = false;
  stopping_ = true;
  if (io_thread_.joinable()) io_thread_.join();
  for (auto& lane : lanes_) {
    {
      MutexLock lock(&lane->mu);
      lane->stop = true;
    }
    lane->cv.SignalAll();
    for (auto& t : lane->threads) t.join();
    MutexLock lock(&lane->mu);
    for (auto& q : lane->queue) (void)q;
    lane->queue.clear();  // their Responders answer into a closed sink below
  }
  sink_->Close();
  if (router_) zmq_socket_monitor(router_->handle(), nullptr, 0);
  monitor_.reset();
  router_.reset();
  zap_.reset();
}

ServerStats RpcServer::stats() const {
  const auto& s = *stats_;
  ServerStats out{s.received.load(),      s.replied.load(),       s.dropped_malformed.load(),
                  s.invalid.load(),       s.wrong_job.load(),     s.gated.load(),
                  s.unimplemented.load(), s.overloaded.load(),    s.expired.load(),
                  s.failed_sends.load(),  s.handler_errors.load()};
  out.client_in_flight_limit = s.client_in_flight_limit.load();
  out.refused_handshakes = s.refused_handshakes.load();
  if (zap_domain_) {
    out.refused_key = zap_domain_->refused_key.load();
    out.refused_mechanism = zap_domain_->refused_mechanism.load();
    out.refused_connection_limit = zap_domain_->refused_connections.load();
    out.connections = zap_domain_->live_connections.load();
  }
  return out;
}

void RpcServer::IoLoop() {
  zmq::pollitem_t items[3] = {{router_->handle(), 0, ZMQ_POLLIN, 0},
                              {nullptr, sink_->fd(), ZMQ_POLLIN, 0},
                              {monitor_->handle(), 0, ZMQ_POLLIN, 0}};
  std::vector<zmq::message_t> frames;
  while (!stopping_) {
    int timeout_ms = deferred_.empty() ? 100 : 2;
    try {
      zmq::poll(items, 3, std::chrono::milliseconds(timeout_ms));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      TLOG_ERROR("rpc server poll failed: {}", e.what());
      break;
    }
    if (items[2].revents & ZMQ_POLLIN) DrainMonitor();
    if (items[1].revents & ZMQ_POLLIN || !deferred_.empty()) FlushReplies();
    // Bounded batch per wake-up so replies are never starved by a flood of requests.
    for (int n = 0; n < 256 && (items[0].revents & ZMQ_POLLIN); ++n) {
      frames.clear();
      bool more = true;
      bool got_any = false;
      while (more) {
        zmq::message_t part;
        auto ok = router_->recv(part, zmq::recv_flags::dontwait);
        if (!ok) break;
        got_any = true;
        more = part.more();
        // Keep draining an over-long message but stop storing it.
        if (frames.size() <= options_.limits.max_bulk_frames + 2)
          frames.push_back(std::move(part));
        else
          frames.resize(options_.limits.max_bulk_frames + 3);
      }
      if (!got_any) break;
      HandleIncoming(frames);
    }
  }
}

void RpcServer::DrainMonitor() {
  for (;;) {
    zmq::message_t event, address;
    try {
      if (!monitor_->recv(event, zmq::recv_flags::dontwait)) return;
      if (event.more()) (void)monitor_->recv(address, zmq::recv_flags::dontwait);
    } catch (const zmq::error_t&) {
      return;
    }
    if (event.size() < 6) continue;
    uint16_t kind;
    uint32_t value;  // the fd for ACCEPTED/DISCONNECTED, the error or ZAP status for failures
    std::memcpy(&kind, event.data(), 2);
    std::memcpy(&value, static_cast<const char*>(event.data()) + 2, 4);
    switch (kind) {
      case ZMQ_EVENT_ACCEPTED:
        if (accepted_fds_.emplace(value, true).second) zap_domain_->live_connections++;
        zap_domain_->accepted_total++;
        break;
      case ZMQ_EVENT_DISCONNECTED:
        if (accepted_fds_.erase(value) > 0) zap_domain_->live_connections--;
        break;
      default: {
        stats_->refused_handshakes++;
        // The ZAP handler logs its own refusals with the peer's address; these are the ones
        // libzmq refuses before asking it (no CURVE, a wrong server key), at most every 10 s.
        if (kind == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) break;
        const auto now = Clock::now();
        if (last_refusal_log_ != Clock::time_point{} &&
            now - last_refusal_log_ < std::chrono::seconds(10)) {
          ++unlogged_refusals_;
          break;
        }
        std::string why = "error " + std::to_string(value);
        if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
          why = options_.curve ? "the client does not use CURVE (no cluster keys?)"
                               : "the client uses CURVE, this server does not (security.keys)";
        else if (value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
          why = "the client's CURVE handshake does not open (not the cluster's server key?)";
        TLOG_WARN("{} refused a connection: {}{}", endpoint_, why,
                  unlogged_refusals_ > 0
                      ? " (and " + std::to_string(unlogged_refusals_) + " refusals before)"
                      : "");
        last_refusal_log_ = now;
        unlogged_refusals_ = 0;
      }
    }
  }
}

void RpcServer::HandleIncoming(std::vector<zmq::message_t>& frames) {
  if (frames.size() < 2 || frames.size() > options_.limits.max_bulk_frames + 2) {
    stats_->dropped_malformed++;
    return;
  }
  zmq::message_t routing_id = std::move(frames[0]);
  std::vector<zmq::message_t> body(std::make_move_iterator(frames.begin() + 1),
                                   std::make_move_iterator(frames.end()));
  auto decoded = InMessage::Decode(std::move(body), options_.limits);
  if (!decoded.ok()) {
    // Without a decodable header there is no request id to answer: drop and count.
    stats_->dropped_malformed++;
    TLOG_DEBUG("dropped malformed message: {}", decoded.status().message());
    return;
  }
  Dispatch(std::move(routing_id), std::move(decoded).value());
}

void RpcServer::Dispatch(zmq::message_t routing_id, InMessage message) {
  const uint64_t request_id = message.request_id();
  if (message.is_reply()) {
    stats_->invalid++;
    RejectNow(routing_id, request_id, ReplyCode::INVALID, "a reply sent as a request");
    return;
  }
  const Identity self = sink_->identity();
  auto header = message.header();
  if (!self.job_id.is_zero() &&
      (header.getJobIdHi() != self.job_id.hi || header.getJobIdLo() != self.job_id.lo)) {
    stats_->wrong_job++;
    RejectNow(routing_id, request_id, ReplyCode::WRONG_JOB,
              "this is job " + self.job_id.ToHex() + ", not " +
                  JobId{header.getJobIdHi(), header.getJobIdLo()}.ToHex());
    return;
  }
  const auto tag = static_cast<uint16_t>(message.envelope().getBody().which());
  auto it = handlers_.find(tag);
  if (it == handlers_.end()) {
    stats_->unimplemented++;
    RejectNow(routing_id, request_id, ReplyCode::UNIMPLEMENTED,
              "no handler for body " + std::to_string(tag), tag);
    return;
  }
  if (gate_) {
    if (auto rejection = gate_(message)) {
      stats_->gated++;
      RejectNow(routing_id, request_id, rejection->code, rejection->message);
      return;
    }
  }
  stats_->received++;
  const uint32_t budget_ms = header.getBudgetMs();
  const auto deadline = budget_ms == 0 ? Clock::time_point::max()
                                       : Clock::now() + std::chrono::milliseconds(budget_ms);
  const int lane_index = it->second.first;
  Handler* handler = &it->second.second;
  RpcMetrics* rpc = MetricsFor(tag);
  if (rpc != nullptr) rpc->requests->Add();
  if (!sink_->Admit(routing_id, options_.max_in_flight_per_client)) {
    stats_->client_in_flight_limit++;
    RejectNow(routing_id, request_id, ReplyCode::OVERLOADED,
              "this connection has " + std::to_string(options_.max_in_flight_per_client) +
                  " requests in flight (security.max_in_flight_per_client)");
    return;
  }
  if (lane_index == kInlineLane) {
    Responder responder(sink_, std::move(routing_id), request_id, deadline);
    if (rpc != nullptr) {
      responder.latency_ = rpc->latency;
      responder.received_at_ = Clock::now();
    }
    try {
      (*handler)(message, std::move(responder));
    } catch (...) {
      stats_->handler_errors++;
    }
    return;
  }
  Lane* lane = lanes_[lane_index].get();
  {
    MutexLock lock(&lane->mu);
    const uint64_t bytes = message.total_bytes();
    if (lane->queue.size() < lane->options.max_queued &&
        (lane->queue.empty() || lane->queued_bytes + bytes <= lane->options.max_queued_bytes)) {
      lane->queued_bytes += bytes;
      lane->queue.push_back(Queued{std::move(routing_id), std::move(message), handler, deadline,
                                   rpc != nullptr ? rpc->latency : nullptr, Clock::now()});
      lane->cv.Signal();
      return;
    }
  }
  sink_->Release(routing_id);
  stats_->overloaded++;
  RejectNow(routing_id, request_id, ReplyCode::OVERLOADED,
            "lane " + lane->options.name + " is full");
}

void RpcServer::LaneLoop(Lane* lane) {
  for (;;) {
    std::optional<Queued> item;
    {
      MutexLock lock(&lane->mu);
      while (lane->queue.empty() && !lane->stop) lane->cv.Wait();
      if (lane->stop) return;
      item.emplace(std::move(lane->queue.front()));
      lane->queue.pop_front();
      lane->queued_bytes -= item->message.total_bytes();
    }
    Responder responder(sink_, std::move(item->routing_id), item->message.request_id(),
                        item->deadline);
    responder.latency_ = item->latency;
    responder.received_at_ = item->received_at;
    if (Clock::now() >= item->deadline) {
      stats_->expired++;  // the sender has stopped waiting (PROTOCOLS §13)
      responder.Abandon();
      continue;
    }
    // Handlers read only a pre-validated message, but they are our code: a throw is turned into
    // an INTERNAL reply here, at the module's wall, instead of killing the daemon.
    try {
      (*item->handler)(item->message, std::move(responder));
    } catch (const kj::Exception& e) {
      stats_->handler_errors++;
      TLOG_WARN("handler failed: {}", e.getDescription().cStr());
    } catch (const std::exception& e) {
      stats_->handler_errors++;
      TLOG_WARN("handler failed: {}", e.what());
    }
  }
}

void RpcServer::RejectNow(const zmq::message_t& routing_id, uint64_t request_id, ReplyCode code,
                          std::string_view message, uint16_t unimplemented_tag) {
  OutMessage out = MakeReply(sink_->identity(), request_id, code, message);
  if (unimplemented_tag) out.envelope().getReply().setUnimplementedTag(unimplemented_tag);
  std::vector<zmq::message_t> frames;
  frames.emplace_back(routing_id.data(), routing_id.size());
  for (auto& f : std::move(out).Finish()) frames.push_back(std::move(f));
  if (!SendFrames(frames)) deferred_.push_back(std::move(frames));
}

void RpcServer::FlushReplies() {
  // Older deferred replies go first so a peer sees its replies in order.
  std::vector<std::vector<zmq::message_t>> still;
  for (auto& frames : deferred_) {
    if (!still.empty() || !SendFrames(frames)) still.push_back(std::move(frames));
  }
  deferred_.swap(still);
  for (auto& frames : sink_->TakeAll()) {
    if (!deferred_.empty() || !SendFrames(frames)) deferred_.push_back(std::move(frames));
  }
  if (deferred_.size() > static_cast<size_t>(options_.hwm)) {
    // A peer that stopped reading must not grow our memory without bound.
    stats_->failed_sends += deferred_.size();
    deferred_.clear();
  }
}

// Returns false when the peer's queue is full (retry later); a vanished peer counts as sent.
bool RpcServer::SendFrames(std::vector<zmq::message_t>& frames) {
  try {
    // ROUTER sends of a multipart message are atomic once the first part is accepted.
    for (size_t i = 0; i < frames.size(); ++i) {
      auto flags = zmq::send_flags::dontwait;
      if (i + 1 < frames.size()) flags = flags | zmq::send_flags::sndmore;
      auto sent = router_->send(frames[i], flags);
      if (!sent) {
        if (i == 0) return false;
        stats_->failed_sends++;
        return true;
      }
    }
    stats_->replied++;
  } catch (const zmq::error_t& e) {
    stats_->failed_sends++;  // EHOSTUNREACH: the peer disconnected (ROUTER_MANDATORY)
  }
  return true;
}

}  // namespace tandem::wire
