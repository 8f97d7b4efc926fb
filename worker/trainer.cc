#include "worker/trainer.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <utility>

#include "worker/collective/collective.h"

namespace tandem::worker {

namespace {
using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
}  // namespace

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainerOptions& options) {
  if (options.job == nullptr || options.embeddings == nullptr || options.backend == nullptr)
    return Status::InvalidArgument("trainer: job, embeddings and backend are required");
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world)
    return Status::InvalidArgument("trainer: rank outside [0, world)");
  std::unique_ptr<Trainer> t(new Trainer(options));
  const auto& job = *options.job;
  TANDEM_ASSIGN_OR_RETURN(
      t->model_, model::Dlrm::Create(job.model, job.data.num_dense, job.data.num_categorical,
                                     job.train.seed, options.backend));
  TANDEM_ASSIGN_OR_RETURN(auto opt_options, model::DenseOptimizerOptionsFromConfig(job.train));
  TANDEM_ASSIGN_OR_RETURN(t->optimizer_,
                          model::DenseOptimizer::Create(opt_options, t->model_->num_params()));
  t->dim_ = job.model.embedding_dim;
  const size_t tables = static_cast<size_t>(job.data.num_categorical);
  t->pooled_.resize(tables);
  t->d_pooled_.resize(tables);
  t->row_grads_.resize(tables);
  return t;
}

Status PullBatchRows(EmbeddingClient* client, int64_t step, const data::Batch& batch,
                     BatchRows* rows) {
  const size_t tables = batch.unique_ids.size();
  std::vector<TableIds> want(tables);
  for (size_t t = 0; t < tables; ++t) want[t] = {static_cast<uint32_t>(t), batch.unique_ids[t]};
  return client->Pull(step, want, rows);
}

Status Trainer::Pool(const data::Batch& batch, const BatchRows& rows) {
  const size_t tables = pooled_.size();
  if (batch.unique_ids.size() != tables || rows.size() != tables)
    return Status::InvalidArgument("batch has the wrong number of tables");
  const size_t d = static_cast<size_t>(dim_);
  for (size_t t = 0; t < tables; ++t) {
    if (rows[t].size() != batch.unique_ids[t].size() * d)
      return Status::InvalidArgument("pulled rows do not match the batch's ids");
    pooled_[t].resize(static_cast<size_t>(batch.size) * d);
    // One id per field and sample (Criteo): the bag of a sample is its row.
    for (int i = 0; i < batch.size; ++i)
      std::copy_n(&rows[t][size_t{batch.inverse[t][i]} * d], d, &pooled_[t][size_t(i) * d]);
  }
  return Status::Ok();
}

StatusOr<StepStats> Trainer::Step(const data::Batch& batch) {
  auto t0 = Clock::now();
  TANDEM_RETURN_IF_ERROR(PullBatchRows(options_.embeddings, batch.step, batch, &rows_));
  const double pull_s = Since(t0);
  TANDEM_ASSIGN_OR_RETURN(StepStats st, StepWithRows(batch, rows_));
  st.pull_s = pull_s;
  return st;
}

StatusOr<StepStats> Trainer::StepWithRows(const data::Batch& batch, const BatchRows& rows,
                                          bool stop_vote, bool checkpoint_vote) {
  StepStats st;
  const size_t tables = pooled_.size();
  const size_t d = static_cast<size_t>(dim_);
  const int64_t step = batch.step;
  auto t0 = Clock::now();
  TANDEM_RETURN_IF_ERROR(Pool(batch, rows));
  std::vector<const float*> pooled(tables);
  std::vector<float*> d_pooled(tables);
  for (size_t t = 0; t < tables; ++t) {
    pooled[t] = pooled_[t].data();
    d_pooled_[t].resize(static_cast<size_t>(batch.size) * d);
    d_pooled[t] = d_pooled_[t].data();
  }
  // Losses and gradients are divided by the nominal global batch M*b (DESIGN §2).
  const float normaliser = static_cast<float>(options_.world) * static_cast<float>(batch.size);
  const float loss =
      model_->ForwardBackward(batch.size, batch.dense.data(), pooled.data(), batch.label.data(),
                              batch.weight.data(), normaliser, d_pooled.data());
  // Per-row gradients: the bag gradients summed in sample order (PROTOCOLS §5.1).
  std::vector<TableGrads> push(tables);
  for (size_t t = 0; t < tables; ++t) {
    auto& g = row_grads_[t];
    g.assign(batch.unique_ids[t].size() * d, 0.0f);
    for (int i = 0; i < batch.size; ++i) {
      float* dst = &g[size_t{batch.inverse[t][i]} * d];
      const float* src = &d_pooled_[t][size_t(i) * d];
      for (size_t j = 0; j < d; ++j) dst[j] += src[j];
    }
    push[t] = {static_cast<uint32_t>(t), batch.unique_ids[t], g};
  }
  st.compute_s = Since(t0);

  // The push goes out before the all-reduce starts and runs beside it (PROTOCOLS §2.5): a
  // worker never waits on another between its forward pass and its push.
  t0 = Clock::now();
  auto grads = model_->grads();
  double global_loss = loss;
  Status reduced = Status::Ok();
  Status pushed = Status::Ok();
  if (options_.collective != nullptr) {
    std::future<Status> push_done =
        std::async(std::launch::async, [&] { return options_.embeddings->Push(step, push); });
    // One bucket, a pure function of the model config: the flat gradients, the loss, the stop
    // and checkpoint votes.
    bucket_.assign(grads.begin(), grads.end());
    bucket_.push_back(loss);
    bucket_.push_back(stop_vote ? 1.0f : 0.0f);
    bucket_.push_back(checkpoint_vote ? 1.0f : 0.0f);
    reduced = options_.collective->AllReduceSum(bucket_.data(), bucket_.size());
    st.allreduce_s = Since(t0);
    auto t1 = Clock::now();
    pushed = push_done.get();
    st.push_s = Since(t1);
    if (reduced.ok()) {
      std::copy_n(bucket_.data(), grads.size(), grads.data());
      global_loss = bucket_[grads.size()];
      st.stop_agreed = bucket_[grads.size() + 1] > 0.5f;
      st.checkpoint_agreed = bucket_[grads.size() + 2] > 0.5f;
    }
  } else {
    pushed = options_.embeddings->Push(step, push);
    st.push_s = Since(t0);
    st.stop_agreed = stop_vote;
    st.checkpoint_agreed = checkpoint_vote;
  }
  TANDEM_RETURN_IF_ERROR(pushed.WithContext("push of step " + std::to_string(step)));
  TANDEM_RETURN_IF_ERROR(reduced.WithContext("all-reduce of step " + std::to_string(step)));

  t0 = Clock::now();
  optimizer_->Step(step, model_->params(), model_->grads());
  st.update_s = Since(t0);
  st.loss = global_loss;
  return st;
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
  return sum;
}

Status Trainer::Predict(int64_t step, const data::Batch& batch, std::vector<float>* probs) {
  TANDEM_RETURN_IF_ERROR(PullBatchRows(options_.embeddings, step, batch, &rows_));
  TANDEM_RETURN_IF_ERROR(Pool(batch, rows_));
  std::vector<const float*> pooled(pooled_.size());
  for (size_t t = 0; t < pooled_.size(); ++t) pooled[t] = pooled_[t].data();
  probs->resize(static_cast<size_t>(batch.size));
  model_->Predict(batch.size, batch.dense.data(), pooled.data(), probs->data());
  return Status::Ok();
}

}  // namespace tandem::worker
