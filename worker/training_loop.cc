#include "worker/training_loop.h"

#include <chrono>
#include <deque>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/sync.h"
#include "worker/bad_line_report.h"
#include "worker/collective/collective.h"
#include "worker/data/pipeline.h"
#include "worker/data/record_source.h"
#include "worker/dense_state.h"
#include "worker/evaluator.h"
#include "worker/output_space.h"
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

// Each label's figures, named; the writers leave them out when there is only one label.
std::vector<metrics::TaskMetrics> TaskFigures(const config::JobConfig& job, const EvalResult& e) {
  std::vector<metrics::TaskMetrics> tasks;
  for (size_t k = 0; k < e.tasks.size() && k < job.data.labels.size(); ++k)
    tasks.push_back(
        {job.data.labels[k], e.tasks[k].auc, e.tasks[k].logloss, e.tasks[k].teacher_auc});
  return tasks;
}

// The first label's auc and logloss under the plain tags, and with several labels each label's
// under TaskTag.
Status WriteEvalScalars(metrics::TensorBoardWriter& tb, int64_t step, double auc, double logloss,
                        const std::vector<metrics::TaskMetrics>& tasks) {
  std::vector<std::string> tags;  // owns what the scalars' string_views point into
  if (tasks.size() >= 2) {
    for (const auto& t : tasks) {
      tags.push_back(metrics::TaskTag(metrics::kTagAuc, t.label));
      tags.push_back(metrics::TaskTag(metrics::kTagLogloss, t.label));
    }
  }
  std::vector<metrics::Scalar> s = {{metrics::kTagAuc, AsScalar(auc)},
                                    {metrics::kTagLogloss, AsScalar(logloss)}};
  for (size_t i = 0; i < tags.size(); ++i) {
    const auto& t = tasks[i / 2];
    s.push_back({tags[i], AsScalar(i % 2 == 0 ? t.auc : t.logloss)});
  }
  return tb.WriteScalars(step, s);
}

// RunTrainingLoop's state and steps. The steps share a trainer, an evaluator, the data pipeline,
// the prefetcher, the timing window of the next metrics line, the checkpoint clock and the
// result so far; as members they need no lambdas capturing them by reference, and each part of
// a step (its batch, its training with the recoveries, its metrics, its checkpoint, its eval)
// is a method of its own.
//
// Thread contract: one thread constructs it, calls Run() once and destroys it, and every
// callback in the options runs on that thread. The other threads are the pipeline's readers
// and, at k >= 1, the Prefetcher's, which uses only the pipeline and prefetch_embeddings. The
// options must outlive the loop.
class TrainingLoop {
 public:
  explicit TrainingLoop(const TrainingLoopOptions& options)
      : o_(options),
        job_(*options.job),
        total_(job_.train.steps),
        k_(job_.train.embedding_staleness),
        global_batch_(int64_t{options.world} * job_.train.batch_size),
        every_ckpt_(job_.checkpoint.every_steps),
        bad_lines_(job_.train.log_every_steps),
        outputs_({.metrics = options.metrics,
                  .tensorboard = options.tensorboard,
                  .waiting_on = options.waiting_on,
                  .stopped = options.stop_requested}),
        start_step_(options.start_step) {
    result_.steps_done = options.start_step;
  }
  TrainingLoop(const TrainingLoop&) = delete;
  TrainingLoop& operator=(const TrainingLoop&) = delete;

  StatusOr<TrainingResult> Run() {
    TANDEM_RETURN_IF_ERROR(Start());
    if (start_step_ < total_) TANDEM_RETURN_IF_ERROR(TrainSteps());
    return Finish();
  }

 private:
  // One step's batch, and what its parts measured of it, from NextBatch on.
  struct StepInput {
    std::unique_ptr<data::Batch> batch;
    Clock::time_point t0;
    double data_s = 0;       // waiting on the pipeline (k = 0)
    double pull_s = 0;       // waiting on the prefetcher (k >= 1), then the step's own pulls
    bool scheduled = false;  // checkpoint.every_steps falls on this step
    bool timed = false;      // the checkpoint.every_seconds step announced earlier
    int64_t bad = 0;         // malformed samples in this worker's slice of the batch
  };

  // Before the first step: a resume restores the dense state, a rejoin learns its first step
  // and the dense state from the survivors.
  Status Start();
  Status Rejoin();
  void MarkRecovery(int64_t step);
  StatusOr<int64_t> RollForward(int64_t completed, bool pushes_acknowledged);
  bool EvalSawEveryPush() const;
  Status RollForwardTo(int64_t completed, bool pushes_acknowledged, int64_t expected_next);
  bool Recoverable(const Status& s) const;
  bool EvalRecoverable(const Status& s) const;
  void Report();
  Status Evaluate(int64_t next_step);
  // The steps. Every rank takes the same branches at a step (the stop and checkpoint votes are
  // agreed in the step's all-reduce), which the collective eval after it relies on.
  Status StartPipeline();
  Status TrainSteps();
  StatusOr<bool> Step(int64_t step);
  Status NextBatch(int64_t step, StepInput* in);
  StatusOr<StepStats> TrainStep(int64_t step, StepInput* in, bool vote, bool checkpoint_vote);
  Status RecordStep(int64_t step, const StepInput& in, const StepStats& st);
  Status WriteStepMetrics(int64_t step, const StepStats& st);
  void ReportBadLines(int64_t step);
  void FinishBadLines();
  void SaveBadLines();
  Status HandleCheckpoint(int64_t step, const StepInput& in, const StepStats& st);
  Status PeriodicEval(int64_t step);
  // After the last step or an agreed stop: the result, the dense state file, and when
  // train.steps was reached the final eval and model_checksum.
  StatusOr<TrainingResult> Finish();
  Status FinalEval();
  Status WriteFinal();

  const TrainingLoopOptions& o_;
  const config::JobConfig& job_;
  const int64_t total_;  // train.steps
  const int64_t k_;      // train.embedding_staleness
  const int64_t global_batch_;
  const int64_t every_ckpt_;  // checkpoint.every_steps
  BadLineReporter bad_lines_;
  OutputSpace outputs_;  // rank 0's metrics, events and dense state on a full disk

  // Declared in the order they are built: destroyed prefetcher first (it stops the pipeline it
  // reads from), the trainer last.
  std::unique_ptr<Trainer> trainer_;
  std::unique_ptr<Evaluator> evaluator_;
  std::unique_ptr<data::Pipeline> pipeline_;  // while training
  // k >= 1, while training: resumed after a recovery.
  std::unique_ptr<Prefetcher> prefetcher_;

  int64_t start_step_;  // the first step this process trains (a rejoin learns it)
  TrainingResult result_;
  LoopProgress progress_;
  std::vector<metrics::TaskMetrics> tasks_;  // of the last eval
  BatchRows rows_;                           // kept across steps: the pulls reuse its buffers

  metrics::StepTimes window_;  // summed since the last logged step
  Clock::time_point window_t0_;
  Clock::time_point run_t0_;
  int64_t window_steps_ = 0;
  int64_t window_skipped_ = 0;  // fp16 steps skipped on overflow in the window
  Clock::time_point last_checkpoint_;
  // checkpoint.every_seconds: the step rank 0's clock chose, agreed through the all-reduce of
  // the step before, so every rank announces it to the shards with its push (PROTOCOLS §7,
  // scenario 18: processes whose clocks or rates differ still cut at one step).
  int64_t announced_ = -1;
  // Counted from the batches trained, not from what the pipeline read ahead, so that the count
  // at a step is the same in every run over the same data.
  int64_t bad_count_ = 0;
  std::vector<std::string> bad_reports_;  // the pipeline's, kept once it is gone
};

Status TrainingLoop::Start() {
  TrainerOptions to;
  to.job = o_.job;
  to.rank = o_.rank;
  to.world = o_.world;
  to.embeddings = o_.embeddings;
  to.collective = o_.collective;
  to.backend = o_.backend;
  to.retain_last_step = static_cast<bool>(o_.recover) && o_.collective != nullptr;
  TANDEM_ASSIGN_OR_RETURN(trainer_, Trainer::Create(to));
  TANDEM_ASSIGN_OR_RETURN(evaluator_, Evaluator::Create(job_, o_.rank, o_.world));
  if (o_.rejoin) {
    TANDEM_RETURN_IF_ERROR(Rejoin());
  } else if (o_.restore) {
    TANDEM_RETURN_IF_ERROR(o_.restore(trainer_.get()));
  }
  result_.steps_done = start_step_;
  progress_.step = start_step_ - 1;
  return Status::Ok();
}

Status TrainingLoop::Rejoin() {
  if (!o_.recover || o_.collective == nullptr)
    return Status::InvalidArgument("a replacement worker needs an all-reduce group");
  ResyncInput in;
  in.replacement = true;
  auto rs = ResyncReplicas(o_.collective, trainer_.get(), in);
  while (!rs.ok() && rs.status().IsUnavailable()) {  // another loss meanwhile
    TLOG_WARN("{}", rs.status().ToString());
    TANDEM_RETURN_IF_ERROR(o_.recover());
    rs = ResyncReplicas(o_.collective, trainer_.get(), in);
  }
  TANDEM_RETURN_IF_ERROR(rs.status());
  start_step_ = rs->next_step;
  MarkRecovery(start_step_);
  result_.recoveries = 1;
  TLOG_INFO("joined the running job: training from step {} (roll forward)", start_step_);
  return Status::Ok();
}

void TrainingLoop::MarkRecovery(int64_t step) {
  o_.embeddings->MarkRecoveryStep(step);
  if (o_.prefetch_embeddings) o_.prefetch_embeddings->MarkRecoveryStep(step);
}

// A survivor's side of a roll-forward recovery: `completed` is the last step whose update it
// applied. On return the group is rebuilt, every replica holds the dense state of the step
// before the one returned, and that step is trained next (an undone step is redone here).
StatusOr<int64_t> TrainingLoop::RollForward(int64_t completed, bool pushes_acknowledged) {
  for (;;) {
    TANDEM_RETURN_IF_ERROR(o_.recover());
    ResyncInput in;
    in.completed = completed;
    // Steps restored from a checkpoint are applied everywhere.
    in.pushes_acknowledged = pushes_acknowledged || completed < start_step_;
    auto rs = ResyncReplicas(o_.collective, trainer_.get(), in);
    if (!rs.ok()) {
      if (!rs.status().IsUnavailable()) return rs.status();
      TLOG_WARN("{}: recovering again", rs.status().ToString());
      continue;
    }
    ++result_.recoveries;
    const int64_t next = rs->next_step;
    // Undone now, or before a loss that interrupted its redo (then completed = next - 1).
    const bool redo = rs->rolled_back || trainer_->redo_pending();
    if (redo) {
      auto redone = trainer_->RedoLastStep();
      if (!redone.ok()) {
        if (!trainer_->collective_failed()) return redone.status();
        TLOG_WARN("{}: recovering again", redone.status().ToString());
        completed = next - 1;  // the undone step is redone after the next resync
        pushes_acknowledged = true;
        continue;
      }
      TLOG_INFO("step {} redone: its all-reduce was taken again", next);
    }
    const int64_t go_on = redo ? next + 1 : next;
    MarkRecovery(go_on);
    if (prefetcher_) prefetcher_->Resume();
    // An undone step counts as completed again once redone.
    if (go_on != completed + 1 + (redo && !rs->rolled_back ? 1 : 0))
      return Status::Internal("resync left step " + std::to_string(completed + 1) + " for step " +
                              std::to_string(go_on));
    return go_on;
  }
}

// Every caller knows which step the cluster must go on from; another one is a bug.
Status TrainingLoop::RollForwardTo(int64_t completed, bool pushes_acknowledged,
                                   int64_t expected_next) {
  TANDEM_ASSIGN_OR_RETURN(const int64_t go_on, RollForward(completed, pushes_acknowledged));
  if (go_on != expected_next) return Status::Internal("recovery went on from another step");
  return Status::Ok();
}

bool TrainingLoop::Recoverable(const Status& s) const {
  return o_.recover && o_.collective != nullptr &&
         (s.code() == StatusCode::kCancelled || trainer_->collective_failed());
}

// The evaluator's collective calls fail with the group's codes.
bool TrainingLoop::EvalRecoverable(const Status& s) const {
  const StatusCode c = s.code();
  return o_.recover && o_.collective != nullptr &&
         (c == StatusCode::kCancelled || c == StatusCode::kUnavailable ||
          c == StatusCode::kDeadlineExceeded || c == StatusCode::kAborted ||
          c == StatusCode::kFailedPrecondition);
}

void TrainingLoop::Report() {
  if (o_.on_progress) o_.on_progress(progress_);
}

Status TrainingLoop::Evaluate(int64_t next_step) {
  if (!evaluator_->enabled()) return Status::Ok();
  progress_.evaluating = true;
  Report();
  auto t0 = Clock::now();
  TANDEM_ASSIGN_OR_RETURN(EvalResult e, evaluator_->Run(trainer_.get(), o_.collective, next_step));
  progress_.evaluating = false;
  progress_.auc = e.auc;
  progress_.logloss = e.logloss;
  progress_.teacher_auc = e.teacher_auc;
  tasks_ = TaskFigures(job_, e);
  Report();
  TLOG_INFO("eval after step {}: auc {:.5f} logloss {:.5f}{} ({} samples, {:.2f} s)", next_step - 1,
            e.auc, e.logloss,
            std::isnan(e.teacher_auc) ? std::string()
                                      : fmt::format(" (teacher auc {:.5f})", e.teacher_auc),
            e.samples, Since(t0));
  // The final eval's numbers go out with the model_checksum (WriteFinal).
  if (o_.rank == 0 && next_step < total_) {
    if (o_.metrics) {
      metrics::EvalMetrics m;
      m.step = next_step - 1;
      m.timeline = o_.timeline;
      m.auc = e.auc;
      m.logloss = e.logloss;
      m.bad_lines = bad_count_;
      m.tasks = tasks_;
      TANDEM_RETURN_IF_ERROR(o_.metrics->WriteEval(m));
    }
    if (o_.tensorboard)
      TANDEM_RETURN_IF_ERROR(
          WriteEvalScalars(*o_.tensorboard, next_step - 1, e.auc, e.logloss, tasks_));
    outputs_.Report();
  }
  return Status::Ok();
}

Status TrainingLoop::StartPipeline() {
  TANDEM_ASSIGN_OR_RETURN(auto source, data::OpenSource(job_, job_.train.seed, false));
  data::PipelineOptions po;
  po.world = o_.world;
  po.rank = o_.rank;
  po.batch = static_cast<int>(job_.train.batch_size);
  po.start_step = start_step_;
  po.queue_depth = static_cast<int>(4 + k_);
  po.max_bad_fraction = job_.data.max_bad_fraction;
  po.threads = o_.data_threads;
  pipeline_ = std::make_unique<data::Pipeline>(std::move(source), job_.train.seed, po);
  pipeline_->Start();
  if (!o_.bad_lines_path.empty()) {
    // A stale count would be shown as this run's; the report is advisory, so not fatal.
    Status removed = RemoveBadLinesFile(o_.bad_lines_path);
    if (!removed.ok()) TLOG_WARN("{}", removed.ToString());
  }
  if (k_ >= 1) {
    if (o_.prefetch_embeddings == nullptr)
      return Status::InvalidArgument("k >= 1 needs a prefetch embedding client");
    prefetcher_ = std::make_unique<Prefetcher>(pipeline_.get(), o_.prefetch_embeddings,
                                               static_cast<int>(k_), total_ - 1);
  }
  window_t0_ = Clock::now();
  run_t0_ = Clock::now();
  last_checkpoint_ = Clock::now();
  return Status::Ok();
}

Status TrainingLoop::TrainSteps() {
  TANDEM_RETURN_IF_ERROR(StartPipeline());
  for (int64_t step = start_step_; step < total_; ++step) {
    TANDEM_ASSIGN_OR_RETURN(const bool go_on, Step(step));
    if (!go_on) break;
  }
  const double run_s = Since(run_t0_);
  result_.samples_per_sec =
      run_s > 0 ? static_cast<double>((result_.steps_done - start_step_) * global_batch_) / run_s
                : 0;
  FinishBadLines();
  // The data threads end here, before the final eval: the prefetcher first, as it stops the
  // pipeline it reads from.
  prefetcher_.reset();
  pipeline_.reset();
  return Status::Ok();
}

// Returns whether training goes on (false: the job agreed to stop after `step`).
StatusOr<bool> TrainingLoop::Step(int64_t step) {
  StepInput in;
  in.t0 = Clock::now();
  TANDEM_RETURN_IF_ERROR(NextBatch(step, &in));
  in.scheduled = every_ckpt_ > 0 && (step + 1) % every_ckpt_ == 0;
  in.timed = step == announced_;
  // Before the push of the step: at k >= 1 the shards hold back later steps' pushes until
  // they have cut this one (PROTOCOLS §3).
  if (in.scheduled || in.timed) o_.embeddings->MarkCheckpointStep(step);
  const bool vote = o_.stop_requested && o_.stop_requested();
  const bool checkpoint_vote =
      o_.rank == 0 && job_.checkpoint.every_seconds > 0 && !in.timed &&
      Since(last_checkpoint_) >= static_cast<double>(job_.checkpoint.every_seconds);
  TANDEM_ASSIGN_OR_RETURN(const StepStats st, TrainStep(step, &in, vote, checkpoint_vote));
  if (!prefetcher_) pipeline_->Recycle(std::move(in.batch));
  TANDEM_RETURN_IF_ERROR(RecordStep(step, in, st));
  Report();
  TANDEM_RETURN_IF_ERROR(HandleCheckpoint(step, in, st));
  if (st.stop_agreed && step + 1 < total_) {
    TLOG_INFO("stopping after step {}: the job was asked to stop", step);
    return false;
  }
  TANDEM_RETURN_IF_ERROR(PeriodicEval(step));
  return true;
}

// The batch of `step`, with its rows when the prefetcher pulled them.
Status TrainingLoop::NextBatch(int64_t step, StepInput* in) {
  if (prefetcher_) {
    Prefetched p = prefetcher_->Next();
    while (p.status.code() == StatusCode::kCancelled && p.batch == nullptr && o_.recover) {
      TLOG_WARN("{}: recovering (roll forward)", p.status.ToString());
      TANDEM_RETURN_IF_ERROR(RollForwardTo(step - 1, false, step));
      p = prefetcher_->Next();
    }
    TANDEM_RETURN_IF_ERROR(p.status.WithContext("step " + std::to_string(step)));
    in->batch = std::move(p.batch);
    rows_ = std::move(p.rows);
    in->pull_s = Since(in->t0);
  } else {
    auto next = pipeline_->Next();
    TANDEM_RETURN_IF_ERROR(next.status().WithContext("data of step " + std::to_string(step)));
    in->batch = std::move(next).value();
    in->data_s = Since(in->t0);
  }
  in->bad = in->batch->bad_count;
  if (in->batch->step != step)
    return Status::Internal("the pipeline delivered step " + std::to_string(in->batch->step) +
                            " for step " + std::to_string(step));
  return Status::Ok();
}

// Pulls (k = 0) and trains `step`, rolling forward and trying again while a lost worker is
// recoverable.
StatusOr<StepStats> TrainingLoop::TrainStep(int64_t step, StepInput* in, bool vote,
                                            bool checkpoint_vote) {
  bool pulled = prefetcher_ != nullptr;
  for (;;) {
    Status failed = Status::Ok();
    if (!pulled) {
      const auto tp = Clock::now();
      failed = PullBatchRows(o_.embeddings, step, *in->batch, &rows_)
                   .WithContext("pull of step " + std::to_string(step));
      in->pull_s += Since(tp);
      pulled = failed.ok();
    }
    if (failed.ok()) {
      StatusOr<StepStats> st = trainer_->StepWithRows(*in->batch, rows_, vote, checkpoint_vote);
      if (st.ok()) return st;
      failed = st.status().WithContext("step " + std::to_string(step));
    }
    if (!Recoverable(failed)) return failed;
    TLOG_WARN("{}: recovering (roll forward)", failed.ToString());
    // At k = 0 every rank's pushes of step - 1 have landed when this step's pull was
    // answered by every shard (a shard answers it only once it applied step - 1), and so
    // when this step's all-reduce failed (it follows the pull): the lost rank's pushes of
    // this step may then reach some shards already, and undoing step - 1 would ask them for
    // a version they have passed. At k > 0 the pull of this step waits only for step - 1 - k:
    // the lost rank may have died after its all-reduce of step - 1 and before its push of it
    // landed, and going on without undoing step - 1 would leave the shards waiting for that
    // push forever (a CI hang, 2026-12-06). So step - 1 is undone and recomputed.
    const bool pushes_landed =
        job_.train.embedding_staleness == 0 &&
        (trainer_->collective_failed() || (pulled && o_.embeddings->LastPullAskedEveryShard()));
    TANDEM_RETURN_IF_ERROR(RollForwardTo(step - 1, pushes_landed, step));
    // The rows are pulled again: a shard may since have applied this step (answered from
    // its pre-images, PROTOCOLS §8), or the pull itself was cut short.
    pulled = prefetcher_ != nullptr;
  }
}

Status TrainingLoop::RecordStep(int64_t step, const StepInput& in, const StepStats& st) {
  const double step_s = Since(in.t0);
  window_.data_s += in.data_s;
  window_.pull_s += in.pull_s;
  window_.compute_s += st.compute_s + st.update_s;
  window_.allreduce_s += st.allreduce_s;
  window_.push_s += st.push_s;
  if (st.skipped) ++window_skipped_;
  window_.wait_s += std::max(0.0, step_s - in.data_s - in.pull_s - st.compute_s - st.update_s -
                                      st.allreduce_s - st.push_s);
  ++window_steps_;
  result_.steps_done = step + 1;
  result_.last_loss = st.loss;
  progress_.step = step;
  progress_.loss = st.loss;
  bad_count_ += in.bad;
  result_.bad_lines = bad_count_;
  progress_.bad_lines = bad_count_;
  ReportBadLines(step);
  const bool log_now =
      (step + 1) % job_.train.log_every_steps == 0 || step + 1 == total_ || st.stop_agreed;
  if (!log_now) return Status::Ok();
  const double elapsed = Since(window_t0_);
  progress_.samples_per_sec =
      elapsed > 0 ? static_cast<double>(window_steps_ * global_batch_) / elapsed : 0;
  if (o_.rank == 0) TANDEM_RETURN_IF_ERROR(WriteStepMetrics(step, st));
  window_ = {};
  window_steps_ = 0;
  window_skipped_ = 0;
  window_t0_ = Clock::now();
  return Status::Ok();
}

// Rank 0: the metrics.jsonl line and the TensorBoard scalars of the window ending at `step`.
Status TrainingLoop::WriteStepMetrics(int64_t step, const StepStats& st) {
  metrics::StepMetrics m;
  m.step = step;
  m.timeline = o_.timeline;
  m.loss = st.loss;
  m.samples_per_sec = progress_.samples_per_sec;
  m.bad_lines = bad_count_;
  if (trainer_->loss_scaler() != nullptr) {
    m.loss_scale = trainer_->loss_scaler()->scale();
    m.skipped_steps = window_skipped_;
  }
  const double n = static_cast<double>(window_steps_);
  m.times = {window_.data_s / n,      window_.pull_s / n, window_.compute_s / n,
             window_.allreduce_s / n, window_.push_s / n, window_.wait_s / n};
  if (o_.metrics) TANDEM_RETURN_IF_ERROR(o_.metrics->WriteStep(m));
  if (o_.tensorboard) {
    metrics::Scalar s[] = {{metrics::kTagLoss, AsScalar(st.loss)},
                           {metrics::kTagSamplesPerSec, AsScalar(m.samples_per_sec)}};
    TANDEM_RETURN_IF_ERROR(o_.tensorboard->WriteScalars(step, s));
  }
  outputs_.Report();
  return Status::Ok();
}

// Malformed lines are skipped below data.max_bad_fraction; without these lines nobody would
// learn that a file has some (issue 18).
void TrainingLoop::ReportBadLines(int64_t step) {
  if (bad_count_ <= bad_lines_.logged()) return;  // the pipeline's lock only when there is news
  bad_reports_ = pipeline_->bad_reports();
  if (auto line = bad_lines_.AfterStep(step, bad_count_, bad_reports_)) {
    TLOG_WARN("{}", *line);
    SaveBadLines();
  }
}

void TrainingLoop::FinishBadLines() {
  if (bad_count_ == 0) return;
  bad_reports_ = pipeline_->bad_reports();
  if (auto line = bad_lines_.AtEnd(bad_count_, bad_reports_)) TLOG_WARN("{}", *line);
  SaveBadLines();
}

void TrainingLoop::SaveBadLines() {
  if (o_.bad_lines_path.empty()) return;
  BadLinesFile f{o_.rank, bad_count_, bad_reports_};
  // Training goes on without the file: the log and the heartbeats still carry the count.
  if (Status s = WriteBadLinesFile(o_.bad_lines_path, f); !s.ok()) TLOG_WARN("{}", s.ToString());
}

Status TrainingLoop::HandleCheckpoint(int64_t step, const StepInput& in, const StepStats& st) {
  if (st.checkpoint_agreed) {
    announced_ = step + 1;
    last_checkpoint_ = Clock::now();  // the clock restarts at the announcement
  }
  // The last step too, when checkpoints are on: a finished job is then resumable with more
  // train.steps, and starting it again says it has finished instead of redoing steps.
  const bool last = step + 1 == total_ && (every_ckpt_ > 0 || job_.checkpoint.every_seconds > 0);
  if (o_.rank == 0 && o_.checkpoint &&
      (in.scheduled || in.timed || last || (st.stop_agreed && step + 1 < total_))) {
    auto t2 = Clock::now();
    TANDEM_RETURN_IF_ERROR(o_.checkpoint(step, *trainer_, last || st.stop_agreed)
                               .WithContext("checkpoint of step " + std::to_string(step)));
    TLOG_INFO("checkpoint of step {}: training held {:.3f} s{}", step, Since(t2),
              in.timed && !in.scheduled ? " (every_seconds)" : "");
    last_checkpoint_ = Clock::now();
  }
  return Status::Ok();
}

// train.eval_every_steps; the final eval is Finish's.
Status TrainingLoop::PeriodicEval(int64_t step) {
  const int64_t every = job_.train.eval_every_steps;
  if (every <= 0 || (step + 1) % every != 0 || step + 1 >= total_) return Status::Ok();
  Status e = Evaluate(step + 1);
  if (e.ok()) return e;
  if (!EvalRecoverable(e)) return e;
  // The replacement cannot know that the others were evaluating: this eval is skipped.
  TLOG_WARN("eval after step {} skipped: {}; recovering (roll forward)", step, e.ToString());
  progress_.evaluating = false;
  return RollForwardTo(step, EvalSawEveryPush(), step + 1);
}

// After a failed eval: whether every rank's pushes of the step before it are known to have
// landed. Only at k = 0 and only once the eval's pulls were answered, the last by every shard (a
// shard answers them once it applied that step); otherwise the lost rank may have died between its
// all-reduce and its push, and the step is undone and recomputed (see TrainStep).
bool TrainingLoop::EvalSawEveryPush() const {
  return k_ == 0 && evaluator_->reached_all_reduce() && o_.embeddings->LastPullAskedEveryShard();
}

StatusOr<TrainingResult> TrainingLoop::Finish() {
  result_.completed = result_.steps_done >= total_;
  result_.dense_checksum = trainer_->DenseChecksum();
  const auto params = std::as_const(trainer_->model()).params();
  result_.dense_params.assign(params.begin(), params.end());
  if (o_.rank == 0 && !o_.dense_state_path.empty()) {
    const DenseState state = SnapshotDenseState(*trainer_, result_.steps_done - 1);
    TANDEM_RETURN_IF_ERROR(outputs_.WhenThereIsSpace(
        o_.dense_state_path, [&] { return WriteDenseStateFile(o_.dense_state_path, state); }));
  }
  if (!result_.completed) return std::move(result_);
  TANDEM_RETURN_IF_ERROR(FinalEval());
  result_.auc = progress_.auc;
  result_.logloss = progress_.logloss;
  result_.teacher_auc = progress_.teacher_auc;
  if (o_.rank == 0 && o_.sparse_checksum) TANDEM_RETURN_IF_ERROR(WriteFinal());
  return std::move(result_);
}

Status TrainingLoop::FinalEval() {
  for (;;) {
    Status e = Evaluate(total_);
    if (e.ok()) return e;
    if (!EvalRecoverable(e)) return e;
    // Every replica is here: the replacement of a worker lost now starts with this eval.
    TLOG_WARN("final eval: {}; recovering (roll forward)", e.ToString());
    TANDEM_RETURN_IF_ERROR(RollForwardTo(total_ - 1, EvalSawEveryPush(), total_));
  }
}

// Rank 0: the model_checksum, and the final metrics.jsonl line and scalars that carry it.
Status TrainingLoop::WriteFinal() {
  TANDEM_ASSIGN_OR_RETURN(ModelChecksum sum, o_.sparse_checksum(total_ - 1));
  sum.Merge(result_.dense_checksum);
  result_.model_checksum = sum.Hex();
  if (o_.metrics) {
    metrics::FinalMetrics m;
    m.auc = result_.auc;
    m.logloss = result_.logloss;
    m.model_checksum = result_.model_checksum;
    m.teacher_auc = result_.teacher_auc;
    m.step = total_ - 1;
    m.bad_lines = bad_count_;
    m.tasks = tasks_;
    TANDEM_RETURN_IF_ERROR(outputs_.WhenThereIsSpace(o_.metrics->path() + "'s final line",
                                                     [&] { return o_.metrics->WriteFinal(m); }));
  }
  if (o_.tensorboard)
    TANDEM_RETURN_IF_ERROR(
        WriteEvalScalars(*o_.tensorboard, total_ - 1, result_.auc, result_.logloss, tasks_));
  // Held lines and events are part of the result: the job ends once they are in their files.
  return outputs_.WhenThereIsSpace("the held metrics lines and TensorBoard events",
                                   [&] { return outputs_.WriteHeld(); });
}

}  // namespace

StatusOr<TrainingResult> RunTrainingLoop(const TrainingLoopOptions& options) {
  TrainingLoop loop(options);
  return loop.Run();
}

}  // namespace tandem::worker
