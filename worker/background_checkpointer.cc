#include "worker/background_checkpointer.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/checkpoint_layout.h"
#include "common/log.h"
#include "common/wait_log.h"

namespace tandem::worker {

using Clock = std::chrono::steady_clock;

void UseClients(PsClient* ps, ChiefClient* chief, const std::string& determinism_class,
                BackgroundCheckpointerOptions* options, std::chrono::milliseconds commit_budget) {
  const PartKind final_kind = options->job != nullptr
                                  ? FinalPartKind(options->job->checkpoint.final_part)
                                  : PartKind::kDeltaIfCheaper;
  options->shard_parts = [ps, final_kind](int64_t step, const std::vector<int64_t>& retained,
                                          bool final) {
    return ps->CheckpointParts(step, retained, final ? final_kind : PartKind::kFull);
  };
  options->waiting_on = [chief](const std::string& why) { chief->SetWaitingOn(why, "checkpoint"); };
  options->commit = [chief, determinism_class, commit_budget](int64_t step,
                                                              const std::vector<std::string>& parts,
                                                              std::vector<int64_t>* retained) {
    return chief->CommitCheckpoint(step, parts, determinism_class, commit_budget, retained);
  };
}

BackgroundCheckpointer::BackgroundCheckpointer(BackgroundCheckpointerOptions options)
    : options_(std::move(options)) {
  thread_ = std::thread([this] { Run(); });
}

BackgroundCheckpointer::~BackgroundCheckpointer() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    cv_.SignalAll();
  }
  thread_.join();
  MutexLock lock(&mu_);
  if (uncommitted_)
    TLOG_WARN("checkpoint of step {} abandoned: the chief never committed it", uncommitted_->step);
}

double BackgroundCheckpointer::Begin(int64_t step, worker::DenseState state, bool final) {
  const auto t0 = Clock::now();
  MutexLock lock(&mu_);
  while (next_ || (writing_ && !held_)) cv_.Wait();
  next_.emplace(step, std::move(state));
  next_final_ = final;
  last_begun_ = step;
  cv_.SignalAll();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

Status BackgroundCheckpointer::Finish(std::chrono::milliseconds budget,
                                      const std::function<bool()>& stopped) {
  auto deadline = Clock::now() + budget;
  MutexLock lock(&mu_);
  // The budget is for the chief's commit. Writing takes what it takes: its copies grow with the
  // table, and on a full disk it waits for space (and says so), where failing the job would roll
  // it back onto the same disk; so does a commit the chief cannot write. A stop ends that wait.
  while ((next_ || writing_ || uncommitted_) && Clock::now() < deadline) {
    cv_.WaitUntil(std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
    if ((held_ || commit_held_) && stopped && stopped())
      return Status::Cancelled("stopped while the checkpoint of step " +
                               std::to_string(last_begun_) + " waited for space");
    if (next_ || writing_ || commit_held_) deadline = Clock::now() + budget;
  }
  if (last_begun_ < 0 || last_committed_ == last_begun_) return Status::Ok();
  if (next_ || writing_ || uncommitted_)
    return Status::DeadlineExceeded("the checkpoint of step " + std::to_string(last_begun_) +
                                    " was not committed within " + std::to_string(budget.count()) +
                                    " ms");
  return last_error_.ok() ? Status::Internal("the checkpoint of step " +
                                             std::to_string(last_begun_) + " was lost")
                          : last_error_;
}

void BackgroundCheckpointer::NoteHeld() {
  MutexLock lock(&mu_);
  if (!writing_ || held_) return;
  held_ = true;
  cv_.SignalAll();
}

bool BackgroundCheckpointer::Superseded() const {
  MutexLock lock(&mu_);
  return stopping_ || (held_ && next_.has_value() && !writing_final_);
}

int64_t BackgroundCheckpointer::last_committed() const {
  MutexLock lock(&mu_);
  return last_committed_;
}

void BackgroundCheckpointer::Run() {
  for (;;) {
    std::optional<std::pair<int64_t, worker::DenseState>> work;
    bool final = false;
    std::optional<Uncommitted> commit;
    {
      MutexLock lock(&mu_);
      while (!stopping_ && !next_ && !uncommitted_) cv_.Wait();
      if (uncommitted_ && !uncommitted_->tried && !stopping_) {
        // A written checkpoint is offered to the chief once before the next one is written,
        // so a present chief commits every checkpoint, not only the newest of a quick series.
        commit = uncommitted_;
      } else if (next_) {
        work = std::move(next_);
        final = next_final_;
        next_.reset();
        writing_ = true;
        writing_final_ = final;
        held_ = false;
      } else if (uncommitted_ && !stopping_) {
        commit = uncommitted_;
      } else {
        return;
      }
    }
    if (work) {
      auto parts = Write(work->first, work->second, final);
      MutexLock lock(&mu_);
      writing_ = false;
      held_ = false;
      if (parts.ok()) {
        // A newer checkpoint replaces one the chief has not taken yet.
        if (uncommitted_)
          TLOG_WARN("checkpoint of step {} not committed (the chief is away): superseded by {}",
                    uncommitted_->step, work->first);
        uncommitted_ = Uncommitted{work->first, std::move(parts).value()};
        last_error_ = Status::Ok();
      } else if (next_ && parts.status().IsCancelled()) {
        TLOG_WARN(
            "checkpoint of step {} dropped while it waited for space: the checkpoint of "
            "step {} replaces it",
            work->first, next_->first);
      } else {
        last_error_ =
            parts.status().WithContext("checkpoint of step " + std::to_string(work->first));
        TLOG_ERROR("{}", last_error_.ToString());
      }
      cv_.SignalAll();
      continue;
    }
    const bool settled = TryCommit(*commit);
    MutexLock lock(&mu_);
    if (uncommitted_ && uncommitted_->step == commit->step) uncommitted_->tried = true;
    if (settled) {
      if (uncommitted_ && uncommitted_->step == commit->step) uncommitted_.reset();
      cv_.SignalAll();
      continue;
    }
    if (!next_ && !stopping_) cv_.WaitUntil(Clock::now() + options_.retry_every);
  }
}

StatusOr<std::vector<std::string>> BackgroundCheckpointer::Write(int64_t step,
                                                                 const worker::DenseState& state,
                                                                 bool final) {
  const config::JobConfig& job = *options_.job;
  const auto t0 = Clock::now();
  const std::string rel = CheckpointDirName(step) + "/" + kDenseCheckpointFile;
  worker::DenseFileInfo info;
  TANDEM_RETURN_IF_ERROR(
      WriteDenseWhenThereIsSpace(step, job.checkpoint.dir + "/" + rel, state, &info));
  TANDEM_ASSIGN_OR_RETURN(std::vector<std::string> shard_parts,
                          options_.shard_parts(step, retained_, final));
  char crc[16];
  std::snprintf(crc, sizeof crc, "%08x", info.crc32c);
  std::vector<std::string> parts;
  parts.push_back(
      nlohmann::json({{"name", "dense"},
                      {"files", {{{"path", rel}, {"size", info.size_bytes}, {"crc32c", crc}}}}})
          .dump());
  for (size_t i = 0; i < shard_parts.size(); ++i) {
    auto part = nlohmann::json::parse(shard_parts[i], nullptr, false);
    if (part.is_discarded() || !part.contains("files") || !part["files"].is_array())
      return Status::InvalidArgument("shard " + std::to_string(i) + " sent a malformed part");
    const std::string root = ShardDurableDir(static_cast<uint32_t>(i)) + "/";
    nlohmann::json files = nlohmann::json::array();
    for (const auto& f : part["files"])
      files.push_back({{"path", root + f.value("path", "")},
                       {"size", f.value("size", uint64_t{0})},
                       {"crc32c", f.value("crc32c", "")}});
    parts.push_back(
        nlohmann::json({{"name", "shard-" + std::to_string(i)}, {"files", files}, {"detail", part}})
            .dump());
  }
  TLOG_INFO("checkpoint of step {} written in {:.3f} s", step,
            std::chrono::duration<double>(Clock::now() - t0).count());
  return parts;
}

Status BackgroundCheckpointer::WriteDenseWhenThereIsSpace(int64_t step, const std::string& path,
                                                          const worker::DenseState& state,
                                                          worker::DenseFileInfo* info) {
  Status written = worker::WriteDenseStateFile(path, state, info);
  if (written.code() != StatusCode::kResourceExhausted) return written;
  // A full disk: the checkpoint waits for space rather than fail (the final one would fail the
  // job, and a rollback would meet the same disk). Said in the log and to the chief meanwhile.
  const std::string what = "space for the checkpoint of step " + std::to_string(step);
  TLOG_ERROR("checkpoint of step {} waits for space: {}", step, written.ToString());
  NoteHeld();
  WaitLog wait(what);
  while (written.code() == StatusCode::kResourceExhausted) {
    if (options_.waiting_on) options_.waiting_on("waiting for " + what + ": " + written.ToString());
    wait.Tick(written.ToString());
    {
      MutexLock lock(&mu_);
      if (!stopping_ && !(next_ && !writing_final_))
        cv_.WaitUntil(Clock::now() + options_.retry_every);
      if (stopping_) break;
      if (next_ && !writing_final_) {
        written = Status::Cancelled("superseded while it waited for space");
        break;
      }
    }
    written = worker::WriteDenseStateFile(path, state, info);
  }
  if (options_.waiting_on) options_.waiting_on("");
  if (written.ok()) TLOG_INFO("checkpoint of step {}: the dense file fits again", step);
  return written;
}

bool BackgroundCheckpointer::TryCommit(const Uncommitted& c) {
  auto committed = options_.commit(c.step, c.parts, &retained_);
  const bool full = committed.status().IsResourceExhausted();
  bool was_held = false;
  {
    MutexLock lock(&mu_);
    was_held = std::exchange(commit_held_, full);
    if (commit_held_ != was_held) cv_.SignalAll();  // Finish's deadline
  }
  if (full) {
    // The chief cannot take the commit now (its disk is full, or its queue): the commit waits as
    // the writing does for space (the final checkpoint would otherwise fail the job, and its
    // rollback meet the same disk).
    if (!was_held)
      TLOG_ERROR("checkpoint of step {} waits for the chief to take its commit: {}", c.step,
                 committed.status().ToString());
    if (options_.waiting_on)
      options_.waiting_on("waiting for the chief to take the commit of the checkpoint of step " +
                          std::to_string(c.step) + ": " + committed.status().ToString());
    return false;
  }
  if (was_held) {
    if (options_.waiting_on) options_.waiting_on("");
    TLOG_INFO("checkpoint of step {}: the chief takes its commit again", c.step);
  }
  MutexLock lock(&mu_);
  if (committed.ok()) {
    last_committed_ = c.step;
    last_error_ = Status::Ok();
    return true;
  }
  if (committed.status().IsInvalidArgument() || committed.status().IsDataLoss()) {
    // The chief refused it for good (a malformed part, a later checkpoint already committed).
    last_error_ = committed.status().WithContext("commit of the checkpoint of step " +
                                                 std::to_string(c.step));
    TLOG_ERROR("{}", last_error_.ToString());
    return true;
  }
  // Checkpoints pause while the chief is away (PROTOCOLS §10): try again.
  last_error_ = committed.status();
  if (c.step != retry_step_) {
    retry_step_ = c.step;
    retries_ = 0;
  }
  if (retries_++ % 30 == 0)
    TLOG_WARN("checkpoint of step {} not committed yet ({} tries), will retry: {}", c.step,
              retries_, committed.status().ToString());
  return false;
}

}  // namespace tandem::worker
