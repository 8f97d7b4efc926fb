@0xcb0cee7ed883b767;
# A process's role. Its own file: the envelope's header and the chief's cluster view both carry
# it, and chief.capnp cannot import envelope.capnp, which imports it. In C++ the roles are
# config::Role; TOOL and UNKNOWN exist on the wire only (common/wire/identity.h converts).

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tandem::wire");

enum Role {
  unknown @0;
  chief @1;
  ps @2;
  worker @3;
  tool @4;     # a CLI tool (`tandem status`) or a test client
}
