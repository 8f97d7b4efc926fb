// Synthetic data with a known best AUC (DESIGN §2): Zipf-distributed categorical values per
// field, Criteo-like non-negative integer counts, and labels drawn from a seeded hidden teacher
// (per-id weights + an FM-style pairwise term over a few fields + a dense linear term; p =
// sigmoid(logit), label ~ Bernoulli(p)). Record n is a pure function of (seed, stream, n),
// computed in O(1) with Philox4x32 and exact arithmetic only (PROTOCOLS §5.4), so every machine
// generates the same bits.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/data/record.h"

namespace tandem::data {

struct SyntheticSpec {
  uint64_t seed = 1;
  Schema schema;
  int64_t vocab = 100000;  // values per categorical field, >= 1
  double zipf = 1.1;       // exponent > 0
  uint32_t stream = 0;     // 0 = train, 1 = eval: same teacher, disjoint records
};

// A record before the feature transform, i.e. what a Criteo line spells.
struct RawRecord {
  static constexpr int64_t kMissingDense = INT64_MIN;
  static constexpr uint64_t kMissingCat = UINT64_MAX;
  float label = 0;
  double p = 0;                // the teacher's probability of label 1
  std::vector<int64_t> dense;  // raw integers, kMissingDense for an empty field
  std::vector<uint64_t> cat;   // raw categorical values, kMissingCat for an empty field
};

// exp(x) from exact IEEE operations only (range reduction + Taylor series), identical on every
// machine unlike libm; relative error ~1e-15. Used for the teacher's sigmoid.
double DeterministicExp(double x);

class SyntheticGenerator {
 public:
  explicit SyntheticGenerator(const SyntheticSpec& spec);

  const SyntheticSpec& spec() const { return spec_; }
  // Record n of the stream. REQUIRES: out->dense/cat sized for the schema (Raw: any size).
  void GenerateRaw(int64_t n, RawRecord* out) const;
  void Generate(int64_t n, Sample* out, double* teacher_p = nullptr) const;

 private:
  uint64_t SampleZipf(uint64_t u53) const;
  double TeacherLogit(const RawRecord& r) const;

  SyntheticSpec spec_;
  std::vector<double> cdf_;  // Zipf CDF over ranks 0..vocab-1, cdf_.back() == 1
};

// Sets `raw` to Sample form (the transform every reader applies).
void ToSample(const RawRecord& raw, Sample* out);

// Appends the Criteo TSV line of `raw` (with '\n') to `out`.
void AppendCriteoLine(const RawRecord& raw, std::string* out);

// AUC of the teacher's probabilities against the drawn labels: the best achievable AUC.
double TeacherAuc(std::span<const double> p, std::span<const float> labels);

// Write records [0, rows) of the generator as Criteo TSV or binary; return the teacher's AUC
// on what was written.
StatusOr<double> WriteSyntheticCriteo(const std::string& path, const SyntheticSpec& spec,
                                      int64_t rows);
StatusOr<double> WriteSyntheticBinary(const std::string& path, const SyntheticSpec& spec,
                                      int64_t rows);

}  // namespace tandem::data
