#include "cli/drill_faults.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <utility>

#include "common/config/cluster_spec.h"
#include "common/failpoint.h"

namespace tandem::cli {
namespace {

struct Token {
  std::string text;
  size_t position;  // in the whole spec
};

std::vector<Token> Split(std::string_view s, size_t base) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    const size_t start = i;
    while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i > start) out.push_back({std::string(s.substr(start, i - start)), base + start});
  }
  return out;
}

bool ParseInt(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

// "2s", "1.5s", "500ms".
bool ParseDuration(std::string_view s, std::chrono::milliseconds* out) {
  double scale = 0;
  if (s.ends_with("ms")) {
    scale = 1;
    s.remove_suffix(2);
  } else if (s.ends_with("s")) {
    scale = 1000;
    s.remove_suffix(1);
  } else {
    return false;
  }
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) || c == '.';
      }))
    return false;
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return false;
  *out = std::chrono::milliseconds(static_cast<int64_t>(std::llround(v * scale)));
  return out->count() > 0;
}

class FaultParser {
 public:
  FaultParser(std::string_view text, size_t position, int number)
      : tokens_(Split(text, position)), number_(number), position_(position) {}

  StatusOr<Fault> Parse() {
    Fault f;
    f.position = position_;
    const std::string verb = Next();
    if (verb == "kill" || verb == "stop" || verb == "lose") {
      f.kind = verb == "kill"   ? FaultKind::kKill
               : verb == "stop" ? FaultKind::kStop
                                : FaultKind::kLose;
      if (Status s = Target(&f); !s.ok()) return s;
    } else if (verb == "corrupt-latest") {
      f.kind = FaultKind::kCorruptLatest;
    } else if (verb == "partition" || verb == "flap") {
      f.kind = verb == "partition" ? FaultKind::kPartition : FaultKind::kFlap;
      if (Status s = Targets(&f); !s.ok()) return s;
    } else if (verb == failpoint::kDieAfterAllReduce || verb == failpoint::kDieInRestorePoint) {
      f.kind = verb == failpoint::kDieAfterAllReduce ? FaultKind::kDieAfterAllReduce
                                                     : FaultKind::kDieInRestorePoint;
      if (Status s = Target(&f); !s.ok()) return s;
    } else {
      return Error(0, "unknown action '" + verb +
                          "' (expected kill, stop, lose, corrupt-latest, partition, flap, "
                          "die-after-allreduce or die-in-restore-point)");
    }
    const size_t at = at_;
    if (Status s = At(&f); !s.ok()) return s;
    // The point is armed when the run starts, by step: a rollback count is not known then.
    if (f.fault_point() && f.after_rollbacks > 0)
      return Error(at, "'" + verb + "' takes '@step S', not '@rollback N'");
    if (f.kind == FaultKind::kStop || f.kind == FaultKind::kPartition) {
      if (Peek() != "for")
        return Error(at_, "'" + verb + "' needs 'for DURATION' after the step, e.g. 'for 5s'");
      Next();
      const size_t where = at_;
      if (!ParseDuration(Next(), &f.duration))
        return Error(where, "bad duration '" + Tok(where) + "' (expected e.g. 5s, 1.5s or 500ms)");
    }
    if (f.kind == FaultKind::kFlap) {
      const size_t where = at_;
      const std::string n = Next();
      int64_t count = 0;
      if (!n.ends_with("x") || !ParseInt(std::string_view(n).substr(0, n.size() - 1), &count) ||
          count < 1 || count > 100)
        return Error(where, n.empty() ? "'flap' needs a count after the step, e.g. '3x'"
                                      : "bad flap count '" + n + "' (expected 1x..100x)");
      f.flaps = static_cast<int>(count);
      f.duration = 2 * kFlapHalfCycle * count;
    }
    if (at_ < tokens_.size())
      return Error(at_, "unexpected '" + tokens_[at_].text + "' after the fault");
    return f;
  }

 private:
  std::string Tok(size_t i) const { return i < tokens_.size() ? tokens_[i].text : ""; }
  std::string Peek() const { return Tok(at_); }
  std::string Next() { return Tok(at_++); }

  Status Error(size_t token, const std::string& what) const {
    const size_t pos = token < tokens_.size() ? tokens_[token].position
                       : tokens_.empty()      ? position_
                                         : tokens_.back().position + tokens_.back().text.size();
    return Status::InvalidArgument("--faults: fault " + std::to_string(number_) +
                                   " (at character " + std::to_string(pos + 1) + "): " + what);
  }

  // ROLE:I, or `chief` alone.
  Status Target(Fault* f) {
    const size_t where = at_;
    return ParseTarget(Next(), where, f->kind, &f->role, &f->index);
  }

  // ROLE:I or, for a partition between two members, ROLE:I,ROLE:J.
  Status Targets(Fault* f) {
    const size_t where = at_;
    const std::string t = Next();
    const size_t comma = t.find(',');
    if (comma == std::string::npos) return ParseTarget(t, where, f->kind, &f->role, &f->index);
    if (f->kind != FaultKind::kPartition)
      return Error(where, "'flap' takes one member, not '" + t + "'");
    TANDEM_RETURN_IF_ERROR(ParseTarget(t.substr(0, comma), where, f->kind, &f->role, &f->index));
    TANDEM_RETURN_IF_ERROR(
        ParseTarget(t.substr(comma + 1), where, f->kind, &f->peer_role, &f->peer_index));
    if (f->peer_role == f->role && f->peer_index == f->index)
      return Error(where, "a partition between '" + f->task() + "' and itself");
    return Status::Ok();
  }

  Status ParseTarget(const std::string& t, size_t where, FaultKind kind, std::string* role,
                     int* out) const {
    if (t.empty()) return Error(where, "missing target (expected ROLE:INDEX, e.g. ps:0, or chief)");
    const size_t colon = t.find(':');
    *role = t.substr(0, colon);
    int64_t index = 0;
    if (!config::ParseRole(*role))
      return Error(where, "unknown role '" + *role + "' (expected ps, worker or chief)");
    if (colon == std::string::npos) {
      if (*role != "chief") return Error(where, "'" + t + "' needs an index, e.g. " + *role + ":0");
    } else if (!ParseInt(std::string_view(t).substr(colon + 1), &index) || index < 0 ||
               index > 255) {
      return Error(where, "bad index in '" + t + "' (expected 0..255)");
    }
    if (*role == "chief" && index != 0) return Error(where, "there is only chief:0");
    if (kind == FaultKind::kLose && *role != "ps")
      return Error(where, "'lose' takes a PS (lose ps:I), not '" + t + "'");
    if (kind == FaultKind::kDieAfterAllReduce && *role != "worker")
      return Error(
          where, "'die-after-allreduce' takes a worker (only workers all-reduce), not '" + t + "'");
    if (kind == FaultKind::kDieInRestorePoint && *role != "ps")
      return Error(
          where,
          "'die-in-restore-point' takes a PS (only shards take restore points), not '" + t + "'");
    *out = static_cast<int>(index);
    return Status::Ok();
  }

  Status At(Fault* f) {
    if (Peek() == "@rollback") {
      Next();
      const size_t where = at_;
      const std::string n = Next();
      if (n.empty()) return Error(where, "missing count after '@rollback'");
      if (!ParseInt(n, &f->after_rollbacks) || f->after_rollbacks < 1)
        return Error(where, "bad rollback count '" + n + "' (expected a positive integer)");
      return Status::Ok();
    }
    if (Peek() != "@step") {
      if (Peek().starts_with("@step"))
        return Error(at_, "write '@step S' with a space before the step");
      return Error(at_, Peek().empty()
                            ? "missing '@step S'"
                            : "expected '@step S' or '@rollback N', found '" + Peek() + "'");
    }
    Next();
    const size_t where = at_;
    const std::string s = Next();
    if (s.empty()) return Error(where, "missing step number after '@step'");
    if (!ParseInt(s, &f->step) || f->step < 1)
      return Error(where, "bad step '" + s + "' (expected a positive integer)");
    return Status::Ok();
  }

  std::vector<Token> tokens_;
  size_t at_ = 0;
  int number_;
  size_t position_;
};

}  // namespace

std::string Fault::task() const { return role.empty() ? "" : role + ":" + std::to_string(index); }

std::string Fault::peer_task() const {
  return peer_role.empty() ? "" : peer_role + ":" + std::to_string(peer_index);
}

std::string Fault::ToString() const {
  std::string at = after_rollbacks > 0 ? " @rollback " + std::to_string(after_rollbacks)
                                       : " @step " + std::to_string(step);
  switch (kind) {
    case FaultKind::kKill:
      return "kill " + task() + at;
    case FaultKind::kStop:
      return "stop " + task() + at + " for " + std::to_string(duration.count()) + "ms";
    case FaultKind::kLose:
      return "lose " + task() + at;
    case FaultKind::kCorruptLatest:
      return "corrupt-latest" + at;
    case FaultKind::kPartition:
      return "partition " + task() + (peer_role.empty() ? "" : "," + peer_task()) + at + " for " +
             std::to_string(duration.count()) + "ms";
    case FaultKind::kFlap:
      return "flap " + task() + at + " " + std::to_string(flaps) + "x";
    case FaultKind::kDieAfterAllReduce:
    case FaultKind::kDieInRestorePoint:
      return std::string(point_name()) + " " + task() + at;
  }
  return "";
}

std::string_view Fault::point_name() const {
  if (kind == FaultKind::kDieAfterAllReduce) return failpoint::kDieAfterAllReduce;
  if (kind == FaultKind::kDieInRestorePoint) return failpoint::kDieInRestorePoint;
  return {};
}

std::string Fault::FailpointSpec() const {
  return fault_point() ? failpoint::Spec(task(), point_name(), step) : "";
}

StatusOr<std::vector<Fault>> ParseFaults(std::string_view spec) {
  std::vector<Fault> faults;
  size_t start = 0;
  int number = 0;
  while (start <= spec.size()) {
    size_t end = spec.find(';', start);
    if (end == std::string_view::npos) end = spec.size();
    const std::string_view part = spec.substr(start, end - start);
    if (!Split(part, 0).empty()) {
      FaultParser parser(part, start, ++number);
      auto f = parser.Parse();
      if (!f.ok()) return f.status();
      faults.push_back(*f);
    }
    start = end + 1;
  }
  // The environment arms one fault point a process (common/failpoint.h).
  const Fault* point = nullptr;
  for (const Fault& f : faults) {
    if (!f.fault_point()) continue;
    if (point != nullptr)
      return Status::InvalidArgument("--faults: '" + f.ToString() + "' (at character " +
                                     std::to_string(f.position + 1) +
                                     "): one fault point a "
                                     "drill, and '" +
                                     point->ToString() + "' is one already");
    point = &f;
  }
  if (faults.empty())
    return Status::InvalidArgument(
        "--faults: no fault given (e.g. \"kill ps:0 @step 100; stop ps:1 @step 200 for 2s\")");
  std::stable_sort(faults.begin(), faults.end(), [](const Fault& a, const Fault& b) {
    return std::make_pair(a.after_rollbacks, a.step) < std::make_pair(b.after_rollbacks, b.step);
  });
  return faults;
}

}  // namespace tandem::cli
