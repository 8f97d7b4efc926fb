#include "common/embedding/sparse_optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/embedding/initializer.h"

namespace tandem::embedding {
namespace {

constexpr uint32_t kDim = 8;
constexpr int kSteps = 200;

// A row with its own storage, initialised like the PS does for an absent row.
class TestRow {
 public:
  explicit TestRow(const TableSpec& spec, uint64_t id = 17) : bytes_(spec.row_bytes()) {
    InitialRow(/*seed=*/1, spec, id, ref());
  }
  RowRef ref() { return RowRef{bytes_.data()}; }
  std::vector<float> embedding(uint32_t dim) {
    return std::vector<float>(ref().embedding(), ref().embedding() + dim);
  }
  std::vector<float> state(const TableSpec& spec) {
    const float* s = ref().state(spec.dim);
    return std::vector<float>(s, s + spec.state_floats());
  }

 private:
  std::vector<uint8_t> bytes_;
};

// Deterministic gradients in [-1, 1] (splitmix64), with some exact zeros so the sparse-row
// paths for untouched elements are exercised too.
class GradientSource {
 public:
  std::vector<float> Next(uint32_t dim) {
    std::vector<float> g(dim);
    for (float& x : g) {
      const uint64_t r = NextU64();
      x = (r % 7 == 0) ? 0.0f : static_cast<float>(static_cast<double>(r >> 11) * 0x1p-52 - 1.0);
    }
    return g;
  }

 private:
  uint64_t NextU64() {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t state_ = 12345;
};

// The textbook optimizers in double precision, written independently of the fp32 code.
struct ReferenceRow {
  std::vector<double> w;
  std::vector<double> a;     // adagrad accumulators (one for rowwise)
  std::vector<double> m, v;  // adam moments
  int t = 0;                 // adam step count
  std::vector<double> z, n;  // ftrl

  ReferenceRow(const TableSpec& spec, const std::vector<float>& w0)
      : w(w0.begin(), w0.end()),
        a(spec.optimizer == OptimizerKind::kRowwiseAdagrad ? 1 : spec.dim,
          spec.adagrad_initial_accumulator),
        m(spec.dim, 0.0),
        v(spec.dim, 0.0),
        z(spec.dim, 0.0),
        n(spec.dim, 0.0) {}

  void Step(const TableSpec& spec, const std::vector<float>& gf) {
    const std::vector<double> g(gf.begin(), gf.end());
    const double lr = spec.lr;
    switch (spec.optimizer) {
      case OptimizerKind::kSgd:
        for (size_t j = 0; j < w.size(); ++j) w[j] -= lr * g[j];
        break;
      case OptimizerKind::kAdagrad:
        for (size_t j = 0; j < w.size(); ++j) {
          a[j] += g[j] * g[j];
          if (a[j] > 0) w[j] -= lr * g[j] / std::sqrt(a[j]);
        }
        break;
      case OptimizerKind::kRowwiseAdagrad: {
        double sum_sq = 0;
        for (double x : g) sum_sq += x * x;
        a[0] += sum_sq / static_cast<double>(w.size());
        if (a[0] > 0) {
          for (size_t j = 0; j < w.size(); ++j) w[j] -= lr * g[j] / std::sqrt(a[0]);
        }
        break;
      }
      case OptimizerKind::kAdam:
        StepAdam(spec, g);
        break;
      case OptimizerKind::kFtrl:
        StepFtrl(spec, g);
        break;
    }
  }

  void StepAdam(const TableSpec& spec, const std::vector<double>& g) {
    const double b1 = spec.adam_beta1, b2 = spec.adam_beta2;
    ++t;
    for (size_t j = 0; j < w.size(); ++j) {
      m[j] = b1 * m[j] + (1 - b1) * g[j];
      v[j] = b2 * v[j] + (1 - b2) * g[j] * g[j];
      const double m_hat = m[j] / (1 - std::pow(b1, t));
      const double v_hat = v[j] / (1 - std::pow(b2, t));
      w[j] -= spec.lr * m_hat / (std::sqrt(v_hat) + spec.adam_eps);
    }
  }

  void StepFtrl(const TableSpec& spec, const std::vector<double>& g) {
    const double alpha = spec.ftrl_alpha, l1 = spec.ftrl_l1;
    for (size_t j = 0; j < w.size(); ++j) {
      if (n[j] + g[j] * g[j] == 0) continue;
      const double sigma = (std::sqrt(n[j] + g[j] * g[j]) - std::sqrt(n[j])) / alpha;
      z[j] += g[j] - sigma * w[j];
      n[j] += g[j] * g[j];
      if (std::abs(z[j]) <= l1) {
        w[j] = 0;
      } else {
        const double shrunk = z[j] > 0 ? z[j] - l1 : z[j] + l1;
        w[j] = -shrunk / ((spec.ftrl_beta + std::sqrt(n[j])) / alpha + spec.ftrl_l2);
      }
    }
  }
};

TableSpec Spec(OptimizerKind kind) {
  TableSpec spec;
  spec.dim = kDim;
  spec.optimizer = kind;
  spec.lr = 0.05f;
  spec.init_dist = InitDist::kUniform;
  spec.init_scale = 0.5f;
  return spec;
}

// Relative error per element, with the denominator floored at 1e-2 (the weights here are of
// order 0.1-1) so that an element passing close to zero is not judged on noise alone.
void ExpectMatchesReference(const TableSpec& spec) {
  TestRow row(spec);
  ReferenceRow ref(spec, row.embedding(spec.dim));
  GradientSource grads;
  for (int step = 0; step < kSteps; ++step) {
    const std::vector<float> g = grads.Next(spec.dim);
    ApplySparseUpdate(spec, g.data(), row.ref());
    ref.Step(spec, g);
    const std::vector<float> w = row.embedding(spec.dim);
    for (uint32_t j = 0; j < spec.dim; ++j) {
      const double error = std::abs(double{w[j]} - ref.w[j]);
      ASSERT_LE(error, 1e-4 * std::max(std::abs(ref.w[j]), 1e-2))
          << "step " << step << " element " << j << " got " << w[j] << " want " << ref.w[j];
    }
  }
}

TEST(SparseOptimizerTest, SgdMatchesReference) {
  ExpectMatchesReference(Spec(OptimizerKind::kSgd));
}

TEST(SparseOptimizerTest, AdagradMatchesReference) {
  ExpectMatchesReference(Spec(OptimizerKind::kAdagrad));
}

TEST(SparseOptimizerTest, RowwiseAdagradMatchesReference) {
  ExpectMatchesReference(Spec(OptimizerKind::kRowwiseAdagrad));
}

TEST(SparseOptimizerTest, AdamMatchesReference) {
  ExpectMatchesReference(Spec(OptimizerKind::kAdam));
}

TEST(SparseOptimizerTest, FtrlMatchesReference) {
  TableSpec spec = Spec(OptimizerKind::kFtrl);
  spec.ftrl_l1 = 0.01f;
  spec.ftrl_l2 = 0.1f;
  ExpectMatchesReference(spec);
}

TEST(SparseOptimizerTest, AdamBiasCorrectionAtStepOneIsExact) {
  // With b1 = 1/2, b2 = 15/16 and power-of-two gradients of magnitude >= 1/4, every step-1
  // quantity is exact in fp32: m / (1 - b1) == g, sqrt(v / (1 - b2)) == |g|, |g| + eps == |g|
  // and lr * g / |g| == lr. So w1 == w0 - lr * sign(g) exactly. Without the bias correction the
  // step would be (1 - b1) / sqrt(1 - b2) = 2 times larger.
  TableSpec spec = Spec(OptimizerKind::kAdam);
  spec.adam_beta1 = 0.5f;
  spec.adam_beta2 = 0.9375f;
  TestRow row(spec);
  const std::vector<float> w0 = row.embedding(kDim);
  const std::vector<float> g = {0.5f, -2.0f, 1.0f, -0.25f, 4.0f, -8.0f, 0.25f, -1.0f};
  ApplySparseUpdate(spec, g.data(), row.ref());
  const std::vector<float> w1 = row.embedding(kDim);
  for (uint32_t j = 0; j < kDim; ++j) {
    EXPECT_EQ(w1[j], w0[j] - spec.lr * (g[j] > 0 ? 1.0f : -1.0f)) << "element " << j;
  }
  EXPECT_EQ(row.state(spec)[2 * kDim], 0.5f);         // beta1^1
  EXPECT_EQ(row.state(spec)[2 * kDim + 1], 0.9375f);  // beta2^1
  ApplySparseUpdate(spec, g.data(), row.ref());
  EXPECT_EQ(row.state(spec)[2 * kDim], 0.25f);            // beta1^2
  EXPECT_EQ(row.state(spec)[2 * kDim + 1], 0.87890625f);  // beta2^2 = 225/256
}

TEST(SparseOptimizerTest, AdamStepOneWithDefaultBetasMatchesClosedForm) {
  TableSpec spec = Spec(OptimizerKind::kAdam);  // b1 0.9, b2 0.999, eps 1e-8
  TestRow row(spec);
  const std::vector<float> w0 = row.embedding(kDim);
  const std::vector<float> g = {0.5f, -2.0f, 0.3f, -0.7f, 1.0f, -1e-3f, 3.0f, 1e-7f};
  ApplySparseUpdate(spec, g.data(), row.ref());
  const std::vector<float> w1 = row.embedding(kDim);
  for (uint32_t j = 0; j < kDim; ++j) {
    // Closed form: m_hat = g, v_hat = g^2, so the step is lr * g / (|g| + eps).
    const double expected = w0[j] - double{spec.lr} * g[j] / (std::abs(double{g[j]}) + 1e-8);
    EXPECT_NEAR(w1[j], expected, 1e-6) << "element " << j;
  }
}

TEST(SparseOptimizerTest, FtrlWithLargeL1GivesExactZeros) {
  TableSpec spec = Spec(OptimizerKind::kFtrl);
  spec.ftrl_l1 = 1000.0f;
  TestRow row(spec);
  ASSERT_NE(row.embedding(kDim), std::vector<float>(kDim, 0.0f));
  GradientSource grads;
  std::vector<float> g = grads.Next(kDim);
  std::fill(g.begin(), g.end(), 0.5f);  // every element touched
  for (int step = 0; step < 20; ++step) {
    ApplySparseUpdate(spec, g.data(), row.ref());
    for (float w : row.embedding(kDim)) EXPECT_EQ(std::bit_cast<uint32_t>(w), 0u);  // +0.0f
    g = grads.Next(kDim);
  }
}

// Elements (or rows) whose accumulator is zero and whose gradient is zero keep their bits.
void ExpectZeroGradientKeepsRow(TableSpec spec) {
  spec.adagrad_initial_accumulator = 0.0f;
  spec.ftrl_beta = 0.0f;  // makes FTRL's closed form 0/0 when n stays 0
  spec.ftrl_l2 = 0.0f;
  TestRow row(spec);
  const std::vector<float> w0 = row.embedding(kDim);
  const std::vector<float> s0 = row.state(spec);
  const std::vector<float> zero(kDim, 0.0f);
  ApplySparseUpdate(spec, zero.data(), row.ref());
  EXPECT_EQ(row.embedding(kDim), w0);
  EXPECT_EQ(row.state(spec), s0);
}

TEST(SparseOptimizerTest, ZeroAccumulatorZeroGradientLeavesRowUnchanged) {
  ExpectZeroGradientKeepsRow(Spec(OptimizerKind::kAdagrad));
  ExpectZeroGradientKeepsRow(Spec(OptimizerKind::kRowwiseAdagrad));
  ExpectZeroGradientKeepsRow(Spec(OptimizerKind::kFtrl));
}

TEST(SparseOptimizerTest, ZeroGradientElementsUnchangedNextToUpdatedOnes) {
  TableSpec spec = Spec(OptimizerKind::kAdagrad);
  spec.adagrad_initial_accumulator = 0.0f;
  TestRow row(spec);
  const std::vector<float> w0 = row.embedding(kDim);
  std::vector<float> g(kDim, 0.0f);
  g[2] = 0.25f;
  ApplySparseUpdate(spec, g.data(), row.ref());
  const std::vector<float> w1 = row.embedding(kDim);
  for (uint32_t j = 0; j < kDim; ++j) {
    if (j == 2) {
      EXPECT_EQ(w1[j], w0[j] - spec.lr);  // first adagrad step: lr * g / |g|
    } else {
      EXPECT_EQ(w1[j], w0[j]) << "element " << j;
    }
  }
}

TEST(SparseOptimizerTest, DoesNotTouchMeta) {
  TableSpec spec = Spec(OptimizerKind::kAdam);
  TestRow row(spec);
  row.ref().meta()->last_updated_step = 41;
  row.ref().meta()->frequency = 3;
  const std::vector<float> g(kDim, 0.5f);
  ApplySparseUpdate(spec, g.data(), row.ref());
  EXPECT_EQ(row.ref().meta()->last_updated_step, 41);
  EXPECT_EQ(row.ref().meta()->frequency, 3u);
}

TEST(TableSpecTest, StateFloatsAndRowBytes) {
  struct Case {
    OptimizerKind kind;
    uint32_t state_floats;
    uint32_t row_bytes;
  };
  // dim 16: RowMeta (16 bytes) + (16 + state) * 4.
  for (const Case& c : {Case{OptimizerKind::kSgd, 0, 80}, Case{OptimizerKind::kAdagrad, 16, 144},
                        Case{OptimizerKind::kRowwiseAdagrad, 1, 84},
                        Case{OptimizerKind::kAdam, 34, 216}, Case{OptimizerKind::kFtrl, 32, 208}}) {
    TableSpec spec;
    spec.dim = 16;
    spec.optimizer = c.kind;
    EXPECT_EQ(spec.state_floats(), c.state_floats) << static_cast<int>(c.kind);
    EXPECT_EQ(spec.row_bytes(), c.row_bytes) << static_cast<int>(c.kind);
  }
}

TEST(TableSpecTest, FromConfigResolvesTablesInNumericOrder) {
  config::JobConfig job;
  job.data.num_categorical = 12;
  job.model.embedding_dim = 32;
  for (int k = 1; k <= 12; ++k) job.tables["C" + std::to_string(k)] = config::TableConfig{};
  config::TableConfig& c10 = job.tables["C10"];
  c10.optimizer = "ftrl";
  c10.init_dist = "normal";
  c10.lr = 0.25;
  c10.init_scale = 0.01;
  c10.admission_min_count = 3;
  c10.eviction_ttl_steps = 100;
  c10.ftrl_alpha = 0.5;
  c10.ftrl_beta = 2.0;
  c10.ftrl_l1 = 0.125;
  c10.ftrl_l2 = 0.75;
  job.tables["C2"].optimizer = "rowwise_adagrad";
  job.tables["C2"].init_dist = "zeros";
  job.tables["C2"].adagrad_initial_accumulator = 0.5;
  job.tables["C3"].optimizer = "adam";
  job.tables["C3"].adam_beta1 = 0.5;
  job.tables["C3"].adam_beta2 = 0.75;
  job.tables["C3"].adam_eps = 1e-6;
  job.tables["C4"].optimizer = "sgd";

  const std::vector<TableSpec> specs = TableSpecsFromConfig(job);
  ASSERT_EQ(specs.size(), 12u);
  for (uint32_t i = 0; i < 12; ++i) {
    EXPECT_EQ(specs[i].table_id, i);
    EXPECT_EQ(specs[i].name, "C" + std::to_string(i + 1));  // not the map's C1, C10, C11, ...
    EXPECT_EQ(specs[i].dim, 32u);
  }
  EXPECT_EQ(specs[0].optimizer, OptimizerKind::kAdagrad);
  EXPECT_EQ(specs[0].init_dist, InitDist::kUniform);
  EXPECT_EQ(specs[0].lr, 0.05f);
  EXPECT_EQ(specs[0].adagrad_initial_accumulator, 0.1f);
  EXPECT_EQ(specs[1].optimizer, OptimizerKind::kRowwiseAdagrad);
  EXPECT_EQ(specs[1].init_dist, InitDist::kZeros);
  EXPECT_EQ(specs[1].adagrad_initial_accumulator, 0.5f);
  EXPECT_EQ(specs[2].optimizer, OptimizerKind::kAdam);
  EXPECT_EQ(specs[2].adam_beta1, 0.5f);
  EXPECT_EQ(specs[2].adam_beta2, 0.75f);
  EXPECT_EQ(specs[2].adam_eps, 1e-6f);
  EXPECT_EQ(specs[3].optimizer, OptimizerKind::kSgd);
  const TableSpec& s10 = specs[9];
  EXPECT_EQ(s10.optimizer, OptimizerKind::kFtrl);
  EXPECT_EQ(s10.init_dist, InitDist::kNormal);
  EXPECT_EQ(s10.lr, 0.25f);
  EXPECT_EQ(s10.init_scale, 0.01f);
  EXPECT_EQ(s10.admission_min_count, 3);
  EXPECT_EQ(s10.ttl_steps, 100);
  EXPECT_EQ(s10.ftrl_alpha, 0.5f);
  EXPECT_EQ(s10.ftrl_beta, 2.0f);
  EXPECT_EQ(s10.ftrl_l1, 0.125f);
  EXPECT_EQ(s10.ftrl_l2, 0.75f);
}

}  // namespace
}  // namespace tandem::embedding
