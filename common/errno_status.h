// The one place where an errno becomes a Status (STYLE §2): every file and socket error in the
// tree goes through ErrnoToStatus, so the same failure means the same thing to every caller.
#pragma once

#include <string_view>

#include "common/status.h"

namespace tandem {

// Maps `err` (an errno value) to the code that tells the caller what to do, with the message
// "<what>: <strerror> (<ENAME>)", e.g. "write /ckpt/a.tmp: No space left on device (ENOSPC)".
// `what` names the operation and the file ("fsync " + path).
//
//   ENOENT ENOTDIR          kNotFound           the named thing is not there
//   EEXIST                  kAlreadyExists      an exclusive create found it there
//   EACCES EPERM EROFS      kPermissionDenied   an operator must change modes or mounts
//   ENOSPC EDQUOT EFBIG     kResourceExhausted  disk full, quota or RLIMIT_FSIZE: refuse writes
//                                               until space is freed (the PS's push log, §14)
//   EIO EUCLEAN EBADMSG     kUnavailable        see below
//   EINTR EAGAIN ETIMEDOUT ECONNREFUSED ECONNRESET EPIPE EBUSY EMFILE ENFILE ENOMEM
//                           kUnavailable        transient: retry with back-off
//   anything else           kUnavailable        the caller's retry policy decides; 0: kInternal
//
// EIO and the file system's corruption reports (EUCLEAN, EBADMSG) are kUnavailable, not
// kDataLoss: the kernel gives them for one failed request (a failing sector, a lost NFS server,
// a write-back error reported once), which says nothing certain about the bytes the caller
// cares about; a write that failed leaves the old file intact and may be retried (the push log
// stays usable after one, push_log_test), and kDataLoss on a push would tell the worker its push
// was invalid (ps_service.cc). kDataLoss is claimed by the code that checks content (CRC32C,
// sizes, parsing), or by a caller whose contract makes an unreadable file lost (a read in
// server/ps/file_io.cc StreamFile, a missing file in the shard restore).
Status ErrnoToStatus(int err, std::string_view what);

}  // namespace tandem
