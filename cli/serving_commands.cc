#include "cli/serving_commands.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/errno_status.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "offline/bundle.h"
#include "offline/checkpoint_reader.h"
#include "serve/checkpoint_delta.h"
#include "worker/data/binary_format.h"
#include "worker/data/record_source.h"
#include "worker/frozen_model.h"

namespace tandem::cli {

using offline::OpenCheckpoint;
using offline::ReadBundle;
using offline::ReadCheckpointModel;
using offline::WriteBundle;
namespace {

namespace fs = std::filesystem;

// Bad input (a corrupt checkpoint or bundle, unreadable data, a config that does not fit) is
// 3; a refused output directory 2; anything else (I/O) 1.
int Fail(const char* command, const Status& s) {
  std::fprintf(stderr, "tandem %s: %s\n", command, s.ToString().c_str());
  // Not ExitCodeFor's 1: an output that exists is one the user named, and it is never
  // overwritten; naming another is a usage matter (2, export_predict_test).
  if (s.code() == StatusCode::kAlreadyExists) return kExitUsage;
  return ExitCodeFor(s);
}

// NaN (no positives or no negatives, no samples) as JSON null.
nlohmann::json Figure(double v) { return std::isfinite(v) ? nlohmann::json(v) : nullptr; }

// criteo, text or binary. When `format` is auto: binary from the first file's magic; else text
// for a model trained on text or one Criteo's columns cannot describe (multi-hot features,
// several labels: data.text.* then names the columns), criteo otherwise.
StatusOr<std::string> DataFormat(const std::string& data, const std::string& format,
                                 const config::JobConfig& job) {
  if (format != "auto") return format;
  TANDEM_ASSIGN_OR_RETURN(auto paths, data::ExpandGlob(data));
  std::ifstream in(paths.front(), std::ios::binary);
  char magic[sizeof(data::kBinaryMagic)] = {};
  in.read(magic, sizeof(magic));
  const bool binary = in.gcount() == static_cast<std::streamsize>(sizeof(magic)) &&
                      std::memcmp(magic, data::kBinaryMagic, sizeof(magic)) == 0;
  if (binary) return std::string("binary");
  const bool text = job.data.format == "text" || !data::SchemaFromConfig(job).single_hot();
  return std::string(text ? "text" : "criteo");
}

// Where the scores go: stdout, or a file written whole and renamed into place, so a failed run
// leaves no scores that look complete. Not WriteFileDurably: the scores are streamed as they
// are computed (they may not fit in memory).
class ScoreWriter {
 public:
  static StatusOr<std::unique_ptr<ScoreWriter>> Open(const std::string& path) {
    std::unique_ptr<ScoreWriter> w(new ScoreWriter(path));
    if (path.empty()) {
      w->file_ = stdout;
      return w;
    }
    w->tmp_ = path + ".tmp-" + std::to_string(::getpid());
    w->file_ = std::fopen(w->tmp_.c_str(), "w");
    if (w->file_ == nullptr) return ErrnoToStatus(errno, "create " + w->tmp_);
    return w;
  }
  ~ScoreWriter() {
    if (file_ != nullptr && file_ != stdout) {
      std::fclose(file_);
      std::remove(tmp_.c_str());
    }
  }
  // One line per record: its probability, or one per label separated by tabs.
  Status Write(const worker::ScoredBatch& b) {
    const auto tasks = static_cast<size_t>(b.num_labels);
    for (size_t i = 0; i < b.weights.size(); ++i) {
      for (size_t k = 0; k < tasks; ++k) {
        if (k > 0) std::fputc('\t', file_);
        if (b.weights[i] > 0) {
          std::fprintf(file_, "%.9g", static_cast<double>(b.probs[i * tasks + k]));
        } else {
          std::fputs("nan", file_);
        }
      }
      std::fputc('\n', file_);
    }
    return std::ferror(file_) ? ErrnoToStatus(errno, "write scores") : Status::Ok();
  }
  Status Commit() {
    if (std::fflush(file_) != 0 || std::ferror(file_)) return ErrnoToStatus(errno, "write scores");
    if (file_ == stdout) return Status::Ok();
    const bool synced = ::fsync(::fileno(file_)) == 0;
    std::fclose(file_);
    file_ = nullptr;
    if (!synced || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
      const Status s = ErrnoToStatus(errno, "write " + path_);
      std::remove(tmp_.c_str());
      return s;
    }
    return Status::Ok();
  }

 private:
  explicit ScoreWriter(std::string path) : path_(std::move(path)) {}
  std::string path_, tmp_;
  FILE* file_ = nullptr;
};

int ExportDelta(const ExportArgs& args, const offline::OpenedCheckpoint& ckpt) {
  auto scratch = offline::ScratchDir::Create("tandem-export");
  if (!scratch.ok()) return Fail("export", scratch.status());
  serve::DeltaStats stats;
  auto model = serve::ReadCheckpointDelta(ckpt, args.since, (*scratch)->path(), &stats);
  if (!model.ok())
    return Fail("export", model.status().WithContext("checkpoint of step " +
                                                     std::to_string(ckpt.manifest.step)));
  offline::BundleOrigin origin{ckpt.manifest.job_id, args.checkpoint, args.since};
  if (Status s = WriteBundle(*model, origin, args.out); !s.ok()) return Fail("export", s);
  std::fprintf(stderr,
               "exported the rows of step %lld changed after step %lld (%llu of %llu rows read) "
               "to %s\n",
               static_cast<long long>(model->step), static_cast<long long>(args.since),
               static_cast<unsigned long long>(stats.rows_changed),
               static_cast<unsigned long long>(stats.rows_read), args.out.c_str());
  return kExitOk;
}

}  // namespace

int RunExport(const ExportArgs& args) {
  log::Init("export", args.log_level);
  std::error_code ec;
  // Refused before any work: reading a large checkpoint for nothing helps no one.
  if (fs::exists(args.out, ec) && (!fs::is_directory(args.out, ec) || !fs::is_empty(args.out, ec)))
    return Fail("export", Status::AlreadyExists(args.out + " exists and is not an empty directory "
                                                           "(a bundle is never overwritten)"));
  auto ckpt = OpenCheckpoint(args.checkpoint);
  if (!ckpt.ok()) return Fail("export", ckpt.status());
  if (args.since >= 0) return ExportDelta(args, *ckpt);
  auto model = ReadCheckpointModel(*ckpt, /*verify=*/true);
  if (!model.ok())
    return Fail("export", model.status().WithContext("checkpoint of step " +
                                                     std::to_string(ckpt->manifest.step)));
  Status s = WriteBundle(*model, {ckpt->manifest.job_id, args.checkpoint}, args.out);
  if (!s.ok()) return Fail("export", s);
  uint64_t rows = 0;
  for (const auto& t : model->tables) rows += t.ids.size();
  std::fprintf(stderr, "exported the checkpoint of step %lld (%llu rows in %zu tables) to %s\n",
               static_cast<long long>(model->step), static_cast<unsigned long long>(rows),
               model->tables.size(), args.out.c_str());
  return kExitOk;
}

int RunPredict(const PredictArgs& args) {
  log::Init("predict", args.log_level);
  auto model = ReadBundle(args.model);
  if (!model.ok()) return Fail("predict", model.status());
  auto format = DataFormat(args.data, args.format, model->job);
  if (!format.ok()) return Fail("predict", format.status());
  config::DataConfig& data = model->job.data;
  data.format = *format;
  data.eval = args.data;
  if (args.max_bad_fraction >= 0) data.max_bad_fraction = args.max_bad_fraction;
  model->job.train.device = args.device.empty() ? "cpu" : args.device;
  auto writer = ScoreWriter::Open(args.out);
  if (!writer.ok()) return Fail("predict", writer.status());
  worker::ScoreOptions o;
  o.unknown = args.unknown == "zero" ? worker::UnknownIds::kZero : worker::UnknownIds::kInitial;
  o.max_bad_fraction = data.max_bad_fraction;
  o.sink = [&](const worker::ScoredBatch& b) { return (*writer)->Write(b); };
  auto r = worker::ScoreFrozenModel(*model, o);
  if (!r.ok()) return Fail("predict", r.status());
  if (Status s = (*writer)->Commit(); !s.ok()) return Fail("predict", s);
  for (const auto& report : r->bad_reports)
    std::fprintf(stderr, "malformed record: %s\n", report.c_str());
  const nlohmann::json summary = {{"records", r->records},
                                  {"malformed", r->bad_records},
                                  {"samples", r->eval.samples},
                                  {"auc", Figure(r->eval.auc)},
                                  {"logloss", Figure(r->eval.logloss)},
                                  {"unknown_ids", r->unknown_lookups}};
  std::fprintf(stderr, "%s\n", summary.dump().c_str());
  return kExitOk;
}

int RunEval(const EvalArgs& args) {
  log::Init("eval", args.log_level);
  auto ckpt = OpenCheckpoint(args.checkpoint);
  if (!ckpt.ok()) return Fail("eval", ckpt.status());
  auto model = ReadCheckpointModel(*ckpt, /*verify=*/false);
  if (!model.ok())
    return Fail("eval", model.status().WithContext("checkpoint of step " +
                                                   std::to_string(ckpt->manifest.step)));
  if (!args.config_path.empty()) {
    std::vector<config::Override> overrides;
    for (const auto& s : args.sets) overrides.push_back({s});
    auto job = config::LoadJobConfig(args.config_path, overrides);
    if (!job.ok()) return Fail("eval", job.status());
    // The model is the checkpoint's; what it is evaluated on, and where, is the config's.
    model->job.data = job->data;
    model->job.train.device = job->train.device;
    model->job.train.threads = job->train.threads;
  }
  worker::ScoreOptions o;
  o.max_bad_fraction = model->job.data.max_bad_fraction;
  auto r = worker::ScoreFrozenModel(*model, o);
  if (!r.ok()) return Fail("eval", r.status());
  for (const auto& report : r->bad_reports)
    std::fprintf(stderr, "malformed record: %s\n", report.c_str());
  nlohmann::json out = {{"step", model->step},
                        {"auc", Figure(r->eval.auc)},
                        {"logloss", Figure(r->eval.logloss)},
                        {"samples", r->eval.samples}};
  if (std::isfinite(r->eval.teacher_auc)) out["teacher_auc"] = r->eval.teacher_auc;
  // As metrics.jsonl's "tasks": each label's figures, only when there are several.
  const std::vector<std::string>& labels = model->job.data.labels;
  if (r->eval.tasks.size() >= 2 && r->eval.tasks.size() == labels.size()) {
    nlohmann::json tasks = nlohmann::json::object();
    for (size_t k = 0; k < labels.size(); ++k) {
      const worker::TaskEval& t = r->eval.tasks[k];
      nlohmann::json task = {{"auc", Figure(t.auc)}, {"logloss", Figure(t.logloss)}};
      if (std::isfinite(t.teacher_auc)) task["teacher_auc"] = t.teacher_auc;
      tasks[labels[k]] = std::move(task);
    }
    out["tasks"] = std::move(tasks);
  }
  std::printf("%s\n", out.dump().c_str());
  return kExitOk;
}

}  // namespace tandem::cli
