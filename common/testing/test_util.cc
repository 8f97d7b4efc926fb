#include "common/testing/test_util.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace tandem::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base ? base : "/tmp") + "/tandem-test-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  path_ = ::mkdtemp(buf.data()) ? std::string(buf.data()) : std::string();
}

TempDir::~TempDir() {
  // TANDEM_TEST_KEEP_DIRS=1 keeps them, to read a failed cluster test's logs afterwards.
  if (const char* keep = std::getenv("TANDEM_TEST_KEEP_DIRS"); keep && *keep == '1') return;
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool TakesODirect(const std::string& dir) {
  const std::string probe = dir + "/o_direct_probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  return fd >= 0;
}

bool CopiesGoDirect(const std::string& dir) {
  struct statfs st;
  if (::statfs(dir.c_str(), &st) != 0) return false;
  const auto type = static_cast<unsigned long>(st.f_type);
  return (type == EXT4_SUPER_MAGIC || type == XFS_SUPER_MAGIC || type == BTRFS_SUPER_MAGIC) &&
         TakesODirect(dir);
}

long PageCachePages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_size == 0) {
    ::close(fd);
    return st.st_size == 0 ? 0 : -1;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return -1;
  const long page = ::sysconf(_SC_PAGESIZE);
  std::vector<unsigned char> vec((size + page - 1) / page);
  long resident = -1;
  if (::mincore(map, size, vec.data()) == 0) {
    resident = 0;
    for (unsigned char v : vec) resident += v & 1;
  }
  ::munmap(map, size);
  return resident;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::string>& set_env,
                         const std::vector<std::string>& unset_env,
                         std::chrono::milliseconds timeout) {
  TempDir dir;
  SpawnOptions o;
  o.argv = argv;
  o.set_env = set_env;
  o.unset_env = unset_env;
  o.output_path = dir.File("output");
  o.new_process_group = true;
  CommandResult r;
  auto p = Subprocess::Spawn(o);
  if (!p.ok()) {
    r.output = p.status().ToString();
    return r;
  }
  auto e = p->Wait(timeout);
  if (!e) {
    // A supervisor (`tandem local`, `tandem drill`) stops its daemons on SIGTERM; whatever is
    // left of its tree after the grace is killed with it, so that no daemon of a timed-out test
    // goes on restarting in a removed directory.
    r.timed_out = true;
    e = p->Stop(std::chrono::milliseconds(15000));
    p->KillGroup();
  }
  r.exit = *e;
  r.output = ReadFile(o.output_path);
  return r;
}

bool WaitForFile(const std::string& path, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    if (std::filesystem::file_size(path, ec) > 0 && !ec) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

long ResidentKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

}  // namespace tandem::testing
