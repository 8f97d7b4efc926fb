#include "common/wire/rpc_client.h"

#include <atomic>
#include <cstring>
#include <random>

namespace tandem::wire {

namespace {
ClientOptions WithDefaultKeys(ClientOptions o) {
  if (!o.curve) o.curve = DefaultCurveKeys();
  return o;
}
}  // namespace

RpcClient::RpcClient(zmq::context_t* context, Identity identity, ClientOptions options)
    : context_(context), identity_(identity), options_(WithDefaultKeys(std::move(options))) {
  // Random start so a restarted client's ids do not collide with its predecessor's late replies.
  std::random_device rd;
  next_request_id_ = ((static_cast<uint64_t>(rd()) << 32) | rd()) & 0x7fffffffffffull;
  if (next_request_id_ == 0) next_request_id_ = 1;
}

RpcClient::~RpcClient() = default;

StatusOr<RpcClient::Socket> RpcClient::OpenSocket(const std::string& endpoint) {
  try {
    auto s = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::dealer);
    Socket out;
    if (options_.fail_on_disconnect) {
      // Before connect, so that no event of this socket's connections is missed.
      static std::atomic<uint64_t> next_monitor{0};
      const std::string at = "inproc://tandem-rpc-monitor-" + std::to_string(next_monitor++);
      if (zmq_socket_monitor(s->handle(), at.c_str(), ZMQ_EVENT_DISCONNECTED) != 0)
        return Status::Internal("socket monitor for " + endpoint + ": " +
                                zmq_strerror(zmq_errno()));
      out.monitor = std::make_unique<zmq::socket_t>(*context_, zmq::socket_type::pair);
      out.monitor->set(zmq::sockopt::linger, 0);
      out.monitor->connect(at);
    }
    s->set(zmq::sockopt::immediate, 1);
    s->set(zmq::sockopt::linger, 0);
    s->set(zmq::sockopt::sndhwm, options_.hwm);
    s->set(zmq::sockopt::rcvhwm, options_.hwm);
    if (options_.curve) {
      s->set(zmq::sockopt::curve_serverkey, options_.curve_server_key.empty()
                                                ? options_.curve->public_key
                                                : options_.curve_server_key);
      s->set(zmq::sockopt::curve_publickey, options_.curve->public_key);
      s->set(zmq::sockopt::curve_secretkey, options_.curve->secret_key);
    }
    s->connect(endpoint);
    out.dealer = std::move(s);
    return out;
  } catch (const zmq::error_t& e) {
    return Status::InvalidArgument("cannot connect to " + endpoint + ": " + e.what());
  }
}

StatusOr<int> RpcClient::Connect(const std::string& endpoint) {
  auto s = OpenSocket(endpoint);
  if (!s.ok()) return s.status();
  sockets_.push_back(std::move(s).value());
  endpoints_.push_back(endpoint);
  in_flight_bytes_.push_back(0);
  reopen_.push_back(false);
  return static_cast<int>(sockets_.size() - 1);
}

void RpcClient::Reopen(int server) {
  auto s = OpenSocket(endpoints_[server]);
  if (!s.ok()) return;  // the endpoint connected before: keep the old socket
  if (sockets_[server].monitor != nullptr)
    zmq_socket_monitor(sockets_[server].dealer->handle(), nullptr, 0);  // stops it
  sockets_[server] = std::move(s).value();
  // Replies to what was sent on the old socket cannot come any more; their waits time out.
  for (auto& [id, p] : pending_)
    if (p.server == server) p.bytes = 0;
  in_flight_bytes_[server] = 0;
  reopen_[server] = false;
}

StatusOr<uint64_t> RpcClient::Send(int server, OutMessage message, std::chrono::milliseconds budget,
                                   const std::function<bool()>& stop) {
  if (server < 0 || server >= static_cast<int>(sockets_.size()))
    return Status::InvalidArgument("unknown server handle");
  // The server would drop it unanswered (too many frames to decode): say so instead of waiting.
  if (message.bulk_count() > options_.limits.max_bulk_frames)
    return Status::InvalidArgument("a message of " + std::to_string(message.bulk_count()) +
                                   " bulk frames exceeds the limit of " +
                                   std::to_string(options_.limits.max_bulk_frames));
  const auto deadline = Clock::now() + budget;
  const uint64_t id = next_request_id_++;
  WriteHeader(message.envelope().initHeader(), identity_, id,
              static_cast<uint32_t>(std::max<int64_t>(1, budget.count())));
  auto frames = std::move(message).Finish();
  uint64_t bytes = 0;
  for (const auto& f : frames) bytes += f.size();

  const auto stopped = [&] {
    return Status::Cancelled("the send to " + endpoints_[server] + " was given up: stopping");
  };
  while (in_flight_bytes_[server] > 0 &&
         in_flight_bytes_[server] + bytes > options_.max_in_flight_bytes) {
    if (Clock::now() >= deadline)
      return Status::Unavailable("in-flight byte bound reached for server " +
                                 std::to_string(server));
    if (stop && stop()) return stopped();
    Pump(stop ? std::min(deadline, Clock::now() + std::chrono::milliseconds(20)) : deadline);
  }
  if (reopen_[server]) Reopen(server);
  // A disconnect not read yet is older than this request: it must not count it lost.
  if (sockets_[server].monitor != nullptr) ReadMonitor(server);
  zmq::socket_t& sock = *sockets_[server].dealer;
  const uint64_t replies_before = stats_.replies;
  for (;;) {
    auto sent = sock.send(frames[0], frames.size() > 1
                                         ? zmq::send_flags::dontwait | zmq::send_flags::sndmore
                                         : zmq::send_flags::dontwait);
    if (sent) break;
    // EAGAIN: no completed connection yet (ZMQ_IMMEDIATE) or the queue is full. Drain replies
    // while waiting, so that a server blocked on our full receive queue can make progress.
    if (Clock::now() >= deadline) {
      // libzmq never reconnects a connection whose handshake was refused (a ZAP refusal is a
      // protocol error that ends the session), also not to a server restarted on the same
      // port: a server silent for a whole budget gets a new socket at the next send.
      if (stats_.replies == replies_before) reopen_[server] = true;
      return Status::Unavailable("server " + endpoints_[server] + " not reachable within " +
                                 std::to_string(budget.count()) + " ms");
    }
    if (stop && stop()) return stopped();
    zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN | ZMQ_POLLOUT, 0};
    auto wait =
        std::min(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                 std::chrono::milliseconds(20));
    zmq::poll(&item, 1, std::max(wait, std::chrono::milliseconds(1)));
    if (item.revents & ZMQ_POLLIN) ReceiveFrom(server);
  }
  for (size_t i = 1; i < frames.size(); ++i) {
    // The first part was accepted, so the rest of the message is too (multipart atomicity).
    auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    (void)sock.send(frames[i], flags);
  }
  in_flight_bytes_[server] += bytes;
  pending_.emplace(id, Pending{server, bytes, std::nullopt});
  stats_.sent++;
  return id;
}

void RpcClient::ReadMonitor(int server) {
  zmq::socket_t& mon = *sockets_[server].monitor;
  for (;;) {
    // Two frames an event: 16-bit event and 32-bit value, then the peer's address.
    zmq::message_t event, address;
    if (!mon.recv(event, zmq::recv_flags::dontwait)) return;
    if (event.more()) (void)mon.recv(address, zmq::recv_flags::dontwait);
    uint16_t what = 0;
    if (event.size() >= sizeof(what)) std::memcpy(&what, event.data(), sizeof(what));
    if (what != ZMQ_EVENT_DISCONNECTED) continue;
    // Replies that arrived before the connection closed are already read (ReceiveFrom runs
    // first in Pump); what is still open was lost with the server.
    ReceiveFrom(server);
    for (auto& [id, p] : pending_) {
      if (p.server != server || Finished(p)) continue;
      p.lost = true;
      in_flight_bytes_[server] -= p.bytes;
      p.bytes = 0;
      stats_.lost_requests++;
    }
  }
}

void RpcClient::ReceiveFrom(int server) {
  zmq::socket_t& sock = *sockets_[server].dealer;
  for (int n = 0; n < 1024; ++n) {
    std::vector<zmq::message_t> frames;
    bool more = true;
    while (more) {
      zmq::message_t part;
      if (!sock.recv(part, zmq::recv_flags::dontwait)) break;
      more = part.more();
      if (frames.size() <= options_.limits.max_bulk_frames + 1) frames.push_back(std::move(part));
    }
    if (frames.empty()) return;
    auto decoded = InMessage::Decode(std::move(frames), options_.limits);
    if (!decoded.ok() || !decoded->is_reply()) {
      stats_.malformed_replies++;
      continue;
    }
    auto it = pending_.find(decoded->request_id());
    if (it == pending_.end() || it->second.reply.has_value() || it->second.server != server) {
      stats_.late_replies++;
      continue;
    }
    stats_.replies++;
    in_flight_bytes_[server] -= it->second.bytes;
    it->second.bytes = 0;
    it->second.reply.emplace(std::move(decoded).value());
  }
}

void RpcClient::Pump(Clock::time_point until) {
  std::vector<zmq::pollitem_t> items;
  items.reserve(2 * sockets_.size());
  for (auto& s : sockets_) items.push_back({s.dealer->handle(), 0, ZMQ_POLLIN, 0});
  std::vector<int> monitored;  // the server of items[sockets_.size() + j]
  for (size_t i = 0; i < sockets_.size(); ++i) {
    if (sockets_[i].monitor == nullptr) continue;
    items.push_back({sockets_[i].monitor->handle(), 0, ZMQ_POLLIN, 0});
    monitored.push_back(static_cast<int>(i));
  }
  auto now = Clock::now();
  auto wait = until > now ? std::chrono::duration_cast<std::chrono::milliseconds>(until - now)
                          : std::chrono::milliseconds(0);
  // Round up so that a sub-millisecond remainder still waits instead of spinning.
  if (until > now && wait.count() == 0) wait = std::chrono::milliseconds(1);
  zmq::poll(items.data(), items.size(), wait);
  for (size_t i = 0; i < sockets_.size(); ++i)
    if (items[i].revents & ZMQ_POLLIN) ReceiveFrom(static_cast<int>(i));
  for (size_t j = 0; j < monitored.size(); ++j)
    if (items[sockets_.size() + j].revents & ZMQ_POLLIN) ReadMonitor(monitored[j]);
}

void RpcClient::Forget(uint64_t request_id) {
  auto it = pending_.find(request_id);
  if (it == pending_.end()) return;
  in_flight_bytes_[it->second.server] -= it->second.bytes;
  pending_.erase(it);
}

StatusOr<InMessage> RpcClient::Wait(uint64_t request_id, Clock::time_point deadline) {
  for (;;) {
    auto it = pending_.find(request_id);
    if (it == pending_.end()) return Status::InvalidArgument("unknown request id");
    if (it->second.reply.has_value()) {
      InMessage m = std::move(*it->second.reply);
      pending_.erase(it);
      return m;
    }
    if (it->second.lost) {
      const int server = it->second.server;
      pending_.erase(it);
      return Status::Unavailable("the connection to " + endpoints_[server] +
                                 " closed before it answered request " +
                                 std::to_string(request_id));
    }
    if (Clock::now() >= deadline) {
      Forget(request_id);
      return Status::DeadlineExceeded("no reply to request " + std::to_string(request_id));
    }
    Pump(deadline);
  }
}

std::vector<StatusOr<InMessage>> RpcClient::WaitAll(std::span<const uint64_t> ids,
                                                    Clock::time_point deadline,
                                                    const std::function<bool()>& stop) {
  for (;;) {
    bool all = true;
    for (uint64_t id : ids) {
      auto it = pending_.find(id);
      if (it != pending_.end() && !Finished(it->second)) {
        all = false;
        break;
      }
    }
    if (all || Clock::now() >= deadline || (stop && stop())) break;
    Pump(stop ? std::min(deadline, Clock::now() + std::chrono::milliseconds(100)) : deadline);
  }
  std::vector<StatusOr<InMessage>> out;
  out.reserve(ids.size());
  for (uint64_t id : ids) out.push_back(Wait(id, Clock::time_point::min()));
  return out;
}

StatusOr<InMessage> RpcClient::Call(int server, OutMessage message,
                                    std::chrono::milliseconds budget) {
  const auto deadline = Clock::now() + budget;
  auto id = Send(server, std::move(message), budget);
  if (!id.ok()) return id.status();
  return Wait(*id, deadline);
}

StatusOr<InMessage> RpcClient::Call(int server, OutMessage message,
                                    std::chrono::milliseconds budget,
                                    const std::function<bool()>& stop) {
  if (!stop) return Call(server, std::move(message), budget);
  const auto deadline = Clock::now() + budget;
  auto id = Send(server, std::move(message), budget);
  if (!id.ok()) return id.status();
  const uint64_t ids[] = {*id};
  return std::move(WaitAll(ids, deadline, stop).front());
}

std::vector<StatusOr<InMessage>> RpcClient::CallAll(
    std::vector<std::pair<int, OutMessage>> messages, std::chrono::milliseconds budget) {
  const auto deadline = Clock::now() + budget;
  std::vector<StatusOr<InMessage>> out;
  out.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) out.emplace_back(Status::Unavailable("not sent"));
  std::vector<uint64_t> ids;
  std::vector<size_t> slots;
  for (size_t i = 0; i < messages.size(); ++i) {
    auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    auto id = Send(messages[i].first, std::move(messages[i].second),
                   std::max(remaining, std::chrono::milliseconds(1)));
    if (!id.ok()) {
      out[i] = id.status();
      continue;
    }
    ids.push_back(*id);
    slots.push_back(i);
  }
  auto replies = WaitAll(ids, deadline);
  for (size_t j = 0; j < replies.size(); ++j) out[slots[j]] = std::move(replies[j]);
  return out;
}

}  // namespace tandem::wire
