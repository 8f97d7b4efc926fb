// Diagnostics every daemon answers: Ping (identity, build, uptime) and Echo (returns the bulk
// frames it was sent; used by tests and the RPC benchmark).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "common/wire/rpc_client.h"
#include "common/wire/rpc_server.h"

namespace tandem::wire {

// Registers Ping (answered inline on the I/O thread) and Echo (on `echo_lane`).
void RegisterDiagnostics(RpcServer* server, int echo_lane);

struct PingResult {
  Identity peer;  // from the reply header
  std::string build_id;
  uint32_t pid = 0;
  uint64_t uptime_ms = 0;
};

// Pings `server`; kDeadlineExceeded / kUnavailable when it does not answer, or the reply's code
// as a Status (e.g. kPermissionDenied for WRONG_JOB).
StatusOr<PingResult> Ping(RpcClient* client, int server, std::chrono::milliseconds budget);

}  // namespace tandem::wire
