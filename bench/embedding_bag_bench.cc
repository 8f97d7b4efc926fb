// Embedding-bag benchmark (issue 18): forward + backward of multi-hot bags on one core with the
// CPU backend's EmbeddingBagForward / EmbeddingBagBackward, the way the worker calls them
// (worker/model/embedding_bag.h): over the batch's de-duplicated rows, with an inverse index
// from each lookup to its unique row, the row gradients summed per unique row.
//
// Data (a seed fixes it): batch 2048 samples x 8 features (one table per feature), bag lengths
// uniform in [0, 40] (mean 20), ids Zipf(1.1) over a vocabulary of 1e6 per feature (rank r has
// weight r^-1.1; --dist uniform: uniform over the vocabulary), dim 32. Each batch is
// de-duplicated like Batch::Dedup (worker/data/record.h): unique ids in first-occurrence order
// over the lookups in sample order (FlatIdIndex), and the inverse. Row values and bag gradients
// are small multiples of powers of two (exact in fp32), so that sum pooling gives the same bits
// in any summation order and the PyTorch side (bench/torch_embedding_bag_bench.py) can check its
// results against these (the checksums in the JSON).
//
// Two variants, each with sum and mean pooling:
//  - unique (embedding_bag_{sum,mean}_fwd_bwd_samples_per_s): timed per step, EmbeddingBagForward
//    of the 8 features, then EmbeddingBagBackward of the 8 into per-unique-row gradients. Not
//    timed: the de-duplication (the worker's data pipeline does it in its prefetch thread; the
//    PyTorch side gets the same unique rows and inverse, so neither side pays for it), whose
//    cost is reported apart (dedup_ms_per_batch).
//  - dedup (embedding_bag_{sum,mean}_dedup_fwd_bwd_samples_per_s): the step also de-duplicates
//    each feature's ids (FlatIdIndex, as Batch::Dedup) and gathers the unique rows from a
//    vocab x dim table per feature (the PS pull's copy), from the raw ids to per-unique-row
//    gradients. PyTorch's equivalent: nn.EmbeddingBag(vocab, dim, sparse=True) on the raw ids,
//    forward + backward, then weight.grad.coalesce() (the per-row sums).
//
// Usage: embedding_bag_bench [--batch 2048] [--features 8] [--dim 32] [--max-len 40]
//          [--vocab 1000000] [--dist zipf|uniform] [--zipf 1.1] [--batches 4] [--steps 8]
//          [--runs 7] [--seed 1] [--mode sum|mean|both] [--variant unique|dedup|both]
//          [--write-data FILE]
// A run is --steps steps cycling over --batches distinct batches, after one untimed run; the
// figure is the median over --runs runs of samples/s (a sample = one bag per feature). Prints one
// JSON line per variant and pooling mode (bench_json.h's fields, baseline "none", plus the per-run
// values and checksums); bench/embedding_bag_vs_torch.sh puts the PyTorch figure beside it.
// --write-data writes the batches (offsets, inverse, unique ids) for the PyTorch side.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_json.h"
#include "common/flat_id_index.h"
#include "worker/device/cpu/cpu_backend.h"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Options {
  int64_t batch = 2048;
  int64_t features = 8;
  int64_t dim = 32;
  int64_t max_len = 40;
  int64_t vocab = 1000000;
  std::string dist = "zipf";
  double zipf = 1.1;
  int64_t batches = 4;
  int64_t steps = 8;
  int64_t runs = 7;
  uint64_t seed = 1;
  std::string mode = "both";
  std::string variant = "both";
  std::string write_data;
};

// splitmix64: the same stream on every platform.
struct Rng {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  int64_t Below(int64_t n) { return static_cast<int64_t>(Next() % static_cast<uint64_t>(n)); }
};

// Zipf over ranks 0..n-1 by inverse CDF (binary search in the cumulative weights).
class Zipf {
 public:
  Zipf(int64_t n, double s) : cdf_(static_cast<size_t>(n)) {
    double sum = 0;
    for (int64_t r = 0; r < n; ++r) cdf_[r] = sum += std::pow(static_cast<double>(r + 1), -s);
    for (double& c : cdf_) c /= sum;
  }
  int64_t Sample(Rng& rng) const {
    const double u = rng.Uniform();
    size_t lo = 0, hi = cdf_.size() - 1;
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      if (cdf_[mid] > u)
        hi = mid;
      else
        lo = mid + 1;
    }
    return static_cast<int64_t>(lo);
  }

 private:
  std::vector<double> cdf_;
};

// Exact in fp32: multiples of 1/1024 in [-1, 1) and of 1/256 in [-0.5, 0.5).
float RowValue(int64_t id, int64_t c) {
  return static_cast<float>((id * 7919 + c * 104729) % 2048 - 1024) / 1024.0f;
}
float GradValue(int64_t f, int64_t s, int64_t c) {
  return static_cast<float>((s * 31 + c * 17 + f * 7) % 256 - 128) / 256.0f;
}

// One feature of one batch, de-duplicated.
struct Bags {
  std::vector<int64_t> offsets;     // batch + 1
  std::vector<int64_t> ids;         // the lookups, in sample order
  std::vector<int64_t> unique_ids;  // first-occurrence order
  std::vector<int64_t> inverse;     // per lookup, its position in unique_ids
  std::vector<float> rows;          // unique x dim
  std::vector<float> d_pooled;      // batch x dim
};

// unique_ids and inverse from ids, as Batch::Dedup does per table.
void Dedup(FlatIdIndex* index, Bags* b) {
  index->Reset(b->ids.size());
  b->unique_ids.clear();
  b->inverse.resize(b->ids.size());
  for (size_t k = 0; k < b->ids.size(); ++k) {
    auto [pos, inserted] = index->Insert(static_cast<uint64_t>(b->ids[k]));
    if (inserted) b->unique_ids.push_back(b->ids[k]);
    b->inverse[k] = pos;
  }
}

std::vector<std::vector<Bags>> Generate(const Options& o, double* dedup_ms_per_batch) {
  Rng rng{o.seed};
  const Zipf* zipf = nullptr;
  Zipf table(o.dist == "zipf" ? o.vocab : 1, o.zipf);
  if (o.dist == "zipf") zipf = &table;
  FlatIdIndex index;
  std::vector<std::vector<Bags>> data(o.batches, std::vector<Bags>(o.features));
  double dedup_s = 0;
  for (auto& batch : data) {
    for (int64_t f = 0; f < o.features; ++f) {
      Bags& b = batch[f];
      b.offsets.assign(1, 0);
      for (int64_t s = 0; s < o.batch; ++s) {
        const int64_t len = rng.Below(o.max_len + 1);
        for (int64_t k = 0; k < len; ++k) {
          b.ids.push_back(zipf != nullptr ? zipf->Sample(rng) : rng.Below(o.vocab));
        }
        b.offsets.push_back(static_cast<int64_t>(b.ids.size()));
      }
      const Clock::time_point t0 = Clock::now();
      Dedup(&index, &b);
      dedup_s += Seconds(t0);
      const int64_t u = static_cast<int64_t>(b.unique_ids.size());
      b.rows.resize(u * o.dim);
      for (int64_t r = 0; r < u; ++r) {
        for (int64_t c = 0; c < o.dim; ++c) b.rows[r * o.dim + c] = RowValue(b.unique_ids[r], c);
      }
      b.d_pooled.resize(o.batch * o.dim);
      for (int64_t s = 0; s < o.batch; ++s) {
        for (int64_t c = 0; c < o.dim; ++c) b.d_pooled[s * o.dim + c] = GradValue(f, s, c);
      }
    }
  }
  *dedup_ms_per_batch = dedup_s / static_cast<double>(o.batches) * 1e3;
  return data;
}

bool WriteI64(std::FILE* f, const int64_t* v, size_t n) {
  return std::fwrite(v, sizeof(int64_t), n, f) == n;
}

// Little-endian: "TNDMBAG1", then batch, features, dim, batches, vocab, seed (int64); then per
// batch, per feature: lookups n, unique u, offsets[batch + 1], inverse[n], unique_ids[u].
bool WriteData(const std::string& path, const Options& o,
               const std::vector<std::vector<Bags>>& data) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  bool ok = std::fwrite("TNDMBAG1", 1, 8, f) == 8;
  const int64_t header[] = {o.batch,   o.features, o.dim,
                            o.batches, o.vocab,    static_cast<int64_t>(o.seed)};
  ok = ok && WriteI64(f, header, 6);
  for (const auto& batch : data) {
    for (const Bags& b : batch) {
      const int64_t sizes[] = {static_cast<int64_t>(b.inverse.size()),
                               static_cast<int64_t>(b.unique_ids.size())};
      ok = ok && WriteI64(f, sizes, 2) && WriteI64(f, b.offsets.data(), b.offsets.size()) &&
           WriteI64(f, b.inverse.data(), b.inverse.size()) &&
           WriteI64(f, b.unique_ids.data(), b.unique_ids.size());
    }
  }
  return std::fclose(f) == 0 && ok;
}

struct ModeResult {
  std::vector<double> samples_per_s;
  double pooled_sum = 0, d_rows_sum = 0;  // of batch 0, in double, for the cross-check
};

// The dedup variant's tables: one per feature, vocab x dim, row `id` = RowValue(id, .).
std::vector<std::vector<float>> MakeTables(const Options& o) {
  std::vector<float> table(o.vocab * o.dim);
  for (int64_t id = 0; id < o.vocab; ++id) {
    for (int64_t c = 0; c < o.dim; ++c) table[id * o.dim + c] = RowValue(id, c);
  }
  return std::vector<std::vector<float>>(o.features, table);
}

// tables (the dedup variant): per step and feature, also de-duplicate the lookups (FlatIdIndex, as
// Batch::Dedup) and gather the unique rows from `tables`, as the worker's pipeline and PS pull do.
ModeResult RunMode(device::CpuBackend* be, const Options& o,
                   const std::vector<std::vector<Bags>>& data, bool mean,
                   const std::vector<std::vector<float>>* tables) {
  size_t max_unique = 0, max_lookups = 0;
  for (const auto& batch : data) {
    for (const Bags& b : batch) {
      max_unique = std::max(max_unique, b.unique_ids.size());
      max_lookups = std::max(max_lookups, b.ids.size());
    }
  }
  std::vector<std::vector<float>> pooled(o.features, std::vector<float>(o.batch * o.dim));
  std::vector<std::vector<float>> d_rows(o.features, std::vector<float>(max_unique * o.dim));
  // The dedup variant's per-feature index, unique rows and inverse (capacity kept across steps).
  FlatIdIndex index;
  std::vector<Bags> work(o.features);
  for (Bags& w : work) {
    w.unique_ids.reserve(max_unique);
    w.inverse.reserve(max_lookups);
    w.rows.resize(max_unique * o.dim);
  }
  std::vector<const Bags*> bags(o.features);
  auto step = [&](const std::vector<Bags>& batch) {
    for (int64_t f = 0; f < o.features; ++f) {
      bags[f] = &batch[f];
      if (tables == nullptr) continue;
      Bags& w = work[f];
      const std::vector<int64_t>& ids = batch[f].ids;
      index.Reset(ids.size());
      w.unique_ids.clear();
      w.inverse.resize(ids.size());
      for (size_t k = 0; k < ids.size(); ++k) {
        auto [pos, inserted] = index.Insert(static_cast<uint64_t>(ids[k]));
        if (inserted) {
          std::memcpy(w.rows.data() + w.unique_ids.size() * o.dim,
                      (*tables)[f].data() + ids[k] * o.dim, o.dim * sizeof(float));
          w.unique_ids.push_back(ids[k]);
        }
        w.inverse[k] = pos;
      }
      bags[f] = &w;
    }
    for (int64_t f = 0; f < o.features; ++f) {
      be->EmbeddingBagForward(o.batch, o.dim, bags[f]->rows.data(), batch[f].offsets.data(),
                              bags[f]->inverse.data(), nullptr, mean, pooled[f].data());
    }
    for (int64_t f = 0; f < o.features; ++f) {
      const Bags& b = *bags[f];
      be->EmbeddingBagBackward(o.batch, o.dim, static_cast<int64_t>(b.unique_ids.size()),
                               batch[f].d_pooled.data(), batch[f].offsets.data(), b.inverse.data(),
                               nullptr, mean, d_rows[f].data());
    }
  };
  ModeResult result;
  step(data[0]);
  for (int64_t f = 0; f < o.features; ++f) {
    for (float v : pooled[f]) result.pooled_sum += v;
    const size_t n = data[0][f].unique_ids.size() * o.dim;
    for (size_t i = 0; i < n; ++i) result.d_rows_sum += d_rows[f][i];
  }
  for (int64_t run = -1; run < o.runs; ++run) {  // run -1: warm-up
    const Clock::time_point t0 = Clock::now();
    for (int64_t s = 0; s < o.steps; ++s) step(data[s % o.batches]);
    const double seconds = Seconds(t0);
    if (run >= 0) result.samples_per_s.push_back(o.batch * o.steps / seconds);
  }
  return result;
}

std::string JsonList(const std::vector<double>& v) {
  std::string s = "[";
  char buf[32];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "%s%.1f", i ? ", " : "", v[i]);
    s += buf;
  }
  return s + "]";
}

int Usage() {
  std::fprintf(stderr,
               "usage: embedding_bag_bench [--batch N] [--features N] [--dim N] [--max-len N] "
               "[--vocab N] [--dist zipf|uniform] [--zipf S] [--batches N] [--steps N] "
               "[--runs N] [--seed N] [--mode sum|mean|both] [--variant unique|dedup|both] "
               "[--write-data FILE]\n");
  return 2;
}

int Run(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return Usage();
    const char* v = argv[++i];
    if (a == "--batch")
      o.batch = std::atoll(v);
    else if (a == "--features")
      o.features = std::atoll(v);
    else if (a == "--dim")
      o.dim = std::atoll(v);
    else if (a == "--max-len")
      o.max_len = std::atoll(v);
    else if (a == "--vocab")
      o.vocab = std::atoll(v);
    else if (a == "--dist")
      o.dist = v;
    else if (a == "--zipf")
      o.zipf = std::atof(v);
    else if (a == "--batches")
      o.batches = std::atoll(v);
    else if (a == "--steps")
      o.steps = std::atoll(v);
    else if (a == "--runs")
      o.runs = std::atoll(v);
    else if (a == "--seed")
      o.seed = std::strtoull(v, nullptr, 10);
    else if (a == "--mode")
      o.mode = v;
    else if (a == "--variant")
      o.variant = v;
    else if (a == "--write-data")
      o.write_data = v;
    else
      return Usage();
  }
  if (o.batch < 1 || o.features < 1 || o.dim < 1 || o.max_len < 0 || o.vocab < 1 || o.batches < 1 ||
      o.steps < 1 || o.runs < 1 || (o.dist != "zipf" && o.dist != "uniform") ||
      (o.mode != "sum" && o.mode != "mean" && o.mode != "both") ||
      (o.variant != "unique" && o.variant != "dedup" && o.variant != "both")) {
    return Usage();
  }
  auto be = device::CpuBackend::Create(1);
  if (!be.ok()) {
    std::fprintf(stderr, "%s\n", be.status().ToString().c_str());
    return 1;
  }
  double dedup_ms = 0;
  const std::vector<std::vector<Bags>> data = Generate(o, &dedup_ms);
  int64_t lookups = 0, unique = 0;
  for (const auto& batch : data) {
    for (const Bags& b : batch) {
      lookups += static_cast<int64_t>(b.inverse.size());
      unique += static_cast<int64_t>(b.unique_ids.size());
    }
  }
  const double lookups_per_batch = static_cast<double>(lookups) / static_cast<double>(o.batches);
  const double unique_per_batch = static_cast<double>(unique) / static_cast<double>(o.batches);
  std::fprintf(stderr,
               "embedding_bag_bench: %lld batches of %lld x %lld features, dim %lld, %.0f "
               "lookups and %.0f unique rows per batch (ids %s over %lld), dedup %.2f ms/batch\n",
               static_cast<long long>(o.batches), static_cast<long long>(o.batch),
               static_cast<long long>(o.features), static_cast<long long>(o.dim), lookups_per_batch,
               unique_per_batch, o.dist.c_str(), static_cast<long long>(o.vocab), dedup_ms);
  if (!o.write_data.empty() && !WriteData(o.write_data, o, data)) {
    std::fprintf(stderr, "embedding_bag_bench: cannot write %s\n", o.write_data.c_str());
    return 1;
  }
  std::vector<std::vector<float>> tables;
  if (o.variant != "unique") tables = MakeTables(o);
  for (const bool dedup : {false, true}) {
    if (o.variant != "both" && o.variant != (dedup ? "dedup" : "unique")) continue;
    for (const bool mean : {false, true}) {
      const char* mode = mean ? "mean" : "sum";
      if (o.mode != "both" && o.mode != mode) continue;
      const ModeResult r = RunMode(be->get(), o, data, mean, dedup ? &tables : nullptr);
      const double sps = Median(r.samples_per_s);
      std::printf(
          "{\"bench\": \"embedding_bag_%s%s_fwd_bwd_samples_per_s\", \"value\": %.6g, \"unit\": "
          "\"samples/s\", \"better\": \"higher\", \"baseline\": \"none\", \"baseline_value\": 0, "
          "\"ratio\": 0, \"bags_per_s\": %.6g, \"runs\": %s, \"mode\": \"%s\", \"variant\": "
          "\"%s\", \"batch\": %lld, \"features\": %lld, \"dim\": %lld, \"max_len\": %lld, "
          "\"ids\": \"%s\", \"zipf\": %g, \"vocab\": %lld, \"seed\": %llu, "
          "\"lookups_per_batch\": %.0f, \"unique_per_batch\": %.0f, \"dedup\": \"%s\", "
          "\"dedup_ms_per_batch\": %.3f, \"pooled_sum\": %.17g, \"d_rows_sum\": %.17g, "
          "\"threads\": 1}\n",
          mode, dedup ? "_dedup" : "", sps, sps * static_cast<double>(o.features),
          JsonList(r.samples_per_s).c_str(), mode, dedup ? "dedup" : "unique",
          static_cast<long long>(o.batch), static_cast<long long>(o.features),
          static_cast<long long>(o.dim), static_cast<long long>(o.max_len), o.dist.c_str(),
          o.dist == "zipf" ? o.zipf : 0.0, static_cast<long long>(o.vocab),
          static_cast<unsigned long long>(o.seed), lookups_per_batch, unique_per_batch,
          dedup ? "included (ids -> unique rows + inverse, rows gathered from the table)"
                : "excluded (both sides get unique rows + inverse)",
          dedup_ms, r.pooled_sum, r.d_rows_sum);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) { return tandem::bench::Run(argc, argv); }
