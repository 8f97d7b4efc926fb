#include "common/wire/curve_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/errno_status.h"
#include "common/sync.h"

namespace tandem::wire {
namespace {

bool IsZ85Key(const std::string& s) {
  if (s.size() != 40) return false;
  uint8_t raw[32];
  return zmq_z85_decode(raw, s.c_str()) != nullptr;
}

Mutex default_mu;
std::optional<CurveKeys>& DefaultSlot() {
  static std::optional<CurveKeys> keys;
  return keys;
}

}  // namespace

StatusOr<CurveKeys> GenerateCurveKeys() {
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0)
    return Status::Unimplemented(std::string("libzmq cannot make CURVE keys: ") +
                                 zmq_strerror(zmq_errno()));
  return CurveKeys{pub, sec};
}

Status WriteCurveKeys(const std::string& dir, const CurveKeys& keys) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Unavailable("cannot create " + dir + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);
  const std::string path = dir + "/" + kCurveKeyFile;
  // O_EXCL: never replace a cluster's keys by accident, and the file is 0600 from its first byte.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return Status::AlreadyExists(path + " exists: the cluster has keys");
    return ErrnoToStatus(errno, "cannot create " + path);
  }
  const std::string text =
      "# tandem cluster CURVE keys: every process of the job needs this file; keep it secret\n"
      "public " +
      keys.public_key + "\nsecret " + keys.secret_key + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(path.c_str());
    return ErrnoToStatus(saved, "cannot write " + path);
  }
  return Status::Ok();
}

StatusOr<CurveKeys> LoadCurveKeys(const std::string& dir) {
  const std::string path = dir + "/" + kCurveKeyFile;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return Status::InvalidArgument("security.keys: cannot read " + path + ": " +
                                   std::strerror(errno) + " (make it with `tandem keys --out " +
                                   dir + "`)");
  if ((st.st_mode & 077) != 0)
    return Status::InvalidArgument("security.keys: " + path +
                                   " is readable by group or others (chmod 600 it)");
  std::ifstream in(path);
  if (!in) return Status::InvalidArgument("security.keys: cannot open " + path);
  CurveKeys keys;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name, value, extra;
    fields >> name >> value;
    if (fields >> extra) name.clear();
    if (name == "public" && keys.public_key.empty()) {
      keys.public_key = value;
    } else if (name == "secret" && keys.secret_key.empty()) {
      keys.secret_key = value;
    } else {
      return Status::InvalidArgument("security.keys: " + path + ": unexpected line \"" + line +
                                     "\"");
    }
  }
  if (!IsZ85Key(keys.public_key) || !IsZ85Key(keys.secret_key))
    return Status::InvalidArgument("security.keys: " + path +
                                   " needs a 40-character Z85 `public` and `secret` key");
  char derived[41];
  if (zmq_curve_public(derived, keys.secret_key.c_str()) != 0 || keys.public_key != derived)
    return Status::InvalidArgument("security.keys: " + path +
                                   ": the public key does not belong to the secret key");
  return keys;
}

void SetDefaultCurveKeys(std::optional<CurveKeys> keys) {
  MutexLock lock(&default_mu);
  DefaultSlot() = std::move(keys);
}

std::optional<CurveKeys> DefaultCurveKeys() {
  MutexLock lock(&default_mu);
  return DefaultSlot();
}

}  // namespace tandem::wire
