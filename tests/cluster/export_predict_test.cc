// `tandem export` and `tandem predict` as a user runs them on a finished `tandem local` job: the
// exported bundle scores the eval file exactly as the trainer's final eval did (AUC and logloss
// bit for bit), ids the bundle lacks read as documented, and damaged or refused inputs exit with
// the documented codes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/testing/test_util.h"
#include "tests/cluster/local_job_util.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

constexpr int kEvalRows = 3000;
constexpr int kBadLine = 1001;  // 1-based line of the eval file that is malformed

CommandResult Tandem(std::vector<std::string> args, milliseconds timeout = milliseconds(60000)) {
  args.insert(args.begin(), TANDEM_BINARY);
  return RunCommand(args, {}, {"TF_CONFIG"}, timeout);
}

// The last line of `output` that is a JSON object (predict's summary, eval's result).
nlohmann::json LastJson(const std::string& output) {
  std::istringstream in(output);
  std::string line;
  nlohmann::json last;
  while (std::getline(in, line))
    if (!line.empty() && line[0] == '{') last = nlohmann::json::parse(line, nullptr, false);
  return last;
}

void FlipByte(const std::string& path, std::streamoff at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  f.seekp(at);
  f.put(static_cast<char>(c ^ 0x5a));
}

std::vector<std::string> Lines(const std::string& path) {
  std::istringstream in(ReadFile(path));
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// A Criteo job on datagen files (eval with one malformed line), trained by `tandem local` with
// 2 shards and 1 worker (so the trainer's eval is one process's, like predict's), checkpoints
// every `every` steps. Table C1 admits an id on its third step, so the bundle lacks some ids.
class TrainedJob {
 public:
  explicit TrainedJob(int64_t steps, int64_t every) {
    for (const char* stream : {"train", "eval"}) {
      auto r = Tandem({"datagen", "--format", "criteo", "--rows",
                       stream == std::string("train") ? "20000" : std::to_string(kEvalRows),
                       "--seed", "7", "--vocab", "300", "--stream", stream, "--out",
                       dir.File(std::string(stream) + ".tsv")});
      EXPECT_EQ(r.exit.exit_code, 0) << r.output;
    }
    std::vector<std::string> eval = Lines(dir.File("eval.tsv"));
    eval.insert(eval.begin() + (kBadLine - 1), "1\tnot\ta\trecord");
    std::string text;
    for (const auto& l : eval) text += l + "\n";
    WriteFile(dir.File("eval.tsv"), text);
    WriteFile(dir.File("job.yaml"), Config(steps, every));
    auto r = Local(dir, 2, 1);
    EXPECT_EQ(r.exit.exit_code, 0) << r.output;
    auto lines = ReadJsonLines(dir.path() + "/out/metrics.jsonl");
    if (!lines.empty()) final_line = lines.back();
  }

  std::string Config(int64_t steps, int64_t every) const {
    return "cluster:\n  chief: [\"127.0.0.1:0\"]\n  ps: [\"127.0.0.1:0\"]\n"
           "  workers: [\"127.0.0.1:0\"]\n"
           "model:\n  embedding_dim: 8\n  bottom_mlp: [32, 8]\n  top_mlp: [32, 1]\n"
           "tables:\n  default:\n    optimizer: adagrad\n    lr: 0.3\n"
           "    init: {dist: uniform, scale: 0.01}\n"
           "  C1:\n    admission:\n      min_count: 3\n"
           "data:\n  format: criteo\n  train: " +
           dir.File("train.tsv") + "\n  eval: " + dir.File("eval.tsv") +
           "\n  max_bad_fraction: 0.01\n"
           "train:\n  steps: " +
           std::to_string(steps) +
           "\n  batch_size: 128\n  seed: 7\n  dense_optimizer: adam\n  dense_lr: 0.01\n"
           "  log_every_steps: 20\n  eval_every_steps: 0\n"
           "ps:\n  data_dir: " +
           dir.path() + "/ps\n  storage: rocksdb\n" +
           "chief:\n  heartbeat_interval_ms: 200\n  heartbeat_timeout_ms: 5000\n"
           "collective:\n  timeout_ms: 20000\n"
           "checkpoint:\n  dir: " +
           dir.path() + "/ckpt\n  every_steps: " + std::to_string(every) +
           "\n  keep: 2\noutput:\n  dir: " + dir.path() + "/out\n";
  }

  TempDir dir;
  nlohmann::json final_line;
};

TEST(ExportPredictTest, TheBundleScoresTheEvalFileExactlyAsTheTrainersFinalEval) {
  TrainedJob job(120, 50);
  ASSERT_TRUE(job.final_line.value("final", false)) << job.final_line;
  const double auc = job.final_line["auc"].get<double>();
  const double logloss = job.final_line["logloss"].get<double>();
  ASSERT_GT(auc, 0.6);
  const std::string bundle = job.dir.File("bundle");
  auto ex = Tandem({"export", "--checkpoint", job.dir.File("ckpt"), "--out", bundle});
  ASSERT_EQ(ex.exit.exit_code, 0) << ex.output;
  EXPECT_NE(ex.output.find("step 119"), std::string::npos) << ex.output;

  const std::string scores = job.dir.File("scores.txt");
  auto pr =
      Tandem({"predict", "--model", bundle, "--data", job.dir.File("eval.tsv"), "--out", scores});
  ASSERT_EQ(pr.exit.exit_code, 0) << pr.output;
  const auto summary = LastJson(pr.output);
  ASSERT_TRUE(summary.is_object()) << pr.output;
  EXPECT_EQ(summary["auc"].get<double>(), auc) << pr.output;
  EXPECT_EQ(summary["logloss"].get<double>(), logloss) << pr.output;
  EXPECT_EQ(summary["records"].get<int>(), kEvalRows + 1);
  EXPECT_EQ(summary["malformed"].get<int>(), 1);
  EXPECT_EQ(summary["samples"].get<int>(), kEvalRows);
  EXPECT_GT(summary["unknown_ids"].get<int>(), 0) << "C1's admission should leave ids out";
  EXPECT_NE(pr.output.find("eval.tsv:" + std::to_string(kBadLine)), std::string::npos) << pr.output;
  // One line per record, in file order; the malformed one says so.
  const auto lines = Lines(scores);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kEvalRows + 1));
  EXPECT_EQ(lines[kBadLine - 1], "nan");
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i == kBadLine - 1) continue;
    const double p = std::strtod(lines[i].c_str(), nullptr);
    ASSERT_TRUE(p > 0 && p < 1) << "line " << i + 1 << ": " << lines[i];
  }
  // stdout gets the same scores.
  auto to_stdout = Tandem({"predict", "--model", bundle, "--data", job.dir.File("eval.tsv")});
  ASSERT_EQ(to_stdout.exit.exit_code, 0);
  EXPECT_NE(to_stdout.output.find(lines[0] + "\n" + lines[1] + "\n"), std::string::npos);

  // `tandem eval` on the checkpoint gives the same figures.
  auto ev = Tandem({"eval", "--checkpoint", job.dir.File("ckpt")});
  ASSERT_EQ(ev.exit.exit_code, 0) << ev.output;
  const auto evj = LastJson(ev.output);
  ASSERT_TRUE(evj.is_object()) << ev.output;
  EXPECT_EQ(evj["auc"].get<double>(), auc);
  EXPECT_EQ(evj["logloss"].get<double>(), logloss);
  EXPECT_EQ(evj["step"].get<int>(), 119);

  // Zeros for the ids the bundle lacks: the same lookups, other scores.
  const std::string zero_scores = job.dir.File("zero.txt");
  auto zero = Tandem({"predict", "--model", bundle, "--data", job.dir.File("eval.tsv"), "--unknown",
                      "zero", "--out", zero_scores});
  ASSERT_EQ(zero.exit.exit_code, 0) << zero.output;
  const auto zj = LastJson(zero.output);
  EXPECT_EQ(zj["unknown_ids"], summary["unknown_ids"]);
  EXPECT_NE(zj["logloss"].get<double>(), logloss);
  EXPECT_NE(Lines(zero_scores), lines);

  // An older checkpoint, named by its own directory, exports its own step.
  auto older = Tandem({"export", "--checkpoint", job.dir.File("ckpt/ckpt-000000000099"), "--out",
                       job.dir.File("bundle-99")});
  ASSERT_EQ(older.exit.exit_code, 0) << older.output;
  const auto manifest = nlohmann::json::parse(ReadFile(job.dir.File("bundle-99/MANIFEST.json")));
  EXPECT_EQ(manifest["step"].get<int>(), 99);
}

TEST(ExportPredictTest, DamagedOrRefusedInputsExitWithTheDocumentedCodes) {
  TrainedJob job(40, 20);
  ASSERT_TRUE(job.final_line.value("final", false)) << job.final_line;
  const std::string bundle = job.dir.File("bundle");
  ASSERT_EQ(
      Tandem({"export", "--checkpoint", job.dir.File("ckpt"), "--out", bundle}).exit.exit_code, 0);
  const std::string manifest = ReadFile(bundle + "/MANIFEST.json");

  // An existing bundle is never overwritten (2), and stays as it was.
  auto again = Tandem({"export", "--checkpoint", job.dir.File("ckpt"), "--out", bundle});
  EXPECT_EQ(again.exit.exit_code, 2) << again.output;
  EXPECT_NE(again.output.find("not an empty directory"), std::string::npos) << again.output;
  EXPECT_EQ(ReadFile(bundle + "/MANIFEST.json"), manifest);

  // A flipped byte in a table file: refused naming the file (3), no scores written.
  const std::string damaged = job.dir.File("damaged");
  fs::copy(bundle, damaged, fs::copy_options::recursive);
  FlipByte(damaged + "/tables/C3.emb", 40);
  const std::string scores = job.dir.File("scores.txt");
  auto bad =
      Tandem({"predict", "--model", damaged, "--data", job.dir.File("eval.tsv"), "--out", scores});
  EXPECT_EQ(bad.exit.exit_code, 3) << bad.output;
  EXPECT_NE(bad.output.find("C3.emb"), std::string::npos) << bad.output;
  EXPECT_FALSE(fs::exists(scores));
  // A directory that is no bundle is refused too.
  EXPECT_EQ(Tandem({"predict", "--model", job.dir.File("out"), "--data", job.dir.File("eval.tsv")})
                .exit.exit_code,
            3);

  // More malformed lines than data.max_bad_fraction (0.01) allows: 3, naming the first; a
  // looser bound on the command line scores the file.
  std::vector<std::string> eval = Lines(job.dir.File("eval.tsv"));
  std::string text;
  for (int i = 0; i < 100; ++i)
    text += (i % 10 == 3 ? "garbage" : eval[static_cast<size_t>(i)]) + "\n";
  WriteFile(job.dir.File("dirty.tsv"), text);
  auto dirty =
      Tandem({"predict", "--model", bundle, "--data", job.dir.File("dirty.tsv"), "--out", scores});
  EXPECT_EQ(dirty.exit.exit_code, 3) << dirty.output;
  EXPECT_NE(dirty.output.find("max_bad_fraction"), std::string::npos) << dirty.output;
  EXPECT_NE(dirty.output.find("dirty.tsv:4"), std::string::npos) << dirty.output;
  EXPECT_FALSE(fs::exists(scores));
  auto loose = Tandem({"predict", "--model", bundle, "--data", job.dir.File("dirty.tsv"), "--out",
                       scores, "--max-bad-fraction", "0.2"});
  EXPECT_EQ(loose.exit.exit_code, 0) << loose.output;
  EXPECT_EQ(LastJson(loose.output)["malformed"].get<int>(), 10);
  EXPECT_EQ(Lines(scores).size(), 100u);

  // The binary format is detected by its header and scores the same records the same way.
  ASSERT_EQ(Tandem({"convert", "--in", job.dir.File("eval.tsv"), "--out", job.dir.File("eval.bin")})
                .exit.exit_code,
            0);
  auto tsv = Tandem({"predict", "--model", bundle, "--data", job.dir.File("eval.tsv")});
  auto bin = Tandem({"predict", "--model", bundle, "--data", job.dir.File("eval.bin")});
  ASSERT_EQ(bin.exit.exit_code, 0) << bin.output;
  EXPECT_EQ(LastJson(bin.output)["auc"], LastJson(tsv.output)["auc"]);
  EXPECT_EQ(LastJson(bin.output)["logloss"], LastJson(tsv.output)["logloss"]);

  // A checkpoint whose dense file is damaged is not exported (3), and leaves no bundle.
  const auto latest = nlohmann::json::parse(ReadFile(job.dir.File("ckpt/LATEST")));
  const std::string manifest_path = job.dir.File("ckpt/" + latest["manifest"].get<std::string>());
  const std::string dense = fs::path(manifest_path).parent_path().string() + "/dense.ckpt";
  FlipByte(dense, 60);
  auto corrupt = Tandem({"export", "--checkpoint", fs::path(manifest_path).parent_path().string(),
                         "--out", job.dir.File("bundle-corrupt")});
  EXPECT_EQ(corrupt.exit.exit_code, 3) << corrupt.output;
  EXPECT_NE(corrupt.output.find("dense.ckpt"), std::string::npos) << corrupt.output;
  EXPECT_FALSE(fs::exists(job.dir.File("bundle-corrupt")));
  // Missing flags are usage errors.
  EXPECT_EQ(Tandem({"export", "--checkpoint", job.dir.File("ckpt")}).exit.exit_code, 2);
  EXPECT_EQ(Tandem({"predict", "--model", bundle}).exit.exit_code, 2);
}

}  // namespace
}  // namespace tandem::testing
