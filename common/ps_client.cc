#include "common/ps_client.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "common/slot_map.h"
#include "common/wait_log.h"

namespace tandem {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {
// A shard that dies takes the requests in flight to it along: they fail at once and are sent
// again (to the restarted shard, once it listens) instead of waiting out attempt_budget, which
// stalled every step of a job ~5 s after each PS restart (drills with the table 20x the cache).
wire::ClientOptions RpcOptions() {
  wire::ClientOptions o;
  o.fail_on_disconnect = true;
  return o;
}
}  // namespace

PsClient::PsClient(zmq::context_t* context, wire::Identity identity, PsClientOptions options)
    : options_(std::move(options)), rpc_(context, identity, RpcOptions()) {
  shards_.resize(options_.shards.size());
  for (size_t s = 0; s < shards_.size(); ++s) {
    auto h = rpc_.Connect(options_.shards[s]);
    shards_[s].handle = h.ok() ? *h : -1;  // a bad endpoint fails every call to that shard
  }
}

size_t PsClient::retained_pushes() const {
  size_t n = 0;
  for (const auto& s : shards_) n += s.retained.size();
  return n;
}

bool PsClient::Observe(size_t shard, const wire::InMessage& reply) {
  ShardState& st = shards_[shard];
  const uint64_t inc = reply.header().getIncarnation();
  const bool restarted = st.incarnation != 0 && inc > st.incarnation;
  st.incarnation = std::max(st.incarnation, inc);
  int64_t applied = st.applied;
  auto body = reply.envelope().getBody();
  if (body.which() == wire::Envelope::Body::PULL_REPLY)
    applied = body.getPullReply().getAppliedStep();
  if (body.which() == wire::Envelope::Body::PUSH_REPLY)
    applied = body.getPushReply().getAppliedStep();
  if (body.which() == wire::Envelope::Body::CHECKSUM_REPLY)
    applied = body.getChecksumReply().getAppliedStep();
  if (reply.reply_code() == wire::ReplyCode::STALE || reply.reply_code() == wire::ReplyCode::RETRY)
    applied = reply.envelope().getReply().getView().getAppliedStep();
  // A restarted shard may report a lower applied step (machine crash in `process` mode): trust it.
  st.applied = restarted ? applied : std::max(st.applied, applied);
  st.retained.erase(st.retained.begin(), st.retained.upper_bound(st.applied));
  return restarted;
}

Status PsClient::CallShards(const std::vector<size_t>& targets,
                            const std::function<wire::OutMessage(size_t)>& build,
                            const OnReply& on_reply, Clock::time_point deadline) {
  struct Todo {
    size_t shard;
    Clock::time_point next_try;
    milliseconds backoff{10};
  };
  std::vector<Todo> todo;
  for (size_t s : targets) todo.push_back({s, Clock::now()});
  std::vector<size_t> restarted;
  // A shard cut off or restarting: say which, where, and the last error every few seconds.
  WaitLog wait("PS shards");
  std::string last_error = "no answer yet";
  while (!todo.empty()) {
    if (options_.interrupted && options_.interrupted())
      return Status::Cancelled(
          "interrupted: the chief announced a new generation, or the job is stopping");
    if (wait.due()) {
      std::string waiting;
      for (const auto& t : todo)
        waiting += (waiting.empty() ? "" : ", ") + std::string("shard ") + std::to_string(t.shard) +
                   " at " + options_.shards[t.shard];
      wait.Tick(waiting + " (" + last_error + ")");
    }
    const auto now = Clock::now();
    if (now >= deadline)
      return Status::DeadlineExceeded(
          "parameter servers did not answer in time (last: " + last_error + ")");
    std::vector<uint64_t> ids;
    std::vector<size_t> sent;  // index into todo
    for (size_t i = 0; i < todo.size(); ++i) {
      if (todo[i].next_try > now) continue;
      stats_.attempts++;
      // A shard that is gone (a lost PS that left) must not hold a stop or a new generation up
      // for the whole attempt.
      auto id = rpc_.Send(
          shards_[todo[i].shard].handle, build(todo[i].shard),
          std::min(options_.attempt_budget,
                   std::chrono::duration_cast<milliseconds>(deadline - now) + milliseconds(1)),
          options_.interrupted);
      if (!id.ok()) {  // unreachable (e.g. restarting): back off and try again
        last_error = id.status().ToString();
        stats_.retries++;
        todo[i].next_try = Clock::now() + todo[i].backoff;
        todo[i].backoff = std::min(todo[i].backoff * 2, milliseconds(1000));
        continue;
      }
      ids.push_back(*id);
      sent.push_back(i);
    }
    if (ids.empty()) {
      auto next = deadline;
      for (const auto& t : todo) next = std::min(next, t.next_try);
      if (options_.interrupted) next = std::min(next, Clock::now() + milliseconds(100));
      std::this_thread::sleep_until(next);
      continue;
    }
    auto replies = rpc_.WaitAll(ids, std::min(deadline, Clock::now() + options_.attempt_budget),
                                options_.interrupted);
    std::vector<bool> done(todo.size(), false);
    for (size_t j = 0; j < replies.size(); ++j) {
      Todo& t = todo[sent[j]];
      auto& r = replies[j];
      if (!r.ok()) {
        last_error = r.status().ToString();
        stats_.retries++;
        t.next_try = Clock::now() + t.backoff;
        t.backoff = std::min(t.backoff * 2, milliseconds(1000));
        continue;
      }
      if (Observe(t.shard, *r)) restarted.push_back(t.shard);
      switch (r->reply_code()) {
        case wire::ReplyCode::OK:
          TANDEM_RETURN_IF_ERROR(on_reply(t.shard, *r));
          done[sent[j]] = true;
          break;
        case wire::ReplyCode::NOT_READY:
          stats_.not_ready++;
          t.next_try = Clock::now();
          break;
        case wire::ReplyCode::OVERLOADED:
          deadline = std::max(deadline, Clock::now() + options_.timeout);
          if (options_.on_overloaded) options_.on_overloaded();
          [[fallthrough]];
        case wire::ReplyCode::RETRY:
          // Say why (a shard whose disk is full refuses pushes until it has space again).
          last_error = "shard " + std::to_string(t.shard) + ": " + wire::ReplyStatus(*r).ToString();
          stats_.retries++;
          t.next_try = Clock::now() + t.backoff;
          t.backoff = std::min(t.backoff * 2, milliseconds(1000));
          break;
        default:
          return wire::ReplyStatus(*r).WithContext("shard " + std::to_string(t.shard));
      }
    }
    std::vector<Todo> rest;
    for (size_t i = 0; i < todo.size(); ++i)
      if (!done[i]) rest.push_back(todo[i]);
    todo.swap(rest);
  }
  for (size_t s : restarted) TANDEM_RETURN_IF_ERROR(ResendRetained(s, deadline));
  return Status::Ok();
}

namespace {
// Rows [0, n) of `src` to rows at[0..n) of `dst`, a run of consecutive targets (all of them
// when one shard holds a table's ids and none repeats) in one copy.
void CopyRows(const float* src, size_t n, uint32_t dim, const uint32_t* at, float* dst) {
  for (size_t j = 0; j < n;) {
    size_t run = 1;
    while (j + run < n && at[j + run] == at[j] + run) ++run;
    std::memcpy(dst + size_t{at[j]} * dim, src + j * dim, run * dim * sizeof(float));
    j += run;
  }
}

Status BadRowsFrame() {
  return Status::InvalidArgument("pull reply frame of partial rows, or of more rows than asked");
}
}  // namespace

Status PsClient::Pull(int64_t step, std::span<const TableIds> tables,
                      std::vector<std::vector<float>>* rows, bool from_pre_images) {
  const size_t n_shards = shards_.size();
  if (dedupe_.size() < tables.size()) dedupe_.resize(tables.size());
  // Per (shard, request table): the unique ids sent and where their rows go.
  std::vector<std::vector<std::vector<uint64_t>>> ids(
      n_shards, std::vector<std::vector<uint64_t>>(tables.size()));
  std::vector<std::vector<std::vector<uint32_t>>> pos(
      n_shards, std::vector<std::vector<uint32_t>>(tables.size()));
  std::vector<std::vector<float>> unique_rows(tables.size());
  std::vector<bool> no_repeats(tables.size());
  rows->resize(tables.size());
  for (size_t i = 0; i < tables.size(); ++i) {
    const auto& t = tables[i];
    if (t.table >= options_.dims.size())
      return Status::InvalidArgument("unknown table " + std::to_string(t.table));
    // Ids spread about evenly over the shards (ShardOf hashes them).
    const size_t expect = t.ids.size() / n_shards + (n_shards == 1 ? 0 : t.ids.size() / 16 + 16);
    for (size_t s = 0; s < n_shards; ++s) {
      ids[s][i].reserve(expect);
      pos[s][i].reserve(expect);
    }
    const auto add = [&](size_t j, uint32_t u) {
      const uint64_t id = t.ids[j];
      const uint32_t s = n_shards == 1 ? 0 : ShardOf(t.table, id, static_cast<uint32_t>(n_shards));
      ids[s][i].push_back(id);
      pos[s][i].push_back(u);
    };
    size_t unique = t.ids.size();
    if (t.unique) {
      // Each position is its own unique id (a batch's ids, de-duplicated by the input pipeline):
      // no index to build, a fifth of a pull's client CPU at 64 k ids.
      for (size_t j = 0; j < t.ids.size(); ++j) add(j, static_cast<uint32_t>(j));
    } else {
      FlatIdIndex& idx = dedupe_[i];
      idx.Reset(t.ids.size());
      idx.InsertAll(t.ids.data(), t.ids.size(), [&](size_t j, uint32_t u, bool inserted) {
        if (inserted) add(j, u);
      });
      unique = idx.size();
    }
    // Without repeated ids the unique order is the request order: rows go straight to `rows`.
    no_repeats[i] = unique == t.ids.size();
    auto& target = no_repeats[i] ? (*rows)[i] : unique_rows[i];
    target.resize(unique * options_.dims[t.table]);
  }
  std::vector<size_t> targets;
  for (size_t s = 0; s < n_shards; ++s) {
    bool any = false;
    for (const auto& v : ids[s]) any |= !v.empty();
    if (any) targets.push_back(s);
  }
  last_pull_asked_all_ = false;  // set once this pull has been answered
  auto build = [&](size_t s) {
    wire::OutMessage m;
    auto req = m.envelope().getBody().initPullRequest();
    req.setStep(step);
    req.setFromPreImages(from_pre_images);
    req.setPrecision(static_cast<uint8_t>(options_.wire_precision));
    unsigned n = 0;
    for (const auto& v : ids[s]) n += !v.empty();
    auto slices = req.initTables(n);
    unsigned k = 0;
    for (size_t i = 0; i < tables.size(); ++i) {
      if (ids[s][i].empty()) continue;
      slices[k].setTableId(tables[i].table);
      slices[k].setCount(static_cast<uint32_t>(ids[s][i].size()));
      slices[k].setDim(options_.dims[tables[i].table]);
      slices[k].setIdsFrame(static_cast<uint16_t>(k));
      m.AddBulkCopy(ids[s][i].data(), ids[s][i].size() * sizeof(uint64_t));
      ++k;
    }
    return m;
  };
  auto on_reply = [&](size_t s, wire::InMessage& r) -> Status {
    auto body = r.envelope().getBody();
    if (body.which() != wire::Envelope::Body::PULL_REPLY)
      return Status::InvalidArgument("pull answered without rows");
    auto slices = body.getPullReply().getTables();
    unsigned k = 0;
    for (size_t i = 0; i < tables.size(); ++i) {
      if (ids[s][i].empty()) continue;
      if (k >= slices.size()) return Status::InvalidArgument("pull reply lacks a table");
      const uint32_t dim = options_.dims[tables[i].table];
      const size_t n = ids[s][i].size() * dim;
      float* dst = no_repeats[i] ? (*rows)[i].data() : unique_rows[i].data();
      const uint8_t precision = slices[k].getPrecision();
      if (precision > static_cast<uint8_t>(WirePrecision::kFp16))
        return Status::InvalidArgument("pull reply of unknown precision " +
                                       std::to_string(precision));
      // The rows may span several frames (TableSlice.valuesFrames), each of whole rows.
      const size_t frames = std::max<size_t>(1, slices[k].getValuesFrames());
      size_t row = 0;
      for (size_t f = 0; f < frames; ++f) {
        const size_t frame = slices[k].getValuesFrame() + f;
        const auto p = static_cast<WirePrecision>(precision);
        size_t values = 0;
        if (p == WirePrecision::kFp32) {
          auto v = r.BulkAs<float>(frame);
          if (!v.ok()) return v.status();
          values = v->size();
          if (values % dim != 0 || row + values / dim > ids[s][i].size()) return BadRowsFrame();
          CopyRows(v->data(), values / dim, dim, &pos[s][i][row], dst);
        } else {
          auto v = r.BulkAs<uint16_t>(frame);
          if (!v.ok()) return v.status();
          values = v->size();
          if (values % dim != 0 || row + values / dim > ids[s][i].size()) return BadRowsFrame();
          for (size_t j = 0; j < values / dim; ++j)
            DecodeHalf(p, v->subspan(j * dim, dim), {dst + size_t{pos[s][i][row + j]} * dim, dim});
        }
        row += values / dim;
      }
      if (row * dim != n)
        return Status::InvalidArgument("pull reply has the wrong number of values");
      ++k;
    }
    return Status::Ok();
  };
  TANDEM_RETURN_IF_ERROR(CallShards(targets, build, on_reply, Clock::now() + options_.timeout));
  last_pull_asked_all_ = targets.size() == n_shards;
  for (size_t i = 0; i < tables.size(); ++i) {
    if (no_repeats[i]) continue;
    const uint32_t dim = options_.dims[tables[i].table];
    auto& out = (*rows)[i];
    out.resize(tables[i].ids.size() * dim);
    for (size_t j = 0; j < tables[i].ids.size(); ++j) {
      const uint32_t u = dedupe_[i].Find(tables[i].ids[j]);
      std::copy_n(unique_rows[i].data() + size_t{u} * dim, dim, out.data() + j * dim);
    }
  }
  return Status::Ok();
}

namespace {

// A frame over `bytes` of memory owned by `owner`: no copy; the frame keeps the owner alive
// until ZeroMQ has sent it.
template <typename Owner>
zmq::message_t SharedFrame(const void* data, size_t bytes, const std::shared_ptr<Owner>& owner) {
  auto* hint = new std::shared_ptr<Owner>(owner);
  return zmq::message_t(
      const_cast<void*>(data), bytes,
      [](void*, void* h) { delete static_cast<std::shared_ptr<Owner>*>(h); }, hint);
}

}  // namespace

wire::OutMessage PsClient::BuildPush(int64_t step,
                                     const std::shared_ptr<const Payload>& payload) const {
  const Payload& p = *payload;
  wire::OutMessage m;
  auto req = m.envelope().getBody().initPushRequest();
  req.setStep(step);
  req.setRank(rpc_.identity().index);
  req.setSkip(p.skip);
  req.setCheckpoint(p.checkpoint);
  auto slices = req.initTables(static_cast<unsigned>(p.tables.size()));
  for (size_t k = 0; k < p.tables.size(); ++k) {
    slices[k].setTableId(p.tables[k]);
    slices[k].setCount(static_cast<uint32_t>(p.ids[k].size()));
    slices[k].setDim(options_.dims[p.tables[k]]);
    slices[k].setIdsFrame(static_cast<uint16_t>(2 * k));
    slices[k].setValuesFrame(static_cast<uint16_t>(2 * k + 1));
    m.AddBulk(SharedFrame(p.ids[k].data(), p.ids[k].size() * sizeof(uint64_t), payload));
    if (p.half_grads.empty()) {
      m.AddBulk(SharedFrame(p.grads[k].data(), p.grads[k].size() * sizeof(float), payload));
    } else {
      slices[k].setPrecision(static_cast<uint8_t>(options_.wire_precision));
      m.AddBulk(
          SharedFrame(p.half_grads[k].data(), p.half_grads[k].size() * sizeof(uint16_t), payload));
    }
  }
  return m;
}

Status PsClient::Push(int64_t step, std::span<const TableGrads> tables, bool skip) {
  const size_t n_shards = shards_.size();
  std::vector<Payload> payloads(n_shards);
  for (auto& p : payloads) {
    p.skip = skip;
    p.checkpoint = step == checkpoint_step_;
  }
  // Each shard's rows keep the call's order, in vectors sized by a counting pass: no growth
  // copies (fresh pages) on the push path.
  std::vector<uint32_t> shard_of;
  std::vector<size_t> count(n_shards);
  std::vector<size_t> filled(n_shards);
  std::vector<uint64_t*> ids_at(n_shards);
  std::vector<float*> grads_at(n_shards);
  for (const auto& t : tables) {
    if (t.table >= options_.dims.size())
      return Status::InvalidArgument("unknown table " + std::to_string(t.table));
    const uint32_t dim = options_.dims[t.table];
    if (t.grads.size() != t.ids.size() * dim)
      return Status::InvalidArgument("ids and gradients disagree");
    if (t.ids.empty()) continue;
    if (n_shards == 1) {
      payloads[0].tables.push_back(t.table);
      payloads[0].ids.emplace_back(t.ids.begin(), t.ids.end());
      payloads[0].grads.emplace_back(t.grads.begin(), t.grads.end());
      continue;
    }
    shard_of.resize(t.ids.size());
    std::fill(count.begin(), count.end(), 0);
    for (size_t j = 0; j < t.ids.size(); ++j) {
      shard_of[j] = ShardOf(t.table, t.ids[j], static_cast<uint32_t>(n_shards));
      ++count[shard_of[j]];
    }
    for (size_t s = 0; s < n_shards; ++s) {
      if (count[s] == 0) continue;
      Payload& p = payloads[s];
      p.tables.push_back(t.table);
      ids_at[s] = p.ids.emplace_back(count[s]).data();
      grads_at[s] = p.grads.emplace_back(count[s] * dim).data();
      filled[s] = 0;
    }
    for (size_t j = 0; j < t.ids.size(); ++j) {
      const uint32_t s = shard_of[j];
      const size_t k = filled[s]++;
      ids_at[s][k] = t.ids[j];
      std::memcpy(grads_at[s] + k * dim, t.grads.data() + j * dim, dim * sizeof(float));
    }
  }
  if (options_.wire_precision != WirePrecision::kFp32) {
    // Encoded once: a resent push carries the same bytes (the shard checks resends bit for bit).
    for (Payload& p : payloads) {
      for (std::vector<float>& g : p.grads) {
        p.half_grads.emplace_back(g.size());
        EncodeHalf(options_.wire_precision, g, p.half_grads.back());
        std::vector<float>().swap(g);
      }
    }
  }
  std::vector<size_t> targets;
  std::vector<std::shared_ptr<const Payload>> sent(n_shards);
  for (size_t s = 0; s < n_shards; ++s) {
    sent[s] = std::make_shared<const Payload>(std::move(payloads[s]));
    shards_[s].retained[step] = sent[s];
    targets.push_back(s);
  }
  auto on_reply = [](size_t, wire::InMessage& r) -> Status {
    if (r.envelope().getBody().which() != wire::Envelope::Body::PUSH_REPLY)
      return Status::InvalidArgument("push answered without a push reply");
    return Status::Ok();
  };
  // Observe() may drop a retained payload as soon as its shard reports `step` applied, so
  // retries build from `sent`, which holds every payload for the whole call.
  return CallShards(
      targets, [&](size_t s) { return BuildPush(step, sent[s]); }, on_reply,
      Clock::now() + options_.timeout);
}

StatusOr<ModelChecksum> PsClient::Checksum(int64_t step, uint64_t* rows) {
  if (step < -1) return Status::InvalidArgument("checksum of step " + std::to_string(step));
  std::vector<size_t> targets(shards_.size());
  for (size_t s = 0; s < targets.size(); ++s) targets[s] = s;
  // Per shard, so a shard answering twice (a resend after a lost reply) is counted once.
  std::vector<ModelChecksum> parts(shards_.size());
  std::vector<uint64_t> part_rows(shards_.size(), 0);
  auto build = [&](size_t) {
    wire::OutMessage m;
    m.envelope().getBody().initChecksumRequest().setStep(step);
    return m;
  };
  auto on_reply = [&](size_t s, wire::InMessage& r) -> Status {
    auto body = r.envelope().getBody();
    if (body.which() != wire::Envelope::Body::CHECKSUM_REPLY)
      return Status::InvalidArgument("checksum answered without a checksum reply");
    auto reply = body.getChecksumReply();
    parts[s] = ModelChecksum::FromParts(reply.getHigh(), reply.getLow());
    part_rows[s] = reply.getRows();
    return Status::Ok();
  };
  TANDEM_RETURN_IF_ERROR(CallShards(targets, build, on_reply, Clock::now() + options_.timeout));
  ModelChecksum sum;
  uint64_t total = 0;
  for (size_t s = 0; s < parts.size(); ++s) {
    sum.Merge(parts[s]);
    total += part_rows[s];
  }
  if (rows != nullptr) *rows = total;
  return sum;
}

// A shard answers "copying" while its part's copy runs (its time grows with the table), so the
// deadline applies to each round of asking, never to the copy: a shard that keeps answering is
// waited for however long its copy takes.
StatusOr<std::vector<std::string>> PsClient::CheckpointParts(int64_t step,
                                                             const std::vector<int64_t>& retained,
                                                             PartKind kind) {
  if (step < 0) return Status::InvalidArgument("checkpoint of step " + std::to_string(step));
  std::vector<size_t> todo(shards_.size());
  for (size_t s = 0; s < todo.size(); ++s) todo[s] = s;
  std::vector<std::string> parts(shards_.size());
  auto build = [&](size_t) {
    wire::OutMessage m;
    auto req = m.envelope().getBody().initCheckpointPartRequest();
    req.setStep(step);
    req.setKind(kind == PartKind::kDelta            ? wire::PartKind::DELTA
                : kind == PartKind::kDeltaIfCheaper ? wire::PartKind::DELTA_IF_CHEAPER
                                                    : wire::PartKind::FULL);
    auto list = req.initRetainedSteps(static_cast<unsigned>(retained.size()));
    for (unsigned i = 0; i < retained.size(); ++i) list.set(i, retained[i]);
    return m;
  };
  std::vector<size_t> copying;
  std::string progress;
  auto on_reply = [&](size_t s, wire::InMessage& r) -> Status {
    auto body = r.envelope().getBody();
    if (body.which() != wire::Envelope::Body::CHECKPOINT_PART_REPLY)
      return Status::InvalidArgument("checkpoint part answered without a checkpoint part reply");
    auto reply = body.getCheckpointPartReply();
    if (reply.getStep() != step)
      return Status::InvalidArgument("shard " + std::to_string(s) + " answered the part of step " +
                                     std::to_string(reply.getStep()));
    if (reply.getCopying()) {
      copying.push_back(s);
      progress += " shard " + std::to_string(s) + ": " +
                  std::to_string(reply.getBytesDone() >> 20) + " of " +
                  std::to_string(reply.getBytesTotal() >> 20) + " MiB";
      if (reply.getCopyingStep() != step)
        progress += " (finishing the part of step " + std::to_string(reply.getCopyingStep()) + ")";
      return Status::Ok();
    }
    parts[s] = reply.getPart();
    return Status::Ok();
  };
  const auto t0 = Clock::now();
  auto logged = t0;
  milliseconds pause{2};
  for (;;) {
    copying.clear();
    progress.clear();
    TANDEM_RETURN_IF_ERROR(CallShards(todo, build, on_reply, Clock::now() + options_.timeout));
    if (copying.empty()) return parts;
    todo = copying;
    if (Clock::now() - logged >= std::chrono::seconds(10)) {
      logged = Clock::now();
      TLOG_INFO("checkpoint of step {}: waiting {:.0f} s for the shards' copies:{}", step,
                std::chrono::duration<double>(logged - t0).count(), progress);
    }
    if (options_.interrupted && options_.interrupted())
      return Status::Cancelled(
          "interrupted: the chief announced a new generation, or the job is stopping");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, milliseconds(250));
  }
}

Status PsClient::ResendRetained(size_t shard, Clock::time_point deadline) {
  // A copy of the map (the payloads are shared): replies may drop entries while we iterate.
  std::map<int64_t, std::shared_ptr<const Payload>> pending = shards_[shard].retained;
  for (const auto& entry : pending) {
    // Named copies: clang 14 cannot capture structured bindings in a lambda.
    const int64_t step = entry.first;
    const std::shared_ptr<const Payload>& payload = entry.second;
    if (step <= shards_[shard].applied) continue;
    stats_.resent_pushes++;
    TANDEM_RETURN_IF_ERROR(CallShards(
        {shard}, [&](size_t) { return BuildPush(step, payload); },
        [](size_t, wire::InMessage&) { return Status::Ok(); }, deadline));
  }
  return Status::Ok();
}

}  // namespace tandem
