// Malformed data lines below data.max_bad_fraction (issue 18): the pipeline skips them, and
// this is how a run still says so. Each worker logs its own count with the first reports, and
// keeps them in output.dir/bad_lines/worker-<rank>.json for `tandem local`'s final block; the
// count also goes to the chief in heartbeats (`tandem status`) and, on rank 0, to metrics.jsonl.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::worker {

// At most this many "file:line: why" reports are logged and kept in the file.
inline constexpr size_t kShownBadReports = 3;

// Decides when the worker logs its malformed-line count. Logging each line would flood the
// log of a dirty file, and logging nothing is what issue 18 fixes, so: one line when the first
// malformed lines are met, then at most one per `every_steps` steps while the count grows.
// Steps, not seconds, so that the same data gives the same log. Thread-compatible.
class BadLineReporter {
 public:
  explicit BadLineReporter(int64_t every_steps);

  // After `step`, with `count` malformed lines trained on so far by this worker and the
  // pipeline's first `reports`. Returns the line to log, if one is due.
  std::optional<std::string> AfterStep(int64_t step, int64_t count,
                                       const std::vector<std::string>& reports);
  // When training ends: the line to log if the count grew since the last line.
  std::optional<std::string> AtEnd(int64_t count, const std::vector<std::string>& reports);

  int64_t logged() const { return logged_; }  // the count the last line gave (0: none yet)

 private:
  std::string Line(int64_t count, const std::vector<std::string>& reports) const;

  const int64_t every_steps_;
  int64_t logged_ = 0;
  int64_t last_step_ = -1;  // of the last line
};

// The file one worker keeps its count and first reports in.
struct BadLinesFile {
  int rank = 0;
  int64_t count = 0;
  std::vector<std::string> reports;  // at most kShownBadReports
};

// output.dir/bad_lines/worker-<rank>.json
std::string BadLinesPath(const std::string& output_dir, int rank);
// Replaces the file whole (write, rename), so a reader never sees half of it.
Status WriteBadLinesFile(const std::string& path, const BadLinesFile& file);
// Errors: kNotFound when absent, kDataLoss when it does not parse.
StatusOr<BadLinesFile> ReadBadLinesFile(const std::string& path);
// Removes a file left by an earlier run in the same output.dir (absent is fine): the file
// speaks for this run only, like the count in the heartbeats.
Status RemoveBadLinesFile(const std::string& path);
// Every worker's file under output_dir/bad_lines, by rank; missing or damaged files are skipped.
std::vector<BadLinesFile> ReadAllBadLinesFiles(const std::string& output_dir);

}  // namespace tandem::worker
