// Starts a real `tandem` daemon on 127.0.0.1 port 0 and reads its bound address back from its
// ready file. The daemon is killed by PID when the fixture ends.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/subprocess.h"
#include "common/testing/test_util.h"

namespace tandem::testing {

inline constexpr const char* kJobHex = "0123456789abcdef0123456789abcdef";

// A config with every address on 127.0.0.1:0 and state under `dir`.
inline std::string LoopbackConfig(const std::string& dir) {
  return "cluster:\n"
         "  chief: [\"127.0.0.1:0\"]\n"
         "  ps: [\"127.0.0.1:0\"]\n"
         "  workers: [\"127.0.0.1:0\"]\n"
         "checkpoint:\n"
         "  dir: " +
         dir +
         "/ckpt\n"
         "output:\n"
         "  dir: " +
         dir +
         "/out\n"
         "ps:\n"
         "  data_dir: " +
         dir + "/ps\n";
}

struct Daemon {
  std::optional<Subprocess> process;
  std::string endpoint;
  std::string log_path;
};

// Starts `tandem ROLE --task TASK` and waits until it is bound.
inline Daemon StartDaemon(const TempDir& dir, const std::string& role, const std::string& task,
                          std::vector<std::string> extra = {}) {
  const std::string config = dir.File("job.yaml");
  WriteFile(config, LoopbackConfig(dir.path()));
  const std::string ready = dir.File(role + "-ready.json");
  Daemon d;
  d.log_path = dir.File(role + ".log");
  SpawnOptions o;
  o.argv = {TANDEM_BINARY, role,       "--config", config,         "--task",
            task,          "--job-id", kJobHex,    "--ready-file", ready};
  o.argv.insert(o.argv.end(), extra.begin(), extra.end());
  o.unset_env = {"TF_CONFIG"};
  o.output_path = d.log_path;
  auto p = Subprocess::Spawn(o);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return d;
  d.process.emplace(std::move(p).value());
  if (!WaitForFile(ready, std::chrono::seconds(20))) {
    ADD_FAILURE() << "daemon did not bind; log:\n" << ReadFile(d.log_path);
    return d;
  }
  auto j = nlohmann::json::parse(ReadFile(ready));
  d.endpoint = j["address"].get<std::string>();
  return d;
}

}  // namespace tandem::testing
