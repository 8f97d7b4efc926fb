#include "common/errno_status.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace tandem {
namespace {

// The table of common/errno_status.h, row by row: callers act on these codes (the PS refuses
// pushes on kResourceExhausted, the restore treats kNotFound as a lost file, ...).
TEST(ErrnoToStatusTest, EachErrnoClassMapsToItsCode) {
  const struct {
    int err;
    StatusCode code;
  } table[] = {
      {ENOENT, StatusCode::kNotFound},
      {ENOTDIR, StatusCode::kNotFound},
      {EEXIST, StatusCode::kAlreadyExists},
      {EACCES, StatusCode::kPermissionDenied},
      {EPERM, StatusCode::kPermissionDenied},
      {EROFS, StatusCode::kPermissionDenied},
      {ENOSPC, StatusCode::kResourceExhausted},
      {EDQUOT, StatusCode::kResourceExhausted},
      {EFBIG, StatusCode::kResourceExhausted},
      {EIO, StatusCode::kUnavailable},
      {EUCLEAN, StatusCode::kUnavailable},
      {EBADMSG, StatusCode::kUnavailable},
      {EINTR, StatusCode::kUnavailable},
      {EAGAIN, StatusCode::kUnavailable},
      {ETIMEDOUT, StatusCode::kUnavailable},
      {ECONNREFUSED, StatusCode::kUnavailable},
      {ECONNRESET, StatusCode::kUnavailable},
      {EMFILE, StatusCode::kUnavailable},
      {ENFILE, StatusCode::kUnavailable},
      {ENOMEM, StatusCode::kUnavailable},
      {EINVAL, StatusCode::kUnavailable},
      {ENOTSUP, StatusCode::kUnavailable},  // not listed: the default
  };
  for (const auto& row : table) {
    EXPECT_EQ(ErrnoToStatus(row.err, "op").code(), row.code) << std::strerror(row.err);
  }
}

TEST(ErrnoToStatusTest, MessageNamesTheOperationTheErrorAndItsName) {
  EXPECT_EQ(ErrnoToStatus(ENOSPC, "write /ckpt/a.tmp").message(),
            std::string("write /ckpt/a.tmp: ") + std::strerror(ENOSPC) + " (ENOSPC)");
  const std::string other = ErrnoToStatus(ENOTSUP, "fallocate f").message();
  EXPECT_EQ(other, std::string("fallocate f: ") + std::strerror(ENOTSUP) + " (errno " +
                       std::to_string(ENOTSUP) + ")");
}

TEST(ErrnoToStatusTest, ZeroIsABugNotAnIoError) {
  const Status s = ErrnoToStatus(0, "read f");
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("read f"), std::string::npos);
}

}  // namespace
}  // namespace tandem
