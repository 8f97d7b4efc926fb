#include "worker/bad_line_report.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "common/durable_file.h"
#include "common/errno_status.h"
#include "common/log.h"  // fmt, through spdlog

namespace tandem::worker {

BadLineReporter::BadLineReporter(int64_t every_steps)
    : every_steps_(std::max<int64_t>(1, every_steps)) {}

std::string BadLineReporter::Line(int64_t count, const std::vector<std::string>& reports) const {
  std::string line =
      fmt::format("data: {} malformed line{} skipped so far", count, count == 1 ? "" : "s");
  if (logged_ > 0) line += fmt::format(" (+{})", count - logged_);
  if (!reports.empty()) {
    line += "; first: ";
    const size_t n = std::min(reports.size(), kShownBadReports);
    for (size_t i = 0; i < n; ++i) line += (i ? "; " : "") + reports[i];
  }
  return line;
}

std::optional<std::string> BadLineReporter::AfterStep(int64_t step, int64_t count,
                                                      const std::vector<std::string>& reports) {
  if (count <= logged_) return std::nullopt;
  // The first malformed lines are told at once; more of them wait for the interval.
  if (logged_ > 0 && step < last_step_ + every_steps_) return std::nullopt;
  std::string line = Line(count, reports);
  logged_ = count;
  last_step_ = step;
  return line;
}

std::optional<std::string> BadLineReporter::AtEnd(int64_t count,
                                                  const std::vector<std::string>& reports) {
  if (count <= logged_) return std::nullopt;
  std::string line = Line(count, reports);
  logged_ = count;
  return line;
}

std::string BadLinesPath(const std::string& output_dir, int rank) {
  return output_dir + "/bad_lines/worker-" + std::to_string(rank) + ".json";
}

Status WriteBadLinesFile(const std::string& path, const BadLinesFile& file) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return ErrnoToStatus(ec.value(), "creating the directory of " + path);
  nlohmann::json reports = nlohmann::json::array();
  for (size_t i = 0; i < file.reports.size() && i < kShownBadReports; ++i)
    reports.push_back(file.reports[i]);
  const nlohmann::json j = {{"rank", file.rank}, {"bad_lines", file.count}, {"reports", reports}};
  // Invalid UTF-8 in a report (it quotes a file name) is replaced, not thrown on.
  return WriteFileDurably(path,
                          j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

Status RemoveBadLinesFile(const std::string& path) {
  if (std::remove(path.c_str()) == 0 || errno == ENOENT) return Status::Ok();
  return ErrnoToStatus(errno, "removing " + path);
}

StatusOr<BadLinesFile> ReadBadLinesFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return ErrnoToStatus(errno, "opening " + path);
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("bad_lines") ||
      !j["bad_lines"].is_number_integer())
    return Status::DataLoss(path + ": not a bad-lines file");
  BadLinesFile f;
  f.rank = j.value("rank", 0);
  f.count = j["bad_lines"].get<int64_t>();
  if (j.contains("reports") && j["reports"].is_array())
    for (const auto& r : j["reports"])
      if (r.is_string()) f.reports.push_back(r.get<std::string>());
  return f;
}

std::vector<BadLinesFile> ReadAllBadLinesFiles(const std::string& output_dir) {
  std::vector<BadLinesFile> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(output_dir + "/bad_lines", ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("worker-") || !name.ends_with(".json")) continue;
    auto f = ReadBadLinesFile(e.path().string());
    if (f.ok()) files.push_back(std::move(f).value());
  }
  std::sort(files.begin(), files.end(),
            [](const BadLinesFile& a, const BadLinesFile& b) { return a.rank < b.rank; });
  return files;
}

}  // namespace tandem::worker
