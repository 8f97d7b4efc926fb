#include "cli/netns.h"

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "common/subprocess.h"

namespace tandem::cli {
namespace {

// Runs `argv`, its output kept in a temporary file; returns the exit info and the output.
StatusOr<std::pair<ExitInfo, std::string>> Run(const std::vector<std::string>& argv) {
  char path[] = "/tmp/tandem-netns-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) return Status::Unavailable("cannot create a temporary file for `ip`'s output");
  ::close(fd);
  SpawnOptions o;
  o.argv = argv;
  o.output_path = path;
  auto p = Subprocess::Spawn(o);
  if (!p.ok()) {
    ::unlink(path);
    return p.status();
  }
  auto exit = p->Wait(std::chrono::seconds(30));
  if (!exit) exit = p->Stop(std::chrono::milliseconds(100));
  std::ifstream in(path);
  std::stringstream out;
  out << in.rdbuf();
  ::unlink(path);
  return std::make_pair(*exit, out.str());
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& a : v) s += (s.empty() ? "" : " ") + a;
  return s;
}

// iproute2's `ip` (Subprocess executes a path, not a name looked up in PATH).
const std::string& IpPath() {
  static const std::string path = [] {
    for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
      if (::access(p, X_OK) == 0) return std::string(p);
    return std::string("ip");
  }();
  return path;
}

}  // namespace

Status RunIp(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {IpPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = Run(argv);
  if (!r.ok())
    return Status::FailedPrecondition("`" + Join(argv) + "`: " + r.status().ToString() +
                                      " (network namespaces need iproute2's `ip`)");
  if (!r->first.exited() || r->first.exit_code != 0) {
    std::string out = r->second;
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return Status::FailedPrecondition("`" + Join(argv) + "` failed (" + r->first.ToString() +
                                      "): " + out);
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<HostNetwork>> HostNetwork::Create(const std::string& prefix,
                                                           const std::string& subnet, int hosts) {
  if (prefix.empty() || prefix.size() > 9)
    return Status::InvalidArgument("network prefix '" + prefix + "': 1 to 9 characters");
  if (hosts < 1 || hosts > 250)
    return Status::InvalidArgument("network of " + std::to_string(hosts) + " hosts: 1 to 250");
  std::unique_ptr<HostNetwork> net(new HostNetwork(prefix, subnet, hosts));
  RemoveAll(prefix);
  if (Status s = net->Build(); !s.ok()) {
    // The destructor removes what was made.
    return Status::FailedPrecondition(
        "cannot build the hosts' network (namespaces need root: CAP_NET_ADMIN): " + s.message());
  }
  return net;
}

Status HostNetwork::Build() {
  const std::string br = Bridge();
  TANDEM_RETURN_IF_ERROR(RunIp({"link", "add", br, "type", "bridge"}));
  TANDEM_RETURN_IF_ERROR(RunIp({"addr", "add", subnet_ + ".254/24", "dev", br}));
  TANDEM_RETURN_IF_ERROR(RunIp({"link", "set", br, "up"}));
  for (int i = 0; i < hosts_; ++i) {
    const std::string ns = Namespace(i), port = Link(i), peer = prefix_ + "-e" + std::to_string(i);
    TANDEM_RETURN_IF_ERROR(RunIp({"netns", "add", ns}));
    TANDEM_RETURN_IF_ERROR(RunIp({"link", "add", port, "type", "veth", "peer", "name", peer}));
    TANDEM_RETURN_IF_ERROR(RunIp({"link", "set", peer, "netns", ns}));
    TANDEM_RETURN_IF_ERROR(RunIp({"-n", ns, "link", "set", peer, "name", "eth0"}));
    TANDEM_RETURN_IF_ERROR(RunIp({"-n", ns, "addr", "add", Address(i) + "/24", "dev", "eth0"}));
    TANDEM_RETURN_IF_ERROR(RunIp({"-n", ns, "link", "set", "eth0", "up"}));
    TANDEM_RETURN_IF_ERROR(RunIp({"-n", ns, "link", "set", "lo", "up"}));
    TANDEM_RETURN_IF_ERROR(RunIp({"link", "set", port, "master", br}));
    TANDEM_RETURN_IF_ERROR(RunIp({"link", "set", port, "up"}));
  }
  return Status::Ok();
}

HostNetwork::~HostNetwork() { RemoveAll(prefix_); }

void HostNetwork::RemoveAll(const std::string& prefix) {
  // Namespaces by name (`ip netns list` prints "NAME" or "NAME (id: N)"); deleting one removes
  // its veth pair, the bridge goes last.
  auto r = Run({IpPath(), "netns", "list"});
  if (r.ok()) {
    std::istringstream in(r->second);
    std::string line;
    while (std::getline(in, line)) {
      const std::string name = line.substr(0, line.find(' '));
      if (name.starts_with(prefix + "-")) RunIp({"netns", "del", name}).IgnoreError();
    }
  }
  RunIp({"link", "del", prefix + "-br"}).IgnoreError();
}

std::string HostNetwork::Address(int host) const {
  return subnet_ + "." + std::to_string(host + 1);
}
std::string HostNetwork::Namespace(int host) const { return prefix_ + "-" + std::to_string(host); }
std::string HostNetwork::Link(int host) const { return prefix_ + "-v" + std::to_string(host); }

std::vector<std::string> HostNetwork::Exec(int host) const {
  return {IpPath(), "netns", "exec", Namespace(host)};
}

Status HostNetwork::Cut(int host) { return RunIp({"link", "set", Link(host), "down"}); }
Status HostNetwork::Heal(int host) { return RunIp({"link", "set", Link(host), "up"}); }

Status HostNetwork::Block(int a, int b) {
  TANDEM_RETURN_IF_ERROR(
      RunIp({"-n", Namespace(a), "route", "add", "blackhole", Address(b) + "/32"}));
  return RunIp({"-n", Namespace(b), "route", "add", "blackhole", Address(a) + "/32"});
}

Status HostNetwork::Unblock(int a, int b) {
  Status first = RunIp({"-n", Namespace(a), "route", "del", "blackhole", Address(b) + "/32"});
  Status second = RunIp({"-n", Namespace(b), "route", "del", "blackhole", Address(a) + "/32"});
  return first.ok() ? second : first;
}

}  // namespace tandem::cli
