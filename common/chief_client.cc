#include "common/chief_client.h"

#include <unistd.h>

#include <algorithm>

#include "common/log.h"
#include "common/sd_notify.h"
#include "common/wait_log.h"
#include "common/wire/states.h"

namespace tandem {

using Clock = std::chrono::steady_clock;
using std::chrono::duration_cast;
using std::chrono::milliseconds;
using wire::Envelope;
using wire::ReplyCode;

namespace {

constexpr milliseconds kMinBackoff{50};
constexpr milliseconds kMaxBackoff{200};
constexpr milliseconds kPollEvery{50};
constexpr milliseconds kBarrierAttempt{500};
constexpr milliseconds kCancellableAttempt{500};

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return buf;
}

capnp::Text::Reader Text(const std::string& s) { return capnp::Text::Reader(s.data(), s.size()); }

milliseconds Remaining(Clock::time_point deadline) {
  return std::max(milliseconds(0), duration_cast<milliseconds>(deadline - Clock::now()));
}

// Codes after which the same request may succeed if sent again.
bool Retryable(ReplyCode code) {
  return code == ReplyCode::RETRY || code == ReplyCode::OVERLOADED || code == ReplyCode::NOT_READY;
}

bool TransportError(const Status& s) { return s.IsUnavailable() || s.IsDeadlineExceeded(); }

Status StoppedWaiting(const std::string& what) {
  return Status::Cancelled("a stop signal arrived while waiting for " + what);
}

StatusOr<MemberView> ReadMember(wire::Member::Reader m) {
  MemberView v;
  auto role = wire::FromWire(m.getRole());
  if (!role)
    return Status::InvalidArgument("a member of role " + std::string(wire::RoleName(m.getRole())) +
                                   " (" + std::to_string(static_cast<uint16_t>(m.getRole())) + ")");
  v.role = *role;
  v.index = m.getIndex();
  v.address = m.getAddress();
  TANDEM_ASSIGN_OR_RETURN(v.state, wire::FromWire(m.getState()));
  v.incarnation = m.getIncarnation();
  v.step = m.getStep();
  v.generation = m.getGeneration();
  v.samples_per_sec = m.getSamplesPerSec();
  v.pid = m.getPid();
  v.host = m.getHost();
  v.lost_reason = m.getLostReason();
  v.ms_since_heartbeat = m.getMsSinceHeartbeat();
  v.determinism_class = m.getDeterminismClass();
  v.bad_lines = m.getBadLines();
  v.waiting_on = m.getWaitingOn();
  return v;
}

StatusOr<ClusterView> ReadView(wire::ClusterStatusReply::Reader r) {
  ClusterView v;
  v.term = r.getTerm();
  v.generation = r.getGeneration();
  v.timeline = r.getTimeline();
  TANDEM_ASSIGN_OR_RETURN(v.job_state, wire::FromWire(r.getJobState()));
  v.step = r.getStep();
  v.total_steps = r.getTotalSteps();
  v.last_checkpoint_step = r.getLastCheckpointStep();
  v.generation_pending = r.getGenerationPending();
  v.samples_per_sec = r.getSamplesPerSec();
  v.loss = r.getLoss();
  v.auc = r.getAuc();
  v.logloss = r.getLogloss();
  v.teacher_auc = r.getTeacherAuc();
  v.model_checksum = r.getModelChecksum();
  v.detail = r.getDetail();
  v.elapsed_ms = r.getElapsedMs();
  v.config_hash = r.getConfigHash();
  v.bad_lines = r.getBadLines();
  v.resume_step = r.getResumeStep();
  v.rejoin_pending = r.getRejoinPending();
  for (auto m : r.getMembers()) {
    auto member = ReadMember(m);
    if (!member.ok()) return member.status().WithContext("cluster view");
    v.members.push_back(std::move(member).value());
  }
  return v;
}

}  // namespace

// ---- ClusterView ----

std::vector<const MemberView*> ClusterView::Of(config::Role role) const {
  std::vector<const MemberView*> out;
  for (const auto& m : members)
    if (m.role == role) out.push_back(&m);
  std::stable_sort(out.begin(), out.end(),
                   [](const MemberView* a, const MemberView* b) { return a->index < b->index; });
  return out;
}

bool ClusterView::Complete() const {
  if (generation_pending) return false;
  for (const auto& m : members) {
    if (m.role == config::Role::kChief) continue;
    if (!IsPresent(m.state)) return false;
  }
  return true;
}

// ---- ChiefClient ----

ChiefClient::ChiefClient(zmq::context_t* context, ChiefClientOptions options)
    : context_(context),
      options_(std::move(options)),
      control_(context, options_.identity),
      identity_(options_.identity) {
  MutexLock lock(&mu_);
  auto h = control_.Connect(options_.chief_endpoint);
  if (h.ok())
    control_handle_ = *h;
  else
    TLOG_ERROR("chief endpoint {}: {}", options_.chief_endpoint, h.status().ToString());
  generation_ = options_.identity.generation;
}

ChiefClient::~ChiefClient() { StopHeartbeats(); }

wire::Identity ChiefClient::identity() const {
  MutexLock lock(&state_mu_);
  return identity_;
}

JobState ChiefClient::job_state() const {
  MutexLock lock(&state_mu_);
  return job_state_;
}

void ChiefClient::SetWaitingOn(std::string why, const std::string& source) {
  MutexLock lock(&state_mu_);
  if (why.empty())
    waiting_on_.erase(source);
  else
    waiting_on_[source] = std::move(why);
}

void ChiefClient::SetProgress(const Progress& progress) {
  MutexLock lock(&state_mu_);
  progress_ = progress;
}

milliseconds ChiefClient::HeartbeatBudget() const {
  return std::min(options_.call_budget,
                  std::max(2 * options_.heartbeat_interval, milliseconds(500)));
}

StatusOr<wire::InMessage> ChiefClient::ControlCall(wire::OutMessage message, milliseconds budget,
                                                   const std::function<bool()>& cancelled) {
  if (control_handle_ < 0)
    return Status::InvalidArgument("bad chief endpoint '" + options_.chief_endpoint + "'");
  control_.SetIdentity(identity());
  return control_.Call(control_handle_, std::move(message), std::max(budget, milliseconds(1)),
                       cancelled);
}

StatusOr<wire::InMessage> ChiefClient::ControlRetry(const std::function<wire::OutMessage()>& build,
                                                    milliseconds budget,
                                                    const std::function<bool()>& cancelled,
                                                    bool overloaded_ends) {
  const auto deadline = Clock::now() + budget;
  milliseconds backoff = kMinBackoff;
  Status last = Status::DeadlineExceeded("no attempt");
  WaitLog wait("the chief at " + options_.chief_endpoint + " to answer");
  for (;;) {
    if (cancelled && cancelled()) return StoppedWaiting("the chief at " + options_.chief_endpoint);
    const milliseconds left = Remaining(deadline);
    if (left.count() <= 0) break;
    // Short attempts when the wait can be cancelled, so that a stop is seen within one.
    const milliseconds attempt = cancelled ? std::min(left, kCancellableAttempt) : left;
    StatusOr<wire::InMessage> reply = Status::Internal("unset");
    {
      MutexLock lock(&mu_);
      reply = ControlCall(build(), attempt, cancelled);
    }
    if (reply.ok() && reply->reply_code() == ReplyCode::OK) return reply;
    if (reply.ok() && overloaded_ends && reply->reply_code() == ReplyCode::OVERLOADED)
      return Status::ResourceExhausted("the chief asks to be asked later: " +
                                       std::string(reply->envelope().getReply().getMessage()));
    if (reply.ok() && !Retryable(reply->reply_code())) return wire::ReplyStatus(*reply);
    if (!reply.ok() && !TransportError(reply.status())) return reply.status();
    last = reply.ok() ? wire::ReplyStatus(*reply) : reply.status();
    wait.Tick(last.ToString());
    std::this_thread::sleep_for(std::min(backoff, Remaining(deadline)));
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  return Status::DeadlineExceeded("the chief at " + options_.chief_endpoint +
                                  " did not answer in " + std::to_string(budget.count()) +
                                  " ms: " + last.ToString());
}

// ---- registration ----

StatusOr<Registration> ChiefClient::RegisterOnce(wire::RpcClient* client, int handle, int64_t step,
                                                 milliseconds budget) {
  if (handle < 0)
    return Status::InvalidArgument("bad chief endpoint '" + options_.chief_endpoint + "'");
  const wire::Identity id = identity();
  wire::OutMessage m;
  auto req = m.envelope().getBody().initRegisterRequest();
  req.setAddress(Text(options_.address));
  req.setConfigHash(Text(options_.config_hash));
  req.setDeterminismClass(Text(options_.determinism_class));
  req.setLastIncarnation(id.incarnation);
  req.setStep(step);
  req.setTimeline(id.timeline);
  req.setPid(static_cast<uint32_t>(::getpid()));
  req.setHost(Text(HostName()));
  client->SetIdentity(id);
  auto reply = client->Call(handle, std::move(m), std::max(budget, milliseconds(1)));
  if (!reply.ok())
    return TransportError(reply.status()) ? Status::Unavailable(reply.status().message())
                                          : reply.status();
  const std::string message = reply->envelope().getReply().getMessage();
  switch (reply->reply_code()) {
    case ReplyCode::OK:
      break;
    case ReplyCode::STALE:
    case ReplyCode::WRONG_JOB:
      return Status::PermissionDenied("the chief refused " + id.Who() + ": " + message);
    case ReplyCode::RETRY:
    case ReplyCode::OVERLOADED:
    case ReplyCode::NOT_READY:
    case ReplyCode::INTERNAL:  // e.g. the chief could not persist: it may succeed next time
      return Status::Unavailable(std::string(wire::ReplyCodeName(reply->reply_code())) + ": " +
                                 message);
    default:
      return wire::ReplyStatus(*reply);
  }
  auto body = reply->envelope().getBody();
  if (body.which() != Envelope::Body::REGISTER_REPLY)
    return Status::InvalidArgument("registration answered without a RegisterReply");
  auto r = body.getRegisterReply();
  Registration reg{r.getIncarnation(), r.getGeneration(), r.getTimeline(),        r.getTerm(),
                   r.getTotalSteps(),  r.getResumeStep(), r.getJoinsRunningJob(), r.getJobStart()};
  {
    MutexLock lock(&state_mu_);
    identity_.incarnation = reg.incarnation;
    identity_.generation = reg.generation;
    identity_.timeline = reg.timeline;
    identity_.term = reg.term;
    registered_step_ = step;
  }
  generation_ = reg.generation;
  client->SetIdentity(identity());
  return reg;
}

StatusOr<Registration> ChiefClient::Register(int64_t step, milliseconds timeout,
                                             const std::function<bool()>& cancelled) {
  const auto deadline = Clock::now() + timeout;
  milliseconds backoff = kMinBackoff;
  Status last = Status::DeadlineExceeded("no attempt");
  WaitLog wait("the chief at " + options_.chief_endpoint + " to register " + identity().Who());
  for (;;) {
    if (cancelled && cancelled()) return StoppedWaiting("the chief at " + options_.chief_endpoint);
    const milliseconds left = Remaining(deadline);
    if (left.count() <= 0) break;
    StatusOr<Registration> reg = Status::Internal("unset");
    {
      MutexLock lock(&mu_);
      reg = RegisterOnce(&control_, control_handle_, step,
                         std::min(cancelled ? kCancellableAttempt : options_.call_budget, left));
    }
    if (reg.ok()) {
      const wire::Identity id = identity();
      TLOG_INFO("registered with the chief at {} (term {}): {} generation {} timeline {}",
                options_.chief_endpoint, reg->term, id.Who(), reg->generation, reg->timeline);
      return reg;
    }
    if (!reg.status().IsUnavailable()) return reg.status();
    last = reg.status();
    wait.Tick(last.ToString());
    std::this_thread::sleep_for(std::min(backoff, Remaining(deadline)));
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  return Status::DeadlineExceeded("no registration with the chief at " + options_.chief_endpoint +
                                  " within " + std::to_string(timeout.count()) +
                                  " ms: " + last.ToString());
}

// ---- heartbeats ----

Status ChiefClient::OnHeartbeatReply(const wire::InMessage& reply) {
  const std::string message = reply.envelope().getReply().getMessage();
  switch (reply.reply_code()) {
    case ReplyCode::OK:
      break;
    case ReplyCode::STALE:
      if (!fenced_.exchange(true)) TLOG_ERROR("fenced by the chief: {}", message);
      return Status::Aborted(message);
    case ReplyCode::RETRY:
      return Status::FailedPrecondition(message);
    default:
      return wire::ReplyStatus(reply);
  }
  auto body = reply.envelope().getBody();
  if (body.which() != Envelope::Body::HEARTBEAT_REPLY)
    return Status::InvalidArgument("heartbeat answered without a HeartbeatReply");
  auto r = body.getHeartbeatReply();
  auto job_state = wire::FromWire(r.getJobState());
  if (!job_state.ok()) return job_state.status().WithContext("heartbeat reply");
  {
    MutexLock lock(&state_mu_);
    // A view of an older term comes from a chief that has since been replaced: ignore it.
    if (r.getTerm() < identity_.term) return Status::Ok();
    identity_.term = r.getTerm();
    identity_.generation = r.getGeneration();
    identity_.timeline = r.getTimeline();
    job_state_ = *job_state;
  }
  if (generation_.exchange(r.getGeneration()) != r.getGeneration())
    TLOG_INFO("the chief announces generation {}", r.getGeneration());
  if (r.getStop() && !stop_requested_.exchange(true))
    TLOG_INFO("the chief asks the job to stop (job {})", Name(*job_state));
  return Status::Ok();
}

Status ChiefClient::SendHeartbeat(wire::RpcClient* client, int handle, milliseconds budget) {
  if (handle < 0)
    return Status::InvalidArgument("bad chief endpoint '" + options_.chief_endpoint + "'");
  Progress p;
  wire::Identity id;
  std::string waiting_on;
  {
    MutexLock lock(&state_mu_);
    p = progress_;
    id = identity_;
    for (const auto& [source, why] : waiting_on_)
      waiting_on += (waiting_on.empty() ? "" : "; ") + why;
  }
  wire::OutMessage m;
  auto hb = m.envelope().getBody().initHeartbeat();
  hb.setStep(p.step);
  hb.setSamplesPerSec(p.samples_per_sec);
  hb.setState(wire::ToWire(p.state));
  hb.setLoss(p.loss);
  hb.setAuc(p.auc);
  hb.setLogloss(p.logloss);
  hb.setTeacherAuc(p.teacher_auc);
  hb.setModelChecksum(Text(p.model_checksum));
  hb.setDetail(Text(p.detail));
  hb.setBadLines(p.bad_lines);
  hb.setWaitingOn(Text(waiting_on));
  client->SetIdentity(id);
  auto reply = client->Call(handle, std::move(m), std::max(budget, milliseconds(1)));
  if (!reply.ok()) return reply.status();
  return OnHeartbeatReply(*reply);
}

void ChiefClient::StartHeartbeats() {
  if (heartbeat_thread_.joinable()) return;
  heartbeats_running_ = true;
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
}

void ChiefClient::StopHeartbeats() {
  {
    MutexLock lock(&heartbeat_mu_);
    heartbeats_running_ = false;
  }
  heartbeat_cv_.SignalAll();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

void ChiefClient::HeartbeatLoop() {
  wire::RpcClient client(context_, identity());
  auto handle = client.Connect(options_.chief_endpoint);
  if (!handle.ok()) {
    TLOG_ERROR("heartbeats: {}", handle.status().ToString());
    return;
  }
  int failures = 0;
  for (;;) {
    const auto next = Clock::now() + options_.heartbeat_interval;
    // The systemd watchdog (units set WatchdogSec <= the heartbeat timeout): this thread is
    // alive, whether or not the chief answers.
    SdNotify("WATCHDOG=1");
    Status s = SendHeartbeat(&client, *handle, HeartbeatBudget());
    if (s.IsFailedPrecondition()) {
      // A restarted chief that does not know this member: register again, keeping the
      // incarnation, so nothing else in the job has to notice.
      TLOG_WARN("the chief does not know this member ({}): registering again", s.message());
      int64_t step;
      {
        MutexLock lock(&state_mu_);
        step = progress_.step >= 0 ? progress_.step : registered_step_;
      }
      auto reg = RegisterOnce(&client, *handle, step, HeartbeatBudget());
      if (reg.ok()) {
        TLOG_INFO("registered again: {} (term {})", identity().Who(), reg->term);
      } else if (reg.status().code() == StatusCode::kPermissionDenied) {
        if (!fenced_.exchange(true)) TLOG_ERROR("fenced: {}", reg.status().message());
      } else {
        s = reg.status();
      }
    }
    if (fenced_) return;  // a fenced member must not look alive
    if (!s.ok() && !s.IsFailedPrecondition()) {
      if (++failures == 1 || failures % 50 == 0)
        TLOG_WARN("heartbeat to the chief failed ({} in a row): {}", failures, s.ToString());
    } else {
      failures = 0;
    }
    MutexLock lock(&heartbeat_mu_);
    while (heartbeats_running_ && Clock::now() < next) heartbeat_cv_.WaitUntil(next);
    if (!heartbeats_running_) return;
  }
}

Status ChiefClient::HeartbeatNow(milliseconds budget) {
  // A final report must reach the chief even when it is being restarted (PROTOCOLS §10): the
  // attempts go on while it is unreachable, until `budget` is spent.
  const auto deadline = Clock::now() + budget;
  milliseconds backoff = kMinBackoff;
  for (;;) {
    // Attempts of at most a second: a request sent to a chief that died is never answered, and
    // one attempt must not spend the whole budget waiting for it (heartbeats are idempotent).
    Status s =
        HeartbeatNowOnce(std::clamp(Remaining(deadline), milliseconds(1), milliseconds(1000)));
    if (!TransportError(s) || Remaining(deadline) <= backoff) return s;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

Status ChiefClient::Leave(milliseconds budget) {
  {
    MutexLock lock(&state_mu_);
    progress_.state = MemberState::kLeft;
  }
  MutexLock lock(&mu_);
  return SendHeartbeat(&control_, control_handle_, budget);
}

Status ChiefClient::HeartbeatNowOnce(milliseconds budget) {
  MutexLock lock(&mu_);
  Status s = SendHeartbeat(&control_, control_handle_, budget);
  if (!s.IsFailedPrecondition()) return s;
  int64_t step;
  {
    MutexLock state_lock(&state_mu_);
    step = progress_.step >= 0 ? progress_.step : registered_step_;
  }
  auto reg = RegisterOnce(&control_, control_handle_, step, budget);
  if (!reg.ok()) {
    if (reg.status().code() == StatusCode::kPermissionDenied) fenced_ = true;
    return reg.status();
  }
  return SendHeartbeat(&control_, control_handle_, budget);
}

// ---- the view, barriers, the store, stop ----

StatusOr<ClusterView> ChiefClient::View(milliseconds budget,
                                        const std::function<bool()>& cancelled) {
  auto reply = ControlRetry(
      [] {
        wire::OutMessage m;
        m.envelope().getBody().initClusterStatusRequest();
        return m;
      },
      budget, cancelled);
  if (!reply.ok()) return reply.status();
  auto body = reply->envelope().getBody();
  if (body.which() != Envelope::Body::CLUSTER_STATUS_REPLY)
    return Status::InvalidArgument("status answered without a ClusterStatusReply");
  return ReadView(body.getClusterStatusReply());
}

StatusOr<ClusterView> ChiefClient::AwaitComplete(milliseconds timeout,
                                                 const std::function<bool()>& cancelled) {
  const auto deadline = Clock::now() + timeout;
  std::string last = "no answer";
  WaitLog wait("every ps and worker to register with the chief at " + options_.chief_endpoint);
  for (;;) {
    if (cancelled && cancelled()) return StoppedWaiting("the cluster");
    auto view =
        View(std::max(milliseconds(1), std::min(options_.call_budget, Remaining(deadline))));
    if (view.ok()) {
      if (view->Complete()) return view;
      int up = 0, all = 0;
      for (const auto& m : view->members) {
        if (m.role == config::Role::kChief) continue;
        ++all;
        up += IsPresent(m.state);
      }
      last = std::to_string(up) + " of " + std::to_string(all) + " members up";
      std::string missing;
      for (const auto& m : view->members)
        if (m.role != config::Role::kChief && !IsPresent(m.state))
          missing += (missing.empty() ? "" : ", ") + std::string(config::RoleName(m.role)) + ":" +
                     std::to_string(m.index) + " (" + std::string(Name(m.state)) + ")";
      if (!missing.empty()) last += "; missing " + missing;
      if (view->generation_pending && missing.empty()) last += "; a new generation is pending";
    } else {
      last = view.status().ToString();
    }
    wait.Tick(last);
    if (Remaining(deadline).count() <= 0) break;
    std::this_thread::sleep_for(std::min(kPollEvery, Remaining(deadline)));
  }
  return Status::DeadlineExceeded("the cluster was not complete within " +
                                  std::to_string(timeout.count()) + " ms: " + last);
}

Status ChiefClient::Barrier(const std::string& name, uint32_t count, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  milliseconds backoff = kMinBackoff;
  std::string last = "no attempt";
  for (;;) {
    const milliseconds left = Remaining(deadline);
    if (left.count() <= 0) break;
    wire::OutMessage m;
    auto req = m.envelope().getBody().initBarrierRequest();
    req.setName(Text(name));
    req.setCount(count);
    StatusOr<wire::InMessage> reply = Status::Internal("unset");
    {
      // Short attempts, so other control calls are not held up behind a parked barrier.
      MutexLock lock(&mu_);
      reply = ControlCall(std::move(m), std::min({options_.call_budget, kBarrierAttempt, left}));
    }
    if (reply.ok() && reply->reply_code() == ReplyCode::OK) return Status::Ok();
    if (reply.ok() && reply->reply_code() == ReplyCode::NOT_READY) continue;  // still parked
    if (reply.ok() && !Retryable(reply->reply_code())) return wire::ReplyStatus(*reply);
    if (!reply.ok() && !TransportError(reply.status())) return reply.status();
    if (!reply.ok() && reply.status().IsDeadlineExceeded()) {
      last = reply.status().ToString();
      continue;  // the attempt ended before the chief's NOT_READY: simply enter again
    }
    last = reply.ok() ? wire::ReplyStatus(*reply).ToString() : reply.status().ToString();
    std::this_thread::sleep_for(std::min(backoff, Remaining(deadline)));
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  return Status::DeadlineExceeded("barrier '" + name + "' of " + std::to_string(count) +
                                  " not complete within " + std::to_string(timeout.count()) +
                                  " ms: " + last);
}

Status ChiefClient::KvSet(const std::string& key, std::string_view value) {
  auto reply = ControlRetry(
      [&] {
        wire::OutMessage m;
        auto req = m.envelope().getBody().initKvSet();
        req.setKey(Text(key));
        req.setValue(
            capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(value.data()), value.size()));
        return m;
      },
      options_.call_budget);
  return reply.ok() ? Status::Ok() : reply.status().WithContext("kv set '" + key + "'");
}

StatusOr<std::optional<std::string>> ChiefClient::KvGet(const std::string& key) {
  auto reply = ControlRetry(
      [&] {
        wire::OutMessage m;
        m.envelope().getBody().initKvGet().setKey(Text(key));
        return m;
      },
      options_.call_budget);
  if (!reply.ok()) return reply.status().WithContext("kv get '" + key + "'");
  auto body = reply->envelope().getBody();
  if (body.which() != Envelope::Body::KV_GET_REPLY)
    return Status::InvalidArgument("kv get answered without a KvGetReply");
  auto r = body.getKvGetReply();
  if (!r.getFound()) return std::optional<std::string>();
  auto v = r.getValue();
  return std::optional<std::string>(
      std::string(reinterpret_cast<const char*>(v.begin()), v.size()));
}

StatusOr<JobState> ChiefClient::StopJob(const std::string& reason) {
  auto reply = ControlRetry(
      [&] {
        wire::OutMessage m;
        m.envelope().getBody().initStopJobRequest().setReason(Text(reason));
        return m;
      },
      options_.call_budget);
  if (!reply.ok()) return reply.status();
  auto body = reply->envelope().getBody();
  if (body.which() != Envelope::Body::STOP_JOB_REPLY)
    return Status::InvalidArgument("stop answered without a StopJobReply");
  return wire::FromWire(body.getStopJobReply().getJobState());
}

StatusOr<ChiefClient::RegroupAnswer> ChiefClient::Regroup(uint64_t failed_generation,
                                                          const std::string& reason,
                                                          std::chrono::milliseconds budget) {
  auto reply = ControlRetry(
      [&] {
        wire::OutMessage m;
        auto req = m.envelope().getBody().initRegroupRequest();
        req.setGeneration(failed_generation);
        req.setReason(Text(reason));
        return m;
      },
      budget);
  if (!reply.ok()) return reply.status();
  auto body = reply->envelope().getBody();
  if (body.which() != Envelope::Body::REGROUP_REPLY)
    return Status::InvalidArgument("regroup answered without a RegroupReply");
  auto r = body.getRegroupReply();
  RegroupAnswer a;
  a.generation = r.getGeneration();
  a.raised = r.getRaised();
  a.why_not = r.getWhyNot();
  return a;
}

StatusOr<int64_t> ChiefClient::CommitCheckpoint(int64_t step, const std::vector<std::string>& parts,
                                                const std::string& determinism_class,
                                                std::chrono::milliseconds budget,
                                                std::vector<int64_t>* retained) {
  auto reply = ControlRetry(
      [&] {
        wire::OutMessage m;
        auto req = m.envelope().getBody().initCommitCheckpointRequest();
        req.setStep(step);
        req.setDeterminismClass(Text(determinism_class));
        auto list = req.initParts(static_cast<unsigned>(parts.size()));
        for (unsigned i = 0; i < parts.size(); ++i) list.set(i, Text(parts[i]));
        return m;
      },
      budget, nullptr, /*overloaded_ends=*/true);
  if (!reply.ok()) return reply.status();
  auto body = reply->envelope().getBody();
  if (body.which() != Envelope::Body::COMMIT_CHECKPOINT_REPLY)
    return Status::InvalidArgument("commit answered without a CommitCheckpointReply");
  auto commit = body.getCommitCheckpointReply();
  if (retained != nullptr) {
    retained->clear();
    for (int64_t s : commit.getRetainedSteps()) retained->push_back(s);
  }
  return commit.getCommittedStep();
}

}  // namespace tandem
