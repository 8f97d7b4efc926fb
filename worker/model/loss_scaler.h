// Dynamic loss scaling for fp16 training (PROTOCOLS §2.7): the loss gradient is multiplied by a
// power of two so small fp16 gradients do not flush to zero; a step whose gradients overflow
// anywhere is skipped everywhere and halves the scale; after `growth_interval` good steps in a
// row the scale doubles. Every replica makes the same decisions from the same all-reduced
// overflow flag, so the state is a function of the step history (checkpointed with the dense
// state as the tensor "loss_scale" = [scale, good_steps]).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace tandem::model {

// Thread-compatible value type.
class LossScaler {
 public:
  static constexpr float kInitialScale = 65536.0f;  // 2^16
  static constexpr float kMinScale = 1.0f;
  static constexpr float kMaxScale = 16777216.0f;  // 2^24
  static constexpr int64_t kGrowthInterval = 2000;

  float scale() const { return scale_; }
  int64_t good_steps() const { return good_steps_; }

  // After a step: `overflow` as agreed by every replica.
  void Update(bool overflow) {
    if (overflow) {
      scale_ = scale_ > kMinScale ? scale_ * 0.5f : kMinScale;
      good_steps_ = 0;
      return;
    }
    if (++good_steps_ >= kGrowthInterval) {
      scale_ = scale_ < kMaxScale ? scale_ * 2.0f : kMaxScale;
      good_steps_ = 0;
    }
  }

  // [scale, good_steps]: both exact in fp32 (powers of two; counts below 2^24).
  std::array<float, 2> State() const { return {scale_, static_cast<float>(good_steps_)}; }
  // InvalidArgument, changing nothing, for a scale that is not a power of two in range or a
  // count outside [0, growth interval).
  Status Load(float scale, float good_steps) {
    int exponent = 0;
    const bool power_of_two =
        scale >= kMinScale && scale <= kMaxScale && std::frexp(scale, &exponent) == 0.5f;
    if (!power_of_two || !(good_steps >= 0) || good_steps >= kGrowthInterval ||
        good_steps != static_cast<float>(static_cast<int64_t>(good_steps)))
      return Status::InvalidArgument("loss_scale state [" + std::to_string(scale) + ", " +
                                     std::to_string(good_steps) + "] is out of range");
    scale_ = scale;
    good_steps_ = static_cast<int64_t>(good_steps);
    return Status::Ok();
  }

 private:
  float scale_ = kInitialScale;
  int64_t good_steps_ = 0;
};

}  // namespace tandem::model
