// CURVE authentication and the per-server connection and per-client in-flight limits, in
// process over loopback. Every refusal must leave the handler untouched: nothing a refused client
// sends reaches server code.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/testing/test_util.h"
#include "common/wire/curve_keys.h"
#include "common/wire/rpc_client.h"
#include "common/wire/rpc_server.h"

namespace tandem::wire {
namespace {

using std::chrono::milliseconds;

constexpr JobId kJob{0x5ec, 0x0de};

Identity Id(Role role) {
  Identity id;
  id.job_id = kJob;
  id.role = role;
  return id;
}

OutMessage Echo() {
  OutMessage m;
  m.envelope().getBody().initEcho().setNote("x");
  return m;
}

template <typename F>
bool WaitFor(F done, milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

CurveKeys NewKeys() {
  auto k = GenerateCurveKeys();
  EXPECT_TRUE(k.ok()) << k.status();
  return *k;
}

class CurveTest : public ::testing::Test {
 protected:
  void StartServer(ServerOptions options) {
    server_ = std::make_unique<RpcServer>(&context_, std::move(options), Id(Role::PS));
    server_->Handle(Envelope::Body::ECHO, 0, [this](InMessage&, Responder r) {
      handled_++;
      r.Send(r.NewReply());
    });
    ASSERT_TRUE(server_->Start().ok());
  }
  // The reply's status, or the transport's (kUnavailable when no handshake completed).
  Status CallWith(ClientOptions options, milliseconds budget = milliseconds(800)) {
    RpcClient client(&context_, Id(Role::WORKER), std::move(options));
    auto h = client.Connect(server_->endpoint());
    if (!h.ok()) return h.status();
    auto reply = client.Call(*h, Echo(), budget);
    if (!reply.ok()) return reply.status();
    return ReplyStatus(*reply);
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  zmq::context_t context_{1};
  std::unique_ptr<RpcServer> server_;
  std::atomic<int> handled_{0};
};

TEST_F(CurveTest, OnlyClientsHoldingTheClusterKeysAreServed) {
  const CurveKeys cluster = NewKeys();
  ServerOptions so;
  so.curve = cluster;
  StartServer(so);

  ClientOptions with_keys;
  with_keys.curve = cluster;
  EXPECT_TRUE(CallWith(with_keys).ok());
  EXPECT_EQ(handled_.load(), 1);

  // No keys at all: the NULL mechanism never completes a handshake with a CURVE server.
  Status none = CallWith(ClientOptions{});
  EXPECT_TRUE(none.IsUnavailable()) << none;
  // Another cluster's keys: its idea of the server key is wrong, the HELLO does not open.
  ClientOptions other;
  other.curve = NewKeys();
  Status wrong = CallWith(other);
  EXPECT_TRUE(wrong.IsUnavailable()) << wrong;
  // Knows the server's public key (it is not secret) but not the cluster's secret key: the
  // handshake is cryptographically fine and the ZAP handler refuses the client key.
  ClientOptions public_only;
  public_only.curve = NewKeys();
  public_only.curve_server_key = cluster.public_key;
  Status refused = CallWith(public_only);
  EXPECT_TRUE(refused.IsUnavailable()) << refused;

  EXPECT_EQ(handled_.load(), 1) << "a refused client reached the handler";
  const ServerStats s = server_->stats();
  EXPECT_GE(s.refused_key, 1u);
  EXPECT_GE(s.refused_handshakes, 3u);  // each client above, at least once (they retry)
  EXPECT_EQ(s.received, 1u);
  // Still serving the cluster after the refusals.
  EXPECT_TRUE(CallWith(with_keys).ok());
  EXPECT_EQ(handled_.load(), 2);
  // Refused handshakes do not hold places: with every client gone, no connection is counted
  // (otherwise a client retrying without keys would fill max_connections for everyone).
  EXPECT_TRUE(WaitFor([&] { return server_->stats().connections == 0; }, milliseconds(3000)))
      << server_->stats().connections;
}

TEST_F(CurveTest, AServerWithoutKeysRefusesCurveClientsAndServesPlainOnes) {
  StartServer(ServerOptions{});
  ClientOptions keyed;
  keyed.curve = NewKeys();
  EXPECT_TRUE(CallWith(keyed).IsUnavailable());
  EXPECT_TRUE(CallWith(ClientOptions{}).ok());
  EXPECT_EQ(handled_.load(), 1);
  EXPECT_GE(server_->stats().refused_handshakes, 1u);
}

TEST_F(CurveTest, ConnectionsBeyondTheLimitAreRefusedAtTheirHandshake) {
  ServerOptions so;
  so.max_connections = 2;
  StartServer(so);
  std::vector<std::unique_ptr<RpcClient>> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(std::make_unique<RpcClient>(&context_, Id(Role::WORKER)));
    auto h = held.back()->Connect(server_->endpoint());
    ASSERT_TRUE(h.ok());
    auto r = held.back()->Call(*h, Echo(), milliseconds(2000));
    ASSERT_TRUE(r.ok()) << r.status();
  }
  ASSERT_TRUE(WaitFor([&] { return server_->stats().connections == 2; }, milliseconds(2000)));
  Status third = CallWith(ClientOptions{});
  EXPECT_TRUE(third.IsUnavailable()) << third;
  EXPECT_GE(server_->stats().refused_connection_limit, 1u);
  EXPECT_EQ(handled_.load(), 2);
  // A connection that goes away frees its place, and a client that was refused gets it: libzmq
  // never retries a refused handshake, so RpcClient opens a new socket after a silent budget.
  RpcClient refused(&context_, Id(Role::WORKER));
  const int rh = *refused.Connect(server_->endpoint());
  EXPECT_FALSE(refused.Call(rh, Echo(), milliseconds(800)).ok());
  held.pop_back();
  ASSERT_TRUE(WaitFor([&] { return server_->stats().connections == 1; }, milliseconds(2000)));
  auto retried = refused.Call(rh, Echo(), milliseconds(3000));
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(retried->reply_code(), ReplyCode::OK);
  held.clear();
  ASSERT_TRUE(WaitFor([&] { return server_->stats().connections == 1; }, milliseconds(2000)));
  EXPECT_TRUE(CallWith(ClientOptions{}, milliseconds(3000)).ok());
}

TEST(CurveInFlight, OneClientCannotHoldMoreThanItsShareOfRequests) {
  zmq::context_t context(1);
  ServerOptions so;
  so.max_in_flight_per_client = 2;
  RpcServer server(&context, so, Id(Role::PS));
  Mutex mu;
  std::vector<Responder> parked;  // held like parked pulls
  server.Handle(Envelope::Body::ECHO, 0, [&](InMessage&, Responder r) {
    MutexLock lock(&mu);
    parked.push_back(std::move(r));
  });
  ASSERT_TRUE(server.Start().ok());
  RpcClient greedy(&context, Id(Role::WORKER));
  const int h = *greedy.Connect(server.endpoint());
  auto a = greedy.Send(h, Echo(), milliseconds(3000));
  auto b = greedy.Send(h, Echo(), milliseconds(3000));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        MutexLock lock(&mu);
        return parked.size() == 2;
      },
      milliseconds(2000)));
  auto third = greedy.Call(h, Echo(), milliseconds(2000));
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->reply_code(), ReplyCode::OVERLOADED);
  EXPECT_EQ(server.stats().client_in_flight_limit, 1u);

  // Another client is not affected by the greedy one.
  RpcClient other(&context, Id(Role::WORKER));
  const int h2 = *other.Connect(server.endpoint());
  auto sent = other.Send(h2, Echo(), milliseconds(3000));
  ASSERT_TRUE(sent.ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        MutexLock lock(&mu);
        return parked.size() == 3;
      },
      milliseconds(2000)));
  // Answering frees the greedy client's places.
  {
    MutexLock lock(&mu);
    for (auto& r : parked) r.Send(r.NewReply());
    parked.clear();
  }
  ASSERT_TRUE(greedy.Wait(*a, std::chrono::steady_clock::now() + milliseconds(2000)).ok());
  ASSERT_TRUE(greedy.Wait(*b, std::chrono::steady_clock::now() + milliseconds(2000)).ok());
  std::thread answer([&] {
    for (int i = 0; i < 200; ++i) {
      {
        MutexLock lock(&mu);
        for (auto& r : parked) r.Send(r.NewReply());
        parked.clear();
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
  });
  auto again = greedy.Call(h, Echo(), milliseconds(2000));
  answer.join();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->reply_code(), ReplyCode::OK);
  server.Stop();
}

class CurveKeysFileTest : public ::testing::Test {
 protected:
  testing::TempDir tmp_;
  std::string dir_ = tmp_.path();
};

TEST_F(CurveKeysFileTest, WrittenKeysLoadBackAndAreNeverOverwritten) {
  const CurveKeys keys = NewKeys();
  ASSERT_TRUE(WriteCurveKeys(dir_ + "/k", keys).ok());
  auto loaded = LoadCurveKeys(dir_ + "/k");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, keys);
  struct stat st;
  ASSERT_EQ(::stat((dir_ + "/k/cluster.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  Status again = WriteCurveKeys(dir_ + "/k", NewKeys());
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists) << again;
  EXPECT_EQ(*LoadCurveKeys(dir_ + "/k"), keys);
}

TEST_F(CurveKeysFileTest, MissingLooseOrMismatchedKeysAreRefusedWithTheFileNamed) {
  EXPECT_TRUE(LoadCurveKeys(dir_ + "/none").status().IsInvalidArgument());
  const CurveKeys a = NewKeys(), b = NewKeys();
  ASSERT_TRUE(WriteCurveKeys(dir_ + "/loose", a).ok());
  ::chmod((dir_ + "/loose/cluster.key").c_str(), 0644);
  Status loose = LoadCurveKeys(dir_ + "/loose").status();
  EXPECT_TRUE(loose.IsInvalidArgument());
  EXPECT_NE(loose.message().find("chmod 600"), std::string::npos) << loose;

  ASSERT_TRUE(WriteCurveKeys(dir_ + "/mixed", CurveKeys{a.public_key, b.secret_key}).ok());
  Status mixed = LoadCurveKeys(dir_ + "/mixed").status();
  EXPECT_NE(mixed.message().find("does not belong"), std::string::npos) << mixed;

  std::filesystem::create_directories(dir_ + "/bad");
  {
    std::ofstream f(dir_ + "/bad/cluster.key");
    f << "public short\nsecret " << a.secret_key << "\n";
  }
  ::chmod((dir_ + "/bad/cluster.key").c_str(), 0600);
  Status bad = LoadCurveKeys(dir_ + "/bad").status();
  EXPECT_TRUE(bad.IsInvalidArgument());
  EXPECT_NE(bad.message().find("cluster.key"), std::string::npos) << bad;
}

}  // namespace
}  // namespace tandem::wire
