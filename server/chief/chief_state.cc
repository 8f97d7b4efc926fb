#include "server/chief/chief_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace tandem::chief {
namespace {

Status Errno(const std::string& what, int err) {
  return Status::Unavailable(what + ": " + std::strerror(err));
}

Status WriteAll(int fd, const std::string& text, const std::string& path) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("write " + path, errno);
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status FsyncPath(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return Errno("open " + path, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  return rc == 0 ? Status::Ok() : Errno("fsync " + path, err);
}

// A crash at any point leaves either the old file or the new one, never a mix, and once this
// returns the new one survives a machine crash.
Status WriteDurably(const std::string& path, const std::string& text) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("open " + tmp, errno);
  Status s = WriteAll(fd, text, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = Errno("fsync " + tmp, errno);
  ::close(fd);
  TANDEM_RETURN_IF_ERROR(s);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Errno("rename " + tmp, errno);
  return FsyncPath(dir, O_RDONLY | O_DIRECTORY);
}

}  // namespace

std::string EncodeChiefState(const ChiefStateData& d) {
  nlohmann::json j = {{"term", d.term},
                      {"highest_incarnation", d.highest_incarnation},
                      {"generation", d.generation},
                      {"timeline", d.timeline},
                      {"latest_step", d.latest_step}};
  return j.dump(2) + "\n";
}

StatusOr<ChiefStateData> DecodeChiefState(const std::string& text, const std::string& name) {
  ChiefStateData d;
  try {
    auto j = nlohmann::json::parse(text);
    if (!j.is_object()) return Status::DataLoss(name + ": not a JSON object");
    auto u64 = [&](const char* key, uint64_t* out) -> Status {
      if (!j.contains(key) || !j[key].is_number_unsigned())
        return Status::DataLoss(name + ": '" + key + "' is missing or not an unsigned number");
      *out = j[key].get<uint64_t>();
      return Status::Ok();
    };
    TANDEM_RETURN_IF_ERROR(u64("term", &d.term));
    TANDEM_RETURN_IF_ERROR(u64("highest_incarnation", &d.highest_incarnation));
    TANDEM_RETURN_IF_ERROR(u64("generation", &d.generation));
    TANDEM_RETURN_IF_ERROR(u64("timeline", &d.timeline));
    if (!j.contains("latest_step") || !j["latest_step"].is_number_integer())
      return Status::DataLoss(name + ": 'latest_step' is missing or not an integer");
    d.latest_step = j["latest_step"].get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    return Status::DataLoss(name + ": corrupt chief state: " + e.what());
  }
  if (d.generation == 0) return Status::DataLoss(name + ": generation 0 is never issued");
  return d;
}

StatusOr<std::unique_ptr<ChiefState>> ChiefState::Open(const std::string& checkpoint_dir) {
  const std::string dir = checkpoint_dir + "/chief";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Unavailable("cannot create " + dir + ": " + ec.message());
  std::unique_ptr<ChiefState> state(new ChiefState(dir + "/state"));
  ChiefStateData data;
  if (std::filesystem::exists(state->path_, ec)) {
    std::ifstream in(state->path_, std::ios::binary);
    if (!in) return Status::Unavailable("cannot read " + state->path_);
    std::stringstream text;
    text << in.rdbuf();
    TANDEM_ASSIGN_OR_RETURN(data, DecodeChiefState(text.str(), state->path_));
  } else if (ec) {
    return Status::Unavailable("cannot stat " + state->path_ + ": " + ec.message());
  }
  data.term += 1;
  TANDEM_RETURN_IF_ERROR(state->Save(data));
  return state;
}

Status ChiefState::Save(const ChiefStateData& data) {
  TANDEM_RETURN_IF_ERROR(WriteDurably(path_, EncodeChiefState(data)));
  data_ = data;
  return Status::Ok();
}

}  // namespace tandem::chief
