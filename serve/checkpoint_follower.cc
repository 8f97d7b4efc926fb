#include "serve/checkpoint_follower.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include "common/checkpoint_layout.h"
#include "common/log.h"
#include "offline/checkpoint_reader.h"
#include "serve/checkpoint_delta.h"
#include "worker/dense_state.h"

namespace tandem::serve {

namespace {

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// When `path` was last written (a MANIFEST: when the checkpoint was committed), or now.
double ModifiedAt(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return WallSeconds();
  return static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9;
}

}  // namespace

StatusOr<std::unique_ptr<CheckpointFollower>> CheckpointFollower::Start(
    const FollowOptions& options, ServedModel* served, metrics::Registry* registry) {
  std::unique_ptr<CheckpointFollower> f(new CheckpointFollower());
  f->options_ = options;
  f->served_ = served;
  f->updates_ = registry->counter("tandem_serve_updates_total",
                                  "Model versions published from the checkpoint directory.");
  f->full_loads_ = registry->counter(
      "tandem_serve_full_loads_total",
      "Checkpoints opened whole (the first, and after the changed rows outgrew the bound).");
  f->failures_ = registry->counter("tandem_serve_update_failures_total",
                                   "Checkpoints that could not be loaded (the last is kept).");
  f->rows_read_ = registry->counter("tandem_serve_delta_rows_read_total",
                                    "Rows read from new checkpoint files to find changed rows.");
  f->rows_applied_ = registry->counter("tandem_serve_delta_rows_applied_total",
                                       "Changed rows applied over the served version.");
  f->update_seconds_ =
      registry->histogram("tandem_serve_update_seconds", "Time to load and publish one checkpoint.",
                          {}, metrics::LatencyBuckets());
  CheckpointFollower* self = f.get();
  registry->AddCollector([self](std::vector<metrics::Registry::Sample>* out) {
    out->push_back({"tandem_serve_update_lag_seconds",
                    "Seconds from the served checkpoint's commit to its publication.",
                    "gauge",
                    {},
                    self->lag_seconds_.load()});
    out->push_back({"tandem_serve_delta_rows",
                    "Changed rows held in memory over the base.",
                    "gauge",
                    {},
                    static_cast<double>(self->delta_rows_.load())});
  });
  f->thread_ = std::thread([self] { self->Loop(); });
  return f;
}

CheckpointFollower::~CheckpointFollower() {
  {
    MutexLock lock(&stop_mu_);
    stop_ = true;
  }
  stop_cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

void CheckpointFollower::Loop() {
  // Requests come first: on a host whose cores the server's threads fill, an update that reads
  // and applies 10^5 rows would otherwise double the requests' p99 while it runs. Linux applies
  // a nice value per thread; the update still gets every idle cycle.
  if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10) != 0)
    TLOG_WARN("serve: cannot lower the update thread's priority: {}", std::strerror(errno));
  for (;;) {
    Status s = PollOnce();
    if (!s.ok()) {
      MutexLock lock(&mu_);
      if (s.ToString() != last_error_) {  // once per distinct failure, not once per poll
        TLOG_WARN("serve: {}", s.ToString());
        last_error_ = s.ToString();
      }
    }
    MutexLock lock(&stop_mu_);
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.poll_seconds);
    while (!stop_ && stop_cv_.WaitUntil(until)) {
    }
    if (stop_) return;
  }
}

Status CheckpointFollower::PollOnce() {
  std::vector<std::string> warnings;
  auto m = chief::LoadLatest(options_.dir, /*durable_only=*/false, &warnings);
  if (!m.ok()) {
    if (m.status().IsNotFound()) return Status::Ok();  // no checkpoint yet: not ready
    return m.status().WithContext(options_.dir);
  }
  {
    MutexLock lock(&mu_);
    if (m->step <= served_step_) return Status::Ok();
  }
  const auto start = std::chrono::steady_clock::now();
  Status s = Update(options_.dir, *m);
  if (!s.ok()) {
    failures_->Add();
    return s.WithContext("checkpoint " + std::to_string(m->step));
  }
  update_seconds_->Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  lag_seconds_ =
      WallSeconds() - ModifiedAt(options_.dir + "/" + CheckpointDirName(m->step) + "/MANIFEST");
  return Status::Ok();
}

Status CheckpointFollower::Update(const std::string& root, const chief::Manifest& m) {
  const auto start = std::chrono::steady_clock::now();
  MutexLock lock(&mu_);
  const offline::OpenedCheckpoint ckpt{root, m};
  TANDEM_RETURN_IF_ERROR(chief::VerifyManifestFiles(root, m, /*full=*/false, nullptr));
  TANDEM_ASSIGN_OR_RETURN(config::JobConfig job, offline::CheckpointJobConfig(ckpt));
  TANDEM_ASSIGN_OR_RETURN(
      worker::DenseState dense,
      worker::ReadDenseState(root + "/" + CheckpointDirName(m.step) + "/" + kDenseCheckpointFile));
  if (dense.step != m.step)
    return Status::DataLoss("the dense file of checkpoint " + std::to_string(m.step) +
                            " is of step " + std::to_string(dense.step));
  dense = worker::WithoutOptimizerState(std::move(dense));
  TANDEM_ASSIGN_OR_RETURN(
      auto opened, CheckpointRows::Open(ckpt, job, options_.state_dir, options_.cache_bytes));
  std::shared_ptr<const CheckpointRows> newer = std::move(opened);
  const auto specs = embedding::TableSpecsFromConfig(job);
  const std::shared_ptr<const ModelVersion> current = served_->current();
  bool whole = current == nullptr || base_ == nullptr ||
               served_config_hash_ != job.ComputationHash() ||
               served_parts_.size() != newer->parts().size() ||
               // After a rollback the rows changed on the abandoned timeline revert to values
               // that are in no new file: only a whole load is sure to see them.
               served_timeline_ != m.timeline;
  std::vector<worker::FrozenTable> changed;
  if (!whole) {
    DeltaStats stats;
    TANDEM_ASSIGN_OR_RETURN(std::vector<worker::FrozenTable> delta,
                            ChangedRows(*newer, served_parts_, *current->rows(), specs, &stats));
    rows_read_->Add(stats.rows_read);
    rows_applied_->Add(stats.rows_changed);
    uint64_t held = 0;
    changed.resize(specs.size());
    for (size_t t = 0; t < specs.size(); ++t) {
      changed[t] =
          delta_ == nullptr ? std::move(delta[t]) : MergeRows(delta_->tables()[t], delta[t]);
      held += changed[t].ids.size();
    }
    whole = held > options_.max_delta_rows;
    if (!whole)
      TLOG_INFO("serve: step {}: {} rows read, {} changed, {} held over step {}", m.step,
                stats.rows_read, stats.rows_changed, held, base_->step());
  }
  std::shared_ptr<const RowSource> rows;
  std::shared_ptr<const DeltaRows> delta;
  uint64_t held = 0;
  if (whole) {
    full_loads_->Add();
    rows = newer;
    TLOG_INFO("serve: step {}: checkpoint opened whole", m.step);
  } else {
    for (const auto& t : changed) held += t.ids.size();
    delta = std::make_shared<DeltaRows>(base_, std::move(changed));
    rows = delta;
  }
  TANDEM_ASSIGN_OR_RETURN(auto version, ModelVersion::Create(job, m.step, std::move(dense),
                                                             std::move(rows), options_.version));
  // Counted before it is published: a client that sees the version finds its update counted.
  update_seconds_->Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  lag_seconds_ = WallSeconds() - ModifiedAt(root + "/" + CheckpointDirName(m.step) + "/MANIFEST");
  updates_->Add();
  served_->Publish(std::move(version));
  if (whole) base_ = newer;
  delta_ = std::move(delta);
  delta_rows_ = held;
  served_parts_ = newer->parts();
  served_config_hash_ = job.ComputationHash();
  served_timeline_ = m.timeline;
  served_step_ = m.step;
  last_error_.clear();
  return Status::Ok();
}

}  // namespace tandem::serve
