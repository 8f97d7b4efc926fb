#include "worker/evaluator.h"

#include <algorithm>

#include "worker/collective/collective.h"

namespace tandem::worker {

StatusOr<std::unique_ptr<Evaluator>> Evaluator::Create(const config::JobConfig& job, int rank,
                                                       int world) {
  std::unique_ptr<Evaluator> e(new Evaluator());
  e->schema_ = data::SchemaFromConfig(job);
  e->model_hist_.resize(e->schema_.num_labels);
  e->teacher_hist_.resize(e->schema_.num_labels);
  const bool synthetic = job.data.format == "synthetic";
  if (synthetic ? job.data.synthetic_eval_rows <= 0 : job.data.eval.empty()) return e;
  TANDEM_ASSIGN_OR_RETURN(e->source_, data::OpenSource(job, job.train.seed, /*eval=*/true));
  if (synthetic) {
    data::SyntheticSpec spec{job.train.seed,
                             e->schema_,
                             job.data.synthetic_vocab,
                             job.data.synthetic_zipf,
                             1u,
                             data::TeacherFromName(job.data.synthetic_teacher),
                             job.data.synthetic_task_correlation};
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
  reached_all_reduce_ = false;
  if (!enabled()) return r;
  const int tasks = schema_.num_labels;
  for (auto& h : model_hist_) h.Clear();
  for (auto& h : teacher_hist_) h.Clear();
  std::vector<double> logloss_sum(tasks, 0.0);
  double weight_sum = 0;
  data::Batch batch;
  data::Sample sample(schema_);
  data::RawRecord raw;
  std::vector<float> probs;
  for (int64_t off = begin_; off < end_; off += batch_) {
    const int b = static_cast<int>(std::min<int64_t>(batch_, end_ - off));
    batch.Reset(schema_, b);
    for (int i = 0; i < b; ++i) {
      if (teacher_) {
        teacher_->GenerateRaw(off + i, &raw);
        data::ToSample(schema_, raw, &sample);
        for (int k = 0; k < tasks; ++k)
          teacher_hist_[k].Add(raw.p[k], sample.labels[k], sample.weight);
      } else {
        TANDEM_RETURN_IF_ERROR(source_->Read(off + i, &sample));
      }
      batch.Set(i, sample);
    }
    batch.Dedup();
    batch.step = step;
    TANDEM_RETURN_IF_ERROR(trainer->Predict(step, batch, &probs));
    if (sink_) TANDEM_RETURN_IF_ERROR(sink_({off, tasks, probs, batch.label, batch.weight}));
    for (int i = 0; i < b; ++i) {
      const float w = batch.weight[i];
      if (w <= 0) continue;
      for (int k = 0; k < tasks; ++k) {
        const size_t at = static_cast<size_t>(i) * tasks + k;
        model_hist_[k].Add(probs[at], batch.label[at], w);
        const double p = std::clamp<double>(probs[at], 1e-7, 1 - 1e-7);
        logloss_sum[k] -= w * (batch.label[at] > 0.5f ? std::log(p) : std::log(1 - p));
      }
      weight_sum += w;
    }
  }
  // One bucket: per label both histograms, then the logloss sums and the weight. Counts stay
  // exact in fp32 up to 2^24 samples per bucket.
  bucket_.clear();
  for (int k = 0; k < tasks; ++k) {
    auto mc = model_hist_[k].mutable_counts();
    bucket_.insert(bucket_.end(), mc.begin(), mc.end());
    if (teacher_) {
      auto tc = teacher_hist_[k].mutable_counts();
      bucket_.insert(bucket_.end(), tc.begin(), tc.end());
    }
  }
  for (int k = 0; k < tasks; ++k) bucket_.push_back(static_cast<float>(logloss_sum[k]));
  bucket_.push_back(static_cast<float>(weight_sum));
  reached_all_reduce_ = true;
  if (collective != nullptr)
    TANDEM_RETURN_IF_ERROR(
        collective->AllReduceSum(bucket_.data(), bucket_.size()).WithContext("eval all-reduce"));
  size_t at = 0;
  for (int k = 0; k < tasks; ++k) {
    auto mc = model_hist_[k].mutable_counts();
    std::copy_n(bucket_.begin() + static_cast<ptrdiff_t>(at), mc.size(), mc.begin());
    at += mc.size();
    if (teacher_) {
      auto tc = teacher_hist_[k].mutable_counts();
      std::copy_n(bucket_.begin() + static_cast<ptrdiff_t>(at), tc.size(), tc.begin());
      at += tc.size();
    }
  }
  const double total_weight = bucket_.back();
  r.samples = static_cast<int64_t>(total_weight);
  for (int k = 0; k < tasks; ++k) {
    TaskEval t;
    t.auc = model_hist_[k].Auc();
    if (teacher_) t.teacher_auc = teacher_hist_[k].Auc();
    t.logloss = total_weight > 0 ? bucket_[at + k] / total_weight : NAN;
    r.tasks.push_back(t);
  }
  r.auc = r.tasks[0].auc;
  r.teacher_auc = r.tasks[0].teacher_auc;
  r.logloss = r.tasks[0].logloss;
  return r;
}

}  // namespace tandem::worker
