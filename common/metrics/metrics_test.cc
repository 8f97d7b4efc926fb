#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "common/crc32c.h"
#include "common/metrics/holding_append_file.h"
#include "common/metrics/metrics_writer.h"
#include "common/metrics/tensorboard_writer.h"
#include "common/testing/full_disk.h"

namespace tandem::metrics {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "tandem_metrics_XXXXXX").string();
    path_ = ::mkdtemp(pattern.data()) ? pattern : "";
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

void AppendRaw(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::app) << bytes;
}

// Every line must end in '\n' and parse as a JSON object; ADD_FAILURE otherwise.
std::vector<json> ReadJsonLines(const std::string& path) {
  const std::string text = ReadFile(path);
  EXPECT_TRUE(text.empty() || text.back() == '\n') << "torn last line";
  std::vector<json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    json parsed = json::parse(line, nullptr, /*allow_exceptions=*/false);
    EXPECT_TRUE(parsed.is_object()) << "not a JSON object: " << line;
    lines.push_back(std::move(parsed));
  }
  return lines;
}

StepMetrics Step(int64_t step, double loss, bool replay = false) {
  StepMetrics m;
  m.step = step;
  m.timeline = 3;
  m.loss = loss;
  m.samples_per_sec = 1000.0 * static_cast<double>(step);
  m.times = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6};
  m.replay = replay;
  return m;
}

EvalMetrics Eval(int64_t step, double auc) { return {step, 3, auc, 0.45}; }

std::unique_ptr<MetricsWriter> OpenOrDie(const std::string& path) {
  auto writer = MetricsWriter::Open(path);
  EXPECT_TRUE(writer.ok()) << writer.status();
  return writer.ok() ? std::move(writer).value() : nullptr;
}

// ---------------------------------------------------------------------------------------------
// metrics.jsonl

TEST(MetricsWriterTest, StepLinesHaveEveryRequiredKey) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  auto writer = OpenOrDie(path);
  ASSERT_TRUE(writer->WriteStep(Step(7, 0.5)).ok());
  const std::vector<json> lines = ReadJsonLines(path);
  ASSERT_EQ(lines.size(), 1u);
  for (const char* key : {"step", "timeline", "loss", "samples_per_sec", "data_s", "pull_s",
                          "compute_s", "allreduce_s", "push_s", "wait_s"}) {
    EXPECT_TRUE(lines[0].contains(key)) << key;
  }
  EXPECT_EQ(lines[0]["step"], 7);
  EXPECT_EQ(lines[0]["timeline"], 3);
  EXPECT_DOUBLE_EQ(lines[0]["loss"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(lines[0]["samples_per_sec"].get<double>(), 7000.0);
  EXPECT_DOUBLE_EQ(lines[0]["allreduce_s"].get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(lines[0]["wait_s"].get<double>(), 0.6);
  EXPECT_FALSE(lines[0].contains("final"));
}

TEST(MetricsWriterTest, EvalLinesHaveEveryRequiredKey) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  auto writer = OpenOrDie(path);
  ASSERT_TRUE(writer->WriteEval(Eval(100, 0.78)).ok());
  const std::vector<json> lines = ReadJsonLines(path);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["step"], 100);
  EXPECT_EQ(lines[0]["timeline"], 3);
  EXPECT_DOUBLE_EQ(lines[0]["auc"].get<double>(), 0.78);
  EXPECT_DOUBLE_EQ(lines[0]["logloss"].get<double>(), 0.45);
  EXPECT_FALSE(lines[0].contains("final"));
}

TEST(MetricsWriterTest, ReplayKeyOnlyOnReplayedSteps) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  auto writer = OpenOrDie(path);
  ASSERT_TRUE(writer->WriteStep(Step(1, 0.7)).ok());
  ASSERT_TRUE(writer->WriteStep(Step(1, 0.7, /*replay=*/true)).ok());
  const std::vector<json> lines = ReadJsonLines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_FALSE(lines[0].contains("replay"));
  ASSERT_TRUE(lines[1].contains("replay"));
  EXPECT_EQ(lines[1]["replay"], true);
}

TEST(MetricsWriterTest, FinalLineIsExactlyOneAndLast) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  auto writer = OpenOrDie(path);
  ASSERT_TRUE(writer->WriteStep(Step(1, 0.7)).ok());
  ASSERT_TRUE(writer->WriteEval(Eval(1, 0.6)).ok());
  ASSERT_TRUE(writer->WriteFinal({0.79, 0.44, "0123456789abcdef0123456789abcdef"}).ok());
  const std::vector<json> lines = ReadJsonLines(path);
  ASSERT_EQ(lines.size(), 3u);
  int finals = 0;
  for (const json& line : lines) finals += line.contains("final") ? 1 : 0;
  EXPECT_EQ(finals, 1);
  EXPECT_EQ(lines.back()["final"], true);
  EXPECT_DOUBLE_EQ(lines.back()["auc"].get<double>(), 0.79);
  EXPECT_DOUBLE_EQ(lines.back()["logloss"].get<double>(), 0.44);
  EXPECT_EQ(lines.back()["model_checksum"], "0123456789abcdef0123456789abcdef");
}

// Per-label figures ride beside the unchanged first-label keys, and only with several labels: a
// single-label job's lines are as they always were.
TEST(MetricsWriterTest, TasksOnlyWithSeveralLabels) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  auto writer = OpenOrDie(path);
  EvalMetrics one = Eval(10, 0.7);
  one.tasks = {{"click", 0.7, 0.45, NAN}};
  ASSERT_TRUE(writer->WriteEval(one).ok());
  EvalMetrics two = Eval(20, 0.71);
  two.tasks = {{"click", 0.71, 0.45, NAN}, {"conversion", 0.66, 0.31, NAN}};
  ASSERT_TRUE(writer->WriteEval(two).ok());
  FinalMetrics final_line{0.72, 0.44, "0123456789abcdef0123456789abcdef", 0.75};
  // Labels keep data.labels order, not the alphabetical one.
  final_line.tasks = {{"zeta", 0.72, 0.44, 0.75}, {"alpha", 0.67, 0.30, NAN}};
  ASSERT_TRUE(writer->WriteFinal(final_line).ok());

  const std::vector<json> lines = ReadJsonLines(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_FALSE(lines[0].contains("tasks"));
  ASSERT_TRUE(lines[1].contains("tasks"));
  EXPECT_DOUBLE_EQ(lines[1]["auc"].get<double>(), 0.71);
  EXPECT_DOUBLE_EQ(lines[1]["tasks"]["click"]["auc"].get<double>(), 0.71);
  EXPECT_DOUBLE_EQ(lines[1]["tasks"]["conversion"]["auc"].get<double>(), 0.66);
  EXPECT_DOUBLE_EQ(lines[1]["tasks"]["conversion"]["logloss"].get<double>(), 0.31);
  EXPECT_FALSE(lines[1]["tasks"]["click"].contains("teacher_auc"));

  const json& last = lines[2];
  EXPECT_EQ(last["final"], true);
  EXPECT_DOUBLE_EQ(last["auc"].get<double>(), 0.72);
  EXPECT_DOUBLE_EQ(last["teacher_auc"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(last["tasks"]["zeta"]["teacher_auc"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(last["tasks"]["alpha"]["logloss"].get<double>(), 0.30);
  EXPECT_FALSE(last["tasks"]["alpha"].contains("teacher_auc"));
  const std::string text = ReadFile(path);
  EXPECT_LT(text.find("\"zeta\""), text.find("\"alpha\""));
}

// Scripts read metrics.jsonl from older runs too: "bad_lines" is added only when the writer is
// given a count, and every line kind carries it then.
TEST(MetricsWriterTest, BadLinesOnlyWhenGiven) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  auto writer = OpenOrDie(path);
  ASSERT_TRUE(writer->WriteStep(Step(1, 0.7)).ok());
  StepMetrics step = Step(2, 0.6);
  step.bad_lines = 4;
  ASSERT_TRUE(writer->WriteStep(step).ok());
  EvalMetrics eval = Eval(2, 0.6);
  eval.bad_lines = 4;
  ASSERT_TRUE(writer->WriteEval(eval).ok());
  FinalMetrics final_line{0.79, 0.44, "0123456789abcdef0123456789abcdef"};
  final_line.bad_lines = 9;
  ASSERT_TRUE(writer->WriteFinal(final_line).ok());
  const std::vector<json> lines = ReadJsonLines(path);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_FALSE(lines[0].contains("bad_lines"));
  EXPECT_EQ(lines[1]["bad_lines"], 4);
  EXPECT_TRUE(lines[1].contains("samples_per_sec"));
  EXPECT_EQ(lines[2]["bad_lines"], 4);
  EXPECT_EQ(lines[3]["bad_lines"], 9);
  EXPECT_EQ(lines[3]["final"], true);
}

TEST(MetricsWriterTest, WritesAfterFinalAreRefused) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  auto writer = OpenOrDie(path);
  ASSERT_TRUE(writer->WriteFinal({0.79, 0.44, "00"}).ok());
  EXPECT_TRUE(writer->WriteFinal({0.79, 0.44, "00"}).IsFailedPrecondition());
  EXPECT_TRUE(writer->WriteStep(Step(2, 0.1)).IsFailedPrecondition());
  EXPECT_TRUE(writer->WriteEval(Eval(2, 0.5)).IsFailedPrecondition());
  EXPECT_EQ(ReadJsonLines(path).size(), 1u);
}

TEST(MetricsWriterTest, EachLineIsInTheFileBeforeTheCallReturns) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  auto writer = OpenOrDie(path);
  for (int step = 1; step <= 3; ++step) {
    ASSERT_TRUE(writer->WriteStep(Step(step, 0.5)).ok());
    // The writer is still open: a line sitting in a user-space buffer would be missing here.
    EXPECT_EQ(ReadJsonLines(path).size(), static_cast<size_t>(step));
  }
}

TEST(MetricsWriterTest, ReopenAppends) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  {
    auto writer = OpenOrDie(path);
    ASSERT_TRUE(writer->WriteStep(Step(1, 0.7)).ok());
    ASSERT_TRUE(writer->WriteStep(Step(2, 0.6)).ok());
  }
  auto writer = OpenOrDie(path);
  ASSERT_TRUE(writer->WriteStep(Step(3, 0.5)).ok());
  const std::vector<json> lines = ReadJsonLines(path);
  ASSERT_EQ(lines.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(lines[i]["step"], i + 1);
}

TEST(MetricsWriterTest, ReopenCutsTornLastLine) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  {
    auto writer = OpenOrDie(path);
    ASSERT_TRUE(writer->WriteStep(Step(1, 0.7)).ok());
  }
  AppendRaw(path, R"({"step": 2, "timeline": 3, "lo)");  // a crash mid-write
  auto writer = OpenOrDie(path);
  ASSERT_TRUE(writer->WriteStep(Step(2, 0.6)).ok());
  const std::vector<json> lines = ReadJsonLines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["step"], 2);
  EXPECT_DOUBLE_EQ(lines[1]["loss"].get<double>(), 0.6);
}

TEST(MetricsWriterTest, ReopenOfATornFirstLineStartsEmpty) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  WriteFile(path, R"({"step": 1)");
  auto writer = OpenOrDie(path);
  ASSERT_TRUE(writer->WriteStep(Step(1, 0.7)).ok());
  EXPECT_EQ(ReadJsonLines(path).size(), 1u);
}

// A run resumed from a checkpoint (after a rollback) logs steps again: those up to the highest
// step already in the file are marked "replay": true, later ones are not.
TEST(MetricsWriterTest, StepsLoggedAgainAfterAReopenAreReplays) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  {
    auto writer = OpenOrDie(path);
    for (int step : {49, 99, 149}) ASSERT_TRUE(writer->WriteStep(Step(step, 0.5)).ok());
    ASSERT_TRUE(writer->WriteEval({500, 0, 0.7, 0.5}).ok());  // an eval line's step is no step line
  }
  {
    auto writer = OpenOrDie(path);
    for (int step : {124, 149, 174}) ASSERT_TRUE(writer->WriteStep(Step(step, 0.5)).ok());
  }
  const std::vector<json> lines = ReadJsonLines(path);
  ASSERT_EQ(lines.size(), 7u);
  for (size_t i : {0u, 1u, 2u, 3u, 6u}) EXPECT_FALSE(lines[i].contains("replay")) << lines[i];
  EXPECT_EQ(lines[4].value("replay", false), true) << lines[4];
  EXPECT_EQ(lines[5].value("replay", false), true) << lines[5];
}

TEST(MetricsWriterTest, ReopenAfterFinalIsRefused) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  {
    auto writer = OpenOrDie(path);
    ASSERT_TRUE(writer->WriteFinal({0.79, 0.44, "00"}).ok());
  }
  const std::string before = ReadFile(path);
  auto reopened = MetricsWriter::Open(path);
  EXPECT_TRUE(reopened.status().IsFailedPrecondition()) << reopened.status();
  EXPECT_EQ(ReadFile(path), before);
}

TEST(MetricsWriterTest, ReopenFindsFinalLineBehindALongFile) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  {
    auto writer = OpenOrDie(path);
    // More than one backwards-scan chunk of lines before the final one.
    for (int step = 0; step < 200; ++step) ASSERT_TRUE(writer->WriteStep(Step(step, 0.5)).ok());
    ASSERT_TRUE(writer->WriteFinal({0.79, 0.44, "00"}).ok());
  }
  EXPECT_TRUE(MetricsWriter::Open(path).status().IsFailedPrecondition());
}

TEST(MetricsWriterTest, NonFiniteLossIsWrittenAsNull) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  auto writer = OpenOrDie(path);
  ASSERT_TRUE(writer->WriteStep(Step(1, std::numeric_limits<double>::quiet_NaN())).ok());
  const std::vector<json> lines = ReadJsonLines(path);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(lines[0]["loss"].is_null());
}

TEST(MetricsWriterTest, MissingDirectoryIsNotFound) {
  TempDir dir;
  auto writer = MetricsWriter::Open(dir.path() + "/no/such/dir/metrics.jsonl");
  EXPECT_TRUE(writer.status().IsNotFound()) << writer.status();
}

// ---------------------------------------------------------------------------------------------
// An independent reader for TensorBoard event files, written from TensorFlow's format
// description (record framing, protobuf wire format) rather than from tensorboard_writer.cc.

uint64_t LoadLittleEndian(std::string_view bytes, size_t pos, int width) {
  uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i) {
    value = (value << 8) | static_cast<uint8_t>(bytes[pos + static_cast<size_t>(i)]);
  }
  return value;
}

uint32_t Masked(std::string_view bytes) {
  const uint32_t crc = Crc32c(bytes.data(), bytes.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

struct RecordsOrError {
  std::vector<std::string> records;
  std::string error;  // empty when every record is sound
};

RecordsOrError ReadRecords(std::string_view file) {
  RecordsOrError out;
  size_t pos = 0;
  while (pos < file.size()) {
    if (file.size() - pos < 12) return {{}, "truncated header at " + std::to_string(pos)};
    const uint64_t length = LoadLittleEndian(file, pos, 8);
    if (LoadLittleEndian(file, pos + 8, 4) != Masked(file.substr(pos, 8))) {
      return {{}, "length CRC mismatch at " + std::to_string(pos)};
    }
    if (file.size() - pos - 12 < 4 || file.size() - pos - 16 < length) {
      return {{}, "truncated data at " + std::to_string(pos)};
    }
    const std::string_view data = file.substr(pos + 12, length);
    if (LoadLittleEndian(file, pos + 12 + length, 4) != Masked(data)) {
      return {{}, "data CRC mismatch at " + std::to_string(pos)};
    }
    out.records.emplace_back(data);
    pos += 16 + length;
  }
  return out;
}

// Reads protobuf wire-format primitives; each returns false on malformed input.
class ProtoCursor {
 public:
  explicit ProtoCursor(std::string_view bytes) : bytes_(bytes) {}
  bool done() const { return pos_ == bytes_.size(); }

  bool Varint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 70 && pos_ < bytes_.size(); shift += 7) {
      const uint8_t byte = static_cast<uint8_t>(bytes_[pos_++]);
      *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }
  bool Fixed(int width, uint64_t* value) {
    if (bytes_.size() - pos_ < static_cast<size_t>(width)) return false;
    *value = LoadLittleEndian(bytes_, pos_, width);
    pos_ += static_cast<size_t>(width);
    return true;
  }
  bool Bytes(std::string_view* value) {
    uint64_t length = 0;
    if (!Varint(&length) || bytes_.size() - pos_ < length) return false;
    *value = bytes_.substr(pos_, length);
    pos_ += length;
    return true;
  }

 private:
  std::string_view bytes_;
  size_t pos_ = 0;
};

struct TestValue {
  std::string tag;
  float simple_value = 0;
};

struct TestEvent {
  std::optional<double> wall_time;
  int64_t step = 0;
  std::optional<std::string> file_version;
  std::vector<TestValue> values;
};

template <typename To>
To BitsTo(uint64_t bits) {
  To value;
  if constexpr (sizeof(To) == 4) {
    const uint32_t narrow = static_cast<uint32_t>(bits);
    std::memcpy(&value, &narrow, 4);
  } else {
    std::memcpy(&value, &bits, 8);
  }
  return value;
}

bool ParseValue(std::string_view bytes, TestValue* value) {
  ProtoCursor in(bytes);
  while (!in.done()) {
    uint64_t key = 0, bits = 0;
    std::string_view tag;
    if (!in.Varint(&key)) return false;
    if (key == 0x0a && in.Bytes(&tag)) {
      value->tag = std::string(tag);
    } else if (key == 0x15 && in.Fixed(4, &bits)) {
      value->simple_value = BitsTo<float>(bits);
    } else {
      return false;
    }
  }
  return true;
}

bool ParseSummary(std::string_view bytes, std::vector<TestValue>* values) {
  ProtoCursor in(bytes);
  while (!in.done()) {
    uint64_t key = 0;
    std::string_view value;
    if (!in.Varint(&key) || key != 0x0a || !in.Bytes(&value)) return false;
    values->emplace_back();
    if (!ParseValue(value, &values->back())) return false;
  }
  return true;
}

bool ParseEvent(std::string_view bytes, TestEvent* event) {
  ProtoCursor in(bytes);
  while (!in.done()) {
    uint64_t key = 0, number = 0;
    std::string_view field;
    if (!in.Varint(&key)) return false;
    if (key == 0x09 && in.Fixed(8, &number)) {
      event->wall_time = BitsTo<double>(number);
    } else if (key == 0x10 && in.Varint(&number)) {
      event->step = static_cast<int64_t>(number);
    } else if (key == 0x1a && in.Bytes(&field)) {
      event->file_version = std::string(field);
    } else if (key == 0x2a && in.Bytes(&field)) {
      if (!ParseSummary(field, &event->values)) return false;
    } else {
      return false;
    }
  }
  return true;
}

// Reads every event of the one event file in `dir`; ADD_FAILURE on any framing or CRC error.
std::vector<TestEvent> ReadEvents(const std::string& path) {
  const RecordsOrError read = ReadRecords(ReadFile(path));
  EXPECT_EQ(read.error, "");
  std::vector<TestEvent> events;
  for (const std::string& record : read.records) {
    events.emplace_back();
    EXPECT_TRUE(ParseEvent(record, &events.back())) << "bad Event proto";
  }
  return events;
}

constexpr double kFixedWallTime = 1700000000.25;

TensorBoardOptions FixedOptions() {
  TensorBoardOptions options;
  options.hostname = "testhost";
  options.wall_clock = [] { return kFixedWallTime; };
  return options;
}

std::unique_ptr<TensorBoardWriter> OpenTbOrDie(const std::string& dir) {
  auto writer = TensorBoardWriter::Open(dir, FixedOptions());
  EXPECT_TRUE(writer.ok()) << writer.status();
  return writer.ok() ? std::move(writer).value() : nullptr;
}

TEST(TensorBoardWriterTest, FileNameFollowsTensorFlowPattern) {
  TempDir dir;
  auto writer = OpenTbOrDie(dir.path() + "/tb");  // created on demand
  ASSERT_NE(writer, nullptr);
  EXPECT_EQ(fs::path(writer->path()).filename(), "events.out.tfevents.1700000000.testhost");
  EXPECT_TRUE(fs::exists(writer->path()));
}

TEST(TensorBoardWriterTest, FirstRecordIsTheFileVersion) {
  TempDir dir;
  auto writer = OpenTbOrDie(dir.path());
  const std::vector<TestEvent> events = ReadEvents(writer->path());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[0].wall_time, kFixedWallTime);
  EXPECT_EQ(events[0].step, 0);
  EXPECT_TRUE(events[0].values.empty());
}

TEST(TensorBoardWriterTest, FirstRecordHeaderMatchesTensorFlowBytes) {
  TempDir dir;
  auto writer = OpenTbOrDie(dir.path());
  // Every event file TensorFlow writes starts with these 12 bytes: a 24-byte first Event
  // (wall_time, file_version) and the masked CRC of that length. Independent of our Crc32c.
  const std::string expected("\x18\0\0\0\0\0\0\0\xa3\x7f\x4b\x22", 12);
  EXPECT_EQ(ReadFile(writer->path()).substr(0, 12), expected);
}

TEST(TensorBoardWriterTest, ScalarsRoundTripWithTagsAndSteps) {
  TempDir dir;
  auto writer = OpenTbOrDie(dir.path());
  ASSERT_TRUE(writer->WriteScalar(1, kTagLoss, 0.693f).ok());
  const Scalar eval[] = {{kTagAuc, 0.75f}, {kTagLogloss, 0.5f}};
  ASSERT_TRUE(writer->WriteScalars(200, eval).ok());
  ASSERT_TRUE(writer->WriteScalar(201, kTagSamplesPerSec, 65536.5f).ok());

  const std::vector<TestEvent> events = ReadEvents(writer->path());
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[1].step, 1);
  ASSERT_EQ(events[1].values.size(), 1u);
  EXPECT_EQ(events[1].values[0].tag, "loss");
  EXPECT_EQ(events[1].values[0].simple_value, 0.693f);
  EXPECT_EQ(events[2].step, 200);
  ASSERT_EQ(events[2].values.size(), 2u);
  EXPECT_EQ(events[2].values[0].tag, "auc");
  EXPECT_EQ(events[2].values[0].simple_value, 0.75f);
  EXPECT_EQ(events[2].values[1].tag, "logloss");
  EXPECT_EQ(events[2].values[1].simple_value, 0.5f);
  EXPECT_EQ(events[3].step, 201);
  EXPECT_EQ(events[3].values.at(0).tag, "samples_per_sec");
  EXPECT_EQ(events[3].values.at(0).simple_value, 65536.5f);
  for (const TestEvent& event : events) EXPECT_EQ(event.wall_time, kFixedWallTime);
  for (size_t i = 1; i < events.size(); ++i) EXPECT_FALSE(events[i].file_version.has_value());
}

TEST(TensorBoardWriterTest, TaskTagsRoundTrip) {
  TempDir dir;
  auto writer = OpenTbOrDie(dir.path());
  EXPECT_EQ(TaskTag(kTagAuc, "click"), "auc/click");
  const std::string click = TaskTag(kTagAuc, "click");
  const std::string conversion = TaskTag(kTagLogloss, "conversion");
  const Scalar eval[] = {{kTagAuc, 0.75f}, {click, 0.75f}, {conversion, 0.25f}};
  ASSERT_TRUE(writer->WriteScalars(9, eval).ok());
  const std::vector<TestEvent> events = ReadEvents(writer->path());
  ASSERT_EQ(events.size(), 2u);
  ASSERT_EQ(events[1].values.size(), 3u);
  EXPECT_EQ(events[1].values[1].tag, "auc/click");
  EXPECT_EQ(events[1].values[1].simple_value, 0.75f);
  EXPECT_EQ(events[1].values[2].tag, "logloss/conversion");
  EXPECT_EQ(events[1].values[2].simple_value, 0.25f);
}

TEST(TensorBoardWriterTest, MultiByteAndNegativeStepsRoundTrip) {
  TempDir dir;
  auto writer = OpenTbOrDie(dir.path());
  const int64_t big = (int64_t{1} << 40) + 5;
  ASSERT_TRUE(writer->WriteScalar(big, kTagLoss, 1.0f).ok());
  ASSERT_TRUE(writer->WriteScalar(-1, kTagLoss, 2.0f).ok());
  const std::vector<TestEvent> events = ReadEvents(writer->path());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1].step, big);
  EXPECT_EQ(events[2].step, -1);
}

TEST(TensorBoardWriterTest, EveryCorruptedByteIsDetected) {
  TempDir dir;
  auto writer = OpenTbOrDie(dir.path());
  ASSERT_TRUE(writer->WriteScalar(1, kTagLoss, 0.5f).ok());
  ASSERT_TRUE(writer->WriteScalar(2, kTagAuc, 0.7f).ok());
  const std::string good = ReadFile(writer->path());
  ASSERT_EQ(ReadRecords(good).error, "");
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x01);
    EXPECT_NE(ReadRecords(bad).error, "") << "flipped byte " << i << " went unnoticed";
  }
}

TEST(TensorBoardWriterTest, TruncatedFileIsDetected) {
  TempDir dir;
  auto writer = OpenTbOrDie(dir.path());
  ASSERT_TRUE(writer->WriteScalar(1, kTagLoss, 0.5f).ok());
  const std::string good = ReadFile(writer->path());
  constexpr size_t kFirstRecordBytes = 16 + 24;  // framing + the file_version Event
  for (size_t kept = 0; kept < good.size(); ++kept) {
    const RecordsOrError read = ReadRecords(std::string_view(good).substr(0, kept));
    if (kept == 0 || kept == kFirstRecordBytes) {
      EXPECT_EQ(read.error, "") << "kept " << kept;  // a cut at a record boundary is sound
    } else {
      EXPECT_NE(read.error, "") << "kept " << kept << " went unnoticed";
    }
  }
}

TEST(TensorBoardWriterTest, SecondWriterInTheSameSecondGetsItsOwnFile) {
  TempDir dir;
  auto first = OpenTbOrDie(dir.path());
  auto second = OpenTbOrDie(dir.path());  // e.g. a job restarted within the same second
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_NE(first->path(), second->path());
  ASSERT_TRUE(second->WriteScalar(1, kTagLoss, 0.5f).ok());
  EXPECT_EQ(ReadEvents(first->path()).size(), 1u);
  EXPECT_EQ(ReadEvents(second->path()).size(), 2u);
}

// ---------------------------------------------------------------------------------------------
// A full output disk (issue 21's failure paths): training goes on, nothing is lost.

// Lines written while the disk has no room wait in memory and reach the file, in order and
// whole, with the first line that fits; the writer says what waits meanwhile.
TEST(MetricsWriterTest, LinesTheDiskHasNoRoomForWaitInMemoryAndFollowInOrder) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  auto writer = OpenOrDie(path);
  ASSERT_TRUE(writer->WriteStep(Step(0, 0.9)).ok());
  EXPECT_EQ(writer->Held(), "");
  const std::string before = ReadFile(path);
  {
    testing::FullDisk full;
    ASSERT_TRUE(writer->WriteStep(Step(10, 0.8)).ok());
    ASSERT_TRUE(writer->WriteEval(Eval(10, 0.6)).ok());
    ASSERT_TRUE(writer->WriteStep(Step(20, 0.7)).ok());
    EXPECT_EQ(ReadFile(path), before) << "nothing, not even part of a line, reached the file";
    const std::string held = writer->Held();
    EXPECT_NE(held.find("lines of metrics.jsonl wait in memory for space"), std::string::npos)
        << held;
    EXPECT_NE(held.find("(EFBIG)"), std::string::npos) << held;
    EXPECT_TRUE(writer->WriteHeld().IsResourceExhausted());
  }
  ASSERT_TRUE(writer->WriteStep(Step(30, 0.6)).ok());
  EXPECT_EQ(writer->Held(), "");
  EXPECT_EQ(writer->dropped_lines(), 0u);
  const std::vector<json> lines = ReadJsonLines(path);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0]["step"], 0);
  EXPECT_EQ(lines[1]["step"], 10);
  EXPECT_DOUBLE_EQ(lines[1]["loss"].get<double>(), 0.8);
  EXPECT_EQ(lines[2]["step"], 10);
  EXPECT_DOUBLE_EQ(lines[2]["auc"].get<double>(), 0.6);
  EXPECT_EQ(lines[3]["step"], 20);
  EXPECT_EQ(lines[4]["step"], 30);
}

// The final line is the job's result: it is not held, and not final until the disk takes it
// (with the lines held before it); the same call then succeeds.
TEST(MetricsWriterTest, TheFinalLineIsWrittenOnlyOnceTheDiskTakesItAndTheLinesBeforeIt) {
  TempDir dir;
  const std::string path = dir.path() + "/metrics.jsonl";
  auto writer = OpenOrDie(path);
  ASSERT_TRUE(writer->WriteStep(Step(0, 0.9)).ok());
  const FinalMetrics final{0.79, 0.44, "0123456789abcdef0123456789abcdef"};
  {
    testing::FullDisk full;
    ASSERT_TRUE(writer->WriteStep(Step(10, 0.8)).ok());
    const Status refused = writer->WriteFinal(final);
    EXPECT_TRUE(refused.IsResourceExhausted()) << refused;
    EXPECT_TRUE(writer->WriteFinal(final).IsResourceExhausted());
  }
  ASSERT_TRUE(writer->WriteFinal(final).ok());
  EXPECT_TRUE(writer->WriteStep(Step(20, 0.7)).IsFailedPrecondition());
  const std::vector<json> lines = ReadJsonLines(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1]["step"], 10);
  EXPECT_EQ(lines[2]["final"], true);
  EXPECT_EQ(writer->Held(), "");
}

// What may wait is bounded: past it a record is dropped and counted, never the ones before it.
TEST(HoldingAppendFileTest, RecordsPastTheHeldMemoryAreDroppedAndCounted) {
  TempDir dir;
  auto file = internal::AppendFile::Open(dir.path() + "/f", internal::AppendFile::Mode::kCreateNew);
  ASSERT_TRUE(file.ok()) << file.status();
  internal::HoldingAppendFile held(std::move(file).value(), /*max_held_bytes=*/10);
  ASSERT_TRUE(held.Append("first record\n").ok());
  {
    testing::FullDisk full;
    ASSERT_TRUE(held.Append("abcd\n").ok());
    ASSERT_TRUE(held.Append("efgh\n").ok());
    ASSERT_TRUE(held.Append("ijkl\n").ok());  // 15 bytes would be held: dropped
    EXPECT_EQ(held.held_records(), 2u);
    EXPECT_EQ(held.dropped_records(), 1u);
    EXPECT_TRUE(held.held_because().IsResourceExhausted());
  }
  ASSERT_TRUE(held.Append("mnop\n").ok());
  EXPECT_EQ(held.held_records(), 0u);
  EXPECT_TRUE(held.held_because().ok());
  EXPECT_EQ(ReadFile(dir.path() + "/f"), "first record\nabcd\nefgh\nmnop\n");
}

// TensorBoard events wait the same way, and the event file stays readable record by record.
TEST(TensorBoardWriterTest, EventsTheDiskHasNoRoomForWaitInMemoryAndFollowInOrder) {
  TempDir dir;
  auto writer = OpenTbOrDie(dir.path());
  ASSERT_TRUE(writer->WriteScalar(1, kTagLoss, 0.5f).ok());
  {
    testing::FullDisk full;
    ASSERT_TRUE(writer->WriteScalar(2, kTagLoss, 0.4f).ok());
    ASSERT_TRUE(writer->WriteScalar(3, kTagLoss, 0.3f).ok());
    EXPECT_NE(writer->Held().find("events of events.out.tfevents"), std::string::npos)
        << writer->Held();
    EXPECT_EQ(ReadEvents(writer->path()).size(), 2u);
  }
  ASSERT_TRUE(writer->WriteHeld().ok());
  EXPECT_EQ(writer->Held(), "");
  ASSERT_TRUE(writer->WriteScalar(4, kTagLoss, 0.2f).ok());
  const std::vector<TestEvent> events = ReadEvents(writer->path());
  ASSERT_EQ(events.size(), 5u);
  for (int64_t i = 1; i <= 4; ++i) EXPECT_EQ(events[i].step, i);
  EXPECT_EQ(events[3].values.at(0).simple_value, 0.3f);
}

}  // namespace
}  // namespace tandem::metrics
