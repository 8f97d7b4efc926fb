@0xd3c6bcf2a8efa241;
# Every message between tandem processes is one Envelope frame followed by raw bulk frames
# (keys, rows, gradients as little-endian arrays) whose byte sizes the envelope declares.
# Never renumber or reuse an ordinal; rename dead fields obsoleteX (STYLE §9).

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tandem::wire");

using Ps = import "ps.capnp";
using Chief = import "chief.capnp";
using Worker = import "worker.capnp";
using Role = import "role.capnp".Role;

# The identities of PROTOCOLS §1, carried by every request and echoed on replies.
struct Header {
  jobIdHi @0 :UInt64;      # 128-bit job id, high half
  jobIdLo @1 :UInt64;      # low half
  term @2 :UInt64;         # the chief's term the sender knows
  timeline @3 :UInt64;     # raised by every global rollback
  generation @4 :UInt64;   # raised when a worker is lost and when all are present again
  senderRole @5 :Role;
  senderIndex @6 :UInt32;
  incarnation @7 :UInt64;  # the sender's incarnation, issued by the chief
  buildId @8 :Text;        # version + git commit
  requestId @9 :UInt64;    # unique per sender; replies echo it
  budgetMs @10 :UInt32;    # relative time budget stamped at send time; 0 = none
}

enum ReplyCode {
  ok @0;
  stale @1;          # sender's timeline/generation/incarnation is behind; see `view`
  retry @2;          # receiver has not heard of the newer view yet; resend after back-off
  notReady @3;       # a parked request whose budget is nearly spent; simply send it again
  wrongJob @4;       # another job's process
  invalid @5;        # validation failed; `message` says why
  unimplemented @6;  # the body is unknown here; `unimplementedTag` echoes it
  overloaded @7;     # the receiver's queue is full; resend after back-off
  internal @8;       # the handler failed; `message` says why
}

# The receiver's view, sent with STALE and RETRY so the sender can catch up.
struct View {
  term @0 :UInt64;
  timeline @1 :UInt64;
  generation @2 :UInt64;
  incarnation @3 :UInt64;  # the receiver's own incarnation
  appliedStep @4 :Int64;   # PS: the highest applied step; -1 if none
}

struct Reply {
  code @0 :ReplyCode;
  message @1 :Text;
  view @2 :View;
  unimplementedTag @3 :UInt16;
}

struct Envelope {
  header @0 :Header;
  bulkSizes @1 :List(UInt64);  # byte size of each raw frame that follows the envelope
  reply @2 :Reply;             # set on replies only
  isReply @3 :Bool;

  body :union {
    none @4 :Void;
    ping @5 :Ping;
    pong @6 :Pong;
    echo @7 :Echo;             # diagnostics: the reply carries the same bulk frames back
    echoReply @8 :Echo;

    pullRequest @9 :Ps.PullRequest;
    pullReply @10 :Ps.PullReply;
    pushRequest @11 :Ps.PushRequest;
    pushReply @12 :Ps.PushReply;

    registerRequest @13 :Chief.RegisterRequest;
    registerReply @14 :Chief.RegisterReply;
    heartbeat @15 :Chief.Heartbeat;
    heartbeatReply @16 :Chief.HeartbeatReply;
    clusterStatusRequest @17 :Chief.ClusterStatusRequest;
    clusterStatusReply @18 :Chief.ClusterStatusReply;

    probe @19 :Worker.Probe;
    probeReply @20 :Worker.ProbeReply;
    denseStateRequest @21 :Worker.DenseStateRequest;
    denseStateReply @22 :Worker.DenseStateReply;

    barrierRequest @23 :Chief.BarrierRequest;
    barrierReply @24 :Chief.BarrierReply;
    kvSet @25 :Chief.KvSet;
    kvSetReply @26 :Chief.KvSetReply;
    kvGet @27 :Chief.KvGet;
    kvGetReply @28 :Chief.KvGetReply;
    stopJobRequest @29 :Chief.StopJobRequest;
    stopJobReply @30 :Chief.StopJobReply;
    checksumRequest @31 :Ps.ChecksumRequest;
    checksumReply @32 :Ps.ChecksumReply;
    checkpointPartRequest @33 :Ps.CheckpointPartRequest;
    checkpointPartReply @34 :Ps.CheckpointPartReply;
    commitCheckpointRequest @35 :Chief.CommitCheckpointRequest;
    commitCheckpointReply @36 :Chief.CommitCheckpointReply;
    regroupRequest @37 :Chief.RegroupRequest;
    regroupReply @38 :Chief.RegroupReply;
  }
}

struct Ping {
  payload @0 :Data;  # small opaque bytes echoed in Pong
}

struct Pong {
  role @0 :Role;
  index @1 :UInt32;
  incarnation @2 :UInt64;
  buildId @3 :Text;
  pid @4 :UInt32;
  uptimeMs @5 :UInt64;
  payload @6 :Data;
  generation @7 :UInt64;
}

struct Echo {
  note @0 :Text;
}
