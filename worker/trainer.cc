#include "worker/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <utility>

#include "common/embedding/table_spec.h"
#include "common/failpoint.h"
#include "worker/collective/collective.h"
#include "worker/data/record_source.h"
#include "worker/device/precision.h"

namespace tandem::worker {

namespace {
using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
bool AllFiniteHost(std::span<const float> x) {
  bool finite = true;
  for (float v : x) finite &= std::isfinite(v);
  return finite;
}
}  // namespace

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainerOptions& options) {
  if (options.job == nullptr || options.embeddings == nullptr || options.backend == nullptr)
    return Status::InvalidArgument("trainer: job, embeddings and backend are required");
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world)
    return Status::InvalidArgument("trainer: rank outside [0, world)");
  std::unique_ptr<Trainer> t(new Trainer(options));
  const auto& job = *options.job;
  t->schema_ = data::SchemaFromConfig(job);
  for (const auto& spec : embedding::TableSpecsFromConfig(job)) t->table_dims_.push_back(spec.dim);
  // The model's features: the data's, then (DeepFM, Wide & Deep) one wide feature per data
  // feature that looks the same ids up in its table's wide companion.
  const int data_features = t->schema_.num_categorical;
  for (int f = 0; f < data_features; ++f) {
    t->feature_table_.push_back(t->schema_.table_of(f));
    t->feature_source_.push_back(f);
  }
  if (t->schema_.wide) {
    for (int f = 0; f < data_features; ++f) {
      t->feature_table_.push_back(t->schema_.num_tables() + t->schema_.table_of(f));
      t->feature_source_.push_back(f);
    }
  }
  if (t->table_dims_.size() != static_cast<size_t>(t->schema_.num_pull_tables()))
    return Status::InvalidArgument("trainer: the tables do not match the features");
  model::ModelInputs inputs;
  inputs.num_dense = job.data.num_dense;
  inputs.num_labels = static_cast<int64_t>(job.data.labels.size());
  for (double w : job.train.loss_weights) inputs.loss_weights.push_back(static_cast<float>(w));
  for (size_t f = 0; f < t->feature_table_.size(); ++f) {
    inputs.dims.push_back(static_cast<int64_t>(t->table_dims_[t->feature_table_[f]]));
    inputs.mean.push_back(t->schema_.mean_of(t->feature_source_[f]));
  }
  inputs.num_wide = t->schema_.wide ? data_features : 0;
  TANDEM_ASSIGN_OR_RETURN(t->model_,
                          model::Model::Create(job.model, inputs, job.train.seed, options.backend));
  TANDEM_ASSIGN_OR_RETURN(const device::Precision precision,
                          device::ParsePrecision(job.train.precision));
  t->model_->SetPrecision(precision);
  t->fp16_ = precision == device::Precision::kFp16;
  TANDEM_ASSIGN_OR_RETURN(auto opt_options, model::DenseOptimizerOptionsFromConfig(job.train));
  TANDEM_ASSIGN_OR_RETURN(t->optimizer_,
                          model::DenseOptimizer::Create(opt_options, t->model_->num_params()));
  const size_t tables = t->table_dims_.size();
  const size_t features = t->feature_table_.size();
  t->inverse64_.resize(static_cast<size_t>(data_features));
  t->row_grads_.resize(tables);
  t->feature_grads_.resize(features);
  t->row_grad_ptrs_.resize(features);
  t->features_of_table_.assign(tables, 0);
  for (int table : t->feature_table_) ++t->features_of_table_[table];
  auto& hb = t->host_batch_;
  hb.rows.resize(features);
  hb.num_unique.resize(features);
  hb.offsets.resize(features);
  hb.inverse.resize(features);
  hb.id_weights.assign(features, nullptr);
  return t;
}

Status PullBatchRows(EmbeddingClient* client, int64_t step, const data::Batch& batch,
                     BatchRows* rows) {
  const size_t tables = batch.unique_ids.size();
  std::vector<TableIds> want(tables);
  for (size_t t = 0; t < tables; ++t)
    want[t] = {static_cast<uint32_t>(t), batch.unique_ids[t], /*unique=*/true};
  return client->Pull(step, want, rows);
}

Status Trainer::Describe(const data::Batch& batch, const BatchRows& rows) {
  const size_t tables = table_dims_.size();
  const size_t data_features = inverse64_.size();
  if (batch.unique_ids.size() != tables || rows.size() != tables ||
      batch.inverse.size() != data_features || batch.offsets.size() != data_features ||
      batch.schema.num_labels != schema_.num_labels)
    return Status::InvalidArgument("batch does not match the model's features, tables or labels");
  const auto b = static_cast<size_t>(batch.size);
  auto& hb = host_batch_;
  hb.batch = batch.size;
  hb.dense = batch.dense.data();
  hb.labels = batch.label.data();
  hb.weights = batch.weight.empty() ? nullptr : batch.weight.data();
  for (size_t t = 0; t < tables; ++t) {
    if (rows[t].size() != batch.unique_ids[t].size() * table_dims_[t])
      return Status::InvalidArgument("pulled rows do not match the batch's ids");
  }
  for (size_t f = 0; f < data_features; ++f) {
    const auto t = static_cast<size_t>(schema_.table_of(static_cast<int>(f)));
    const size_t unique = batch.unique_ids[t].size();
    const auto& offsets = batch.offsets[f];
    const size_t lookups = batch.inverse[f].size();
    if (offsets.size() != b + 1 || offsets[0] != 0 || static_cast<size_t>(offsets[b]) != lookups)
      return Status::InvalidArgument("batch bag offsets do not match its ids");
    auto& inv = inverse64_[f];
    inv.resize(lookups);
    for (size_t k = 0; k < lookups; ++k) {
      if (batch.inverse[f][k] >= unique)
        return Status::InvalidArgument("batch inverse index out of range");
      inv[k] = batch.inverse[f][k];
    }
    if (schema_.weighted_of(static_cast<int>(f)) &&
        (batch.id_weights.size() != data_features || batch.id_weights[f].size() != lookups))
      return Status::InvalidArgument("batch id weights do not match its ids");
  }
  for (size_t m = 0; m < feature_table_.size(); ++m) {
    const auto f = static_cast<size_t>(feature_source_[m]);
    const auto t = static_cast<size_t>(feature_table_[m]);
    hb.rows[m] = rows[t].data();
    hb.num_unique[m] = static_cast<int64_t>(batch.unique_ids[t].size());
    hb.offsets[m] = batch.offsets[f].data();
    hb.inverse[m] = inverse64_[f].data();
    if (schema_.weighted_of(static_cast<int>(f))) hb.id_weights[m] = batch.id_weights[f].data();
  }
  return Status::Ok();
}

void Trainer::SumSharedTableGrads() {
  std::vector<bool> started(row_grads_.size(), false);
  for (size_t f = 0; f < feature_grads_.size(); ++f) {
    const auto t = static_cast<size_t>(feature_table_[f]);
    if (features_of_table_[t] == 1) continue;
    auto& out = row_grads_[t];
    const auto& in = feature_grads_[f];
    if (!started[t]) {
      std::copy(in.begin(), in.end(), out.begin());
      started[t] = true;
    } else {
      for (size_t i = 0; i < out.size(); ++i) out[i] += in[i];
    }
  }
}

StatusOr<StepStats> Trainer::Step(const data::Batch& batch) {
  auto t0 = Clock::now();
  TANDEM_RETURN_IF_ERROR(PullBatchRows(options_.embeddings, batch.step, batch, &rows_));
  const double pull_s = Since(t0);
  TANDEM_ASSIGN_OR_RETURN(StepStats st, StepWithRows(batch, rows_));
  st.pull_s = pull_s;
  return st;
}

std::vector<TableGrads> Trainer::MakePush(const data::Batch& batch, bool skip) const {
  std::vector<TableGrads> push(row_grads_.size());
  for (size_t t = 0; t < push.size(); ++t) {
    push[t].table = static_cast<uint32_t>(t);
    if (skip) continue;  // a skip push: no rows, nothing applied (PROTOCOLS §2.7)
    push[t].ids = batch.unique_ids[t];
    push[t].grads = row_grads_[t];
  }
  return push;
}

StatusOr<StepStats> Trainer::StepWithRows(const data::Batch& batch, const BatchRows& rows,
                                          bool stop_vote, bool checkpoint_vote) {
  StepStats st;
  collective_failed_ = false;
  const size_t tables = row_grads_.size();
  const int64_t step = batch.step;
  device::Backend* be = options_.backend;
  collective::Collective* coll = options_.collective;
  const bool device_reduce = coll != nullptr && coll->device_memory();
  auto t0 = Clock::now();
  TANDEM_RETURN_IF_ERROR(Describe(batch, rows));
  for (size_t t = 0; t < tables; ++t)
    row_grads_[t].resize(batch.unique_ids[t].size() * table_dims_[t]);
  // A table looked up by one feature takes that feature's row gradients as they are; a shared
  // table sums its features' gradients after the step, in feature order.
  for (size_t f = 0; f < row_grad_ptrs_.size(); ++f) {
    const auto t = static_cast<size_t>(feature_table_[f]);
    if (features_of_table_[t] == 1) {
      row_grad_ptrs_[f] = row_grads_[t].data();
    } else {
      feature_grads_[f].resize(row_grads_[t].size());
      row_grad_ptrs_[f] = feature_grads_[f].data();
    }
  }
  // Losses and gradients are divided by the nominal global batch M*b (DESIGN §2).
  const float normaliser = static_cast<float>(options_.world) * static_cast<float>(batch.size);
  st.loss_scale = fp16_ ? scaler_.scale() : 1.0f;
  // Per-row gradients come back summed in sample order (PROTOCOLS §5.1).
  const float loss = model_->TrainStep(host_batch_, normaliser, st.loss_scale,
                                       row_grad_ptrs_.data(), /*grads_to_host=*/!device_reduce);
  TANDEM_RETURN_IF_ERROR(be->status().WithContext("device, step " + std::to_string(step)));
  SumSharedTableGrads();
  float overflow = 0.0f;
  if (fp16_) {
    // Sparse gradients are unscaled and checked here, before they are pushed (PROTOCOLS §2.7);
    // 1/scale is a power of two, so unscaling is exact.
    const float unscale = 1.0f / st.loss_scale;
    for (auto& g : row_grads_) {
      for (float& v : g) {
        v *= unscale;
        if (!std::isfinite(v)) overflow = 1.0f;
      }
    }
  }
  st.compute_s = Since(t0);

  // At fp32/bf16 the push goes out before the all-reduce starts and runs beside it (PROTOCOLS
  // §2.5): a worker never waits on another between its forward pass and its push. In fp16 it
  // waits for the all-reduce, which says whether some rank overflowed (§2.7).
  t0 = Clock::now();
  auto grads = std::as_const(*model_).grads();
  const size_t n = grads.size();
  double global_loss = loss;
  Status reduced = Status::Ok();
  Status pushed = Status::Ok();
  bool skip = overflow > 0.0f;
  if (coll != nullptr) {
    std::future<Status> push_done;
    std::vector<TableGrads> push;
    // A drill's fault point: this rank's all-reduce of the step completes, its push never
    // leaves (the window PROTOCOLS §8 calls "the lost rank's pushes of the newest step").
    const bool die_after_reduce = failpoint::Fires(failpoint::kDieAfterAllReduce, step);
    if (!fp16_ && !die_after_reduce) {
      push = MakePush(batch, false);
      push_done =
          std::async(std::launch::async, [&] { return options_.embeddings->Push(step, push); });
    }
    // One bucket, a pure function of the model config: the flat gradients, the loss, the stop
    // and checkpoint votes, the overflow flag.
    const float tail[] = {loss, stop_vote ? 1.0f : 0.0f, checkpoint_vote ? 1.0f : 0.0f, overflow};
    constexpr size_t kTail = sizeof(tail) / sizeof(tail[0]);
    static_assert(kTail <= model::kGradBucketTail);
    bucket_.resize(n + kTail);
    if (device_reduce) {
      model_->SetGradBucketTail(tail);
      be->Synchronize();  // the collective runs on its own stream
      reduced = be->status();
      if (reduced.ok()) reduced = coll->AllReduceSum(model_->device_grad_bucket(), n + kTail);
      if (reduced.ok()) {
        model_->DownloadGradBucket(static_cast<int64_t>(n + kTail), bucket_.data());
        reduced = be->status();
      }
    } else {
      std::copy_n(grads.data(), n, bucket_.data());
      std::copy_n(tail, kTail, bucket_.data() + n);
      if (options_.retain_last_step) local_bucket_.assign(bucket_.begin(), bucket_.end());
      reduced = coll->AllReduceSum(bucket_.data(), bucket_.size());
    }
    st.allreduce_s = Since(t0);
    if (die_after_reduce) failpoint::Die();
    if (reduced.ok()) {
      if (!device_reduce) std::copy_n(bucket_.data(), n, model_->grads().data());
      global_loss = bucket_[n];
      st.stop_agreed = bucket_[n + 1] > 0.5f;
      st.checkpoint_agreed = bucket_[n + 2] > 0.5f;
      skip = bucket_[n + 3] > 0.5f;
    }
    auto t1 = Clock::now();
    if (fp16_ && reduced.ok()) {
      skip = skip || !AllFiniteHost(std::as_const(*model_).grads());
      push = MakePush(batch, skip);
      pushed = options_.embeddings->Push(step, push);
    } else if (push_done.valid()) {
      pushed = push_done.get();
    }
    st.push_s = Since(t1);
  } else {
    if (fp16_) skip = skip || !AllFiniteHost(std::as_const(*model_).grads());
    const std::vector<TableGrads> push = MakePush(batch, skip);
    pushed = options_.embeddings->Push(step, push);
    st.push_s = Since(t0);
    st.stop_agreed = stop_vote;
    st.checkpoint_agreed = checkpoint_vote;
  }
  collective_failed_ = pushed.ok() && !reduced.ok();
  TANDEM_RETURN_IF_ERROR(pushed.WithContext("push of step " + std::to_string(step)));
  TANDEM_RETURN_IF_ERROR(reduced.WithContext("all-reduce of step " + std::to_string(step)));

  t0 = Clock::now();
  // The NCCL path reduces in device memory: its local bucket is not kept, so it cannot undo a
  // step (recovery then falls back to a rollback).
  if (options_.retain_last_step && coll != nullptr && !device_reduce) {
    retained_step_ = step;
    retained_bucket_.swap(local_bucket_);
    const auto params = std::as_const(*model_).params();
    retained_params_.assign(params.begin(), params.end());
    const auto state = optimizer_->state();
    retained_optimizer_.assign(state.begin(), state.end());
    retained_scaler_ = scaler_;
  } else {
    retained_step_ = -1;
  }
  ApplyUpdate(step, skip, &st);
  st.update_s = Since(t0);
  st.loss = global_loss;
  return st;
}

void Trainer::ApplyUpdate(int64_t step, bool skip, StepStats* st) {
  st->skipped = fp16_ && skip;
  if (fp16_) {
    scaler_.Update(skip);
    if (!skip) {
      const float unscale = 1.0f / st->loss_scale;
      for (float& g : model_->grads()) g *= unscale;
    }
  }
  if (!st->skipped) optimizer_->Step(step, model_->params(), model_->grads());
}

Status Trainer::RollBackLastStep(int64_t step) {
  if (retained_step_ < 0 || retained_step_ != step)
    return Status::FailedPrecondition(
        "cannot undo step " + std::to_string(step) + ": " +
        (retained_step_ < 0 ? std::string("no step is retained")
                            : "the retained step is " + std::to_string(retained_step_)));
  TANDEM_RETURN_IF_ERROR(optimizer_->LoadState(retained_optimizer_));
  auto params = model_->params();
  std::copy(retained_params_.begin(), retained_params_.end(), params.begin());
  scaler_ = retained_scaler_;
  redo_step_ = step;
  return Status::Ok();
}

StatusOr<StepStats> Trainer::RedoLastStep() {
  if (redo_step_ < 0) return Status::FailedPrecondition("no step was rolled back");
  collective::Collective* coll = options_.collective;
  if (coll == nullptr) return Status::FailedPrecondition("no collective to redo a step with");
  const int64_t step = redo_step_;
  StepStats st;
  st.loss_scale = fp16_ ? scaler_.scale() : 1.0f;
  auto t0 = Clock::now();
  bucket_ = retained_bucket_;
  Status reduced = coll->AllReduceSum(bucket_.data(), bucket_.size());
  collective_failed_ = !reduced.ok();
  TANDEM_RETURN_IF_ERROR(
      reduced.WithContext("all-reduce of step " + std::to_string(step) + " (redone)"));
  st.allreduce_s = Since(t0);
  t0 = Clock::now();
  auto grads = model_->grads();
  const size_t n = grads.size();
  std::copy_n(bucket_.data(), n, grads.begin());
  st.loss = bucket_[n];
  st.stop_agreed = bucket_[n + 1] > 0.5f;
  st.checkpoint_agreed = bucket_[n + 2] > 0.5f;
  bool skip = bucket_[n + 3] > 0.5f;
  if (fp16_) skip = skip || !AllFiniteHost(std::as_const(*model_).grads());
  ApplyUpdate(step, skip, &st);
  st.update_s = Since(t0);
  redo_step_ = -1;
  return st;
}

std::vector<float> Trainer::ExportDenseState() const {
  const auto params = std::as_const(*model_).params();
  const auto state = optimizer_->state();
  std::vector<float> out(params.begin(), params.end());
  out.insert(out.end(), state.begin(), state.end());
  const auto scaler = scaler_.State();
  out.insert(out.end(), scaler.begin(), scaler.end());
  return out;
}

Status Trainer::ImportDenseState(std::span<const float> in) {
  const size_t n = static_cast<size_t>(model_->num_params());
  const size_t s = optimizer_->state().size();
  if (in.size() != n + s + 2)
    return Status::InvalidArgument("dense state of " + std::to_string(in.size()) +
                                   " floats, this model's has " + std::to_string(n + s + 2));
  model::LossScaler scaler;
  TANDEM_RETURN_IF_ERROR(scaler.Load(in[n + s], in[n + s + 1]));
  TANDEM_RETURN_IF_ERROR(optimizer_->LoadState(in.subspan(n, s)));
  auto params = model_->params();
  std::copy_n(in.begin(), n, params.begin());
  scaler_ = scaler;
  return Status::Ok();
}

ModelChecksum Trainer::DenseChecksum() const {
  ModelChecksum sum;
  const auto params = std::as_const(*model_).params();
  const auto state = optimizer_->state();
  const size_t n = params.size();
  const size_t arrays = n == 0 ? 0 : state.size() / n;  // per-parameter state arrays
  std::vector<float> slots;
  for (const auto& info : model_->param_info()) {
    slots.clear();
    for (size_t a = 0; a < arrays; ++a)
      slots.insert(slots.end(), state.begin() + a * n + info.offset,
                   state.begin() + a * n + info.offset + info.size);
    sum.AddDenseTensor(info.name, info.shape, params.subspan(info.offset, info.size), slots);
  }
  const std::vector<int64_t> scalar_shape = {static_cast<int64_t>(state.size() - arrays * n)};
  sum.AddDenseTensor("optimizer.scalars", scalar_shape, state.subspan(arrays * n), {});
  if (fp16_) {
    const auto scaler = scaler_.State();
    const std::vector<int64_t> shape = {static_cast<int64_t>(scaler.size())};
    sum.AddDenseTensor(kLossScaleTensor, shape, scaler, {});
  }
  return sum;
}

Status Trainer::Predict(int64_t step, const data::Batch& batch, std::vector<float>* probs) {
  TANDEM_RETURN_IF_ERROR(PullBatchRows(options_.embeddings, step, batch, &rows_));
  TANDEM_RETURN_IF_ERROR(Describe(batch, rows_));
  probs->resize(static_cast<size_t>(batch.size) * schema_.num_labels);
  // A score must not depend on the batch it was scored in (backend.h): eval, predict and serve
  // agree bit for bit on every record.
  options_.backend->SetRowStableForward(true);
  model_->PredictStep(host_batch_, probs->data());
  options_.backend->SetRowStableForward(false);
  return options_.backend->status().WithContext("device, predict");
}

}  // namespace tandem::worker
