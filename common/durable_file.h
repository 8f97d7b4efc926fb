// Small files that must survive a machine crash whole: the chief's state, checkpoint manifests
// and LATEST pointers.
#pragma once

#include <string>

#include "common/status.h"

namespace tandem {

// Writes `text` to `path` + ".tmp", fsyncs it, renames it over `path` and fsyncs the directory:
// a crash at any point leaves the old file or the new one, and once this returns the new one
// survives a machine crash. On an I/O error, the Status of ErrnoToStatus naming the step and
// the file.
Status WriteFileDurably(const std::string& path, const std::string& text);

}  // namespace tandem
