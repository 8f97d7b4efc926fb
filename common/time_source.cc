#include "common/time_source.h"

namespace tandem {
namespace {

class SteadyTimeSource final : public TimeSource {
 public:
  time_point Now() const override { return std::chrono::steady_clock::now(); }
};

}  // namespace

const TimeSource* TimeSource::Steady() {
  static const SteadyTimeSource* const steady = new SteadyTimeSource;
  return steady;
}

}  // namespace tandem
