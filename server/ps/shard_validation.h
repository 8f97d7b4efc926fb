// Validation of pulls and pushes against a shard's options: pure functions of their arguments,
// so that the Shard, the PS service and the message fuzz target (tests/fuzz/) share one check.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "server/ps/shard.h"

namespace tandem::ps {

// Whether all of g[0, dim) are finite (no NaN, no Inf).
bool AllFinite(const float* g, uint32_t dim);

// A pull's table and ids: the table exists, at most max_rows_per_push ids, each owned by this
// shard. kInvalidArgument naming the problem.
Status ValidatePullIds(const ShardOptions& options, uint32_t table, std::span<const uint64_t> ids);

// A push: rank and step in range, each table known, once, with its dim, at most
// max_rows_per_push unique ids owned by this shard and ids x dim gradients (finite under
// NanPolicy::kReject). kInvalidArgument naming the problem. Thread-safe.
Status ValidatePushInput(const ShardOptions& options, const PushInput& push);

}  // namespace tandem::ps
