#include "server/chief/chief_state.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "common/testing/test_util.h"

namespace tandem::chief {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

TEST(ChiefStateTest, FreshJobStartsAtTermOneAndPersistsIt) {
  TempDir dir;
  auto state = ChiefState::Open(dir.path());
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ((*state)->data().term, 1u);
  EXPECT_EQ((*state)->data().generation, 1u);
  EXPECT_EQ((*state)->data().highest_incarnation, 0u);
  EXPECT_EQ((*state)->data().latest_step, -1);
  EXPECT_EQ((*state)->path(), dir.path() + "/chief/state");
  auto on_disk = DecodeChiefState(ReadFile((*state)->path()), "state");
  ASSERT_TRUE(on_disk.ok()) << on_disk.status();
  EXPECT_EQ(*on_disk, (*state)->data());
  EXPECT_FALSE(std::filesystem::exists((*state)->path() + ".tmp"));
}

TEST(ChiefStateTest, TermIncrementsAcrossRestartsAndSavedNumbersSurvive) {
  TempDir dir;
  {
    auto state = ChiefState::Open(dir.path());
    ASSERT_TRUE(state.ok()) << state.status();
    ChiefStateData d = (*state)->data();
    d.highest_incarnation = 17;
    d.generation = 4;
    d.timeline = 2;
    ASSERT_TRUE((*state)->Save(d).ok());
  }
  for (uint64_t expected_term : {2u, 3u}) {
    auto state = ChiefState::Open(dir.path());
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ((*state)->data().term, expected_term);
    EXPECT_EQ((*state)->data().highest_incarnation, 17u);
    EXPECT_EQ((*state)->data().generation, 4u);
    EXPECT_EQ((*state)->data().timeline, 2u);
  }
}

TEST(ChiefStateTest, CorruptStateFileIsAnErrorNamingTheFile) {
  TempDir dir;
  ASSERT_TRUE(ChiefState::Open(dir.path()).ok());
  const std::string path = dir.path() + "/chief/state";
  WriteFile(path, "{\"term\": 3, \"highest_inc");
  auto state = ChiefState::Open(dir.path());
  ASSERT_FALSE(state.ok());
  EXPECT_TRUE(state.status().IsDataLoss()) << state.status();
  EXPECT_NE(state.status().message().find(path), std::string::npos) << state.status();
  // Not silently reset: the file is left for a person to look at.
  EXPECT_EQ(ReadFile(path), "{\"term\": 3, \"highest_inc");
}

TEST(ChiefStateTest, MissingFieldIsAnErrorNamingTheField) {
  auto d = DecodeChiefState(R"({"term": 1, "generation": 1, "timeline": 0, "latest_step": -1})",
                            "/x/state");
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(d.status().IsDataLoss());
  EXPECT_NE(d.status().message().find("highest_incarnation"), std::string::npos) << d.status();
  EXPECT_NE(d.status().message().find("/x/state"), std::string::npos) << d.status();
}

TEST(ChiefStateTest, EncodeDecodeRoundTrips) {
  ChiefStateData d;
  d.term = 7;
  d.highest_incarnation = 123456789012345ull;
  d.generation = 9;
  d.timeline = 3;
  d.latest_step = 4200;
  d.run_open = true;
  d.run_resume_step = 99;
  d.run_training_ms = 1700000000123;
  d.run_ended_ms = 1700000009999;
  d.run_stop_reason = "SIGTERM to ps:1";
  d.run_end_state = JobState::kStopped;
  d.run_result = R"({"model_checksum":"ab"})";
  const std::string text = EncodeChiefState(d);
  EXPECT_NE(text.find(R"("run_end_state": "stopped")"), std::string::npos) << text;
  auto back = DecodeChiefState(text, "s");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, d);
}

TEST(ChiefStateTest, UnknownEndStateIsDataLoss) {
  auto d = DecodeChiefState(R"({"term": 2, "highest_incarnation": 5, "generation": 1,
                                "timeline": 0, "latest_step": 8, "run_end_state": "finished"})",
                            "s");
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(d.status().IsDataLoss()) << d.status();
  EXPECT_NE(d.status().message().find("finished"), std::string::npos) << d.status();
}

// A state file of a build before the run record: no run is open, so the chief starts the job.
TEST(ChiefStateTest, StateWithoutRunFieldsHasNoRunOpen) {
  auto d = DecodeChiefState(
      R"({"term": 2, "highest_incarnation": 5, "generation": 1, "timeline": 0, "latest_step": 8})",
      "s");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->run_open);
  EXPECT_EQ(d->run_resume_step, -1);
  EXPECT_EQ(d->run_end_state, std::nullopt);
  EXPECT_TRUE(DecodeChiefState(R"({"term": 2, "highest_incarnation": 5, "generation": 1,
                                   "timeline": 0, "latest_step": 8, "run_open": 1})",
                               "s")
                  .status()
                  .IsDataLoss());
}

}  // namespace
}  // namespace tandem::chief
