// Child processes for the local supervisor and the multi-process tests: spawn with a chosen
// environment and output file, signal, and wait with a deadline. Owned by PID.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem {

struct SpawnOptions {
  std::vector<std::string> argv;       // argv[0] is the program path
  std::vector<std::string> unset_env;  // variables removed from the child's environment
  std::vector<std::string> set_env;    // "NAME=value" added
  std::string output_path;             // stdout+stderr appended here; empty = inherit
  // The child leads a process group of its own, which its children join unless they leave it:
  // KillGroup() then ends a whole tree (a supervisor and its daemons) at once.
  bool new_process_group = false;
};

// How a child ended: exit_code for a normal exit, signal otherwise.
struct ExitInfo {
  int exit_code = -1;
  int signal = 0;
  bool exited() const { return signal == 0; }
  std::string ToString() const;
};

// A spawned process. Move-only; the destructor SIGKILLs and reaps a child still running,
// so a failing test never leaks processes.
class Subprocess {
 public:
  static StatusOr<Subprocess> Spawn(const SpawnOptions& options);
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  bool running();  // reaps it if it has ended
  void Signal(int sig);
  // Waits up to `timeout`; nullopt if still running.
  std::optional<ExitInfo> Wait(std::chrono::milliseconds timeout);
  // SIGTERM, wait up to `grace`, then SIGKILL.
  ExitInfo Stop(std::chrono::milliseconds grace);
  // SIGKILL to every process left in the child's group (new_process_group), the child included
  // while it runs or is not reaped yet.
  void KillGroup();
  const std::optional<ExitInfo>& exit_info() const { return exit_; }

 private:
  explicit Subprocess(pid_t pid) : pid_(pid) {}
  bool Reap(bool block);
  pid_t pid_ = -1;
  bool group_ = false;
  std::optional<ExitInfo> exit_;
};

// The path of the running executable (/proc/self/exe).
std::string SelfExecutable();

}  // namespace tandem
