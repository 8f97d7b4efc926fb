#include "common/testing/k8s_manifests.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace tandem::testing {
namespace {

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// A JSON string. The operator's names are DNS labels, ports and the fixed task types: nothing
// Go's encoder would escape (it escapes <, > and & too), which this refuses rather than guesses.
std::string Quote(const std::string& s) {
  for (char c : s) {
    if (c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' ||
        static_cast<unsigned char>(c) < 0x20) {
      throw std::invalid_argument("OperatorTfConfig: a character Go would escape in " + s);
    }
  }
  return "\"" + s + "\"";
}

// genClusterSpec's GetPortFromTFJob: the "tensorflow" container's port named "tfjob-port".
int ReplicaPort(const YAML::Node& replica_spec) {
  for (const YAML::Node& container : replica_spec["template"]["spec"]["containers"]) {
    if (container["name"].as<std::string>("") != "tensorflow") continue;
    for (const YAML::Node& port : container["ports"]) {
      if (port["name"].as<std::string>("") == "tfjob-port") return port["containerPort"].as<int>();
    }
  }
  return 2222;  // TFJobDefaultPort
}

}  // namespace

std::string K8sDir(const std::string& source_dir) { return source_dir + "/configs/k8s"; }

std::vector<YAML::Node> LoadYamlDocuments(const std::string& path) {
  return YAML::LoadAllFromFile(path);
}

std::vector<YAML::Node> OfKind(const std::vector<YAML::Node>& docs, const std::string& kind,
                               const std::string& name) {
  std::vector<YAML::Node> out;
  for (const YAML::Node& doc : docs) {
    if (!doc.IsMap() || doc["kind"].as<std::string>("") != kind) continue;
    if (!name.empty() && doc["metadata"]["name"].as<std::string>("") != name) continue;
    out.push_back(doc);
  }
  return out;
}

std::string NamespaceOf(const YAML::Node& object) {
  return object["metadata"]["namespace"].as<std::string>("default");
}

std::map<std::string, std::vector<std::string>> OperatorCluster(const YAML::Node& tfjob,
                                                                const std::string& ns,
                                                                const std::string& cluster_domain) {
  const std::string job = tfjob["metadata"]["name"].as<std::string>();
  std::map<std::string, std::vector<std::string>> cluster;
  for (const auto& entry : tfjob["spec"]["tfReplicaSpecs"]) {
    const std::string type = Lower(entry.first.as<std::string>());
    const YAML::Node& spec = entry.second;
    const int replicas = spec["replicas"] ? spec["replicas"].as<int>() : 1;
    const int port = ReplicaPort(spec);
    std::vector<std::string>& addresses = cluster[type];
    for (int i = 0; i < replicas; ++i) {
      // GenGeneralName: "<job>-<type>-<index>" with every "/" replaced by "-".
      std::string host = job + "-" + type + "-" + std::to_string(i);
      std::replace(host.begin(), host.end(), '/', '-');
      std::string service = host + "." + ns + ".svc";
      if (!cluster_domain.empty()) service += "." + cluster_domain;
      addresses.push_back(service + ":" + std::to_string(port));
    }
  }
  return cluster;
}

std::string OperatorTfConfig(const std::map<std::string, std::vector<std::string>>& cluster,
                             const std::string& type, int index) {
  std::string json = "{\"cluster\":{";
  bool first_type = true;
  for (const auto& [name, addresses] : cluster) {  // std::map: sorted, as Go sorts map keys
    if (!first_type) json += ",";
    first_type = false;
    json += Quote(name) + ":[";
    for (size_t i = 0; i < addresses.size(); ++i) {
      if (i > 0) json += ",";
      json += Quote(addresses[i]);
    }
    json += "]";
  }
  json += "},\"task\":{\"type\":" + Quote(type) + ",\"index\":" + std::to_string(index) +
          "},\"environment\":\"cloud\"}";
  return json;
}

}  // namespace tandem::testing
