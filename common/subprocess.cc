#include "common/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <thread>

extern char** environ;

namespace tandem {

std::string ExitInfo::ToString() const {
  if (signal != 0) return std::string("killed by signal ") + strsignal(signal);
  return "exit " + std::to_string(exit_code);
}

StatusOr<Subprocess> Subprocess::Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return Status::InvalidArgument("empty argv");
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    std::string name = kv.substr(0, kv.find('='));
    bool drop = false;
    for (const auto& u : options.unset_env) drop |= (u == name);
    for (const auto& s : options.set_env) drop |= (s.substr(0, s.find('=')) == name);
    if (!drop) env.push_back(kv);
  }
  for (const auto& s : options.set_env) env.push_back(s);
  std::vector<char*> argv, envp;
  for (const auto& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!options.output_path.empty()) {
    std::error_code ec;
    auto parent = std::filesystem::path(options.output_path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    posix_spawn_file_actions_addopen(&actions, 1, options.output_path.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  }
  // The child must not inherit our blocked SIGTERM/SIGINT mask.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigmask(&attr, &empty);
  short flags = POSIX_SPAWN_SETSIGMASK;
  if (options.new_process_group) {
    posix_spawnattr_setpgroup(&attr, 0);
    flags |= POSIX_SPAWN_SETPGROUP;
  }
  posix_spawnattr_setflags(&attr, flags);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Status::Unavailable(std::string("spawn ") + argv[0] + ": " + strerror(rc));
  Subprocess p(pid);
  p.group_ = options.new_process_group;
  return p;
}

Subprocess::Subprocess(Subprocess&& o) noexcept : pid_(o.pid_), group_(o.group_), exit_(o.exit_) {
  o.pid_ = -1;
}

Subprocess& Subprocess::operator=(Subprocess&& o) noexcept {
  if (this != &o) {
    if (pid_ > 0 && !exit_) Stop(std::chrono::milliseconds(0));
    pid_ = o.pid_;
    group_ = o.group_;
    exit_ = o.exit_;
    o.pid_ = -1;
  }
  return *this;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !exit_) {
    ::kill(pid_, SIGKILL);
    Reap(true);
  }
}

bool Subprocess::Reap(bool block) {
  if (exit_) return true;
  int status = 0;
  pid_t r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
  if (r != pid_) return false;
  ExitInfo info;
  if (WIFEXITED(status)) info.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) info.signal = WTERMSIG(status);
  exit_ = info;
  return true;
}

bool Subprocess::running() { return pid_ > 0 && !Reap(false); }

void Subprocess::Signal(int sig) {
  if (pid_ > 0 && !exit_) ::kill(pid_, sig);
}

std::optional<ExitInfo> Subprocess::Wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (Reap(false)) return exit_;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

ExitInfo Subprocess::Stop(std::chrono::milliseconds grace) {
  if (exit_) return *exit_;
  Signal(SIGTERM);
  if (auto e = Wait(grace)) return *e;
  Signal(SIGKILL);
  Reap(true);
  return *exit_;
}

void Subprocess::KillGroup() {
  // The group outlives its leader while members remain; its id stays the leader's pid.
  if (pid_ > 0 && group_) ::kill(-pid_, SIGKILL);
  if (pid_ > 0 && !exit_) Reap(true);
}

std::string SelfExecutable() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

}  // namespace tandem
