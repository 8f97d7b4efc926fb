// Hosts as Linux network namespaces on one machine, for network faults that are real to TCP:
// `tandem local --netns` (and so `tandem drill` with partition and flap faults) and the
// multi-host tests (tests/hosts/). A "switch" namespace PREFIX-sw holds a bridge; host i is the
// namespace PREFIX-h<i> whose one interface eth0 (SUBNET.(i+1)/24) is cabled to the switch's
// port p<i> by a veth pair. Interface names live inside those namespaces, so they need no
// prefix. With `attach_caller`, the calling namespace is cabled to the switch too (PREFIX-r,
// SUBNET.254), so a supervisor there reaches every host as a router would.
//
// With a `fabric` subnet, every host also has eth1 (FABRIC.(i+1)/24) on a second bridge: the
// separate network that collective traffic often has (collective.iface: eth1), which fails on
// its own while the hosts still reach the chief and the shards over eth0.
//
// Faults, each what a real network does to TCP:
//   Cut(i)      the switch's port of the host goes down: the host's eth0 loses carrier and every
//               frame to or from it is dropped; connections stall, retransmit and resume after
//               Heal(i) (a pulled cable, a switch reboot);
//   Block(i,j)  in both hosts a permanent neighbour entry sends the other's frames to a MAC
//               address nobody has: the network drops them and neither kernel can tell (sends
//               succeed, a new connect hangs, TCP backs off as on a broken link), while both
//               still reach every other host (a switch ACL, a half-broken link);
//   BlockFabric(i,j), UnblockFabric(i,j)  the same on eth1 only.
// Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2's `ip`. Addresses come from RFC 2544's
// benchmarking range (198.18.0.0/15), never routed anywhere. The destructor kills what still
// runs in its namespaces and removes them by name; Create first removes what an owner that died
// before its destructor ran left behind (recognised by the dead pid in the prefix "tnd<pid>").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::cli {

class HostNetwork {
 public:
  // `prefix`: "tnd<pid>" of the owner. `subnet`: three octets, e.g. "198.18.0". An error names
  // the command that failed and why (kFailedPrecondition: not root, no `ip`, no namespaces).
  static StatusOr<std::unique_ptr<HostNetwork>> Create(const std::string& prefix,
                                                       const std::string& subnet, int hosts,
                                                       bool attach_caller,
                                                       const std::string& fabric = "");
  // The prefix of this process: "tnd<pid>".
  static std::string OwnPrefix();
  ~HostNetwork();
  HostNetwork(const HostNetwork&) = delete;
  HostNetwork& operator=(const HostNetwork&) = delete;

  int hosts() const { return hosts_; }
  std::string Address(int host) const;        // "198.18.0.1" for host 0
  std::string FabricAddress(int host) const;  // on eth1; empty without a fabric
  std::string Namespace(int host) const { return prefix_ + "-h" + std::to_string(host); }
  std::string Switch() const { return prefix_ + "-sw"; }
  // The switch's port of `host` as "NAMESPACE/PORT", what SetLink takes.
  std::string Link(int host) const { return Switch() + "/p" + std::to_string(host); }
  // The argv prefix that runs a program on `host`: `ip netns exec` executes it in place, so a
  // Subprocess's pid is the program's own.
  std::vector<std::string> Exec(int host) const;

  Status Cut(int host);
  Status Heal(int host);
  Status Block(int a, int b);
  Status Unblock(int a, int b);
  Status BlockFabric(int a, int b);
  Status UnblockFabric(int a, int b);

 private:
  HostNetwork(std::string prefix, std::string subnet, int hosts, std::string fabric)
      : prefix_(std::move(prefix)),
        subnet_(std::move(subnet)),
        fabric_(std::move(fabric)),
        hosts_(hosts) {}
  // Host `i`'s interface `dev` with `address`/24, cabled to port `port` of bridge `bridge`.
  Status Cable(int i, const std::string& dev, const std::string& address, const std::string& port,
               const std::string& bridge);
  Status SetPairBlocked(int a, int b, bool fabric, bool on);
  Status Build(bool attach_caller);
  Status CheckHost(int host) const;

  const std::string prefix_, subnet_, fabric_;
  const int hosts_;
  std::vector<std::string> created_;  // namespaces, in creation order
  bool attached_ = false;
};

// Runs `ip ARGS...`; kFailedPrecondition with the command and what it printed when it fails.
Status RunIp(const std::vector<std::string>& args);
// A switch port ("NAMESPACE/PORT", HostNetwork::Link) down or up.
Status SetLink(const std::string& link, bool up);
// The partition of Block between the host in namespace `a_ns` (address `a_ip`) and the one in
// `b_ns` (`b_ip`), made (`on`) or undone, for a caller that holds only their names (the drill).
Status SetBlocked(const std::string& a_ns, const std::string& a_ip, const std::string& b_ns,
                  const std::string& b_ip, bool on, const std::string& dev = "eth0");

}  // namespace tandem::cli
