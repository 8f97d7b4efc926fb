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
  // The teacher (issue 19): fm (id weights + the pairwise FM term + dense), linear (no pairwise
  // term: what a wide model fits exactly), or cross (fm plus third-order products of the same
  // fields' vectors: what stacked cross layers represent and pairwise dots do not).
  enum class Teacher { kFm, kLinear, kCross };
  Teacher teacher = Teacher::kFm;
  // Task t > 0's id weights: rho * task 0's + sqrt(1 - rho^2) * its own (correlated labels).
  double task_correlation = 0;
};

// data.synthetic.teacher's value as a SyntheticSpec::Teacher (the config validated it).
SyntheticSpec::Teacher TeacherFromName(const std::string& name);

// A record before the feature transform, i.e. what a Criteo or text line spells.
struct RawRecord {
  static constexpr int64_t kMissingDense = INT64_MIN;
  static constexpr uint64_t kMissingCat = UINT64_MAX;
  std::vector<float> labels;   // one per task
  std::vector<double> p;       // the teacher's probability of label 1, per task
  std::vector<int64_t> dense;  // raw integers, kMissingDense for an empty field
  // Raw categorical values, feature after feature: feature f owns cat[offsets[f], offsets[f+1]).
  // A single-hot feature always has one entry, kMissingCat when empty; a multi-hot one has
  // 0..max_len values.
  std::vector<uint64_t> cat;
  std::vector<uint32_t> offsets;
  std::vector<float> weights;  // parallel to cat when the schema has a weighted feature
};

// exp(x) from exact IEEE operations only (range reduction + Taylor series), identical on every
// machine unlike libm; relative error ~1e-15. Used for the teacher's sigmoid.
double DeterministicExp(double x);

class SyntheticGenerator {
 public:
  explicit SyntheticGenerator(const SyntheticSpec& spec);

  const SyntheticSpec& spec() const { return spec_; }
  // Record n of the stream. Multi-hot features get a bag length uniform in [0, max_len] and
  // Zipf ids from their table's id space (features sharing a table share ids and the teacher's
  // weight of each id); the teacher pools a bag's id weights as its feature pools (sum or mean).
  // Task 0's teacher is the Criteo-like one; task t > 0 has its own weights. With the default
  // schema the bits are those of the single-task generator.
  void GenerateRaw(int64_t n, RawRecord* out) const;
  // teacher_p: task 0's probability.
  void Generate(int64_t n, Sample* out, double* teacher_p = nullptr) const;

 private:
  uint64_t SampleZipf(uint64_t u53) const;
  double TeacherLogit(const RawRecord& r, int task) const;

  SyntheticSpec spec_;
  std::vector<double> cdf_;  // Zipf CDF over ranks 0..vocab-1, cdf_.back() == 1
};

// Sets `raw` to Sample form (the transform every reader applies); ids are keyed by the feature's
// table in `schema`.
void ToSample(const Schema& schema, const RawRecord& raw, Sample* out);

// Appends the Criteo TSV line of `raw` (with '\n') to `out`.
void AppendCriteoLine(const RawRecord& raw, std::string* out);

// Appends the general text line (data.format text) of `raw` with columns `layout`.
struct TextLayout;
void AppendTextLine(const RawRecord& raw, const TextLayout& layout, std::string* out);

// AUC of the teacher's probabilities against the drawn labels: the best achievable AUC.
double TeacherAuc(std::span<const double> p, std::span<const float> labels);

// Write records [0, rows) of the generator as Criteo TSV or binary; return the teacher's AUC
// on what was written.
StatusOr<double> WriteSyntheticCriteo(const std::string& path, const SyntheticSpec& spec,
                                      int64_t rows);
StatusOr<double> WriteSyntheticBinary(const std::string& path, const SyntheticSpec& spec,
                                      int64_t rows);
// Binary (version 1 or 2 per the schema, BinaryVersionFor); returns each task's teacher AUC.
StatusOr<std::vector<double>> WriteSyntheticBinaryTasks(const std::string& path,
                                                        const SyntheticSpec& spec, int64_t rows);
// The general text format; returns each task's teacher AUC.
StatusOr<std::vector<double>> WriteSyntheticText(const std::string& path, const SyntheticSpec& spec,
                                                 const TextLayout& layout, int64_t rows);

}  // namespace tandem::data
