#include "common/embedding/sparse_optimizer.h"

#include <cmath>

// Every expression below is written in the order of the header's formulas and evaluated in fp32
// with C++'s left-to-right association; the build uses -ffp-contract=off so no FMA changes the
// bits. std::sqrt(float) is correctly rounded by IEEE 754, hence identical everywhere.
namespace tandem::embedding {
namespace {

void ApplySgd(const TableSpec& spec, const float* g, float* w) {
  for (uint32_t j = 0; j < spec.dim; ++j) w[j] = w[j] - spec.lr * g[j];
}

void ApplyAdagrad(const TableSpec& spec, const float* g, float* w, float* acc) {
  const float lr = spec.lr;
  for (uint32_t j = 0; j < spec.dim; ++j) {
    const float a = acc[j] + g[j] * g[j];
    acc[j] = a;
    // a == 0 only with a zero accumulator and a gradient whose square is 0 (zero, or so small
    // it underflows): the formula would give 0/0 or inf, so the element is left as it is. A
    // select rather than a branch, so the loop vectorizes (the discarded lane's 0/0 is never
    // stored; IEEE sqrt and division give the same bits in vector lanes).
    const float updated = w[j] - lr * g[j] / std::sqrt(a);
    w[j] = a == 0.0f ? w[j] : updated;
  }
}

void ApplyRowwiseAdagrad(const TableSpec& spec, const float* g, float* w, float* acc) {
  float sum_sq = 0.0f;
  for (uint32_t j = 0; j < spec.dim; ++j) sum_sq = sum_sq + g[j] * g[j];
  const float a = acc[0] + sum_sq / static_cast<float>(spec.dim);
  acc[0] = a;
  if (a == 0.0f) return;  // zero accumulator and zero gradient: no 0/0, row unchanged
  const float root = std::sqrt(a);
  for (uint32_t j = 0; j < spec.dim; ++j) w[j] = w[j] - spec.lr * g[j] / root;
}

// Lazy Adam: the step count is per row, carried as the running products p1 = b1^t and
// p2 = b2^t (PROTOCOLS §5.6), so a row's bias correction depends only on how often it was
// updated, never on the global step or wall time.
void ApplyAdam(const TableSpec& spec, const float* g, float* w, float* state) {
  const uint32_t dim = spec.dim;
  const float b1 = spec.adam_beta1;
  const float b2 = spec.adam_beta2;
  float* m = state;
  float* v = state + dim;
  float& p1 = state[2 * dim];
  float& p2 = state[2 * dim + 1];
  p1 = p1 * b1;
  p2 = p2 * b2;
  const float correction1 = 1.0f - p1;
  const float correction2 = 1.0f - p2;
  for (uint32_t j = 0; j < dim; ++j) {
    m[j] = b1 * m[j] + (1.0f - b1) * g[j];
    v[j] = b2 * v[j] + (1.0f - b2) * g[j] * g[j];
    // eps > 0 keeps the denominator positive, so there is no 0/0 here.
    w[j] = w[j] - spec.lr * (m[j] / correction1) / (std::sqrt(v[j] / correction2) + spec.adam_eps);
  }
}

// FTRL-proximal (McMahan et al., KDD'13, per-coordinate learning rates).
void ApplyFtrl(const TableSpec& spec, const float* g, float* w, float* state) {
  const uint32_t dim = spec.dim;
  const float alpha = spec.ftrl_alpha;
  const float l1 = spec.ftrl_l1;
  float* z = state;
  float* n = state + dim;
  for (uint32_t j = 0; j < dim; ++j) {
    const float n_new = n[j] + g[j] * g[j];
    // With n' == 0 (no gradient yet) the closed form would replace w by 0, or divide 0 by 0 when
    // beta == l2 == 0: leave the element (and its state) unchanged instead.
    if (n_new == 0.0f) continue;
    const float sqrt_n_new = std::sqrt(n_new);
    const float s = (sqrt_n_new - std::sqrt(n[j])) / alpha;
    z[j] = z[j] + (g[j] - s * w[j]);
    n[j] = n_new;
    if (std::fabs(z[j]) <= l1) {
      w[j] = 0.0f;
    } else {
      const float sign_z = z[j] > 0.0f ? 1.0f : -1.0f;
      w[j] = -(z[j] - sign_z * l1) / ((spec.ftrl_beta + sqrt_n_new) / alpha + spec.ftrl_l2);
    }
  }
}

}  // namespace

void ApplySparseUpdate(const TableSpec& spec, const float* grad, RowRef row) {
  float* w = row.embedding();
  float* state = row.state(spec.dim);
  switch (spec.optimizer) {
    case OptimizerKind::kSgd:
      ApplySgd(spec, grad, w);
      return;
    case OptimizerKind::kAdagrad:
      ApplyAdagrad(spec, grad, w, state);
      return;
    case OptimizerKind::kRowwiseAdagrad:
      ApplyRowwiseAdagrad(spec, grad, w, state);
      return;
    case OptimizerKind::kAdam:
      ApplyAdam(spec, grad, w, state);
      return;
    case OptimizerKind::kFtrl:
      ApplyFtrl(spec, grad, w, state);
      return;
  }
}

}  // namespace tandem::embedding
