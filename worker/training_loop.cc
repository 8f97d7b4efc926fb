#include "worker/training_loop.h"

#include <chrono>
#include <deque>
#include <thread>
#include <utility>

#include "common/log.h"
#include "common/sync.h"
#include "worker/collective/collective.h"
#include "worker/data/pipeline.h"
#include "worker/data/record_source.h"
#include "worker/dense_state.h"
#include "worker/evaluator.h"
#include "worker/roll_forward/replica_resync.h"
#include "worker/trainer.h"

namespace tandem::worker {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A batch with its rows, as the prefetch thread hands it over.
struct Prefetched {
  Status status;
  std::unique_ptr<data::Batch> batch;
  BatchRows rows;
};

// k >= 1 (DESIGN §4): pulls the rows of up to k batches ahead of the step being computed, on
// its own thread and its own client, so the pull of step s+k overlaps the compute of step s.
class Prefetcher {
 public:
  Prefetcher(data::Pipeline* pipeline, EmbeddingClient* client, int depth, int64_t last_step)
      : pipeline_(pipeline), client_(client), depth_(depth), last_step_(last_step) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Prefetcher() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
      cv_.SignalAll();
    }
    pipeline_->Stop();
    thread_.join();
  }

  // A batch with its rows; or, when a pull was cancelled for a recovery and nothing is ready,
  // kCancelled without a batch: the pull is tried again after Resume().
  Prefetched Next() {
    MutexLock lock(&mu_);
    while (ready_.empty() && !cancelled_) cv_.Wait();
    if (ready_.empty()) {
      Prefetched p;
      p.status = Status::Cancelled("prefetch pull cancelled: the chief announced a new generation");
      return p;
    }
    Prefetched p = std::move(ready_.front());
    ready_.pop_front();
    cv_.SignalAll();
    return p;
  }
  // After a recovery: the cancelled pull is tried again.
  void Resume() {
    MutexLock lock(&mu_);
    cancelled_ = false;
    cv_.SignalAll();
  }

 private:
  void Run() {
    for (;;) {
      {
        MutexLock lock(&mu_);
        while (!stop_ && static_cast<int>(ready_.size()) >= depth_) cv_.Wait();
        if (stop_) return;
      }
      Prefetched p;
      auto batch = pipeline_->Next();
      if (!batch.ok()) {
        p.status = batch.status();
      } else {
        p.batch = std::move(batch).value();
        for (;;) {
          p.status = PullBatchRows(client_, p.batch->step, *p.batch, &p.rows);
          if (p.status.code() != StatusCode::kCancelled) break;
          MutexLock lock(&mu_);
          cancelled_ = true;
          cv_.SignalAll();
          while (!stop_ && cancelled_) cv_.Wait();
          if (stop_) return;
        }
      }
      const bool last = !p.status.ok() || p.batch->step >= last_step_;
      MutexLock lock(&mu_);
      ready_.push_back(std::move(p));
      cv_.SignalAll();
      if (last) return;
    }
  }

  data::Pipeline* const pipeline_;
  EmbeddingClient* const client_;
  const int depth_;
  const int64_t last_step_;
  Mutex mu_;
  CondVar cv_{&mu_};
  bool stop_ GUARDED_BY(mu_) = false;
  bool cancelled_ GUARDED_BY(mu_) = false;
  std::deque<Prefetched> ready_ GUARDED_BY(mu_);
  std::thread thread_;
};

float AsScalar(double v) { return static_cast<float>(v); }

}  // namespace

StatusOr<TrainingResult> RunTrainingLoop(const TrainingLoopOptions& o) {
  const auto& job = *o.job;
  const int64_t total = job.train.steps;
  const int64_t k = job.train.embedding_staleness;
  const int64_t global_batch = int64_t{o.world} * job.train.batch_size;
  TrainingResult result;
  result.steps_done = o.start_step;

  TrainerOptions to;
  to.job = o.job;
  to.rank = o.rank;
  to.world = o.world;
  to.embeddings = o.embeddings;
  to.collective = o.collective;
  to.backend = o.backend;
  to.retain_last_step = static_cast<bool>(o.recover) && o.collective != nullptr;
  TANDEM_ASSIGN_OR_RETURN(auto trainer, Trainer::Create(to));
  TANDEM_ASSIGN_OR_RETURN(auto evaluator, Evaluator::Create(job, o.rank, o.world));

  auto mark_recovery = [&](int64_t step) {
    o.embeddings->MarkRecoveryStep(step);
    if (o.prefetch_embeddings) o.prefetch_embeddings->MarkRecoveryStep(step);
  };
  int64_t start_step = o.start_step;
  if (o.rejoin) {
    if (!o.recover || o.collective == nullptr)
      return Status::InvalidArgument("a replacement worker needs an all-reduce group");
    ResyncInput in;
    in.replacement = true;
    auto rs = ResyncReplicas(o.collective, trainer.get(), in);
    while (!rs.ok() && rs.status().IsUnavailable()) {  // another loss meanwhile
      TLOG_WARN("{}", rs.status().ToString());
      TANDEM_RETURN_IF_ERROR(o.recover());
      rs = ResyncReplicas(o.collective, trainer.get(), in);
    }
    TANDEM_RETURN_IF_ERROR(rs.status());
    start_step = rs->next_step;
    mark_recovery(start_step);
    result.recoveries = 1;
    TLOG_INFO("joined the running job: training from step {} (roll forward)", start_step);
  } else if (o.restore) {
    TANDEM_RETURN_IF_ERROR(o.restore(trainer.get()));
  }
  result.steps_done = start_step;

  // A survivor's side of a roll-forward recovery: `completed` is the last step whose update it
  // applied. On return the group is rebuilt, every replica holds the dense state of the step
  // before the one returned, and that step is trained next (an undone step is redone here).
  Prefetcher* active_prefetcher = nullptr;  // k >= 1, while it runs: resumed after a recovery
  auto roll_forward = [&](int64_t completed, bool pushes_acknowledged) -> StatusOr<int64_t> {
    for (;;) {
      TANDEM_RETURN_IF_ERROR(o.recover());
      ResyncInput in;
      in.completed = completed;
      // Steps restored from a checkpoint are applied everywhere.
      in.pushes_acknowledged = pushes_acknowledged || completed < start_step;
      auto rs = ResyncReplicas(o.collective, trainer.get(), in);
      if (!rs.ok()) {
        if (!rs.status().IsUnavailable()) return rs.status();
        TLOG_WARN("{}: recovering again", rs.status().ToString());
        continue;
      }
      ++result.recoveries;
      const int64_t next = rs->next_step;
      // Undone now, or before a loss that interrupted its redo (then completed = next - 1).
      const bool redo = rs->rolled_back || trainer->redo_pending();
      if (redo) {
        auto redone = trainer->RedoLastStep();
        if (!redone.ok()) {
          if (!trainer->collective_failed()) return redone.status();
          TLOG_WARN("{}: recovering again", redone.status().ToString());
          completed = next - 1;  // the undone step is redone after the next resync
          pushes_acknowledged = true;
          continue;
        }
        TLOG_INFO("step {} redone: its all-reduce was taken again", next);
      }
      const int64_t go_on = redo ? next + 1 : next;
      mark_recovery(go_on);
      if (active_prefetcher) active_prefetcher->Resume();
      // An undone step counts as completed again once redone.
      if (go_on != completed + 1 + (redo && !rs->rolled_back ? 1 : 0))
        return Status::Internal("resync left step " + std::to_string(completed + 1) + " for step " +
                                std::to_string(go_on));
      return go_on;
    }
  };
  auto recoverable = [&](const Status& s) {
    return o.recover && o.collective != nullptr &&
           (s.code() == StatusCode::kCancelled || trainer->collective_failed());
  };
  // The evaluator's collective calls fail with the group's codes.
  auto eval_recoverable = [&](const Status& s) {
    const StatusCode c = s.code();
    return o.recover && o.collective != nullptr &&
           (c == StatusCode::kCancelled || c == StatusCode::kUnavailable ||
            c == StatusCode::kDeadlineExceeded || c == StatusCode::kAborted ||
            c == StatusCode::kFailedPrecondition);
  };

  LoopProgress progress;
  progress.step = start_step - 1;
  auto report = [&] {
    if (o.on_progress) o.on_progress(progress);
  };
  auto evaluate = [&](int64_t next_step) -> Status {
    if (!evaluator->enabled()) return Status::Ok();
    progress.evaluating = true;
    report();
    auto t0 = Clock::now();
    TANDEM_ASSIGN_OR_RETURN(EvalResult e, evaluator->Run(trainer.get(), o.collective, next_step));
    progress.evaluating = false;
    progress.auc = e.auc;
    progress.logloss = e.logloss;
    progress.teacher_auc = e.teacher_auc;
    report();
    TLOG_INFO("eval after step {}: auc {:.5f} logloss {:.5f}{} ({} samples, {:.2f} s)",
              next_step - 1, e.auc, e.logloss,
              std::isnan(e.teacher_auc) ? std::string()
                                        : fmt::format(" (teacher auc {:.5f})", e.teacher_auc),
              e.samples, Since(t0));
    if (o.rank == 0 && next_step < total) {
      if (o.metrics)
        TANDEM_RETURN_IF_ERROR(o.metrics->WriteEval({next_step - 1, o.timeline, e.auc, e.logloss}));
      if (o.tensorboard) {
        metrics::Scalar s[] = {{metrics::kTagAuc, AsScalar(e.auc)},
                               {metrics::kTagLogloss, AsScalar(e.logloss)}};
        TANDEM_RETURN_IF_ERROR(o.tensorboard->WriteScalars(next_step - 1, s));
      }
    }
    return Status::Ok();
  };

  if (start_step < total) {
    TANDEM_ASSIGN_OR_RETURN(auto source, data::OpenSource(job.data, job.train.seed, false));
    data::PipelineOptions po;
    po.world = o.world;
    po.rank = o.rank;
    po.batch = static_cast<int>(job.train.batch_size);
    po.start_step = start_step;
    po.queue_depth = static_cast<int>(4 + k);
    po.max_bad_fraction = job.data.max_bad_fraction;
    po.threads = o.data_threads;
    data::Pipeline pipeline(std::move(source), job.train.seed, po);
    pipeline.Start();
    std::unique_ptr<Prefetcher> prefetcher;
    if (k >= 1) {
      if (o.prefetch_embeddings == nullptr)
        return Status::InvalidArgument("k >= 1 needs a prefetch embedding client");
      prefetcher = std::make_unique<Prefetcher>(&pipeline, o.prefetch_embeddings,
                                                static_cast<int>(k), total - 1);
      active_prefetcher = prefetcher.get();
    }

    metrics::StepTimes window;  // summed since the last logged step
    auto window_t0 = Clock::now();
    const auto run_t0 = Clock::now();
    int64_t window_steps = 0;
    int64_t window_skipped = 0;  // fp16 steps skipped on overflow in the window
    auto last_checkpoint = Clock::now();
    // checkpoint.every_seconds: the step rank 0's clock chose, agreed through the all-reduce of
    // the step before, so every rank announces it to the shards with its push (PROTOCOLS §7,
    // scenario 18: processes whose clocks or rates differ still cut at one step).
    int64_t announced = -1;
    const int64_t every_ckpt = job.checkpoint.every_steps;
    BatchRows rows;
    for (int64_t step = start_step; step < total; ++step) {
      auto t0 = Clock::now();
      std::unique_ptr<data::Batch> batch;
      double pull_wait = 0;
      if (prefetcher) {
        Prefetched p = prefetcher->Next();
        while (p.status.code() == StatusCode::kCancelled && p.batch == nullptr && o.recover) {
          TLOG_WARN("{}: recovering (roll forward)", p.status.ToString());
          TANDEM_ASSIGN_OR_RETURN(const int64_t go_on, roll_forward(step - 1, false));
          if (go_on != step) return Status::Internal("recovery went on from another step");
          p = prefetcher->Next();
        }
        TANDEM_RETURN_IF_ERROR(p.status.WithContext("step " + std::to_string(step)));
        batch = std::move(p.batch);
        rows = std::move(p.rows);
        pull_wait = Since(t0);
      } else {
        auto next = pipeline.Next();
        TANDEM_RETURN_IF_ERROR(next.status().WithContext("data of step " + std::to_string(step)));
        batch = std::move(next).value();
      }
      const double data_s = prefetcher ? 0 : Since(t0);
      if (batch->step != step)
        return Status::Internal("the pipeline delivered step " + std::to_string(batch->step) +
                                " for step " + std::to_string(step));
      const bool scheduled = every_ckpt > 0 && (step + 1) % every_ckpt == 0;
      const bool timed = step == announced;
      // Before the push of the step: at k >= 1 the shards hold back later steps' pushes until
      // they have cut this one (PROTOCOLS §3).
      if (scheduled || timed) o.embeddings->MarkCheckpointStep(step);
      const bool vote = o.stop_requested && o.stop_requested();
      const bool checkpoint_vote =
          o.rank == 0 && job.checkpoint.every_seconds > 0 && !timed &&
          Since(last_checkpoint) >= static_cast<double>(job.checkpoint.every_seconds);
      StatusOr<StepStats> st = Status::Internal("not trained");
      bool pulled = prefetcher != nullptr;
      double pull_s = pull_wait;
      for (;;) {
        Status failed = Status::Ok();
        if (!pulled) {
          const auto tp = Clock::now();
          failed = PullBatchRows(o.embeddings, step, *batch, &rows)
                       .WithContext("pull of step " + std::to_string(step));
          pull_s += Since(tp);
          pulled = failed.ok();
        }
        if (failed.ok()) {
          st = trainer->StepWithRows(*batch, rows, vote, checkpoint_vote);
          if (st.ok()) break;
          failed = st.status().WithContext("step " + std::to_string(step));
        }
        if (!recoverable(failed)) return failed;
        TLOG_WARN("{}: recovering (roll forward)", failed.ToString());
        // Every rank's pushes of step - 1 have landed when this step's all-reduce failed (it
        // follows the pull), and also at k = 0 when this step's pull was answered by every
        // shard (a shard answers it only once it applied step - 1): the lost rank's pushes of
        // this step may then reach some shards already, and undoing step - 1 would ask them
        // for a version they have passed.
        const bool pushes_landed =
            trainer->collective_failed() || (pulled && job.train.embedding_staleness == 0 &&
                                             o.embeddings->LastPullAskedEveryShard());
        TANDEM_ASSIGN_OR_RETURN(const int64_t go_on, roll_forward(step - 1, pushes_landed));
        if (go_on != step) return Status::Internal("recovery went on from another step");
        // The rows are pulled again: a shard may since have applied this step (answered from
        // its pre-images, PROTOCOLS §8), or the pull itself was cut short.
        pulled = prefetcher != nullptr;
      }
      if (!prefetcher) pipeline.Recycle(std::move(batch));
      const double step_s = Since(t0);
      window.data_s += data_s;
      window.pull_s += pull_s;
      window.compute_s += st->compute_s + st->update_s;
      window.allreduce_s += st->allreduce_s;
      window.push_s += st->push_s;
      if (st->skipped) ++window_skipped;
      window.wait_s += std::max(0.0, step_s - data_s - pull_s - st->compute_s - st->update_s -
                                         st->allreduce_s - st->push_s);
      ++window_steps;
      result.steps_done = step + 1;
      result.last_loss = st->loss;
      progress.step = step;
      progress.loss = st->loss;
      const bool log_now =
          (step + 1) % job.train.log_every_steps == 0 || step + 1 == total || st->stop_agreed;
      if (log_now) {
        const double elapsed = Since(window_t0);
        progress.samples_per_sec =
            elapsed > 0 ? static_cast<double>(window_steps * global_batch) / elapsed : 0;
        if (o.rank == 0) {
          metrics::StepMetrics m;
          m.step = step;
          m.timeline = o.timeline;
          m.loss = st->loss;
          m.samples_per_sec = progress.samples_per_sec;
          if (trainer->loss_scaler() != nullptr) {
            m.loss_scale = trainer->loss_scaler()->scale();
            m.skipped_steps = window_skipped;
          }
          const double n = static_cast<double>(window_steps);
          m.times = {window.data_s / n,      window.pull_s / n, window.compute_s / n,
                     window.allreduce_s / n, window.push_s / n, window.wait_s / n};
          if (o.metrics) TANDEM_RETURN_IF_ERROR(o.metrics->WriteStep(m));
          if (o.tensorboard) {
            metrics::Scalar s[] = {{metrics::kTagLoss, AsScalar(st->loss)},
                                   {metrics::kTagSamplesPerSec, AsScalar(m.samples_per_sec)}};
            TANDEM_RETURN_IF_ERROR(o.tensorboard->WriteScalars(step, s));
          }
        }
        window = {};
        window_steps = 0;
        window_skipped = 0;
        window_t0 = Clock::now();
      }
      report();
      if (st->checkpoint_agreed) {
        announced = step + 1;
        last_checkpoint = Clock::now();  // the clock restarts at the announcement
      }
      // The last step too, when checkpoints are on: a finished job is then resumable with more
      // train.steps, and starting it again says it has finished instead of redoing steps.
      const bool last = step + 1 == total && (every_ckpt > 0 || job.checkpoint.every_seconds > 0);
      if (o.rank == 0 && o.checkpoint &&
          (scheduled || timed || last || (st->stop_agreed && step + 1 < total))) {
        auto t2 = Clock::now();
        TANDEM_RETURN_IF_ERROR(
            o.checkpoint(step, *trainer).WithContext("checkpoint of step " + std::to_string(step)));
        TLOG_INFO("checkpoint of step {}: training held {:.3f} s{}", step, Since(t2),
                  timed && !scheduled ? " (every_seconds)" : "");
        last_checkpoint = Clock::now();
      }
      if (st->stop_agreed && step + 1 < total) {
        TLOG_INFO("stopping after step {}: the job was asked to stop", step);
        break;
      }
      const int64_t every = job.train.eval_every_steps;
      if (every > 0 && (step + 1) % every == 0 && step + 1 < total)
        if (Status e = evaluate(step + 1); !e.ok()) {
          if (!eval_recoverable(e)) return e;
          // The replacement cannot know that the others were evaluating: this eval is skipped.
          TLOG_WARN("eval after step {} skipped: {}; recovering (roll forward)", step,
                    e.ToString());
          progress.evaluating = false;
          TANDEM_ASSIGN_OR_RETURN(const int64_t go_on, roll_forward(step, true));
          if (go_on != step + 1) return Status::Internal("recovery went on from another step");
        }
    }
    active_prefetcher = nullptr;
    const double run_s = Since(run_t0);
    result.samples_per_sec =
        run_s > 0 ? static_cast<double>((result.steps_done - start_step) * global_batch) / run_s
                  : 0;
  }

  result.completed = result.steps_done >= total;
  result.dense_checksum = trainer->DenseChecksum();
  const auto params = std::as_const(trainer->model()).params();
  result.dense_params.assign(params.begin(), params.end());
  if (o.rank == 0 && !o.dense_state_path.empty())
    TANDEM_RETURN_IF_ERROR(WriteDenseState(o.dense_state_path, result.steps_done - 1, *trainer));
  if (!result.completed) return result;
  for (;;) {
    Status e = evaluate(total);
    if (e.ok()) break;
    if (!eval_recoverable(e)) return e;
    // Every replica is here: the replacement of a worker lost now starts with this eval.
    TLOG_WARN("final eval: {}; recovering (roll forward)", e.ToString());
    TANDEM_ASSIGN_OR_RETURN(const int64_t go_on, roll_forward(total - 1, true));
    if (go_on != total) return Status::Internal("recovery went on from another step");
  }
  result.auc = progress.auc;
  result.logloss = progress.logloss;
  result.teacher_auc = progress.teacher_auc;
  if (o.rank == 0 && o.sparse_checksum) {
    TANDEM_ASSIGN_OR_RETURN(ModelChecksum sum, o.sparse_checksum(total - 1));
    sum.Merge(result.dense_checksum);
    result.model_checksum = sum.Hex();
    if (o.metrics)
      TANDEM_RETURN_IF_ERROR(o.metrics->WriteFinal(
          {result.auc, result.logloss, result.model_checksum, result.teacher_auc, total - 1}));
    if (o.tensorboard) {
      metrics::Scalar s[] = {{metrics::kTagAuc, AsScalar(result.auc)},
                             {metrics::kTagLogloss, AsScalar(result.logloss)}};
      TANDEM_RETURN_IF_ERROR(o.tensorboard->WriteScalars(total - 1, s));
    }
  }
  return result;
}

}  // namespace tandem::worker
