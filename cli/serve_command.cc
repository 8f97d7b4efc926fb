#include "cli/serve_command.h"

#include <cstdio>
#include <fstream>
#include <iterator>

#include "common/daemon/stop_signals.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "common/sd_notify.h"

namespace tandem::cli {

using daemon::BlockStopSignals;
using daemon::WaitStopSignal;

namespace {

int Fail(const Status& s) {
  std::fprintf(stderr, "tandem serve: %s\n", s.ToString().c_str());
  if (s.IsInvalidArgument() && s.message().find("give exactly one") != std::string::npos)
    return kExitUsage;
  return ExitCodeFor(s);
}

}  // namespace

int RunServe(ServeArgs args) {
  const sigset_t stop_signals = BlockStopSignals();
  log::Init("serve", args.log_level);
  serve::ServeOptions& o = args.options;
  o.version.unknown =
      args.unknown == "zero" ? worker::UnknownIds::kZero : worker::UnknownIds::kInitial;
  o.cache_bytes = static_cast<uint64_t>(args.cache_mb * (1 << 20));
  o.http.max_body_bytes = static_cast<uint64_t>(args.max_body_mb * (1 << 20));
  if (!args.token_file.empty()) {
    std::ifstream in(args.token_file);
    std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' '))
      token.pop_back();
    if (!in.good() && !in.eof())
      return Fail(Status::InvalidArgument("cannot read " + args.token_file));
    if (token.empty()) return Fail(Status::InvalidArgument(args.token_file + " holds no token"));
    o.http.token = token;
  }
  auto p = serve::ServeProcess::Start(o);
  if (!p.ok()) return Fail(p.status());
  std::fprintf(stderr, "tandem serve: listening on %s:%d (model %s)\n", o.http.host.c_str(),
               (*p)->port(), o.http.model_name.c_str());
  std::fflush(stderr);
  // READY once listening: whether a version is loaded is /ready's to say (a followed job may
  // not have committed a checkpoint yet); the status line follows the version served.
  SdNotify("READY=1\nSTATUS=waiting for a model version");
  int64_t announced = -1;
  int signal = 0;
  for (;;) {
    if (auto v = (*p)->served().current(); v != nullptr && v->step() != announced) {
      announced = v->step();
      SdNotify("STATUS=serving version " + std::to_string(announced));
    }
    if (WaitStopSignal(stop_signals, std::chrono::milliseconds(200), &signal)) break;
  }
  TLOG_INFO("serve: signal {}: answering the requests in flight, then stopping", signal);
  SdNotify("STOPPING=1");
  (*p)->Stop();
  return kExitOk;
}

}  // namespace tandem::cli
