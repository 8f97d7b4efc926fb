// When a worker logs its malformed lines (BadLineReporter), and the file it keeps them in.
#include "worker/bad_line_report.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "common/testing/test_util.h"

namespace tandem::worker {
namespace {

using ::tandem::testing::TempDir;
using ::tandem::testing::WriteFile;

const std::vector<std::string> kReports = {"a.tsv:3: bad hex categorical field",
                                           "a.tsv:9: wrong field count", "a.tsv:12: bad label",
                                           "b.tsv:1: bad integer field"};

TEST(BadLineReporterTest, SilentWithoutMalformedLines) {
  BadLineReporter r(10);
  for (int64_t step = 0; step < 50; ++step) EXPECT_FALSE(r.AfterStep(step, 0, {}));
  EXPECT_FALSE(r.AtEnd(0, {}));
}

TEST(BadLineReporterTest, FirstMalformedLinesAreToldAtOnceWithTheFirstReports) {
  BadLineReporter r(100);
  EXPECT_FALSE(r.AfterStep(0, 0, {}));
  const auto line = r.AfterStep(1, 2, kReports);
  ASSERT_TRUE(line);
  EXPECT_NE(line->find("2 malformed lines"), std::string::npos) << *line;
  EXPECT_NE(line->find("a.tsv:3: bad hex categorical field"), std::string::npos) << *line;
  EXPECT_NE(line->find("a.tsv:12: bad label"), std::string::npos) << *line;
  // Only the first kShownBadReports.
  EXPECT_EQ(line->find("b.tsv:1"), std::string::npos) << *line;
  EXPECT_EQ(r.logged(), 2);
}

TEST(BadLineReporterTest, GrowthIsToldAtMostOncePerInterval) {
  BadLineReporter r(10);
  ASSERT_TRUE(r.AfterStep(3, 1, kReports));
  int lines = 0;
  int64_t count = 1;
  for (int64_t step = 4; step < 43; ++step) {
    ++count;  // a malformed line in every step
    if (auto line = r.AfterStep(step, count, kReports)) {
      ++lines;
      EXPECT_GE(step, 13);
      EXPECT_NE(line->find(std::to_string(count) + " malformed lines"), std::string::npos) << *line;
    }
  }
  EXPECT_EQ(lines, 3);  // steps 13, 23, 33
  EXPECT_EQ(r.logged(), 31);
}

TEST(BadLineReporterTest, NoLineWhileTheCountStaysTheSame) {
  BadLineReporter r(1);
  ASSERT_TRUE(r.AfterStep(0, 3, kReports));
  for (int64_t step = 1; step < 20; ++step) EXPECT_FALSE(r.AfterStep(step, 3, kReports));
  EXPECT_FALSE(r.AtEnd(3, kReports));
}

TEST(BadLineReporterTest, TheEndTellsWhatTheIntervalHeldBack) {
  BadLineReporter r(100);
  ASSERT_TRUE(r.AfterStep(0, 1, kReports));
  EXPECT_FALSE(r.AfterStep(1, 5, kReports));
  const auto line = r.AtEnd(5, kReports);
  ASSERT_TRUE(line);
  EXPECT_NE(line->find("5 malformed lines"), std::string::npos) << *line;
  EXPECT_NE(line->find("(+4)"), std::string::npos) << *line;
}

TEST(BadLinesFileTest, RoundTripKeepsTheFirstReports) {
  TempDir dir;
  const std::string path = BadLinesPath(dir.path(), 1);
  ASSERT_TRUE(WriteBadLinesFile(path, {1, 7, kReports}).ok());  // creates bad_lines/
  auto f = ReadBadLinesFile(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->rank, 1);
  EXPECT_EQ(f->count, 7);
  ASSERT_EQ(f->reports.size(), kShownBadReports);
  EXPECT_EQ(f->reports[0], kReports[0]);
}

TEST(BadLinesFileTest, ReadAllSkipsOthersAndOrdersByRank) {
  TempDir dir;
  ASSERT_TRUE(WriteBadLinesFile(BadLinesPath(dir.path(), 2), {2, 1, {"c.tsv:1: bad label"}}).ok());
  ASSERT_TRUE(WriteBadLinesFile(BadLinesPath(dir.path(), 0), {0, 3, kReports}).ok());
  WriteFile(dir.path() + "/bad_lines/worker-1.json", "not json");
  WriteFile(dir.path() + "/bad_lines/notes.txt", "{}");
  const auto files = ReadAllBadLinesFiles(dir.path());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].rank, 0);
  EXPECT_EQ(files[1].rank, 2);
  EXPECT_EQ(files[1].reports.at(0), "c.tsv:1: bad label");
  EXPECT_TRUE(ReadAllBadLinesFiles(dir.path() + "/none").empty());
}

TEST(BadLinesFileTest, RemoveOfAnAbsentFileIsFine) {
  TempDir dir;
  const std::string path = BadLinesPath(dir.path(), 0);
  EXPECT_TRUE(RemoveBadLinesFile(path).ok());
  ASSERT_TRUE(WriteBadLinesFile(path, {0, 1, {}}).ok());
  EXPECT_TRUE(RemoveBadLinesFile(path).ok());
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(ReadBadLinesFile(path).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tandem::worker
