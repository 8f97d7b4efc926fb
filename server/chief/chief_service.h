// The chief's RPC service. The foundation answers diagnostics; membership, barriers and
// checkpoints arrive with the distributed-training and checkpoint issues.
#pragma once

#include "common/wire/rpc_server.h"

namespace tandem::chief {

std::vector<wire::LaneOptions> ChiefLanes();
void RegisterChiefService(wire::RpcServer* server);

}  // namespace tandem::chief
