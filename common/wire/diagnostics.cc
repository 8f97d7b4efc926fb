#include "common/wire/diagnostics.h"

#include <unistd.h>

#include "common/build_info.h"

namespace tandem::wire {

void RegisterDiagnostics(RpcServer* server, int echo_lane) {
  const auto started = std::chrono::steady_clock::now();
  server->Handle(Envelope::Body::PING, RpcServer::kInlineLane,
                 [server, started](InMessage& request, Responder responder) {
                   OutMessage reply = responder.NewReply();
                   auto pong = reply.envelope().getBody().initPong();
                   const Identity self = server->identity();
                   pong.setRole(self.role);
                   pong.setIndex(self.index);
                   pong.setIncarnation(self.incarnation);
                   pong.setGeneration(self.generation);
                   auto build = BuildId();
                   pong.setBuildId(capnp::Text::Reader(build.data(), build.size()));
                   pong.setPid(static_cast<uint32_t>(::getpid()));
                   pong.setUptimeMs(
                       static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 std::chrono::steady_clock::now() - started)
                                                 .count()));
                   pong.setPayload(request.envelope().getBody().getPing().getPayload());
                   responder.Send(std::move(reply));
                 });
  server->Handle(Envelope::Body::ECHO, echo_lane, [](InMessage& request, Responder responder) {
    OutMessage reply = responder.NewReply();
    reply.envelope().getBody().initEchoReply().setNote(
        request.envelope().getBody().getEcho().getNote());
    for (auto& frame : request.TakeBulk()) reply.AddBulk(std::move(frame));
    responder.Send(std::move(reply));
  });
}

StatusOr<PingResult> Ping(RpcClient* client, int server, std::chrono::milliseconds budget) {
  OutMessage ping;
  ping.envelope().getBody().initPing();
  auto reply = client->Call(server, std::move(ping), budget);
  if (!reply.ok()) return reply.status();
  TANDEM_RETURN_IF_ERROR(ReplyStatus(*reply));
  auto body = reply->envelope().getBody();
  if (body.which() != Envelope::Body::PONG)
    return Status::InvalidArgument("ping answered without a pong");
  auto pong = body.getPong();
  PingResult r;
  r.peer = ReadIdentity(reply->header());
  r.build_id = pong.getBuildId().cStr();
  r.pid = pong.getPid();
  r.uptime_ms = pong.getUptimeMs();
  return r;
}

}  // namespace tandem::wire
