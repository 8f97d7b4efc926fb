// Whole `tandem local` jobs run to their end and their exported models read back, for the tests
// that compare trained models (multi_hot_job_test.cc, models_job_test.cc). Users link
// tandem_offline and define TANDEM_BINARY.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common/testing/test_util.h"
#include "offline/bundle.h"
#include "tests/cluster/local_job_util.h"

namespace tandem::testing {

inline CommandResult Tandem(std::vector<std::string> args,
                            std::chrono::milliseconds timeout = std::chrono::milliseconds(60000)) {
  args.insert(args.begin(), TANDEM_BINARY);
  return RunCommand(args, {}, {"TF_CONFIG"}, timeout);
}

// Writes `yaml` as dir's job.yaml and runs it to its end; its final metrics line, whose
// model_checksum `tandem local` also printed (null, after failing the test, when none).
inline nlohmann::json RunJobToEnd(const TempDir& dir, const std::string& yaml, int ps,
                                  int workers) {
  WriteFile(dir.File("job.yaml"), yaml);
  auto r = Local(dir, ps, workers);
  EXPECT_EQ(r.exit.exit_code, 0) << r.output;
  if (r.exit.exit_code != 0) return nlohmann::json();
  auto lines = ReadJsonLines(dir.path() + "/out/metrics.jsonl");
  if (lines.empty() || !lines.back().value("final", false)) {
    ADD_FAILURE() << "no final metrics line: " << r.output;
    return nlohmann::json();
  }
  const std::string checksum = lines.back().value("model_checksum", "");
  EXPECT_EQ(checksum.size(), 32u) << lines.back();
  EXPECT_NE(r.output.find("model_checksum " + checksum), std::string::npos) << r.output;
  return lines.back();
}

inline std::string Checksum(const nlohmann::json& final_line) {
  return final_line.is_object() ? final_line.value("model_checksum", "") : "";
}

// `tandem export` of dir's checkpoint dir's LATEST (to dir/bundle), read back.
inline worker::FrozenModel Exported(const TempDir& dir) {
  const std::string bundle = dir.File("bundle");
  auto ex = Tandem({"export", "--checkpoint", dir.File("ckpt"), "--out", bundle});
  EXPECT_EQ(ex.exit.exit_code, 0) << ex.output;
  auto model = offline::ReadBundle(bundle);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(model).value() : worker::FrozenModel{};
}

}  // namespace tandem::testing
