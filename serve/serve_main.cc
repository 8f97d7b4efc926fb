#include "serve/serve_main.h"

#include <unistd.h>

#include <filesystem>

#include "common/log.h"

namespace tandem::serve {

namespace fs = std::filesystem;

namespace {

// Beside the checkpoints, so that opening one hard-links its files instead of copying them;
// in the temporary directory when that is not writable (a read-only mount).
StatusOr<std::string> DefaultStateDir(const std::string& follow) {
  char host[256] = "host";
  ::gethostname(host, sizeof host - 1);
  std::error_code ec;
  const std::string beside = follow + "/serve-state/" + host + "-" + std::to_string(::getpid());
  fs::create_directories(beside, ec);
  if (!ec) return beside;
  const std::string tmp =
      (fs::temp_directory_path() / ("tandem-serve-" + std::to_string(::getpid()))).string();
  fs::create_directories(tmp, ec);
  if (ec) return Status::Unavailable("create " + tmp + ": " + ec.message());
  TLOG_WARN(
      "serve: {} is not writable; checkpoints are copied into {} (give --state-dir on "
      "the checkpoint's file system to link them instead)",
      follow, tmp);
  return tmp;
}

}  // namespace

StatusOr<std::unique_ptr<ServeProcess>> ServeProcess::Start(const ServeOptions& options) {
  if (options.model.empty() == options.follow.empty())
    return Status::InvalidArgument("give exactly one of --model BUNDLE and --follow DIR");
  if (!options.deltas.empty() && options.model.empty())
    return Status::InvalidArgument("--delta goes with --model");
  std::unique_ptr<ServeProcess> p(new ServeProcess());
  if (!options.model.empty()) {
    TANDEM_ASSIGN_OR_RETURN(auto version, LoadBundleVersion(options.model, options.deltas,
                                                            options.verify, options.version));
    TLOG_INFO("serve: {} loaded (step {})", options.model, version->step());
    p->served_.Publish(std::move(version));
  } else {
    FollowOptions f;
    f.dir = options.follow;
    f.state_dir = options.state_dir;
    if (f.state_dir.empty()) {
      TANDEM_ASSIGN_OR_RETURN(f.state_dir, DefaultStateDir(options.follow));
      p->owned_state_dir_ = f.state_dir;
    }
    f.cache_bytes = options.cache_bytes;
    f.poll_seconds = options.poll_seconds;
    f.max_delta_rows = options.max_delta_rows;
    f.version = options.version;
    TANDEM_ASSIGN_OR_RETURN(p->follower_, CheckpointFollower::Start(f, &p->served_, &p->registry_));
  }
  TANDEM_ASSIGN_OR_RETURN(p->http_, HttpApi::Start(options.http, &p->served_, &p->registry_));
  return p;
}

void ServeProcess::Stop() {
  if (http_ != nullptr) http_->Stop();
  follower_.reset();
}

ServeProcess::~ServeProcess() {
  Stop();
  http_.reset();
  served_.Publish(nullptr);  // the versions' checkpoint directories go with them
  if (!owned_state_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(owned_state_dir_, ec);
    fs::remove(fs::path(owned_state_dir_).parent_path(), ec);  // serve-state/, when empty
  }
}

}  // namespace tandem::serve
