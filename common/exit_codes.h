// Process exit statuses (PROTOCOLS §12). Scripts and systemd units rely on these numbers.
#pragma once

namespace tandem {

enum ExitCode : int {
  kExitOk = 0,              // done
  kExitRuntimeFailure = 1,  // runtime failure
  kExitUsage = 2,           // bad command line
  kExitInvalid = 3,         // invalid config or data
  kExitFenced = 75,         // fenced or refused: do not restart
  kExitRestart = 76,        // restart requested (a collective could not be aborted)
};

}  // namespace tandem
