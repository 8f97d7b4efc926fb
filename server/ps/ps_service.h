// The parameter-server shard's RPC service. The foundation answers diagnostics on the lanes the
// shard will use: pushes and pulls on separate lanes (PROTOCOLS §2.3), so that parked pulls can
// never delay a push. The store, optimizers and push log arrive with the PS issue.
#pragma once

#include "common/wire/rpc_server.h"

namespace tandem::ps {

constexpr int kPushLane = 0;
constexpr int kPullLane = 1;

// Lane layout for a shard with `handler_threads` threads in all (at least one per lane).
std::vector<wire::LaneOptions> PsLanes(int handler_threads);

// Registers the shard's handlers on `server`, which must have been built with PsLanes().
void RegisterPsService(wire::RpcServer* server);

}  // namespace tandem::ps
