#include "common/embedding/table_spec.h"

#include <string>
#include <utility>

#include "common/check.h"

namespace tandem::embedding {
namespace {

// The config loader has already validated these strings (OneOf), so anything else here is a
// bug in that validation: crash rather than guess (STYLE §2).
OptimizerKind ParseOptimizer(const std::string& name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adagrad") return OptimizerKind::kAdagrad;
  if (name == "rowwise_adagrad") return OptimizerKind::kRowwiseAdagrad;
  if (name == "adam") return OptimizerKind::kAdam;
  if (name == "ftrl") return OptimizerKind::kFtrl;
  TANDEM_CHECK(false) << "unknown optimizer '" << name << "' (config not validated?)";
}

InitDist ParseInitDist(const std::string& name) {
  if (name == "uniform") return InitDist::kUniform;
  if (name == "normal") return InitDist::kNormal;
  if (name == "zeros") return InitDist::kZeros;
  TANDEM_CHECK(false) << "unknown init.dist '" << name << "' (config not validated?)";
}

TableSpec SpecFromTableConfig(uint32_t table_id, std::string name, uint32_t dim,
                              const config::TableConfig& tc) {
  TableSpec spec;
  spec.table_id = table_id;
  spec.name = std::move(name);
  spec.dim = dim;
  spec.optimizer = ParseOptimizer(tc.optimizer);
  spec.lr = static_cast<float>(tc.lr);
  spec.init_dist = ParseInitDist(tc.init_dist);
  spec.init_scale = static_cast<float>(tc.init_scale);
  spec.admission_min_count = tc.admission_min_count;
  spec.ttl_steps = tc.eviction_ttl_steps;
  spec.adagrad_initial_accumulator = static_cast<float>(tc.adagrad_initial_accumulator);
  spec.adam_beta1 = static_cast<float>(tc.adam_beta1);
  spec.adam_beta2 = static_cast<float>(tc.adam_beta2);
  spec.adam_eps = static_cast<float>(tc.adam_eps);
  spec.ftrl_alpha = static_cast<float>(tc.ftrl_alpha);
  spec.ftrl_beta = static_cast<float>(tc.ftrl_beta);
  spec.ftrl_l1 = static_cast<float>(tc.ftrl_l1);
  spec.ftrl_l2 = static_cast<float>(tc.ftrl_l2);
  return spec;
}

}  // namespace

uint32_t TableSpec::state_floats() const {
  switch (optimizer) {
    case OptimizerKind::kSgd:
      return 0;
    case OptimizerKind::kAdagrad:
      return dim;
    case OptimizerKind::kRowwiseAdagrad:
      return 1;
    case OptimizerKind::kAdam:
      return 2 * dim + 2;
    case OptimizerKind::kFtrl:
      return 2 * dim;
  }
  std::abort();  // not reachable: every enumerator is handled above
}

uint32_t TableSpec::row_bytes() const {
  return static_cast<uint32_t>(sizeof(RowMeta) + (dim + state_floats()) * sizeof(float));
}

std::vector<TableSpec> TableSpecsFromConfig(const config::JobConfig& job) {
  const std::vector<std::string> names = config::TableNames(job);
  std::vector<TableSpec> specs;
  specs.reserve(names.size());
  for (uint32_t i = 0; i < names.size(); ++i) {
    auto it = job.tables.find(names[i]);
    // The loader fills every table; a missing one is a loader bug, not bad input.
    TANDEM_CHECK(it != job.tables.end()) << "no table " << names[i] << " (config not validated?)";
    const auto dim =
        static_cast<uint32_t>(it->second.dim > 0 ? it->second.dim : job.model.embedding_dim);
    specs.push_back(SpecFromTableConfig(i, names[i], dim, it->second));
  }
  if (!config::HasWideTables(job)) return specs;
  const auto labels = static_cast<uint32_t>(job.data.labels.size());
  for (uint32_t i = 0; i < names.size(); ++i) {
    config::TableConfig wide = job.tables.find(names[i])->second;
    wide.optimizer = job.model.wide_optimizer;
    wide.init_dist = "zeros";
    const auto id = static_cast<uint32_t>(names.size() + i);
    specs.push_back(
        SpecFromTableConfig(id, names[i] + std::string(config::kWideTableSuffix), labels, wide));
  }
  return specs;
}

}  // namespace tandem::embedding
