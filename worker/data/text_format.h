// The general delimited text format (data.format: text, issue 18): one record per line, columns
// named by data.text.columns (labels, dense features I1..In, sparse features, or "-" to skip),
// separated by data.text.separator (TSV by default, "," for CSV). A sparse column holds a list of
// ids separated by data.text.list_separator; an empty column is a missing value (dense: 0; a
// single-hot feature: its table's MissingId; a multi-hot one: an empty bag). Ids are decimal
// integers (hashed by value, like Criteo's hex values) or any other token (hashed by its bytes),
// keyed by the feature's table so that features sharing a table share ids. An id of a weighted
// feature may carry its weight as "id:weight" (default 1). A bag longer than its feature's
// max_len keeps its first max_len ids. Parsing allocates nothing per field.
#pragma once

#include <string_view>
#include <vector>

#include "common/config/job_config.h"
#include "common/status.h"
#include "worker/data/record.h"

namespace tandem::data {

struct TextLayout {
  enum class Kind : uint8_t { kSkip, kLabel, kDense, kFeature };
  struct Column {
    Kind kind = Kind::kSkip;
    int index = 0;  // label, dense or feature index
  };
  char separator = '\t';
  char list_separator = ',';
  std::vector<Column> columns;  // in file order

  // The layout data.text.* describes; without data.text.columns: labels, I1..In, then the
  // features in order.
  static StatusOr<TextLayout> FromConfig(const config::JobConfig& job);
};

// Parses one line (without its '\n'; a trailing '\r' is ignored) into `out`. Returns false for a
// malformed line (wrong column count, bad label, bad number, empty id in a list) and then leaves
// `out` as MakeBadSample and sets `*why` to the reason.
bool ParseTextLine(std::string_view line, const TextLayout& layout, const Schema& schema,
                   Sample* out, const char** why = nullptr);

}  // namespace tandem::data
