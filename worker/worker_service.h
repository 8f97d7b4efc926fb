// The worker's RPC service: answers the chief's probes and, later, peers' requests for dense
// state (PROTOCOLS §8). The foundation answers diagnostics.
#pragma once

#include "common/wire/rpc_server.h"

namespace tandem::worker {

std::vector<wire::LaneOptions> WorkerLanes();
void RegisterWorkerService(wire::RpcServer* server);

}  // namespace tandem::worker
