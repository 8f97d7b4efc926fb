// When a drilled job's step moved, as the drill saw it in the chief's view (polled), and the
// pauses between: how long a fault held training up, which its recovery time alone does not say.
// A replacement can register (recovered) while the survivors still wait on a request to the dead
// process: the step stands still meanwhile, and only the pause shows it. The chief hears of
// steps with heartbeats, so a pause is measured to within a heartbeat interval and a poll; the
// fault-free run's longest pause is the floor to read a fault's against. While the chief does not
// answer (stopped, restarting, cut off, a rollback) the drill is blind: the workers may train on
// (at k = 0 they do not need the chief each step) or not, so a pause that spans such a time is
// not known.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace tandem::cli {

class StepTimeline {
 public:
  using Clock = std::chrono::steady_clock;

  // The step a view showed at `at` (-1: none trained yet). A step above the last one seen is an
  // advance; one below it (a rollback: the steps are trained again) only lowers the mark, so
  // that the steps trained again count as progress.
  void Saw(Clock::time_point at, int64_t step);
  // A poll at `at` that got no view of the running job.
  void Blind(Clock::time_point at);

  // The longest time in [from, to] without an advance: from `from` to the first advance, between
  // advances, and from the last to `to`; to - from when the step never moved. Zero if to <= from;
  // nullopt if a poll in [from, to] was blind.
  std::optional<std::chrono::milliseconds> LongestPause(Clock::time_point from,
                                                        Clock::time_point to) const;

  // The longest time between two advances, from the first to the last (not before the first step
  // or after the last), leaving out the times between two advances with a blind poll; nullopt
  // with no such time.
  std::optional<std::chrono::milliseconds> LongestPause() const;

  std::optional<Clock::time_point> last_advance() const;

 private:
  std::vector<std::pair<Clock::time_point, int64_t>> advances_;
  bool BlindIn(Clock::time_point from, Clock::time_point to) const;

  std::vector<Clock::time_point> blind_;  // in time order
  int64_t mark_ = -1;                     // the step seen last; -1: none trained yet
};

}  // namespace tandem::cli
