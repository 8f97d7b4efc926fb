#include "server/chief/membership.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "common/testing/test_util.h"

namespace tandem::chief {
namespace {

using std::chrono::milliseconds;
using testing::ReadFile;
using testing::TempDir;

constexpr milliseconds kTimeout{1000};

MembershipOptions Options(bool strict = true) {
  MembershipOptions o;
  o.num_ps = 1;
  o.num_workers = 2;
  o.build_id = "0.1.0+gabc";
  o.config_hash = "00ff00ff00ff00ff";
  o.strict_determinism = strict;
  o.heartbeat_interval = milliseconds(100);
  o.heartbeat_timeout = kTimeout;
  o.ps_watchdog = kTimeout;
  o.total_steps = 50;
  return o;
}

class MembershipTest : public ::testing::Test {
 protected:
  void SetUp() override { Restart(); }

  // A new chief process on the same checkpoint directory.
  void Restart(bool strict = true) {
    members_.reset();
    auto state = ChiefState::Open(dir_.path());
    ASSERT_TRUE(state.ok()) << state.status();
    state_ = std::move(state).value();
    MembershipOptions o = Options(strict);
    o.wall_ms = [this] { return wall_ms_; };
    members_ = std::make_unique<Membership>(o, state_.get());
  }

  RegisterInput Input(Role role, uint32_t index, uint64_t last = 0) {
    RegisterInput in;
    in.role = role;
    in.index = index;
    in.build_id = "0.1.0+gabc";
    in.config_hash = "00ff00ff00ff00ff";
    in.determinism_class = "cpu-avx2";
    in.last_incarnation = last;
    in.address = "tcp://127.0.0.1:" + std::to_string(40000 + next_port_++);
    in.pid = static_cast<uint32_t>(1000 + next_port_);
    in.host = "h";
    return in;
  }

  uint64_t Reg(Role role, uint32_t index, uint64_t last = 0) {
    auto issued = members_->Register(Input(role, index, last), now_);
    EXPECT_TRUE(issued.ok()) << issued.status();
    return issued.ok() ? issued->incarnation : 0;
  }

  HeartbeatResult Beat(Role role, uint32_t index, uint64_t inc,
                       MemberState state = MemberState::kTraining, double loss = 0.5) {
    MemberProgress p;
    p.state = state;
    p.loss = loss;
    p.step = 3;
    auto r = members_->Heartbeat(role, index, inc, p, now_);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : HeartbeatResult{};
  }

  // Lets `ms` pass, then declares every silent member lost (as if no probe answered).
  int SilenceAndDeclare(milliseconds ms) {
    now_ += ms;
    int lost = 0;
    for (const auto& s : members_->Suspects(now_)) {
      auto r = members_->DeclareLost(s, "test", now_);
      EXPECT_TRUE(r.ok()) << r.status();
      lost += r.ok() && *r;
    }
    return lost;
  }

  void RegisterAll() {
    ps0_ = Reg(Role::kPs, 0);
    w0_ = Reg(Role::kWorker, 0);
    w1_ = Reg(Role::kWorker, 1);
  }

  TempDir dir_;
  std::unique_ptr<ChiefState> state_;
  std::unique_ptr<Membership> members_;
  Clock::time_point now_ = Clock::time_point{} + std::chrono::hours(1);
  int64_t wall_ms_ = 1'700'000'000'000;  // Unix ms, moved by the tests with now_
  int next_port_ = 0;
  uint64_t ps0_ = 0, w0_ = 0, w1_ = 0;
};

TEST_F(MembershipTest, IncarnationsComeFromOneIncreasingCounterPersistedBeforeUse) {
  RegisterAll();
  EXPECT_EQ(ps0_, 1u);
  EXPECT_EQ(w0_, 2u);
  EXPECT_EQ(w1_, 3u);
  auto disk = DecodeChiefState(ReadFile(state_->path()), "state");
  ASSERT_TRUE(disk.ok());
  EXPECT_EQ(disk->highest_incarnation, 3u);
  EXPECT_EQ(SilenceAndDeclare(kTimeout + milliseconds(1)), 3);
  EXPECT_EQ(Reg(Role::kWorker, 1), 4u);
  EXPECT_EQ(Reg(Role::kPs, 0), 5u);
  // A new chief continues the counter: higher is always newer.
  Restart();
  EXPECT_EQ(Reg(Role::kWorker, 0), 6u);
}

TEST_F(MembershipTest, DuplicateLiveRankIsRefused) {
  RegisterAll();
  now_ += milliseconds(500);
  auto again = members_->Register(Input(Role::kWorker, 1), now_);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(again.status().message().find("worker:1"), std::string::npos) << again.status();
  EXPECT_NE(again.status().message().find("alive"), std::string::npos) << again.status();
  // A stale claim of an older incarnation is refused too.
  auto old = members_->Register(Input(Role::kWorker, 1, w1_ - 1), now_);
  EXPECT_FALSE(old.ok());
}

TEST_F(MembershipTest, LiveRivalNamesTheIncarnationInTheWayOnly) {
  RegisterAll();
  RegisterInput newcomer = Input(Role::kWorker, 1);
  auto rival = members_->LiveRival(newcomer, now_);
  ASSERT_TRUE(rival.has_value());
  EXPECT_EQ(rival->incarnation, w1_);
  RegisterInput other_config = newcomer;
  other_config.config_hash = "x";
  EXPECT_FALSE(members_->LiveRival(other_config, now_).has_value()) << "refused anyway";
  EXPECT_FALSE(members_->LiveRival(Input(Role::kWorker, 1, w1_), now_).has_value());
  // Not answering the probe: the newcomer replaces it before any heartbeat timeout.
  ASSERT_TRUE(*members_->DeclareLost(*rival, "replaced", now_, /*replaced=*/true));
  auto issued = members_->Register(newcomer, now_);
  ASSERT_TRUE(issued.ok()) << issued.status();
  EXPECT_GT(issued->incarnation, w1_);
  EXPECT_FALSE(members_->LiveRival(Input(Role::kWorker, 0, w0_), now_).has_value());
}

TEST_F(MembershipTest, SameIncarnationRegisteringAgainKeepsIt) {
  RegisterAll();
  now_ += milliseconds(500);
  auto again = members_->Register(Input(Role::kWorker, 1, w1_), now_);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->incarnation, w1_);
  EXPECT_EQ(state_->data().highest_incarnation, 3u);
}

TEST_F(MembershipTest, RegistrationRetriedByTheSameProcessKeepsItsIncarnation) {
  // The first reply was lost: the process retries without an incarnation.
  RegisterInput in = Input(Role::kWorker, 0);
  auto first = members_->Register(in, now_);
  ASSERT_TRUE(first.ok());
  auto retry = members_->Register(in, now_ + milliseconds(10));
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_EQ(retry->incarnation, first->incarnation);
}

TEST_F(MembershipTest, BuildIdMismatchIsRefusedNamingBoth) {
  RegisterInput in = Input(Role::kPs, 0);
  in.build_id = "0.1.0+gdef";
  auto r = members_->Register(in, now_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(r.status().message().find("0.1.0+gdef"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("0.1.0+gabc"), std::string::npos) << r.status();
}

TEST_F(MembershipTest, ConfigHashMismatchIsRefusedNamingBoth) {
  RegisterInput in = Input(Role::kWorker, 1);
  in.config_hash = "1234123412341234";
  auto r = members_->Register(in, now_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(r.status().message().find("1234123412341234"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("00ff00ff00ff00ff"), std::string::npos) << r.status();
  EXPECT_EQ(state_->data().highest_incarnation, 0u) << "a refusal issues nothing";
}

TEST_F(MembershipTest, StrictDeterminismRefusesAnotherClassNamingBoth) {
  Reg(Role::kWorker, 0);
  RegisterInput in = Input(Role::kWorker, 1);
  in.determinism_class = "cuda-sm90";
  auto r = members_->Register(in, now_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(r.status().message().find("cuda-sm90"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("cpu-avx2"), std::string::npos) << r.status();
  // PS classes do not matter for bit-identity of the dense model.
  RegisterInput ps = Input(Role::kPs, 0);
  ps.determinism_class = "whatever";
  EXPECT_TRUE(members_->Register(ps, now_).ok());
}

TEST_F(MembershipTest, RelaxedDeterminismAcceptsAnotherClass) {
  Restart(/*strict=*/false);
  Reg(Role::kWorker, 0);
  RegisterInput in = Input(Role::kWorker, 1);
  in.determinism_class = "cuda-sm90";
  auto r = members_->Register(in, now_);
  EXPECT_TRUE(r.ok()) << r.status();
  auto snap = members_->Snapshot(now_);
  EXPECT_EQ(snap.members[2].determinism_class, "cuda-sm90");
}

TEST_F(MembershipTest, HeartbeatOfLostOrReplacedIncarnationIsStale) {
  RegisterAll();
  now_ += milliseconds(100);
  Beat(Role::kPs, 0, ps0_);
  Beat(Role::kWorker, 0, w0_);
  EXPECT_EQ(SilenceAndDeclare(kTimeout - milliseconds(150)), 0);
  Beat(Role::kPs, 0, ps0_);
  Beat(Role::kWorker, 0, w0_);
  EXPECT_EQ(SilenceAndDeclare(milliseconds(100)), 1);  // worker 1 never heartbeated
  auto lost = members_->Heartbeat(Role::kWorker, 1, w1_, {}, now_);
  ASSERT_TRUE(lost.ok());
  EXPECT_EQ(lost->verdict, HeartbeatVerdict::kStale);
  EXPECT_NE(lost->message.find("lost"), std::string::npos) << lost->message;
  const uint64_t replacement = Reg(Role::kWorker, 1);
  EXPECT_GT(replacement, w1_);
  auto zombie = members_->Heartbeat(Role::kWorker, 1, w1_, {}, now_);
  ASSERT_TRUE(zombie.ok());
  EXPECT_EQ(zombie->verdict, HeartbeatVerdict::kStale);
  EXPECT_EQ(Beat(Role::kWorker, 1, replacement).verdict, HeartbeatVerdict::kOk);
}

TEST_F(MembershipTest, HeartbeatOfUnknownMemberAsksForRegistration) {
  auto r = members_->Heartbeat(Role::kWorker, 0, 7, {}, now_);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->verdict, HeartbeatVerdict::kRetry);
  RegisterAll();
  auto newer = members_->Heartbeat(Role::kWorker, 0, w1_ + 10, {}, now_);
  ASSERT_TRUE(newer.ok());
  EXPECT_EQ(newer->verdict, HeartbeatVerdict::kRetry);
}

TEST_F(MembershipTest, MemberKeepsItsIncarnationAcrossAChiefRestart) {
  RegisterAll();
  Restart();
  EXPECT_EQ(members_->term(), 2u);
  auto hb = members_->Heartbeat(Role::kWorker, 0, w0_, {}, now_);
  ASSERT_TRUE(hb.ok());
  EXPECT_EQ(hb->verdict, HeartbeatVerdict::kRetry);
  auto again = members_->Register(Input(Role::kWorker, 0, w0_), now_);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->incarnation, w0_);
  EXPECT_EQ(again->term, 2u);
}

TEST_F(MembershipTest, AfterAChiefRestartTheNewerIncarnationWinsTheRank) {
  RegisterAll();
  EXPECT_EQ(SilenceAndDeclare(kTimeout + milliseconds(1)), 3);
  const uint64_t newer = Reg(Role::kWorker, 0);
  Restart();
  // The zombie of the replaced incarnation registers first; the newer one still wins.
  ASSERT_TRUE(members_->Register(Input(Role::kWorker, 0, w0_), now_).ok());
  auto winner = members_->Register(Input(Role::kWorker, 0, newer), now_);
  ASSERT_TRUE(winner.ok()) << winner.status();
  EXPECT_EQ(winner->incarnation, newer);
  auto zombie = members_->Heartbeat(Role::kWorker, 0, w0_, {}, now_);
  ASSERT_TRUE(zombie.ok());
  EXPECT_EQ(zombie->verdict, HeartbeatVerdict::kStale);
}

// ps.watchdog_ms (PROTOCOLS §9): a silent PS is suspected after its own limit, a worker after
// the heartbeat timeout; a worker is then lost, a PS not yet.
TEST_F(MembershipTest, APsIsSuspectedAfterItsWatchdogAWorkerAfterTheHeartbeatTimeout) {
  members_.reset();
  MembershipOptions o = Options();
  o.ps_watchdog = 3 * kTimeout;
  o.wall_ms = [this] { return wall_ms_; };
  members_ = std::make_unique<Membership>(o, state_.get());
  RegisterAll();
  now_ += 2 * kTimeout;
  auto suspects = members_->Suspects(now_);
  ASSERT_EQ(suspects.size(), 2u);
  for (const auto& s : suspects) EXPECT_EQ(s.role, Role::kWorker);
  const Suspect ps{Role::kPs, 0, ps0_, "", 0};
  EXPECT_FALSE(*members_->DeclareLost(ps, "silent", now_)) << "before ps.watchdog_ms";
  now_ += kTimeout + milliseconds(1);
  suspects = members_->Suspects(now_);
  EXPECT_EQ(suspects.size(), 3u);
  EXPECT_TRUE(std::any_of(suspects.begin(), suspects.end(),
                          [](const Suspect& s) { return s.role == Role::kPs; }));
}

TEST_F(MembershipTest, SilentMemberIsSuspectedAndAnAnsweredProbeKeepsIt) {
  RegisterAll();
  now_ += kTimeout;
  EXPECT_TRUE(members_->Suspects(now_).empty()) << "not before the timeout";
  now_ += milliseconds(1);
  auto suspects = members_->Suspects(now_);
  ASSERT_EQ(suspects.size(), 3u);
  for (const auto& s : suspects) members_->ProbeAnswered(s, now_);
  now_ += milliseconds(500);
  EXPECT_TRUE(members_->Suspects(now_).empty());
  for (const auto& s : suspects) EXPECT_FALSE(*members_->DeclareLost(s, "x", now_));
  now_ += kTimeout;
  ASSERT_EQ(members_->Suspects(now_).size(), 3u);
  // A heartbeat arriving while the probe is out saves the member.
  suspects = members_->Suspects(now_);
  Beat(Role::kWorker, 0, w0_);
  int lost = 0;
  for (const auto& s : suspects) lost += *members_->DeclareLost(s, "no heartbeat", now_);
  EXPECT_EQ(lost, 2);
  auto snap = members_->Snapshot(now_);
  EXPECT_EQ(Name(snap.members[0].state), "lost");
  EXPECT_EQ(snap.members[0].lost_reason, "no heartbeat");
  EXPECT_EQ(Name(snap.members[1].state), "training");
  EXPECT_EQ(Name(snap.members[2].state), "lost");
}

// A shard that kept its state for a rejoin learns from its registration whether the run has
// trained yet (PsDaemon::WrongState): before, every shard must be at the resume step.
TEST_F(MembershipTest, RegistrationsBeforeTheRunTrainsAreAJobStartAndLaterOnesAreNot) {
  auto ps = members_->Register(Input(Role::kPs, 0), now_);
  ASSERT_TRUE(ps.ok());
  EXPECT_TRUE(ps->job_start);
  auto w0 = members_->Register(Input(Role::kWorker, 0), now_);
  ASSERT_TRUE(w0.ok());
  EXPECT_TRUE(w0->job_start);
  auto w1 = members_->Register(Input(Role::kWorker, 1), now_);  // the last: the job trains
  ASSERT_TRUE(w1.ok());
  EXPECT_TRUE(w1->job_start) << "its registration completed the start; the run trains after it";
  now_ += milliseconds(1);
  auto again = members_->Register(Input(Role::kPs, 0, ps->incarnation), now_);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->job_start) << "the run trains: a shard keeps what it applied";
  members_->StartOver();
  auto over = members_->Register(Input(Role::kPs, 0, ps->incarnation), now_);
  ASSERT_TRUE(over.ok());
  EXPECT_TRUE(over->job_start) << "started over: the run has not trained";
}

TEST_F(MembershipTest, GenerationRisesOnWorkerLossAndAgainWhenAllWorkersAreBack) {
  RegisterAll();
  {
    auto again = members_->Register(Input(Role::kWorker, 0, w0_), now_);
    ASSERT_TRUE(again.ok());
    EXPECT_FALSE(again->joins_running_job) << "the same process registering again";
  }
  EXPECT_EQ(members_->generation(), 1u);
  now_ += kTimeout + milliseconds(1);
  Beat(Role::kWorker, 0, w0_);
  Beat(Role::kWorker, 1, w1_);
  ASSERT_EQ(SilenceAndDeclare(milliseconds(0)), 1);  // only the PS
  EXPECT_EQ(members_->generation(), 1u) << "a lost PS does not change the generation";
  now_ += milliseconds(500);
  Beat(Role::kWorker, 0, w0_);
  ASSERT_EQ(SilenceAndDeclare(milliseconds(600)), 1);  // worker 1
  EXPECT_EQ(members_->generation(), 2u);
  Reg(Role::kPs, 0);
  EXPECT_EQ(members_->generation(), 2u);
  auto back = members_->Register(Input(Role::kWorker, 1), now_);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->joins_running_job) << "a replacement rolls forward from the survivors";
  // Worker 0 has not been heard since the loss (it may have died with worker 1): not yet.
  EXPECT_EQ(back->generation, 2u);
  now_ += milliseconds(1);
  Beat(Role::kWorker, 0, w0_);
  EXPECT_EQ(members_->generation(), 3u);
  auto disk = DecodeChiefState(ReadFile(state_->path()), "state");
  ASSERT_TRUE(disk.ok());
  EXPECT_EQ(disk->generation, 3u);
}

// A worker replaced while the chief was away (a restarted chief never saw the loss): the
// replacement still gets a generation of its own, raised again once the survivor is heard from.
TEST_F(MembershipTest, AReplacementARestartedChiefNeverSawLostGetsANewGeneration) {
  ASSERT_TRUE(members_->OpenRun(-1).ok());
  RegisterAll();
  ASSERT_EQ(Name(members_->job_state()), "training");
  now_ += milliseconds(1000);
  wall_ms_ += 1000;
  Restart();  // the chief was killed; worker 1 dies while it is away
  members_->RejoinRun(now_);
  const uint64_t before = members_->generation();
  EXPECT_EQ(Reg(Role::kPs, 0, ps0_), ps0_);
  EXPECT_EQ(Reg(Role::kWorker, 0, w0_), w0_);
  EXPECT_EQ(members_->generation(), before) << "members that stayed keep the generation";
  now_ += milliseconds(10);
  auto replacement = members_->Register(Input(Role::kWorker, 1), now_);
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  EXPECT_TRUE(replacement->joins_running_job);
  EXPECT_EQ(replacement->generation, before + 1);
  EXPECT_TRUE(members_->Snapshot(now_).generation_pending);
  now_ += milliseconds(1);
  Beat(Role::kWorker, 0, w0_);
  EXPECT_EQ(members_->generation(), before + 2);
  EXPECT_FALSE(members_->Snapshot(now_).generation_pending);
}

TEST_F(MembershipTest, JobTrainsOnceEveryoneRegisteredAndIsDoneWithRankZerosResult) {
  const uint64_t w0 = Reg(Role::kWorker, 0);
  const uint64_t w1 = Reg(Role::kWorker, 1);
  EXPECT_EQ(Name(members_->job_state()), "starting");
  now_ += milliseconds(20);
  Reg(Role::kPs, 0);
  EXPECT_EQ(Name(members_->job_state()), "training");
  MemberProgress r0;
  r0.state = MemberState::kDone;
  r0.step = 50;
  r0.loss = 0.25;
  r0.auc = 0.75;
  r0.logloss = 0.4;
  r0.teacher_auc = 0.8;
  r0.model_checksum = "abcd";
  r0.detail = "outputs in /out";
  now_ += milliseconds(30);
  ASSERT_TRUE(members_->Heartbeat(Role::kWorker, 0, w0, r0, now_).ok());
  EXPECT_EQ(Name(members_->job_state()), "training");
  MemberProgress r1 = r0;
  r1.loss = 9;
  r1.auc = 0.1;
  r1.model_checksum = "ffff";
  auto last = members_->Heartbeat(Role::kWorker, 1, w1, r1, now_);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(Name(last->job_state), "done");
  EXPECT_TRUE(last->stop);
  auto snap = members_->Snapshot(now_ + milliseconds(1000));
  EXPECT_EQ(Name(snap.job_state), "done");
  EXPECT_DOUBLE_EQ(snap.loss, 0.25);
  EXPECT_DOUBLE_EQ(snap.auc, 0.75);
  EXPECT_DOUBLE_EQ(snap.logloss, 0.4);
  EXPECT_DOUBLE_EQ(snap.teacher_auc, 0.8);
  EXPECT_EQ(snap.model_checksum, "abcd");
  EXPECT_EQ(snap.detail, "outputs in /out");
  EXPECT_EQ(snap.step, 50);
  EXPECT_EQ(snap.elapsed_ms, 30) << "frozen once the job ended";
}

// Each worker reads its own share of the data: the job's malformed-line count is their sum,
// kept with the result so that a chief restarted after the end still shows it.
TEST_F(MembershipTest, MalformedLinesAreSummedOverWorkersAndKeptWithTheResult) {
  ASSERT_TRUE(members_->OpenRun(-1).ok());
  RegisterAll();
  MemberProgress p0;
  p0.state = MemberState::kTraining;
  p0.step = 10;
  p0.bad_lines = 2;
  MemberProgress p1 = p0;
  p1.bad_lines = 3;
  ASSERT_TRUE(members_->Heartbeat(Role::kWorker, 0, w0_, p0, now_).ok());
  ASSERT_TRUE(members_->Heartbeat(Role::kWorker, 1, w1_, p1, now_).ok());
  auto snap = members_->Snapshot(now_);
  EXPECT_EQ(snap.bad_lines, 5);
  for (const auto& m : snap.members) {
    if (m.role == Role::kWorker) {
      EXPECT_EQ(m.bad_lines, m.index == 0 ? 2 : 3);
    }
  }
  p0.state = p1.state = MemberState::kDone;
  p1.bad_lines = 4;
  ASSERT_TRUE(members_->Heartbeat(Role::kWorker, 0, w0_, p0, now_).ok());
  ASSERT_TRUE(members_->Heartbeat(Role::kWorker, 1, w1_, p1, now_).ok());
  ASSERT_EQ(Name(members_->job_state()), "done");
  EXPECT_EQ(members_->Snapshot(now_).bad_lines, 6);
  Restart();  // the workers are gone
  members_->RejoinRun(now_);
  ASSERT_EQ(Name(members_->job_state()), "done");
  EXPECT_EQ(members_->Snapshot(now_).bad_lines, 6);
}

TEST_F(MembershipTest, StopGoesThroughStoppingToStopped) {
  RegisterAll();
  EXPECT_EQ(Name(members_->RequestStop("SIGTERM to the chief", now_)), "stopping");
  auto hb = Beat(Role::kWorker, 0, w0_, MemberState::kStopped);
  EXPECT_TRUE(hb.stop);
  EXPECT_EQ(Name(hb.job_state), "stopping");
  EXPECT_TRUE(Beat(Role::kPs, 0, ps0_).stop);
  EXPECT_EQ(Name(Beat(Role::kWorker, 1, w1_, MemberState::kStopped).job_state), "stopped");
  EXPECT_EQ(members_->Snapshot(now_).detail, "SIGTERM to the chief");
  // Once ended the state no longer changes.
  EXPECT_EQ(Name(members_->RequestStop("again", now_)), "stopped");
}

TEST_F(MembershipTest, StoppingCountsLostWorkersAsStopped) {
  RegisterAll();
  members_->RequestStop("test", now_);
  now_ += milliseconds(900);
  Beat(Role::kWorker, 0, w0_, MemberState::kStopped);
  Beat(Role::kPs, 0, ps0_);
  EXPECT_EQ(Name(members_->job_state()), "stopping");
  EXPECT_EQ(SilenceAndDeclare(milliseconds(200)), 1);
  EXPECT_EQ(Name(members_->job_state()), "stopped");
}

TEST_F(MembershipTest, FailedWorkerFailsTheJobAndStopsEveryone) {
  RegisterAll();
  auto hb = Beat(Role::kWorker, 1, w1_, MemberState::kFailed);
  EXPECT_EQ(Name(hb.job_state), "failed");
  EXPECT_TRUE(hb.stop);
  MemberProgress p;
  p.state = MemberState::kFailed;
  p.detail = "NaN loss at step 12";
  ASSERT_TRUE(members_->Heartbeat(Role::kWorker, 1, w1_, p, now_).ok());
  EXPECT_TRUE(Beat(Role::kPs, 0, ps0_).stop);
  auto snap = members_->Snapshot(now_);
  EXPECT_EQ(Name(snap.job_state), "failed");
  EXPECT_NE(snap.detail.find("worker:1"), std::string::npos) << snap.detail;
}

TEST_F(MembershipTest, FailedPsFailsTheJobNamingIt) {
  RegisterAll();
  MemberProgress p;
  p.state = MemberState::kFailed;
  p.detail = "ps:0 lost its data: it is at step -1, the slowest worker at step 40";
  auto hb = members_->Heartbeat(Role::kPs, 0, ps0_, p, now_);
  ASSERT_TRUE(hb.ok()) << hb.status();
  EXPECT_EQ(Name(hb->job_state), "failed");
  EXPECT_TRUE(Beat(Role::kWorker, 0, w0_).stop);
  const std::string detail = members_->Snapshot(now_).detail;
  EXPECT_NE(detail.find("ps:0 failed"), std::string::npos) << detail;
  EXPECT_NE(detail.find("lost its data"), std::string::npos) << detail;
}

// A member says what holds it (a PS refusing pushes: its disk is full); the view shows it on
// that member while it lasts and while the member is up.
TEST_F(MembershipTest, WhatHoldsAMemberIsShownWhileItIsUp) {
  ASSERT_TRUE(members_->OpenRun(-1).ok());
  RegisterAll();
  MemberProgress p;
  p.state = MemberState::kServing;
  p.waiting_on = "refusing pushes until it can write: push log: RESOURCE_EXHAUSTED: ENOSPC";
  ASSERT_TRUE(members_->Heartbeat(Role::kPs, 0, ps0_, p, now_).ok());
  auto waiting_on = [&] {
    for (const auto& m : members_->Snapshot(now_).members)
      if (m.role == Role::kPs) return m.waiting_on;
    return std::string("no ps");
  };
  EXPECT_EQ(waiting_on(), p.waiting_on);
  p.waiting_on.clear();
  ASSERT_TRUE(members_->Heartbeat(Role::kPs, 0, ps0_, p, now_).ok());
  EXPECT_EQ(waiting_on(), "");
  p.waiting_on = "waiting for space";
  p.state = MemberState::kFailed;
  ASSERT_TRUE(members_->Heartbeat(Role::kPs, 0, ps0_, p, now_).ok());
  EXPECT_EQ(waiting_on(), "") << "a failed member holds nothing";
}

TEST_F(MembershipTest, FailedDetailIsTheWorkersReason) {
  RegisterAll();
  MemberProgress p;
  p.state = MemberState::kFailed;
  p.detail = "NaN loss at step 12";
  ASSERT_TRUE(members_->Heartbeat(Role::kWorker, 1, w1_, p, now_).ok());
  EXPECT_NE(members_->Snapshot(now_).detail.find("NaN loss at step 12"), std::string::npos);
}

TEST_F(MembershipTest, TerminalMembersAreNotMonitoredAndFinishAfterFallingQuiet) {
  RegisterAll();
  Beat(Role::kWorker, 0, w0_, MemberState::kDone);
  Beat(Role::kWorker, 1, w1_, MemberState::kDone);
  EXPECT_EQ(Name(members_->job_state()), "done");
  Beat(Role::kPs, 0, ps0_, MemberState::kStopped);
  EXPECT_FALSE(members_->Finished(now_, milliseconds(300)));
  now_ += milliseconds(300);
  EXPECT_TRUE(members_->Suspects(now_ + kTimeout * 10).empty());
  EXPECT_TRUE(members_->Finished(now_, milliseconds(300)));
}

// A member's last word (ChiefClient::Leave) after its final report ends the wait for its
// silence at once; its report stands. Worker 1 says it before worker 0 is done: the job still
// ends done with worker 0's result (a member that left a running job would not count).
TEST_F(MembershipTest, ALastWordAfterTheFinalReportEndsTheWaitAndKeepsTheReport) {
  RegisterAll();
  Beat(Role::kWorker, 1, w1_, MemberState::kDone);
  Beat(Role::kWorker, 1, w1_, MemberState::kLeft);
  EXPECT_EQ(Name(members_->job_state()), "training");
  Beat(Role::kWorker, 0, w0_, MemberState::kDone);
  EXPECT_EQ(Name(members_->job_state()), "done");
  Beat(Role::kPs, 0, ps0_, MemberState::kStopped);
  EXPECT_FALSE(members_->Finished(now_, milliseconds(300))) << "worker 0 and ps 0 still may talk";
  Beat(Role::kWorker, 0, w0_, MemberState::kLeft);
  EXPECT_FALSE(members_->Finished(now_, milliseconds(300))) << "ps 0 still may talk";
  Beat(Role::kPs, 0, ps0_, MemberState::kLeft);
  EXPECT_TRUE(members_->Finished(now_, milliseconds(300)));
  auto snap = members_->Snapshot(now_);
  for (const auto& m : snap.members) EXPECT_NE(Name(m.state), "left") << "the report stands";
}

TEST_F(MembershipTest, RunningMemberHoldsBackFinished) {
  RegisterAll();
  members_->RequestStop("test", now_);
  Beat(Role::kWorker, 0, w0_, MemberState::kStopped);
  Beat(Role::kWorker, 1, w1_, MemberState::kStopped);
  EXPECT_EQ(Name(members_->job_state()), "stopped");
  now_ += milliseconds(500);
  Beat(Role::kPs, 0, ps0_, MemberState::kTraining);
  EXPECT_FALSE(members_->Finished(now_ + milliseconds(400), milliseconds(300)));
  // A PS that simply exits is declared lost, and then the chief may leave.
  EXPECT_EQ(SilenceAndDeclare(kTimeout + milliseconds(1)), 1);
  EXPECT_TRUE(members_->Finished(now_, milliseconds(300)));
}

TEST_F(MembershipTest, MalformedRegistrationsAreInvalid) {
  auto out_of_range = members_->Register(Input(Role::kWorker, 2), now_);
  EXPECT_TRUE(out_of_range.status().IsInvalidArgument()) << out_of_range.status();
  RegisterInput no_address = Input(Role::kPs, 0);
  no_address.address.clear();
  EXPECT_TRUE(members_->Register(no_address, now_).status().IsInvalidArgument());
  auto hb = members_->Heartbeat(Role::kPs, 1, 1, {}, now_);
  EXPECT_TRUE(hb.status().IsInvalidArgument());
}

TEST_F(MembershipTest, MemberThatLeavesIsNotMonitored) {
  RegisterAll();
  Beat(Role::kPs, 0, ps0_, MemberState::kLeft);
  auto snap = members_->Snapshot(now_);
  EXPECT_EQ(Name(snap.members[0].state), "left");
  for (const auto& s : members_->Suspects(now_ + kTimeout * 2)) EXPECT_FALSE(s.role == Role::kPs);
}

// --- a chief restarted into a running job (PROTOCOLS §10) ----------------------------------

TEST_F(MembershipTest, RejoinedRunTrainsAgainOnceAllReRegisterAndKeepsItsElapsedTime) {
  ASSERT_TRUE(members_->OpenRun(-1).ok());
  RegisterAll();
  ASSERT_EQ(Name(members_->job_state()), "training");
  now_ += milliseconds(5000);
  wall_ms_ += 5000;
  Restart();  // the chief was killed: nothing closed the run
  ASSERT_TRUE(state_->data().run_open);
  members_->RejoinRun(now_);
  EXPECT_EQ(Name(members_->job_state()), "starting");
  EXPECT_TRUE(members_->Suspects(now_ + kTimeout * 3).empty()) << "nobody re-registered yet";
  EXPECT_EQ(Reg(Role::kPs, 0, ps0_), ps0_);
  EXPECT_EQ(Reg(Role::kWorker, 0, w0_), w0_);
  EXPECT_EQ(Name(members_->job_state()), "starting");
  EXPECT_EQ(Reg(Role::kWorker, 1, w1_), w1_);
  EXPECT_EQ(Name(members_->job_state()), "training");
  now_ += milliseconds(1000);
  wall_ms_ += 1000;
  EXPECT_EQ(members_->Snapshot(now_).elapsed_ms, 6000) << "since the run began training";
}

TEST_F(MembershipTest, RejoinedRunThatHadEndedIsStillDoneWithWorkerZerosResult) {
  ASSERT_TRUE(members_->OpenRun(-1).ok());
  RegisterAll();
  MemberProgress done;
  done.state = MemberState::kDone;
  done.step = 49;
  done.auc = 0.75;
  done.model_checksum = "00112233";
  ASSERT_TRUE(members_->Heartbeat(Role::kWorker, 0, w0_, done, now_).ok());
  done.model_checksum = "ffff";
  ASSERT_TRUE(members_->Heartbeat(Role::kWorker, 1, w1_, done, now_).ok());
  ASSERT_EQ(Name(members_->job_state()), "done");
  now_ += milliseconds(100);
  wall_ms_ += 100;
  Restart();  // killed before the PS heard the job ended; the workers are gone
  members_->RejoinRun(now_);
  EXPECT_EQ(Name(members_->job_state()), "done");
  JobSnapshot snap = members_->Snapshot(now_);
  EXPECT_EQ(snap.model_checksum, "00112233");
  EXPECT_EQ(snap.step, 49) << "worker 0's last step, though no worker is registered";
  EXPECT_DOUBLE_EQ(snap.auc, 0.75);
  // The PS may still come back to hear it: the chief waits a heartbeat timeout for it.
  EXPECT_FALSE(members_->Finished(now_ + milliseconds(10), milliseconds(300)));
  EXPECT_EQ(Reg(Role::kPs, 0, ps0_), ps0_);
  HeartbeatResult r = Beat(Role::kPs, 0, ps0_, MemberState::kServing);
  EXPECT_TRUE(r.stop);
  EXPECT_EQ(Name(r.job_state), "done");
  now_ += milliseconds(50);
  Beat(Role::kPs, 0, ps0_, MemberState::kStopped);
  EXPECT_TRUE(members_->Finished(now_ + kTimeout, milliseconds(300)));
}

TEST_F(MembershipTest, RejoinedRunKeepsARequestedStop) {
  ASSERT_TRUE(members_->OpenRun(-1).ok());
  RegisterAll();
  members_->RequestStop("SIGTERM to ps:0", now_);
  Restart();
  members_->RejoinRun(now_);
  EXPECT_EQ(Name(members_->job_state()), "stopping");
  EXPECT_EQ(Reg(Role::kWorker, 0, w0_), w0_);
  EXPECT_TRUE(Beat(Role::kWorker, 0, w0_).stop);
}

TEST_F(MembershipTest, ClosedRunIsNotRejoinedAndOpenRunStartsClean) {
  ASSERT_TRUE(members_->OpenRun(7).ok());
  EXPECT_TRUE(state_->data().run_open);
  EXPECT_EQ(state_->data().run_resume_step, 7);
  ASSERT_TRUE(members_->CloseRun().ok());
  Restart();
  EXPECT_FALSE(state_->data().run_open);
  auto disk = DecodeChiefState(ReadFile(state_->path()), "state");
  ASSERT_TRUE(disk.ok());
  EXPECT_FALSE(disk->run_open);
}

// A supervisor restarts a failed job from its last checkpoint (systemd on bare metal): a job
// that fails again and again without committing a newer one is refused past max_rollbacks, with
// the reason, instead of being restarted forever.
TEST_F(MembershipTest, AJobFailingAgainFromTheSameCheckpointIsRefusedPastMaxRollbacks) {
  for (int run = 0; run < 3; ++run) {  // the first run and two restarts, max_rollbacks = 2
    ASSERT_TRUE(members_->OpenRun(7, 2).ok()) << "run " << run;
    RegisterAll();
    Beat(Role::kWorker, 0, w0_, MemberState::kFailed);
    ASSERT_EQ(Name(members_->job_state()), "failed");
    ASSERT_TRUE(members_->CloseRun().ok());
    Restart();
  }
  EXPECT_EQ(state_->data().futile_runs, 2);
  Status refused = members_->OpenRun(7, 2);
  EXPECT_TRUE(refused.IsFailedPrecondition()) << refused;
  EXPECT_NE(refused.message().find("3 times in a row from the checkpoint of step 7"),
            std::string::npos)
      << refused;
  EXPECT_NE(refused.message().find("recovery.max_rollbacks = 2"), std::string::npos);
  EXPECT_FALSE(state_->data().run_open);
  // A newer checkpoint committed in between: not futile, counting starts again.
  ASSERT_TRUE(members_->OpenRun(9, 2).ok());
  EXPECT_EQ(state_->data().futile_runs, 0);
}

// Workers stopped after a stop the restarted chief never heard of: the job is stopped anyway,
// or the PS would wait for its end forever.
TEST_F(MembershipTest, EveryWorkerStoppedEndsTheJobWithoutAStopRequest) {
  RegisterAll();
  Beat(Role::kWorker, 0, w0_, MemberState::kStopped);
  EXPECT_EQ(Name(members_->job_state()), "training");
  Beat(Role::kWorker, 1, w1_, MemberState::kStopped);
  EXPECT_EQ(Name(members_->job_state()), "stopped");
}

// SIGSTOP of the chief: nobody's heartbeats were heard, through no fault of theirs.
TEST_F(MembershipTest, ExcusedSilenceMakesNoSuspects) {
  RegisterAll();
  now_ += kTimeout * 3;
  EXPECT_EQ(members_->Suspects(now_).size(), 3u);
  members_->ExcuseSilence(now_);
  EXPECT_TRUE(members_->Suspects(now_).empty());
  EXPECT_EQ(members_->Suspects(now_ + kTimeout + milliseconds(1)).size(), 3u);
}

// A chief cut off from the network hears every member fall silent at once. It is isolated (the
// monitor declares nobody lost) only while no live member heartbeated within half the timeout,
// and the first member heard again excuses everyone's silence: the others then get a whole
// timeout to be heard from before anyone is suspected.
TEST_F(MembershipTest, AChiefThatHearsNobodyDeclaresNobodyAndExcusesEveryoneWhenHeardAgain) {
  RegisterAll();
  now_ += kTimeout / 2;
  EXPECT_FALSE(members_->NoteIsolation(now_)) << "heard within half the timeout";
  now_ += kTimeout * 3;
  EXPECT_TRUE(members_->NoteIsolation(now_));
  EXPECT_TRUE(members_->isolated());
  EXPECT_EQ(members_->Suspects(now_).size(), 3u) << "silent all the same: the monitor holds back";
  Beat(Role::kWorker, 1, w1_);
  EXPECT_FALSE(members_->isolated());
  EXPECT_FALSE(members_->NoteIsolation(now_));
  EXPECT_TRUE(members_->Suspects(now_).empty()) << "every member's silence is excused";
  // One member silent while another is heard: that member's own fault, suspected as always.
  now_ += kTimeout + milliseconds(1);
  Beat(Role::kWorker, 1, w1_);
  EXPECT_FALSE(members_->NoteIsolation(now_));
  auto suspects = members_->Suspects(now_);
  ASSERT_EQ(suspects.size(), 2u);
  for (const auto& s : suspects) EXPECT_TRUE(*members_->DeclareLost(s, "silent", now_));
  // A registration also ends an isolation.
  now_ += kTimeout * 3;
  EXPECT_TRUE(members_->NoteIsolation(now_));
  Reg(Role::kPs, 0);
  EXPECT_FALSE(members_->isolated());
}

// A periodic heartbeat built before a member's last word ("stopped") may arrive after it: the
// terminal state stays, and the member finishes once quiet.
TEST_F(MembershipTest, ALateHeartbeatDoesNotUndoAMembersLastWord) {
  RegisterAll();
  members_->RequestStop("test", now_);
  Beat(Role::kWorker, 0, w0_, MemberState::kStopped);
  Beat(Role::kWorker, 1, w1_, MemberState::kStopped);
  Beat(Role::kPs, 0, ps0_, MemberState::kStopped);
  Beat(Role::kPs, 0, ps0_, MemberState::kServing);  // the late one
  now_ += milliseconds(300);
  EXPECT_TRUE(members_->Finished(now_, milliseconds(300)));
  EXPECT_TRUE(members_->Suspects(now_ + kTimeout * 10).empty()) << "terminal: not monitored";
}

// After the job has ended, members falling silent together are leaving, not a sign that the
// chief is cut off: one that left without a last word is suspected (and then declared lost) as
// usual, and the chief may leave without waiting out its grace.
TEST_F(MembershipTest, AfterTheJobEndedSilentMembersAreLeavingNotAPartition) {
  RegisterAll();
  members_->RequestStop("test", now_);
  Beat(Role::kWorker, 0, w0_, MemberState::kStopped);
  Beat(Role::kWorker, 1, w1_, MemberState::kStopped);
  ASSERT_EQ(Name(members_->job_state()), "stopped");
  Beat(Role::kPs, 0, ps0_, MemberState::kTraining);  // its last word said nothing of the end
  now_ += kTimeout * 3;
  EXPECT_FALSE(members_->NoteIsolation(now_));
  EXPECT_FALSE(members_->isolated());
  EXPECT_FALSE(members_->Finished(now_, milliseconds(300)));
  EXPECT_EQ(SilenceAndDeclare(milliseconds(0)), 1);
  EXPECT_TRUE(members_->Finished(now_, milliseconds(300)));
}

// A worker declared lost (cut off) that reaches the chief again while nobody holds its rank
// registers as its own successor: a new incarnation that rolls forward. Once it is alive, its
// old incarnation is stale, and another registration of the rank is refused.
TEST_F(MembershipTest, ALostWorkerComingBackBeforeAnySuccessorBecomesItsSuccessor) {
  RegisterAll();
  now_ += kTimeout + milliseconds(1);
  Beat(Role::kWorker, 0, w0_);
  Beat(Role::kPs, 0, ps0_);
  ASSERT_EQ(SilenceAndDeclare(milliseconds(0)), 1);
  EXPECT_EQ(Beat(Role::kWorker, 1, w1_).verdict, HeartbeatVerdict::kStale);
  auto again = members_->Register(Input(Role::kWorker, 1), now_);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_GT(again->incarnation, w1_);
  EXPECT_TRUE(again->joins_running_job);
  EXPECT_EQ(Beat(Role::kWorker, 1, w1_).verdict, HeartbeatVerdict::kStale);
  auto rival = members_->Register(Input(Role::kWorker, 1), now_);
  EXPECT_EQ(rival.status().code(), StatusCode::kPermissionDenied) << rival.status();
}

// A replacement whose registration reply was lost (the chief probed the dead rival past the
// attempt's budget) registers again as the same process: it is told again that it joins the
// running job, or it would start from the checkpoint while the others went on.
TEST_F(MembershipTest, ARegistrationRetriedAfterALostReplyStillJoinsTheRunningJob) {
  RegisterAll();
  now_ += kTimeout + milliseconds(1);
  Beat(Role::kWorker, 0, w0_);
  Beat(Role::kPs, 0, ps0_);
  ASSERT_EQ(SilenceAndDeclare(milliseconds(0)), 1);
  const RegisterInput in = Input(Role::kWorker, 1);
  auto first = members_->Register(in, now_);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(first->joins_running_job);
  now_ += milliseconds(50);
  auto again = members_->Register(in, now_);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->incarnation, first->incarnation) << "the same process";
  EXPECT_TRUE(again->joins_running_job);
  auto fresh = members_->Register(Input(Role::kWorker, 0, w0_), now_);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_FALSE(fresh->joins_running_job) << "worker 0 was never replaced";
}

// Two workers cut off from each other but not from the chief (PROTOCOLS §11): both ask for a
// regroup after their group of generation g broke; the chief opens g + 1 once, persisted.
TEST_F(MembershipTest, ARegroupOpensOneGenerationForAllTheWorkersOfTheBrokenGroup) {
  RegisterAll();
  ASSERT_EQ(Name(members_->job_state()), "training");
  const uint64_t g = members_->generation();
  now_ += milliseconds(300);
  Beat(Role::kWorker, 0, w0_);
  Beat(Role::kWorker, 1, w1_);
  auto first = members_->Regroup(0, w0_, g, "allreduce timed out", now_);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->raised);
  EXPECT_EQ(first->generation, g + 1);
  auto second = members_->Regroup(1, w1_, g, "allreduce timed out", now_);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(second->raised) << "the other worker's request finds the generation open";
  EXPECT_EQ(second->generation, g + 1);
  EXPECT_EQ(members_->generation(), g + 1);
  EXPECT_FALSE(members_->Snapshot(now_).generation_pending) << "nobody is awaited";
  auto disk = DecodeChiefState(ReadFile(state_->path()), "state");
  ASSERT_TRUE(disk.ok());
  EXPECT_EQ(disk->generation, g + 1);
  // The group of g + 1 cannot form either (the cut lasts): the next request opens g + 2.
  now_ += milliseconds(300);
  Beat(Role::kWorker, 0, w0_);
  Beat(Role::kWorker, 1, w1_);
  auto third = members_->Regroup(1, w1_, g + 1, "rebuild timed out", now_);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_TRUE(third->raised);
  EXPECT_EQ(members_->generation(), g + 2);
}

// A worker that may be dead is declared lost instead; a pending replacement, a stopping job and
// a replaced incarnation get no regroup.
TEST_F(MembershipTest, NoRegroupWhileAWorkerIsSilentOrBeingReplacedOrTheJobStops) {
  RegisterAll();
  const uint64_t g = members_->generation();
  now_ += kTimeout + milliseconds(1);
  Beat(Role::kWorker, 0, w0_);
  Beat(Role::kPs, 0, ps0_);
  auto silent = members_->Regroup(0, w0_, g, "allreduce failed", now_);
  ASSERT_TRUE(silent.ok()) << silent.status();
  EXPECT_FALSE(silent->raised);
  EXPECT_NE(silent->why_not.find("worker:1"), std::string::npos) << silent->why_not;
  EXPECT_EQ(members_->generation(), g);
  ASSERT_EQ(SilenceAndDeclare(milliseconds(0)), 1);  // worker 1 lost: g + 1, pending
  const uint64_t lost = members_->generation();
  EXPECT_EQ(lost, g + 1);
  auto pending = members_->Regroup(0, w0_, lost, "allreduce failed", now_);
  ASSERT_TRUE(pending.ok()) << pending.status();
  EXPECT_FALSE(pending->raised);
  EXPECT_NE(pending->why_not.find("replaced"), std::string::npos) << pending->why_not;
  auto zombie = members_->Regroup(1, w1_, lost, "allreduce failed", now_);
  EXPECT_EQ(zombie.status().code(), StatusCode::kFailedPrecondition) << zombie.status();
  auto outside = members_->Regroup(7, w0_, lost, "allreduce failed", now_);
  EXPECT_EQ(outside.status().code(), StatusCode::kInvalidArgument) << outside.status();
  const uint64_t w1 = Reg(Role::kWorker, 1);
  now_ += milliseconds(1);
  Beat(Role::kWorker, 0, w0_);
  ASSERT_EQ(members_->generation(), g + 2) << "every worker is present again";
  members_->RequestStop("test", now_);
  Beat(Role::kWorker, 1, w1);
  auto stopping = members_->Regroup(0, w0_, g + 2, "allreduce failed", now_);
  ASSERT_TRUE(stopping.ok()) << stopping.status();
  EXPECT_FALSE(stopping->raised);
  EXPECT_NE(stopping->why_not.find("stopping"), std::string::npos) << stopping->why_not;
  EXPECT_EQ(members_->generation(), g + 2);
}

}  // namespace
}  // namespace tandem::chief
