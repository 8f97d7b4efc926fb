#include "server/chief/checkpoint_coordinator.h"

#include <charconv>

#include "common/log.h"

namespace tandem::chief {

StatusOr<ManifestPart> ParsePart(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string() ||
      !j.contains("files") || !j["files"].is_array())
    return Status::InvalidArgument("checkpoint part: not {\"name\", \"files\": [...]} JSON");
  ManifestPart part;
  part.name = j["name"].get<std::string>();
  if (j.contains("detail")) part.detail = j["detail"];
  for (const auto& f : j["files"]) {
    if (!f.is_object() || !f.contains("path") || !f["path"].is_string() || !f.contains("size") ||
        !f["size"].is_number_unsigned() || !f.contains("crc32c") || !f["crc32c"].is_string())
      return Status::InvalidArgument("checkpoint part " + part.name + ": malformed file entry");
    ManifestFile file;
    file.path = f["path"].get<std::string>();
    file.size = f["size"].get<uint64_t>();
    const std::string crc = f["crc32c"].get<std::string>();
    auto [end, ec] = std::from_chars(crc.data(), crc.data() + crc.size(), file.crc32c, 16);
    if (ec != std::errc() || end != crc.data() + crc.size() || crc.size() != 8)
      return Status::InvalidArgument("checkpoint part " + part.name + ": bad crc32c " + crc);
    if (file.path.empty() || file.path.front() == '/' || file.path.find("..") != std::string::npos)
      return Status::InvalidArgument("checkpoint part " + part.name + ": unsafe path " + file.path);
    part.files.push_back(std::move(file));
  }
  return part;
}

StatusOr<CheckpointCoordinator> CheckpointCoordinator::Open(const config::JobConfig& job) {
  CheckpointCoordinator c(job);
  const std::string& dir = job.checkpoint.dir;
  std::vector<std::string> warnings;
  // A job start reads every file of the checkpoint it resumes from (PROTOCOLS §7).
  auto latest = LoadLatest(dir, /*durable_only=*/false, &warnings,
                           /*verify_files=*/job.checkpoint.resume != "never");
  for (const auto& w : warnings) TLOG_WARN("checkpoint: {}", w);
  if (!latest.ok() && !latest.status().IsNotFound()) return latest.status();
  if (latest.ok()) c.latest_step_ = latest->step;
  if (latest.ok() && job.checkpoint.resume != "never") {
    TANDEM_ASSIGN_OR_RETURN(std::vector<std::string> aside, SetAsideNewer(dir, latest->step));
    for (const auto& d : aside) TLOG_WARN("checkpoint: {} set aside: not resumable", d);
  }
  // Only partial checkpoints older than LATEST: a newer one may be worker 0's, in progress.
  TANDEM_RETURN_IF_ERROR(CleanPartial(dir, c.latest_step_));
  if (job.checkpoint.resume == "never" || !latest.ok()) {
    if (job.checkpoint.resume == "required")
      return Status::InvalidArgument("checkpoint.resume is required but " + dir +
                                     " holds no checkpoint");
    if (latest.ok())
      TLOG_WARN(
          "checkpoint.resume is never: starting from scratch despite the checkpoint of "
          "step {} in {}",
          latest->step, dir);
    return c;
  }
  auto then = config::ParseJobConfig(latest->config_yaml,
                                     dir + "/" + CheckpointDirName(latest->step) + "/MANIFEST", {});
  if (!then.ok()) return then.status().WithContext("the checkpoint's config");
  const auto differ = DifferingComputationKeys(*then, job);
  if (!differ.empty()) {
    std::string keys;
    for (const auto& d : differ) keys += (keys.empty() ? "" : "; ") + d;
    return Status::InvalidArgument("cannot resume from the checkpoint of step " +
                                   std::to_string(latest->step) + " in " + dir +
                                   ": the computation-defining config differs: " + keys);
  }
  if (latest->step >= job.train.steps - 1)
    return Status::InvalidArgument(
        "the job in " + dir + " has finished: its checkpoint is of step " +
        std::to_string(latest->step) + " and train.steps is " + std::to_string(job.train.steps) +
        "; raise train.steps to train on, or start a new job with another checkpoint.dir");
  TLOG_INFO("resuming from the checkpoint of step {} in {}", latest->step, dir);
  c.resume_step_ = latest->step;
  return c;
}

StatusOr<CheckpointCoordinator> CheckpointCoordinator::Rejoin(const config::JobConfig& job,
                                                              int64_t run_resume_step) {
  CheckpointCoordinator c(job);
  const std::string& dir = job.checkpoint.dir;
  std::vector<std::string> warnings;
  auto latest = LoadLatest(dir, /*durable_only=*/false, &warnings);
  for (const auto& w : warnings) TLOG_WARN("checkpoint: {}", w);
  if (!latest.ok() && !latest.status().IsNotFound()) return latest.status();
  if (latest.ok()) c.latest_step_ = latest->step;
  TANDEM_RETURN_IF_ERROR(CleanPartial(dir, c.latest_step_));
  c.resume_step_ = run_resume_step;
  TLOG_INFO("rejoining the run that resumed from step {}; the latest checkpoint is of step {}",
            run_resume_step, c.latest_step_);
  return c;
}

Status CheckpointCoordinator::Commit(int64_t step, const std::vector<std::string>& parts,
                                     const std::string& determinism_class,
                                     const CommitContext& context) {
  // The same commit again: worker 0 re-sent it because the answer was lost or late (a chief
  // stopped or restarted in between). It is committed; say so.
  if (step == latest_step_ && latest_step_ >= 0) {
    TLOG_INFO("checkpoint of step {} was already committed", step);
    return Status::Ok();
  }
  if (step <= latest_step_)
    return Status::InvalidArgument("checkpoint of step " + std::to_string(step) +
                                   " is not after the latest, " + std::to_string(latest_step_));
  Manifest m;
  m.step = step;
  m.job_id = context.job_id;
  m.timeline = context.timeline;
  m.term = context.term;
  m.generation = context.generation;
  m.num_ps = static_cast<uint32_t>(job_.cluster.ps.size());
  m.num_workers = static_cast<uint32_t>(job_.cluster.workers.size());
  m.config_hash = job_.ComputationHash();
  m.config_yaml = job_.ToYaml();
  m.determinism_class = determinism_class;
  m.records_consumed = RecordsConsumedAfter(step, m.num_workers, job_.train.batch_size);
  m.seed = job_.train.seed;
  for (const auto& p : parts) {
    TANDEM_ASSIGN_OR_RETURN(ManifestPart part, ParsePart(p));
    m.parts.push_back(std::move(part));
  }
  const std::string& dir = job_.checkpoint.dir;
  // Every part is already in the durable copy when rank 0 hands it over.
  TANDEM_RETURN_IF_ERROR(CommitCheckpoint(dir, m, /*durable=*/true));
  latest_step_ = step;
  // Worker 0 never goes back below a committed step: older partial checkpoints are abandoned
  // (e.g. taken while the chief was away and superseded by this one).
  if (Status s = CleanPartial(dir, step); !s.ok())
    TLOG_WARN("cleaning partial checkpoints below step {}: {}", step, s.ToString());
  auto kept = Retain(dir, job_.checkpoint.keep);
  if (!kept.ok()) TLOG_WARN("checkpoint retention: {}", kept.status().ToString());
  retained_ = kept.ok() ? *kept : std::vector<int64_t>{};
  TLOG_INFO("checkpoint of step {} committed ({} parts)", step, m.parts.size());
  return Status::Ok();
}

}  // namespace tandem::chief
