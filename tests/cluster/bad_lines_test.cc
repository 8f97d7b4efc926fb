// Malformed Criteo lines below data.max_bad_fraction (issue 18): they are skipped, and a run
// says so in the worker's log, in metrics.jsonl, in `tandem local`'s final block and in
// `tandem status`.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/subprocess.h"
#include "common/testing/test_util.h"
#include "tests/cluster/local_job_util.h"

namespace tandem::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr int64_t kRows = 2048;  // lines in train.tsv, malformed ones included
constexpr int64_t kBatch = 64;   // one worker: an epoch is kRows / kBatch = 32 steps

std::vector<std::string> Split(const std::string& line) {
  std::vector<std::string> f;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, '\t')) f.push_back(field);
  if (!line.empty() && line.back() == '\t') f.emplace_back();
  return f;
}

std::string Join(const std::vector<std::string>& f) {
  std::string s;
  for (size_t i = 0; i < f.size(); ++i) s += (i ? "\t" : "") + f[i];
  return s;
}

class BadLinesJob : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* stream : {"train", "eval"}) {
      auto r = RunCommand({TANDEM_BINARY, "datagen", "--format", "criteo", "--rows",
                           stream == std::string("train") ? std::to_string(kRows) : "512", "--seed",
                           "7", "--vocab", "300", "--stream", stream, "--out",
                           dir_.File(std::string(stream) + ".tsv")});
      ASSERT_EQ(r.exit.exit_code, 0) << r.output;
    }
    // Three lines made malformed in place, one of each kind, so the file keeps kRows lines.
    std::istringstream in(ReadFile(dir_.File("train.tsv")));
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    ASSERT_EQ(static_cast<int64_t>(lines.size()), kRows);
    auto f = Split(lines[99]);  // line 100: a categorical field that is not hex
    ASSERT_EQ(f.size(), 40u);
    f[14] = "zz9!";
    lines[99] = Join(f);
    f = Split(lines[699]);  // line 700: a field short
    f.pop_back();
    lines[699] = Join(f);
    f = Split(lines[1499]);  // line 1500: label 7
    f[0] = "7";
    lines[1499] = Join(f);
    std::string text;
    for (const auto& l : lines) text += l + "\n";
    WriteFile(dir_.File("train.tsv"), text);
  }

  std::string Config(int64_t steps) const {
    return "cluster:\n  chief: [\"127.0.0.1:0\"]\n  ps: [\"127.0.0.1:0\"]\n"
           "  workers: [\"127.0.0.1:0\"]\n"
           "model:\n  embedding_dim: 8\n  bottom_mlp: [16, 8]\n  top_mlp: [16, 1]\n"
           "tables:\n  default:\n    optimizer: adagrad\n    lr: 0.3\n"
           "    init: {dist: uniform, scale: 0.01}\n"
           "data:\n  format: criteo\n  train: " +
           dir_.File("train.tsv") + "\n  eval: " + dir_.File("eval.tsv") +
           "\n  max_bad_fraction: 0.01\n"
           "train:\n  steps: " +
           std::to_string(steps) + "\n  batch_size: " + std::to_string(kBatch) +
           "\n  seed: 7\n  dense_optimizer: adam\n  dense_lr: 0.01\n"
           "  log_every_steps: 8\n  eval_every_steps: 0\n"
           "ps:\n  data_dir: " +
           dir_.path() + "/ps\n  storage: memory\n" +
           "chief:\n  heartbeat_interval_ms: 200\n  heartbeat_timeout_ms: 5000\n"
           "collective:\n  timeout_ms: 20000\n"
           "checkpoint:\n  dir: " +
           dir_.path() + "/ckpt\noutput:\n  dir: " + out() + "\n";
  }

  std::string out() const { return dir_.path() + "/out"; }

  // What every place must name: at least one malformed line as "file:line: why".
  void ExpectAReport(const std::string& text, const std::string& where) const {
    static const std::regex report(
        "train\\.tsv:(100|700|1500): malformed line: (bad hex categorical field|too few "
        "fields|bad label \\(want 0 or 1\\))");
    EXPECT_TRUE(std::regex_search(text, report)) << where << ":\n" << text;
  }

  TempDir dir_;
};

// One epoch exactly: each malformed line is met once, so the count is 3 everywhere.
TEST_F(BadLinesJob, ACompletedJobNamesItsMalformedLinesInLogMetricsAndFinalBlock) {
  WriteFile(dir_.File("job.yaml"), Config(kRows / kBatch));
  auto r = Local(dir_, 1, 1, {}, milliseconds(180000));
  ASSERT_EQ(r.exit.exit_code, 0) << r.output;

  // The final block: the count and the first reports.
  EXPECT_NE(r.output.find("malformed lines 3 "), std::string::npos) << r.output;
  ExpectAReport(r.output, "tandem local's output");

  // The worker's log: told once met, with the reports, never one line per malformed line.
  const std::string log = ReadFile(out() + "/logs/worker-0.log");
  EXPECT_NE(log.find("malformed line"), std::string::npos) << log;
  ExpectAReport(log, "worker-0.log");
  std::istringstream log_lines(log);
  int told = 0;
  for (std::string l; std::getline(log_lines, l);) told += l.find("skipped so far") != l.npos;
  EXPECT_GE(told, 1) << log;
  EXPECT_LE(told, 3) << log;

  // metrics.jsonl: every line carries the count so far, ending at 3, next to the old fields.
  const auto lines = ReadJsonLines(out() + "/metrics.jsonl");
  ASSERT_FALSE(lines.empty());
  int64_t last = 0;
  for (const auto& l : lines) {
    ASSERT_TRUE(l.contains("bad_lines")) << l;
    EXPECT_GE(l["bad_lines"].get<int64_t>(), last) << l;
    last = l["bad_lines"].get<int64_t>();
    if (!l.contains("final")) {
      EXPECT_TRUE(l.contains("samples_per_sec")) << l;
      EXPECT_TRUE(l.contains("loss")) << l;
    }
  }
  ASSERT_TRUE(lines.back().value("final", false)) << lines.back();
  EXPECT_EQ(lines.back()["bad_lines"], 3) << lines.back();
  EXPECT_TRUE(lines.back().contains("model_checksum")) << lines.back();

  // The worker's file, which the final block read.
  const auto file = nlohmann::json::parse(ReadFile(out() + "/bad_lines/worker-0.json"));
  EXPECT_EQ(file["bad_lines"], 3) << file;
  ASSERT_FALSE(file["reports"].empty()) << file;
  ExpectAReport(file["reports"][0].get<std::string>(), "bad_lines/worker-0.json");
}

// `tandem status` asks the chief while the job trains; the job is then stopped.
TEST_F(BadLinesJob, StatusShowsTheJobsMalformedLineCountWhileItTrains) {
  WriteFile(dir_.File("job.yaml"), Config(1000000));
  SpawnOptions o;
  o.argv = {TANDEM_BINARY, "local", "--config",  dir_.File("job.yaml"),
            "--ps",        "1",     "--workers", "1"};
  o.output_path = dir_.File("local.log");
  auto local = Subprocess::Spawn(o);
  ASSERT_TRUE(local.ok());
  std::pair<int, nlohmann::json> s;
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  for (;;) {
    if (Clock::now() > deadline) {
      local->Signal(SIGTERM);
      local->Wait(milliseconds(60000));
      FAIL() << s.second.dump() << ReadFile(dir_.File("local.log"))
             << ReadFile(out() + "/logs/worker-0.log");
    }
    std::this_thread::sleep_for(milliseconds(200));
    s = StatusJson(out());
    // After a whole epoch (32 steps) every malformed line was met.
    if (s.second.is_object() && s.second.value("bad_lines", int64_t{0}) >= 3) break;
  }
  EXPECT_EQ(s.first, 0) << s.second.dump();
  for (const auto& m : s.second["members"])
    if (m["role"] == "worker") {
      EXPECT_GE(m["bad_lines"].get<int64_t>(), 3) << m;
    }
  const auto text =
      RunCommand({TANDEM_BINARY, "status", "--dir", out()}, {}, {}, milliseconds(10000));
  EXPECT_TRUE(std::regex_search(text.output, std::regex("malformed data lines skipped [0-9]+")))
      << text.output;

  local->Signal(SIGTERM);
  auto e = local->Wait(milliseconds(60000));
  ASSERT_TRUE(e.has_value()) << ReadFile(dir_.File("local.log"));
  EXPECT_EQ(e->exit_code, 0) << ReadFile(dir_.File("local.log"));
  const std::string output = ReadFile(dir_.File("local.log"));
  EXPECT_TRUE(std::regex_search(output, std::regex("malformed lines [1-9][0-9]* \\(skipped")))
      << output;
  ExpectAReport(output, "tandem local's output");
}

}  // namespace
}  // namespace tandem::testing
