// `tandem worker`: join the job, wait for the whole cluster, connect to the shards and the other
// replicas, train, report the result to the chief and exit.
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/all_reduce_group.h"
#include "cli/background_checkpointer.h"
#include "cli/daemon_metrics.h"
#include "cli/member.h"
#include "cli/replica_group.h"
#include "cli/roles.h"
#include "common/checkpoint_layout.h"
#include "common/determinism_class.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "common/metrics/metrics_writer.h"
#include "common/metrics/tensorboard_writer.h"
#include "common/ps_client.h"
#include "worker/collective/chief_store.h"
#include "worker/dense_state.h"
#include "worker/device/backend_factory.h"
#include "worker/device/cpu/blas_kernels.h"
#include "worker/device/cpu/cpu_backend.h"
#include "worker/training_loop.h"

namespace tandem::cli {
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

int RunWorkerRole(const RoleContext& ctx) {
  const auto& job = *ctx.job;
  const int rank = ctx.index;
  const int world = static_cast<int>(job.cluster.workers.size());
  if (job.cluster.chief.at(0).ends_with(":0")) {
    TLOG_ERROR(
        "cluster.chief has port 0: a worker needs the chief's address (tandem local "
        "starts the chief first and passes it on)");
    return kExitInvalid;
  }
  int exit_status = kExitOk;
  Registration reg;
  const std::string determinism_class =
      DeterminismClass(static_cast<int>(job.train.threads), device::CpuBackend::BlasCoreName(),
                       GpuDeterminismClass(job));
  TLOG_INFO("openblas kernels: {}", device::BlasKernelsDescription());
  auto chief = JoinJob(ctx, wire::Role::WORKER, determinism_class, &exit_status, &reg);
  if (!chief) return exit_status;
  const int64_t start_step = reg.resume_step + 1;
  const bool rejoin = reg.joins_running_job && world > 1;
  if (rejoin) TLOG_INFO("replacing a worker lost while the job trained: rolling forward");

  // Roll-forward recovery (PROTOCOLS §8, §11): the group across losses.
  ReplicaGroup group(&job, chief.get());

  // SIGTERM/SIGINT stop the whole job: the vote rides in the next step's all-reduce and the
  // chief tells everyone else. An op or a shard that holds the step up past kStopGrace (a
  // second signal: at once) is abandoned (ReplicaGroup::Watch).
  std::atomic<bool> stop_signal{false}, finished{false};
  std::thread signals([&] {
    while (!finished.load()) {
      int sig = 0;
      if (!WaitStopSignal(ctx.stop_signals, std::chrono::milliseconds(100), &sig)) {
        group.Watch();
        continue;
      }
      const bool again = stop_signal.exchange(true);
      TLOG_INFO("received {}{}", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                again ? " again: abandoning what the stop waits for"
                      : ": asking the chief to stop the job");
      group.NoteStop(again);
      group.Watch();
      if (!again)
        chief->StopJob("SIGTERM to worker:" + std::to_string(rank)).status().IgnoreError();
    }
  });
  struct JoinSignals {
    std::atomic<bool>* finished;
    std::thread* thread;
    ~JoinSignals() {
      finished->store(true);
      thread->join();
    }
  } join_signals{&finished, &signals};

  Progress progress;
  progress.state = "waiting";
  chief->SetProgress(progress);
  auto report_failure = [&](const Status& s, int status) {
    TLOG_ERROR("{}", s.ToString());
    progress.state = "failed";
    progress.detail = "worker:" + std::to_string(rank) + ": " + s.ToString();
    chief->SetProgress(progress);
    chief->HeartbeatNow(std::chrono::milliseconds(2000)).IgnoreError();
    return status;
  };

  auto view = chief->AwaitComplete(std::chrono::seconds(job.recovery.max_wait_s),
                                   [&] { return StopSignalSeen(ctx.stop_signals); });
  if (view.status().IsCancelled()) {
    TLOG_INFO("{}: stopping", view.status().message());
    return kExitOk;
  }
  if (!view.ok()) return report_failure(view.status().WithContext("waiting for the cluster"), 1);
  const wire::Identity self = chief->identity();
  PsClientOptions po;
  for (const MemberView* m : view->Of("ps")) po.shards.push_back(m->address);
  po.dims.assign(static_cast<size_t>(job.data.num_categorical),
                 static_cast<uint32_t>(job.model.embedding_dim));
  po.timeout = std::chrono::milliseconds(std::max<int64_t>(120000, job.recovery.max_wait_s * 1000));
  // Validated with the config (OneOf), so the parse cannot fail here.
  if (auto precision = ParseWirePrecision(job.ps.wire_precision); precision.ok())
    po.wire_precision = *precision;
  if (world > 1)
    po.interrupted = [&] { return group.Interrupted(); };
  else
    po.interrupted = [&] { return group.StopOverdue(); };
  PsClient ps(ctx.context, self, po);
  std::unique_ptr<PsClient> prefetch_ps;
  if (job.train.embedding_staleness >= 1)
    prefetch_ps = std::make_unique<PsClient>(ctx.context, self, po);

  collective::ChiefStore store(chief.get());
  auto backend = device::CreateBackend(job.train);
  if (!backend.ok()) return report_failure(backend.status(), kExitInvalid);
  auto joined = JoinAllReduceGroup(job, rank, world, ctx.host, view->generation, &store);
  if (!joined.ok())
    return report_failure(joined.status().WithContext("joining the other workers"), 1);
  group.Adopt(std::move(joined).value(), view->generation);

  std::unique_ptr<metrics::MetricsWriter> metrics;
  std::unique_ptr<metrics::TensorBoardWriter> tensorboard;
  if (rank == 0) {
    const std::string path = job.output.dir + "/metrics.jsonl";
    std::error_code ec;
    std::filesystem::create_directories(job.output.dir, ec);
    if (start_step == 0 && !rejoin) MoveAsideOldMetrics(path);  // a resumed job appends
    auto m = metrics::MetricsWriter::Open(path);
    if (!m.ok() && m.status().IsFailedPrecondition()) {
      // It ends with a final line: a run that finished after the checkpoint this one resumes
      // from. Its lines stay in the moved-aside file.
      MoveAsideOldMetrics(path);
      m = metrics::MetricsWriter::Open(path);
    }
    if (!m.ok()) return report_failure(m.status(), 1);
    metrics = std::move(m).value();
    auto tb = metrics::TensorBoardWriter::Open(job.output.dir + "/tensorboard");
    if (!tb.ok()) return report_failure(tb.status(), 1);
    tensorboard = std::move(tb).value();
  }

  progress.state = "training";
  chief->SetProgress(progress);
  worker::TrainingLoopOptions o;
  o.job = &job;
  o.rank = rank;
  o.world = world;
  o.timeline = self.timeline;
  o.embeddings = &ps;
  o.prefetch_embeddings = prefetch_ps.get();
  o.collective = group.get();
  o.backend = backend->get();
  o.start_step = start_step;
  o.rejoin = rejoin;
  if (world > 1) {
    o.recover = [&] {
      if (ctx.worker_gauges != nullptr) ctx.worker_gauges->recoveries.fetch_add(1);
      return group.Recover([&](const std::string& state) {
        progress.state = state;
        chief->SetProgress(progress);
      });
    };
  }
  if (reg.resume_step >= 0) {
    const std::string dense =
        job.checkpoint.dir + "/" + CheckpointDirName(reg.resume_step) + "/" + kDenseCheckpointFile;
    o.restore = [dense, step = reg.resume_step](worker::Trainer* trainer) -> Status {
      TANDEM_ASSIGN_OR_RETURN(worker::DenseState state, worker::ReadDenseState(dense));
      if (state.step != step)
        return Status::DataLoss(dense + " holds step " + std::to_string(state.step) +
                                ", the checkpoint is of step " + std::to_string(step));
      TANDEM_RETURN_IF_ERROR(worker::RestoreDenseState(state, trainer));
      TLOG_INFO("dense state of step {} restored from {}", step, dense);
      return Status::Ok();
    };
  }
  // Rank 0 finishes checkpoints off the training thread, with a client of its own.
  std::unique_ptr<PsClient> checkpoint_ps;
  std::unique_ptr<BackgroundCheckpointer> checkpointer;
  if (rank == 0) {
    PsClientOptions cpo = po;
    cpo.interrupted = nullptr;  // checkpoints go on through a recovery
    checkpoint_ps = std::make_unique<PsClient>(ctx.context, self, cpo);
    BackgroundCheckpointerOptions co;
    co.job = &job;
    co.ps = checkpoint_ps.get();
    co.chief = chief.get();
    co.determinism_class = determinism_class;
    checkpointer = std::make_unique<BackgroundCheckpointer>(co);
    o.checkpoint = [&](int64_t step, const worker::Trainer& trainer) {
      const double waited = checkpointer->Begin(step, worker::SnapshotDenseState(trainer, step));
      if (waited > 0.01)
        TLOG_INFO("checkpoint of step {} waited {:.3f} s for the previous one to be written", step,
                  waited);
      return Status::Ok();
    };
  }
  o.metrics = metrics.get();
  o.tensorboard = tensorboard.get();
  if (rank == 0) o.sparse_checksum = [&](int64_t last) { return ps.Checksum(last); };
  if (rank == 0) o.dense_state_path = job.output.dir + "/model/dense.ckpt";  // creates model/
  o.on_progress = [&](const worker::LoopProgress& p) {
    log::SetStep(p.step);
    if (ctx.worker_gauges != nullptr) {
      ctx.worker_gauges->step.store(p.step);
      ctx.worker_gauges->samples_per_sec.store(p.samples_per_sec / world);
      ctx.worker_gauges->generation.store(chief->generation());
    }
    progress.step = p.step;
    // The chief sums its members' rates: report this worker's share of the global rate.
    progress.samples_per_sec = p.samples_per_sec / world;
    progress.state = p.evaluating ? "evaluating" : "training";
    progress.loss = p.loss;
    progress.auc = p.auc;
    progress.logloss = p.logloss;
    progress.teacher_auc = p.teacher_auc;
    chief->SetProgress(progress);
  };
  o.stop_requested = [&] {
    return stop_signal.load() || chief->stop_requested() || chief->fenced();
  };
  TLOG_INFO("training steps {}..{} of {} (k = {}, batch {} per worker, {} workers, {} shards)", 0,
            job.train.steps - 1, job.train.steps, job.train.embedding_staleness,
            job.train.batch_size, world, po.shards.size());
  auto result = worker::RunTrainingLoop(o);
  if (checkpointer && result.ok()) {
    // The last checkpoint is committed before the result is reported: the job ends only then.
    Status final_checkpoint = checkpointer->Finish(
        std::chrono::milliseconds(std::max<int64_t>(60000, job.collective.timeout_ms)));
    if (!final_checkpoint.ok()) return report_failure(final_checkpoint, kExitRuntimeFailure);
  }
  if (!result.ok() && result.status().code() == StatusCode::kAborted && !chief->fenced()) {
    // A shard may tell a replaced worker so (STALE) a moment before the chief's next heartbeat
    // reply does: ask the chief now, so that a zombie exits 75 (fenced), not 1 (restart me).
    chief->HeartbeatNow(std::chrono::milliseconds(2000)).IgnoreError();
  }
  if (chief->fenced()) return ExitWhenFenced(chief.get(), "worker:" + std::to_string(rank));
  if (!result.ok() && result.status().IsCancelled() &&
      (stop_signal.load() || chief->stop_requested())) {
    if (chief->job_state() == "failed") {
      // Rolled back from its last checkpoint by restarting every process (the units restart
      // what exits non-zero): this worker must come back too.
      TLOG_WARN("the job failed while this worker waited to recover: exiting {} to be restarted",
                static_cast<int>(kExitRuntimeFailure));
      chief->StopHeartbeats();
      return kExitRuntimeFailure;
    }
    // A stop while the group waited to recover: the job is stopping, this worker did not fail.
    TLOG_INFO("{}", result.status().ToString());
    progress.state = "stopped";
    chief->SetProgress(progress);
    chief->HeartbeatNow(std::chrono::milliseconds(2000)).IgnoreError();
    chief->StopHeartbeats();
    return kExitOk;
  }
  if (!result.ok()) return report_failure(result.status(), ExitFor(result.status()));
  progress.step = result->steps_done - 1;
  progress.auc = result->auc;
  progress.logloss = result->logloss;
  progress.teacher_auc = result->teacher_auc;
  progress.loss = result->last_loss;
  progress.samples_per_sec = result->samples_per_sec / world;
  progress.model_checksum = result->model_checksum;
  progress.state = result->completed ? "done" : "stopped";
  if (rank == 0 && metrics) progress.detail = "metrics in " + metrics->path();
  chief->SetProgress(progress);
  Status told = chief->HeartbeatNow(std::chrono::milliseconds(5000));
  if (!told.ok()) TLOG_WARN("could not tell the chief the result: {}", told.ToString());
  if (result->completed)
    TLOG_INFO("done: {} steps, {:.0f} samples/s, auc {:.5f}, logloss {:.5f}, model_checksum {}",
              result->steps_done, result->samples_per_sec, result->auc, result->logloss,
              result->model_checksum.empty() ? "(rank 0)" : result->model_checksum);
  else
    TLOG_INFO("stopped after step {}", result->steps_done - 1);
  chief->StopHeartbeats();
  return kExitOk;
}

}  // namespace tandem::cli
