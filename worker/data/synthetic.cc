#include "worker/data/synthetic.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>

#include "common/embedding/initializer.h"
#include "common/errno_status.h"
#include "worker/data/auc.h"
#include "worker/data/binary_format.h"
#include "worker/data/text_format.h"

namespace tandem::data {
namespace {

using embedding::Philox4x32;

// Philox stream tags, so no two uses of the seed share counters.
constexpr uint32_t kRecordTag = 0x72656364;   // "recd"
constexpr uint32_t kTeacherTag = 0x74636872;  // "tchr"
constexpr uint32_t kDenseTag = 0x646e7365;    // "dnse"
constexpr uint32_t kBagTag = 0x62616773;      // "bags"

// Teacher shape. The scales put the logit's spread near Criteo's (teacher AUC ~0.8).
constexpr double kBias = -1.0;
constexpr double kIdWeightScale = 0.6;
constexpr double kFmScale = 0.8;
constexpr int kFmFields = 4;  // pairwise term over the first few fields
constexpr int kFmDim = 3;
constexpr double kCrossScale = 2.0;  // the cross teacher's third-order term
constexpr double kDenseScale = 0.3;

double Uniform53(uint32_t hi, uint32_t lo) {  // [0, 1), exact
  return static_cast<double>((uint64_t{hi} << 21) ^ (lo >> 11)) * 0x1p-53;
}
double Signed(uint32_t x) {  // [-1, 1), exact
  return 2.0 * (static_cast<double>(x) * 0x1p-32) - 1.0;
}

std::array<uint32_t, 4> Draw(const SyntheticSpec& s, int64_t n, uint32_t j) {
  const auto u = static_cast<uint64_t>(n);
  return Philox4x32(
      {static_cast<uint32_t>(u), static_cast<uint32_t>(u >> 32), s.stream ^ kRecordTag, j},
      {static_cast<uint32_t>(s.seed), static_cast<uint32_t>(s.seed >> 32)});
}

Status WriteAll(int fd, const std::string& buf, const std::string& path) {
  for (size_t off = 0; off < buf.size();) {
    const ssize_t w = ::write(fd, buf.data() + off, buf.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return ErrnoToStatus(errno, "write " + path);
    off += static_cast<size_t>(w);
  }
  return Status::Ok();
}

std::array<uint32_t, 4> TeacherDraw(uint64_t seed, uint32_t tag, uint32_t field, uint64_t v) {
  return Philox4x32({static_cast<uint32_t>(v), static_cast<uint32_t>(v >> 32), field, tag},
                    {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

}  // namespace

double DeterministicExp(double x) {
  x = std::clamp(x, -700.0, 700.0);
  constexpr double kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10;
  constexpr double kInvLn2 = 1.44269504088896338700e+00;
  const double kd = std::floor(x * kInvLn2 + 0.5);   // floor is exact, not approximated
  const double r = (x - kd * kLn2Hi) - kd * kLn2Lo;  // |r| <= ~0.35
  double sum = 1.0;
  for (int i = 17; i >= 1; --i) sum = 1.0 + sum * r / i;  // Horner form of the Taylor series
  const uint64_t bits = static_cast<uint64_t>(static_cast<int64_t>(kd) + 1023) << 52;
  return sum * std::bit_cast<double>(bits);
}

SyntheticGenerator::SyntheticGenerator(const SyntheticSpec& spec) : spec_(spec) {
  // One table of doubles, built once; sampling is a binary search on a Philox uniform. std::pow
  // runs only here, on the same ranks everywhere.
  cdf_.resize(static_cast<size_t>(std::max<int64_t>(spec.vocab, 1)));
  double total = 0;
  for (size_t k = 0; k < cdf_.size(); ++k) {
    total += 1.0 / std::pow(static_cast<double>(k + 1), spec.zipf);
    cdf_[k] = total;
  }
  for (double& c : cdf_) c /= total;
  cdf_.back() = 1.0;
}

uint64_t SyntheticGenerator::SampleZipf(uint64_t u53) const {
  const double u = static_cast<double>(u53) * 0x1p-53;
  return static_cast<uint64_t>(std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
}

SyntheticSpec::Teacher TeacherFromName(const std::string& name) {
  if (name == "linear") return SyntheticSpec::Teacher::kLinear;
  if (name == "cross") return SyntheticSpec::Teacher::kCross;
  return SyntheticSpec::Teacher::kFm;
}

double SyntheticGenerator::TeacherLogit(const RawRecord& r, int task) const {
  // Task 0 keeps the single-task teacher's tags and bias; later tasks (say, conversions) are
  // rarer and weigh ids by their own draws.
  const uint32_t tag = kTeacherTag + static_cast<uint32_t>(task);
  double logit = task == 0 ? kBias : kBias - 0.5;
  double fm[kFmFields][kFmDim] = {};
  const Schema& schema = spec_.schema;
  const double rho = spec_.task_correlation;
  const double own = std::sqrt(1.0 - rho * rho);  // correctly rounded: the same bits everywhere
  for (int f = 0; f < schema.num_categorical; ++f) {
    const auto table = static_cast<uint32_t>(schema.table_of(f));
    const uint32_t begin = r.offsets[f], end = r.offsets[f + 1];
    if (begin == end) continue;  // an empty bag adds nothing
    double weight = 0, vec[kFmDim] = {};
    const bool weighted = schema.weighted_of(f);
    for (uint32_t k = begin; k < end; ++k) {
      // A missing value is its own "rank" (vocab), with its own weight.
      const uint64_t v = r.cat[k] == RawRecord::kMissingCat ? spec_.vocab : r.cat[k];
      const auto w = TeacherDraw(spec_.seed, tag, table, v);
      const double x = weighted ? static_cast<double>(r.weights[k]) : 1.0;
      double id_weight = Signed(w[0]);
      if (task > 0 && rho != 0) {
        id_weight =
            rho * Signed(TeacherDraw(spec_.seed, kTeacherTag, table, v)[0]) + own * id_weight;
      }
      weight += weighted ? x * id_weight : id_weight;
      for (int d = 0; d < kFmDim; ++d) vec[d] += weighted ? x * Signed(w[1 + d]) : Signed(w[1 + d]);
    }
    // The teacher pools a bag the way its feature does (sum or mean), so the model can match it.
    const double inv =
        end - begin == 1 || !schema.mean_of(f) ? 1.0 : 1.0 / static_cast<double>(end - begin);
    logit += kIdWeightScale * (weight * inv);
    if (f < kFmFields && spec_.teacher != SyntheticSpec::Teacher::kLinear) {
      for (int d = 0; d < kFmDim; ++d) fm[f][d] = kFmScale * (vec[d] * inv);
    }
  }
  for (int a = 0; a < kFmFields; ++a) {
    for (int b = a + 1; b < kFmFields; ++b) {
      for (int d = 0; d < kFmDim; ++d) logit += fm[a][d] * fm[b][d];
    }
  }
  if (spec_.teacher == SyntheticSpec::Teacher::kCross) {
    for (int a = 0; a < kFmFields; ++a) {
      for (int b = a + 1; b < kFmFields; ++b) {
        for (int c = b + 1; c < kFmFields; ++c) {
          for (int d = 0; d < kFmDim; ++d) logit += kCrossScale * fm[a][d] * fm[b][d] * fm[c][d];
        }
      }
    }
  }
  for (size_t j = 0; j < r.dense.size(); ++j) {
    if (r.dense[j] == RawRecord::kMissingDense) continue;
    // log2-like feature from integer arithmetic only: the bit width of the count.
    const double x = std::bit_width(static_cast<uint64_t>(std::max<int64_t>(r.dense[j], 0)));
    const auto w = TeacherDraw(spec_.seed, kDenseTag, static_cast<uint32_t>(j), 0);
    logit += kDenseScale * Signed(w[0]) * (x - 4.0) / 4.0;
  }
  return logit;
}

void SyntheticGenerator::GenerateRaw(int64_t n, RawRecord* out) const {
  const Schema& schema = spec_.schema;
  const int nd = schema.num_dense, nc = schema.num_categorical;
  out->dense.resize(nd);
  out->cat.clear();
  out->weights.clear();
  out->offsets.resize(nc + 1);
  const bool any_weighted = schema.any_weighted();
  uint32_t j = 0;
  for (int d = 0; d < nd; d += 2) {  // two dense fields per Philox call
    const auto w = Draw(spec_, n, j++);
    for (int k = 0; k < 2 && d + k < nd; ++k) {
      const uint32_t u = w[2 * k], v = w[2 * k + 1];
      const int width = static_cast<int>(u % 14);  // log-uniform-ish counts in [0, 2^13)
      int64_t raw = width == 0 ? 0 : static_cast<int64_t>(v >> (32 - width));
      if ((u >> 8) % 10 == 0) raw = RawRecord::kMissingDense;
      if (d + k == 1 && (u >> 16) % 16 == 0) raw = -1;  // Criteo's I2 has negatives
      out->dense[d + k] = raw;
    }
  }
  for (int f = 0; f < nc; ++f) {
    out->offsets[f] = static_cast<uint32_t>(out->cat.size());
    const auto w = Draw(spec_, n, j++);
    const int max_len = schema.max_len_of(f);
    const bool weighted = schema.weighted_of(f);
    if (max_len == 1) {
      const bool missing = f % 3 == 0 && w[2] % 32 == 0;  // some fields have gaps
      out->cat.push_back(missing ? RawRecord::kMissingCat
                                 : SampleZipf((uint64_t{w[0]} << 21) ^ (w[1] >> 11)));
      // Weights k/4 for k in 1..8: exact in float and in decimal text.
      if (any_weighted) out->weights.push_back(weighted ? 0.25f * (1 + (w[3] >> 29)) : 1.0f);
      continue;
    }
    // A bag: its length from this draw, its ids from a stream of their own.
    const uint32_t len = w[3] % static_cast<uint32_t>(max_len + 1);
    for (uint32_t k = 0; k < len; k += 2) {
      const auto b =
          Philox4x32({static_cast<uint32_t>(n), static_cast<uint32_t>(n >> 32),
                      spec_.stream ^ kBagTag, static_cast<uint32_t>(f) << 16 | k},
                     {static_cast<uint32_t>(spec_.seed), static_cast<uint32_t>(spec_.seed >> 32)});
      out->cat.push_back(SampleZipf((uint64_t{b[0]} << 21) ^ (b[1] >> 11)));
      if (k + 1 < len) out->cat.push_back(SampleZipf((uint64_t{b[2]} << 21) ^ (b[3] >> 11)));
    }
    if (any_weighted) {
      for (uint32_t k = 0; k < len; ++k) {
        // The bag's weights from bits of the row draw: k/4 steps, exact in text.
        out->weights.push_back(weighted ? 0.25f * (1 + ((w[(k % 3)] >> (3 * (k / 3) % 29)) & 7))
                                        : 1.0f);
      }
    }
  }
  out->offsets[nc] = static_cast<uint32_t>(out->cat.size());
  out->p.resize(schema.num_labels);
  out->labels.resize(schema.num_labels);
  for (int t = 0; t < schema.num_labels; ++t) {
    out->p[t] = 1.0 / (1.0 + DeterministicExp(-TeacherLogit(*out, t)));
    const auto w = Draw(spec_, n, j++);
    out->labels[t] = Uniform53(w[0], w[1]) < out->p[t] ? 1.0f : 0.0f;
  }
}

void ToSample(const Schema& schema, const RawRecord& raw, Sample* out) {
  out->labels.assign(raw.labels.begin(), raw.labels.end());
  out->weight = 1;
  out->dense.resize(raw.dense.size());
  for (size_t d = 0; d < raw.dense.size(); ++d) {
    out->dense[d] = raw.dense[d] == RawRecord::kMissingDense ? 0.0f : DenseTransform(raw.dense[d]);
  }
  out->cat.resize(raw.cat.size());
  out->offsets.assign(raw.offsets.begin(), raw.offsets.end());
  out->id_weights.assign(raw.weights.begin(), raw.weights.end());
  for (int f = 0; f + 1 < static_cast<int>(raw.offsets.size()); ++f) {
    const int table = schema.table_of(f);
    for (uint32_t k = raw.offsets[f]; k < raw.offsets[f + 1]; ++k) {
      out->cat[k] = raw.cat[k] == RawRecord::kMissingCat ? MissingId(table)
                                                         : CategoricalId(table, raw.cat[k]);
    }
  }
}

void SyntheticGenerator::Generate(int64_t n, Sample* out, double* teacher_p) const {
  thread_local RawRecord raw;  // reused: no allocation per record
  GenerateRaw(n, &raw);
  ToSample(spec_.schema, raw, out);
  if (teacher_p) *teacher_p = raw.p[0];
}

void AppendCriteoLine(const RawRecord& raw, std::string* out) {
  char buf[24];
  out->push_back(raw.labels[0] > 0.5f ? '1' : '0');
  for (int64_t v : raw.dense) {
    out->push_back('\t');
    if (v == RawRecord::kMissingDense) continue;
    const auto r = std::to_chars(buf, buf + sizeof(buf), v);
    out->append(buf, r.ptr);
  }
  for (uint64_t v : raw.cat) {
    out->push_back('\t');
    if (v == RawRecord::kMissingCat) continue;
    const auto r = std::to_chars(buf, buf + sizeof(buf), v, 16);
    out->append(8 - std::min<size_t>(8, r.ptr - buf), '0');  // Criteo spells 8 hex digits
    out->append(buf, r.ptr);
  }
  out->push_back('\n');
}

void AppendTextLine(const RawRecord& raw, const TextLayout& layout, std::string* out) {
  char buf[24];
  for (size_t c = 0; c < layout.columns.size(); ++c) {
    if (c > 0) out->push_back(layout.separator);
    const TextLayout::Column& col = layout.columns[c];
    switch (col.kind) {
      case TextLayout::Kind::kSkip:
        break;
      case TextLayout::Kind::kLabel:
        out->push_back(raw.labels[col.index] > 0.5f ? '1' : '0');
        break;
      case TextLayout::Kind::kDense: {
        const int64_t v = raw.dense[col.index];
        if (v == RawRecord::kMissingDense) break;
        const auto r = std::to_chars(buf, buf + sizeof(buf), v);
        out->append(buf, r.ptr);
        break;
      }
      case TextLayout::Kind::kFeature:
        for (uint32_t k = raw.offsets[col.index]; k < raw.offsets[col.index + 1]; ++k) {
          if (raw.cat[k] == RawRecord::kMissingCat) continue;
          if (k > raw.offsets[col.index]) out->push_back(layout.list_separator);
          const auto r = std::to_chars(buf, buf + sizeof(buf), raw.cat[k]);
          out->append(buf, r.ptr);
          if (!raw.weights.empty() && raw.weights[k] != 1.0f) {
            out->push_back(':');
            const auto rw = std::to_chars(buf, buf + sizeof(buf), raw.weights[k]);
            out->append(buf, rw.ptr);
          }
        }
        break;
    }
  }
  out->push_back('\n');
}

double TeacherAuc(std::span<const double> p, std::span<const float> labels) {
  return Auc(p, labels);
}

StatusOr<double> WriteSyntheticCriteo(const std::string& path, const SyntheticSpec& spec,
                                      int64_t rows) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "create " + path);
  const SyntheticGenerator gen(spec);
  RawRecord raw;
  std::vector<double> p(rows);
  std::vector<float> labels(rows);
  std::string buf;
  Status status;
  for (int64_t n = 0; n < rows && status.ok(); ++n) {
    gen.GenerateRaw(n, &raw);
    p[n] = raw.p[0];
    labels[n] = raw.labels[0];
    AppendCriteoLine(raw, &buf);
    if (buf.size() < (1 << 20) && n + 1 < rows) continue;
    status = WriteAll(fd, buf, path);
    buf.clear();
  }
  if (::close(fd) != 0 && status.ok()) status = Status::Unavailable(path + ": close failed");
  TANDEM_RETURN_IF_ERROR(status);
  return TeacherAuc(p, labels);
}

StatusOr<std::vector<double>> WriteSyntheticText(const std::string& path, const SyntheticSpec& spec,
                                                 const TextLayout& layout, int64_t rows) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "create " + path);
  const SyntheticGenerator gen(spec);
  const int tasks = spec.schema.num_labels;
  RawRecord raw;
  std::vector<std::vector<double>> p(tasks, std::vector<double>(rows));
  std::vector<std::vector<float>> labels(tasks, std::vector<float>(rows));
  std::string buf;
  Status status;
  for (int64_t n = 0; n < rows && status.ok(); ++n) {
    gen.GenerateRaw(n, &raw);
    for (int t = 0; t < tasks; ++t) {
      p[t][n] = raw.p[t];
      labels[t][n] = raw.labels[t];
    }
    AppendTextLine(raw, layout, &buf);
    if (buf.size() < (1 << 20) && n + 1 < rows) continue;
    status = WriteAll(fd, buf, path);
    buf.clear();
  }
  if (::close(fd) != 0 && status.ok()) status = Status::Unavailable(path + ": close failed");
  TANDEM_RETURN_IF_ERROR(status);
  std::vector<double> aucs;
  for (int t = 0; t < tasks; ++t) aucs.push_back(TeacherAuc(p[t], labels[t]));
  return aucs;
}

StatusOr<std::vector<double>> WriteSyntheticBinaryTasks(const std::string& path,
                                                        const SyntheticSpec& spec, int64_t rows) {
  TANDEM_ASSIGN_OR_RETURN(auto writer, BinaryWriter::Create(path, spec.schema));
  const SyntheticGenerator gen(spec);
  const int tasks = spec.schema.num_labels;
  RawRecord raw;
  Sample sample(spec.schema);
  std::vector<std::vector<double>> p(tasks, std::vector<double>(rows));
  std::vector<std::vector<float>> labels(tasks, std::vector<float>(rows));
  for (int64_t n = 0; n < rows; ++n) {
    gen.GenerateRaw(n, &raw);
    ToSample(spec.schema, raw, &sample);  // what Generate does, keeping every task's p
    for (int t = 0; t < tasks; ++t) {
      p[t][n] = raw.p[t];
      labels[t][n] = raw.labels[t];
    }
    TANDEM_RETURN_IF_ERROR(writer->Append(sample));
  }
  TANDEM_RETURN_IF_ERROR(writer->Finish());
  std::vector<double> aucs;
  for (int t = 0; t < tasks; ++t) aucs.push_back(TeacherAuc(p[t], labels[t]));
  return aucs;
}

StatusOr<double> WriteSyntheticBinary(const std::string& path, const SyntheticSpec& spec,
                                      int64_t rows) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<double> aucs, WriteSyntheticBinaryTasks(path, spec, rows));
  return aucs[0];
}

}  // namespace tandem::data
