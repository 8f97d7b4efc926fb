// A two-label `tandem local` job (issue 18 item 5): each label's eval figures reach
// metrics.jsonl, TensorBoard, the final block and `tandem eval`, beside the first label's
// unchanged top-level ones.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tests/cluster/local_job_util.h"

namespace tandem::testing {
namespace {

// SmallJob with two labels, one logit each.
std::string TwoLabelJob(const std::string& dir, int64_t steps) {
  std::string job = SmallJob(dir, steps);
  for (auto [from, to] :
       {std::pair<std::string, std::string>{"top_mlp: [32, 1]", "top_mlp: [32, 2]"},
        {"data:\n", "data:\n  labels: [click, conversion]\n"}}) {
    const auto at = job.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) job.replace(at, from.size(), to);
  }
  return job;
}

TEST(MultiLabelJobTest, EveryOutputHasEachLabelsFigures) {
  TempDir dir;
  WriteFile(dir.File("job.yaml"), TwoLabelJob(dir.path(), 80));
  auto r = Local(
      dir, 1, 1,
      {"train.eval_every_steps=40", "checkpoint.every_steps=80", "data.synthetic.eval_rows=2000"});
  ASSERT_EQ(r.exit.exit_code, 0) << r.output;

  const auto lines = ReadJsonLines(dir.path() + "/out/metrics.jsonl");
  ASSERT_FALSE(lines.empty());
  const nlohmann::json& final_line = lines.back();
  ASSERT_TRUE(final_line.value("final", false)) << final_line;
  for (const char* key : {"auc", "logloss", "teacher_auc", "model_checksum"})
    EXPECT_TRUE(final_line.contains(key)) << key << " missing from " << final_line;
  ASSERT_TRUE(final_line.contains("tasks")) << final_line;
  const nlohmann::json& tasks = final_line["tasks"];
  ASSERT_EQ(tasks.size(), 2u) << tasks;
  for (const char* label : {"click", "conversion"}) {
    ASSERT_TRUE(tasks.contains(label)) << tasks;
    for (const char* key : {"auc", "logloss", "teacher_auc"})
      EXPECT_TRUE(tasks[label][key].is_number()) << label << " " << key << ": " << tasks;
  }
  // The top level is the first label's.
  EXPECT_EQ(final_line["auc"], tasks["click"]["auc"]);
  EXPECT_EQ(final_line["teacher_auc"], tasks["click"]["teacher_auc"]);
  bool eval_with_tasks = false;
  for (const auto& l : lines)
    eval_with_tasks |= !l.contains("final") && l.contains("auc") && l.contains("tasks");
  EXPECT_TRUE(eval_with_tasks) << "no eval line with tasks";

  // The final block: a line per label.
  for (const char* label : {"label click ", "label conversion "}) {
    const auto at = r.output.find(label);
    ASSERT_NE(at, std::string::npos) << label << " missing from\n" << r.output;
    const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
    for (const char* part : {" auc 0.", " logloss 0.", " teacher auc 0."})
      EXPECT_NE(line.find(part), std::string::npos) << part << " missing from " << line;
  }

  // TensorBoard: the tags are stored as plain bytes in the event records.
  std::string events;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() + "/out/tensorboard"))
    if (e.path().filename().string().find("tfevents") != std::string::npos)
      events += ReadFile(e.path().string());
  for (const char* tag : {"auc/click", "auc/conversion", "logloss/click", "logloss/conversion"})
    EXPECT_NE(events.find(tag), std::string::npos) << tag << " missing from the event file";

  // `tandem eval` of the last checkpoint: the same figures, per label.
  auto ev = RunCommand({TANDEM_BINARY, "eval", "--checkpoint", dir.File("ckpt")}, {}, {"TF_CONFIG"},
                       std::chrono::milliseconds(60000));
  ASSERT_EQ(ev.exit.exit_code, 0) << ev.output;
  const auto brace = ev.output.rfind("\n{");
  const auto out = nlohmann::json::parse(
      ev.output.substr(brace == std::string::npos ? ev.output.find('{') : brace + 1), nullptr,
      false);
  ASSERT_TRUE(out.is_object()) << ev.output;
  ASSERT_TRUE(out.contains("tasks")) << out;
  for (const char* label : {"click", "conversion"})
    EXPECT_TRUE(out["tasks"][label]["auc"].is_number()) << out;
  EXPECT_NEAR(out["tasks"]["conversion"]["auc"].get<double>(),
              tasks["conversion"]["auc"].get<double>(), 1e-3);
}

}  // namespace
}  // namespace tandem::testing
