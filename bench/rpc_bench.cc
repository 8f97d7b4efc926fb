// RPC benchmark: tandem's RpcServer/RpcClient against raw ZeroMQ ROUTER/DEALER on the same
// loopback in the same run. Figures: small-message round trips per second (one outstanding
// request) and bulk MB/s with 1 MiB and 16 MiB payloads echoed back (a window of requests in
// flight). Each figure is the median of several runs; rounds alternate raw and tandem so that
// machine noise hits both alike.
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_json.h"
#include "common/wire/diagnostics.h"
#include "common/wire/rpc_client.h"
#include "common/wire/rpc_server.h"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Raw baseline: a ROUTER thread that echoes every message as it arrived.
class RawEchoServer {
 public:
  explicit RawEchoServer(zmq::context_t* ctx) : socket_(*ctx, zmq::socket_type::router) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::sndhwm, 20000);
    socket_.set(zmq::sockopt::rcvhwm, 20000);
    socket_.bind("tcp://127.0.0.1:0");
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this] { Loop(); });
  }
  ~RawEchoServer() {
    stop_ = true;
    thread_.join();
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  void Loop() {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    while (!stop_) {
      zmq::poll(&item, 1, milliseconds(50));
      if (!(item.revents & ZMQ_POLLIN)) continue;
      std::vector<zmq::message_t> parts;
      for (;;) {
        zmq::message_t m;
        if (!socket_.recv(m, zmq::recv_flags::dontwait)) break;
        bool more = m.more();
        parts.push_back(std::move(m));
        if (!more) {
          for (size_t i = 0; i < parts.size(); ++i)
            socket_.send(parts[i],
                         i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
          parts.clear();
        }
      }
    }
  }
  zmq::socket_t socket_;
  std::string endpoint_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
};

// Raw ping-pong: round trips per second with one 64-byte message outstanding.
double RawRoundTrips(zmq::context_t* ctx, const std::string& ep, int n) {
  zmq::socket_t s(*ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.connect(ep);
  char payload[64] = {};
  zmq::message_t warm(payload, 64);
  s.send(warm, zmq::send_flags::none);
  zmq::message_t r;
  (void)s.recv(r);
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    zmq::message_t m(payload, 64);
    s.send(m, zmq::send_flags::none);
    (void)s.recv(r);
  }
  return n / std::chrono::duration<double>(Clock::now() - t0).count();
}

// Raw bulk: `n` payloads of `bytes` echoed back with `window` in flight; MB/s of payload one way.
double RawBulk(zmq::context_t* ctx, const std::string& ep, size_t bytes, int n, int window) {
  zmq::socket_t s(*ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.connect(ep);
  std::vector<char> payload(bytes, 7);
  char header[128] = {};
  auto send_one = [&] {
    zmq::message_t h(header, sizeof(header));
    s.send(h, zmq::send_flags::sndmore);
    zmq::message_t p(payload.data(), payload.size(), nullptr, nullptr);  // no copy, as tandem
    s.send(p, zmq::send_flags::none);
  };
  auto recv_one = [&] {
    zmq::message_t m;
    do {
      (void)s.recv(m);
    } while (m.more());
  };
  send_one();
  recv_one();
  auto t0 = Clock::now();
  int sent = 0, got = 0;
  while (got < n) {
    while (sent < n && sent - got < window) {
      send_one();
      ++sent;
    }
    recv_one();
    ++got;
  }
  return bytes * double(n) / 1e6 / std::chrono::duration<double>(Clock::now() - t0).count();
}

wire::Identity Me() {
  wire::Identity id;
  id.job_id = {1, 1};
  id.role = wire::Role::WORKER;
  return id;
}

double TandemRoundTrips(zmq::context_t* ctx, const std::string& ep, int n) {
  wire::RpcClient client(ctx, Me());
  int h = *client.Connect(ep);
  (void)wire::Ping(&client, h, milliseconds(5000));
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    wire::OutMessage m;
    m.envelope().getBody().initEcho();
    auto r = client.Call(h, std::move(m), milliseconds(5000));
    if (!r.ok()) std::abort();
  }
  return n / std::chrono::duration<double>(Clock::now() - t0).count();
}

double TandemBulk(zmq::context_t* ctx, const std::string& ep, size_t bytes, int n, int window) {
  wire::RpcClient client(ctx, Me());
  int h = *client.Connect(ep);
  (void)wire::Ping(&client, h, milliseconds(5000));
  std::vector<char> payload(bytes, 7);
  auto send_one = [&] {
    wire::OutMessage m;
    m.envelope().getBody().initEcho();
    // Like the raw baseline, the frame points at the caller's buffer: no copy on either side.
    m.AddBulk(zmq::message_t(payload.data(), payload.size(), nullptr, nullptr));
    return *client.Send(h, std::move(m), milliseconds(30000));
  };
  std::vector<uint64_t> inflight;
  int sent = 0, got = 0;
  auto t0 = Clock::now();
  while (got < n) {
    while (sent < n && static_cast<int>(inflight.size()) < window) {
      inflight.push_back(send_one());
      ++sent;
    }
    auto r = client.Wait(inflight.front(), Clock::now() + milliseconds(30000));
    if (!r.ok() || r->bulk(0).size() != bytes) std::abort();
    inflight.erase(inflight.begin());
    ++got;
  }
  return bytes * double(n) / 1e6 / std::chrono::duration<double>(Clock::now() - t0).count();
}

int Main() {
  // Servers and clients get a context (and so a ZeroMQ I/O thread) each, as separate processes
  // would; with one shared context, which sockets share an I/O thread varies from run to run
  // and decided the result more than the code did.
  zmq::context_t server_ctx(1);
  zmq::context_t ctx(1);
  RawEchoServer raw(&server_ctx);
  wire::Identity server_id = Me();
  server_id.role = wire::Role::PS;
  wire::ServerOptions options;
  options.lanes = {wire::LaneOptions{"echo", 1}};
  wire::RpcServer server(&server_ctx, options, server_id);
  wire::RegisterDiagnostics(&server, 0);
  if (!server.Start().ok()) return 1;

  constexpr int kRuns = 7;
  std::vector<double> raw_rt, t_rt, raw_1m, t_1m, raw_16m, t_16m;
  for (int run = 0; run < kRuns; ++run) {
    raw_rt.push_back(RawRoundTrips(&ctx, raw.endpoint(), 3000));
    t_rt.push_back(TandemRoundTrips(&ctx, server.endpoint(), 3000));
    raw_1m.push_back(RawBulk(&ctx, raw.endpoint(), 1 << 20, 200, 4));
    t_1m.push_back(TandemBulk(&ctx, server.endpoint(), 1 << 20, 200, 4));
    raw_16m.push_back(RawBulk(&ctx, raw.endpoint(), 16 << 20, 60, 2));
    t_16m.push_back(TandemBulk(&ctx, server.endpoint(), 16 << 20, 60, 2));
  }
  PrintFigure("rpc_small_round_trips", Median(t_rt), "round_trips/s", true,
              "raw zeromq dealer/router ping-pong, 64 B", Median(raw_rt));
  PrintFigure("rpc_bulk_1MiB", Median(t_1m), "MB/s", true, "raw zeromq echo, 1 MiB frames",
              Median(raw_1m));
  PrintFigure("rpc_bulk_16MiB", Median(t_16m), "MB/s", true, "raw zeromq echo, 16 MiB frames",
              Median(raw_16m));
  server.Stop();
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main() { return tandem::bench::Main(); }
