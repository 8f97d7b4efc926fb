// One embedding table as the PS and the worker see it: its id, dim, initializer and sparse
// optimizer, resolved from the job config. Tables are config::TableNames (C1..Cn by default),
// ids 0..n-1; a table's dim is tables.<name>.dim, else model.embedding_dim.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config/job_config.h"
#include "common/status.h"

namespace tandem::embedding {

enum class OptimizerKind { kSgd, kAdagrad, kRowwiseAdagrad, kAdam, kFtrl };
enum class InitDist { kUniform, kNormal, kZeros };

struct TableSpec {
  uint32_t table_id = 0;
  std::string name;  // "C1"
  uint32_t dim = 16;
  OptimizerKind optimizer = OptimizerKind::kAdagrad;
  float lr = 0.05f;
  InitDist init_dist = InitDist::kUniform;
  float init_scale = 0.05f;
  int64_t admission_min_count = 0;  // 0 or 1: admitted on first push
  int64_t ttl_steps = 0;            // 0: never expires
  float adagrad_initial_accumulator = 0.1f;
  float adam_beta1 = 0.9f, adam_beta2 = 0.999f, adam_eps = 1e-8f;
  float ftrl_alpha = 0.05f, ftrl_beta = 1.0f, ftrl_l1 = 0.0f, ftrl_l2 = 0.0f;

  // Optimizer state floats per row: sgd 0, adagrad dim, rowwise_adagrad 1, adam 2*dim+2
  // (m, v, beta1^t, beta2^t), ftrl 2*dim (z, n).
  uint32_t state_floats() const;
  // Bytes of one stored row: RowMeta + (dim + state_floats) floats.
  uint32_t row_bytes() const;
};

// Metadata stored in front of every row (PROTOCOLS §4).
struct RowMeta {
  int64_t last_updated_step = -1;
  uint64_t frequency = 0;  // number of applied steps whose pushes contained the id
};
static_assert(sizeof(RowMeta) == 16);

// A mutable view of one stored row: [RowMeta][embedding dim floats][state floats].
struct RowRef {
  uint8_t* bytes = nullptr;
  RowMeta* meta() const { return reinterpret_cast<RowMeta*>(bytes); }
  float* embedding() const { return reinterpret_cast<float*>(bytes + sizeof(RowMeta)); }
  float* state(uint32_t dim) const { return embedding() + dim; }
};

// Resolves every table of the job (C1..Cn with tables.default + overrides).
std::vector<TableSpec> TableSpecsFromConfig(const config::JobConfig& job);

}  // namespace tandem::embedding
