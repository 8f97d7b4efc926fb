// The job's and its members' states (PROTOCOLS §12), as the chief and the members reason about
// them. Their names are what people and files see (`tandem status`, cluster.json, the chief's
// persisted state, logs): Name and Parse* convert at those edges only, and must not change.
#pragma once

#include <optional>
#include <string_view>

namespace tandem {

enum class JobState { kStarting, kTraining, kStopping, kDone, kStopped, kFailed };

// One enum for what a member reports and what the chief shows of it: the chief shows the
// reported state as it is unless it knows better (lost, left, never registered).
enum class MemberState {
  kStarting,  // shown: never registered; reported: not started yet
  kUp,        // shown: registered, no state reported yet
  kWaiting,
  kTraining,
  kEvaluating,
  kRecovering,  // a worker rebuilding its all-reduce group
  kServing,     // a PS
  kDone,
  kStopped,
  kFailed,
  kLeft,
  kLost,  // shown only: the chief declared the member lost
};

std::string_view Name(JobState state);     // "starting", "training", ...
std::string_view Name(MemberState state);  // "starting", "up", "waiting", ...
std::optional<JobState> ParseJobState(std::string_view name);
std::optional<MemberState> ParseMemberState(std::string_view name);

// done, stopped or failed: nothing changes any more.
bool IsTerminal(JobState state);
// done, stopped or failed: the member's last report.
bool IsTerminal(MemberState state);
// Registered and not gone: neither never registered, lost nor left.
bool IsPresent(MemberState state);

}  // namespace tandem
