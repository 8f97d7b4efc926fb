#include "worker/worker_service.h"

#include "common/wire/diagnostics.h"

namespace tandem::worker {

std::vector<wire::LaneOptions> WorkerLanes() { return {wire::LaneOptions{"control", 1}}; }

void RegisterWorkerService(wire::RpcServer* server) { wire::RegisterDiagnostics(server, 0); }

}  // namespace tandem::worker
