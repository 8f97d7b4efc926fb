@0xeb677ebe951b959d;
# Worker service: the chief's liveness probes and peers' requests for dense state
# (PROTOCOLS §8, §11).

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tandem::wire");

struct Probe {
  generation @0 :UInt64;
}

struct ProbeReply {
  step @0 :Int64;
}

struct DenseStateRequest {
  step @0 :Int64;  # the step whose dense state is wanted
}

struct DenseStateReply {
  step @0 :Int64;
  checksum @1 :Text;  # tensors follow as bulk frames, one per tensor, in model order
  names @2 :List(Text);
}
