// Scalar reading for the job config (DESIGN §12): plain scalars, integers, floats and booleans
// per the YAML 1.2 core schema, and the per-key Rules they are checked against. Internal to
// common/config; job_config.h is the public API. Stateless functions, safe for concurrent use.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tandem::config::internal {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// What a value must satisfy besides its type. Bounds apply to numbers and int-list elements.
struct Rule {
  double lo = -kInf;
  double hi = kInf;
  bool lo_open = false;
  bool hi_open = false;
  std::string_view choices;  // "a|b|c" makes a string an enum
  bool non_empty = false;    // strings
  size_t min_items = 0;      // lists
  size_t max_items = std::numeric_limits<size_t>::max();
  bool addresses = false;  // every list element is "host:port"
};

// (Assignments, not designated initializers: gcc 12 warns about the members left out.)
constexpr Rule Any() { return {}; }
constexpr Rule Within(double lo, double hi, bool lo_open = false, bool hi_open = false) {
  Rule r;
  r.lo = lo;
  r.hi = hi;
  r.lo_open = lo_open;
  r.hi_open = hi_open;
  return r;
}
constexpr Rule AtLeast(double lo) { return Within(lo, kInf); }
constexpr Rule Above(double lo) { return Within(lo, kInf, /*lo_open=*/true); }
constexpr Rule FromBelow(double lo, double hi) { return Within(lo, hi, false, /*hi_open=*/true); }
constexpr Rule OneOf(std::string_view choices) {
  Rule r;
  r.choices = choices;
  return r;
}
constexpr Rule NonEmpty() {
  Rule r;
  r.non_empty = true;
  return r;
}
constexpr Rule Layers() {
  Rule r = Within(1, 1 << 20);
  r.min_items = 1;
  return r;
}
constexpr Rule Addresses(size_t min, size_t max) {
  Rule r;
  r.min_items = min;
  r.max_items = max;
  r.addresses = true;
  return r;
}

// The shortest text that reads back as `v` (bounds in messages, numbers in ToYaml).
std::string Num(double v);

// `s` in double quotes, with `"` and `\` escaped and control bytes as \xNN.
std::string Quote(std::string_view s);

// What a node is, for "expected X, got Y" messages: "a map", "a list", "nothing" or the quoted
// scalar.
std::string Describe(const YAML::Node& node);

// kInvalidArgument unless `n` list elements satisfy the rule's min_items..max_items.
Status CheckCount(size_t n, const Rule& r);

// Reads one value of a key's type and checks its rule. The pointer only selects the type.
// Errors carry only what is wrong; the caller adds where and which key.
StatusOr<int64_t> ReadValue(const int64_t*, const Rule& rule, const YAML::Node& node);
StatusOr<uint64_t> ReadValue(const uint64_t*, const Rule& rule, const YAML::Node& node);
StatusOr<double> ReadValue(const double*, const Rule& rule, const YAML::Node& node);
StatusOr<bool> ReadValue(const bool*, const Rule& rule, const YAML::Node& node);
StatusOr<std::string> ReadValue(const std::string*, const Rule& rule, const YAML::Node& node);

}  // namespace tandem::config::internal
