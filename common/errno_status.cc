#include "common/errno_status.h"

#include <cerrno>
#include <cstring>
#include <string>

namespace tandem {
namespace {

struct ErrnoClass {
  int err;
  const char* name;
  StatusCode code;
};

// Why each maps where: see errno_status.h.
constexpr ErrnoClass kErrnoTable[] = {
    {ENOENT, "ENOENT", StatusCode::kNotFound},
    {ENOTDIR, "ENOTDIR", StatusCode::kNotFound},
    {EEXIST, "EEXIST", StatusCode::kAlreadyExists},
    {EACCES, "EACCES", StatusCode::kPermissionDenied},
    {EPERM, "EPERM", StatusCode::kPermissionDenied},
    {EROFS, "EROFS", StatusCode::kPermissionDenied},
    {ENOSPC, "ENOSPC", StatusCode::kResourceExhausted},
    {EDQUOT, "EDQUOT", StatusCode::kResourceExhausted},
    {EFBIG, "EFBIG", StatusCode::kResourceExhausted},
    {EIO, "EIO", StatusCode::kUnavailable},
    {EUCLEAN, "EUCLEAN", StatusCode::kUnavailable},
    {EBADMSG, "EBADMSG", StatusCode::kUnavailable},
    {EINTR, "EINTR", StatusCode::kUnavailable},
    {EAGAIN, "EAGAIN", StatusCode::kUnavailable},
    {ETIMEDOUT, "ETIMEDOUT", StatusCode::kUnavailable},
    {ECONNREFUSED, "ECONNREFUSED", StatusCode::kUnavailable},
    {ECONNRESET, "ECONNRESET", StatusCode::kUnavailable},
    {EPIPE, "EPIPE", StatusCode::kUnavailable},
    {EBUSY, "EBUSY", StatusCode::kUnavailable},
    {EMFILE, "EMFILE", StatusCode::kUnavailable},
    {ENFILE, "ENFILE", StatusCode::kUnavailable},
    {ENOMEM, "ENOMEM", StatusCode::kUnavailable},
    {EINVAL, "EINVAL", StatusCode::kUnavailable},
    {EBADF, "EBADF", StatusCode::kUnavailable},
    {ENAMETOOLONG, "ENAMETOOLONG", StatusCode::kUnavailable},
    {EISDIR, "EISDIR", StatusCode::kUnavailable},
    {EXDEV, "EXDEV", StatusCode::kUnavailable},
};

}  // namespace

Status ErrnoToStatus(int err, std::string_view what) {
  std::string message(what);
  if (err == 0) {
    // A caller that read errno after something else reset it: a bug, not an I/O error.
    return Status::Internal(message + ": failed, but errno is 0");
  }
  message += ": ";
  message += std::strerror(err);
  for (const ErrnoClass& c : kErrnoTable) {
    if (c.err != err) continue;
    message += std::string(" (") + c.name + ")";
    return Status(c.code, message);
  }
  message += " (errno " + std::to_string(err) + ")";
  return Status::Unavailable(message);
}

}  // namespace tandem
