// Embedding-bag pooling of the CUDA backend. The forward gives each (sample, column) to one
// thread; the backward gathers each unique row's lookups with a stable radix sort instead of
// scattering with floating-point atomics, so every row's gradient is summed in lookup order, as
// on the CPU, whatever the timing.
#include <climits>
#include <cub/device/device_radix_sort.cuh>

#include "worker/device/cuda/cuda_kernels.h"
#include "worker/device/cuda/kernel_util.cuh"

namespace tandem::device::cuda {
namespace {

constexpr size_t kAlign = 256;

size_t AlignUp(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// The mean's factor of a bag of `count` lookups, as the CPU backend computes it.
__device__ inline float BagScale(bool mean, int64_t count) {
  return mean && count > 1 ? 1.0f / static_cast<float>(count) : 1.0f;
}

__global__ void BagForward(int64_t batch, int64_t d, const float* rows, const int64_t* offsets,
                           const int64_t* inverse, const float* weights, bool mean, float* pooled) {
  for (int64_t e = GlobalThread(); e < batch * d; e += GridThreads()) {
    const int64_t s = e / d;
    const int64_t c = e % d;
    const int64_t begin = offsets[s];
    const int64_t end = offsets[s + 1];
    float acc = 0.0f;
    for (int64_t k = begin; k < end; ++k) {
      const float x = rows[inverse[k] * d + c];
      acc = __fadd_rn(acc, weights ? __fmul_rn(weights[k], x) : x);
    }
    if (mean && end - begin > 1) acc = __fmul_rn(acc, BagScale(mean, end - begin));
    pooled[e] = acc;
  }
}

// Sort input: key = the lookup's row (out-of-range rows become num_unique and are ignored),
// value = the lookup k itself; samples[k] = its sample, the last s with offsets[s] <= k (empty
// bags share an offset).
__global__ void SortInput(int64_t batch, int64_t lookups, int64_t num_unique,
                          const int64_t* offsets, const int64_t* inverse, unsigned* keys,
                          int* lookup_index, int* samples) {
  for (int64_t k = GlobalThread(); k < lookups; k += GridThreads()) {
    const int64_t row = inverse[k];
    keys[k] = static_cast<unsigned>(row >= 0 && row < num_unique ? row : num_unique);
    int64_t lo = 0, hi = batch + 1;  // first index with offsets[index] > k
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (offsets[mid] <= k) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    samples[k] = static_cast<int>(lo - 1);
    lookup_index[k] = static_cast<int>(k);
  }
}

// [begin[r], end[r]) = the sorted positions of row r (begin = end = 0 when it has none).
__global__ void RowBounds(int64_t lookups, int64_t num_unique, const unsigned* keys, int* begin,
                          int* end) {
  for (int64_t t = GlobalThread(); t < lookups; t += GridThreads()) {
    const unsigned key = keys[t];
    if (key >= static_cast<uint64_t>(num_unique)) continue;  // out-of-range lookup
    if (t == 0 || keys[t - 1] != key) begin[key] = static_cast<int>(t);
    if (t == lookups - 1 || keys[t + 1] != key) end[key] = static_cast<int>(t + 1);
  }
}

// d_rows[r][c] = sum, in lookup order, of (scale(s) * w[k]) * d_pooled[s][c] over the lookups
// k of row r (s = samples[k]).
__global__ void RowGradients(int64_t num_unique, int64_t d, const int* begin, const int* end,
                             const int* sorted_lookups, const int* samples, const float* d_pooled,
                             const int64_t* offsets, const float* weights, bool mean,
                             float* d_rows) {
  for (int64_t e = GlobalThread(); e < num_unique * d; e += GridThreads()) {
    const int64_t r = e / d;
    const int64_t c = e % d;
    float acc = 0.0f;
    for (int t = begin[r]; t < end[r]; ++t) {
      const int k = sorted_lookups[t];
      const int64_t s = samples[k];
      float scale = BagScale(mean, offsets[s + 1] - offsets[s]);
      if (weights) scale = __fmul_rn(scale, weights[k]);
      acc = __fadd_rn(acc, __fmul_rn(scale, d_pooled[s * d + c]));
    }
    d_rows[e] = acc;
  }
}

int EndBit(int64_t num_unique) {  // bits that hold 0 .. num_unique (the sentinel) inclusive
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) <= num_unique) ++bits;
  return bits;
}

// Scratch layout: keys, sorted keys, lookup indices, sorted lookup indices, samples (lookups ints
// each), row begin and end (num_unique ints each), then CUB's temporary storage; each part
// 256-byte aligned.
struct Layout {
  size_t ints_lookups, ints_rows, cub_offset, cub_bytes;
};

cudaError_t MakeLayout(int64_t lookups, int64_t num_unique, Layout* layout) {
  if (lookups <= 0 || lookups > INT_MAX || num_unique >= INT_MAX) return cudaErrorInvalidValue;
  layout->ints_lookups = AlignUp(static_cast<size_t>(lookups) * sizeof(int));
  layout->ints_rows = AlignUp(static_cast<size_t>(num_unique) * sizeof(int));
  layout->cub_offset = 5 * layout->ints_lookups + 2 * layout->ints_rows;
  layout->cub_bytes = 0;
  return cub::DeviceRadixSort::SortPairs(
      nullptr, layout->cub_bytes, static_cast<unsigned*>(nullptr), static_cast<unsigned*>(nullptr),
      static_cast<int*>(nullptr), static_cast<int*>(nullptr), static_cast<int>(lookups), 0,
      EndBit(num_unique));
}

}  // namespace

cudaError_t LaunchEmbeddingBagForward(cudaStream_t stream, int64_t batch, int64_t d,
                                      const float* rows, const int64_t* offsets,
                                      const int64_t* inverse, const float* weights, bool mean,
                                      float* pooled) {
  if (batch <= 0 || d <= 0) return cudaSuccess;
  BagForward<<<BlocksFor(batch * d), kThreads, 0, stream>>>(batch, d, rows, offsets, inverse,
                                                            weights, mean, pooled);
  return cudaGetLastError();
}

cudaError_t EmbeddingBagBackwardScratchBytes(int64_t lookups, int64_t num_unique, size_t* bytes) {
  Layout layout;
  const cudaError_t e = MakeLayout(lookups, num_unique, &layout);
  *bytes = layout.cub_offset + layout.cub_bytes;
  return e;
}

cudaError_t LaunchEmbeddingBagBackward(cudaStream_t stream, int64_t batch, int64_t d,
                                       int64_t num_unique, int64_t lookups, const float* d_pooled,
                                       const int64_t* offsets, const int64_t* inverse,
                                       const float* weights, bool mean, float* d_rows,
                                       void* scratch, size_t scratch_bytes) {
  if (num_unique <= 0 || d <= 0) return cudaSuccess;
  Layout layout;
  cudaError_t e = MakeLayout(lookups, num_unique, &layout);
  if (e != cudaSuccess) return e;
  if (scratch_bytes < layout.cub_offset + layout.cub_bytes) return cudaErrorInvalidValue;
  char* base = static_cast<char*>(scratch);
  unsigned* keys = reinterpret_cast<unsigned*>(base);
  unsigned* sorted_keys = reinterpret_cast<unsigned*>(base + layout.ints_lookups);
  int* lookup_index = reinterpret_cast<int*>(base + 2 * layout.ints_lookups);
  int* sorted_lookups = reinterpret_cast<int*>(base + 3 * layout.ints_lookups);
  int* samples = reinterpret_cast<int*>(base + 4 * layout.ints_lookups);
  int* begin = reinterpret_cast<int*>(base + 5 * layout.ints_lookups);
  int* end = reinterpret_cast<int*>(base + 5 * layout.ints_lookups + layout.ints_rows);

  SortInput<<<BlocksFor(lookups), kThreads, 0, stream>>>(batch, lookups, num_unique, offsets,
                                                         inverse, keys, lookup_index, samples);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  // LSD radix sort is stable: equal rows keep their lookup order, which is the sum order.
  size_t cub_bytes = layout.cub_bytes;
  e = cub::DeviceRadixSort::SortPairs(base + layout.cub_offset, cub_bytes, keys, sorted_keys,
                                      lookup_index, sorted_lookups, static_cast<int>(lookups), 0,
                                      EndBit(num_unique), stream);
  if (e != cudaSuccess) return e;
  if ((e = cudaMemsetAsync(begin, 0, 2 * layout.ints_rows, stream)) != cudaSuccess) return e;
  RowBounds<<<BlocksFor(lookups), kThreads, 0, stream>>>(lookups, num_unique, sorted_keys, begin,
                                                         end);
  RowGradients<<<BlocksFor(num_unique * d), kThreads, 0, stream>>>(
      num_unique, d, begin, end, sorted_lookups, samples, d_pooled, offsets, weights, mean, d_rows);
  return cudaGetLastError();
}

}  // namespace tandem::device::cuda
