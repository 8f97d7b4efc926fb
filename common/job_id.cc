#include "common/job_id.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace tandem {

std::string JobId::ToHex() const {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

StatusOr<JobId> ParseJobId(const std::string& hex) {
  if (hex.size() != 32) return Status::InvalidArgument("job id must be 32 hex chars: " + hex);
  JobId id;
  for (size_t i = 0; i < 32; ++i) {
    char c = hex[i];
    int v = (c >= '0' && c <= '9')   ? c - '0'
            : (c >= 'a' && c <= 'f') ? c - 'a' + 10
            : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                     : -1;
    if (v < 0) return Status::InvalidArgument("job id must be 32 hex chars: " + hex);
    uint64_t& half = i < 16 ? id.hi : id.lo;
    half = (half << 4) | static_cast<uint64_t>(v);
  }
  return id;
}

JobId RandomJobId() {
  std::random_device rd;  // job ids must differ between jobs, not be reproducible
  auto r64 = [&] { return (static_cast<uint64_t>(rd()) << 32) ^ rd(); };
  JobId id{r64(), r64()};
  if (id.is_zero()) id.lo = 1;
  return id;
}

StatusOr<JobId> LoadOrCreateJobId(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::Unavailable("cannot create " + dir + ": " + ec.message());
  const std::string path = dir + "/job_id";
  if (!fs::exists(path)) {
    // Write a temp file, then link(2) it into place: link fails if another process won the race,
    // and readers never see a half-written id. The temp file is named by the new id, not the pid:
    // processes of other hosts or containers (pods whose daemons all have one pid) share the dir.
    const std::string hex = RandomJobId().ToHex();
    std::string tmp = path + ".tmp." + hex;
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << hex << "\n";
      out.flush();
      if (!out) return Status::Unavailable("cannot write " + tmp);
    }
    int rc = ::link(tmp.c_str(), path.c_str());
    int err = errno;
    ::unlink(tmp.c_str());
    if (rc != 0 && err != EEXIST) return Status::Unavailable("cannot create " + path);
  }
  std::ifstream in(path);
  std::string hex;
  in >> hex;
  auto id = ParseJobId(hex);
  if (!id.ok()) return Status::DataLoss(path + ": " + id.status().message());
  return id;
}

}  // namespace tandem
