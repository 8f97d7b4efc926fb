// The 128-bit job id (PROTOCOLS §1): created at a job's first start, stored in checkpoint.dir,
// never changed. A daemon of another job is answered WRONG_JOB.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace tandem {

struct JobId {
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool is_zero() const { return hi == 0 && lo == 0; }
  std::string ToHex() const;  // 32 lowercase hex chars
  friend bool operator==(const JobId&, const JobId&) = default;
};

StatusOr<JobId> ParseJobId(const std::string& hex);
JobId RandomJobId();

// Reads `<dir>/job_id`, creating it (atomically, first writer wins) with a random id when absent.
StatusOr<JobId> LoadOrCreateJobId(const std::string& dir);

}  // namespace tandem
