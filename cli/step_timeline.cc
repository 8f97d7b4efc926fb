#include "cli/step_timeline.h"

#include <algorithm>

namespace tandem::cli {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

void StepTimeline::Saw(Clock::time_point at, int64_t step) {
  if (step > mark_ && step >= 0) advances_.emplace_back(at, step);
  mark_ = step;
}

void StepTimeline::Blind(Clock::time_point at) { blind_.push_back(at); }

bool StepTimeline::BlindIn(Clock::time_point from, Clock::time_point to) const {
  const auto it = std::lower_bound(blind_.begin(), blind_.end(), from);
  return it != blind_.end() && *it <= to;
}

std::optional<milliseconds> StepTimeline::LongestPause(Clock::time_point from,
                                                       Clock::time_point to) const {
  if (to <= from) return milliseconds(0);
  if (BlindIn(from, to)) return std::nullopt;
  Clock::duration longest{0};
  Clock::time_point previous = from;
  for (const auto& [at, step] : advances_) {
    if (at <= from) continue;
    if (at > to) break;
    longest = std::max(longest, at - previous);
    previous = at;
  }
  longest = std::max(longest, to - previous);
  return duration_cast<milliseconds>(longest);
}

std::optional<milliseconds> StepTimeline::LongestPause() const {
  std::optional<Clock::duration> longest;
  for (size_t i = 1; i < advances_.size(); ++i) {
    if (BlindIn(advances_[i - 1].first, advances_[i].first)) continue;
    longest =
        std::max(longest.value_or(Clock::duration{0}), advances_[i].first - advances_[i - 1].first);
  }
  if (!longest) return std::nullopt;
  return duration_cast<milliseconds>(*longest);
}

std::optional<StepTimeline::Clock::time_point> StepTimeline::last_advance() const {
  if (advances_.empty()) return std::nullopt;
  return advances_.back().first;
}

}  // namespace tandem::cli
