#include "server/chief/chief_service.h"

#include "common/wire/diagnostics.h"

namespace tandem::chief {

std::vector<wire::LaneOptions> ChiefLanes() { return {wire::LaneOptions{"control", 2}}; }

void RegisterChiefService(wire::RpcServer* server) { wire::RegisterDiagnostics(server, 0); }

}  // namespace tandem::chief
