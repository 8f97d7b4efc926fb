// The JSON bodies of TF Serving's REST predict API, as `tandem serve` reads and answers them.
//
// Request (one of):
//   {"instances": [{"I1": 3, "C1": "68fd1e64", ...}, ...]}       row form
//   {"inputs": {"I1": [3, 5, ...], "C1": ["68fd1e64", ...], ...}}  column form (equal lengths)
// optionally with "signature_name" (ignored). Features are named by the job's schema: dense
// features I1..In, integers (JSON integers, or strings holding one, as the Criteo TSV writes
// them) before the log transform; categorical features C1..Cm, the hex strings of the TSV (a
// JSON string, or a non-negative integer taken as its hex digits' value). A feature that is
// absent, null or "" is missing, as an empty TSV field is. Each instance becomes exactly the
// sample data::ParseCriteoLine makes of the TSV line holding the same fields, so a served score
// equals `tandem predict`'s for the same record.
//
// A model whose job has a `features` section (issue 18) names its sparse features instead
// (`sparse_names`): each value is one id or a list of ids, JSON strings or non-negative
// integers spelled as the general text format spells them (a weighted feature's id may be
// "id:weight"); dense values I1..In are numbers. Each instance becomes the sample
// data::ParseTextLine makes of the text line holding the same values.
//
// Answer: {"predictions": [[p], ...], "model_version": "S"} for the row form and
// {"outputs": [[p], ...], "model_version": "S"} for the column form (TF Serving's keys), one list
// per instance holding one probability per task, each written "%.9g" (reads back as the same
// float).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "worker/data/record.h"

namespace tandem::serve {

// Why a request was refused: the `reason` label of tandem_serve_errors_total, and the 4xx.
enum class RequestError {
  kNone,
  kMalformedJson,     // 400: not JSON, or nesting deeper than the shapes above
  kWrongShape,        // 400: neither instances nor inputs, or both; columns of unequal length
  kWrongType,         // 400: a feature value of the wrong JSON type
  kBadValue,          // 400: an integer out of range, a string that is not hex or holds a tab
  kUnknownFeature,    // 400: a name outside the schema
  kEmpty,             // 400: zero instances
  kTooManyInstances,  // 413: more than the server's bound
};

// "malformed_json", "wrong_shape", ...: the metric label.
const char* RequestErrorName(RequestError e);
// 400 or 413.
int RequestErrorHttpStatus(RequestError e);

struct ParsedRequest {
  bool columnar = false;              // the inputs form: answer with "outputs"
  std::vector<data::Sample> samples;  // one per instance, in order
};

// Parses `body` for `schema`. On failure returns kInvalidArgument with a message naming the
// instance and feature ("instances[3].C7: not a hex string"), and sets *error; on success sets
// *error to kNone. Never allocates more than a bounded multiple of body.size() plus
// max_instances samples.
StatusOr<ParsedRequest> ParsePredictRequest(std::string_view body, const data::Schema& schema,
                                            int max_instances, RequestError* error,
                                            const std::vector<std::string>& sparse_names = {});

// The answer's body: `probs` holds tasks values per instance, instance-major.
std::string EncodePredictResponse(std::span<const float> probs, int tasks, int64_t version,
                                  bool columnar);

// {"error": message}, as TF Serving words its errors.
std::string EncodeError(std::string_view message);

}  // namespace tandem::serve
