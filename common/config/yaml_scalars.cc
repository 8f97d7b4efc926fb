// Scalars, YAML 1.2 core schema (not yaml-cpp's YAML 1.1 `as<>`, which takes `yes` as a bool),
// and the checks of a key's Rule.
#include "common/config/yaml_scalars.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <system_error>

#include "common/config/job_config.h"  // ValidateAddress

namespace tandem::config::internal {
namespace {

// The text of a plain scalar, as numbers and booleans must be: a quoted "5" is a string. An
// explicit core tag (`!!int 5`) is accepted when it names one of `tags` ("int|float").
StatusOr<std::string> PlainScalar(const YAML::Node& node, std::string_view what,
                                  std::string_view tags) {
  std::string expected = "expected " + std::string(what) + ", got ";
  if (!node.IsScalar()) return Status::InvalidArgument(expected + Describe(node));
  if (node.Tag() == "!") {
    return Status::InvalidArgument(expected + "the quoted string " + Quote(node.Scalar()));
  }
  constexpr std::string_view kCore = "tag:yaml.org,2002:";
  std::string_view tag = node.Tag();
  bool core =
      tag.starts_with(kCore) && tag.size() > kCore.size() &&
      ("|" + std::string(tags) + "|").find("|" + std::string(tag.substr(kCore.size())) + "|") !=
          std::string::npos;
  if (tag != "?" && !core) {
    return Status::InvalidArgument(expected + "a value tagged " + node.Tag());
  }
  return node.Scalar();
}

// Parses YAML 1.2 core integers, [-+]?[0-9]+ | 0x[0-9a-fA-F]+ | 0o[0-7]+, as sign and magnitude.
Status ParseIntText(std::string_view s, uint64_t* magnitude, bool* negative) {
  std::string original(s);
  bool has_sign = !s.empty() && (s[0] == '-' || s[0] == '+');
  *negative = has_sign && s[0] == '-';
  if (has_sign) s.remove_prefix(1);
  int base = 10;
  if (!has_sign && (s.starts_with("0x") || s.starts_with("0o"))) {
    base = s[1] == 'x' ? 16 : 8;
    s.remove_prefix(2);
  }
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *magnitude, base);
  if (s.empty() || end != s.data() + s.size() || ec == std::errc::invalid_argument) {
    return Status::InvalidArgument("expected an integer, got " + Quote(original));
  }
  if (ec == std::errc::result_out_of_range) {
    return Status::InvalidArgument(original + " does not fit in 64 bits");
  }
  return Status::Ok();
}

// YAML 1.2 core float syntax without .inf/.nan: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool IsFloatText(std::string_view s) {
  size_t i = 0;
  auto skip_sign = [&] { i += i < s.size() && (s[i] == '-' || s[i] == '+'); };
  auto digits = [&] {
    size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i - start;
  };
  skip_sign();
  size_t mantissa = digits();
  if (i < s.size() && s[i] == '.') mantissa += (++i, digits());
  if (mantissa == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    skip_sign();
    if (digits() == 0) return false;
  }
  return i == s.size();
}

// ---------------------------------------------------------------------------------------------
// Rules

std::string RangeText(const Rule& r) {
  bool has_lo = r.lo != -kInf;
  bool has_hi = r.hi != kInf;
  if (has_lo && has_hi) {
    return std::string("in ") + (r.lo_open ? "(" : "[") + Num(r.lo) + ", " + Num(r.hi) +
           (r.hi_open ? ")" : "]");
  }
  if (has_lo) return (r.lo_open ? "> " : ">= ") + Num(r.lo);
  return (r.hi_open ? "< " : "<= ") + Num(r.hi);
}

// `got` is the value as the user wrote it, so that error messages echo their text.
Status CheckRange(double v, const Rule& r, std::string_view got) {
  bool ok = (r.lo_open ? v > r.lo : v >= r.lo) && (r.hi_open ? v < r.hi : v <= r.hi);
  if (ok) return Status::Ok();
  return Status::InvalidArgument("must be " + RangeText(r) + ", got " + std::string(got));
}

Status CheckChoice(const std::string& v, const Rule& r) {
  if (r.non_empty && v.empty()) return Status::InvalidArgument("must not be empty");
  if (r.choices.empty()) return Status::Ok();
  std::string_view rest = r.choices;
  while (!rest.empty()) {
    size_t bar = rest.find('|');
    if (rest.substr(0, bar) == v) return Status::Ok();
    rest = bar == std::string_view::npos ? "" : rest.substr(bar + 1);
  }
  std::string list(r.choices);
  std::replace(list.begin(), list.end(), '|', ',');
  return Status::InvalidArgument("must be one of {" + list + "}, got " + Quote(v));
}

}  // namespace

std::string Num(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round-trip form
  return std::string(buf, end);
}

std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[(c >> 4) & 0xf];
      out += kHex[c & 0xf];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return Quote(node.Scalar());
    default:
      return "nothing";
  }
}

Status CheckCount(size_t n, const Rule& r) {
  if (n >= r.min_items && n <= r.max_items) return Status::Ok();
  std::string what = r.addresses ? " address" : " entry";
  std::string need = r.min_items == r.max_items ? "exactly " + std::to_string(r.min_items)
                     : n < r.min_items          ? "at least " + std::to_string(r.min_items)
                                                : "at most " + std::to_string(r.max_items);
  return Status::InvalidArgument("needs " + need + what + (r.min_items == 1 ? "" : "s") + ", got " +
                                 std::to_string(n));
}

StatusOr<int64_t> ReadValue(const int64_t*, const Rule& rule, const YAML::Node& node) {
  TANDEM_ASSIGN_OR_RETURN(std::string text, PlainScalar(node, "an integer", "int"));
  uint64_t magnitude = 0;
  bool negative = false;
  TANDEM_RETURN_IF_ERROR(ParseIntText(text, &magnitude, &negative));
  if (magnitude > uint64_t{std::numeric_limits<int64_t>::max()} + negative) {
    return Status::InvalidArgument(text + " does not fit in a signed 64-bit integer");
  }
  int64_t x = negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
  TANDEM_RETURN_IF_ERROR(CheckRange(static_cast<double>(x), rule, text));
  return x;
}

StatusOr<uint64_t> ReadValue(const uint64_t*, const Rule& rule, const YAML::Node& node) {
  TANDEM_ASSIGN_OR_RETURN(std::string text, PlainScalar(node, "an unsigned integer", "int"));
  uint64_t x = 0;
  bool negative = false;
  TANDEM_RETURN_IF_ERROR(ParseIntText(text, &x, &negative));
  if (negative && x != 0) return Status::InvalidArgument("must be >= 0, got " + text);
  TANDEM_RETURN_IF_ERROR(CheckRange(static_cast<double>(x), rule, text));
  return x;
}

StatusOr<double> ReadValue(const double*, const Rule& rule, const YAML::Node& node) {
  TANDEM_ASSIGN_OR_RETURN(std::string text, PlainScalar(node, "a number", "int|float"));
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  if (lower.ends_with(".inf") || lower == ".nan") {
    return Status::InvalidArgument("must be a finite number, got " + text);
  }
  if (!IsFloatText(text)) return Status::InvalidArgument("expected a number, got " + Quote(text));
  std::string_view digits = text;
  if (digits[0] == '+') digits.remove_prefix(1);  // from_chars takes no '+'
  double x = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), x);
  if (ec != std::errc() || !std::isfinite(x)) {
    return Status::InvalidArgument(text + " is out of the range of a double");
  }
  TANDEM_RETURN_IF_ERROR(CheckRange(x, rule, text));
  return x;
}

StatusOr<bool> ReadValue(const bool*, const Rule&, const YAML::Node& node) {
  // Not TANDEM_ASSIGN_OR_RETURN: with it, GCC 12 at -O3 wrongly warns that `text` may be used
  // uninitialized (-Wmaybe-uninitialized) once this function no longer inlines into its caller.
  StatusOr<std::string> text = PlainScalar(node, "true or false", "bool");
  if (!text.ok()) return text.status();
  if (*text == "true" || *text == "True" || *text == "TRUE") return true;
  if (*text == "false" || *text == "False" || *text == "FALSE") return false;
  return Status::InvalidArgument("expected true or false, got " + Quote(*text));
}

StatusOr<std::string> ReadValue(const std::string*, const Rule& rule, const YAML::Node& node) {
  if (!node.IsScalar()) return Status::InvalidArgument("expected a string, got " + Describe(node));
  TANDEM_RETURN_IF_ERROR(CheckChoice(node.Scalar(), rule));
  if (rule.addresses) TANDEM_RETURN_IF_ERROR(ValidateAddress(node.Scalar()));
  return node.Scalar();
}

}  // namespace tandem::config::internal
