#include "worker/worker_main.h"

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/checkpoint_layout.h"
#include "common/daemon/member.h"
#include "common/daemon/stop_signals.h"
#include "common/determinism_class.h"
#include "common/embedding/table_spec.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "common/metrics/metrics_writer.h"
#include "common/metrics/tensorboard_writer.h"
#include "common/ps_client.h"
#include "worker/background_checkpointer.h"
#include "worker/bad_line_report.h"
#include "worker/collective/chief_store.h"
#include "worker/dense_state.h"
#include "worker/device/backend_factory.h"
#include "worker/device/cpu/blas_kernels.h"
#include "worker/device/cpu/cpu_backend.h"
#include "worker/device/device_info.h"
#include "worker/model/network_factory.h"
#include "worker/roll_forward/all_reduce_group.h"
#include "worker/roll_forward/replica_group.h"
#include "worker/training_loop.h"
#include "worker/worker_service.h"

namespace tandem::worker {

using daemon::RoleContext;
namespace {

// Exit status for a training error: an invalid push or bad data is the job's input, not a crash
// (3, PROTOCOLS §2.6, §12). Not ExitCodeFor for the rest: mid-training a kFailedPrecondition is
// a broken collective or replica and a kDataLoss or kNotFound may be a peer's, all of which a
// restart from the last checkpoint fixes, so the supervisor must restart this worker (1).
int ExitFor(const Status& s) {
  return s.IsInvalidArgument() ? ExitCodeFor(s) : kExitRuntimeFailure;
}

// A job that starts from step 0 owns output.dir: metrics of an earlier job there are moved
// aside, not appended to (resuming arrives with checkpoints).
void MoveAsideOldMetrics(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return;
  for (int i = 1;; ++i) {
    const std::string old = path + "." + std::to_string(i);
    if (!std::filesystem::exists(old, ec)) {
      std::filesystem::rename(path, old, ec);
      TLOG_INFO("moved the previous job's {} to {}", path, old);
      return;
    }
  }
}

}  // namespace

namespace {

// One worker process's life once its server is bound: join the job, wait for the whole cluster,
// connect to the shards and the other replicas, train, report the result. Members are declared
// in the order they are made, so that they are torn down in reverse (the signal thread is joined
// after the clients it may interrupt are gone, and before the group and the chief client).
class WorkerRun {
 public:
  WorkerRun(const RoleContext& ctx, WorkerGauges* gauges)
      : ctx_(ctx),
        job_(*ctx.job),
        gauges_(gauges),
        rank_(ctx.index),
        world_(static_cast<int>(ctx.job->cluster.workers.size())) {}

  int Run() {
    if (job_.cluster.chief.at(0).ends_with(":0")) {
      TLOG_ERROR(
          "cluster.chief has port 0: a worker needs the chief's address (tandem local "
          "starts the chief first and passes it on)");
      return kExitInvalid;
    }
    if (std::optional<int> refused = Join()) return *refused;
    StartSignalThread();
    progress_.state = MemberState::kWaiting;
    chief_->SetProgress(progress_);
    auto view = chief_->AwaitComplete(std::chrono::seconds(job_.recovery.max_wait_s),
                                      [&] { return daemon::StopSignalSeen(ctx_.stop_signals); });
    if (view.status().IsCancelled()) {
      TLOG_INFO("{}: stopping", view.status().message());
      return kExitOk;
    }
    if (!view.ok()) return ReportFailure(view.status().WithContext("waiting for the cluster"), 1);
    if (std::optional<int> failed = Connect(*view)) return *failed;
    if (std::optional<int> failed = OpenMetrics()) return *failed;
    progress_.state = MemberState::kTraining;
    chief_->SetProgress(progress_);
    TrainingLoopOptions o = LoopOptions();
    const std::vector<std::string> ignored = model::IgnoredModelKeys(job_.model);
    if (!ignored.empty()) {
      std::string keys;
      for (const std::string& k : ignored) keys += (keys.empty() ? "" : ", ") + k;
      TLOG_INFO("model.type {} does not use, so ignores: {}", job_.model.type, keys);
    }
    TLOG_INFO("training steps {}..{} of {} (k = {}, batch {} per worker, {} workers, {} shards)", 0,
              job_.train.steps - 1, job_.train.steps, job_.train.embedding_staleness,
              job_.train.batch_size, world_, po_.shards.size());
    return Finish(RunTrainingLoop(o));
  }

 private:
  // Registers with the chief; the exit status when it refused or cannot be reached.
  std::optional<int> Join() {
    int exit_status = kExitOk;
    determinism_class_ =
        DeterminismClass(static_cast<int>(job_.train.threads), device::CpuBackend::BlasCoreName(),
                         GpuDeterminismClass(job_));
    TLOG_INFO("openblas kernels: {}", device::BlasKernelsDescription());
    chief_ = daemon::JoinJob(ctx_, config::Role::kWorker, determinism_class_, &exit_status, &reg_);
    if (!chief_) return exit_status;
    start_step_ = reg_.resume_step + 1;
    rejoin_ = reg_.joins_running_job && world_ > 1;
    if (rejoin_) TLOG_INFO("replacing a worker lost while the job trained: rolling forward");
    // Roll-forward recovery (PROTOCOLS §8, §11): the group across losses.
    group_ = std::make_unique<ReplicaGroup>(&job_, chief_.get());
    return std::nullopt;
  }

  // SIGTERM/SIGINT stop the whole job: the vote rides in the next step's all-reduce and the
  // chief tells everyone else. An op or a shard that holds the step up past kStopGrace (a
  // second signal: at once) is abandoned (ReplicaGroup::Watch).
  void StartSignalThread() {
    signals_ = std::thread([this] {
      while (!finished_.load()) {
        int sig = 0;
        if (!daemon::WaitStopSignal(ctx_.stop_signals, std::chrono::milliseconds(100), &sig)) {
          group_->Watch();
          continue;
        }
        const bool again = stop_signal_.exchange(true);
        TLOG_INFO("received {}{}", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                  again ? " again: abandoning what the stop waits for"
                        : ": asking the chief to stop the job");
        group_->NoteStop(again);
        group_->Watch();
        if (!again)
          chief_->StopJob("SIGTERM to worker:" + std::to_string(rank_)).status().IgnoreError();
      }
    });
  }

  int ReportFailure(const Status& s, int status) {
    TLOG_ERROR("{}", s.ToString());
    progress_.state = MemberState::kFailed;
    progress_.detail = "worker:" + std::to_string(rank_) + ": " + s.ToString();
    chief_->SetProgress(progress_);
    chief_->HeartbeatNow(std::chrono::milliseconds(2000)).IgnoreError();
    return status;
  }

  // The shards' clients, the device and the all-reduce group of the view's generation.
  std::optional<int> Connect(const ClusterView& view) {
    self_ = chief_->identity();
    for (const MemberView* m : view.Of(config::Role::kPs)) po_.shards.push_back(m->address);
    po_.dims.clear();
    for (const auto& spec : embedding::TableSpecsFromConfig(job_)) po_.dims.push_back(spec.dim);
    po_.timeout =
        std::chrono::milliseconds(std::max<int64_t>(120000, job_.recovery.max_wait_s * 1000));
    // Validated with the config (OneOf), so the parse cannot fail here.
    if (auto precision = ParseWirePrecision(job_.ps.wire_precision); precision.ok())
      po_.wire_precision = *precision;
    if (world_ > 1)
      po_.interrupted = [this] { return group_->Interrupted(); };
    else
      po_.interrupted = [this] { return group_->StopOverdue(); };
    ps_ = std::make_unique<PsClient>(ctx_.context, self_, po_);
    if (job_.train.embedding_staleness >= 1)
      prefetch_ps_ = std::make_unique<PsClient>(ctx_.context, self_, po_);
    store_ = std::make_unique<collective::ChiefStore>(chief_.get());
    auto backend = device::CreateBackend(job_.train);
    if (!backend.ok()) return ReportFailure(backend.status(), kExitInvalid);
    backend_ = std::move(backend).value();
    auto joined = JoinAllReduceGroup(job_, rank_, world_, ctx_.host, view.generation, store_.get());
    if (!joined.ok())
      return ReportFailure(joined.status().WithContext("joining the other workers"), 1);
    group_->Adopt(std::move(joined).value(), view.generation);
    return std::nullopt;
  }

  // Rank 0 writes metrics.jsonl and TensorBoard events.
  std::optional<int> OpenMetrics() {
    if (rank_ != 0) return std::nullopt;
    const std::string path = job_.output.dir + "/metrics.jsonl";
    std::error_code ec;
    std::filesystem::create_directories(job_.output.dir, ec);
    if (start_step_ == 0 && !rejoin_) MoveAsideOldMetrics(path);  // a resumed job appends
    auto m = metrics::MetricsWriter::Open(path);
    if (!m.ok() && m.status().IsFailedPrecondition()) {
      // It ends with a final line: a run that finished after the checkpoint this one resumes
      // from. Its lines stay in the moved-aside file.
      MoveAsideOldMetrics(path);
      m = metrics::MetricsWriter::Open(path);
    }
    if (!m.ok()) return ReportFailure(m.status(), 1);
    metrics_ = std::move(m).value();
    auto tb = metrics::TensorBoardWriter::Open(job_.output.dir + "/tensorboard");
    if (!tb.ok()) return ReportFailure(tb.status(), 1);
    tensorboard_ = std::move(tb).value();
    return std::nullopt;
  }

  TrainingLoopOptions LoopOptions() {
    TrainingLoopOptions o;
    o.job = &job_;
    o.rank = rank_;
    o.world = world_;
    o.timeline = self_.timeline;
    o.embeddings = ps_.get();
    o.prefetch_embeddings = prefetch_ps_.get();
    o.collective = group_->get();
    o.backend = backend_.get();
    o.start_step = start_step_;
    o.rejoin = rejoin_;
    if (world_ > 1) {
      o.recover = [this] {
        gauges_->recoveries.fetch_add(1);
        return group_->Recover([this](MemberState state) {
          progress_.state = state;
          chief_->SetProgress(progress_);
        });
      };
    }
    if (reg_.resume_step >= 0) o.restore = RestoreFromCheckpoint();
    if (rank_ == 0) o.checkpoint = StartCheckpointer();
    o.metrics = metrics_.get();
    o.tensorboard = tensorboard_.get();
    if (rank_ == 0) o.sparse_checksum = [this](int64_t last) { return ps_->Checksum(last); };
    if (rank_ == 0) o.dense_state_path = job_.output.dir + "/model/dense.ckpt";  // creates model/
    o.bad_lines_path = BadLinesPath(job_.output.dir, rank_);
    o.on_progress = [this](const LoopProgress& p) { ReportProgress(p); };
    o.stop_requested = [this] {
      return stop_signal_.load() || chief_->stop_requested() || chief_->fenced();
    };
    if (rank_ == 0)
      o.waiting_on = [this](const std::string& why) { chief_->SetWaitingOn(why, "outputs"); };
    return o;
  }

  // The dense state of the checkpoint the job resumes from.
  std::function<Status(Trainer*)> RestoreFromCheckpoint() const {
    const std::string dense = job_.checkpoint.dir + "/" + CheckpointDirName(reg_.resume_step) +
                              "/" + kDenseCheckpointFile;
    return [dense, step = reg_.resume_step](Trainer* trainer) -> Status {
      TANDEM_ASSIGN_OR_RETURN(DenseState state, ReadDenseState(dense));
      if (state.step != step)
        return Status::DataLoss(dense + " holds step " + std::to_string(state.step) +
                                ", the checkpoint is of step " + std::to_string(step));
      TANDEM_RETURN_IF_ERROR(RestoreDenseState(state, trainer));
      TLOG_INFO("dense state of step {} restored from {}", step, dense);
      return Status::Ok();
    };
  }

  // Rank 0 finishes checkpoints off the training thread, with a client of its own.
  std::function<Status(int64_t, const Trainer&, bool)> StartCheckpointer() {
    PsClientOptions cpo = po_;
    // Checkpoints go on through a recovery; a part that waits for space gives way to the next
    // checkpoint (called on the checkpointer's thread, once checkpointer_ is set).
    cpo.interrupted = [this] { return checkpointer_->Superseded(); };
    cpo.on_overloaded = [this] { checkpointer_->NoteHeld(); };
    checkpoint_ps_ = std::make_unique<PsClient>(ctx_.context, self_, cpo);
    BackgroundCheckpointerOptions co;
    co.job = &job_;
    UseClients(checkpoint_ps_.get(), chief_.get(), determinism_class_, &co);
    checkpointer_ = std::make_unique<BackgroundCheckpointer>(co);
    return [this](int64_t step, const Trainer& trainer, bool final) {
      const double waited = checkpointer_->Begin(step, SnapshotDenseState(trainer, step), final);
      if (waited > 0.01)
        TLOG_INFO("checkpoint of step {} waited {:.3f} s for the previous one to be written", step,
                  waited);
      return Status::Ok();
    };
  }

  void ReportProgress(const LoopProgress& p) {
    log::SetStep(p.step);
    gauges_->step.store(p.step);
    gauges_->samples_per_sec.store(p.samples_per_sec / world_);
    gauges_->generation.store(chief_->generation());
    progress_.step = p.step;
    // The chief sums its members' rates: report this worker's share of the global rate.
    progress_.samples_per_sec = p.samples_per_sec / world_;
    progress_.state = p.evaluating ? MemberState::kEvaluating : MemberState::kTraining;
    progress_.loss = p.loss;
    progress_.auc = p.auc;
    progress_.logloss = p.logloss;
    progress_.teacher_auc = p.teacher_auc;
    progress_.bad_lines = p.bad_lines;
    chief_->SetProgress(progress_);
  }

  // After the loop: the final checkpoint, then what the job is told; the exit status.
  int Finish(const StatusOr<TrainingResult>& result) {
    if (checkpointer_ && result.ok()) {
      // The last checkpoint is committed before the result is reported: the job ends only then.
      Status final_checkpoint = checkpointer_->Finish(
          std::chrono::milliseconds(std::max<int64_t>(60000, job_.collective.timeout_ms)),
          [this] { return stop_signal_.load() || chief_->stop_requested(); });
      // Stopped while a full disk held it: the job stops, to resume from the last committed one.
      if (final_checkpoint.IsCancelled()) return StoppedWhileRecovering(final_checkpoint);
      if (!final_checkpoint.ok()) return ReportFailure(final_checkpoint, kExitRuntimeFailure);
    }
    if (!result.ok() && result.status().code() == StatusCode::kAborted && !chief_->fenced()) {
      // A shard may tell a replaced worker so (STALE) a moment before the chief's next heartbeat
      // reply does: ask the chief now, so that a zombie exits 75 (fenced), not 1 (restart me).
      chief_->HeartbeatNow(std::chrono::milliseconds(2000)).IgnoreError();
    }
    if (chief_->fenced()) return daemon::ExitWhenFenced(chief_.get(), config::Role::kWorker, rank_);
    if (!result.ok() && result.status().IsCancelled() &&
        (stop_signal_.load() || chief_->stop_requested()))
      return StoppedWhileRecovering(result.status());
    if (!result.ok()) return ReportFailure(result.status(), ExitFor(result.status()));
    return ReportResult(*result);
  }

  int StoppedWhileRecovering(const Status& why) {
    if (chief_->job_state() == JobState::kFailed) {
      // Rolled back from its last checkpoint by restarting every process (the units restart
      // what exits non-zero): this worker must come back too.
      TLOG_WARN("the job failed while this worker waited to recover: exiting {} to be restarted",
                static_cast<int>(kExitRuntimeFailure));
      chief_->StopHeartbeats();
      return kExitRuntimeFailure;
    }
    // A stop while the group waited to recover: the job is stopping, this worker did not fail.
    TLOG_INFO("{}", why.ToString());
    progress_.state = MemberState::kStopped;
    chief_->SetProgress(progress_);
    chief_->HeartbeatNow(std::chrono::milliseconds(2000)).IgnoreError();
    chief_->StopHeartbeats();
    chief_->Leave(std::chrono::milliseconds(200)).IgnoreError();
    return kExitOk;
  }

  int ReportResult(const TrainingResult& result) {
    progress_.step = result.steps_done - 1;
    progress_.auc = result.auc;
    progress_.logloss = result.logloss;
    progress_.teacher_auc = result.teacher_auc;
    progress_.loss = result.last_loss;
    progress_.samples_per_sec = result.samples_per_sec / world_;
    progress_.model_checksum = result.model_checksum;
    progress_.bad_lines = result.bad_lines;
    progress_.state = result.completed ? MemberState::kDone : MemberState::kStopped;
    if (rank_ == 0 && metrics_) progress_.detail = "metrics in " + metrics_->path();
    chief_->SetProgress(progress_);
    Status told = chief_->HeartbeatNow(std::chrono::milliseconds(5000));
    if (!told.ok()) TLOG_WARN("could not tell the chief the result: {}", told.ToString());
    if (result.completed)
      TLOG_INFO("done: {} steps, {:.0f} samples/s, auc {:.5f}, logloss {:.5f}, model_checksum {}",
                result.steps_done, result.samples_per_sec, result.auc, result.logloss,
                result.model_checksum.empty() ? "(rank 0)" : result.model_checksum);
    else
      TLOG_INFO("stopped after step {}", result.steps_done - 1);
    chief_->StopHeartbeats();
    chief_->Leave(std::chrono::milliseconds(200)).IgnoreError();
    return kExitOk;
  }

  // Joins the signal thread once the members declared after it are gone.
  struct ThreadJoiner {
    std::atomic<bool>* finished;
    std::thread* thread;
    ~ThreadJoiner() {
      finished->store(true);
      if (thread->joinable()) thread->join();
    }
  };

  const RoleContext& ctx_;
  const config::JobConfig& job_;
  WorkerGauges* const gauges_;
  const int rank_;
  const int world_;
  std::string determinism_class_;
  Registration reg_;
  std::unique_ptr<ChiefClient> chief_;
  int64_t start_step_ = 0;
  bool rejoin_ = false;
  std::unique_ptr<ReplicaGroup> group_;
  std::atomic<bool> stop_signal_{false}, finished_{false};
  std::thread signals_;
  ThreadJoiner join_signals_{&finished_, &signals_};
  Progress progress_;
  wire::Identity self_;
  PsClientOptions po_;
  std::unique_ptr<PsClient> ps_, prefetch_ps_;
  std::unique_ptr<collective::ChiefStore> store_;
  std::unique_ptr<device::Backend> backend_;
  std::unique_ptr<metrics::MetricsWriter> metrics_;
  std::unique_ptr<metrics::TensorBoardWriter> tensorboard_;
  std::unique_ptr<PsClient> checkpoint_ps_;
  std::unique_ptr<BackgroundCheckpointer> checkpointer_;
};

}  // namespace

int WorkerDaemon::Run(const RoleContext& ctx) { return WorkerRun(ctx, &gauges_).Run(); }

std::vector<wire::LaneOptions> WorkerDaemon::Lanes(const config::JobConfig&) const {
  return WorkerLanes();
}

std::optional<int> WorkerDaemon::Prepare(const RoleContext& ctx) {
  RegisterWorkerService(ctx.server);
  return std::nullopt;
}

void WorkerDaemon::Started(const RoleContext& ctx, metrics::Registry* registry) {
  // Only a GPU worker opens the CUDA plugin (and its ~90 MiB of cuBLASLt); `tandem --version`
  // shows the devices on any host.
  if (ctx.job->train.device == "cuda") TLOG_INFO("devices: {}", device::ProbeDevices().ToString());
  AddWorkerMetrics(registry, &gauges_);
}

int RunWorker(const daemon::DaemonArgs& args, const std::optional<std::string>& tf_config) {
  WorkerDaemon role;
  return daemon::RunDaemon(args, tf_config, &role);
}

}  // namespace tandem::worker
