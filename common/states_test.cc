#include "common/states.h"

#include <gtest/gtest.h>

#include "common/config/cluster_spec.h"
#include "common/wire/identity.h"
#include "common/wire/message.h"
#include "common/wire/states.h"

namespace tandem {
namespace {

constexpr JobState kAllJobStates[] = {JobState::kStarting, JobState::kTraining, JobState::kStopping,
                                      JobState::kDone,     JobState::kStopped,  JobState::kFailed};
constexpr MemberState kAllMemberStates[] = {
    MemberState::kStarting, MemberState::kUp,         MemberState::kWaiting,
    MemberState::kTraining, MemberState::kEvaluating, MemberState::kRecovering,
    MemberState::kServing,  MemberState::kDone,       MemberState::kStopped,
    MemberState::kFailed,   MemberState::kLeft,       MemberState::kLost};
constexpr config::Role kAllRoles[] = {config::Role::kChief, config::Role::kPs,
                                      config::Role::kWorker};

TEST(StatesTest, JobStateNamesRoundTrip) {
  for (JobState s : kAllJobStates) {
    auto parsed = ParseJobState(Name(s));
    ASSERT_TRUE(parsed.has_value()) << Name(s);
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_EQ(ParseJobState("Training"), std::nullopt);
  EXPECT_EQ(ParseJobState(""), std::nullopt);
}

TEST(StatesTest, MemberStateNamesRoundTrip) {
  for (MemberState s : kAllMemberStates) {
    auto parsed = ParseMemberState(Name(s));
    ASSERT_TRUE(parsed.has_value()) << Name(s);
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_EQ(ParseMemberState("alive"), std::nullopt);
}

// Tests and scripts read these names in `tandem status`, cluster.json and the chief's state file.
TEST(StatesTest, NamesAreThePublishedOnes) {
  EXPECT_EQ(Name(JobState::kStarting), "starting");
  EXPECT_EQ(Name(JobState::kTraining), "training");
  EXPECT_EQ(Name(JobState::kStopping), "stopping");
  EXPECT_EQ(Name(JobState::kDone), "done");
  EXPECT_EQ(Name(JobState::kStopped), "stopped");
  EXPECT_EQ(Name(JobState::kFailed), "failed");
  EXPECT_EQ(Name(MemberState::kUp), "up");
  EXPECT_EQ(Name(MemberState::kLost), "lost");
  EXPECT_EQ(Name(MemberState::kLeft), "left");
  EXPECT_EQ(Name(MemberState::kServing), "serving");
  EXPECT_EQ(Name(MemberState::kRecovering), "recovering");
  EXPECT_EQ(Name(MemberState::kEvaluating), "evaluating");
  EXPECT_EQ(Name(MemberState::kWaiting), "waiting");
}

TEST(StatesTest, TerminalAndPresent) {
  EXPECT_TRUE(IsTerminal(JobState::kDone));
  EXPECT_TRUE(IsTerminal(JobState::kFailed));
  EXPECT_FALSE(IsTerminal(JobState::kStopping));
  EXPECT_TRUE(IsTerminal(MemberState::kStopped));
  EXPECT_FALSE(IsTerminal(MemberState::kLeft));
  EXPECT_FALSE(IsPresent(MemberState::kLost));
  EXPECT_FALSE(IsPresent(MemberState::kStarting));
  EXPECT_TRUE(IsPresent(MemberState::kFailed));
}

TEST(StatesTest, RoleNamesRoundTrip) {
  for (config::Role r : kAllRoles) {
    auto parsed = config::ParseRole(config::RoleName(r));
    ASSERT_TRUE(parsed.has_value()) << config::RoleName(r);
    EXPECT_EQ(*parsed, r);
  }
  EXPECT_EQ(config::ParseRole("tool"), std::nullopt);
  EXPECT_EQ(config::ParseRole("workers"), std::nullopt);
}

TEST(WireStatesTest, EveryValueRoundTrips) {
  for (JobState s : kAllJobStates) {
    auto back = wire::FromWire(wire::ToWire(s));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, s);
  }
  for (MemberState s : kAllMemberStates) {
    auto back = wire::FromWire(wire::ToWire(s));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, s);
  }
  for (config::Role r : kAllRoles) {
    EXPECT_EQ(wire::FromWire(wire::ToWire(r)), r);
    EXPECT_EQ(wire::RoleName(wire::ToWire(r)), config::RoleName(r));
  }
  EXPECT_EQ(wire::FromWire(wire::Role::TOOL), std::nullopt);
  EXPECT_EQ(wire::RoleName(wire::Role::TOOL), "tool");
}

// What a sender that did not set the field, or a newer build, puts on the wire: read back
// through an encoded message, as a receiver would, and refused rather than guessed.
TEST(WireStatesTest, UnsetAndUnknownValuesAreRejected) {
  wire::OutMessage out;
  wire::Identity id;
  id.role = wire::Role::TOOL;
  wire::WriteHeader(out.envelope().initHeader(), id, 1, 0);
  auto reply = out.envelope().getBody().initClusterStatusReply();
  auto members = reply.initMembers(2);
  members[0].setState(static_cast<wire::MemberState>(200));
  members[0].setRole(static_cast<wire::Role>(99));
  // members[1] and the job state stay unset.
  auto in = wire::InMessage::Decode(std::move(out).Finish(), wire::DecodeLimits{});
  ASSERT_TRUE(in.ok()) << in.status();
  auto r = in->envelope().getBody().getClusterStatusReply();

  auto job = wire::FromWire(r.getJobState());
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(job.status().IsInvalidArgument()) << job.status();
  EXPECT_NE(job.status().message().find("job state 0"), std::string::npos) << job.status();

  auto bad = wire::FromWire(r.getMembers()[0].getState());
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(bad.status().IsInvalidArgument()) << bad.status();
  EXPECT_NE(bad.status().message().find("member state 200"), std::string::npos) << bad.status();
  EXPECT_FALSE(wire::FromWire(r.getMembers()[1].getState()).ok());

  EXPECT_EQ(wire::FromWire(r.getMembers()[0].getRole()), std::nullopt);
  EXPECT_EQ(wire::RoleName(r.getMembers()[0].getRole()), "unknown");
  EXPECT_EQ(wire::FromWire(r.getMembers()[1].getRole()), std::nullopt);
}

}  // namespace
}  // namespace tandem
