#include "common/wire/states.h"

#include <string>

namespace tandem::wire {
namespace {

Status Unknown(std::string_view what, uint16_t value) {
  return Status::InvalidArgument(std::string(what) + " " + std::to_string(value) +
                                 " is not one this build knows");
}

}  // namespace

wire::JobState ToWire(tandem::JobState state) {
  switch (state) {
    case tandem::JobState::kStarting:
      return wire::JobState::STARTING;
    case tandem::JobState::kTraining:
      return wire::JobState::TRAINING;
    case tandem::JobState::kStopping:
      return wire::JobState::STOPPING;
    case tandem::JobState::kDone:
      return wire::JobState::DONE;
    case tandem::JobState::kStopped:
      return wire::JobState::STOPPED;
    case tandem::JobState::kFailed:
      return wire::JobState::FAILED;
  }
  return wire::JobState::UNKNOWN;
}

wire::MemberState ToWire(tandem::MemberState state) {
  switch (state) {
    case tandem::MemberState::kStarting:
      return wire::MemberState::STARTING;
    case tandem::MemberState::kUp:
      return wire::MemberState::UP;
    case tandem::MemberState::kWaiting:
      return wire::MemberState::WAITING;
    case tandem::MemberState::kTraining:
      return wire::MemberState::TRAINING;
    case tandem::MemberState::kEvaluating:
      return wire::MemberState::EVALUATING;
    case tandem::MemberState::kRecovering:
      return wire::MemberState::RECOVERING;
    case tandem::MemberState::kServing:
      return wire::MemberState::SERVING;
    case tandem::MemberState::kDone:
      return wire::MemberState::DONE;
    case tandem::MemberState::kStopped:
      return wire::MemberState::STOPPED;
    case tandem::MemberState::kFailed:
      return wire::MemberState::FAILED;
    case tandem::MemberState::kLeft:
      return wire::MemberState::LEFT;
    case tandem::MemberState::kLost:
      return wire::MemberState::LOST;
  }
  return wire::MemberState::UNKNOWN;
}

StatusOr<tandem::JobState> FromWire(wire::JobState state) {
  switch (state) {
    case wire::JobState::STARTING:
      return tandem::JobState::kStarting;
    case wire::JobState::TRAINING:
      return tandem::JobState::kTraining;
    case wire::JobState::STOPPING:
      return tandem::JobState::kStopping;
    case wire::JobState::DONE:
      return tandem::JobState::kDone;
    case wire::JobState::STOPPED:
      return tandem::JobState::kStopped;
    case wire::JobState::FAILED:
      return tandem::JobState::kFailed;
    case wire::JobState::UNKNOWN:
      break;
  }
  return Unknown("job state", static_cast<uint16_t>(state));
}

StatusOr<tandem::MemberState> FromWire(wire::MemberState state) {
  switch (state) {
    case wire::MemberState::STARTING:
      return tandem::MemberState::kStarting;
    case wire::MemberState::UP:
      return tandem::MemberState::kUp;
    case wire::MemberState::WAITING:
      return tandem::MemberState::kWaiting;
    case wire::MemberState::TRAINING:
      return tandem::MemberState::kTraining;
    case wire::MemberState::EVALUATING:
      return tandem::MemberState::kEvaluating;
    case wire::MemberState::RECOVERING:
      return tandem::MemberState::kRecovering;
    case wire::MemberState::SERVING:
      return tandem::MemberState::kServing;
    case wire::MemberState::DONE:
      return tandem::MemberState::kDone;
    case wire::MemberState::STOPPED:
      return tandem::MemberState::kStopped;
    case wire::MemberState::FAILED:
      return tandem::MemberState::kFailed;
    case wire::MemberState::LEFT:
      return tandem::MemberState::kLeft;
    case wire::MemberState::LOST:
      return tandem::MemberState::kLost;
    case wire::MemberState::UNKNOWN:
      break;
  }
  return Unknown("member state", static_cast<uint16_t>(state));
}

}  // namespace tandem::wire
