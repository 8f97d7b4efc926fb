// A supervisor that restarts daemons exactly as configs/systemd/tandem-*.service do
// (Restart=on-failure, RestartSec=1, RestartPreventExitStatus=75 2 3), for the tests where every
// daemon runs on its own with nothing else driving the job (supervised_restart_test.cc,
// tests/hosts/).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/subprocess.h"
#include "common/testing/test_util.h"

namespace tandem::testing {

// Runs `tandem ROLE --config DIR/job.yaml --task TASK`, each daemon's output appended to
// DIR/TASK.log, and restarts one that ended with a status the units restart (not 0, 2, 3 or
// 75) one second later. Counts starts. Processes are owned by PID: an argv_prefix must exec
// the daemon in place (`ip netns exec NS` does), so that signals reach the daemon itself.
class Supervisor {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Supervisor(const TempDir& dir) : dir_(dir) {}
  ~Supervisor() { StopAll(); }
  Supervisor(const Supervisor&) = delete;

  // argv_prefix goes before TANDEM_BINARY, extra_args after `--task TASK`; both are kept for
  // the restarts.
  void Start(const std::string& role, const std::string& task,
             std::vector<std::string> argv_prefix = {}, std::vector<std::string> extra_args = {}) {
    Daemon& d = daemons_[task];
    d.given_up = false;  // started again by hand, as `systemctl start` after a clean exit
    d.role = role;
    d.argv_prefix = std::move(argv_prefix);
    d.extra_args = std::move(extra_args);
    Launch(task, d);
  }

  // One pass: a daemon that ended is restarted (after 1 s) or left down. True while any runs
  // or waits for its restart.
  bool Tick() {
    bool alive = false;
    for (auto& [task, d] : daemons_) {
      if (!d.p) continue;  // its spawn failed (reported by Launch)
      if (d.p->running()) {
        alive = true;
        continue;
      }
      if (d.restart_at) {
        if (Clock::now() >= *d.restart_at) Launch(task, d);
        alive = true;
        continue;
      }
      if (d.given_up) continue;
      const ExitInfo& e = *d.p->exit_info();
      d.exits.push_back(e.ToString());
      if (!stopping_ && !RestartPrevented(e)) {
        d.restart_at = Clock::now() + std::chrono::milliseconds(1000);
        alive = true;
      } else {
        d.given_up = true;
      }
    }
    return alive;
  }

  // SIGTERM to every running daemon at once (a chief stopped first would otherwise make the
  // others fail and wait for it), then SIGKILL to those still running after `grace`. No
  // restart follows.
  void StopAll(std::chrono::milliseconds grace = std::chrono::milliseconds(5000)) {
    stopping_ = true;
    for (auto& [task, d] : daemons_) {
      d.restart_at.reset();
      if (d.p && d.p->running()) d.p->Signal(SIGTERM);
    }
    const auto deadline = Clock::now() + grace;
    for (auto& [task, d] : daemons_) {
      if (!d.p || !d.p->running()) continue;
      const auto left =
          std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                   std::chrono::milliseconds(0));
      if (!d.p->Wait(left)) d.p->Stop(std::chrono::milliseconds(0));
    }
  }

  Subprocess& process(const std::string& task) { return *daemons_.at(task).p; }
  int starts(const std::string& task) const { return daemons_.at(task).starts; }
  std::vector<std::string> tasks() const {
    std::vector<std::string> out;
    for (const auto& [task, d] : daemons_) out.push_back(task);
    return out;
  }
  // True once every daemon ended with 0 and none waits for a restart.
  bool AllEndedWith0() const {
    for (const auto& [task, d] : daemons_) {
      if (!d.p || !d.p->exit_info() || d.restart_at) return false;
      if (!d.p->exit_info()->exited() || d.p->exit_info()->exit_code != 0) return false;
    }
    return !daemons_.empty();
  }
  std::string Report() const {
    std::string out;
    for (const auto& [task, d] : daemons_) {
      out += task + ": " + std::to_string(d.starts) + " start(s), exits:";
      for (const auto& e : d.exits) out += " [" + e + "]";
      if (d.restart_at) out += " (restart pending)";
      out += "\n";
    }
    return out;
  }

 private:
  struct Daemon {
    std::string role;
    std::vector<std::string> argv_prefix;
    std::vector<std::string> extra_args;
    std::optional<Subprocess> p;
    std::optional<Clock::time_point> restart_at;
    int starts = 0;
    bool given_up = false;
    std::vector<std::string> exits;
  };

  // RestartPreventExitStatus=75 2 3, and on-failure never restarts a clean exit.
  static bool RestartPrevented(const ExitInfo& e) {
    return e.exited() &&
           (e.exit_code == 0 || e.exit_code == 2 || e.exit_code == 3 || e.exit_code == 75);
  }

  void Launch(const std::string& task, Daemon& d) {
    SpawnOptions o;
    o.argv = d.argv_prefix;
    o.argv.insert(o.argv.end(),
                  {TANDEM_BINARY, d.role, "--config", dir_.File("job.yaml"), "--task", task});
    o.argv.insert(o.argv.end(), d.extra_args.begin(), d.extra_args.end());
    // The task comes from --task; a TF_CONFIG in the test's environment must not override it.
    o.unset_env = {"TF_CONFIG"};
    o.output_path = dir_.File(task + ".log");
    d.restart_at.reset();
    auto p = Subprocess::Spawn(o);
    ASSERT_TRUE(p.ok()) << task << ": " << p.status();
    d.p.emplace(std::move(p).value());
    d.starts++;
  }

  const TempDir& dir_;
  std::map<std::string, Daemon> daemons_;
  bool stopping_ = false;
};

// A TCP port free on 127.0.0.1 right now, for a daemon that every start (and restart) binds.
inline std::string FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  std::string port;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = std::to_string(ntohs(a.sin_port));
  if (fd >= 0) ::close(fd);
  return port;
}

}  // namespace tandem::testing
