#include "cli/keys_command.h"

#include <cstdio>

#include "common/exit_codes.h"
#include "common/wire/curve_keys.h"

namespace tandem::cli {

int RunKeys(const KeysArgs& args) {
  auto keys = wire::GenerateCurveKeys();
  if (!keys.ok()) {
    std::fprintf(stderr, "tandem keys: %s\n", keys.status().message().c_str());
    return kExitRuntimeFailure;
  }
  if (Status written = wire::WriteCurveKeys(args.out, *keys); !written.ok()) {
    std::fprintf(stderr, "tandem keys: %s\n", written.message().c_str());
    return kExitRuntimeFailure;
  }
  std::printf(
      "tandem keys: wrote %s/%s (mode 0600; public key %s)\n"
      "Copy the directory to every host of the job (e.g. /etc/tandem/keys, readable only by the\n"
      "user the daemons run as) and set `security.keys: <that directory>` in the job config.\n",
      args.out.c_str(), wire::kCurveKeyFile, keys->public_key.c_str());
  return kExitOk;
}

}  // namespace tandem::cli
