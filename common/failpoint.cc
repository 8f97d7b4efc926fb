#include "common/failpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <sstream>

#include "common/log.h"

namespace tandem::failpoint {
namespace {

// Set once by Arm, before any thread that could reach a fault point starts.
struct Armed {
  std::string name;
  int64_t step = -1;
  std::string once_path;
};
Armed* armed = nullptr;

// Every point the code has (failpoint.h), so that a misspelt one is an error rather than a
// drill without its fault.
constexpr std::string_view kPoints[] = {kDieAfterAllReduce, kDieInRestorePoint};
std::atomic<bool> any{false};

}  // namespace

std::string Spec(const std::string& task, std::string_view point, int64_t step) {
  return task + " " + std::string(point) + " @step " + std::to_string(step);
}

Status Arm(const std::string& task) {
  const char* spec = std::getenv("TANDEM_FAILPOINT");
  if (spec == nullptr || *spec == '\0') return Status::Ok();
  // "<task> <name> @step <n>"
  std::istringstream in(spec);
  std::string who, name, at, extra;
  int64_t step = -1;
  if (!(in >> who >> name >> at >> step) || at != "@step" || step < 0 || (in >> extra))
    return Status::InvalidArgument(std::string("TANDEM_FAILPOINT '") + spec +
                                   "': expected '<task> <point> @step <n>'");
  bool known = false;
  for (std::string_view k : kPoints) known |= (k == name);
  if (!known) return Status::InvalidArgument("TANDEM_FAILPOINT: no fault point '" + name + "'");
  if (who != task) return Status::Ok();
  auto* a = new Armed{name, step, ""};  // lives as long as the process
  if (const char* once = std::getenv("TANDEM_FAILPOINT_ONCE")) a->once_path = once;
  armed = a;
  any.store(true, std::memory_order_release);
  TLOG_WARN("fault point armed: {} at step {}{}", name, step,
            a->once_path.empty() ? std::string() : " (once, marker " + a->once_path + ")");
  return Status::Ok();
}

bool Fires(std::string_view name, int64_t step) {
  if (!any.load(std::memory_order_acquire)) return false;
  if (armed->step != step) return false;
  return FiresAtOrAfter(name, step);
}

bool FiresAtOrAfter(std::string_view name, int64_t step) {
  if (!any.load(std::memory_order_acquire)) return false;
  if (armed->name != name || step < armed->step) return false;
  if (!armed->once_path.empty()) {
    const int fd = ::open(armed->once_path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) return false;  // fired before, in an earlier incarnation
    ::close(fd);
  }
  TLOG_WARN("fault point {} fires at step {}", name, step);
  spdlog::default_logger()->flush();
  return true;
}

void Die() {
  ::kill(::getpid(), SIGKILL);
  ::_exit(137);  // not reached
}

}  // namespace tandem::failpoint
