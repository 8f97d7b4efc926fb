// One parameter-server shard's state machine (PROTOCOLS §2-§6), in plain C++ types so tests
// drive it without messages: exactly-once pushes logged before they are acknowledged, the k = 0
// step assembly (apply step s once all M ranks pushed it, summing per row in rank order), the
// k >= 1 apply-on-arrival in log order, admission and TTL in the apply path, pull versioning,
// pre-images of the last apply, restore points and crash recovery from restore point + log.
//
// Data directory layout (`ps.data_dir/shard-<i>/`):
//   LOCK                      flock'ed while a process runs on the directory
//   live/                     the RocksDB the store runs on (never read after a crash)
//   restore/<name>/           RocksDB checkpoints (hard links); <name> = t<timeline>-s<step>
//   restore/<name>.done       marker written after the checkpoint is complete: JSON with
//                             timeline, step and the LSN replay must start from
//   log/                      push-log segments
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/checkpoint_layout.h"
#include "common/embedding/table_spec.h"
#include "common/flat_id_index.h"
#include "common/model_checksum.h"
#include "common/status.h"
#include "common/sync.h"
#include "server/ps/apply_pool.h"
#include "server/ps/durable_copy.h"
#include "server/ps/embedding_store.h"
#include "server/ps/push_log.h"
#include "server/ps/restore_marker.h"
#include "server/ps/side_thread.h"

namespace tandem::ps {

enum class NanPolicy { kReject, kSkipRows };

struct ShardOptions {
  uint32_t shard_index = 0;
  uint32_t num_shards = 1;
  uint32_t num_workers = 1;  // M
  int64_t staleness = 0;     // k
  std::vector<embedding::TableSpec> tables;
  uint64_t seed = 1;
  std::string dir;  // this shard's data directory
  // Its durable copy for checkpoints: checkpoint.dir/shards/shard-<i> (PROTOCOLS §7).
  std::string durable_dir;
  // Keep the store's change log, so that the job's last checkpoint part may be a delta
  // (checkpoint.final_part is not full, and periodic checkpoints make the full parts it needs).
  bool change_log = true;
  // Change log segments end at this size (or a restore point); each sealed one is copied to the
  // durable copy in the background once a full part exists, so the last part copies one at most.
  uint64_t change_log_segment_bytes = 64ull << 20;
  uint64_t cache_bytes = 256ull << 20;
  // StoreOptions::max_dirty_bytes (`ps.max_dirty_bytes`, resolved: 0 = no bound).
  uint64_t max_dirty_bytes = 64ull << 20;
  bool memory_only = false;
  Durability durability = Durability::kProcess;
  std::chrono::milliseconds group_commit{10};
  NanPolicy nan_policy = NanPolicy::kReject;
  uint64_t max_rows_per_push = 1u << 22;       // per table slice
  uint64_t max_buffered_bytes = 256ull << 20;  // k = 0 pushes waiting for their step
  uint64_t restore_point_every_bytes = 1ull << 30;
  uint64_t push_log_max_bytes = 16ull << 30;
  bool push_log_direct_io = true;  // `ps.push_log.io: direct`
  // Performance: threads (the calling one included) that apply the tables of one step, and
  // read the tables of one pull, in parallel. 1 = in series. Tables are independent, so the
  // model does not depend on it (PROTOCOLS §5).
  int apply_threads = 2;
  // Threads (the calling one included) that read the tables of one pull, at most one table part
  // each. More than the cores: a read that misses waits for the disk (a page fault in an SST),
  // so each thread keeps one more read in flight (issue 21: the final eval of a table many
  // times the page cache). Parts are cut as for applies (apply_threads), so a pull of few tables
  // uses no more threads than before.
  int read_threads = 8;
  // The job's last step (train.steps - 1), -1 when unknown. Once it is applied only the final
  // restore point, the final eval's reads and the exit follow, and the store's compactions (work
  // that a later open would do as well) yield the CPU to them (issue 21: end of job).
  int64_t last_step = -1;
  // Benchmarks only: skip the push log, to measure what it costs. Voids every durability
  // promise; the config has no key for it.
  bool push_log_enabled_for_bench = true;
  // Tests only: the push log's record writes (PushLogOptions::write_for_test).
  PwritevFn push_log_write_for_test;
};

// One table of a pull: the embeddings of ids go to out[i * dim ...].
struct TableRead {
  uint32_t table = 0;
  std::span<const uint64_t> ids;
  float* out = nullptr;
};

// A push as received: views into the message's frames (valid during the Push call only).
struct PushInput {
  uint64_t timeline = 0;
  int64_t step = 0;
  uint32_t rank = 0;
  uint64_t incarnation = 0;
  bool skip = false;  // fp16 overflow: an explicit push that applies nothing
  // A checkpoint is taken after `step`: cut a restore point right after applying it (k >= 1:
  // hold back later steps' pushes until then). Every rank's push of that step carries it.
  bool checkpoint = false;
  std::vector<PushTableView> tables;
};

struct PushAck {
  bool duplicate = false;     // already logged: acknowledged, not applied again
  int64_t applied_step = -1;  // the shard's applied step after this push
};

enum class PullVerdict { kReady, kPark, kStale };

struct ShardStats {
  uint64_t pushes_logged = 0;
  uint64_t duplicates = 0;
  uint64_t steps_applied = 0;
  uint64_t rows_applied = 0;
  uint64_t rows_admitted = 0;      // materialised after reaching admission.min_count
  uint64_t rows_not_admitted = 0;  // gradients dropped: id below admission.min_count
  uint64_t rows_expired = 0;       // treated as absent by eviction.ttl_steps
  uint64_t rows_nan_skipped = 0;   // nan_policy skip_rows
  uint64_t replayed_records = 0;   // at the last recovery
  uint64_t restore_points = 0;
  // Pushes refused because their push-log record could not be written (nothing of them stored):
  // for lack of space (ENOSPC, EDQUOT, EFBIG from a file-size limit), or for another error.
  uint64_t pushes_refused_log_full = 0;
  uint64_t pushes_refused_log_error = 0;
  bool push_log_full = false;  // the newest append failed for lack of space
  // Pushes refused because RocksDB refused the rows the store wrote (EmbeddingStore::WriteError:
  // a full disk), and whether it still does.
  uint64_t pushes_refused_store = 0;
  bool store_unwritable = false;
};

// Safe for concurrent use. Pushes and applies are serialized by one mutex (they are ordered by
// the log anyway); reads run concurrently on the store.
class Shard {
 public:
  // Locks the directory (kFailedPrecondition if another process holds it), then recovers: the
  // newest complete restore point is hard-linked into a fresh live DB and the log after it is
  // replayed. A fresh directory starts empty with a restore point at step -1. Also
  // kFailedPrecondition when the log holds pushes of another shard index or of a rank >=
  // num_workers: options that do not match the job that wrote the directory.
  static StatusOr<std::unique_ptr<Shard>> Open(const ShardOptions& options);
  ~Shard();

  // Validates (kInvalidArgument naming the problem; nothing is logged or stored), then logs,
  // then buffers (k = 0) or applies (k >= 1). Returns once the push is logged.
  // kFailedPrecondition for another timeline; kResourceExhausted when the log or the k = 0
  // buffer is full; kDataLoss for a determinism violation (a logged (step, rank) resent with a
  // different payload at k = 0).
  StatusOr<PushAck> Push(const PushInput& push);

  // Whether a pull for `step` of `timeline` can be answered now (k = 0: applied == step - 1;
  // k >= 1: applied >= step - 1 - k), must wait, or is stale (k = 0: applied > step - 1, or
  // another timeline). With `from_pre_images` a k = 0 pull for step s is also ready when
  // applied == s (recovery of a lost worker, PROTOCOLS §8).
  PullVerdict CheckPull(uint64_t timeline, int64_t step, bool from_pre_images) const;
  // The version a pull for `step` waits for (k = 0: step - 1; k >= 1: step - 1 - k).
  int64_t RequiredVersion(int64_t step) const;

  // Embeddings of ids (current values; absent rows read as their initial value).
  Status Read(uint32_t table, std::span<const uint64_t> ids, float* out);
  // Embeddings as they were before the last apply (rows the last apply did not change read
  // their current value).
  Status ReadPreImages(uint32_t table, std::span<const uint64_t> ids, float* out);
  // Read (or ReadPreImages) of several tables, in parallel on the apply threads. On failure
  // returns the error of the first failing entry of `reads`.
  Status ReadTables(std::span<const TableRead> reads, bool from_pre_images);
  // A k = 0 recovery pull for `step` (PROTOCOLS §8): version step - 1, that is the current rows
  // while `step` is not applied and the pre-images of its apply once it is, read with applies
  // held off (the replacement's push may complete the step meanwhile). kFailedPrecondition when
  // the shard has applied neither step - 1 nor step.
  Status ReadTablesForRecovery(std::span<const TableRead> reads, int64_t step);

  // Validates a pull's table and ids (kInvalidArgument).
  Status ValidatePull(uint32_t table, std::span<const uint64_t> ids) const;

  // Takes a restore point after the current applied step (flush + RocksDB checkpoint + marker),
  // rolls the log, and keeps the newest two restore points.
  Status TakeRestorePoint();

  // Copies the change log segments sealed since the newest full part to the durable copy (those
  // not copied yet), so that a delta part made later copies only the rest. A thread of the
  // shard calls it every half second; tests call it directly. Returns the bytes copied; an
  // error leaves the copy to the delta part.
  StatusOr<uint64_t> UploadSealedSegments();

  // Adds the shard's part of model_checksum (DESIGN §12) to `sum`: every stored row and every
  // admission counter, as of one applied step (applies wait until the scan is done; pulls do
  // not). `rows` (if not null) gets the number of rows added, `applied_step` (if not null) the
  // step the sum covers. Rows that logical TTL (PROTOCOLS §4) would treat as absent at the next
  // apply are still stored and are included as they are: whether a row has expired depends on
  // the step that reads it, and the sum must not. At k >= 1 rows of steps after the applied one
  // may already be in. Errors are the store's (kDataLoss for a malformed entry).
  Status AddToChecksum(ModelChecksum* sum, uint64_t* rows, int64_t* applied_step = nullptr);

  // This shard's part of checkpoint `step` (PROTOCOLS §7): the restore point cut right after
  // applying `step` (announced by the pushes of that step), or, for a step nobody announced, one
  // taken now if exactly `step` is applied and nothing of a later step is in; copied to the
  // durable copy under `durable_root` (only files the previous part lacks are copied). The copy
  // does not hold up pushes. kUnavailable while `step` is not applied yet (ask again);
  // kFailedPrecondition when later steps were applied and no cut was announced (or the cut was
  // lost with a restart). Asked twice, returns the same part.
  // `retained`: the committed checkpoints the chief keeps; once every one of them is a part this
  // process took, pool files no kept part needs are deleted (CollectGarbage).
  // `progress` (may be null) follows the copy (CopyToDurable).
  // `kind` (the job's last checkpoint asks for a delta): when this process made a full part
  // before, the store's change log since that part's restore point is whole and, for
  // kDeltaIfCheaper, smaller than the restore point's SSTs, the part is a delta of it
  // (CopyDeltaToDurable): the job's end costs what it wrote since its previous checkpoint, not
  // what compaction rewrote (issue 21). Full parts become the base of the next delta.
  StatusOr<CheckpointPart> CheckpointPartAt(int64_t step, const std::string& durable_root,
                                            const std::vector<int64_t>& retained = {},
                                            CopyProgress* progress = nullptr,
                                            PartKind kind = PartKind::kFull);

  int64_t applied_step() const;
  uint64_t timeline() const { return timeline_; }
  const ShardOptions& options() const { return options_; }
  ShardStats stats() const;
  // Why pushes are refused now (the error that began the episode: a full disk under the push log
  // or RocksDB), for the chief's view; empty while they are taken. Never waits for an apply.
  std::string refusal() const;
  // Bytes in every push-log segment (0 without a log). Thread-safe.
  uint64_t push_log_bytes() const { return log_ ? log_->total_bytes() : 0; }
  EmbeddingStore* store() { return store_.get(); }

 private:
  struct BufferedPush;
  // One rank's push of a step as views (into a BufferedPush, or into the arriving message).
  struct RankPush {
    bool skip = false;
    std::vector<PushTableView> tables;
  };
  explicit Shard(const ShardOptions& options);
  Status Recover();
  StatusOr<PushAck> PushLocked(const PushInput& push, bool replaying, uint64_t lsn)
      EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies every complete step after applied_. `arriving` (rank, push) completes the next step
  // without having been copied into the buffer.
  Status ApplyReadySteps(const PushInput* arriving) EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status ApplyStep(int64_t step, const std::vector<RankPush>& by_rank)
      EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies by_table[t] (the slices of table t, in rank order) for every table, tables in
  // parallel on pool_; adds their counts to stats_. On failure returns the error of the lowest
  // failing table (the other tables are still applied). With `keep_pre_images` (k = 0) each
  // table's pre-images are replaced by its rows before this apply.
  Status ApplyTables(int64_t step, const std::vector<std::vector<const PushTableView*>>& by_table,
                     bool keep_pre_images) EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The parts of an apply that run on pool threads. They touch only their table's rows (in the
  // store, whose stripes lock themselves), `pre` and `stats`; the caller of ApplyTables holds
  // mu_ throughout, which keeps applies in series.
  struct PreImages;
  Status ApplyMerged(int64_t step, uint32_t table, std::span<const PushTableView* const> slices,
                     PreImages* pre, ShardStats* stats);
  Status ApplyTable(int64_t step, uint32_t table, std::span<const uint64_t> ids,
                    std::span<const float> grads, PreImages* pre, ShardStats* stats);
  // How many parts a table's `ids` are applied or read in at once on pool_.
  size_t ApplyParts(size_t ids) const;
  // Admission (min_count > 1) needs to know which rows exist before deciding: drops the ids not
  // admitted yet and returns the positions of the rest.
  Status Admit(uint32_t table, std::span<const uint64_t> ids, std::vector<uint32_t>* admitted,
               ShardStats* stats);
  void AdvanceAppliedK1(int64_t step) EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Once the job's last step is applied (options_.last_step), and not while replaying: lowers
  // the compactions' priority (compaction_priority.h), once.
  void YieldIfTrainingOver() EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status ApplyOrHoldK1(const PushInput& push, uint64_t lsn, uint64_t bytes)
      EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status CutAndReleaseK1() EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The restore point of an announced checkpoint step, right after applying it (not while
  // replaying). A failure is logged: the checkpoint then fails when its part is asked for.
  void TakeCutPoint(int64_t step) EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps `dir` (its change log segment `seq`, 0 = unknown) as the restore point of the cut at
  // `step` until its part is copied.
  void PinCutPoint(int64_t step, const std::string& dir, uint64_t seq)
      EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `dir` (may be null) gets the restore point's directory.
  // `change_seq` (may be null) gets the change log segment the restore point was cut at; it is
  // left alone when the restore point already existed (its cut is unknown then).
  Status TakeRestorePointLocked(std::string* dir = nullptr, uint64_t* change_seq = nullptr)
      EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts and logs (once per episode) a push refused because its log record failed; returns
  // `error`. LogWritable() ends the episode after a record was written again.
  Status RefuseUnlogged(Status error) EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LogWritable() EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ok while the store writes to RocksDB; else counts and logs (once per episode) a push refused
  // for it, before anything of the push is logged or applied, and returns why (kResourceExhausted:
  // the sender retries, as for a full push log).
  Status CheckStoreWritable() EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts a push whose record is written, and warns (once) when the log grows past its bound.
  void RecordLogged(uint64_t bytes) EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The record of a k = 0 push that was written beside its apply failed: a push only buffered
  // is taken back (the shard is as it was); a push that completed its step stays applied, and
  // its record is written when the rank sends it again (unlogged_). Returns the refusal.
  Status UnloggedBesideApply(const PushInput& push, Status error) EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t ReplayFromLsn() const EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ShardOptions options_;
  int lock_fd_ = -1;
  uint64_t timeline_ = 0;
  std::unique_ptr<EmbeddingStore> store_;
  std::unique_ptr<PushLog> log_;
  internal::ApplyPool pool_;
  internal::ApplyPool read_pool_;       // ReadTables (options_.read_threads)
  internal::SideThread record_writer_;  // k = 0: the push's record, written beside its apply

  mutable Mutex mu_;
  // Written under mu_; read without it, so pulls never wait behind an apply.
  std::atomic<int64_t> applied_{-1};
  bool log_alarm_reported_ GUARDED_BY(mu_) = false;
  uint64_t refused_since_writable_ GUARDED_BY(mu_) = 0;        // pushes refused in this episode
  uint64_t refused_since_store_writable_ GUARDED_BY(mu_) = 0;  // the same, for the store
  // The errors that began each episode (empty: none); set under mu_ too.
  mutable Mutex refusal_mu_;
  std::string log_refusal_ GUARDED_BY(refusal_mu_);
  std::string store_refusal_ GUARDED_BY(refusal_mu_);
  // k = 0: pushes logged but not yet applied, by step then rank.
  std::map<int64_t, std::map<uint32_t, std::unique_ptr<BufferedPush>>> pending_ GUARDED_BY(mu_);
  uint64_t pending_bytes_ GUARDED_BY(mu_) = 0;
  // k >= 1: ranks applied per step not yet complete; steps complete beyond applied_.
  std::map<int64_t, std::set<uint32_t>> k1_ranks_ GUARDED_BY(mu_);
  // Exactly-once: (step, rank) -> payload hash, for steps above the oldest retained bound.
  std::map<std::pair<int64_t, uint32_t>, uint64_t> logged_ GUARDED_BY(mu_);
  // k = 0: (step, rank) of applied pushes whose record could not be written; acknowledged only
  // once the rank's resend has written it (the state is ahead of the log until then).
  std::set<std::pair<int64_t, uint32_t>> unlogged_ GUARDED_BY(mu_);
  // k = 0: the record being written beside the apply of its push (PushLocked), and its result
  // once a restore point had to wait for it.
  std::future<Status>* record_in_flight_ GUARDED_BY(mu_) = nullptr;
  Status record_result_ GUARDED_BY(mu_);
  // Pre-images of the last apply, per table: ids and their embeddings before it (rows[k * dim]
  // for ids[k]). Only a recovery pull reads them, so the id index is built by the first lookup
  // after an apply, not on the hot path.
  struct PreImages {  // (declared above)
    std::vector<uint64_t> ids;
    std::vector<float> rows;
    FlatIdIndex index;
    bool indexed = false;
    void Clear() {
      ids.clear();
      rows.clear();
      indexed = false;
    }
    uint32_t Find(uint64_t id) {
      if (!indexed) {
        index.Reset(ids.size());
        for (uint64_t i : ids) index.Insert(i);
        indexed = true;
      }
      return index.Find(id);
    }
  };
  std::vector<PreImages> pre_images_ GUARDED_BY(mu_);
  uint64_t bytes_since_restore_point_ GUARDED_BY(mu_) = 0;
  bool restore_point_failing_ GUARDED_BY(mu_) = false;  // the last one by bytes failed
  ShardStats stats_ GUARDED_BY(mu_);
  bool replaying_ GUARDED_BY(mu_) = false;      // Recover is replaying the log
  int64_t replayed_cut_ GUARDED_BY(mu_) = -1;   // the newest cut that replay met (TakeCutPoint)
  bool training_over_ GUARDED_BY(mu_) = false;  // YieldIfTrainingOver has lowered them
  // Announced checkpoint steps (a push carried `checkpoint`) whose restore point is not cut yet.
  std::set<int64_t> cuts_ GUARDED_BY(mu_);
  // k >= 1: pushes of steps after the oldest cut, logged and held back until it is taken (LSN
  // order), with copies of their rows.
  struct HeldPush {
    uint64_t lsn = 0;
    uint64_t bytes = 0;
    PushInput input;  // views into `tables`
    std::vector<PushTable> tables;
  };
  std::deque<HeldPush> held_ GUARDED_BY(mu_);
  // Restore points cut for checkpoints whose part is not copied yet, by step: never deleted by
  // the keep-two rule until then.
  std::map<int64_t, std::string> cut_points_ GUARDED_BY(mu_);
  // The change log segment each of cut_points_ was cut at (absent: unknown).
  std::map<int64_t, uint64_t> cut_seqs_ GUARDED_BY(mu_);

  Mutex copy_mu_;  // one CheckpointPartAt at a time (CopyToDurable and CollectGarbage)
  std::optional<CheckpointPart> last_part_ GUARDED_BY(copy_mu_);  // the newest checkpoint part
  std::map<int64_t, CheckpointPart> parts_ GUARDED_BY(copy_mu_);  // parts this process took
  // The newest full part this process made and the change log segment its restore point was
  // cut at: a final part may be it plus the segments after.
  struct DeltaBase {
    CheckpointPart part;
    uint64_t change_seq = 0;
  };
  std::optional<DeltaBase> delta_base_ GUARDED_BY(copy_mu_);
  std::set<uint64_t> uploaded_ GUARDED_BY(copy_mu_);  // segments of its chain already copied
  // Deletes the push log's segments behind the oldest kept restore point (TakeRestorePointLocked
  // asks), and the files in doomed_, away from mu_: unlinking a GB of segments took ~1 s of the
  // job's final restore point, and dropping the change log's GBs before the first checkpoint
  // 2.0-2.7 s of a periodic one, every push and pull waiting (issue 21).
  void TrimLoop();
  // Hands files and folders no longer needed to TrimLoop. A folder must already be out of
  // every listing (a restore point's is renamed to *.doomed, which Recover removes if a stop
  // came first); a change log segment is (ChangeLog::Open starts the log afresh).
  void DeleteLater(std::vector<std::string> paths);
  std::thread trimmer_;
  Mutex trim_mu_;
  CondVar trim_cv_{&trim_mu_};
  uint64_t trim_through_ GUARDED_BY(trim_mu_) = 0;  // the newest LSN that may go
  std::vector<std::string> doomed_ GUARDED_BY(trim_mu_);
  bool stop_trimming_ GUARDED_BY(trim_mu_) = false;
  // The thread that calls UploadSealedSegments (with a change log and a durable copy).
  void UploadLoop();
  std::thread uploader_;
  Mutex upload_mu_;
  CondVar upload_cv_{&upload_mu_};
  bool stop_uploading_ GUARDED_BY(upload_mu_) = false;
  // delta_base_'s change_seq, 0 without one: read by restore points, which drop the segments no
  // delta can need while there is no base.
  std::atomic<uint64_t> delta_base_seq_{0};
  // The segments after delta_base_ up to `seq` (the restore point at `dir`'s cut), when a delta
  // part of them is possible and cheaper than the restore point's SSTs; nullopt otherwise.
  std::optional<std::vector<ChangeSegment>> DeltaSegments(const std::string& dir,
                                                          const std::string& durable_root,
                                                          uint64_t seq, PartKind kind)
      EXCLUSIVE_LOCKS_REQUIRED(copy_mu_);
};

}  // namespace tandem::ps
