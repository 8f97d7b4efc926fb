// The harness's own promises, checked with plain TCP sockets made inside the hosts' namespaces:
// Cut and Block stall an established connection without resetting it, Heal and Unblock resume
// it, and Block leaves the other hosts connected (cli/netns.h). The partition tests rely on all of
// them.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "cli/netns.h"

namespace tandem::testing {
namespace {

using cli::HostNetwork;

using std::chrono::milliseconds;
constexpr uint16_t kPort = 9000;

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// A TCP socket of `host`'s namespace. setns changes only the calling thread's namespace, so it
// is made on a thread of its own; the socket stays in that namespace for good.
Fd SocketOn(const HostNetwork& net, int host) {
  int fd = -1;
  std::thread([&] {
    const int ns = ::open(("/var/run/netns/" + net.Namespace(host)).c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0) return;
    if (::setns(ns, CLONE_NEWNET) == 0) fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ::close(ns);
  }).join();
  return Fd(fd);
}

// `host`'s address on eth0, or with `fabric` on eth1.
sockaddr_in Address(const HostNetwork& net, int host, bool fabric = false) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(kPort);
  ::inet_pton(AF_INET, (fabric ? net.FabricAddress(host) : net.Address(host)).c_str(), &a.sin_addr);
  return a;
}

int ConnectTo(const Fd& s, const sockaddr_in& a) {
  return ::connect(s.get(), reinterpret_cast<const sockaddr*>(&a), sizeof(a));
}

bool Readable(const Fd& fd, milliseconds timeout) {
  pollfd p{fd.get(), POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(timeout.count())) == 1 && (p.revents & POLLIN);
}

// One byte sent on `from` has arrived on `to` within `timeout` (it stays queued otherwise).
bool Send(const Fd& from) { return ::send(from.get(), "x", 1, MSG_NOSIGNAL) == 1; }
bool Arrived(const Fd& to, milliseconds timeout) {
  char c;
  return Readable(to, timeout) && ::recv(to.get(), &c, 1, 0) == 1;
}

int SocketError(const Fd& fd) {
  int err = 0;
  socklen_t len = sizeof(err);
  ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  return err;
}

class HostNetworkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto net = HostNetwork::Create(HostNetwork::OwnPrefix(), "198.18.0", 3,
                                   /*attach_caller=*/false, /*fabric=*/"198.18.1");
    ASSERT_TRUE(net.ok()) << net.status().message();
    net_ = std::move(net).value();
    for (bool fabric : {false, true}) {
      Fd& l = fabric ? fabric_listener_ : listener_;
      l = SocketOn(*net_, 0);
      ASSERT_GE(l.get(), 0);
      const sockaddr_in a = Address(*net_, 0, fabric);
      ASSERT_EQ(::bind(l.get(), reinterpret_cast<const sockaddr*>(&a), sizeof(a)), 0);
      ASSERT_EQ(::listen(l.get(), 16), 0);
    }
  }

  // A connection from `host` to host 0 (on eth1 with `fabric`): {client end, server end}.
  std::pair<Fd, Fd> Connect(int host, bool fabric = false) {
    const Fd& l = fabric ? fabric_listener_ : listener_;
    Fd c = SocketOn(*net_, host);
    EXPECT_EQ(ConnectTo(c, Address(*net_, 0, fabric)), 0) << strerror(errno);
    EXPECT_TRUE(Readable(l, milliseconds(2000)));
    return {std::move(c), Fd(::accept4(l.get(), nullptr, nullptr, SOCK_CLOEXEC))};
  }

  // An established connection from host 2 stalls under `fault`, is not reset, and carries
  // the queued byte and new ones once `repair` ran.
  void ExpectStallThenResume(const std::function<Status()>& fault,
                             const std::function<Status()>& repair) {
    auto [c, s] = Connect(2);
    ASSERT_TRUE(Send(c) && Arrived(s, milliseconds(2000)));
    ASSERT_TRUE(fault().ok());
    ASSERT_TRUE(Send(c));
    EXPECT_FALSE(Arrived(s, milliseconds(800))) << "a byte crossed the fault";
    ASSERT_TRUE(repair().ok());
    EXPECT_TRUE(Arrived(s, milliseconds(5000))) << "the queued byte never arrived";
    EXPECT_TRUE(Send(s) && Arrived(c, milliseconds(5000)));
    EXPECT_EQ(SocketError(c), 0);
    EXPECT_EQ(SocketError(s), 0);
  }

  std::unique_ptr<HostNetwork> net_;
  Fd listener_, fabric_listener_;
};

TEST_F(HostNetworkTest, CutStallsAnEstablishedConnectionAndHealResumesIt) {
  ExpectStallThenResume([&] { return net_->Cut(2); }, [&] { return net_->Heal(2); });
}

TEST_F(HostNetworkTest, BlockStallsTheConnectionSilentlyAndSparesTheOtherHosts) {
  ExpectStallThenResume(
      [&] {
        Status s = net_->Block(0, 2);
        // While blocked: host 1 still reaches host 0, and host 2's new connect hangs.
        auto [c1, s1] = Connect(1);
        EXPECT_TRUE(Send(c1) && Arrived(s1, milliseconds(2000)));
        Fd n = SocketOn(*net_, 2);
        ::fcntl(n.get(), F_SETFL, O_NONBLOCK);
        EXPECT_EQ(ConnectTo(n, Address(*net_, 0)), -1);
        EXPECT_EQ(errno, EINPROGRESS);
        pollfd p{n.get(), POLLOUT, 0};
        EXPECT_EQ(::poll(&p, 1, 500), 0) << "a connect went through the partition";
        return s;
      },
      [&] { return net_->Unblock(0, 2); });
}

// The collective network fails alone: host 2's connection to host 0 over eth1 stalls, the one
// over eth0 between the same hosts keeps flowing; both resume or stay whole after the repair.
TEST_F(HostNetworkTest, BlockFabricStallsTheFabricAloneAndUnblockResumesIt) {
  auto [c, s] = Connect(2, /*fabric=*/true);
  auto [c0, s0] = Connect(2);
  ASSERT_TRUE(Send(c) && Arrived(s, milliseconds(2000)));
  ASSERT_TRUE(net_->BlockFabric(0, 2).ok());
  ASSERT_TRUE(Send(c));
  EXPECT_FALSE(Arrived(s, milliseconds(800))) << "a byte crossed the fabric's partition";
  EXPECT_TRUE(Send(c0) && Arrived(s0, milliseconds(2000))) << "eth0 was cut with the fabric";
  ASSERT_TRUE(net_->UnblockFabric(0, 2).ok());
  EXPECT_TRUE(Arrived(s, milliseconds(5000))) << "the queued byte never arrived";
  EXPECT_EQ(SocketError(c), 0);
  EXPECT_EQ(SocketError(c0), 0);
}

TEST_F(HostNetworkTest, BadArgumentsAreErrors) {
  EXPECT_FALSE(net_->Cut(3).ok());
  EXPECT_FALSE(net_->Block(1, 1).ok());
  EXPECT_FALSE(net_->Unblock(0, 1).ok());
  EXPECT_FALSE(net_->BlockFabric(2, 2).ok());
}

}  // namespace
}  // namespace tandem::testing
