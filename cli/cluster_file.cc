#include "cli/cluster_file.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/daemon/daemon.h"

namespace tandem::cli {

using daemon::WriteFileAtomically;

Status WriteClusterFile(const std::string& path, const ClusterFile& file) {
  nlohmann::json j;
  j["job_id"] = file.job_id;
  if (!file.security_keys.empty()) j["security_keys"] = file.security_keys;
  j["members"] = nlohmann::json::array();
  for (const auto& m : file.members) {
    nlohmann::json e = {{"task", m.task}, {"endpoint", m.endpoint}, {"pid", m.pid}};
    if (!m.netns.empty()) e["netns"] = m.netns;
    if (!m.link.empty()) e["link"] = m.link;
    j["members"].push_back(std::move(e));
  }
  if (!WriteFileAtomically(path, j.dump(2) + "\n"))
    return Status::Unavailable("cannot write " + path);
  return Status::Ok();
}

StatusOr<ClusterFile> ReadClusterFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read " + path);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("members") || !j["members"].is_array())
    return Status::DataLoss(path + ": not a cluster file");
  ClusterFile f;
  f.job_id = j.value("job_id", "");
  f.security_keys = j.value("security_keys", "");
  for (const auto& m : j["members"]) {
    if (!m.is_object()) return Status::DataLoss(path + ": bad member entry");
    f.members.push_back({m.value("task", ""), m.value("endpoint", ""), m.value("pid", 0),
                         m.value("netns", ""), m.value("link", "")});
  }
  return f;
}

}  // namespace tandem::cli
