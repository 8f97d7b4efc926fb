#include "server/ps/ps_service.h"

#include <algorithm>

#include "common/wire/diagnostics.h"

namespace tandem::ps {

std::vector<wire::LaneOptions> PsLanes(int handler_threads) {
  const int pull = std::max(1, handler_threads / 2);
  const int push = std::max(1, handler_threads - pull);
  return {wire::LaneOptions{"push", push}, wire::LaneOptions{"pull", pull}};
}

void RegisterPsService(wire::RpcServer* server) { wire::RegisterDiagnostics(server, kPullLane); }

}  // namespace tandem::ps
