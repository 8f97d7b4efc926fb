@0xf78818d80c2a1e42;
# Chief service (DESIGN §5, PROTOCOLS §1, §10, §12): registration, heartbeats, cluster view.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tandem::wire");

struct RegisterRequest {
  address @0 :Text;              # the member's bound ROUTER address
  configHash @1 :Text;
  determinismClass @2 :Text;
  lastIncarnation @3 :UInt64;    # 0 on first start
  step @4 :Int64;
  timeline @5 :UInt64;
}

struct RegisterReply {
  incarnation @0 :UInt64;
  generation @1 :UInt64;
  timeline @2 :UInt64;
  term @3 :UInt64;
}

struct Heartbeat {
  step @0 :Int64;
  samplesPerSec @1 :Float64;
}

struct HeartbeatReply {
  generation @0 :UInt64;
  timeline @1 :UInt64;
}

struct ClusterStatusRequest {}

struct Member {
  role @0 :Text;
  index @1 :UInt32;
  address @2 :Text;
  state @3 :Text;      # up | lost | starting
  incarnation @4 :UInt64;
  step @5 :Int64;
  generation @6 :UInt64;
}

struct ClusterStatusReply {
  members @0 :List(Member);
  term @1 :UInt64;
  generation @2 :UInt64;
  timeline @3 :UInt64;
  lastCheckpointStep @4 :Int64;
  samplesPerSec @5 :Float64;
}
