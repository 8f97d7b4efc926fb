// The model version being served, replaced whole: a request takes the current version once and
// is scored by it to the end, while an update publishes the next one beside it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/sync.h"
#include "serve/model_version.h"

namespace tandem::serve {

// Thread-safe.
class ServedModel {
 public:
  // Null until the first version is published.
  std::shared_ptr<const ModelVersion> current() const {
    MutexLock lock(&mu_);
    return current_;
  }
  void Publish(std::shared_ptr<const ModelVersion> version) {
    MutexLock lock(&mu_);
    current_ = std::move(version);
  }

 private:
  mutable Mutex mu_;
  std::shared_ptr<const ModelVersion> current_ GUARDED_BY(mu_);
};

// A bundle (`tandem export`) with the delta bundles `deltas` (`tandem export --since`) applied
// in order: each one's base step must be the step reached so far. Rows come from the bundle's
// mapped table files (offline::MappedTableFile) and the deltas' rows over them. With
// `verify`, every table file's CRC32C is checked first (a full read); else sizes and headers.
// Errors as offline::OpenBundle's; kInvalidArgument for a delta that does not follow, or a
// whole bundle given as a delta.
StatusOr<std::shared_ptr<ModelVersion>> LoadBundleVersion(const std::string& bundle,
                                                          const std::vector<std::string>& deltas,
                                                          bool verify,
                                                          const VersionOptions& options);

}  // namespace tandem::serve
