// Hosts as Linux network namespaces on one bridge, for network faults on one machine: `tandem
// local --netns` (and so `tandem drill` with partition and flap faults) and the multi-host tests
// (tests/hosts/). Host i is the namespace PREFIX-i with one interface, eth0, at SUBNET.(i+1)/24,
// whose peer is a port of the bridge PREFIX-br; the bridge sits in the calling (root) namespace
// with SUBNET.254, so the supervisor there reaches every host as a router would.
//
// Faults, each what a real network does to TCP:
//   Cut(i)      the host's bridge port goes down: its packets are dropped both ways, its
//               connections stall and retransmit, and resume when Heal(i) brings it back (a
//               pulled cable or a switch reboot);
//   Block(i,j)  blackhole routes for each other's address in both namespaces: i and j cannot
//               exchange a packet while both still reach everyone else.
// Needs root (CAP_NET_ADMIN) and iproute2's `ip`. The addresses are from RFC 2544's benchmarking
// range (198.18.0.0/15), never routed anywhere. The destructor removes every namespace and link
// it created, by name; Create first removes what a crashed earlier owner of the same prefix left.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::cli {

class HostNetwork {
 public:
  // `prefix`: at most 9 characters (interface names are at most 15), e.g. "tnd12345".
  // `subnet`: three octets, e.g. "198.19.7". kFailedPrecondition naming the command and its
  // error when namespaces cannot be made (not root, no `ip`).
  static StatusOr<std::unique_ptr<HostNetwork>> Create(const std::string& prefix,
                                                       const std::string& subnet, int hosts);
  ~HostNetwork();
  HostNetwork(const HostNetwork&) = delete;
  HostNetwork& operator=(const HostNetwork&) = delete;

  int hosts() const { return hosts_; }
  std::string Address(int host) const;    // "198.19.7.1"
  std::string Namespace(int host) const;  // "tnd12345-0"
  std::string Link(int host) const;       // the bridge port of the host, in the root namespace
  std::string Bridge() const { return prefix_ + "-br"; }
  // The command prefix that runs a program on the host: {"ip", "netns", "exec", NAME}. `ip netns
  // exec` executes the program in place, so its PID is the program's.
  std::vector<std::string> Exec(int host) const;

  Status Cut(int host);
  Status Heal(int host);
  Status Block(int a, int b);
  Status Unblock(int a, int b);

  // Removes every namespace and link named with `prefix` (a crashed owner's leftovers).
  static void RemoveAll(const std::string& prefix);

 private:
  HostNetwork(std::string prefix, std::string subnet, int hosts)
      : prefix_(std::move(prefix)), subnet_(std::move(subnet)), hosts_(hosts) {}
  Status Build();

  const std::string prefix_, subnet_;
  const int hosts_;
};

// Runs `ip ARGS...`; kFailedPrecondition with the command and what it printed when it fails.
Status RunIp(const std::vector<std::string>& args);

}  // namespace tandem::cli
