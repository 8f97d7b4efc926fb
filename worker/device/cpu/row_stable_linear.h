// The GEMM of scoring (Backend::SetRowStableForward): y = x W^T where every y[i][j] is the sum
// over k ascending of x[i][k] * W[j][k], each product and each sum rounded to fp32 (no fused
// multiply-add). A row's result thus depends on that row alone: not on how many rows share the
// call, nor on the row's place among them, nor on the CPU's vector width. A BLAS makes no such
// promise: OpenBLAS picks its kernel by the matrix shape and rounds a row differently by its
// position in the register block, so `tandem serve` scoring one record would not reproduce the
// bits `tandem predict` wrote for it in a batch of 2048.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem::device {

// x: rows x in, w: out x in (row-major), y: rows x out. `wt` is scratch (W transposed).
void RowStableLinear(int64_t rows, int64_t in, int64_t out, const float* x, const float* w,
                     float* y, std::vector<float>* wt);

}  // namespace tandem::device
