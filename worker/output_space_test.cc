// Rank 0's outputs on a full disk (issue 21's failure paths): training goes on while metrics
// lines wait in memory, and the job's last outputs wait for space instead of failing the job.
#include "worker/output_space.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/chief_client.h"
#include "common/sync.h"
#include "common/testing/full_disk.h"
#include "common/testing/test_util.h"

namespace tandem::worker {
namespace {

using std::chrono::milliseconds;

struct Fixture {
  testing::TempDir dir;
  std::unique_ptr<metrics::MetricsWriter> metrics;
  std::unique_ptr<metrics::TensorBoardWriter> tensorboard;
  Mutex mu;
  std::vector<std::string> said GUARDED_BY(mu);  // every waiting_on call
  std::atomic<bool> stop{false};
  std::unique_ptr<OutputSpace> space;

  Fixture() {
    auto m = metrics::MetricsWriter::Open(dir.File("metrics.jsonl"));
    EXPECT_TRUE(m.ok()) << m.status();
    metrics = std::move(m).value();
    auto tb = metrics::TensorBoardWriter::Open(dir.File("tensorboard"));
    EXPECT_TRUE(tb.ok()) << tb.status();
    tensorboard = std::move(tb).value();
    space =
        std::make_unique<OutputSpace>(OutputSpaceOptions{.metrics = metrics.get(),
                                                         .tensorboard = tensorboard.get(),
                                                         .waiting_on =
                                                             [this](const std::string& why) {
                                                               MutexLock lock(&mu);
                                                               said.push_back(why);
                                                             },
                                                         .stopped = [this] { return stop.load(); },
                                                         .retry_every = milliseconds(50)});
  }
  std::vector<std::string> Said() {
    MutexLock lock(&mu);
    return said;
  }
  Status Step(int64_t step) {
    metrics::StepMetrics m;
    m.step = step;
    m.loss = 0.5;
    TANDEM_RETURN_IF_ERROR(metrics->WriteStep(m));
    return tensorboard->WriteScalar(step, metrics::kTagLoss, 0.5f);
  }
  size_t Lines() {
    const std::string text = testing::ReadFile(dir.File("metrics.jsonl"));
    return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
  }
};

// While lines wait, the chief hears so once (not once a line), marked as not holding the job;
// once they are written, it hears "".
TEST(OutputSpaceTest, SaysOnceWhatWaitsWhileTrainingGoesOnAndWhenNothingDoes) {
  Fixture f;
  ASSERT_TRUE(f.Step(0).ok());
  f.space->Report();
  EXPECT_TRUE(f.Said().empty());
  {
    testing::FullDisk full;
    for (int64_t step = 1; step <= 3; ++step) {
      ASSERT_TRUE(f.Step(step).ok());
      f.space->Report();
    }
  }
  std::vector<std::string> said = f.Said();
  ASSERT_EQ(said.size(), 1u);
  EXPECT_TRUE(said[0].ends_with(kWaitingGoesOn)) << said[0];
  EXPECT_NE(said[0].find("lines of metrics.jsonl wait in memory for space"), std::string::npos)
      << said[0];
  EXPECT_NE(said[0].find("events of events.out.tfevents"), std::string::npos) << said[0];
  EXPECT_EQ(f.Lines(), 1u);
  ASSERT_TRUE(f.Step(4).ok());
  f.space->Report();
  said = f.Said();
  ASSERT_EQ(said.size(), 2u);
  EXPECT_EQ(said[1], "");
  EXPECT_EQ(f.Lines(), 5u);
}

// The final line waits for space (said, without "training goes on": the job waits for it) and
// is written, after the lines held before it, once the disk has room.
TEST(OutputSpaceTest, TheFinalLineWaitsForSpaceAndIsWrittenOnceThereIsSpace) {
  Fixture f;
  ASSERT_TRUE(f.Step(0).ok());
  auto full = std::make_unique<testing::FullDisk>();
  ASSERT_TRUE(f.Step(1).ok());
  std::atomic<bool> waiting{false};
  std::thread lift([&] {
    for (int i = 0; i < 200 && !waiting.load(); ++i) std::this_thread::sleep_for(milliseconds(10));
    std::this_thread::sleep_for(milliseconds(200));  // a few retries meet the full disk
    full->Lift();
  });
  const metrics::FinalMetrics final{0.7, 0.5, "0123456789abcdef0123456789abcdef"};
  Status written = f.space->WhenThereIsSpace("metrics.jsonl's final line", [&] {
    Status s = f.metrics->WriteFinal(final);
    if (!s.ok()) waiting.store(true);
    return s;
  });
  lift.join();
  full.reset();
  ASSERT_TRUE(written.ok()) << written;
  EXPECT_TRUE(waiting.load());
  EXPECT_EQ(f.Lines(), 3u);
  // Step 1's event still waits (said as such) until the held outputs are written.
  std::vector<std::string> said = f.Said();
  ASSERT_FALSE(said.empty());
  EXPECT_NE(said.back().find("events of events.out.tfevents"), std::string::npos) << said.back();
  ASSERT_TRUE(
      f.space->WhenThereIsSpace("the held events", [&] { return f.space->WriteHeld(); }).ok());
  said = f.Said();
  ASSERT_GE(said.size(), 2u);
  EXPECT_NE(said.front().find("waiting for space for metrics.jsonl's final line: "),
            std::string::npos)
      << said.front();
  EXPECT_FALSE(said.front().ends_with(kWaitingGoesOn)) << said.front();
  EXPECT_EQ(said.back(), "");
}

// A stop (SIGTERM, the job stopping) ends the wait: the job stops instead of waiting forever.
TEST(OutputSpaceTest, AStopEndsTheWaitForSpace) {
  Fixture f;
  ASSERT_TRUE(f.Step(0).ok());
  testing::FullDisk full;
  ASSERT_TRUE(f.Step(1).ok());
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(200));
    f.stop.store(true);
  });
  const Status waited =
      f.space->WhenThereIsSpace("the held lines", [&] { return f.space->WriteHeld(); });
  stopper.join();
  EXPECT_TRUE(waited.IsCancelled()) << waited;
  EXPECT_NE(waited.message().find("was waiting for space when the job was stopped"),
            std::string::npos)
      << waited;
}

// Other errors are not waited out.
TEST(OutputSpaceTest, AnErrorOtherThanSpaceIsReturnedAtOnce) {
  Fixture f;
  const Status s = f.space->WhenThereIsSpace("x", [] { return Status::PermissionDenied("no"); });
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(f.Said().empty());
}

}  // namespace
}  // namespace tandem::worker
