#include "server/ps/restore_marker.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "common/durable_file.h"

namespace tandem::ps {

namespace fs = std::filesystem;

std::string RestorePointName(const RestoreMarker& m) {
  return "t" + std::to_string(m.timeline) + "-s" + std::to_string(m.step) + "-l" +
         std::to_string(m.replay_from_lsn);
}

std::vector<RestoreMarker> ListRestorePoints(const std::string& shard_dir) {
  std::vector<RestoreMarker> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(shard_dir + "/restore", ec)) {
    const std::string file = e.path().filename().string();
    if (!file.ends_with(".done")) continue;
    std::ifstream in(e.path());
    auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step")) continue;  // torn: incomplete
    RestoreMarker m;
    m.name = file.substr(0, file.size() - 5);
    m.timeline = j.value("timeline", 0ull);
    m.step = j.value("step", -1ll);
    m.replay_from_lsn = j.value("replay_from_lsn", 1ull);
    if (j.contains("partial") && j["partial"].is_array())
      for (const auto& pr : j["partial"])
        m.partial.emplace_back(pr[0].get<int64_t>(), pr[1].get<uint32_t>());
    if (fs::exists(shard_dir + "/restore/" + m.name)) out.push_back(m);
  }
  std::sort(out.begin(), out.end(), [](const RestoreMarker& a, const RestoreMarker& b) {
    return std::tie(a.timeline, a.step, a.replay_from_lsn) <
           std::tie(b.timeline, b.step, b.replay_from_lsn);
  });
  return out;
}

Status WriteRestoreMarker(const std::string& path, const RestoreMarker& m) {
  nlohmann::json j = {{"timeline", m.timeline},
                      {"step", m.step},
                      {"replay_from_lsn", m.replay_from_lsn},
                      {"partial", nlohmann::json::array()}};
  for (const auto& [step, rank] : m.partial) j["partial"].push_back({step, rank});
  return WriteFileDurably(path, j.dump() + "\n");
}

}  // namespace tandem::ps
