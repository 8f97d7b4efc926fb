#include "cli/step_timeline.h"

#include "gtest/gtest.h"

namespace tandem::cli {
namespace {

using std::chrono::milliseconds;
using Clock = StepTimeline::Clock;

const Clock::time_point t0 = Clock::now();
Clock::time_point At(int ms) { return t0 + milliseconds(ms); }

TEST(StepTimelineTest, APauseRunsFromTheFaultToTheFirstStepAfterItAndBetweenSteps) {
  StepTimeline t;
  t.Saw(At(0), -1);  // not started: no advance
  t.Saw(At(100), 4);
  t.Saw(At(300), 9);
  t.Saw(At(400), 9);   // a view with no new step
  t.Saw(At(2300), 9);  // stalled
  t.Saw(At(2500), 12);
  t.Saw(At(2700), 15);
  // The fault at 350: 2150 ms to the next step.
  EXPECT_EQ(t.LongestPause(At(350), At(2700)), milliseconds(2150));
  // Between steps, and from the last one to the window's end.
  EXPECT_EQ(t.LongestPause(At(2400), At(2650)), milliseconds(150));
  EXPECT_EQ(t.LongestPause(At(2600), At(3600)), milliseconds(900));
  // Nothing moved in the window.
  EXPECT_EQ(t.LongestPause(At(3000), At(3500)), milliseconds(500));
  EXPECT_EQ(t.LongestPause(At(3000), At(3000)), milliseconds(0));
  // The whole run: first to last step, the time before the first step not counted.
  EXPECT_EQ(t.LongestPause(), milliseconds(2200));
  EXPECT_EQ(t.last_advance(), At(2700));
}

TEST(StepTimelineTest, StepsTrainedAgainAfterARollbackAreProgress) {
  StepTimeline t;
  t.Saw(At(0), 100);
  t.Saw(At(100), 120);
  t.Saw(At(1000), 99);   // rolled back to the checkpoint of step 99: not an advance
  t.Saw(At(1200), 105);  // trained again: an advance
  t.Saw(At(1300), 121);
  EXPECT_EQ(t.LongestPause(At(100), At(1300)), milliseconds(1100));
  EXPECT_EQ(t.LongestPause(), milliseconds(1100));
}

// While the chief did not answer, the workers may have trained on: a pause across such a time is
// not known.
TEST(StepTimelineTest, APauseAcrossABlindPollIsNotKnown) {
  StepTimeline t;
  t.Saw(At(0), 10);
  t.Saw(At(100), 20);
  t.Blind(At(600));
  t.Saw(At(2100), 80);
  t.Saw(At(2400), 90);
  EXPECT_FALSE(t.LongestPause(At(50), At(2400)).has_value());
  EXPECT_FALSE(t.LongestPause(At(600), At(700)).has_value());
  EXPECT_EQ(t.LongestPause(At(601), At(2400)), milliseconds(1499));
  EXPECT_EQ(t.LongestPause(At(0), At(599)), milliseconds(499));
  // The whole run leaves the blind time out.
  EXPECT_EQ(t.LongestPause(), milliseconds(300));
  StepTimeline only_blind;
  only_blind.Saw(At(0), 1);
  only_blind.Blind(At(10));
  only_blind.Saw(At(20), 2);
  EXPECT_FALSE(only_blind.LongestPause().has_value());
}

TEST(StepTimelineTest, NoPauseWithoutTwoSteps) {
  StepTimeline t;
  EXPECT_FALSE(t.LongestPause().has_value());
  EXPECT_FALSE(t.last_advance().has_value());
  t.Saw(At(0), 3);
  EXPECT_FALSE(t.LongestPause().has_value());
  EXPECT_EQ(t.LongestPause(At(0), At(700)), milliseconds(700));
}

}  // namespace
}  // namespace tandem::cli
