@0xa121b264a80fd648;
# Parameter-server service (DESIGN §3-§4, PROTOCOLS §2-§6). Ids, rows and gradients travel as
# raw bulk frames; these structs say which frame holds what.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("tandem::wire");

# One table's part of a pull or push: `count` ids in bulk frame `idsFrame` (u64 LE) and, for
# rows or gradients, count x dim values from bulk frame `valuesFrame` on (f32 LE).
struct TableSlice {
  tableId @0 :UInt32;
  count @1 :UInt32;
  dim @2 :UInt32;
  idsFrame @3 :UInt16;
  valuesFrame @4 :UInt16;
  # How the values frame holds its values (common/wire_precision.h): 0 fp32, 1 bf16, 2 fp16
  # (ps.wire_precision; the PS keeps fp32 state).
  precision @5 :UInt8;
  # The values may continue in the frames after `valuesFrame`: `valuesFrames` frames in all
  # (0 reads as 1), each holding whole rows, in id order. Pull replies split a table's rows
  # into frames of about 256 KiB: libzmq (CURVE above all) moves many such frames far faster
  # than one frame of many MiB (bench/ps_bench.cc curve, procs).
  valuesFrames @6 :UInt16;
}

struct PullRequest {
  step @0 :Int64;            # answered at version step-1 (k = 0) or >= step-1-k
  tables @1 :List(TableSlice);
  fromPreImages @2 :Bool;    # recovery (PROTOCOLS §8): a shard that applied `step` answers
                             # from the pre-images of that apply
  precision @3 :UInt8;       # the rows' wire precision the reply is to use (as TableSlice's)
}

struct PullReply {
  appliedStep @0 :Int64;
  tables @1 :List(TableSlice);
}

struct PushRequest {
  step @0 :Int64;
  rank @1 :UInt32;           # exactly-once key: (timeline, step, rank)
  part @2 :UInt16;           # large pushes split into parts `part` of `parts`
  parts @3 :UInt16 = 1;
  tables @4 :List(TableSlice);
  skip @5 :Bool;             # fp16 overflow: an explicit push that applies nothing
  checkpoint @6 :Bool;       # a checkpoint is taken after this step (PROTOCOLS §3, §7): the
                             # shard cuts a restore point right after applying it and, at
                             # k >= 1, holds back pushes of later steps until it has
}

struct PushReply {
  duplicate @0 :Bool;        # already logged; not applied again
  appliedStep @1 :Int64;
}

# The shard's part of model_checksum (DESIGN §12): every materialised row and admission counter
# once the shard has applied `step`. Answered RETRY (with the view) while it has not.
struct ChecksumRequest {
  step @0 :Int64;
}

struct ChecksumReply {
  high @0 :UInt64;
  low @1 :UInt64;
  appliedStep @2 :Int64;
  rows @3 :UInt64;
}

# A shard's part of checkpoint `step` (PROTOCOLS §7): a restore point after applying `step`,
# copied to the durable copy under checkpoint.dir. Answered RETRY (with the view) until the
# shard has applied `step`; INVALID when it applied a later step without taking the part.
struct CheckpointPartRequest {
  step @0 :Int64;
  retainedSteps @1 :List(Int64);  # the committed checkpoints the chief keeps: the rest of the
                                  # shard's durable pool may be collected
  kind @2 :PartKind;  # full unless it is the job's last checkpoint (checkpoint.final_part)
}

# What a shard may make of a checkpoint part (durable_copy.h): a full part, or a delta of its
# previous full part when that copies less than the full part would, or whenever it can.
enum PartKind {
  full @0;
  deltaIfCheaper @1;
  delta @2;
}

struct CheckpointPartReply {
  step @0 :Int64;
  part @1 :Text;  # JSON: the shard's files (durable_copy.h CheckpointPartToJson)
  # The copy runs in the background (its time grows with the table): while it does, a request
  # is answered at once with copying = true, no part, and how far it has got; the client asks
  # again, without a deadline on the copy as long as the shard answers.
  copying @2 :Bool;
  bytesDone @3 :UInt64;
  bytesTotal @4 :UInt64;
  copyingStep @5 :Int64;  # the step being copied (another one's copy may still be finishing)
}
