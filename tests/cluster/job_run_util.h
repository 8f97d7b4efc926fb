// Whole `tandem local` jobs run to their end and their exported models read back, for the tests
// that compare trained models (multi_hot_job_test.cc, models_job_test.cc). Users link
// tandem_offline and define TANDEM_BINARY.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/subprocess.h"
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

// Runs `tandem drill --faults FAULTS` on dir's job.yaml (2 PS x 2 workers) and checks that it
// passed with `n` faults, each fired and recovered, and the fault-free run's model_checksum.
inline void ExpectDrillEndsWithTheFaultFreeModel(const TempDir& dir, const std::string& faults,
                                                 size_t n, std::chrono::milliseconds timeout) {
  auto r = Tandem({"drill", "--config", dir.File("job.yaml"), "--ps", "2", "--workers", "2",
                   "--faults", faults},
                  timeout);
  KillLeftovers(dir.path() + "/out");
  KillLeftovers(dir.path() + "/out-reference");
  EXPECT_FALSE(r.timed_out) << r.output;
  ASSERT_EQ(r.exit.exit_code, 0) << r.output;
  const auto report =
      nlohmann::json::parse(ReadFile(dir.path() + "/out/drill.json"), nullptr, false);
  ASSERT_TRUE(report.is_object()) << r.output;
  EXPECT_EQ(report.value("checksums_equal", false), true) << report.dump(2);
  EXPECT_EQ(report["run"].value("model_checksum", "").size(), 32u) << report.dump(2);
  EXPECT_EQ(report["run"].value("model_checksum", ""),
            report["reference"].value("model_checksum", ""));
  ASSERT_EQ(report["faults"].size(), n) << report.dump(2);
  for (const auto& f : report["faults"]) {
    EXPECT_TRUE(f.value("fired", false)) << report.dump(2);
    EXPECT_TRUE(f.value("recovered", false)) << report.dump(2);
  }
}

// `tandem serve --model BUNDLE` on an ephemeral loopback port (log at `log`): sets `server` and
// returns the port it listens on, or 0 after failing the test.
inline int StartServe(const std::string& bundle, const std::string& log,
                      std::optional<Subprocess>* server) {
  SpawnOptions so;
  so.argv = {TANDEM_BINARY, "serve", "--model", bundle, "--port", "0", "--host", "127.0.0.1"};
  so.output_path = log;
  so.unset_env = {"TF_CONFIG"};
  auto spawned = Subprocess::Spawn(so);
  if (!spawned.ok()) {
    ADD_FAILURE() << spawned.status();
    return 0;
  }
  server->emplace(std::move(spawned).value());
  const std::string prefix = "listening on 127.0.0.1:";
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
       std::chrono::steady_clock::now() < until;) {
    const std::string text = ReadFile(log);
    const auto at = text.find(prefix);
    if (at != std::string::npos) return std::atoi(text.c_str() + at + prefix.size());
    if ((*server)->Wait(std::chrono::milliseconds(50)).has_value()) {
      ADD_FAILURE() << "tandem serve exited: " << text;
      return 0;
    }
  }
  ADD_FAILURE() << "tandem serve did not listen within 60 s: " << ReadFile(log);
  return 0;
}

// SIGTERM to a server from StartServe; it must exit 0.
inline void StopServe(Subprocess* server, const std::string& log) {
  server->Signal(SIGTERM);
  const auto served = server->Wait(std::chrono::milliseconds(20000));
  ASSERT_TRUE(served.has_value());
  EXPECT_EQ(served->exit_code, 0) << ReadFile(log);
}

}  // namespace tandem::testing
