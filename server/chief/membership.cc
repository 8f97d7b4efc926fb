#include "server/chief/membership.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/log.h"

namespace tandem::chief {
namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

int64_t MsBetween(Clock::time_point from, Clock::time_point to) {
  return duration_cast<milliseconds>(to - from).count();
}

// JSON cannot hold NaN (nlohmann writes null): null reads back as NaN.
nlohmann::json Number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }
double NumberOf(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

std::string EncodeResult(const MemberProgress& p) {
  return nlohmann::json({{"step", p.step},
                         {"samples_per_sec", p.samples_per_sec},
                         {"state", tandem::Name(p.state)},
                         {"loss", Number(p.loss)},
                         {"auc", Number(p.auc)},
                         {"logloss", Number(p.logloss)},
                         {"teacher_auc", Number(p.teacher_auc)},
                         {"model_checksum", p.model_checksum},
                         {"detail", p.detail},
                         {"bad_lines", p.bad_lines}})
      .dump();
}

// A damaged record gives an empty result: it is shown, never computed with.
MemberProgress DecodeResult(const std::string& text) {
  MemberProgress p;
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return p;
  p.step = j.value("step", int64_t{-1});
  p.samples_per_sec = NumberOf(j, "samples_per_sec");
  if (!std::isfinite(p.samples_per_sec)) p.samples_per_sec = 0;
  p.state = ParseMemberState(j.value("state", std::string())).value_or(MemberState::kStarting);
  p.loss = NumberOf(j, "loss");
  p.auc = NumberOf(j, "auc");
  p.logloss = NumberOf(j, "logloss");
  p.teacher_auc = NumberOf(j, "teacher_auc");
  p.model_checksum = j.value("model_checksum", std::string());
  p.detail = j.value("detail", std::string());
  p.bad_lines = j.value("bad_lines", int64_t{0});
  return p;
}

}  // namespace

Membership::Membership(MembershipOptions options, ChiefState* state)
    : options_(std::move(options)),
      state_(state),
      ps_(options_.num_ps),
      workers_(options_.num_workers) {}

std::string Membership::Name(Role role, uint32_t index) const {
  return std::string(config::RoleName(role)) + ":" + std::to_string(index);
}

bool Membership::Terminal(const Member& m) const { return IsTerminal(m.progress.state); }

bool Membership::Alive(const Member& m, Clock::time_point now) const {
  return m.registered && !m.lost && !m.left && !Terminal(m) &&
         now - m.last_alive <= options_.heartbeat_timeout;
}

Status Membership::Persist(const ChiefStateData& data) {
  Status s = state_->Save(data);
  if (!s.ok()) TLOG_ERROR("cannot persist the chief state: {}", s.ToString());
  return s;
}

Status Membership::SetLatestCheckpoint(int64_t step) {
  ChiefStateData d = state_->data();
  d.latest_step = step;
  return Persist(d);
}

int64_t Membership::WallMs() const {
  if (options_.wall_ms) return options_.wall_ms();
  return duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void Membership::SaveRun(const std::function<void(ChiefStateData*)>& change) {
  ChiefStateData d = state_->data();
  change(&d);
  Persist(d).IgnoreError();  // logged by Persist
}

Status Membership::OpenRun(int64_t resume_step, int64_t max_rollbacks) {
  ChiefStateData d = state_->data();
  // The previous run failed and committed nothing after the checkpoint this run resumes from:
  // restarting it again would most likely fail the same way, forever under systemd.
  const bool futile = d.run_end_state == JobState::kFailed && d.run_resume_step == resume_step;
  d.futile_runs = futile ? d.futile_runs + 1 : 0;
  if (d.futile_runs > max_rollbacks)
    return Status::FailedPrecondition(
        "the job failed " + std::to_string(d.futile_runs) + " times in a row from the " +
        (resume_step >= 0 ? "checkpoint of step " + std::to_string(resume_step) : "start") +
        " without committing a newer one (recovery.max_rollbacks = " +
        std::to_string(max_rollbacks) +
        "): not starting it again; the last failure: " + DecodeResult(d.run_result).detail);
  d.run_open = true;
  d.run_resume_step = resume_step;
  d.run_training_ms = d.run_ended_ms = 0;
  d.run_stop_reason = d.run_result = "";
  d.run_end_state.reset();
  return Persist(d);
}

Status Membership::CloseRun() {
  ChiefStateData d = state_->data();
  if (!d.run_open) return Status::Ok();
  d.run_open = false;
  return Persist(d);
}

void Membership::RejoinRun(Clock::time_point now) {
  const ChiefStateData& d = state_->data();
  const int64_t wall = WallMs();
  // The steady clock restarted with the process: place the run's instants on it by their age.
  auto ago = [&](int64_t then_ms) {
    return now - milliseconds(std::max<int64_t>(0, wall - then_ms));
  };
  if (d.run_training_ms > 0) training_since_ = ago(d.run_training_ms);
  stop_reason_ = d.run_stop_reason;
  rejoined_at_ = now;
  if (d.run_end_state) {
    job_state_ = *d.run_end_state;
    final_result_ = DecodeResult(d.run_result);
    ended_at_ = d.run_ended_ms > 0 ? ago(d.run_ended_ms) : now;
  } else if (!stop_reason_.empty()) {
    job_state_ = JobState::kStopping;
  }
  TLOG_INFO("rejoining the run (resumed from step {}): job {}; members come back by registering",
            d.run_resume_step, tandem::Name(job_state_));
}

void Membership::StartOver() {
  job_state_ = JobState::kStarting;
  stop_reason_.clear();
  training_since_ = ended_at_ = rejoined_at_ = Clock::time_point{};
  final_result_ = MemberProgress{};
}

bool Membership::NoteIsolation(Clock::time_point now) {
  // Once the job has ended its members leave, and falling silent together is what they do: a
  // member that left without a last word is then declared lost as usual, so that the chief does
  // not wait out its whole leave grace for it (seen once: a stop took 25 s, not 4).
  if (IsTerminal(job_state_)) {
    isolated_since_ = Clock::time_point{};
    return false;
  }
  const auto recent = std::max(options_.heartbeat_timeout / 2, 2 * options_.heartbeat_interval);
  bool live = false, heard = false;
  for (Role r : {Role::kPs, Role::kWorker})
    for (const Member& m : Of(r)) {
      if (!m.registered || m.lost || m.left || Terminal(m)) continue;
      live = true;
      // A silence excused (the chief itself stalled) is no sign of a partition either.
      heard = heard || now - std::max(m.last_heartbeat, excused_at_) <= recent;
    }
  const bool isolated = live && !heard;
  if (isolated && !this->isolated()) {
    isolated_since_ = now;
    TLOG_WARN(
        "no member has heartbeated for {} ms: this chief may be cut off from the network; it "
        "takes nobody for lost until members are heard again",
        recent.count());
  }
  return isolated;
}

void Membership::EndIsolation(const std::string& who, Clock::time_point now) {
  if (!isolated()) return;
  TLOG_WARN("{} heard again after {} ms in which no member was: every member's silence is excused",
            who, MsBetween(isolated_since_, now));
  isolated_since_ = Clock::time_point{};
  ExcuseSilence(now);
}

void Membership::ExcuseSilence(Clock::time_point now) {
  excused_at_ = std::max(excused_at_, now);
  for (auto* members : {&ps_, &workers_})
    for (Member& m : *members)
      if (m.registered && !m.lost && !m.left) m.last_alive = std::max(m.last_alive, now);
}

// After a worker loss the generation rises again once every rank is present and has shown a
// sign of life since the loss: another rank that died at the same moment, and is not declared
// lost yet, must not be counted in (its replacement would come under yet another generation).
void Membership::TryCompleteGeneration() {
  if (!awaiting_workers_) return;
  for (const Member& w : workers_)
    if (!w.registered || w.lost || w.left || w.last_heartbeat < last_worker_loss_) return;
  // A failed persist leaves the flag set: the next registration or heartbeat tries again.
  if (BumpGeneration("every worker is present again").ok()) awaiting_workers_ = false;
}

Status Membership::BumpGeneration(const std::string& why) {
  ChiefStateData d = state_->data();
  d.generation += 1;
  TANDEM_RETURN_IF_ERROR(Persist(d));
  TLOG_WARN("generation {}: {}", d.generation, why);
  return Status::Ok();
}

// The reasons a registration is refused, other than a malformed request. `current` is the
// rank's record; the caller has already ruled out the same process registering again.
std::optional<std::string> Membership::Refusal(const RegisterInput& in, const Member& current,
                                               Clock::time_point now) const {
  const std::string who = Name(in.role, in.index);
  if (in.build_id != options_.build_id)
    return who + ": build id '" + in.build_id + "' differs from the chief's '" + options_.build_id +
           "'";
  if (in.config_hash != options_.config_hash)
    return who + ": config hash '" + in.config_hash + "' differs from the chief's '" +
           options_.config_hash + "'";
  if (in.role == Role::kWorker && options_.strict_determinism) {
    for (uint32_t j = 0; j < workers_.size(); ++j) {
      const Member& other = workers_[j];
      if (j == in.index || !other.registered || other.determinism_class == in.determinism_class)
        continue;
      return who + ": determinism class '" + in.determinism_class + "' differs from '" +
             other.determinism_class + "' of worker:" + std::to_string(j) +
             " (train.deterministic: strict at embedding_staleness 0)";
    }
  }
  if (Alive(current, now))
    return who + ": incarnation " + std::to_string(current.incarnation) +
           " is alive (last heartbeat " + std::to_string(MsBetween(current.last_alive, now)) +
           " ms ago)";
  return std::nullopt;
}

std::optional<Suspect> Membership::LiveRival(const RegisterInput& in, Clock::time_point now) const {
  const auto& members = Of(in.role);
  if (in.index >= members.size()) return std::nullopt;
  const Member& m = members[in.index];
  if (!Alive(m, now) || (in.last_incarnation != 0 && in.last_incarnation >= m.incarnation) ||
      (in.address == m.address && in.pid == m.pid && in.host == m.host))
    return std::nullopt;
  if (Refusal(in, Member{}, now)) return std::nullopt;  // refused for another reason anyway
  return Suspect{in.role, in.index, m.incarnation, m.address, MsBetween(m.last_heartbeat, now)};
}

StatusOr<Issued> Membership::Register(const RegisterInput& in, Clock::time_point now) {
  if (in.role == Role::kChief)
    return Status::InvalidArgument("the chief cannot register with itself");
  auto& members = Of(in.role);
  if (in.index >= members.size())
    return Status::InvalidArgument(Name(in.role, in.index) + " is outside the cluster of " +
                                   std::to_string(members.size()));
  if (in.address.empty())
    return Status::InvalidArgument(Name(in.role, in.index) + ": registration without an address");
  Member& m = members[in.index];
  const std::string who = Name(in.role, in.index);
  const ChiefStateData& d = state_->data();
  // The same process registering again keeps its incarnation: after a restart of the chief (which
  // forgot it), after a RETRY, or after a registration whose reply was lost.
  const bool usable = m.registered && !m.lost && !m.left;
  const bool same_process =
      usable && ((in.last_incarnation != 0 && in.last_incarnation == m.incarnation) ||
                 (in.address == m.address && in.pid == m.pid && in.host == m.host));
  // An incarnation issued by an earlier term of this chief and newer than anything registered
  // here since: the member outlived a chief restart. Higher is newer, so it wins the rank.
  const bool adopt = in.last_incarnation != 0 && in.last_incarnation <= d.highest_incarnation &&
                     (!m.registered || in.last_incarnation > m.incarnation);
  if (!same_process && !adopt) {
    if (auto why = Refusal(in, m, now)) {
      TLOG_WARN("registration refused: {}", *why);
      return Status::PermissionDenied(*why);
    }
  } else if (auto why = Refusal(in, Member{}, now)) {
    TLOG_WARN("registration refused: {}", *why);
    return Status::PermissionDenied(*why);
  }
  uint64_t incarnation = same_process ? m.incarnation : in.last_incarnation;
  if (!same_process && !adopt) {
    ChiefStateData next = d;
    next.highest_incarnation += 1;
    TANDEM_RETURN_IF_ERROR(Persist(next));
    incarnation = next.highest_incarnation;
  }
  if (in.role == Role::kWorker && !options_.strict_determinism) {
    for (uint32_t j = 0; j < workers_.size(); ++j)
      if (j != in.index && workers_[j].registered &&
          workers_[j].determinism_class != in.determinism_class)
        TLOG_WARN("{}: determinism class '{}' differs from '{}' of worker:{}: bit-identity void",
                  who, in.determinism_class, workers_[j].determinism_class, j);
  }
  // Before UpdateJobState: the registration that completes a fresh start must not count. The
  // same process registering again (its first reply was lost: the chief probed a dead rival for
  // longer than the attempt's budget) is told again what it was told then.
  const bool joins_running_job = (same_process && m.joins_running_job) ||
                                 (in.role == Role::kWorker && !same_process && !adopt &&
                                  training_since_ != Clock::time_point{} &&
                                  !IsTerminal(job_state_) && job_state_ != JobState::kStopping);
  const bool job_start = training_since_ == Clock::time_point{};
  EndIsolation(who, now);
  m = Member{};
  m.registered = true;
  m.incarnation = incarnation;
  m.address = in.address;
  m.host = in.host;
  m.pid = in.pid;
  m.determinism_class = in.determinism_class;
  m.joins_running_job = joins_running_job;
  m.last_heartbeat = m.last_alive = now;
  m.progress.step = in.step;
  TLOG_INFO("{}#{} registered from {} (pid {}, host {}, step {}){}", who, incarnation, in.address,
            in.pid, in.host, in.step,
            same_process ? " again" : (adopt ? ", keeping its incarnation" : ""));
  if (joins_running_job && !awaiting_workers_) {
    // A loss this chief never saw (it was away, PROTOCOLS §10): the survivors' group is of the
    // generation they knew, so the replacement's must be another one.
    if (BumpGeneration(who + " was replaced while the chief was away").ok()) {
      awaiting_workers_ = true;
      last_worker_loss_ = now;
    }
  }
  if (in.role == Role::kWorker) TryCompleteGeneration();
  m.generation_seen = state_->data().generation;
  UpdateJobState(now);
  const ChiefStateData& now_d = state_->data();
  return Issued{incarnation,          now_d.generation,  now_d.timeline, now_d.term,
                options_.total_steps, joins_running_job, job_start};
}

StatusOr<HeartbeatResult> Membership::Heartbeat(Role role, uint32_t index, uint64_t incarnation,
                                                const MemberProgress& progress,
                                                Clock::time_point now) {
  if (role == Role::kChief) return Status::InvalidArgument("the chief does not heartbeat itself");
  auto& members = Of(role);
  if (index >= members.size())
    return Status::InvalidArgument(Name(role, index) + " is outside the cluster of " +
                                   std::to_string(members.size()));
  Member& m = members[index];
  const std::string who = Name(role, index) + "#" + std::to_string(incarnation);
  HeartbeatResult r;
  if (incarnation == 0 || !m.registered || incarnation > m.incarnation) {
    r.verdict = HeartbeatVerdict::kRetry;
    r.message = who + " is not registered with this chief (term " + std::to_string(term()) +
                "): register again";
  } else if (incarnation < m.incarnation) {
    r.verdict = HeartbeatVerdict::kStale;
    r.message = who + " was replaced by incarnation " + std::to_string(m.incarnation);
  } else if (m.lost) {
    r.verdict = HeartbeatVerdict::kStale;
    r.message = who + " was declared lost: " + m.lost_reason;
  } else if (m.left) {
    r.verdict = HeartbeatVerdict::kStale;
    r.message = who + " left the job";
  } else {
    EndIsolation(who, now);
    m.last_heartbeat = m.last_alive = now;
    m.heartbeated = true;
    if (progress.state == MemberState::kLeft && Terminal(m)) {
      // The last word after a final report: the report stands (a worker that left after "done"
      // still counts towards the job's end), only the wait for its silence is over.
      m.gone = true;
    } else if (progress.state == MemberState::kLeft) {
      m.left = true;
      TLOG_INFO("{} left the job", who);
    }
    if (progress.state == MemberState::kFailed && m.progress.state != MemberState::kFailed)
      TLOG_ERROR("{} failed: {}", who, progress.detail);
    // A heartbeat the member's thread built before its last word can arrive after it: a terminal
    // state, once reported, is this incarnation's last (else the chief waited for it to leave).
    if (!Terminal(m) || IsTerminal(progress.state)) m.progress = progress;
    if (role == Role::kWorker) TryCompleteGeneration();
    m.generation_seen = generation();
    UpdateJobState(now);
  }
  r.generation = generation();
  r.timeline = timeline();
  r.term = term();
  r.job_state = job_state_;
  r.stop = job_state_ != JobState::kStarting && job_state_ != JobState::kTraining;
  return r;
}

void Membership::UpdateJobState(Clock::time_point now) {
  if (IsTerminal(job_state_)) return;
  auto end = [&](JobState state, std::string detail) {
    job_state_ = state;
    final_result_.detail = std::move(detail);
    ended_at_ = now;
    TLOG_INFO("job {}{}{}", tandem::Name(job_state_), final_result_.detail.empty() ? "" : ": ",
              final_result_.detail);
    // A chief restarted now must still tell the members that stayed (the PS) the job ended:
    // the workers that reported it may be gone.
    SaveRun([&](ChiefStateData* d) {
      d->run_end_state = job_state_;
      d->run_result = EncodeResult(final_result_);
      d->run_ended_ms = WallMs();
    });
  };
  for (uint32_t i = 0; i < workers_.size(); ++i) {
    const Member& w = workers_[i];
    if (w.registered && !w.lost && w.progress.state == MemberState::kFailed) {
      end(JobState::kFailed, "worker:" + std::to_string(i) + " failed: " + w.progress.detail);
      return;
    }
  }
  // A shard that cannot serve the job (it lost its data, or was restored to another step) fails
  // it at once: the workers would otherwise wait on it until their requests time out.
  for (uint32_t i = 0; i < ps_.size(); ++i) {
    const Member& p = ps_[i];
    if (p.registered && !p.lost && p.progress.state == MemberState::kFailed) {
      end(JobState::kFailed, "ps:" + std::to_string(i) + " failed: " + p.progress.detail);
      return;
    }
  }
  auto all = [](const std::vector<Member>& v, auto pred) {
    return std::all_of(v.begin(), v.end(), pred);
  };
  if (job_state_ == JobState::kStarting && all(ps_, [](const Member& m) { return m.registered; }) &&
      all(workers_, [](const Member& m) { return m.registered; })) {
    job_state_ = JobState::kTraining;
    if (training_since_ == Clock::time_point{}) {
      training_since_ = now;
      SaveRun([&](ChiefStateData* d) { d->run_training_ms = WallMs(); });
      TLOG_INFO("job training: every ps and worker has registered");
    } else {
      TLOG_INFO("job training again: every ps and worker has registered with this chief");
    }
  }
  if (all(workers_, [](const Member& m) {
        return m.registered && !m.lost && !m.left && m.progress.state == MemberState::kDone;
      })) {
    const MemberProgress& r0 = workers_[0].progress;
    std::string detail = r0.detail;
    final_result_ = r0;
    // Persisted with the result, so that a chief restarted after the end still has the total.
    final_result_.bad_lines = 0;
    for (const Member& w : workers_) final_result_.bad_lines += w.progress.bad_lines;
    end(JobState::kDone, std::move(detail));
    return;
  }
  if (job_state_ == JobState::kStopping && all(workers_, [](const Member& m) {
        return !m.registered || m.lost || m.left || IsTerminal(m.progress.state);
      }))
    end(JobState::kStopped, stop_reason_);
  // Every worker stopped after a stop this chief never heard of (a restarted chief whose
  // predecessor died between the stop and its persisting): the job stopped all the same.
  else if (all(workers_, [](const Member& m) {
             return m.registered && !m.lost && !m.left && IsTerminal(m.progress.state);
           }))
    end(JobState::kStopped, stop_reason_.empty() ? "every worker stopped" : stop_reason_);
}

JobState Membership::RequestStop(const std::string& reason, Clock::time_point now) {
  if (IsTerminal(job_state_) || job_state_ == JobState::kStopping) return job_state_;
  stop_reason_ = reason;
  job_state_ = JobState::kStopping;
  SaveRun([&](ChiefStateData* d) { d->run_stop_reason = reason; });
  TLOG_INFO("job stopping: {}", reason);
  UpdateJobState(now);
  return job_state_;
}

std::vector<Suspect> Membership::Suspects(Clock::time_point now) const {
  std::vector<Suspect> out;
  for (Role role : {Role::kPs, Role::kWorker}) {
    const auto& members = Of(role);
    for (uint32_t i = 0; i < members.size(); ++i) {
      const Member& m = members[i];
      if (!m.registered || m.lost || m.left || Terminal(m)) continue;
      if (now - m.last_alive <= SilenceLimit(role)) continue;
      out.push_back({role, i, m.incarnation, m.address, MsBetween(m.last_heartbeat, now)});
    }
  }
  return out;
}

void Membership::ProbeAnswered(const Suspect& s, Clock::time_point now) {
  Member& m = Of(s.role)[s.index];
  if (m.registered && m.incarnation == s.incarnation) m.last_alive = now;
}

StatusOr<bool> Membership::DeclareLost(const Suspect& s, const std::string& reason,
                                       Clock::time_point now, bool replaced) {
  Member& m = Of(s.role)[s.index];
  if (!m.registered || m.incarnation != s.incarnation || m.lost || m.left || Terminal(m) ||
      (!replaced && now - m.last_alive <= SilenceLimit(s.role)))
    return false;  // it heartbeated, ended or was replaced while it was probed
  const std::string who = Name(s.role, s.index) + "#" + std::to_string(s.incarnation);
  if (s.role == Role::kWorker) TANDEM_RETURN_IF_ERROR(BumpGeneration(who + " was lost"));
  m.lost = true;
  m.lost_reason = reason;
  TLOG_WARN("{} at {} declared lost: {}", who, m.address, reason);
  if (s.role == Role::kWorker) {
    awaiting_workers_ = true;
    last_worker_loss_ = now;
  }
  UpdateJobState(now);
  return true;
}

StatusOr<RegroupResult> Membership::Regroup(uint32_t index, uint64_t incarnation,
                                            uint64_t failed_generation, const std::string& reason,
                                            Clock::time_point now) {
  if (index >= workers_.size())
    return Status::InvalidArgument(Name(Role::kWorker, index) + " is outside the cluster of " +
                                   std::to_string(workers_.size()));
  const Member& asker = workers_[index];
  const std::string who = Name(Role::kWorker, index) + "#" + std::to_string(incarnation);
  if (!asker.registered || asker.incarnation != incarnation || asker.lost || asker.left)
    return Status::FailedPrecondition(who + " is not the rank's live incarnation");
  RegroupResult r;
  r.generation = generation();
  if (failed_generation != generation()) return r;  // moved on: the request is answered
  if (job_state_ != JobState::kTraining) {
    r.why_not = "the job is " + std::string(tandem::Name(job_state_));
    return r;
  }
  if (awaiting_workers_) {
    r.why_not = "a lost worker is being replaced";
    return r;
  }
  for (uint32_t i = 0; i < workers_.size(); ++i)
    if (!Alive(workers_[i], now)) {
      r.why_not = Name(Role::kWorker, i) + " is not heard from";
      return r;
    }
  TANDEM_RETURN_IF_ERROR(
      BumpGeneration(who + " asked for a new all-reduce group (" + reason +
                     "); every worker is heard from, so none is lost: the workers regroup"));
  r.generation = generation();
  r.raised = true;
  return r;
}

bool Membership::Finished(Clock::time_point now, std::chrono::milliseconds quiet) const {
  if (!IsTerminal(job_state_)) return false;
  const bool may_come_back =
      rejoined_at_ != Clock::time_point{} && now - rejoined_at_ < options_.heartbeat_timeout;
  auto quiet_now = [&](const Member& m) {
    if (!m.registered) return !may_come_back;
    return m.lost || m.left || (Terminal(m) && (m.gone || now - m.last_heartbeat >= quiet));
  };
  return std::all_of(ps_.begin(), ps_.end(), quiet_now) &&
         std::all_of(workers_.begin(), workers_.end(), quiet_now);
}

JobSnapshot Membership::Snapshot(Clock::time_point now) const {
  JobSnapshot j;
  const ChiefStateData& d = state_->data();
  j.term = d.term;
  j.generation = d.generation;
  j.timeline = d.timeline;
  j.last_checkpoint_step = d.latest_step;
  j.generation_pending = awaiting_workers_;
  j.job_state = job_state_;
  j.total_steps = options_.total_steps;
  j.config_hash = options_.config_hash;
  for (Role role : {Role::kPs, Role::kWorker}) {
    const auto& members = Of(role);
    for (uint32_t i = 0; i < members.size(); ++i) {
      const Member& m = members[i];
      MemberSnapshot s;
      s.role = role;
      s.index = i;
      if (!m.registered) {
        s.state = MemberState::kStarting;
        j.members.push_back(std::move(s));
        continue;
      }
      s.address = m.address;
      s.incarnation = m.incarnation;
      s.step = m.progress.step;
      s.generation = m.generation_seen;
      s.pid = m.pid;
      s.host = m.host;
      s.lost_reason = m.lost_reason;
      s.ms_since_heartbeat = MsBetween(m.last_heartbeat, now);
      s.determinism_class = m.determinism_class;
      s.bad_lines = m.progress.bad_lines;
      const bool up = !m.lost && !m.left && !Terminal(m);
      if (up) s.waiting_on = m.progress.waiting_on;
      // A worker that finished reports its mean rate over the run: the job's figure then.
      s.samples_per_sec =
          up || m.progress.state == MemberState::kDone ? m.progress.samples_per_sec : 0;
      if (m.lost)
        s.state = MemberState::kLost;
      else if (m.left)
        s.state = MemberState::kLeft;
      else if (m.progress.state == MemberState::kStarting)
        s.state = MemberState::kUp;
      else
        s.state = m.progress.state;
      if (role == Role::kWorker) {
        j.step = j.step < 0 ? s.step : std::min(j.step, s.step);
        j.samples_per_sec += s.samples_per_sec;
        j.bad_lines += s.bad_lines;
      }
      j.members.push_back(std::move(s));
    }
  }
  const MemberProgress* result = nullptr;
  if (job_state_ == JobState::kDone)
    result = &final_result_;
  else if (!workers_.empty() && workers_[0].registered)
    result = &workers_[0].progress;
  if (result) {
    j.loss = result->loss;
    j.auc = result->auc;
    j.logloss = result->logloss;
    j.teacher_auc = result->teacher_auc;
    j.model_checksum = result->model_checksum;
  }
  if (job_state_ == JobState::kDone) j.bad_lines = final_result_.bad_lines;
  if (job_state_ == JobState::kDone && j.step < 0) {
    // A chief restarted after the end: the workers are gone, their last report is the result.
    j.step = final_result_.step;
    j.samples_per_sec = final_result_.samples_per_sec * static_cast<double>(workers_.size());
  }
  j.detail = IsTerminal(job_state_) ? final_result_.detail : stop_reason_;
  if (training_since_ != Clock::time_point{})
    j.elapsed_ms = MsBetween(training_since_, IsTerminal(job_state_) ? ended_at_ : now);
  return j;
}

}  // namespace tandem::chief
