// The DLRM shape the dense benchmarks measure: Criteo Kaggle's 13 dense features and 26 tables
// of dim 16, bottom MLP 512-256-64-16, dot interaction, top MLP 512-256-1 (the reference
// DLRM's Kaggle configuration).
#pragma once

#include <cstdint>

#include "common/config/job_config.h"

namespace tandem::bench {

inline constexpr int64_t kDense = 13;
inline constexpr int64_t kTables = 26;
inline constexpr int64_t kDim = 16;

inline config::ModelConfig CriteoKaggleDense() {
  config::ModelConfig config;
  config.embedding_dim = kDim;
  config.bottom_mlp = {512, 256, 64, 16};
  config.top_mlp = {512, 256, 1};
  config.interaction = "dot";
  return config;
}

}  // namespace tandem::bench
