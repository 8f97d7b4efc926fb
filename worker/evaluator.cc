#include "worker/evaluator.h"

#include <algorithm>

#include "worker/collective/collective.h"

namespace tandem::worker {

StatusOr<std::unique_ptr<Evaluator>> Evaluator::Create(const config::JobConfig& job, int rank,
                                                       int world) {
  std::unique_ptr<Evaluator> e(new Evaluator());
  e->schema_ = {static_cast<int>(job.data.num_dense), static_cast<int>(job.data.num_categorical)};
  const bool synthetic = job.data.format == "synthetic";
  if (synthetic ? job.data.synthetic_eval_rows <= 0 : job.data.eval.empty()) return e;
  TANDEM_ASSIGN_OR_RETURN(e->source_, data::OpenSource(job.data, job.train.seed, /*eval=*/true));
  if (synthetic) {
    data::SyntheticSpec spec{job.train.seed, e->schema_, job.data.synthetic_vocab,
                             job.data.synthetic_zipf, 1u};
    e->teacher_ = std::make_unique<data::SyntheticGenerator>(spec);
  }
  const int64_t n = e->source_->num_records();
  e->begin_ = n * rank / world;
  e->end_ = n * (rank + 1) / world;
  return e;
}

StatusOr<EvalResult> Evaluator::Run(Trainer* trainer, collective::Collective* collective,
                                    int64_t step) {
  EvalResult r;
  if (!enabled()) return r;
  model_hist_.Clear();
  teacher_hist_.Clear();
  double logloss_sum = 0, weight_sum = 0;
  data::Batch batch;
  data::Sample sample(schema_);
  std::vector<float> probs;
  for (int64_t off = begin_; off < end_; off += batch_) {
    const int b = static_cast<int>(std::min<int64_t>(batch_, end_ - off));
    batch.Reset(schema_, b);
    for (int i = 0; i < b; ++i) {
      if (teacher_) {
        double p = 0;
        teacher_->Generate(off + i, &sample, &p);
        teacher_hist_.Add(p, sample.label, sample.weight);
      } else {
        TANDEM_RETURN_IF_ERROR(source_->Read(off + i, &sample));
      }
      batch.Set(i, sample);
    }
    batch.Dedup();
    batch.step = step;
    TANDEM_RETURN_IF_ERROR(trainer->Predict(step, batch, &probs));
    if (sink_) TANDEM_RETURN_IF_ERROR(sink_({off, probs, batch.label, batch.weight}));
    for (int i = 0; i < b; ++i) {
      const float w = batch.weight[i];
      if (w <= 0) continue;
      model_hist_.Add(probs[i], batch.label[i], w);
      const double p = std::clamp<double>(probs[i], 1e-7, 1 - 1e-7);
      logloss_sum -= w * (batch.label[i] > 0.5f ? std::log(p) : std::log(1 - p));
      weight_sum += w;
    }
  }
  // One bucket: both histograms, then the logloss sum and the weight. Counts stay exact in fp32
  // up to 2^24 samples per bucket.
  auto mc = model_hist_.mutable_counts();
  auto tc = teacher_hist_.mutable_counts();
  bucket_.assign(mc.begin(), mc.end());
  if (teacher_) bucket_.insert(bucket_.end(), tc.begin(), tc.end());
  bucket_.push_back(static_cast<float>(logloss_sum));
  bucket_.push_back(static_cast<float>(weight_sum));
  if (collective != nullptr)
    TANDEM_RETURN_IF_ERROR(
        collective->AllReduceSum(bucket_.data(), bucket_.size()).WithContext("eval all-reduce"));
  std::copy_n(bucket_.begin(), mc.size(), mc.begin());
  if (teacher_)
    std::copy_n(bucket_.begin() + static_cast<ptrdiff_t>(mc.size()), tc.size(), tc.begin());
  const double total_weight = bucket_.back();
  r.samples = static_cast<int64_t>(total_weight);
  r.auc = model_hist_.Auc();
  if (teacher_) r.teacher_auc = teacher_hist_.Auc();
  r.logloss = total_weight > 0 ? bucket_[bucket_.size() - 2] / total_weight : NAN;
  return r;
}

}  // namespace tandem::worker
