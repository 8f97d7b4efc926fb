// The part of PsService that reads requests: a decoded pull or push message checked and read
// into the shard's plain types, with no Shard and no sockets. Split out of ps_service.cc so that
// the message fuzz target (tests/fuzz/) links exactly the code the service runs on every request;
// for that reason it includes the generated schema like a *_service.cc (STYLE §1).
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "common/wire/message.h"
#include "server/ps/shard.h"

namespace tandem::ps::internal {

// A table slice's ids from the message's bulk frames: `count` u64 ids in frame `idsFrame`.
// kInvalidArgument naming the table otherwise. `ids` views the message (valid while it lives).
Status SliceIds(wire::InMessage& m, wire::TableSlice::Reader t, std::span<const uint64_t>* ids);

// A pull's table slice, checked against the shard's options: its ids (SliceIds), owned by this
// shard (ValidatePullIds), and its dim when one is given. kInvalidArgument otherwise.
Status ReadPullSlice(wire::InMessage& m, wire::TableSlice::Reader t, const ShardOptions& options,
                     std::span<const uint64_t>* ids);

// A push request read into `in` (views into the message's frames): sent by the worker of its
// rank, in one part, each table's ids and gradients in their frames. kInvalidArgument or
// kUnimplemented (multi-part); `in` is filled as far as it could be read either way. The
// shard's own checks (Shard::Push) come after.
// Gradients sent at bf16/fp16 (ps.wire_precision) are decoded to fp32 into `decoded`, which
// `in` then views (keep it alive with the message).
Status ReadPushRequest(wire::InMessage& m, PushInput* in, std::vector<std::vector<float>>* decoded);

}  // namespace tandem::ps::internal
