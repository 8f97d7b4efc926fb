#include "server/ps/shard.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <utility>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "common/embedding/initializer.h"
#include "common/embedding/row_copy.h"
#include "common/embedding/sparse_optimizer.h"
#include "common/failpoint.h"
#include "common/flat_id_index.h"
#include "common/log.h"
#include "common/slot_map.h"
#include "server/ps/compaction_priority.h"
#include "server/ps/shard_validation.h"

namespace tandem::ps {

namespace fs = std::filesystem;
using embedding::RowRef;
using embedding::TableSpec;

// A logged k = 0 push waiting for the other ranks of its step (owns copies of its rows).
struct Shard::BufferedPush {
  uint64_t lsn = 0;
  bool skip = false;
  std::vector<PushTable> tables;
  uint64_t bytes = 0;
};

namespace {

// A removed restore point's folder while TrimLoop deletes it.
constexpr const char* kDoomedSuffix = ".doomed";

uint64_t PayloadHash(const PushInput& p) {
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  uint32_t skip = p.skip;
  XXH3_64bits_update(&st, &skip, sizeof(skip));
  for (const auto& t : p.tables) {
    uint32_t head[3] = {t.table_id, t.dim, static_cast<uint32_t>(t.ids.size())};
    XXH3_64bits_update(&st, head, sizeof(head));
    XXH3_64bits_update(&st, t.ids.data(), t.ids.size_bytes());
    XXH3_64bits_update(&st, t.grads.data(), t.grads.size_bytes());
  }
  return XXH3_64bits_digest(&st);
}

}  // namespace

Shard::Shard(const ShardOptions& options)
    : options_(options), pool_(options.apply_threads), read_pool_(options.read_threads) {
  pre_images_.resize(options_.tables.size());
}

Shard::~Shard() {
  {
    MutexLock lock(&upload_mu_);
    stop_uploading_ = true;
    upload_cv_.SignalAll();
  }
  if (uploader_.joinable()) uploader_.join();
  {
    MutexLock lock(&trim_mu_);
    stop_trimming_ = true;
    trim_cv_.SignalAll();
  }
  if (trimmer_.joinable()) trimmer_.join();
  store_.reset();
  log_.reset();
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

StatusOr<std::unique_ptr<Shard>> Shard::Open(const ShardOptions& options) {
  std::unique_ptr<Shard> shard(new Shard(options));
  std::error_code ec;
  fs::create_directories(options.dir + "/restore", ec);
  if (ec) return Status::Unavailable("cannot create " + options.dir + ": " + ec.message());
  const std::string lock_path = options.dir + "/LOCK";
  shard->lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT, 0644);
  if (shard->lock_fd_ < 0) return Status::Unavailable("cannot open " + lock_path);
  if (::flock(shard->lock_fd_, LOCK_EX | LOCK_NB) != 0)
    return Status::FailedPrecondition(options.dir + " is in use by another process");
  TANDEM_RETURN_IF_ERROR(shard->Recover());
  shard->trimmer_ = std::thread([s = shard.get()] { s->TrimLoop(); });
  if (shard->store_->change_log() != nullptr && !options.durable_dir.empty())
    shard->uploader_ = std::thread([s = shard.get()] { s->UploadLoop(); });
  return shard;
}

Status Shard::Recover() {
  PushLogOptions lo;
  lo.dir = options_.dir + "/log";
  lo.durability = options_.durability;
  lo.group = options_.group_commit;
  lo.max_bytes = options_.push_log_max_bytes;
  lo.direct_io = options_.push_log_direct_io;
  lo.write_for_test = options_.push_log_write_for_test;
  TANDEM_ASSIGN_OR_RETURN(log_, PushLog::Open(lo));
  const auto started = std::chrono::steady_clock::now();

  // Restore points a stop came in the middle of deleting.
  std::error_code list_ec;
  for (const auto& e : fs::directory_iterator(options_.dir + "/restore", list_ec)) {
    if (!e.path().filename().string().ends_with(kDoomedSuffix)) continue;
    std::error_code ec;
    fs::remove_all(e.path(), ec);
    if (ec) return Status::Unavailable("cannot remove " + e.path().string() + ": " + ec.message());
  }
  // Never trust the live DB after a crash: rebuild it from the newest complete restore point.
  const std::string live = options_.dir + "/live";
  auto points = ListRestorePoints(options_.dir);
  uint64_t replay_from = 1;
  MutexLock lock(&mu_);
  if (points.empty()) {
    std::error_code ec;
    fs::remove_all(live, ec);
  } else {
    const RestoreMarker& rp = points.back();
    TANDEM_RETURN_IF_ERROR(RebuildLiveDb(options_.dir + "/restore/" + rp.name, live));
    timeline_ = rp.timeline;
    applied_ = rp.step;
    replay_from = rp.replay_from_lsn;
    for (const auto& [step, rank] : rp.partial) k1_ranks_[step].insert(rank);
  }
  StoreOptions so;
  so.db_dir = live;
  so.tables = options_.tables;
  so.seed = options_.seed;
  so.cache_bytes = options_.cache_bytes;
  so.max_dirty_bytes = options_.max_dirty_bytes;
  so.memory_only = options_.memory_only;
  // Only delta checkpoint parts read the change log: otherwise it would be dead weight.
  if (options_.change_log && !options_.durable_dir.empty())
    so.change_log_dir = options_.dir + "/changes";
  so.change_log_segment_bytes = options_.change_log_segment_bytes;
  TANDEM_ASSIGN_OR_RETURN(store_, EmbeddingStore::Open(so));
  const auto opened = std::chrono::steady_clock::now();

  uint64_t replayed = 0;
  // Checkpoint cuts met in the log are not taken again: their restore points were taken then
  // (a part request finds a complete one on disk, CheckpointPartAt), or the crash came first and
  // the replay ends at the newest cut, whose restore point is the one taken below. A cut the
  // replay goes past with neither is lost: its part request fails, the next checkpoint commits.
  replaying_ = true;
  Status s = log_->Replay(replay_from - 1, [&](const PushRecord& r) -> Status {
    // Replay trusts logged pushes, so a directory opened with another job's shape (a tool given
    // the wrong config) would rebuild a wrong model, and the restore point below would keep it.
    if (r.header.shard != options_.shard_index || r.header.rank >= options_.num_workers)
      return Status::FailedPrecondition(
          "the push log holds a push of shard " + std::to_string(r.header.shard) + " rank " +
          std::to_string(r.header.rank) + ", but this is shard " +
          std::to_string(options_.shard_index) + " of a job with " +
          std::to_string(options_.num_workers) + " workers: the config does not match the job");
    PushInput in;
    in.timeline = r.header.timeline;
    in.step = r.header.step;
    in.rank = r.header.rank;
    in.incarnation = r.header.incarnation;
    in.skip = r.header.flags & 1;
    in.checkpoint = r.header.flags & 2;
    for (const auto& t : r.tables) in.tables.push_back({t.table_id, t.dim, t.ids, t.grads});
    ++replayed;
    mu_.AssertHeld();  // Replay runs the callback on this thread, under our lock
    auto ack = PushLocked(in, /*replaying=*/true, r.header.lsn);
    return ack.ok() ? Status::Ok()
                    : ack.status().WithContext("replay of lsn " + std::to_string(r.header.lsn));
  });
  replaying_ = false;
  TANDEM_RETURN_IF_ERROR(s);
  stats_.replayed_records = replayed;
  // How long a restarted shard holds training up, and in what (a PS kill's stall in a drill).
  const auto seconds = [](auto from, auto to) {
    return std::chrono::duration<double>(to - from).count();
  };
  const auto now = std::chrono::steady_clock::now();
  TLOG_INFO(
      "shard {} recovered: restore point step {}, {} log records replayed, applied step {} "
      "({:.2f} s: live DB and store opened {:.2f} s, replay {:.2f} s)",
      options_.shard_index, points.empty() ? -1 : points.back().step, replayed, applied_,
      seconds(started, now), seconds(started, opened), seconds(opened, now));
  YieldIfTrainingOver();
  std::string dir;
  uint64_t seq = 0;
  TANDEM_RETURN_IF_ERROR(TakeRestorePointLocked(&dir, &seq));
  // A crash inside a cut's restore point (or before it was taken) leaves the cut in the log and
  // no restore point for it. At k = 0 the pushes of the next step wait for that restore point,
  // so the replay ends at the cut, and this one is the cut's: its part can still be copied once
  // training has moved on (a drill's `die-in-restore-point`).
  if (replayed_cut_ >= 0 && replayed_cut_ == applied_ && k1_ranks_.empty() && held_.empty())
    PinCutPoint(applied_, dir, seq);
  return Status::Ok();
}

Status Shard::ValidatePull(uint32_t table, std::span<const uint64_t> ids) const {
  return ValidatePullIds(options_, table, ids);
}

StatusOr<PushAck> Shard::Push(const PushInput& push) {
  TANDEM_RETURN_IF_ERROR(ValidatePushInput(options_, push));
  MutexLock lock(&mu_);
  return PushLocked(push, /*replaying=*/false, 0);
}

StatusOr<PushAck> Shard::PushLocked(const PushInput& push, bool replaying, uint64_t lsn) {
  if (push.timeline != timeline_)
    return Status::FailedPrecondition("push of timeline " + std::to_string(push.timeline) +
                                      ", shard is at timeline " + std::to_string(timeline_));
  const uint64_t hash = PayloadHash(push);
  const auto key = std::make_pair(push.step, push.rank);
  const bool k0 = options_.staleness == 0;
  bool duplicate = push.step <= applied_;
  if (!duplicate && k0)
    duplicate = pending_.count(push.step) && pending_[push.step].count(push.rank);
  if (!duplicate && !k0)
    duplicate = (k1_ranks_.count(push.step) && k1_ranks_[push.step].count(push.rank)) ||
                std::any_of(held_.begin(), held_.end(), [&](const HeldPush& h) {
                  return h.input.step == push.step && h.input.rank == push.rank;
                });
  PushHeader h{.timeline = push.timeline,
               .step = push.step,
               .rank = push.rank,
               .shard = options_.shard_index,
               .incarnation = push.incarnation,
               .flags = (push.skip ? 1u : 0u) | (push.checkpoint ? 2u : 0u)};
  const bool logging = !replaying && options_.push_log_enabled_for_bench;
  uint64_t bytes = 0;
  for (const auto& t : push.tables) bytes += t.ids.size_bytes() + t.grads.size_bytes();
  if (duplicate) {
    auto it = logged_.find(key);
    if (k0 && it != logged_.end() && it->second != hash)
      return Status::DataLoss("determinism violation: step " + std::to_string(push.step) +
                              " rank " + std::to_string(push.rank) + " shard " +
                              std::to_string(options_.shard_index) +
                              " was resent with a different payload");
    if (logging && unlogged_.count(key) > 0) {
      // Applied while its record failed: the record goes in now, before the acknowledgement.
      // It lands after later records, which a k = 0 replay orders by step again.
      if (Status s = log_->Append(&h, push.tables); !s.ok()) return RefuseUnlogged(std::move(s));
      unlogged_.erase(key);
      LogWritable();
      RecordLogged(bytes);
    }
    stats_.duplicates++;
    return PushAck{true, applied_};
  }
  if (k0 && pending_bytes_ + bytes > options_.max_buffered_bytes && !pending_.empty())
    return Status::ResourceExhausted("k = 0 push buffer full (ps.max_buffered_bytes)");
  // A replay applies what was acknowledged: the rows stay in memory if RocksDB refuses them.
  if (!replaying) TANDEM_RETURN_IF_ERROR(CheckStoreWritable());
  // At k = 0 the record is written while the push is buffered or its step applied: the write
  // waits for the device (a direct write), the apply for the CPU, and the acknowledgement for
  // both (issue 21: `ps_bench procs` pushes 1.19x at dim 16, 1.29x at dim 64). The space is
  // reserved first, so that a full disk refuses the push before anything of it is stored, as a
  // write first would. At k >= 1 the log's order is the order of applies, so the record goes
  // first; in `machine` mode too, where PROTOCOLS §6 applies a step only after the fdatasync of
  // its records.
  std::future<Status> written;
  internal::WaitOnExit wait_for_record(&written);  // the write refers to h and push
  // A restore point taken by this push's apply waits for the record (TakeRestorePointLocked).
  record_in_flight_ = &written;
  struct Forget {
    std::future<Status>** in_flight;
    ~Forget() { *in_flight = nullptr; }  // before `written` waits, if a return leaves it running
  } forget{&record_in_flight_};
  bool beside = false;
  if (logging && k0 && options_.durability == Durability::kProcess) {
    StatusOr<uint64_t> next = log_->Reserve(push.tables);
    if (next.ok()) {
      lsn = *next;
      beside = true;
      written = record_writer_.Run([this, &h, &push] { return log_->Append(&h, push.tables); });
    } else if (next.status().code() != StatusCode::kUnimplemented) {
      return RefuseUnlogged(next.status());
    }
  }
  if (logging && !beside) {
    // Nothing of the push is stored before its record is: a refused push leaves the shard as
    // it was, and the sender's retry once there is space again is a fresh push.
    if (Status s = log_->Append(&h, push.tables); !s.ok()) return RefuseUnlogged(std::move(s));
    LogWritable();
    lsn = h.lsn;
    RecordLogged(bytes);
  }
  logged_[key] = hash;
  if (push.checkpoint) cuts_.insert(push.step);
  if (k0) {
    auto& ranks = pending_[push.step];
    if (push.step == applied_ + 1 && ranks.size() + 1 == options_.num_workers) {
      // This push completes the next step: apply it from the message, no copy.
      TANDEM_RETURN_IF_ERROR(ApplyReadySteps(&push));
    } else {
      auto b = std::make_unique<BufferedPush>();
      b->lsn = lsn;
      b->skip = push.skip;
      b->bytes = bytes;
      for (const auto& t : push.tables)
        b->tables.push_back(
            {t.table_id, t.dim, {t.ids.begin(), t.ids.end()}, {t.grads.begin(), t.grads.end()}});
      pending_bytes_ += bytes;
      ranks[push.rank] = std::move(b);
      TANDEM_RETURN_IF_ERROR(ApplyReadySteps(nullptr));
    }
  } else {
    TANDEM_RETURN_IF_ERROR(ApplyOrHoldK1(push, lsn, bytes));
    TANDEM_RETURN_IF_ERROR(CutAndReleaseK1());
  }
  if (beside) {
    Status s = written.valid() ? written.get() : std::exchange(record_result_, Status::Ok());
    if (!s.ok()) return UnloggedBesideApply(push, std::move(s));
    if (h.lsn != lsn)
      return Status::Internal("push log gave lsn " + std::to_string(h.lsn) + ", reserved " +
                              std::to_string(lsn));
    LogWritable();
    RecordLogged(bytes);
  }
  // Exactly-once needs payload hashes only for steps that can still be resent.
  logged_.erase(logged_.begin(), logged_.lower_bound({applied_ - 1, 0}));
  if (!replaying && bytes_since_restore_point_ >= options_.restore_point_every_bytes) {
    // Only bounds the replay of a later recovery: the push is applied and logged, so it is
    // acknowledged, and the next one tries again. Refused, it came back as a duplicate anyway.
    Status s = TakeRestorePointLocked();
    if (!s.ok() && !restore_point_failing_)
      TLOG_WARN(
          "shard {}: restore point after {} pushed bytes failed, tried again with the next "
          "push: {}",
          options_.shard_index, bytes_since_restore_point_, s.ToString());
    restore_point_failing_ = !s.ok();
  }
  return PushAck{false, applied_};
}

// PROTOCOLS §3: behind an announced cut c that is not taken yet, pushes of steps after c wait,
// so that the restore point holds every step <= c and nothing of a later one.
Status Shard::ApplyOrHoldK1(const PushInput& push, uint64_t lsn, uint64_t bytes) {
  if (!cuts_.empty() && *cuts_.begin() < push.step && applied_ < *cuts_.begin()) {
    HeldPush h;
    h.lsn = lsn;
    h.bytes = bytes;
    h.input = push;
    h.input.tables.clear();
    for (const auto& t : push.tables)
      h.tables.push_back(
          {t.table_id, t.dim, {t.ids.begin(), t.ids.end()}, {t.grads.begin(), t.grads.end()}});
    for (const auto& t : h.tables) h.input.tables.push_back({t.table_id, t.dim, t.ids, t.grads});
    held_.push_back(std::move(h));
    return Status::Ok();
  }
  if (!push.skip) {
    std::vector<std::vector<const PushTableView*>> by_table(options_.tables.size());
    for (const auto& t : push.tables) by_table[t.table_id].push_back(&t);
    TANDEM_RETURN_IF_ERROR(ApplyTables(push.step, by_table, /*keep_pre_images=*/false));
  }
  k1_ranks_[push.step].insert(push.rank);
  AdvanceAppliedK1(push.step);
  return Status::Ok();
}

// Once every step <= the oldest announced cut is applied: the cut's restore point, then the held
// pushes in log order (some may wait again, behind the next cut). A function of the log alone,
// so a replay reproduces the same order of applies.
Status Shard::CutAndReleaseK1() {
  while (!cuts_.empty() && applied_ >= *cuts_.begin()) {
    const int64_t cut = *cuts_.begin();
    cuts_.erase(cuts_.begin());
    if (applied_ == cut) TakeCutPoint(cut);
    std::deque<HeldPush> release;
    release.swap(held_);
    for (HeldPush& h : release) TANDEM_RETURN_IF_ERROR(ApplyOrHoldK1(h.input, h.lsn, h.bytes));
  }
  return Status::Ok();
}

void Shard::TakeCutPoint(int64_t step) {
  if (replaying_) {  // taken before the crash, or left for Recover (replayed_cut_)
    replayed_cut_ = step;
    return;
  }
  // The job's last cut is taken by its checkpoint part request (CheckpointPartAt, as for a step
  // nobody announced) or by the clean stop: nothing is applied after it, so it need not be cut in
  // the apply, and the push that completes the last step is answered at once. Its worker's final
  // evaluation then reads while the flush writes, not after it (issue 21).
  if (step == options_.last_step) return;
  std::string dir;
  uint64_t seq = 0;
  Status s = TakeRestorePointLocked(&dir, &seq);
  if (!s.ok()) {
    // Training goes on; the checkpoint of this step fails when its part is asked for.
    TLOG_ERROR("restore point for the checkpoint of step {}: {}", step, s.ToString());
    return;
  }
  PinCutPoint(step, dir, seq);
}

void Shard::PinCutPoint(int64_t step, const std::string& dir, uint64_t seq) {
  cut_points_[step] = dir;
  if (seq != 0) cut_seqs_[step] = seq;
  // A cut whose part is never asked for (its worker died) must not pin a restore point forever.
  while (cut_points_.size() > 3) cut_points_.erase(cut_points_.begin());
  std::erase_if(cut_seqs_, [&](const auto& e) { return !cut_points_.count(e.first); });
}

void Shard::AdvanceAppliedK1(int64_t step) {
  (void)step;
  for (auto it = k1_ranks_.find(applied_ + 1); it != k1_ranks_.end() && it->first == applied_ + 1 &&
                                               it->second.size() == options_.num_workers;
       it = k1_ranks_.find(applied_ + 1)) {
    applied_.store(applied_ + 1);
    stats_.steps_applied++;
    k1_ranks_.erase(it);
  }
  YieldIfTrainingOver();
}

void Shard::YieldIfTrainingOver() {
  if (replaying_ || training_over_ || options_.memory_only || options_.last_step < 0 ||
      applied_ < options_.last_step)
    return;
  training_over_ = true;
  // What is left (the final restore point, the final eval's reads, the exit) is what the user
  // waits for; compactions only reorganise rows, and a later open goes on with them. On a host
  // where every core trains, they took ~45 % of the CPU from the end of a job (issue 21).
  // Those that run finish at the lowest priority; none starts after them: in a 10^8-row job's
  // final eval niced compactions still took 24 % of the CPU (what the eval's page faults leave),
  // and every SST they wrote was one more table for the eval's reads to open.
  const int lowered = LowerCompactionPriority();
  const Status stopped = store_->StopCompactions();
  if (!stopped.ok()) TLOG_WARN("shard {}: {}", options_.shard_index, stopped.ToString());
  // The final eval reads each row once: a miss cached would only cost an insert and an eviction.
  store_->StopCachingReads();
  TLOG_INFO(
      "shard {}: step {} is the job's last: no compaction starts from now, {} compaction threads "
      "run the rest at the lowest priority, reads that miss are not cached",
      options_.shard_index, applied_.load(), lowered);
}

Status Shard::ApplyReadySteps(const PushInput* arriving) {
  for (;;) {
    const int64_t step = applied_ + 1;
    auto it = pending_.find(step);
    const size_t have = (it == pending_.end() ? 0 : it->second.size()) +
                        (arriving != nullptr && arriving->step == step ? 1 : 0);
    if (have < options_.num_workers) return Status::Ok();
    std::vector<RankPush> by_rank(options_.num_workers);
    if (it != pending_.end()) {
      for (const auto& [rank, push] : it->second) {
        by_rank[rank].skip = push->skip;
        for (const auto& t : push->tables)
          by_rank[rank].tables.push_back({t.table_id, t.dim, t.ids, t.grads});
      }
    }
    if (arriving != nullptr && arriving->step == step)
      by_rank[arriving->rank] = RankPush{arriving->skip, arriving->tables};
    TANDEM_RETURN_IF_ERROR(ApplyStep(step, by_rank));
    if (it != pending_.end()) {
      for (const auto& [rank, push] : it->second) pending_bytes_ -= push->bytes;
      pending_.erase(it);
    }
    applied_.store(step);
    stats_.steps_applied++;
    YieldIfTrainingOver();  // before the final cut, whose restore point it speeds up
    if (cuts_.erase(step) > 0) TakeCutPoint(step);
  }
}

// k = 0: per table, the rows of all ranks are summed in rank order (ranks lacking a row are
// skipped), then the optimizer runs once per row.
Status Shard::ApplyStep(int64_t step, const std::vector<RankPush>& by_rank) {
  std::vector<std::vector<const PushTableView*>> by_table(options_.tables.size());
  for (const RankPush& p : by_rank) {  // rank order
    if (p.skip) continue;
    for (const auto& t : p.tables) by_table[t.table_id].push_back(&t);
  }
  return ApplyTables(step, by_table, /*keep_pre_images=*/true);
}

Status Shard::ApplyTables(int64_t step,
                          const std::vector<std::vector<const PushTableView*>>& by_table,
                          bool keep_pre_images) {
  if (keep_pre_images) {
    for (auto& p : pre_images_) p.Clear();
  }
  // The tables with rows, largest first, so that the pool's threads finish at about the same
  // time. Tables are independent: the order they are applied in never shows in the model.
  std::vector<std::pair<size_t, uint32_t>> work;  // (rows, table)
  for (uint32_t table = 0; table < by_table.size(); ++table) {
    size_t rows = 0;
    for (const PushTableView* t : by_table[table]) rows += t->ids.size();
    if (rows > 0) work.emplace_back(rows, table);
  }
  std::sort(work.begin(), work.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<Status> errors(work.size());
  std::vector<ShardStats> counts(work.size());
  PreImages* pre = keep_pre_images ? pre_images_.data() : nullptr;
  pool_.ParallelFor(work.size(), [&](size_t k) {
    const uint32_t table = work[k].second;
    errors[k] = ApplyMerged(step, table, by_table[table], pre == nullptr ? nullptr : &pre[table],
                            &counts[k]);
  });
  const Status* first = nullptr;
  uint32_t first_table = 0;
  for (size_t k = 0; k < work.size(); ++k) {
    stats_.rows_applied += counts[k].rows_applied;
    stats_.rows_admitted += counts[k].rows_admitted;
    stats_.rows_not_admitted += counts[k].rows_not_admitted;
    stats_.rows_expired += counts[k].rows_expired;
    stats_.rows_nan_skipped += counts[k].rows_nan_skipped;
    if (!errors[k].ok() && (first == nullptr || work[k].second < first_table)) {
      first = &errors[k];
      first_table = work[k].second;
    }
  }
  return first == nullptr ? Status::Ok() : *first;
}

// Sums the table's slices per row (in the order given: rank order) and applies the sums.
Status Shard::ApplyMerged(int64_t step, uint32_t table,
                          std::span<const PushTableView* const> slices, PreImages* pre,
                          ShardStats* stats) {
  if (slices.size() == 1)  // one contributor, ids unique (validated): nothing to sum
    return ApplyTable(step, table, slices[0]->ids, slices[0]->grads, pre, stats);
  const uint32_t dim = options_.tables[table].dim;
  // Per thread, so that the pool's threads merge without allocating per step.
  thread_local FlatIdIndex index;
  thread_local std::vector<uint64_t> ids;
  thread_local std::vector<float> sums;
  size_t bound = 0;
  for (const PushTableView* t : slices) bound += t->ids.size();
  index.Reset(bound);
  ids.clear();
  sums.clear();
  for (const PushTableView* t : slices) {
    index.InsertAll(t->ids.data(), t->ids.size(), [&](size_t i, uint32_t slot, bool inserted) {
      const float* g = &t->grads[i * dim];
      if (inserted) {
        ids.push_back(t->ids[i]);
        sums.insert(sums.end(), g, g + dim);
      } else {
        float* sum = &sums[static_cast<size_t>(slot) * dim];
        for (uint32_t j = 0; j < dim; ++j) sum[j] += g[j];
      }
    });
  }
  return ApplyTable(step, table, ids, sums, pre, stats);
}

// One pass over the rows in the common case: TTL, the pre-image and the optimizer all run on
// the row in place. Admission with min_count > 1 first needs a presence check (Admit).
Status Shard::ApplyTable(int64_t step, uint32_t table, std::span<const uint64_t> ids,
                         std::span<const float> grads, PreImages* pre, ShardStats* stats) {
  const TableSpec& spec = options_.tables[table];
  const uint32_t dim = spec.dim;
  std::vector<uint32_t> src;  // positions in ids/grads of the rows to apply
  std::vector<uint64_t> apply_ids;
  if (spec.admission_min_count > 1) {
    TANDEM_RETURN_IF_ERROR(Admit(table, ids, &src, stats));
  } else {
    src.resize(ids.size());
    for (uint32_t i = 0; i < src.size(); ++i) src[i] = i;
  }
  if (options_.nan_policy == NanPolicy::kSkipRows) {
    const size_t before = src.size();
    std::erase_if(src, [&](uint32_t i) { return !AllFinite(&grads[size_t{i} * dim], dim); });
    stats->rows_nan_skipped += before - src.size();
  }
  apply_ids.reserve(src.size());
  for (uint32_t i : src) apply_ids.push_back(ids[i]);
  if (apply_ids.empty()) return Status::Ok();
  // Pre-images (k = 0 only: roll-forward recovery, PROTOCOLS §8).
  if (pre != nullptr) {
    pre->ids.assign(apply_ids.begin(), apply_ids.end());
    pre->rows.resize(apply_ids.size() * size_t{dim});
    pre->indexed = false;
  }
  stats->rows_applied += apply_ids.size();
  const uint64_t seed = options_.seed;
  // The ids are distinct (validated per push, merged across ranks), and each row's update
  // depends only on that row, so the store may visit them in any order, and a large table's
  // rows may be split into parts applied at once on the pool (one table of a step would
  // otherwise use one core). The store's stripes lock in ascending order, so parts never
  // deadlock; each part merges its own changes into the kept sum.
  const size_t parts = ApplyParts(apply_ids.size());
  std::vector<uint64_t> expired(parts, 0);
  std::vector<Status> errors(parts);
  pool_.ParallelFor(parts, [&](size_t part) {
    const size_t begin = apply_ids.size() * part / parts;
    const size_t end = apply_ids.size() * (part + 1) / parts;
    std::span<const uint64_t> ids_part(apply_ids.data() + begin, end - begin);
    errors[part] = store_->UpdateDistinct(table, ids_part, [&](size_t i, RowRef row, bool existed) {
      const size_t k = begin + i;
      if (pre != nullptr) embedding::CopyRowFloats(&pre->rows[k * dim], row.embedding(), dim);
      // TTL is logical: a row not updated for ttl_steps is treated as absent (PROTOCOLS §4).
      if (existed && spec.ttl_steps > 0 && row.meta()->last_updated_step < step - spec.ttl_steps) {
        embedding::InitialRow(seed, spec, apply_ids[k], row);
        ++expired[part];
      }
      embedding::ApplySparseUpdate(spec, &grads[size_t{src[k]} * dim], row);
      row.meta()->last_updated_step = step;
      row.meta()->frequency++;
    });
  });
  for (uint64_t e : expired) stats->rows_expired += e;
  for (Status& e : errors) TANDEM_RETURN_IF_ERROR(std::move(e));
  return Status::Ok();
}

// Parts of kMinPartIds ids or more, at most one per pool thread: smaller parts cost more in
// handing out and stripe locking than they gain.
size_t Shard::ApplyParts(size_t ids) const {
  constexpr size_t kMinPartIds = 8192;
  return std::clamp<size_t>(ids / kMinPartIds, 1, static_cast<size_t>(pool_.threads()));
}

Status Shard::Admit(uint32_t table, std::span<const uint64_t> ids, std::vector<uint32_t>* admitted,
                    ShardStats* stats) {
  const TableSpec& spec = options_.tables[table];
  const uint32_t row_bytes = spec.row_bytes();
  std::unique_ptr<uint8_t[]> rows(new uint8_t[ids.size() * size_t{row_bytes}]);
  std::vector<bool> present;
  TANDEM_RETURN_IF_ERROR(store_->ReadRows(table, ids, rows.get(), &present));
  for (uint32_t i = 0; i < ids.size(); ++i) {
    if (present[i]) {
      admitted->push_back(i);
      continue;
    }
    // An id's count rises once per applied step whose pushes contain it, before that step's
    // gradient is applied (PROTOCOLS §4).
    TANDEM_ASSIGN_OR_RETURN(uint64_t count, store_->AdmissionCount(table, ids[i]));
    ++count;
    const bool ok = count >= static_cast<uint64_t>(spec.admission_min_count);
    TANDEM_RETURN_IF_ERROR(store_->SetAdmissionCount(table, ids[i], ok ? 0 : count));
    if (ok) {
      stats->rows_admitted++;
      admitted->push_back(i);
    } else {
      stats->rows_not_admitted++;
    }
  }
  return Status::Ok();
}

int64_t Shard::RequiredVersion(int64_t step) const { return step - 1 - options_.staleness; }

PullVerdict Shard::CheckPull(uint64_t timeline, int64_t step, bool from_pre_images) const {
  if (timeline != timeline_) return PullVerdict::kStale;
  const int64_t need = RequiredVersion(step);
  const int64_t applied = applied_.load();
  if (applied < need) return PullVerdict::kPark;
  if (options_.staleness == 0 && applied > need && !(from_pre_images && applied == step))
    return PullVerdict::kStale;
  return PullVerdict::kReady;
}

Status Shard::Read(uint32_t table, std::span<const uint64_t> ids, float* out) {
  return store_->Read(table, ids, out);
}

Status Shard::ReadPreImages(uint32_t table, std::span<const uint64_t> ids, float* out) {
  TANDEM_RETURN_IF_ERROR(store_->Read(table, ids, out));
  MutexLock lock(&mu_);
  PreImages& pre = pre_images_.at(table);
  const uint32_t dim = options_.tables[table].dim;
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t slot = pre.Find(ids[i]);
    if (slot == FlatIdIndex::kAbsent) continue;
    std::copy_n(&pre.rows[size_t{slot} * dim], dim, out + i * dim);
  }
  return Status::Ok();
}

Status Shard::ReadTablesForRecovery(std::span<const TableRead> reads, int64_t step) {
  MutexLock lock(&mu_);
  const int64_t applied = applied_.load();
  if (applied != step && applied != step - 1)
    return Status::FailedPrecondition("recovery pull of step " + std::to_string(step) +
                                      " at applied step " + std::to_string(applied));
  for (const TableRead& r : reads) {
    TANDEM_RETURN_IF_ERROR(store_->Read(r.table, r.ids, r.out));
    if (applied != step) continue;
    PreImages& pre = pre_images_.at(r.table);
    const uint32_t dim = options_.tables[r.table].dim;
    for (size_t i = 0; i < r.ids.size(); ++i) {
      const uint32_t slot = pre.Find(r.ids[i]);
      if (slot != FlatIdIndex::kAbsent)
        std::copy_n(&pre.rows[size_t{slot} * dim], dim, r.out + i * dim);
    }
  }
  return Status::Ok();
}

Status Shard::ReadTables(std::span<const TableRead> reads, bool from_pre_images) {
  // A large table's ids are read in parts, as ApplyTable applies them.
  std::vector<TableRead> parts;
  parts.reserve(reads.size());
  for (const TableRead& r : reads) {
    // (an unknown table is one part: the store refuses it)
    const bool known = r.table < options_.tables.size();
    const size_t n = known ? ApplyParts(r.ids.size()) : 1;
    const size_t dim = known ? options_.tables[r.table].dim : 0;
    for (size_t part = 0; part < n; ++part) {
      const size_t begin = r.ids.size() * part / n, end = r.ids.size() * (part + 1) / n;
      parts.push_back({r.table, r.ids.subspan(begin, end - begin), r.out + begin * dim});
    }
  }
  std::vector<Status> errors(parts.size());
  read_pool_.ParallelFor(parts.size(), [&](size_t k) {
    const TableRead& r = parts[k];
    errors[k] =
        from_pre_images ? ReadPreImages(r.table, r.ids, r.out) : Read(r.table, r.ids, r.out);
  });
  for (Status& s : errors) TANDEM_RETURN_IF_ERROR(std::move(s));
  return Status::Ok();
}

// The store keeps its sum through every apply (no scan, whatever the table's size): under mu_
// it is the sum as of one applied step.
Status Shard::AddToChecksum(ModelChecksum* sum, uint64_t* rows, int64_t* applied_step) {
  MutexLock lock(&mu_);
  bool scanned = false;
  const auto t0 = std::chrono::steady_clock::now();
  TANDEM_RETURN_IF_ERROR(store_->Checksum(sum, rows, nullptr, &scanned));
  if (scanned)
    TLOG_INFO(
        "shard {}: model checksum computed by a scan in {:.1f} s (a store written before "
        "the sum was kept; kept from now on)",
        options_.shard_index,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (applied_step != nullptr) *applied_step = applied_.load();
  return Status::Ok();
}

int64_t Shard::applied_step() const { return applied_.load(); }

void Shard::RecordLogged(uint64_t bytes) {
  stats_.pushes_logged++;
  if (log_->alarm() && !log_alarm_reported_) {
    // Checkpoints delete old segments; while they pause (chief away) the log only grows.
    TLOG_WARN("push log holds {} bytes, above ps.push_log.max_bytes", log_->total_bytes());
    log_alarm_reported_ = true;
  }
  bytes_since_restore_point_ += bytes;
}

Status Shard::UnloggedBesideApply(const PushInput& push, Status error) {
  const auto key = std::make_pair(push.step, push.rank);
  auto step = pending_.find(push.step);
  if (step != pending_.end()) {
    if (auto it = step->second.find(push.rank); it != step->second.end()) {
      pending_bytes_ -= it->second->bytes;
      step->second.erase(it);
      if (step->second.empty()) pending_.erase(step);
      logged_.erase(key);
      return RefuseUnlogged(std::move(error));
    }
  }
  unlogged_.insert(key);
  TLOG_ERROR(
      "shard {}: step {} is applied but rank {}'s record of it could not be written; it is "
      "written when the rank sends the push again: {}",
      options_.shard_index, push.step, push.rank, error.ToString());
  return RefuseUnlogged(std::move(error));
}

Status Shard::RefuseUnlogged(Status error) {
  const bool full = error.code() == StatusCode::kResourceExhausted;
  (full ? stats_.pushes_refused_log_full : stats_.pushes_refused_log_error)++;
  stats_.push_log_full = full;
  // Once per episode: a full disk must not fill the daemon's own log with a line per retry.
  if (refused_since_writable_++ == 0) {
    TLOG_ERROR("shard {}: push log write failed, refusing pushes until it can be written: {}",
               options_.shard_index, error.ToString());
    MutexLock lock(&refusal_mu_);
    log_refusal_ = "push log: " + error.ToString();
  }
  return error;
}

Status Shard::CheckStoreWritable() {
  Status error = store_->WriteError(/*retry=*/true);
  if (error.ok()) {
    if (refused_since_store_writable_ > 0) {
      TLOG_INFO("shard {}: RocksDB writable again after {} refused pushes", options_.shard_index,
                refused_since_store_writable_);
      MutexLock lock(&refusal_mu_);  // only then: every push passes here
      store_refusal_.clear();
    }
    refused_since_store_writable_ = 0;
    stats_.store_unwritable = false;
    return Status::Ok();
  }
  stats_.pushes_refused_store++;
  stats_.store_unwritable = true;
  if (refused_since_store_writable_++ == 0) {
    TLOG_ERROR("shard {}: refusing pushes until RocksDB can be written: {}", options_.shard_index,
               error.ToString());
    MutexLock lock(&refusal_mu_);
    store_refusal_ = "RocksDB: " + error.ToString();
  }
  return Status::ResourceExhausted("RocksDB cannot take the shard's rows: " + error.message());
}

void Shard::LogWritable() {
  if (refused_since_writable_ == 0) return;
  TLOG_INFO("shard {}: push log writable again after {} refused pushes", options_.shard_index,
            refused_since_writable_);
  refused_since_writable_ = 0;
  stats_.push_log_full = false;
  MutexLock lock(&refusal_mu_);
  log_refusal_.clear();
}

std::string Shard::refusal() const {
  MutexLock lock(&refusal_mu_);
  if (!store_refusal_.empty()) return store_refusal_;
  return log_refusal_;
}

ShardStats Shard::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

Status Shard::TakeRestorePoint() {
  MutexLock lock(&mu_);
  return TakeRestorePointLocked();
}

// Replay after a restore point must start at the oldest logged push it does not contain: at
// k = 0 pushes of steps not yet complete are logged but not applied.
uint64_t Shard::ReplayFromLsn() const {
  uint64_t from = log_->last_lsn() + 1;
  for (const auto& [step, ranks] : pending_)
    for (const auto& [rank, push] : ranks) from = std::min(from, push->lsn);
  for (const HeldPush& h : held_) from = std::min(from, h.lsn);
  return from;
}

Status Shard::TakeRestorePointLocked(std::string* dir, uint64_t* change_seq) {
  RestoreMarker m;
  m.timeline = timeline_;
  m.step = applied_;
  if (record_in_flight_ != nullptr && record_in_flight_->valid()) {
    // The replay point depends on whether the record of the push being applied is in the log:
    // after it if it is, at its LSN (which the next record then takes) if its write failed.
    record_result_ = record_in_flight_->get();
  }
  m.replay_from_lsn = ReplayFromLsn();
  for (const auto& [step, ranks] : k1_ranks_)
    for (uint32_t rank : ranks) m.partial.emplace_back(step, rank);
  m.name = RestorePointName(m);
  const std::string base = options_.dir + "/restore/" + m.name;
  if (dir != nullptr) *dir = base;
  if (fs::exists(base + ".done")) return Status::Ok();
  std::error_code ec;
  fs::remove_all(base, ec);  // a checkpoint left half-made by a crash
  uint64_t cut = 0;
  const auto started = std::chrono::steady_clock::now();
  FlushTimes flush;
  TANDEM_RETURN_IF_ERROR(store_->CreateCheckpoint(base, &cut, &flush));
  // Applies wait for it (every dirty cached row is written): the stall a step's metrics show.
  const auto flushed = std::chrono::steady_clock::now();
  if (change_seq != nullptr) *change_seq = cut;
  if (ChangeLog* changes = store_->change_log(); changes != nullptr && delta_base_seq_ == 0) {
    // No base yet: the next one is a restore point not yet copied (a pending cut, or this one
    // or a later one), and no delta needs what was written before it.
    uint64_t keep_after = cut;
    for (const auto& [step, s] : cut_seqs_) keep_after = std::min(keep_after, s);
    DeleteLater(changes->DetachThrough(keep_after));
  }
  // A drill's fault point (common/failpoint.h): the restore point half made, the live DB ahead.
  if (failpoint::FiresAtOrAfter(failpoint::kDieInRestorePoint, m.step)) failpoint::Die();
  TANDEM_RETURN_IF_ERROR(WriteRestoreMarker(base + ".done", m));
  TANDEM_RETURN_IF_ERROR(log_->Roll());
  const auto marked = std::chrono::steady_clock::now();
  bytes_since_restore_point_ = 0;
  stats_.restore_points++;
  // Keep the newest two and those a checkpoint part still needs (cut_points_); the log is
  // needed from the oldest kept one's replay point on.
  auto points = ListRestorePoints(options_.dir);
  std::vector<RestoreMarker> kept;
  for (size_t i = 0; i < points.size(); ++i) {
    const std::string path = options_.dir + "/restore/" + points[i].name;
    const bool pinned = std::any_of(cut_points_.begin(), cut_points_.end(),
                                    [&](const auto& e) { return e.second == path; });
    // Once the last step is applied none go: removing a GB-sized one took 3.4 s of the final
    // restore point, under the lock the final eval's pulls wait for (a 10^8-row table); a job
    // that goes on from here (more train.steps) removes them at its next one.
    if (i + 2 >= points.size() || pinned || training_over_) {
      kept.push_back(points[i]);
      continue;
    }
    // Gone from listings at once, deleted away from mu_: a restore point whose SSTs compaction
    // has since replaced frees GBs (1.0-1.2 s under the lock in the end-of-job bench).
    fs::remove(path + ".done", ec);
    fs::rename(path, path + kDoomedSuffix, ec);
    if (ec) {
      fs::remove_all(path, ec);
    } else {
      DeleteLater({path + kDoomedSuffix});
    }
  }
  points = std::move(kept);
  // Not once the last step is applied: deleting a GB of segments then only competes with the
  // final eval's reads (1.86 s against 0.72 s in a 500-step job at 10^9 ids); a job that goes
  // on from here (more train.steps) deletes them at its next restore point.
  if (!training_over_ && !points.empty() && points.front().replay_from_lsn > 1) {
    MutexLock lock(&trim_mu_);
    trim_through_ = std::max(trim_through_, points.front().replay_from_lsn - 1);
    trim_cv_.Signal();
  }
  const auto done = std::chrono::steady_clock::now();
  const auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
  if (secs(started, done) >= 0.5)
    TLOG_INFO(
        "shard {}: restore point of step {} took {:.1f} s (dirty rows written to the store {:.2f} "
        "s: {} rows in {:.2f} s, reads held {:.2f} s of it, RocksDB checkpoint {:.2f} s; marker "
        "and push log roll {:.2f} s, older restore points removed {:.2f} s)",
        options_.shard_index, m.step, secs(started, done), secs(started, flushed), flush.rows,
        flush.flush_s, flush.reads_held_s, flush.checkpoint_s, secs(flushed, marked),
        secs(marked, done));
  return Status::Ok();
}

StatusOr<uint64_t> Shard::UploadSealedSegments() {
  ChangeLog* changes = store_->change_log();
  MutexLock lock(&copy_mu_);
  if (changes == nullptr || !delta_base_ || options_.durable_dir.empty()) return uint64_t{0};
  uint64_t bytes = 0;
  for (const ChangeSegment& seg : changes->Sealed(delta_base_->change_seq, UINT64_MAX)) {
    if (!seg.complete || uploaded_.count(seg.seq) > 0) continue;
    TANDEM_ASSIGN_OR_RETURN(uint64_t copied, UploadSegment(seg, options_.durable_dir));
    bytes += copied;
    uploaded_.insert(seg.seq);
  }
  return bytes;
}

void Shard::DeleteLater(std::vector<std::string> paths) {
  if (paths.empty()) return;
  MutexLock lock(&trim_mu_);
  doomed_.insert(doomed_.end(), std::make_move_iterator(paths.begin()),
                 std::make_move_iterator(paths.end()));
  trim_cv_.Signal();
}

void Shard::TrimLoop() {
  uint64_t done = 0;
  for (;;) {
    uint64_t through = 0;
    std::vector<std::string> doomed;
    {
      MutexLock lock(&trim_mu_);
      while (!stop_trimming_ && trim_through_ <= done && doomed_.empty()) trim_cv_.Wait();
      // What was handed over is deleted even at a stop: a finished job leaves no dead GBs.
      doomed.swap(doomed_);
      through = stop_trimming_ ? done : trim_through_;
    }
    for (const std::string& path : doomed) {
      std::error_code ec;
      fs::remove_all(path, ec);
      if (ec) TLOG_WARN("shard {}: deleting {}: {}", options_.shard_index, path, ec.message());
    }
    if (through <= done) {
      MutexLock lock(&trim_mu_);
      if (stop_trimming_ && doomed_.empty()) return;
      continue;
    }
    // A failure leaves segments that replay skips; the next restore point's request retries.
    if (Status s = log_->DeleteThrough(through); !s.ok())
      TLOG_WARN("shard {}: deleting push log segments through lsn {}: {}", options_.shard_index,
                through, s.ToString());
    done = through;
  }
}

void Shard::UploadLoop() {
  bool warned = false;
  for (;;) {
    {
      MutexLock lock(&upload_mu_);
      if (!stop_uploading_)
        upload_cv_.WaitUntil(std::chrono::steady_clock::now() + std::chrono::milliseconds(500));
      if (stop_uploading_) return;
    }
    StatusOr<uint64_t> copied = UploadSealedSegments();
    // Once: the final part copies whatever is missing, so nothing is lost but time.
    if (!copied.ok() && !warned) {
      TLOG_WARN("shard {}: copying change log segments ahead of the final part: {}",
                options_.shard_index, copied.status().ToString());
      warned = true;
    }
  }
}

std::optional<std::vector<ChangeSegment>> Shard::DeltaSegments(const std::string& dir,
                                                               const std::string& durable_root,
                                                               uint64_t seq, PartKind kind) {
  ChangeLog* changes = store_->change_log();
  if (changes == nullptr || !delta_base_ || seq == 0) return std::nullopt;
  const auto full = [&](const std::string& why) {
    TLOG_INFO("shard {}: the final part is copied in full: {}", options_.shard_index, why);
    return std::nullopt;
  };
  if (Status s = VerifyPart(durable_root, delta_base_->part, /*full=*/false); !s.ok())
    return full("its base, step " + std::to_string(delta_base_->part.step) + ": " + s.ToString());
  std::vector<ChangeSegment> segments = changes->Sealed(delta_base_->change_seq, seq);
  uint64_t log_bytes = 0;
  for (const ChangeSegment& s : segments) {
    if (!s.complete) return full("change log segment " + s.path + " is incomplete");
    log_bytes += s.size_bytes;
  }
  uint64_t sst_bytes = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".sst") sst_bytes += e.file_size(ec);
  // A small table rewritten by compaction costs less than the writes that changed it.
  if (kind == PartKind::kDeltaIfCheaper && (ec || log_bytes >= sst_bytes))
    return full("the change log since step " + std::to_string(delta_base_->part.step) + " (" +
                std::to_string(log_bytes) + " bytes) is not smaller than the table's SSTs (" +
                std::to_string(sst_bytes) + " bytes)");
  TLOG_INFO(
      "shard {}: the final part is step {} plus {} change log segments ({} bytes; the "
      "table's SSTs are {} bytes)",
      options_.shard_index, delta_base_->part.step, segments.size(), log_bytes, sst_bytes);
  return segments;
}

StatusOr<CheckpointPart> Shard::CheckpointPartAt(int64_t step, const std::string& durable_root,
                                                 const std::vector<int64_t>& retained,
                                                 CopyProgress* progress, PartKind kind) {
  // The copy runs outside mu_: pushes and applies go on while a part is copied.
  // A restore point being taken holds mu_ for seconds when most of the table is dirty: the
  // request waits for it here, not holding copy_mu_, so that the upload thread copies the
  // change log segments the flush seals meanwhile and the part is left only the last of them.
  { MutexLock wait(&mu_); }
  MutexLock copy_lock(&copy_mu_);
  if (last_part_ && last_part_->step == step) return *last_part_;  // a resent request
  std::string dir;
  uint64_t seq = 0;  // the change log segment of the restore point; 0: unknown
  {
    MutexLock lock(&mu_);
    auto cut = cut_points_.find(step);
    if (cut != cut_points_.end()) {
      dir = cut->second;
      auto at = cut_seqs_.find(step);
      if (at != cut_seqs_.end()) seq = at->second;
    } else {
      const int64_t applied = applied_.load();
      if (applied < step || cuts_.count(step) > 0)
        return Status::Unavailable("step " + std::to_string(step) +
                                   " is not applied yet (applied " + std::to_string(applied) + ")");
      if (applied > step) {
        // A complete restore point of exactly that step holds every step up to it and nothing
        // after (none with pushes of later steps in it): the cut's, taken before this process
        // died and a new one got this request.
        for (const RestoreMarker& m : ListRestorePoints(options_.dir))
          if (m.step == step && m.timeline == timeline_ && m.partial.empty())
            dir = options_.dir + "/restore/" + m.name;
        if (dir.empty())
          return Status::FailedPrecondition("checkpoint of step " + std::to_string(step) +
                                            " asked after step " + std::to_string(applied) +
                                            " was applied, and no cut was announced for it");
        PinCutPoint(step, dir, 0);
      } else {
        // A step nobody announced (the last one, or where a stop was agreed): right only if no
        // push of a later step is in, which holds when none will come.
        if (!k1_ranks_.empty() || !held_.empty())
          return Status::FailedPrecondition(
              "checkpoint of step " + std::to_string(step) +
              " was not announced, and pushes of later steps are already applied");
        TANDEM_RETURN_IF_ERROR(TakeRestorePointLocked(&dir, &seq));
        cut_points_[step] = dir;
        if (seq != 0) cut_seqs_[step] = seq;
      }
    }
  }
  std::optional<std::vector<ChangeSegment>> delta;
  if (kind != PartKind::kFull) delta = DeltaSegments(dir, durable_root, seq, kind);
  StatusOr<CheckpointPart> made =
      delta ? CopyDeltaToDurable(dir, delta_base_->part, *delta, durable_root, options_.shard_index,
                                 step, progress)
            : CopyToDurable(dir, durable_root, options_.shard_index, step,
                            last_part_ ? &*last_part_ : nullptr, progress);
  TANDEM_RETURN_IF_ERROR(made.status());
  CheckpointPart part = std::move(made).value();
  if (ChangeLog* changes = store_->change_log(); changes != nullptr && !delta) {
    // A full part is the base of the next delta; what the log holds before it is not needed.
    if (seq != 0) {
      delta_base_ = DeltaBase{part, seq};
      DeleteLater(changes->DetachThrough(seq));
    } else {
      delta_base_.reset();
    }
    uploaded_.clear();  // a new chain (and the collection below removes the old one's files)
    delta_base_seq_ = delta_base_ ? seq : 0;
  }
  {
    MutexLock lock(&mu_);  // the restore point may go now
    cut_points_.erase(cut_points_.begin(), cut_points_.upper_bound(step));
    cut_seqs_.erase(cut_seqs_.begin(), cut_seqs_.upper_bound(step));
  }
  last_part_ = part;
  parts_[step] = part;
  // Collect only when every kept checkpoint is a part this process knows: after a restart the
  // older ones are not, and a file they need must never go.
  std::vector<CheckpointPart> keep = {part};
  bool known = true;
  for (int64_t s : retained) {
    if (s == step) continue;
    auto it = parts_.find(s);
    if (it == parts_.end()) {
      known = false;
      break;
    }
    keep.push_back(it->second);
  }
  if (known && !retained.empty()) {
    Status gc = CollectGarbage(durable_root, keep);
    if (!gc.ok()) TLOG_WARN("durable copy garbage collection: {}", gc.ToString());
    std::erase_if(parts_, [&](const auto& e) {
      return e.first != step &&
             std::find(retained.begin(), retained.end(), e.first) == retained.end();
    });
  }
  return part;
}

}  // namespace tandem::ps
