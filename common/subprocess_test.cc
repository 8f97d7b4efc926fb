#include "common/subprocess.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <string>
#include <thread>

#include "common/testing/test_util.h"

namespace tandem {
namespace {

using std::chrono::milliseconds;

// Running, not a zombie: a container's pid 1 may never reap the orphans it inherits.
bool Alive(pid_t pid) {
  const std::string stat = testing::ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

// A supervisor killed on a test's timeout must not leave its children running (they kept
// restarting daemons in a removed directory, 2026-12-06): KillGroup ends the whole tree.
TEST(SubprocessTest, KillGroupEndsTheChildAndWhatItStarted) {
  testing::TempDir dir;
  const std::string pid_file = dir.File("grandchild.pid");
  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "sleep 100 & echo $! > " + pid_file + "; wait"};
  o.new_process_group = true;
  auto p = Subprocess::Spawn(o);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(testing::WaitForFile(pid_file, milliseconds(10000)));
  const pid_t grandchild = std::stoi(testing::ReadFile(pid_file));
  ASSERT_TRUE(Alive(grandchild));
  p->KillGroup();
  ASSERT_TRUE(p->exit_info().has_value());
  EXPECT_EQ(p->exit_info()->signal, SIGKILL);
  // The grandchild was reparented; SIGKILL ends it at once, its reaping is its new parent's.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (Alive(grandchild) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(10));
  EXPECT_FALSE(Alive(grandchild)) << "pid " << grandchild << " outlived its group";
}

}  // namespace
}  // namespace tandem
