#include "server/chief/chief_service.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "common/build_info.h"
#include "common/durable_file.h"
#include "common/log.h"
#include "common/sd_notify.h"
#include "common/wire/diagnostics.h"
#include "common/wire/states.h"

namespace tandem::chief {

using std::chrono::milliseconds;
using wire::Envelope;
using wire::ReplyCode;

namespace {

constexpr int kControlLane = 0;
constexpr size_t kMaxKeyBytes = 4096;
constexpr uint32_t kMaxBarrierCount = 1 << 16;
constexpr uint64_t kNoAppliedStep = static_cast<uint64_t>(-1);

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return buf;
}

capnp::Text::Reader Text(const std::string& s) { return capnp::Text::Reader(s.data(), s.size()); }

// A member's role: ps or worker. The chief, tools and unknown numbers are none.
std::optional<Role> MemberRoleOf(wire::Role role) {
  auto r = wire::FromWire(role);
  if (r == Role::kPs || r == Role::kWorker) return r;
  return std::nullopt;
}

void SendStatus(wire::Responder& r, const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
      r.SendError(ReplyCode::INVALID, s.message());
      break;
    case StatusCode::kPermissionDenied:
      r.SendView(ReplyCode::STALE, s.message(), kNoAppliedStep);
      break;
    case StatusCode::kUnavailable:
      r.SendError(ReplyCode::RETRY, s.message());
      break;
    case StatusCode::kResourceExhausted:
      // The chief could not write (a full disk): the same request may succeed once there is
      // space. The sender decides how long to wait (a commit waits as long as the disk is full).
      r.SendError(ReplyCode::OVERLOADED, s.message());
      break;
    default:
      r.SendError(ReplyCode::INTERNAL, s.message());
  }
}

// The rendezvous store survives a restart of the chief within a run: the collectives may be
// meeting through it at that moment. JSON {key: hex(value)}, keys and values as stored.
std::string KvPath(const config::JobConfig& job) { return job.checkpoint.dir + "/chief/kv"; }

std::string EncodeKv(const std::map<std::string, std::string>& kv) {
  static constexpr char kHex[] = "0123456789abcdef";
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [key, value] : kv) {
    std::string hex;
    hex.reserve(2 * value.size());
    for (unsigned char c : value) {
      hex.push_back(kHex[c >> 4]);
      hex.push_back(kHex[c & 15]);
    }
    j[key] = hex;
  }
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

// kDataLoss naming the file when it is damaged; an absent file is an empty store.
StatusOr<std::map<std::string, std::string>> LoadKv(const std::string& path) {
  std::map<std::string, std::string> kv;
  std::ifstream in(path, std::ios::binary);
  if (!in) return kv;
  std::stringstream text;
  text << in.rdbuf();
  auto j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::DataLoss(path + ": not a JSON object");
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string() || value.get<std::string>().size() % 2 != 0)
      return Status::DataLoss(path + ": bad value of '" + key + "'");
    const std::string hex = value.get<std::string>();
    std::string bytes;
    for (size_t i = 0; i < hex.size(); i += 2) {
      const int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
      if (hi < 0 || lo < 0) return Status::DataLoss(path + ": bad value of '" + key + "'");
      bytes.push_back(static_cast<char>(hi << 4 | lo));
    }
    kv[key] = std::move(bytes);
  }
  return kv;
}

}  // namespace

std::vector<wire::LaneOptions> ChiefLanes() { return {wire::LaneOptions{"control", 2}}; }

StatusOr<std::unique_ptr<ChiefService>> ChiefService::Create(const config::JobConfig& job,
                                                             wire::RpcServer* server, bool new_run,
                                                             const TimeSource* time) {
  auto state = ChiefState::Open(job.checkpoint.dir);
  if (!state.ok()) return state.status();
  const ChiefStateData& d = (*state)->data();
  TLOG_INFO("chief term {} (generation {}, timeline {}, highest incarnation {}) from {}", d.term,
            d.generation, d.timeline, d.highest_incarnation, (*state)->path());
  // A run still open means its chief was killed: members may be training on and will come back
  // (PROTOCOLS §10), so nothing that is only right at a job start may happen (refusing a
  // finished job, LATEST as the resume point, partial checkpoints as abandoned).
  // A shard asks for the resume step before it registers, so the choice must be right from
  // the start: deciding on the first registration (ConfirmRejoin) comes too late for it.
  const bool rejoin = d.run_open && !new_run;
  if (d.run_open && new_run)
    TLOG_INFO(
        "a new run: every process was started afresh, the open run (resumed from step {}) "
        "has no survivors",
        d.run_resume_step);
  // Before any member registers: the resume step goes out with every registration.
  auto checkpoints = rejoin ? CheckpointCoordinator::Rejoin(job, d.run_resume_step)
                            : CheckpointCoordinator::Open(job);
  if (!checkpoints.ok()) return checkpoints.status();
  std::unique_ptr<ChiefService> service(
      new ChiefService(job, server, std::move(state).value(), time));
  {
    MutexLock lock(&service->mu_);
    service->checkpoints_.emplace(std::move(checkpoints).value());
    if (service->checkpoints_->latest_step() !=
        service->membership_.Snapshot(service->Now()).last_checkpoint_step)
      TANDEM_RETURN_IF_ERROR(
          service->membership_.SetLatestCheckpoint(service->checkpoints_->latest_step()));
    if (rejoin) {
      service->membership_.RejoinRun(service->Now());
      service->rejoin_unconfirmed_ = true;
      auto kv = LoadKv(KvPath(job));
      if (!kv.ok()) return kv.status();
      service->kv_ = std::move(kv).value();
    } else {
      TANDEM_RETURN_IF_ERROR(service->membership_.OpenRun(service->checkpoints_->resume_step(),
                                                          job.recovery.max_rollbacks));
      // An earlier run's rendezvous keys must not meet this run's members.
      std::error_code ec;
      std::filesystem::remove(KvPath(job), ec);
    }
    service->SyncIdentity();
  }
  return service;
}

ChiefService::ChiefService(const config::JobConfig& job, wire::RpcServer* server,
                           std::unique_ptr<ChiefState> state, const TimeSource* time)
    : job_(job),
      server_(server),
      time_(time),
      tick_(std::clamp<int64_t>(job.chief.heartbeat_interval_ms / 2, 10, 100)),
      probe_budget_(std::clamp<int64_t>(job.chief.heartbeat_timeout_ms / 2, 10, 1000)),
      state_(std::move(state)),
      membership_(
          MembershipOptions{
              .num_ps = static_cast<uint32_t>(job.cluster.ps.size()),
              .num_workers = static_cast<uint32_t>(job.cluster.workers.size()),
              .build_id = std::string(BuildId()),
              .config_hash = job.ComputationHash(),
              .strict_determinism =
                  job.train.deterministic == "strict" && job.train.embedding_staleness == 0,
              .heartbeat_interval = milliseconds(job.chief.heartbeat_interval_ms),
              .heartbeat_timeout = milliseconds(job.chief.heartbeat_timeout_ms),
              .ps_watchdog = milliseconds(job.ps.watchdog_ms),
              .total_steps = job.train.steps,
              .wall_ms = {},
          },
          state_.get()),
      started_at_(time->Now()) {}

ChiefService::~ChiefService() { Stop(); }

void ChiefService::Register() {
  wire::RegisterDiagnostics(server_, kControlLane);
  auto on = [this](Envelope::Body::Which body,
                   void (ChiefService::*fn)(wire::InMessage&, wire::Responder)) {
    server_->Handle(body, kControlLane, [this, fn](wire::InMessage& m, wire::Responder r) {
      (this->*fn)(m, std::move(r));
    });
  };
  on(Envelope::Body::REGISTER_REQUEST, &ChiefService::HandleRegister);
  on(Envelope::Body::HEARTBEAT, &ChiefService::HandleHeartbeat);
  on(Envelope::Body::CLUSTER_STATUS_REQUEST, &ChiefService::HandleStatus);
  on(Envelope::Body::BARRIER_REQUEST, &ChiefService::HandleBarrier);
  on(Envelope::Body::KV_SET, &ChiefService::HandleKvSet);
  on(Envelope::Body::KV_GET, &ChiefService::HandleKvGet);
  on(Envelope::Body::STOP_JOB_REQUEST, &ChiefService::HandleStopJob);
  on(Envelope::Body::COMMIT_CHECKPOINT_REQUEST, &ChiefService::HandleCommitCheckpoint);
  on(Envelope::Body::REGROUP_REQUEST, &ChiefService::HandleRegroup);
}

Status ChiefService::Start() {
  if (monitor_.joinable()) return Status::FailedPrecondition("the chief monitor already runs");
  monitor_ = std::thread([this] { MonitorLoop(); });
  return Status::Ok();
}

void ChiefService::Stop() {
  {
    MutexLock lock(&mu_);
    stop_monitor_ = true;
  }
  monitor_wake_.SignalAll();
  if (monitor_.joinable()) monitor_.join();
}

void ChiefService::SyncIdentity() {
  wire::Identity id = server_->identity();
  if (id.term == membership_.term() && id.generation == membership_.generation() &&
      id.timeline == membership_.timeline())
    return;
  id.term = membership_.term();
  id.generation = membership_.generation();
  id.timeline = membership_.timeline();
  server_->SetIdentity(id);
  log::SetGeneration(id.generation);
}

uint64_t ChiefService::term() const {
  MutexLock lock(&mu_);
  return membership_.term();
}

JobState ChiefService::job_state() const {
  MutexLock lock(&mu_);
  return membership_.job_state();
}

JobSnapshot ChiefService::Snapshot() const {
  MutexLock lock(&mu_);
  return membership_.Snapshot(Now());
}

void ChiefService::RequestStop(const std::string& reason) {
  {
    MutexLock lock(&mu_);
    membership_.RequestStop(reason, Now());
  }
  changed_.SignalAll();
}

Status ChiefService::fatal() const {
  MutexLock lock(&mu_);
  return fatal_;
}

Status ChiefService::CloseRun() {
  MutexLock lock(&mu_);
  return membership_.CloseRun();
}

Status ChiefService::ConfirmRejoin(const RegisterInput& in) {
  if (!rejoin_unconfirmed_) return fatal_;
  if (in.last_incarnation != 0) {
    rejoin_unconfirmed_ = false;  // a survivor: the run goes on
    return Status::Ok();
  }
  // The first member to come is a new process: nobody outlived the last chief, the whole job was
  // started again (after a crash of everything), and this is a job start after all. Or a rank's
  // process restarted while the chief was away came before the survivors: they re-register
  // within a heartbeat interval of this chief's start, so a newcomer waits (RETRY) that long
  // before it may decide (its replacement then rolls forward, PROTOCOLS §8).
  const auto grace = milliseconds(std::max<int64_t>(1000, job_.chief.heartbeat_timeout_ms / 2));
  if (Now() - started_at_ < grace)
    return Status::Unavailable("the chief waits for the members of the run to come back first");
  rejoin_unconfirmed_ = false;
  TLOG_WARN(
      "{}:{} registers as a new process before any survivor of the open run: starting the "
      "job instead of rejoining the run",
      config::RoleName(in.role), in.index);
  auto opened = CheckpointCoordinator::Open(job_);
  if (!opened.ok()) {
    fatal_ = opened.status();
    TLOG_ERROR("cannot start the job: {}", fatal_.ToString());
    return fatal_;
  }
  checkpoints_.emplace(std::move(opened).value());
  membership_.StartOver();
  kv_.clear();
  std::error_code ec;
  std::filesystem::remove(KvPath(job_), ec);
  fatal_ = membership_.OpenRun(checkpoints_->resume_step(), job_.recovery.max_rollbacks);
  return fatal_;
}

JobState ChiefService::WaitFinished(std::chrono::steady_clock::time_point until,
                                    const std::function<bool()>& give_up) {
  const auto quiet = 3 * milliseconds(job_.chief.heartbeat_interval_ms);
  MutexLock lock(&mu_);
  std::optional<Clock::time_point> members_finished;
  for (;;) {
    const auto now = Clock::now();
    if (now >= until || (give_up && give_up())) return membership_.job_state();
    if (membership_.Finished(Now(), quiet)) {
      if (!members_finished) members_finished = now;
      // A supervisor that polls the status (tandem local, tandem drill) learns the job's end
      // only from a reply that shows it: members that say their last word leave at once, so
      // wait for that reply to every tool that asked lately, for at most `quiet` (what waiting
      // for the members' silence used to give them).
      const bool all_saw_end = std::all_of(tools_.begin(), tools_.end(), [&](const auto& t) {
        return t.second.saw_end || now - t.second.asked >= 2 * quiet;
      });
      if (all_saw_end || now - *members_finished >= quiet) return membership_.job_state();
    }
    // Members fall quiet without any event: look again every tick.
    changed_.WaitUntil(std::min(until, now + tick_));
  }
}

// ---- handlers ----

void ChiefService::HandleRegister(wire::InMessage& m, wire::Responder r) {
  auto h = m.header();
  auto role = MemberRoleOf(h.getSenderRole());
  if (!role) {
    r.SendError(ReplyCode::INVALID, "a " + std::string(wire::RoleName(h.getSenderRole())) +
                                        " cannot register; only ps and worker are members");
    return;
  }
  auto req = m.envelope().getBody().getRegisterRequest();
  RegisterInput in;
  in.role = *role;
  in.index = h.getSenderIndex();
  in.build_id = h.getBuildId();
  in.config_hash = req.getConfigHash();
  in.determinism_class = req.getDeterminismClass();
  in.last_incarnation = req.getLastIncarnation();
  in.address = req.getAddress();
  in.pid = req.getPid();
  in.host = req.getHost();
  in.step = req.getStep();
  in.timeline = req.getTimeline();
  StatusOr<Issued> issued = Status::Internal("unset");
  std::optional<Suspect> rival;
  {
    MutexLock lock(&mu_);
    Status start = ConfirmRejoin(in);
    if (!start.ok()) {
      // kInvalidArgument (e.g. a finished job) goes back as INVALID: the member exits.
      SendStatus(r, start);
      return;
    }
    issued = membership_.Register(in, Now());
    if (!issued.ok()) rival = membership_.LiveRival(in, Now());
    SyncIdentity();
  }
  if (rival && !ProbeAnswers(*rival, nullptr, nullptr)) {
    // The rank's incarnation still looks alive but does not answer: a crashed process whose
    // supervisor restarted it before the heartbeat timeout. The newcomer replaces it.
    const std::string reason =
        "replaced by a new registration from " + in.address + " and no answer to a probe";
    MutexLock lock(&mu_);
    auto lost = membership_.DeclareLost(*rival, reason, Now(), /*replaced=*/true);
    if (lost.ok() && *lost) issued = membership_.Register(in, Now());
    if (!lost.ok()) issued = lost.status();
    SyncIdentity();
  }
  changed_.SignalAll();
  if (!issued.ok()) {
    SendStatus(r, issued.status());
    return;
  }
  wire::OutMessage reply = r.NewReply();
  auto body = reply.envelope().getBody().initRegisterReply();
  body.setIncarnation(issued->incarnation);
  body.setGeneration(issued->generation);
  body.setTimeline(issued->timeline);
  body.setTerm(issued->term);
  body.setTotalSteps(issued->total_steps);
  body.setJoinsRunningJob(issued->joins_running_job);
  body.setJobStart(issued->job_start);
  {
    MutexLock lock(&mu_);
    body.setResumeStep(checkpoints_->resume_step());
  }
  r.Send(std::move(reply));
}

void ChiefService::HandleHeartbeat(wire::InMessage& m, wire::Responder r) {
  auto h = m.header();
  auto role = MemberRoleOf(h.getSenderRole());
  if (!role) {
    r.SendError(ReplyCode::INVALID, "heartbeat from a " +
                                        std::string(wire::RoleName(h.getSenderRole())) +
                                        "; only ps and worker are members");
    return;
  }
  auto hb = m.envelope().getBody().getHeartbeat();
  auto state = wire::FromWire(hb.getState());
  if (!state.ok()) {
    r.SendError(ReplyCode::INVALID, "heartbeat: " + state.status().message());
    return;
  }
  MemberProgress p;
  p.step = hb.getStep();
  p.samples_per_sec = hb.getSamplesPerSec();
  p.state = *state;
  p.loss = hb.getLoss();
  p.auc = hb.getAuc();
  p.logloss = hb.getLogloss();
  p.teacher_auc = hb.getTeacherAuc();
  p.model_checksum = hb.getModelChecksum();
  p.detail = hb.getDetail();
  p.waiting_on = hb.getWaitingOn();
  p.bad_lines = hb.getBadLines();
  StatusOr<HeartbeatResult> result = Status::Internal("unset");
  {
    MutexLock lock(&mu_);
    result = membership_.Heartbeat(*role, h.getSenderIndex(), h.getIncarnation(), p, Now());
  }
  changed_.SignalAll();
  if (!result.ok()) {
    SendStatus(r, result.status());
    return;
  }
  switch (result->verdict) {
    case HeartbeatVerdict::kRetry:
      r.SendView(ReplyCode::RETRY, result->message, kNoAppliedStep);
      return;
    case HeartbeatVerdict::kStale:
      r.SendView(ReplyCode::STALE, result->message, kNoAppliedStep);
      return;
    case HeartbeatVerdict::kOk:
      break;
  }
  wire::OutMessage reply = r.NewReply();
  auto body = reply.envelope().getBody().initHeartbeatReply();
  body.setGeneration(result->generation);
  body.setTimeline(result->timeline);
  body.setStop(result->stop);
  body.setJobState(wire::ToWire(result->job_state));
  body.setTerm(result->term);
  r.Send(std::move(reply));
}

void ChiefService::HandleStatus(wire::InMessage& m, wire::Responder r) {
  const bool tool = m.header().getSenderRole() == wire::Role::TOOL;
  const std::string peer = tool ? r.peer() : std::string();
  const JobSnapshot j = Snapshot();
  const wire::Identity self = server_->identity();
  wire::OutMessage reply = r.NewReply();
  auto body = reply.envelope().getBody().initClusterStatusReply();
  auto members = body.initMembers(static_cast<unsigned>(j.members.size() + 1));
  auto chief = members[0];
  chief.setRole(wire::Role::CHIEF);
  chief.setIndex(0);
  chief.setAddress(Text(server_->endpoint()));
  chief.setState(wire::ToWire(IsTerminal(j.job_state) ? MemberState::kDone : MemberState::kUp));
  chief.setIncarnation(self.incarnation);
  chief.setStep(j.step);
  chief.setGeneration(j.generation);
  chief.setPid(static_cast<uint32_t>(::getpid()));
  chief.setHost(Text(HostName()));
  chief.setMsSinceHeartbeat(0);
  for (size_t i = 0; i < j.members.size(); ++i) {
    const MemberSnapshot& s = j.members[i];
    auto out = members[static_cast<unsigned>(i + 1)];
    out.setRole(wire::ToWire(s.role));
    out.setIndex(s.index);
    out.setAddress(Text(s.address));
    out.setState(wire::ToWire(s.state));
    out.setIncarnation(s.incarnation);
    out.setStep(s.step);
    out.setGeneration(s.generation);
    out.setSamplesPerSec(s.samples_per_sec);
    out.setPid(s.pid);
    out.setHost(Text(s.host));
    out.setLostReason(Text(s.lost_reason));
    out.setMsSinceHeartbeat(s.ms_since_heartbeat);
    out.setDeterminismClass(Text(s.determinism_class));
    out.setBadLines(s.bad_lines);
    out.setWaitingOn(Text(s.waiting_on));
  }
  body.setTerm(j.term);
  body.setGeneration(j.generation);
  body.setTimeline(j.timeline);
  body.setLastCheckpointStep(j.last_checkpoint_step);
  body.setGenerationPending(j.generation_pending);
  body.setSamplesPerSec(j.samples_per_sec);
  body.setJobState(wire::ToWire(j.job_state));
  body.setStep(j.step);
  body.setTotalSteps(j.total_steps);
  body.setLoss(j.loss);
  body.setAuc(j.auc);
  body.setLogloss(j.logloss);
  body.setTeacherAuc(j.teacher_auc);
  body.setModelChecksum(Text(j.model_checksum));
  body.setDetail(Text(j.detail));
  body.setElapsedMs(j.elapsed_ms);
  body.setConfigHash(Text(j.config_hash));
  body.setBadLines(j.bad_lines);
  {
    // A PS asks before it opens its shard, to restore this checkpoint before serving.
    MutexLock lock(&mu_);
    body.setResumeStep(checkpoints_->resume_step());
    body.setRejoinPending(rejoin_unconfirmed_);
  }
  r.Send(std::move(reply));
  if (!tool) return;
  {
    MutexLock lock(&mu_);
    const auto now = Clock::now();
    // One-off status commands come on connections of their own: forget those long silent.
    std::erase_if(tools_,
                  [&](const auto& t) { return now - t.second.asked > milliseconds(60000); });
    ToolWatch& w = tools_[peer];
    w.asked = now;
    w.saw_end = w.saw_end || IsTerminal(j.job_state);
  }
  changed_.SignalAll();
}

void ChiefService::HandleBarrier(wire::InMessage& m, wire::Responder r) {
  auto req = m.envelope().getBody().getBarrierRequest();
  const std::string name = req.getName();
  const uint32_t count = req.getCount();
  if (name.empty() || name.size() > kMaxKeyBytes) {
    r.SendError(ReplyCode::INVALID,
                "a barrier needs a name of 1.." + std::to_string(kMaxKeyBytes) + " bytes");
    return;
  }
  if (count == 0 || count > kMaxBarrierCount) {
    r.SendError(ReplyCode::INVALID, "barrier '" + name + "': count " + std::to_string(count) +
                                        " is outside 1.." + std::to_string(kMaxBarrierCount));
    return;
  }
  const auto who =
      std::make_pair(static_cast<int>(m.header().getSenderRole()), m.header().getSenderIndex());
  int64_t release_key = -1;
  {
    MutexLock lock(&mu_);
    auto [it, fresh] = barriers_.try_emplace(name);
    BarrierState& b = it->second;
    if (fresh) {
      b.key = next_barrier_key_++;
      b.count = count;
    }
    if (b.count != count) {
      r.SendError(ReplyCode::INVALID, "barrier '" + name + "' has count " +
                                          std::to_string(b.count) + ", not " +
                                          std::to_string(count));
      return;
    }
    b.entered.insert(who);
    if (!b.complete && b.entered.size() < b.count) {
      // Parked under the lock, so a completion (which also takes it) cannot slip in between.
      barriers_parked_.Park(b.key, std::move(r), std::make_unique<wire::InMessage>(std::move(m)));
      return;
    }
    if (!b.complete) {
      b.complete = true;
      release_key = b.key;
    }
  }
  auto answer = [](wire::Responder responder) {
    wire::OutMessage reply = responder.NewReply();
    reply.envelope().getBody().initBarrierReply();
    responder.Send(std::move(reply));
  };
  answer(std::move(r));
  if (release_key < 0) return;
  // The lot releases every key up to the one asked for; the other barriers' go back.
  for (auto& p : barriers_parked_.ReleaseUpTo(release_key)) {
    const std::string other = p.request->envelope().getBody().getBarrierRequest().getName();
    int64_t key = release_key;
    bool complete = true;
    {
      MutexLock lock(&mu_);
      auto it = barriers_.find(other);
      if (it != barriers_.end()) {
        key = it->second.key;
        complete = it->second.complete;
      }
    }
    if (key == release_key || complete)
      answer(std::move(p.responder));
    else
      barriers_parked_.Park(key, std::move(p.responder), std::move(p.request));
  }
}

void ChiefService::HandleKvSet(wire::InMessage& m, wire::Responder r) {
  auto req = m.envelope().getBody().getKvSet();
  const std::string key = req.getKey();
  if (key.empty() || key.size() > kMaxKeyBytes) {
    r.SendError(ReplyCode::INVALID, "a key needs 1.." + std::to_string(kMaxKeyBytes) + " bytes");
    return;
  }
  auto value = req.getValue();
  Status saved;
  {
    MutexLock lock(&mu_);
    kv_[key] = std::string(reinterpret_cast<const char*>(value.begin()), value.size());
    // Durable before the answer, under the lock so that saves cannot overtake each other: the
    // store is written only while collectives meet, a handful of keys.
    saved = WriteFileDurably(KvPath(job_), EncodeKv(kv_));
  }
  if (saved.IsResourceExhausted()) {
    // A full disk: the key is kept in memory and the set answered. Failing it failed every
    // rendezvous, so the job, and its rollback met the same disk. What is lost is the key's
    // survival across a restart of the chief while the disk is full: the members then meet
    // again under a new generation (their rendezvous times out), which a job survives.
    MutexLock lock(&mu_);
    if (!std::exchange(kv_in_memory_only_, true))
      TLOG_ERROR(
          "rendezvous store kept in memory only until it can be written (a restart of the "
          "chief meanwhile loses it): {}",
          saved.ToString());
  } else if (!saved.ok()) {
    TLOG_ERROR("kv set '{}': {}", key, saved.ToString());
    SendStatus(r, saved);  // INTERNAL: the member's KvSet fails rather than trust a lost key
    return;
  } else {
    MutexLock lock(&mu_);
    if (std::exchange(kv_in_memory_only_, false))
      TLOG_INFO("rendezvous store written again: {}", KvPath(job_));
  }
  wire::OutMessage reply = r.NewReply();
  reply.envelope().getBody().initKvSetReply();
  r.Send(std::move(reply));
}

void ChiefService::HandleKvGet(wire::InMessage& m, wire::Responder r) {
  const std::string key = m.envelope().getBody().getKvGet().getKey();
  if (key.empty() || key.size() > kMaxKeyBytes) {
    r.SendError(ReplyCode::INVALID, "a key needs 1.." + std::to_string(kMaxKeyBytes) + " bytes");
    return;
  }
  wire::OutMessage reply = r.NewReply();
  auto body = reply.envelope().getBody().initKvGetReply();
  {
    MutexLock lock(&mu_);
    auto it = kv_.find(key);
    body.setFound(it != kv_.end());
    if (it != kv_.end())
      body.setValue(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(it->second.data()),
                                        it->second.size()));
  }
  r.Send(std::move(reply));
}

void ChiefService::HandleStopJob(wire::InMessage& m, wire::Responder r) {
  std::string reason = m.envelope().getBody().getStopJobRequest().getReason();
  if (reason.empty()) reason = "requested by " + wire::ReadIdentity(m.header()).Who();
  JobState state;
  {
    MutexLock lock(&mu_);
    state = membership_.RequestStop(reason, Now());
  }
  changed_.SignalAll();
  wire::OutMessage reply = r.NewReply();
  reply.envelope().getBody().initStopJobReply().setJobState(wire::ToWire(state));
  r.Send(std::move(reply));
}

void ChiefService::HandleRegroup(wire::InMessage& m, wire::Responder r) {
  auto h = m.header();
  if (h.getSenderRole() != wire::Role::WORKER) {
    r.SendError(ReplyCode::INVALID, "a regroup is asked for by a worker, not a " +
                                        std::string(wire::RoleName(h.getSenderRole())));
    return;
  }
  auto req = m.envelope().getBody().getRegroupRequest();
  StatusOr<RegroupResult> result = Status::Internal("unset");
  {
    MutexLock lock(&mu_);
    result = membership_.Regroup(h.getSenderIndex(), h.getIncarnation(), req.getGeneration(),
                                 req.getReason(), Now());
    if (result.ok() && result->raised) SyncIdentity();
  }
  if (!result.ok()) {
    if (result.status().IsFailedPrecondition())
      r.SendView(ReplyCode::STALE, result.status().message(), kNoAppliedStep);
    else
      SendStatus(r, result.status());
    return;
  }
  if (result->raised) changed_.SignalAll();
  wire::OutMessage reply = r.NewReply();
  auto body = reply.envelope().getBody().initRegroupReply();
  body.setGeneration(result->generation);
  body.setRaised(result->raised);
  body.setWhyNot(Text(result->why_not));
  r.Send(std::move(reply));
}

void ChiefService::HandleCommitCheckpoint(wire::InMessage& m, wire::Responder r) {
  const wire::Identity from = wire::ReadIdentity(m.header());
  if (from.role != wire::Role::WORKER || from.index != 0) {
    r.SendError(ReplyCode::INVALID, "checkpoints are committed by worker 0, not " + from.Who());
    return;
  }
  auto req = m.envelope().getBody().getCommitCheckpointRequest();
  std::vector<std::string> parts;
  for (auto p : req.getParts()) parts.emplace_back(p.cStr(), p.size());
  const int64_t step = req.getStep();
  Status s;
  int64_t latest = -1;
  std::vector<int64_t> retained;
  bool log_refusal = true;
  {
    MutexLock lock(&mu_);
    const wire::Identity self = server_->identity();
    CommitContext context{self.job_id.ToHex(), membership_.timeline(), membership_.term(),
                          membership_.generation()};
    s = checkpoints_->Commit(step, parts, std::string(req.getDeterminismClass()), context);
    if (s.ok()) s = membership_.SetLatestCheckpoint(step);
    latest = checkpoints_->latest_step();
    retained = checkpoints_->retained();
    if (s.IsResourceExhausted()) {
      log_refusal = std::exchange(commit_waits_for_space_, step) != step;
    } else if (s.ok() && commit_waits_for_space_ == step) {
      commit_waits_for_space_ = -1;
      TLOG_INFO("checkpoint of step {}: there is space again", step);
    }
  }
  if (!s.ok()) {
    if (s.IsResourceExhausted() && log_refusal) {
      TLOG_ERROR("checkpoint of step {} waits for space: {} (worker 0 asks again until it fits)",
                 step, s.ToString());
    } else if (!s.IsResourceExhausted()) {
      TLOG_ERROR("checkpoint of step {} not committed: {}", step, s.ToString());
    }
    SendStatus(r, s);
    return;
  }
  changed_.SignalAll();
  wire::OutMessage reply = r.NewReply();
  auto body = reply.envelope().getBody().initCommitCheckpointReply();
  body.setCommittedStep(latest);
  auto list = body.initRetainedSteps(static_cast<unsigned>(retained.size()));
  for (unsigned i = 0; i < retained.size(); ++i) list.set(i, retained[i]);
  r.Send(std::move(reply));
}

// ---- the heartbeat monitor ----

void ChiefService::MonitorLoop() {
  wire::RpcClient client(&probe_context_, server_->identity());
  std::map<std::string, int> handles;  // one socket per probed address
  // A tick this late means the chief itself did not run (SIGSTOP, a starved machine): the
  // members' heartbeats went unanswered, not unsent.
  const auto stalled =
      std::max<Clock::duration>(4 * tick_, milliseconds(job_.chief.heartbeat_timeout_ms / 2));
  auto last_tick = Clock::now();
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (!stop_monitor_) monitor_wake_.WaitUntil(Clock::now() + tick_);
      if (stop_monitor_) return;
      const auto now = Clock::now();
      if (now - last_tick > stalled) {
        TLOG_WARN("the chief did not run for {} ms: no member's silence over that time counts",
                  std::chrono::duration_cast<milliseconds>(now - last_tick).count());
        membership_.ExcuseSilence(Now());
      }
      last_tick = now;
    }
    SdNotify("WATCHDOG=1");  // the chief's heartbeat: its monitor runs (PROTOCOLS §12)
    MonitorTick(&client, &handles);
    last_tick = Clock::now();  // probes may take a while: that is not a stall
  }
}

bool ChiefService::ProbeAnswers(const Suspect& s, wire::RpcClient* client,
                                std::map<std::string, int>* handles,
                                StatusOr<wire::PingResult>* result) {
  // A registration handler probes with a socket of its own: the monitor's belongs to its thread.
  std::optional<wire::RpcClient> own;
  std::map<std::string, int> own_handles;
  if (client == nullptr) {
    own.emplace(&probe_context_, server_->identity());
    client = &*own;
    handles = &own_handles;
  }
  auto it = handles->find(s.address);
  if (it == handles->end()) {
    auto h = client->Connect(s.address);
    it = handles->emplace(s.address, h.ok() ? *h : -1).first;
  }
  client->SetIdentity(server_->identity());
  StatusOr<wire::PingResult> pong =
      it->second < 0 ? StatusOr<wire::PingResult>(Status::InvalidArgument("bad address"))
                     : wire::Ping(client, it->second, probe_budget_);
  const bool same = pong.ok() && pong->peer.incarnation == s.incarnation &&
                    wire::FromWire(pong->peer.role) == s.role && pong->peer.index == s.index;
  if (result) *result = std::move(pong);
  return same;
}

// Probes run without the lock: heartbeats and registrations continue meanwhile, and
// DeclareLost re-checks that the member stayed silent.
void ChiefService::MonitorTick(wire::RpcClient* client, std::map<std::string, int>* handles) {
  std::vector<Suspect> suspects;
  {
    MutexLock lock(&mu_);
    if (membership_.NoteIsolation(Now())) return;
    suspects = membership_.Suspects(Now());
  }
  for (const Suspect& s : suspects) {
    const std::string who = std::string(config::RoleName(s.role)) + ":" + std::to_string(s.index) +
                            "#" + std::to_string(s.incarnation);
    StatusOr<wire::PingResult> pong = Status::Internal("unset");
    const bool same = ProbeAnswers(s, client, handles, &pong);
    MutexLock lock(&mu_);
    // Everyone fell silent while the probe was out: the chief's own network, not the member's.
    if (membership_.NoteIsolation(Now())) return;
    if (same) {
      TLOG_WARN("{} at {}: no heartbeat for {} ms, but it answers a probe: kept", who, s.address,
                s.ms_since_heartbeat);
      membership_.ProbeAnswered(s, Now());
      continue;
    }
    std::string reason =
        "no heartbeat for " + std::to_string(s.ms_since_heartbeat) + " ms and no answer to a probe";
    if (pong.ok())
      reason += " (" + s.address + " answered as " + pong->peer.Who() + ")";
    else
      reason += " (" + pong.status().ToString() + ")";
    auto lost = membership_.DeclareLost(s, reason, Now());
    if (!lost.ok()) TLOG_ERROR("cannot declare {} lost: {}", who, lost.status().ToString());
    SyncIdentity();
    changed_.SignalAll();
  }
}

}  // namespace tandem::chief
