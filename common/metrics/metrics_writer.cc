#include "common/metrics/metrics_writer.h"

#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace tandem::metrics {
namespace {

using Json = nlohmann::ordered_json;  // keeps "step" first, for people reading the file

constexpr off_t kScanChunk = 4096;

double WallTimeSeconds() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration<double>(now).count();
}

// Offset of the last '\n' in [0, limit), or -1 when there is none. Reads backwards in chunks:
// a long job's file is large, and only its tail matters.
StatusOr<off_t> LastNewlineBefore(const internal::AppendFile& file, off_t limit) {
  while (limit > 0) {
    const off_t start = limit > kScanChunk ? limit - kScanChunk : 0;
    TANDEM_ASSIGN_OR_RETURN(std::string chunk,
                            file.ReadAt(start, static_cast<size_t>(limit - start)));
    const size_t pos = chunk.rfind('\n');
    if (pos != std::string::npos) return start + static_cast<off_t>(pos);
    limit = start;
  }
  return off_t{-1};
}

// True when the complete line ending just before `end` (its '\n') is a final line.
StatusOr<bool> LineIsFinal(const internal::AppendFile& file, off_t end) {
  TANDEM_ASSIGN_OR_RETURN(off_t previous, LastNewlineBefore(file, end));
  const off_t begin = previous + 1;
  TANDEM_ASSIGN_OR_RETURN(std::string line, file.ReadAt(begin, static_cast<size_t>(end - begin)));
  const Json json = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return false;  // not ours to judge; appending is still safe
  const auto it = json.find("final");
  return it != json.end() && it->is_boolean() && it->get<bool>();
}

// Cuts a torn last line (a crash mid-write) and refuses a file that already has its final line.
Status PrepareForAppend(internal::AppendFile& file) {
  TANDEM_ASSIGN_OR_RETURN(off_t size, file.Size());
  TANDEM_ASSIGN_OR_RETURN(off_t last_newline, LastNewlineBefore(file, size));
  const off_t complete = last_newline + 1;
  if (complete < size) TANDEM_RETURN_IF_ERROR(file.Truncate(complete));
  if (complete == 0) return Status::Ok();
  TANDEM_ASSIGN_OR_RETURN(bool is_final, LineIsFinal(file, last_newline));
  if (is_final) {
    return Status::FailedPrecondition(file.path() + " already ends with the final line");
  }
  return Status::Ok();
}

// The highest step of the step lines already in the file (-1: none): a resumed run that logs a
// step up to it trains that step again (a rollback), DESIGN §12 "replay".
StatusOr<int64_t> HighestLoggedStep(const internal::AppendFile& file) {
  TANDEM_ASSIGN_OR_RETURN(off_t size, file.Size());
  if (size == 0) return int64_t{-1};
  TANDEM_ASSIGN_OR_RETURN(std::string text, file.ReadAt(0, static_cast<size_t>(size)));
  int64_t highest = -1;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const Json json = Json::parse(text.substr(begin, end - begin), nullptr, false);
    if (json.is_object() && json.contains("samples_per_sec") && json["step"].is_number_integer())
      highest = std::max(highest, json["step"].get<int64_t>());
    begin = end + 1;
  }
  return highest;
}

std::string Dump(const Json& json) {
  // replace: a stray invalid UTF-8 byte must not throw out of the writer.
  return json.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

// Labels are unique (the config checks), so an object keyed by them loses nothing.
void AddTasks(const std::vector<TaskMetrics>& tasks, Json& line) {
  if (tasks.size() < 2) return;
  Json all = Json::object();
  for (const TaskMetrics& t : tasks) {
    Json task = {{"auc", t.auc}, {"logloss", t.logloss}};
    if (std::isfinite(t.teacher_auc)) task["teacher_auc"] = t.teacher_auc;
    all[t.label] = std::move(task);
  }
  line["tasks"] = std::move(all);
}

}  // namespace

StatusOr<std::unique_ptr<MetricsWriter>> MetricsWriter::Open(const std::string& path) {
  TANDEM_ASSIGN_OR_RETURN(
      internal::AppendFile file,
      internal::AppendFile::Open(path, internal::AppendFile::Mode::kCreateOrAppend));
  TANDEM_RETURN_IF_ERROR(PrepareForAppend(file));
  TANDEM_ASSIGN_OR_RETURN(const int64_t highest, HighestLoggedStep(file));
  auto writer = std::unique_ptr<MetricsWriter>(new MetricsWriter(std::move(file)));
  writer->replay_until_ = highest;
  return writer;
}

Status MetricsWriter::WriteLine(const std::string& json) {
  if (finished_) return Status::FailedPrecondition(path() + ": the final line is written");
  return file_.Append(json);
}

Status MetricsWriter::WriteHeld() {
  MutexLock lock(&mu_);
  return file_.WriteHeld();
}

std::string MetricsWriter::Held() const {
  MutexLock lock(&mu_);
  return file_.Describe("lines");
}

uint64_t MetricsWriter::dropped_lines() const {
  MutexLock lock(&mu_);
  return file_.dropped_records();
}

Status MetricsWriter::WriteStep(const StepMetrics& m) {
  Json json = {{"step", m.step},
               {"timeline", m.timeline},
               {"loss", m.loss},
               {"samples_per_sec", m.samples_per_sec},
               {"data_s", m.times.data_s},
               {"pull_s", m.times.pull_s},
               {"compute_s", m.times.compute_s},
               {"allreduce_s", m.times.allreduce_s},
               {"push_s", m.times.push_s},
               {"wait_s", m.times.wait_s},
               {"wall_time", WallTimeSeconds()}};
  if (m.replay || m.step <= replay_until_) json["replay"] = true;
  if (m.loss_scale > 0) {
    json["loss_scale"] = m.loss_scale;
    json["skipped_steps"] = m.skipped_steps;
  }
  if (m.bad_lines >= 0) json["bad_lines"] = m.bad_lines;
  MutexLock lock(&mu_);
  return WriteLine(Dump(json));
}

Status MetricsWriter::WriteEval(const EvalMetrics& m) {
  Json json = {{"step", m.step},
               {"timeline", m.timeline},
               {"auc", m.auc},
               {"logloss", m.logloss},
               {"wall_time", WallTimeSeconds()}};
  if (m.bad_lines >= 0) json["bad_lines"] = m.bad_lines;
  AddTasks(m.tasks, json);
  MutexLock lock(&mu_);
  return WriteLine(Dump(json));
}

Status MetricsWriter::WriteFinal(const FinalMetrics& m) {
  const Json json = {{"final", true},
                     {"auc", m.auc},
                     {"logloss", m.logloss},
                     {"model_checksum", m.model_checksum},
                     {"wall_time", WallTimeSeconds()}};
  Json line = json;
  if (std::isfinite(m.teacher_auc)) line["teacher_auc"] = m.teacher_auc;
  if (m.step >= 0) line["step"] = m.step;
  if (m.bad_lines >= 0) line["bad_lines"] = m.bad_lines;
  AddTasks(m.tasks, line);
  MutexLock lock(&mu_);
  if (finished_) return Status::FailedPrecondition(path() + ": the final line is written");
  TANDEM_RETURN_IF_ERROR(file_.AppendNow(Dump(line)));
  finished_ = true;
  return file_.file().Sync();
}

}  // namespace tandem::metrics
