#include "serve/request.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <utility>

#include "worker/data/criteo_reader.h"
#include "worker/data/text_format.h"

namespace tandem::serve {
namespace {

using Json = nlohmann::json;

// The accepted shapes nest three deep ({"instances": [{...}]}, {"inputs": {"I1": [...]}}); the
// slack lets a misplaced array or object come back as kWrongType, while a hostile "[[[[...]]]]"
// is refused before the parser builds (and tears down) a tree that deep.
constexpr int kMaxDepth = 8;

// A categorical value of more hex digits cannot be a 64-bit value without leading zeros, and
// bounding it keeps every TSV field short.
constexpr size_t kMaxHexDigits = 16;

// Echoed names come from the client: cap them so an error answer stays small.
constexpr size_t kMaxEchoedName = 64;

// True when the containers of `body` nest deeper than kMaxDepth. Tracks strings (and their
// escapes) as the JSON lexer does, so brackets inside a string do not count. On text that is not
// JSON this may miscount, but only past the first error, where the parser stops anyway.
bool NestsTooDeep(std::string_view body) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // an escaped quote does not end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

const char* TypeName(const Json& v) {
  switch (v.type()) {
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_float:
      return "a float";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "a list";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::binary:
      return "binary";
    default:
      return "a number";
  }
}

std::string Truncated(std::string_view name) {
  if (name.size() <= kMaxEchoedName) return std::string(name);
  return std::string(name.substr(0, kMaxEchoedName)) + "...";
}

// "I3" or "C7" (or the feature's name) for feature slot f (dense slots first).
std::string FeatureName(int f, const data::Schema& schema, const std::vector<std::string>& names) {
  if (f >= schema.num_dense && !names.empty()) return names[f - schema.num_dense];
  return f < schema.num_dense ? "I" + std::to_string(f + 1)
                              : "C" + std::to_string(f - schema.num_dense + 1);
}

// Slot of feature `name` (I1..In, then C1..Cm or the sparse names), or -1. Only the exact
// spelling counts: no leading zeros, no lower case, so one feature has one name.
int FeatureSlot(std::string_view name, const data::Schema& schema,
                const std::vector<std::string>& names) {
  if (!names.empty()) {
    const auto it = std::find(names.begin(), names.end(), name);
    if (it != names.end()) return schema.num_dense + static_cast<int>(it - names.begin());
  }
  if (name.size() < 2 || name.size() > 10 || name[1] == '0') return -1;
  int limit;
  int base;
  if (name[0] == 'I') {
    limit = schema.num_dense;
    base = 0;
  } else if (name[0] == 'C' && names.empty()) {
    limit = schema.num_categorical;
    base = schema.num_dense;
  } else {
    return -1;
  }
  int64_t k = 0;
  const auto r = std::from_chars(name.data() + 1, name.data() + name.size(), k);
  if (r.ec != std::errc() || r.ptr != name.data() + name.size()) return -1;
  if (k < 1 || k > limit) return -1;
  return base + static_cast<int>(k - 1);
}

template <typename T>
void AppendInt(T v, int base, std::string* out) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v, base);
  out->append(buf, r.ptr);
}

// Appends the TSV text of dense value `v` (null: missing) to *line. On failure returns the
// error class and sets *why.
RequestError AppendDense(const Json* v, std::string* line, const char** why) {
  if (v == nullptr || v->is_null()) return RequestError::kNone;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    // The TSV reader reads dense fields as int64; say so here rather than as a bad line.
    if (u > static_cast<uint64_t>(INT64_MAX)) {
      *why = "integer out of range";
      return RequestError::kBadValue;
    }
    AppendInt(u, 10, line);
    return RequestError::kNone;
  }
  if (v->is_number_integer()) {
    AppendInt(v->get<int64_t>(), 10, line);
    return RequestError::kNone;
  }
  if (v->is_string()) {
    const std::string& s = v->get_ref<const std::string&>();
    if (s.empty()) return RequestError::kNone;
    // from_chars takes exactly an optional '-' and digits, and the int64 range: the text and
    // range ParseCriteoLine accepts for a dense field.
    int64_t x = 0;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), x);
    if (r.ec == std::errc::result_out_of_range && r.ptr == s.data() + s.size()) {
      *why = "integer out of range";
      return RequestError::kBadValue;
    }
    if (r.ec != std::errc() || r.ptr != s.data() + s.size()) {
      *why = "not a decimal integer";
      return RequestError::kBadValue;
    }
    line->append(s);
    return RequestError::kNone;
  }
  // Floats too, even 3.0: the TSV holds integers, and a client sending floats has the wrong
  // feature pipeline in front of this server.
  *why = "want an integer or a string holding one";
  return RequestError::kWrongType;
}

// As AppendDense, for a categorical value: hex digits, or a non-negative integer written as such.
RequestError AppendCategorical(const Json* v, std::string* line, const char** why) {
  if (v == nullptr || v->is_null()) return RequestError::kNone;
  if (v->is_number_unsigned()) {
    AppendInt(v->get<uint64_t>(), 16, line);
    return RequestError::kNone;
  }
  if (v->is_number_integer()) {
    const int64_t x = v->get<int64_t>();
    if (x < 0) {
      *why = "negative integer";
      return RequestError::kBadValue;
    }
    AppendInt(static_cast<uint64_t>(x), 16, line);
    return RequestError::kNone;
  }
  if (v->is_string()) {
    const std::string& s = v->get_ref<const std::string&>();
    if (s.size() > kMaxHexDigits) {
      *why = "more than 16 hex digits";
      return RequestError::kBadValue;
    }
    for (const char c : s) {
      const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
      if (!hex) {
        *why = "not a hex string";
        return RequestError::kBadValue;
      }
    }
    line->append(s);
    return RequestError::kNone;
  }
  *why = "want a hex string or a non-negative integer";
  return RequestError::kWrongType;
}

// The text-format spelling of a dense value: a JSON number (or a string holding one).
RequestError AppendDenseText(const Json* v, std::string* line, const char** why) {
  if (v == nullptr || v->is_null()) return RequestError::kNone;
  if (v->is_number_integer() || v->is_number_unsigned()) {
    line->append(v->dump());
    return RequestError::kNone;
  }
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (!std::isfinite(d)) {
      *why = "not a finite number";
      return RequestError::kBadValue;
    }
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof(buf), d);
    line->append(buf, r.ptr);
    return RequestError::kNone;
  }
  *why = "want a number";
  return RequestError::kWrongType;
}

// One id of a feature-set model: a non-empty string without separators, or a non-negative
// integer (decimal, as the text format reads it).
RequestError AppendId(const Json& v, std::string* line, const char** why) {
  if (v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0)) {
    AppendInt(v.get<uint64_t>(), 10, line);
    return RequestError::kNone;
  }
  if (v.is_number_integer()) {
    *why = "negative integer";
    return RequestError::kBadValue;
  }
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s.empty() || s.find_first_of("\t\n\r,") != std::string::npos) {
      *why = "an id must be non-empty, without tabs, newlines or commas";
      return RequestError::kBadValue;
    }
    line->append(s);
    return RequestError::kNone;
  }
  *why = "want an id (string or non-negative integer) or a list of them";
  return RequestError::kWrongType;
}

// A sparse value of a feature-set model: one id or a list of ids (null, "" or [] is missing).
RequestError AppendIds(const Json* v, std::string* line, const char** why) {
  if (v == nullptr || v->is_null()) return RequestError::kNone;
  if (v->is_string() && v->get_ref<const std::string&>().empty()) return RequestError::kNone;
  if (!v->is_array()) return AppendId(*v, line, why);
  for (size_t k = 0; k < v->size(); ++k) {
    if (k > 0) line->push_back(',');
    const RequestError e = AppendId((*v)[k], line, why);
    if (e != RequestError::kNone) return e;
  }
  return RequestError::kNone;
}

class RequestParser {
 public:
  RequestParser(const data::Schema& schema, int max_instances,
                const std::vector<std::string>& names)
      : schema_(schema),
        max_instances_(max_instances),
        num_slots_(schema.num_dense + schema.num_categorical),
        names_(names),
        slots_(num_slots_, nullptr) {
    // The text layout of a feature-set model: labels, I1..In, then the features in order.
    layout_.columns.assign(schema.num_labels, {data::TextLayout::Kind::kLabel, 0});
    for (int l = 0; l < schema.num_labels; ++l) layout_.columns[l].index = l;
    for (int d = 0; d < schema.num_dense; ++d)
      layout_.columns.push_back({data::TextLayout::Kind::kDense, d});
    for (int f = 0; f < schema.num_categorical; ++f)
      layout_.columns.push_back({data::TextLayout::Kind::kFeature, f});
  }

  StatusOr<ParsedRequest> Parse(const Json& doc) {
    if (!doc.is_object()) return Fail(RequestError::kWrongShape, "body is not a JSON object");
    const Json* instances = nullptr;
    const Json* inputs = nullptr;
    for (const auto& [key, value] : doc.items()) {
      if (key == "instances") {
        instances = &value;
      } else if (key == "inputs") {
        inputs = &value;
      } else if (key != "signature_name") {
        return Fail(RequestError::kWrongShape,
                    "unexpected key \"" + Truncated(key) + "\" (want \"instances\" or \"inputs\")");
      }
    }
    if (instances != nullptr && inputs != nullptr) {
      return Fail(RequestError::kWrongShape, "both \"instances\" and \"inputs\"");
    }
    if (instances != nullptr) return ParseRows(*instances);
    if (inputs != nullptr) return ParseColumns(*inputs);
    return Fail(RequestError::kWrongShape, "neither \"instances\" nor \"inputs\"");
  }

  RequestError error() const { return error_; }

 private:
  Status Fail(RequestError e, std::string message) {
    error_ = e;
    return Status::InvalidArgument(message);
  }

  // Checks the instance count against the bound before any sample is built.
  Status CheckCount(size_t n, const char* what) {
    if (n == 0) return Fail(RequestError::kEmpty, std::string(what) + ": no instances");
    if (n > static_cast<size_t>(std::max(max_instances_, 0))) {
      return Fail(RequestError::kTooManyInstances, std::string(what) + ": " + std::to_string(n) +
                                                       " instances, more than " +
                                                       std::to_string(max_instances_));
    }
    return Status::Ok();
  }

  StatusOr<ParsedRequest> ParseRows(const Json& instances) {
    if (!instances.is_array()) {
      return Fail(RequestError::kWrongShape, "instances: not a list");
    }
    TANDEM_RETURN_IF_ERROR(CheckCount(instances.size(), "instances"));
    ParsedRequest out;
    out.samples.reserve(instances.size());
    for (size_t i = 0; i < instances.size(); ++i) {
      const Json& row = instances[i];
      // Built only for an error message: the good path allocates nothing per instance here.
      const auto place = [&] { return "instances[" + std::to_string(i) + "]"; };
      if (!row.is_object()) return Fail(RequestError::kWrongShape, place() + ": not an object");
      std::fill(slots_.begin(), slots_.end(), nullptr);
      for (const auto& [name, value] : row.items()) {
        const int f = FeatureSlot(name, schema_, names_);
        if (f < 0) {
          return Fail(RequestError::kUnknownFeature,
                      place() + "." + Truncated(name) + ": unknown feature");
        }
        slots_[f] = &value;
      }
      TANDEM_RETURN_IF_ERROR(BuildSample(
          [&](int f) { return f < 0 ? place() : place() + "." + FeatureName(f, schema_, names_); },
          &out));
    }
    return out;
  }

  StatusOr<ParsedRequest> ParseColumns(const Json& inputs) {
    if (!inputs.is_object()) return Fail(RequestError::kWrongShape, "inputs: not an object");
    std::vector<const Json*> columns(num_slots_, nullptr);
    size_t n = 0;
    const Json* first = nullptr;
    std::string first_name;
    for (const auto& [name, column] : inputs.items()) {
      const int f = FeatureSlot(name, schema_, names_);
      if (f < 0) {
        return Fail(RequestError::kUnknownFeature,
                    "inputs." + Truncated(name) + ": unknown feature");
      }
      if (!column.is_array()) {
        return Fail(RequestError::kWrongShape, "inputs." + name + ": not a list");
      }
      if (first == nullptr) {
        first = &column;
        first_name = name;
        n = column.size();
      } else if (column.size() != n) {
        return Fail(RequestError::kWrongShape,
                    "inputs." + name + ": " + std::to_string(column.size()) +
                        " values, but inputs." + first_name + " has " + std::to_string(n));
      }
      columns[f] = &column;
    }
    TANDEM_RETURN_IF_ERROR(CheckCount(n, "inputs"));
    ParsedRequest out;
    out.columnar = true;
    out.samples.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      for (int f = 0; f < num_slots_; ++f) {
        slots_[f] = columns[f] != nullptr ? &(*columns[f])[i] : nullptr;
      }
      TANDEM_RETURN_IF_ERROR(BuildSample(
          [&](int f) {
            const std::string index = "[" + std::to_string(i) + "]";
            return f < 0 ? "inputs" + index : "inputs." + FeatureName(f, schema_, names_) + index;
          },
          &out));
    }
    return out;
  }

  // Writes slots_ as the line a reader would read and parses it as that reader does, so the
  // sample is the one `tandem predict` would score: the Criteo TSV line "0\tI1..\tC1..", or for
  // a feature-set model the general text line (labels 0, I1..In, the features). `where(f)` names
  // slot f in error messages, and the instance itself for f = -1.
  template <typename Where>
  Status BuildSample(const Where& where, ParsedRequest* out) {
    const bool text = !names_.empty();
    line_.clear();
    for (int l = 0; l < (text ? schema_.num_labels : 1); ++l) line_.append(l == 0 ? "0" : "\t0");
    for (int f = 0; f < num_slots_; ++f) {
      line_.push_back('\t');
      const char* why = "";
      const bool dense = f < schema_.num_dense;
      const RequestError e = dense
                                 ? (text ? AppendDenseText : AppendDense)(slots_[f], &line_, &why)
                                 : (text ? AppendIds : AppendCategorical)(slots_[f], &line_, &why);
      if (e != RequestError::kNone) {
        std::string message = where(f) + ": " + why;
        if (e == RequestError::kWrongType) message += std::string(", got ") + TypeName(*slots_[f]);
        return Fail(e, std::move(message));
      }
    }
    data::Sample& sample = out->samples.emplace_back(schema_);
    const char* why = nullptr;
    const bool parsed = text ? data::ParseTextLine(line_, layout_, schema_, &sample, &why)
                             : data::ParseCriteoLine(line_, schema_, &sample, &why);
    if (!parsed) return Fail(RequestError::kBadValue, where(-1) + ": " + (why ? why : "bad value"));
    return Status::Ok();
  }

  const data::Schema schema_;
  const int max_instances_;
  const int num_slots_;
  const std::vector<std::string> names_;  // sparse feature names; empty = Criteo's
  data::TextLayout layout_;
  std::vector<const Json*> slots_;  // this instance's value per feature slot, null if absent
  std::string line_;                // reused TSV buffer
  RequestError error_ = RequestError::kNone;
};

}  // namespace

const char* RequestErrorName(RequestError e) {
  switch (e) {
    case RequestError::kNone:
      return "none";
    case RequestError::kMalformedJson:
      return "malformed_json";
    case RequestError::kWrongShape:
      return "wrong_shape";
    case RequestError::kWrongType:
      return "wrong_type";
    case RequestError::kBadValue:
      return "bad_value";
    case RequestError::kUnknownFeature:
      return "unknown_feature";
    case RequestError::kEmpty:
      return "empty";
    case RequestError::kTooManyInstances:
      return "too_many_instances";
  }
  return "unknown";
}

int RequestErrorHttpStatus(RequestError e) {
  return e == RequestError::kTooManyInstances ? 413 : 400;
}

StatusOr<ParsedRequest> ParsePredictRequest(std::string_view body, const data::Schema& schema,
                                            int max_instances, RequestError* error,
                                            const std::vector<std::string>& sparse_names) {
  RequestError ignored;
  if (error == nullptr) error = &ignored;
  *error = RequestError::kNone;
  if (NestsTooDeep(body)) {
    *error = RequestError::kMalformedJson;
    return Status::InvalidArgument("JSON nests deeper than " + std::to_string(kMaxDepth) +
                                   " levels");
  }
  // nlohmann reports through exceptions even with allow_exceptions off (bad_alloc aside, e.g. a
  // type_error from a bug below); none may leave this file.
  Json doc;
  try {
    doc = Json::parse(body.begin(), body.end(), /*cb=*/nullptr, /*allow_exceptions=*/false);
  } catch (const Json::exception& e) {
    *error = RequestError::kMalformedJson;
    return Status::InvalidArgument(std::string("malformed JSON: ") + e.what());
  }
  if (doc.is_discarded()) {
    *error = RequestError::kMalformedJson;
    return Status::InvalidArgument("malformed JSON");
  }
  RequestParser parser(schema, max_instances, sparse_names);
  try {
    StatusOr<ParsedRequest> parsed = parser.Parse(doc);
    *error = parser.error();
    return parsed;
  } catch (const Json::exception& e) {
    *error = RequestError::kWrongShape;
    return Status::InvalidArgument(std::string("unreadable request: ") + e.what());
  }
}

std::string EncodePredictResponse(std::span<const float> probs, int tasks, int64_t version,
                                  bool columnar) {
  const size_t n = tasks > 0 ? probs.size() / static_cast<size_t>(tasks) : 0;
  std::string out;
  out.reserve(64 + probs.size() * 18);
  out += columnar ? "{\"outputs\": [" : "{\"predictions\": [";
  char buf[32];
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += ',';
    out += '[';
    for (int t = 0; t < tasks; ++t) {
      if (t > 0) out += ',';
      const float p = probs[i * tasks + t];
      if (!std::isfinite(p)) {
        out += "null";  // JSON has no NaN or infinity
        continue;
      }
      // Nine significant digits read back as the same float.
      const int len = std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(p));
      out.append(buf, static_cast<size_t>(len));
    }
    out += ']';
  }
  out += "], \"model_version\": \"";
  out += std::to_string(version);
  out += "\"}";
  return out;
}

std::string EncodeError(std::string_view message) {
  Json j = Json::object();
  j["error"] = std::string(message);
  // Replace rather than throw on invalid UTF-8: messages may quote (truncated) client text.
  return j.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

}  // namespace tandem::serve
