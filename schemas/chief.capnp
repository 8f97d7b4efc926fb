@0xf78818d80c2a1e42;
# Chief service (DESIGN §5, PROTOCOLS §1, §10, §12): registration, heartbeats, barriers, the
# rendezvous store, the cluster view and the job's stop. The sender's role, index, incarnation
# and build id come from the envelope header.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tandem::wire");

using Role = import "role.capnp".Role;

# The states are enums, not text, so that a misspelt one cannot compile; their names are
# common/states.h's. A reader rejects `unknown` (a field a sender did not set) and any number it
# does not know (a newer sender) instead of guessing.

# What a member reports with its heartbeats, and what the chief shows of each member.
enum MemberState {
  unknown @0;
  starting @1;     # shown by the chief: never registered; reported: not started yet
  up @2;           # shown by the chief: registered, no state reported yet
  waiting @3;
  training @4;
  evaluating @5;
  recovering @6;   # a worker rebuilding its all-reduce group
  serving @7;      # a PS
  done @8;
  stopped @9;
  failed @10;
  left @11;
  lost @12;        # shown by the chief only
}

enum JobState {
  unknown @0;
  starting @1;
  training @2;
  stopping @3;
  done @4;
  stopped @5;
  failed @6;
}

struct RegisterRequest {
  address @0 :Text;              # the member's bound ROUTER address ("tcp://host:port")
  configHash @1 :Text;
  determinismClass @2 :Text;
  lastIncarnation @3 :UInt64;    # 0 on first start
  step @4 :Int64;
  timeline @5 :UInt64;
  pid @6 :UInt32;
  host @7 :Text;
}

struct RegisterReply {
  incarnation @0 :UInt64;
  generation @1 :UInt64;
  timeline @2 :UInt64;
  term @3 :UInt64;
  totalSteps @4 :Int64;
  resumeStep @5 :Int64 = -1;     # the committed checkpoint the job resumes from; -1: from scratch
  joinsRunningJob @6 :Bool;      # a new incarnation of a worker lost while the job trained: it
                                 # takes its state from the surviving replicas (PROTOCOLS §8)
  jobStart @7 :Bool;             # this run has not trained yet: every shard starts at resumeStep
}

# A member's progress. Workers report training metrics; PS and tools leave them NaN.
struct Heartbeat {
  step @0 :Int64;
  samplesPerSec @1 :Float64;
  obsoleteState @2 :Text;        # replaced by `state`
  loss @3 :Float64 = nan;
  auc @4 :Float64 = nan;         # the last held-out eval
  logloss @5 :Float64 = nan;
  modelChecksum @6 :Text;        # rank 0, with state done
  detail @7 :Text;               # a failure's reason, or where outputs are
  teacherAuc @8 :Float64 = nan;  # synthetic data: the best achievable AUC
  state @9 :MemberState;
  badLines @10 :Int64;           # a worker: malformed data lines it trained on (skipped) this run
  waitingOn @11 :Text;           # what holds the member now (a full disk); empty when nothing
}

struct HeartbeatReply {
  generation @0 :UInt64;
  timeline @1 :UInt64;
  stop @2 :Bool;                 # the job is asked to stop (SIGTERM, `tandem local` Ctrl-C)
  obsoleteJobState @3 :Text;     # replaced by `jobState`
  term @4 :UInt64;
  jobState @5 :JobState;
}

struct ClusterStatusRequest {}

struct Member {
  obsoleteRole @0 :Text;         # replaced by `role`
  index @1 :UInt32;
  address @2 :Text;
  obsoleteState @3 :Text;        # replaced by `state`
  incarnation @4 :UInt64;
  step @5 :Int64;
  generation @6 :UInt64;
  samplesPerSec @7 :Float64;
  pid @8 :UInt32;
  host @9 :Text;
  lostReason @10 :Text;
  msSinceHeartbeat @11 :Int64;
  determinismClass @12 :Text;
  role @13 :Role;
  state @14 :MemberState;        # up | lost | starting (never registered) | left, or the reported
  badLines @15 :Int64;           # a worker's last reported Heartbeat.badLines
  waitingOn @16 :Text;           # why a member that is up cannot go on (a PS refusing pushes for a
                                 # full disk); empty when nothing holds it
}

struct ClusterStatusReply {
  members @0 :List(Member);
  term @1 :UInt64;
  generation @2 :UInt64;
  timeline @3 :UInt64;
  lastCheckpointStep @4 :Int64;
  samplesPerSec @5 :Float64;     # global: the sum over workers
  obsoleteJobState @6 :Text;     # replaced by `jobState`
  step @7 :Int64;                # the lowest step among workers
  totalSteps @8 :Int64;
  loss @9 :Float64;              # rank 0's last global-batch loss
  auc @10 :Float64;              # the last held-out eval
  logloss @11 :Float64;
  modelChecksum @12 :Text;       # once done
  detail @13 :Text;              # why the job stopped or failed; where outputs are
  elapsedMs @14 :Int64;          # since every member first registered
  configHash @15 :Text;
  teacherAuc @16 :Float64;
  resumeStep @17 :Int64 = -1;    # the committed checkpoint the job resumes from; -1: from scratch
  generationPending @18 :Bool;   # a worker was lost: the generation rises again once every rank
                                 # is back and heard from (an all-reduce group waits for that)
  jobState @19 :JobState;
  badLines @20 :Int64;           # malformed data lines skipped: the sum over workers
  rejoinPending @21 :Bool;       # a restarted chief waits to learn whether the run goes on (a
                                 # survivor came back) or starts over from resumeStep
}

# Named barrier: answered once `count` distinct (role, index) have entered `name`; parked until
# then and answered NOT_READY near its budget (the client sends it again).
struct BarrierRequest {
  name @0 :Text;
  count @1 :UInt32;
}

struct BarrierReply {}

# The rendezvous store of the collectives (Gloo's key/value store, the NCCL unique id).
struct KvSet {
  key @0 :Text;
  value @1 :Data;
}

struct KvSetReply {}

struct KvGet {
  key @0 :Text;
}

struct KvGetReply {
  found @0 :Bool;
  value @1 :Data;
}

struct StopJobRequest {
  reason @0 :Text;
}

struct StopJobReply {
  obsoleteJobState @0 :Text;     # replaced by `jobState`
  jobState @1 :JobState;
}

# Worker rank 0 hands the chief every part of checkpoint `step`; the chief writes the manifest
# and moves LATEST (PROTOCOLS §7). Training does not wait for the answer beyond its budget.
struct CommitCheckpointRequest {
  step @0 :Int64;
  parts @1 :List(Text);          # JSON each: {"name", "files": [{path, size, crc32c}], "detail"}
  determinismClass @2 :Text;
}

struct CommitCheckpointReply {
  committedStep @0 :Int64;
  retainedSteps @1 :List(Int64);  # after this commit (checkpoint.keep)
}

# A worker whose all-reduce group failed although the chief declared nobody lost and every
# worker has heartbeated since (two workers cut off from each other, not from the chief): the
# chief opens a new generation in which every worker rebuilds the group and the replicas resync
# (PROTOCOLS §11). Idempotent: the generation rises only while it still is `generation`, so the
# workers of one failed group cause one rise between them.
struct RegroupRequest {
  generation @0 :UInt64;         # the generation of the group that failed
  reason @1 :Text;               # the failed op, for the chief's log
}

struct RegroupReply {
  generation @0 :UInt64;         # the chief's generation after the request
  raised @1 :Bool;               # whether this request raised it
  whyNot @2 :Text;               # not raised and not moved on: what stands in the way
}
