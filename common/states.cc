#include "common/states.h"

#include <array>
#include <utility>

namespace tandem {
namespace {

constexpr std::array<std::pair<JobState, std::string_view>, 6> kJobStates{{
    {JobState::kStarting, "starting"},
    {JobState::kTraining, "training"},
    {JobState::kStopping, "stopping"},
    {JobState::kDone, "done"},
    {JobState::kStopped, "stopped"},
    {JobState::kFailed, "failed"},
}};

constexpr std::array<std::pair<MemberState, std::string_view>, 12> kMemberStates{{
    {MemberState::kStarting, "starting"},
    {MemberState::kUp, "up"},
    {MemberState::kWaiting, "waiting"},
    {MemberState::kTraining, "training"},
    {MemberState::kEvaluating, "evaluating"},
    {MemberState::kRecovering, "recovering"},
    {MemberState::kServing, "serving"},
    {MemberState::kDone, "done"},
    {MemberState::kStopped, "stopped"},
    {MemberState::kFailed, "failed"},
    {MemberState::kLeft, "left"},
    {MemberState::kLost, "lost"},
}};

template <typename E, size_t N>
std::string_view NameIn(const std::array<std::pair<E, std::string_view>, N>& table, E value) {
  for (const auto& [e, name] : table)
    if (e == value) return name;
  return "unknown";  // only a value cast from a bad integer gets here
}

template <typename E, size_t N>
std::optional<E> ParseIn(const std::array<std::pair<E, std::string_view>, N>& table,
                         std::string_view name) {
  for (const auto& [e, n] : table)
    if (n == name) return e;
  return std::nullopt;
}

}  // namespace

std::string_view Name(JobState state) { return NameIn(kJobStates, state); }
std::string_view Name(MemberState state) { return NameIn(kMemberStates, state); }
std::optional<JobState> ParseJobState(std::string_view name) { return ParseIn(kJobStates, name); }
std::optional<MemberState> ParseMemberState(std::string_view name) {
  return ParseIn(kMemberStates, name);
}

bool IsTerminal(JobState state) {
  return state == JobState::kDone || state == JobState::kStopped || state == JobState::kFailed;
}

bool IsTerminal(MemberState state) {
  return state == MemberState::kDone || state == MemberState::kStopped ||
         state == MemberState::kFailed;
}

bool IsPresent(MemberState state) {
  return state != MemberState::kStarting && state != MemberState::kLost &&
         state != MemberState::kLeft;
}

}  // namespace tandem
