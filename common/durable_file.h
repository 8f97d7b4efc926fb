// Small files that must survive a machine crash whole: the chief's state, checkpoint manifests
// and LATEST pointers, restore markers, bundle files, the dense state. The one copy of
// write-tmp, fsync, rename, fsync-dir in the tree; the few writers that do something else say
// why next to their code (a huge file streamed through a CRC, a batch of files committed with
// one directory fsync, a file nobody needs after a crash).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace tandem {

// Writes `bytes` to `path` + ".tmp", fsyncs it, renames it over `path` and fsyncs the
// directory: a crash at any point leaves the old file or the new one, and once this returns the
// new one survives a machine crash. The directory must exist. On an error the .tmp file is
// removed and the Status (from ErrnoToStatus) names the step and the file. Not for concurrent
// writers of one path: they would share the .tmp name.
Status WriteFileDurably(const std::string& path, std::string_view bytes);

// fsync(2) of a directory, so that entries created, renamed or removed in it survive a crash.
Status FsyncDir(const std::string& dir);

}  // namespace tandem
