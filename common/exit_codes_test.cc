#include "common/exit_codes.h"

#include <gtest/gtest.h>

namespace tandem {
namespace {

// The table of common/exit_codes.h, row by row: scripts and systemd units rely on it.
TEST(ExitCodeForTest, EveryStatusCodeHasItsExitStatus) {
  const struct {
    StatusCode code;
    int exit;
  } table[] = {
      {StatusCode::kOk, 0},
      {StatusCode::kCancelled, 1},
      {StatusCode::kUnknown, 1},
      {StatusCode::kInvalidArgument, 3},
      {StatusCode::kDeadlineExceeded, 1},
      {StatusCode::kNotFound, 3},
      {StatusCode::kAlreadyExists, 1},
      {StatusCode::kPermissionDenied, 75},
      {StatusCode::kResourceExhausted, 1},
      {StatusCode::kFailedPrecondition, 75},
      {StatusCode::kAborted, 1},
      {StatusCode::kOutOfRange, 1},
      {StatusCode::kUnimplemented, 1},
      {StatusCode::kInternal, 1},
      {StatusCode::kUnavailable, 1},
      {StatusCode::kDataLoss, 3},
      {StatusCode::kUnauthenticated, 1},
  };
  for (const auto& row : table) {
    const Status s = row.code == StatusCode::kOk ? Status::Ok() : Status(row.code, "x");
    EXPECT_EQ(ExitCodeFor(s), row.exit) << StatusCodeName(row.code);
  }
}

TEST(ExitCodeForTest, NamedExitCodesMatchProtocols) {
  EXPECT_EQ(ExitCodeFor(Status::Ok()), kExitOk);
  EXPECT_EQ(ExitCodeFor(Status::InvalidArgument("bad key")), kExitInvalid);
  EXPECT_EQ(ExitCodeFor(Status::PermissionDenied("WRONG_JOB")), kExitFenced);
  EXPECT_EQ(ExitCodeFor(Status::Unavailable("chief down")), kExitRuntimeFailure);
  EXPECT_EQ(kExitUsage, 2);
  EXPECT_EQ(kExitRestart, 76);
}

}  // namespace
}  // namespace tandem
