#include "serve/served_model.h"

#include "worker/dense_state.h"

namespace tandem::serve {

StatusOr<std::shared_ptr<ModelVersion>> LoadBundleVersion(const std::string& bundle,
                                                          const std::vector<std::string>& deltas,
                                                          bool verify,
                                                          const VersionOptions& options) {
  TANDEM_ASSIGN_OR_RETURN(offline::BundleHeader base, offline::OpenBundle(bundle, verify));
  if (base.base_step >= 0)
    return Status::InvalidArgument(bundle + " is a delta bundle (of the rows changed after step " +
                                   std::to_string(base.base_step) + "); give its base bundle");
  TANDEM_ASSIGN_OR_RETURN(auto mapped, BundleRows::Open(base));
  std::shared_ptr<const RowSource> rows = mapped;
  int64_t step = base.step;
  config::JobConfig job = base.job;
  worker::DenseState dense = std::move(base.dense);
  std::vector<worker::FrozenTable> changed;
  for (const auto& d : deltas) {
    TANDEM_ASSIGN_OR_RETURN(offline::BundleHeader delta, offline::OpenBundle(d, /*verify=*/true));
    if (delta.base_step != step)
      return Status::InvalidArgument(d + (delta.base_step < 0
                                              ? " is a whole bundle, not a delta"
                                              : " holds the rows changed after step " +
                                                    std::to_string(delta.base_step) +
                                                    ", not after " + std::to_string(step)));
    if (delta.job.ComputationHash() != job.ComputationHash())
      return Status::InvalidArgument(d + " was trained under another config than " + bundle);
    TANDEM_ASSIGN_OR_RETURN(worker::FrozenModel m, offline::ReadDeltaBundle(d));
    if (changed.empty()) changed.resize(m.tables.size());
    for (size_t t = 0; t < m.tables.size(); ++t) changed[t] = MergeRows(changed[t], m.tables[t]);
    step = delta.step;
    dense = std::move(delta.dense);
  }
  if (!changed.empty()) rows = std::make_shared<DeltaRows>(rows, std::move(changed));
  return ModelVersion::Create(std::move(job), step, std::move(dense), std::move(rows), options);
}

}  // namespace tandem::serve
