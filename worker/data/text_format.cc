#include "worker/data/text_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "worker/data/categorical_id.h"

namespace tandem::data {
namespace {

// Separates hashes of non-numeric tokens from hashes of numbers in the same table.
constexpr uint64_t kTokenSeed = 0x746f6b656e000000ull;  // "token"

bool Fail(const Schema& schema, Sample* out, const char** why, const char* reason) {
  MakeBadSample(schema, out);
  if (why) *why = reason;
  return false;
}

// The id of one list element: decimal integers hash by value (so "007" is 7), other tokens by
// their bytes.
uint64_t TokenId(int table, std::string_view token) {
  uint64_t v = 0;
  if (token.size() <= 18 &&
      std::all_of(token.begin(), token.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    for (char c : token) v = v * 10 + static_cast<uint64_t>(c - '0');
    return internal::CategoricalIdInline(table, v);
  }
  return XXH3_64bits_withSeed(token.data(), token.size(),
                              kTokenSeed ^ static_cast<uint64_t>(table));
}

bool ParseDense(std::string_view field, float* out) {
  if (field.empty()) {
    *out = 0;
    return true;
  }
  int64_t i = 0;
  auto r = std::from_chars(field.data(), field.data() + field.size(), i);
  if (r.ec == std::errc() && r.ptr == field.data() + field.size()) {
    *out = DenseTransform(i);
    return true;
  }
  double d = 0;
  r = std::from_chars(field.data(), field.data() + field.size(), d);
  if (r.ec != std::errc() || r.ptr != field.data() + field.size() || !std::isfinite(d))
    return false;
  // The documented transform, log(1 + max(x, 0)), for non-integer values too.
  *out = static_cast<float>(std::log1p(std::max(d, 0.0)));
  return true;
}

}  // namespace

StatusOr<TextLayout> TextLayout::FromConfig(const config::JobConfig& job) {
  TextLayout layout;
  layout.separator = job.data.text_separator.at(0);
  layout.list_separator = job.data.text_list_separator.at(0);
  std::vector<std::string> names = job.data.text_columns;
  std::vector<std::string> features;
  if (job.features.empty()) {
    for (int64_t i = 1; i <= job.data.num_categorical; ++i)
      features.push_back("C" + std::to_string(i));
  } else {
    for (const auto& [name, f] : job.features) features.push_back(name);
  }
  if (names.empty()) {
    names = job.data.labels;
    for (int64_t i = 1; i <= job.data.num_dense; ++i) names.push_back("I" + std::to_string(i));
    names.insert(names.end(), features.begin(), features.end());
  }
  for (const std::string& name : names) {
    Column c;
    if (name != "-") {
      auto label = std::find(job.data.labels.begin(), job.data.labels.end(), name);
      auto feature = std::find(features.begin(), features.end(), name);
      int dense = -1;
      if (name.size() > 1 && name[0] == 'I') {
        auto r = std::from_chars(name.data() + 1, name.data() + name.size(), dense);
        if (r.ec != std::errc() || r.ptr != name.data() + name.size() || dense < 1 ||
            dense > job.data.num_dense) {
          dense = -1;
        }
      }
      if (label != job.data.labels.end()) {
        c = {Kind::kLabel, static_cast<int>(label - job.data.labels.begin())};
      } else if (feature != features.end()) {
        c = {Kind::kFeature, static_cast<int>(feature - features.begin())};
      } else if (dense >= 1) {
        c = {Kind::kDense, dense - 1};
      } else {
        return Status::InvalidArgument("data.text.columns: unknown column " + name);
      }
    }
    layout.columns.push_back(c);
  }
  return layout;
}

bool ParseTextLine(std::string_view line, const TextLayout& layout, const Schema& schema,
                   Sample* out, const char** why) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const int nc = schema.num_categorical;
  out->labels.resize(schema.num_labels);
  out->dense.assign(schema.num_dense, 0.0f);
  // Features may come in any column order: collect each feature's ids in place, then lay them
  // out feature after feature. Columns are few, so this scan per feature is cheap.
  out->cat.clear();
  out->id_weights.clear();
  const bool any_weighted = schema.any_weighted();
  out->offsets.assign(nc + 1, 0);
  thread_local std::vector<std::string_view> fields;
  fields.clear();
  for (size_t start = 0;;) {
    const size_t end = line.find(layout.separator, start);
    fields.push_back(line.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  if (fields.size() != layout.columns.size()) {
    return Fail(schema, out, why,
                fields.size() < layout.columns.size() ? "too few columns" : "too many columns");
  }
  thread_local std::vector<int> feature_column;
  feature_column.assign(nc, -1);
  for (size_t c = 0; c < fields.size(); ++c) {
    const TextLayout::Column& col = layout.columns[c];
    switch (col.kind) {
      case TextLayout::Kind::kSkip:
        break;
      case TextLayout::Kind::kLabel:
        if (fields[c] != "0" && fields[c] != "1") {
          return Fail(schema, out, why, "bad label (want 0 or 1)");
        }
        out->labels[col.index] = fields[c][0] == '1' ? 1.0f : 0.0f;
        break;
      case TextLayout::Kind::kDense:
        if (!ParseDense(fields[c], &out->dense[col.index])) {
          return Fail(schema, out, why, "bad number in a dense column");
        }
        break;
      case TextLayout::Kind::kFeature:
        feature_column[col.index] = static_cast<int>(c);
        break;
    }
  }
  for (int f = 0; f < nc; ++f) {
    out->offsets[f] = static_cast<uint32_t>(out->cat.size());
    const int table = schema.table_of(f);
    const std::string_view field =
        feature_column[f] < 0 ? std::string_view() : fields[feature_column[f]];
    const bool weighted = schema.weighted_of(f);
    if (field.empty()) {
      // Single-hot: a missing value is an id of its own, as in Criteo. Multi-hot: an empty bag.
      if (schema.max_len_of(f) == 1) {
        out->cat.push_back(MissingId(table));
        if (any_weighted) out->id_weights.push_back(1.0f);
      }
      continue;
    }
    const size_t max_len = static_cast<size_t>(schema.max_len_of(f));
    size_t taken = 0;
    for (size_t start = 0;;) {
      const size_t end = field.find(layout.list_separator, start);
      std::string_view token =
          field.substr(start, end == std::string_view::npos ? end : end - start);
      float weight = 1.0f;
      if (weighted) {
        const size_t colon = token.rfind(':');
        if (colon != std::string_view::npos) {
          const std::string_view w = token.substr(colon + 1);
          const auto r = std::from_chars(w.data(), w.data() + w.size(), weight);
          if (w.empty() || r.ec != std::errc() || r.ptr != w.data() + w.size() ||
              !std::isfinite(weight)) {
            return Fail(schema, out, why, "bad id weight (want id:number)");
          }
          token = token.substr(0, colon);
        }
      }
      if (token.empty()) return Fail(schema, out, why, "empty id in a list column");
      if (taken++ < max_len) {
        out->cat.push_back(TokenId(table, token));
        if (any_weighted) out->id_weights.push_back(weight);
      }
      if (end == std::string_view::npos) break;
      start = end + 1;
    }
  }
  out->offsets[nc] = static_cast<uint32_t>(out->cat.size());
  out->weight = 1;
  return true;
}

}  // namespace tandem::data
