// Sparse optimizers, applied element-wise to one touched row (DESIGN §3). The math is the
// textbook one; every operation is a plain fp32 operation in a fixed order (compiled with
// -ffp-contract=off), so the same inputs give the same bits on every machine of a class.
//
//   sgd:             w -= lr * g
//   adagrad:         a += g*g;                  w -= lr * g / sqrt(a)
//   rowwise_adagrad: a += (sum_j g_j*g_j) / dim; w -= lr * g / sqrt(a)        (one a per row)
//   adam (lazy):     p1 *= b1; p2 *= b2; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
//                    w -= lr * (m / (1-p1)) / (sqrt(v / (1-p2)) + eps)   (per-row step count
//                    through the running products p1 = b1^t, p2 = b2^t)
//   ftrl-proximal:   n' = n + g*g; s = (sqrt(n') - sqrt(n)) / alpha; z += g - s*w; n = n';
//                    w = |z| <= l1 ? 0 : -(z - sign(z)*l1) / ((beta + sqrt(n)) / alpha + l2)
// With a zero accumulator and a zero gradient an element is left unchanged (no 0/0).
#pragma once

#include "common/embedding/table_spec.h"

namespace tandem::embedding {

// Applies gradient grad[spec.dim] to row `row` (embedding and state). Does not touch meta.
void ApplySparseUpdate(const TableSpec& spec, const float* grad, RowRef row);

}  // namespace tandem::embedding
