#include "cli/netns.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/subprocess.h"

namespace tandem::cli {
namespace {

// Locally administered and never given to a veth (theirs are random): frames sent to it are
// flooded by the bridge and dropped by every host as not theirs.
constexpr char kNobodysMac[] = "02:00:00:00:00:01";

// iproute2's `ip` (Subprocess executes a path, not a name looked up in PATH).
const std::string& IpPath() {
  static const std::string path = [] {
    for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
      if (::access(p, X_OK) == 0) return std::string(p);
    return std::string("ip");
  }();
  return path;
}

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

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

// Kills what still runs in namespace `ns` (by pid, as `ip netns pids` lists them) and removes it.
void RemoveNamespace(const std::string& ns) {
  std::error_code ec;
  if (!std::filesystem::exists("/var/run/netns/" + ns, ec)) return;
  if (auto pids = Run({IpPath(), "netns", "pids", ns}); pids.ok()) {
    std::istringstream in(pids->second);
    for (long pid; in >> pid;)
      if (pid > 1 && pid != ::getpid()) ::kill(static_cast<pid_t>(pid), SIGKILL);
  }
  RunIp({"netns", "del", ns}).IgnoreError();
}

// An owner killed before its destructor ran (a test timeout, kill -9 of `tandem local`) leaves
// its namespaces behind; they are recognised by the dead pid in their name, "tnd<pid>-...".
void RemoveStaleNamespaces() {
  auto list = Run({IpPath(), "netns", "list"});
  if (!list.ok()) return;
  std::istringstream in(list->second);
  for (std::string line; std::getline(in, line);) {
    const std::string ns = line.substr(0, line.find(' '));
    const size_t dash = ns.find('-');
    if (ns.rfind("tnd", 0) != 0 || dash == std::string::npos || dash == 3) continue;
    const std::string pid = ns.substr(3, dash - 3);
    if (!std::all_of(pid.begin(), pid.end(), [](char c) { return std::isdigit(c); })) continue;
    std::error_code ec;
    if (std::filesystem::exists("/proc/" + pid, ec)) continue;
    RemoveNamespace(ns);
    RunIp({"link", "del", ns.substr(0, dash) + "-r"}).IgnoreError();
  }
}

}  // namespace

Status RunIp(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {IpPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = Run(argv);
  if (!r.ok())
    return Status::FailedPrecondition("`" + Join(argv) + "`: " + r.status().ToString() +
                                      " (network namespaces need iproute2's `ip`)");
  if (!r->first.exited() || r->first.exit_code != 0)
    return Status::FailedPrecondition("`" + Join(argv) + "` failed (" + r->first.ToString() +
                                      "): " + Trim(r->second));
  return Status::Ok();
}

Status SetLink(const std::string& link, bool up) {
  const size_t slash = link.find('/');
  if (slash == std::string::npos) return Status::InvalidArgument("bad link '" + link + "'");
  return RunIp(
      {"-n", link.substr(0, slash), "link", "set", link.substr(slash + 1), up ? "up" : "down"});
}

Status SetBlocked(const std::string& a_ns, const std::string& a_ip, const std::string& b_ns,
                  const std::string& b_ip, bool on, const std::string& dev) {
  for (const auto& [ns, peer] : {std::pair{a_ns, b_ip}, std::pair{b_ns, a_ip}}) {
    // A permanent entry is never overwritten by ARP, and replacing the entry in use redirects
    // an established connection's very next segment; deleted, the neighbour is resolved again.
    if (on)
      TANDEM_RETURN_IF_ERROR(RunIp({"-n", ns, "neigh", "replace", peer, "lladdr", kNobodysMac,
                                    "nud", "permanent", "dev", dev}));
    else
      TANDEM_RETURN_IF_ERROR(RunIp({"-n", ns, "neigh", "del", peer, "dev", dev}));
  }
  return Status::Ok();
}

std::string HostNetwork::OwnPrefix() { return "tnd" + std::to_string(::getpid()); }

StatusOr<std::unique_ptr<HostNetwork>> HostNetwork::Create(const std::string& prefix,
                                                           const std::string& subnet, int hosts,
                                                           bool attach_caller,
                                                           const std::string& fabric) {
  if (prefix.empty() || prefix.size() > 12)
    return Status::InvalidArgument("network prefix '" + prefix + "': 1 to 12 characters");
  if (hosts < 1 || hosts > 250)
    return Status::InvalidArgument("network of " + std::to_string(hosts) + " hosts: 1 to 250");
  RemoveStaleNamespaces();
  std::unique_ptr<HostNetwork> net(new HostNetwork(prefix, subnet, hosts, fabric));
  // On an error the destructor removes what was made.
  if (Status s = net->Build(attach_caller); !s.ok())
    return Status::FailedPrecondition(
        "cannot build the hosts' network: network namespaces need root (euid " +
        std::to_string(::geteuid()) + ") and veth and bridge support: " + s.message());
  return net;
}

Status HostNetwork::Build(bool attach_caller) {
  const std::string sw = Switch();
  // Recorded first: a half-made namespace must be removed too.
  created_.push_back(sw);
  TANDEM_RETURN_IF_ERROR(RunIp({"netns", "add", sw}));
  TANDEM_RETURN_IF_ERROR(RunIp({"-n", sw, "link", "set", "lo", "up"}));
  TANDEM_RETURN_IF_ERROR(RunIp({"-n", sw, "link", "add", "br0", "type", "bridge"}));
  TANDEM_RETURN_IF_ERROR(RunIp({"-n", sw, "link", "set", "br0", "up"}));
  if (!fabric_.empty()) {
    TANDEM_RETURN_IF_ERROR(RunIp({"-n", sw, "link", "add", "br1", "type", "bridge"}));
    TANDEM_RETURN_IF_ERROR(RunIp({"-n", sw, "link", "set", "br1", "up"}));
  }
  for (int i = 0; i < hosts_; ++i) {
    const std::string h = Namespace(i);
    created_.push_back(h);
    TANDEM_RETURN_IF_ERROR(RunIp({"netns", "add", h}));
    TANDEM_RETURN_IF_ERROR(RunIp({"-n", h, "link", "set", "lo", "up"}));
    TANDEM_RETURN_IF_ERROR(Cable(i, "eth0", Address(i), "p" + std::to_string(i), "br0"));
    if (!fabric_.empty())
      TANDEM_RETURN_IF_ERROR(Cable(i, "eth1", FabricAddress(i), "q" + std::to_string(i), "br1"));
  }
  if (attach_caller) {
    const std::string root = prefix_ + "-r";
    attached_ = true;
    TANDEM_RETURN_IF_ERROR(
        RunIp({"link", "add", root, "type", "veth", "peer", "name", "up0", "netns", sw}));
    TANDEM_RETURN_IF_ERROR(RunIp({"addr", "add", subnet_ + ".254/24", "dev", root}));
    TANDEM_RETURN_IF_ERROR(RunIp({"link", "set", root, "up"}));
    TANDEM_RETURN_IF_ERROR(RunIp({"-n", sw, "link", "set", "up0", "master", "br0"}));
    TANDEM_RETURN_IF_ERROR(RunIp({"-n", sw, "link", "set", "up0", "up"}));
  }
  return Status::Ok();
}

Status HostNetwork::Cable(int i, const std::string& dev, const std::string& address,
                          const std::string& port, const std::string& bridge) {
  const std::string h = Namespace(i), sw = Switch();
  // The peer is made directly in the switch: no name ever exists in the caller's namespace.
  TANDEM_RETURN_IF_ERROR(
      RunIp({"-n", h, "link", "add", dev, "type", "veth", "peer", "name", port, "netns", sw}));
  TANDEM_RETURN_IF_ERROR(RunIp({"-n", h, "addr", "add", address + "/24", "dev", dev}));
  TANDEM_RETURN_IF_ERROR(RunIp({"-n", h, "link", "set", dev, "up"}));
  TANDEM_RETURN_IF_ERROR(RunIp({"-n", sw, "link", "set", port, "master", bridge}));
  // Without STP the port forwards as soon as it is up.
  return RunIp({"-n", sw, "link", "set", port, "up"});
}

HostNetwork::~HostNetwork() {
  // Hosts before the switch: each host's veth goes with its namespace, the caller's with the
  // switch.
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) RemoveNamespace(*it);
  if (attached_) RunIp({"link", "del", prefix_ + "-r"}).IgnoreError();
}

std::string HostNetwork::Address(int host) const {
  return subnet_ + "." + std::to_string(host + 1);
}

std::string HostNetwork::FabricAddress(int host) const {
  return fabric_.empty() ? std::string() : fabric_ + "." + std::to_string(host + 1);
}

std::vector<std::string> HostNetwork::Exec(int host) const {
  return {IpPath(), "netns", "exec", Namespace(host)};
}

Status HostNetwork::CheckHost(int host) const {
  if (host < 0 || host >= hosts_)
    return Status::InvalidArgument("no host " + std::to_string(host) + " (there are " +
                                   std::to_string(hosts_) + ")");
  return Status::Ok();
}

Status HostNetwork::Cut(int host) {
  TANDEM_RETURN_IF_ERROR(CheckHost(host));
  return SetLink(Link(host), false);
}

Status HostNetwork::Heal(int host) {
  TANDEM_RETURN_IF_ERROR(CheckHost(host));
  return SetLink(Link(host), true);
}

Status HostNetwork::SetPairBlocked(int a, int b, bool fabric, bool on) {
  TANDEM_RETURN_IF_ERROR(CheckHost(a));
  TANDEM_RETURN_IF_ERROR(CheckHost(b));
  if (a == b) return Status::InvalidArgument("a host cannot be partitioned from itself");
  if (!fabric) return SetBlocked(Namespace(a), Address(a), Namespace(b), Address(b), on);
  if (fabric_.empty()) return Status::InvalidArgument("this network has no fabric (eth1)");
  return SetBlocked(Namespace(a), FabricAddress(a), Namespace(b), FabricAddress(b), on, "eth1");
}

Status HostNetwork::Block(int a, int b) { return SetPairBlocked(a, b, false, true); }
Status HostNetwork::Unblock(int a, int b) { return SetPairBlocked(a, b, false, false); }
Status HostNetwork::BlockFabric(int a, int b) { return SetPairBlocked(a, b, true, true); }
Status HostNetwork::UnblockFabric(int a, int b) { return SetPairBlocked(a, b, true, false); }

}  // namespace tandem::cli
