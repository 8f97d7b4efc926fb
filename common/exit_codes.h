// Process exit statuses (PROTOCOLS §12). Scripts and systemd units rely on these numbers.
#pragma once

#include "common/status.h"

namespace tandem {

enum ExitCode : int {
  kExitOk = 0,              // done
  kExitRuntimeFailure = 1,  // runtime failure
  kExitUsage = 2,           // bad command line
  kExitInvalid = 3,         // invalid config or data
  kExitFenced = 75,         // fenced or refused: do not restart
  kExitRestart = 76,        // restart requested (a collective could not be aborted)
};

// The exit status of a process that stops on `s` (PROTOCOLS §12), so that every command and
// daemon tells its supervisor the same thing for the same error:
//
//   kOk                                    0   done
//   kInvalidArgument kDataLoss kNotFound   3   the config or data given is bad or missing:
//                                              a restart would fail the same way
//   kPermissionDenied kFailedPrecondition  75  refused (by the chief, another job, the
//                                              recovery.max_rollbacks limit): do not restart
//                                              until the state is fixed
//   anything else                          1   a runtime failure: the supervisor restarts
//
// 2 (usage) and 76 (restart requested) are never a Status's: the call sites that mean them
// return them. A call site that needs another number says so next to it.
int ExitCodeFor(const Status& s);

}  // namespace tandem
