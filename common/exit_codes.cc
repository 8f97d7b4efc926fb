#include "common/exit_codes.h"

namespace tandem {

int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return kExitOk;
    case StatusCode::kInvalidArgument:
    case StatusCode::kDataLoss:
    case StatusCode::kNotFound:
      return kExitInvalid;
    case StatusCode::kPermissionDenied:
    case StatusCode::kFailedPrecondition:
      return kExitFenced;
    default:
      return kExitRuntimeFailure;
  }
}

}  // namespace tandem
