#include "server/ps/ps_service.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/wire/diagnostics.h"
#include "common/wire_precision.h"
#include "server/ps/ps_service_internal.h"

namespace tandem::ps {

using wire::Envelope;
using wire::ReplyCode;

std::vector<wire::LaneOptions> PsLanes(int handler_threads) {
  const int pull = std::max(1, handler_threads / 2);
  const int push = std::max(1, handler_threads - pull);
  return {wire::LaneOptions{"push", push}, wire::LaneOptions{"pull", pull}};
}

void RegisterPsDiagnostics(wire::RpcServer* server) {
  wire::RegisterDiagnostics(server, kPullLane);
}

PsService::PsService(Shard* shard, wire::RpcServer* server)
    : shard_(shard), server_(server), incarnations_(shard->options().num_workers, 0) {}

void PsService::Register() {
  wire::RegisterDiagnostics(server_, kPullLane);
  server_->Handle(Envelope::Body::PULL_REQUEST, kPullLane,
                  [this](wire::InMessage& m, wire::Responder r) { HandlePull(m, std::move(r)); });
  server_->Handle(Envelope::Body::PUSH_REQUEST, kPushLane,
                  [this](wire::InMessage& m, wire::Responder r) { HandlePush(m, std::move(r)); });
  server_->Handle(
      Envelope::Body::CHECKSUM_REQUEST, kPullLane,
      [this](wire::InMessage& m, wire::Responder r) { HandleChecksum(m, std::move(r)); });
  server_->Handle(
      Envelope::Body::CHECKPOINT_PART_REQUEST, kPushLane,
      [this](wire::InMessage& m, wire::Responder r) { HandleCheckpointPart(m, std::move(r)); });
  server_->SetGate([this](const wire::InMessage& m) { return Fence(m); });
}

PsServiceStats PsService::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

// Until the chief issues incarnations, the shard fences by the highest incarnation it has seen
// per worker rank in a logged push: a pull or push from an older incarnation of a rank is a
// zombie's (PROTOCOLS §10). Only a logged push raises the bar, so a malformed or stray message
// cannot fence a live worker out; diagnostics are never fenced.
std::optional<wire::Rejection> PsService::Fence(const wire::InMessage& m) {
  auto h = m.header();
  const auto body = m.envelope().getBody().which();
  if (h.getSenderRole() != wire::Role::WORKER ||
      (body != Envelope::Body::PULL_REQUEST && body != Envelope::Body::PUSH_REQUEST))
    return std::nullopt;
  const uint32_t rank = h.getSenderIndex();
  MutexLock lock(&mu_);
  if (rank >= incarnations_.size())
    return wire::Rejection{ReplyCode::INVALID,
                           "worker rank " + std::to_string(rank) + " is outside the cluster"};
  if (h.getIncarnation() < incarnations_[rank]) {
    stats_.stale++;
    return wire::Rejection{ReplyCode::STALE, "worker " + std::to_string(rank) + " incarnation " +
                                                 std::to_string(h.getIncarnation()) +
                                                 " was replaced by incarnation " +
                                                 std::to_string(incarnations_[rank])};
  }
  return std::nullopt;
}

void PsService::RaiseIncarnation(uint32_t rank, uint64_t incarnation) {
  MutexLock lock(&mu_);
  if (rank < incarnations_.size()) incarnations_[rank] = std::max(incarnations_[rank], incarnation);
}

void PsService::HandlePush(wire::InMessage& m, wire::Responder r) {
  PushInput in;
  std::vector<std::vector<float>> decoded;
  Status s = internal::ReadPushRequest(m, &in, &decoded);
  StatusOr<PushAck> ack = s.ok() ? shard_->Push(in) : StatusOr<PushAck>(s);
  {
    MutexLock lock(&mu_);
    stats_.pushes++;
    if (!ack.ok() && ack.status().IsInvalidArgument()) stats_.invalid++;
  }
  if (ack.ok()) {
    RaiseIncarnation(in.rank, in.incarnation);
    wire::OutMessage reply = r.NewReply();
    auto body = reply.envelope().getBody().initPushReply();
    body.setDuplicate(ack->duplicate);
    body.setAppliedStep(ack->applied_step);
    r.Send(std::move(reply));
    ReleaseParked();
    return;
  }
  const Status& e = ack.status();
  const std::string msg = e.message();
  switch (e.code()) {
    case StatusCode::kFailedPrecondition:
      if (in.timeline != shard_->timeline()) {
        r.SendView(in.timeline > shard_->timeline() ? ReplyCode::RETRY : ReplyCode::STALE, msg,
                   static_cast<uint64_t>(shard_->applied_step()));
        break;
      }
      // Not the sender's view: the push log refuses records until the shard is reopened (an
      // fdatasync failed). STALE here would send a live worker into recovery for nothing.
      TLOG_ERROR("push refused: {}", e.ToString());
      r.SendError(ReplyCode::INTERNAL, msg);
      break;
    case StatusCode::kResourceExhausted:
    case StatusCode::kUnavailable:
      LogRetriedRefusal(e);
      r.SendError(ReplyCode::OVERLOADED, msg);
      break;
    case StatusCode::kInvalidArgument:
    case StatusCode::kDataLoss:
    case StatusCode::kUnimplemented:
      TLOG_WARN("invalid push from {}: {}", wire::ReadIdentity(m.header()).Who(), msg);
      r.SendError(ReplyCode::INVALID, msg);
      break;
    default:
      TLOG_ERROR("push failed: {}", e.ToString());
      r.SendError(ReplyCode::INTERNAL, msg);
  }
}

void PsService::LogRetriedRefusal(const Status& error) {
  const auto now = std::chrono::steady_clock::now();
  MutexLock lock(&mu_);
  const uint64_t before = refusals_not_logged_;
  if (now < next_refusal_log_) {
    refusals_not_logged_++;
    return;
  }
  if (before == 0) {
    TLOG_WARN("push refused: {}", error.ToString());
  } else {
    TLOG_WARN("push refused ({} more since the last line): {}", before, error.ToString());
  }
  refusals_not_logged_ = 0;
  next_refusal_log_ = now + std::chrono::seconds(10);
}

std::string PsService::Holdup() const {
  if (std::string refusal = shard_->refusal(); !refusal.empty())
    return "refusing pushes until it can write: " + refusal;
  MutexLock lock(&part_mu_);
  if (!part_refusal_.empty()) return "waiting for space for its checkpoint part: " + part_refusal_;
  return "";
}

void PsService::HandlePull(wire::InMessage& m, wire::Responder r) {
  auto req = m.envelope().getBody().getPullRequest();
  {
    MutexLock lock(&mu_);
    stats_.pulls++;
  }
  // The slices as validated, kept for the prefetch of a pull that parks.
  std::vector<TableRead> slices;
  for (auto t : req.getTables()) {
    std::span<const uint64_t> ids;
    Status s = internal::ReadPullSlice(m, t, shard_->options(), &ids);
    if (!s.ok()) {
      MutexLock lock(&mu_);
      stats_.invalid++;
      r.SendError(ReplyCode::INVALID, s.message());
      return;
    }
    slices.push_back(TableRead{t.getTableId(), ids, nullptr});
  }
  if (req.getPrecision() > static_cast<uint8_t>(WirePrecision::kFp16)) {
    MutexLock lock(&mu_);
    stats_.invalid++;
    r.SendError(ReplyCode::INVALID,
                "pull of unknown precision " + std::to_string(req.getPrecision()));
    return;
  }
  switch (shard_->CheckPull(m.header().getTimeline(), req.getStep(), req.getFromPreImages())) {
    case PullVerdict::kReady:
      AnswerPull(m, std::move(r));
      return;
    case PullVerdict::kStale: {
      MutexLock lock(&mu_);
      stats_.stale++;
      r.SendView(
          m.header().getTimeline() > shard_->timeline() ? ReplyCode::RETRY : ReplyCode::STALE,
          "pull of step " + std::to_string(req.getStep()) + " at applied step " +
              std::to_string(shard_->applied_step()),
          static_cast<uint64_t>(shard_->applied_step()));
      return;
    }
    case PullVerdict::kPark:
      Prefetch(slices);
      break;
  }
  {
    MutexLock lock(&mu_);
    stats_.parked++;
  }
  parking_.Park(shard_->RequiredVersion(req.getStep()), std::move(r),
                std::make_unique<wire::InMessage>(std::move(m)));
  // An apply may have finished between the check and the parking: look again, so no pull waits
  // for a wake-up that already happened.
  ReleaseParked();
}

PsService::~PsService() {
  std::unique_ptr<PartCopy> copy;
  {
    MutexLock lock(&part_mu_);
    copy = std::move(part_copy_);
  }
  if (copy == nullptr) return;
  copy->progress.cancel = true;
  if (copy->thread.joinable()) copy->thread.join();
}

// On the push lane, answered at once: the copy, whose time grows with the table, runs on its own
// thread (pushes and applies go on meanwhile), and a client asks again while it runs. A part
// request resent after its reply was lost starts a new copy, which CheckpointPartAt answers
// from the part it already made.
void PsService::HandleCheckpointPart(wire::InMessage& m, wire::Responder r) {
  const int64_t step = m.envelope().getBody().getCheckpointPartRequest().getStep();
  if (step < 0) {
    MutexLock lock(&mu_);
    stats_.invalid++;
    r.SendError(ReplyCode::INVALID, "checkpoint of step " + std::to_string(step));
    return;
  }
  auto answer_copying = [&](const PartCopy& copy) {
    wire::OutMessage reply = r.NewReply();
    auto body = reply.envelope().getBody().initCheckpointPartReply();
    body.setStep(step);
    body.setCopying(true);
    body.setCopyingStep(copy.step);
    body.setBytesDone(copy.progress.bytes_done);
    body.setBytesTotal(copy.progress.bytes_total);
    r.Send(std::move(reply));
  };
  std::unique_ptr<PartCopy> finished;
  {
    MutexLock lock(&part_mu_);
    if (part_copy_ != nullptr && !part_copy_->done) {
      answer_copying(*part_copy_);  // this step's copy, or an older one still finishing
      return;
    }
    finished = std::move(part_copy_);
  }
  if (finished != nullptr) {
    // Its thread has set `done`: the join returns at once. Joined before it is dropped, also
    // when it is another step's result nobody collected (its client gave up, or recovered).
    if (finished->thread.joinable()) finished->thread.join();
    if (finished->step != step) finished.reset();
  }
  if (finished != nullptr) {
    const StatusOr<CheckpointPart>& part = finished->result;
    if (!part.ok()) {
      if (part.status().IsUnavailable()) {
        r.SendView(ReplyCode::RETRY, part.status().message(),
                   static_cast<uint64_t>(shard_->applied_step()));
      } else if (part.status().code() == StatusCode::kResourceExhausted) {
        // A full disk (the restore point's SST, or the copy into checkpoint.dir): the client
        // asks again after its back-off and the copy starts over, so a checkpoint, the final one
        // above all, waits for space instead of failing the job (which would roll it back onto
        // the same disk).
        bool first = false;
        {
          MutexLock lock(&part_mu_);
          first = part_refusal_.empty();
          part_refusal_ = part.status().ToString();
        }
        if (first)
          TLOG_ERROR("checkpoint part of step {} waits for space: {}", step,
                     part.status().ToString());
        r.SendError(ReplyCode::OVERLOADED, part.status().message());
      } else {
        TLOG_ERROR("checkpoint part of step {}: {}", step, part.status().ToString());
        r.SendError(part.status().IsFailedPrecondition() ? ReplyCode::INVALID : ReplyCode::INTERNAL,
                    part.status().message());
      }
      return;
    }
    TLOG_INFO("checkpoint part of step {}: {} files, {} copied ({} bytes)", step,
              part->files.size(), part->files_copied, part->bytes_copied);
    {
      MutexLock lock(&part_mu_);
      part_refusal_.clear();
    }
    wire::OutMessage reply = r.NewReply();
    auto body = reply.envelope().getBody().initCheckpointPartReply();
    body.setStep(step);
    const std::string json = CheckpointPartToJson(*part).dump();
    body.setPart(capnp::Text::Reader(json.data(), json.size()));
    r.Send(std::move(reply));
    return;
  }
  if (shard_->applied_step() < step) {
    r.SendView(ReplyCode::RETRY,
               "step " + std::to_string(step) + " is not applied yet (applied " +
                   std::to_string(shard_->applied_step()) + ")",
               static_cast<uint64_t>(shard_->applied_step()));
    return;
  }
  const auto kept = m.envelope().getBody().getCheckpointPartRequest().getRetainedSteps();
  PartKind kind = PartKind::kFull;
  switch (m.envelope().getBody().getCheckpointPartRequest().getKind()) {
    case wire::PartKind::DELTA_IF_CHEAPER:
      kind = PartKind::kDeltaIfCheaper;
      break;
    case wire::PartKind::DELTA:
      kind = PartKind::kDelta;
      break;
    default:  // FULL, or a value this version does not know
      break;
  }
  std::vector<int64_t> retained;
  for (int64_t s : kept) retained.push_back(s);
  MutexLock lock(&part_mu_);
  // Another handler thread (the push lane has several) may have started or finished a copy
  // since the check above: then this request is answered with that one's progress.
  if (part_copy_ != nullptr) {
    answer_copying(*part_copy_);
    return;
  }
  part_copy_ = std::make_unique<PartCopy>();
  part_copy_->step = step;
  PartCopy* copy = part_copy_.get();
  copy->thread = std::thread([this, copy, step, kind, retained = std::move(retained)] {
    StatusOr<CheckpointPart> part = shard_->CheckpointPartAt(step, shard_->options().durable_dir,
                                                             retained, &copy->progress, kind);
    MutexLock done_lock(&part_mu_);
    copy->result = std::move(part);
    copy->done = true;
  });
  answer_copying(*copy);
}

void PsService::HandleChecksum(wire::InMessage& m, wire::Responder r) {
  const int64_t step = m.envelope().getBody().getChecksumRequest().getStep();
  if (step < -1) {
    MutexLock lock(&mu_);
    stats_.invalid++;
    r.SendError(ReplyCode::INVALID, "checksum of step " + std::to_string(step));
    return;
  }
  // Not parked like a pull: a checksum is rare, and the client's back-off is cheap enough.
  const int64_t applied = shard_->applied_step();
  if (applied < step) {
    r.SendView(
        ReplyCode::RETRY,
        "checksum of step " + std::to_string(step) + " at applied step " + std::to_string(applied),
        static_cast<uint64_t>(applied));
    return;
  }
  ModelChecksum sum;
  uint64_t rows = 0;
  int64_t covered = -1;
  Status s = shard_->AddToChecksum(&sum, &rows, &covered);
  if (!s.ok()) {
    TLOG_ERROR("checksum failed: {}", s.ToString());
    r.SendError(ReplyCode::INTERNAL, s.message());
    return;
  }
  {
    MutexLock lock(&mu_);
    stats_.checksums++;
  }
  wire::OutMessage reply = r.NewReply();
  auto body = reply.envelope().getBody().initChecksumReply();
  body.setHigh(sum.high());
  body.setLow(sum.low());
  body.setAppliedStep(covered);
  body.setRows(rows);
  r.Send(std::move(reply));
}

void PsService::ReleaseParked() {
  for (auto& p : parking_.ReleaseUpTo(shard_->applied_step())) {
    auto req = p.request->envelope().getBody().getPullRequest();
    if (shard_->CheckPull(p.request->header().getTimeline(), req.getStep(),
                          req.getFromPreImages()) == PullVerdict::kReady) {
      AnswerPull(*p.request, std::move(p.responder));
    } else {
      p.responder.SendView(ReplyCode::STALE, "the shard moved past the pulled version",
                           static_cast<uint64_t>(shard_->applied_step()));
    }
  }
}

// A pull parks (k = 0) while the step before it is applied; reading its rows now brings the
// ones that are not cached in from RocksDB while the apply runs, so the answer finds them in
// the cache (issue 21: with a table far larger than the cache most of a pull's time is its
// misses). Only a read: the cache is coherent with the apply, so the answer is the same.
void PsService::Prefetch(std::span<const TableRead> slices) {
  thread_local std::vector<float> scratch;
  const ShardOptions& o = shard_->options();
  if (o.memory_only) return;  // every row is cached already
  // Nor is anything to be fetched while no miss has found a stored row (a table that fits its
  // cache, never evicted and not restored): the misses are new rows, and a read would only copy
  // the cached ones once more (a fifth of a shard's row reads in the 2 x 2 DLRM job).
  if (!shard_->store()->MissedStoredRows()) return;
  // A cache that cannot hold this pull's rows several times over would evict the rows the apply
  // running now is about to update: the prefetch would add misses instead of hiding them.
  uint64_t bytes = 0;
  for (const TableRead& t : slices) bytes += t.ids.size() * uint64_t{o.tables[t.table].row_bytes()};
  if (bytes * 4 > o.cache_bytes) return;
  for (const TableRead& t : slices) {
    scratch.resize(t.ids.size() * size_t{o.tables[t.table].dim});
    // A failure shows again, and is answered, when the pull is.
    shard_->Read(t.table, t.ids, scratch.data()).IgnoreError();
  }
}

void PsService::AnswerPull(wire::InMessage& m, wire::Responder r) {
  auto req = m.envelope().getBody().getPullRequest();
  // An unknown precision was refused by HandlePull.
  const auto precision = static_cast<WirePrecision>(req.getPrecision());
  // One list reader: each getTables() call counts against the message's traversal limit.
  const auto tables = req.getTables();
  // Each table's rows are read straight into the buffers of its reply frames (PullFrameRows
  // rows each), so a large table costs no copy and no frame of many MiB.
  std::vector<std::span<const uint64_t>> ids(tables.size());
  Status s;
  size_t frames = 0;
  for (unsigned i = 0; i < tables.size() && s.ok(); ++i) {
    s = internal::SliceIds(m, tables[i], &ids[i]);
    const size_t per_frame = PullFrameRows(shard_->options().tables[tables[i].getTableId()].dim);
    frames += std::max<size_t>(1, (ids[i].size() + per_frame - 1) / per_frame);
  }
  // Beyond kMaxPullReplyFrames (many large tables at once) one frame a table, as a receiver's
  // frame limit (DecodeLimits) is far above the 8192 tables a request may name.
  const bool split = frames <= kMaxPullReplyFrames;
  std::vector<TableRead> reads;
  std::vector<uint32_t> first_read(tables.size() + 1, 0);
  std::vector<std::unique_ptr<float[]>> rows;
  for (unsigned i = 0; i < tables.size() && s.ok(); ++i) {
    const uint32_t table = tables[i].getTableId();
    const uint32_t dim = shard_->options().tables[table].dim;
    const size_t per_frame = split ? PullFrameRows(dim) : std::max<size_t>(1, ids[i].size());
    first_read[i] = static_cast<uint32_t>(reads.size());
    for (size_t begin = 0; begin == 0 || begin < ids[i].size(); begin += per_frame) {
      const size_t count = std::min(per_frame, ids[i].size() - begin);
      rows.emplace_back(new float[count * dim]);  // every value is written below
      reads.push_back({table, ids[i].subspan(begin, count), rows.back().get()});
    }
    first_read[i + 1] = static_cast<uint32_t>(reads.size());
  }
  // The tables' frames are read in parallel on the shard's apply threads.
  if (s.ok()) {
    // Pre-images hold the rows before the last apply: only a k = 0 recovery pull reads them,
    // and only once the shard has applied the pulled step itself.
    s = req.getFromPreImages() && shard_->options().staleness == 0
            ? shard_->ReadTablesForRecovery(reads, req.getStep())
            : shard_->ReadTables(reads, /*from_pre_images=*/false);
  }
  if (!s.ok()) {
    TLOG_ERROR("pull read failed: {}", s.ToString());
    r.SendError(ReplyCode::INTERNAL, s.message());
    return;
  }
  wire::OutMessage reply = r.NewReply();
  auto body = reply.envelope().getBody().initPullReply();
  auto slices = body.initTables(tables.size());
  for (unsigned i = 0; i < tables.size(); ++i) {
    const TableRead& first = reads[first_read[i]];
    const uint32_t dim = shard_->options().tables[first.table].dim;
    slices[i].setTableId(first.table);
    slices[i].setCount(static_cast<uint32_t>(tables[i].getCount()));
    slices[i].setDim(dim);
    slices[i].setValuesFrame(static_cast<uint16_t>(reply.bulk_count()));
    slices[i].setValuesFrames(static_cast<uint16_t>(first_read[i + 1] - first_read[i]));
    if (precision != WirePrecision::kFp32) slices[i].setPrecision(static_cast<uint8_t>(precision));
    for (uint32_t k = first_read[i]; k < first_read[i + 1]; ++k) {
      const size_t n = reads[k].ids.size() * dim;
      if (precision == WirePrecision::kFp32) {
        reply.AddBulkArray(std::move(rows[k]), n);
      } else {
        std::unique_ptr<uint16_t[]> half(new uint16_t[n]);
        EncodeHalf(precision, {rows[k].get(), n}, {half.get(), n});
        reply.AddBulkArray(std::move(half), n);
      }
    }
  }
  body.setAppliedStep(shard_->applied_step());
  r.Send(std::move(reply));
}

size_t PullFrameRows(uint32_t dim) {
  constexpr size_t kFrameBytes = 256 << 10;
  return std::max<size_t>(1, kFrameBytes / (size_t{std::max(dim, 1u)} * sizeof(float)));
}

}  // namespace tandem::ps
