// configs/k8s/: every manifest parses; the TFJob has Chief, PS and Worker replicas with the
// restart policy that matches tandem's exit statuses; the exact TF_CONFIG the training operator
// writes for each replica resolves, with the ConfigMap's job config, to that replica's task and
// address; the StatefulSets agree with their Services and with the cluster their job config
// names. What the manifests cannot show here (a real cluster) is listed in configs/k8s/README.md.
#include "common/testing/k8s_manifests.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/config/cluster_spec.h"
#include "common/config/job_config.h"

namespace tandem::config {
namespace {

namespace fs = std::filesystem;
using testing::LoadYamlDocuments;
using testing::OfKind;

const std::string kDir = testing::K8sDir(TANDEM_SOURCE_DIR);
const std::string kTfJob = kDir + "/tfjob.yaml";
const std::string kStatefulSet = kDir + "/statefulset.yaml";
// Where every pod mounts its ConfigMap, and the entry script's arguments before the role.
constexpr char kConfigMount[] = "/etc/tandem";

std::vector<std::string> Strings(const YAML::Node& list) {
  std::vector<std::string> out;
  for (const YAML::Node& item : list) out.push_back(item.as<std::string>());
  return out;
}

bool StartsWith(const std::string& path, const std::string& dir) {
  return path.rfind(dir + "/", 0) == 0;
}

// The one document of `kind` (and `name`); a failure when there is not exactly one.
YAML::Node One(const std::vector<YAML::Node>& docs, const std::string& kind,
               const std::string& name = "") {
  std::vector<YAML::Node> found = OfKind(docs, kind, name);
  EXPECT_EQ(found.size(), 1u) << kind << " " << name;
  return found.empty() ? YAML::Node() : found.front();
}

// The container of a pod template named `name`.
YAML::Node Container(const YAML::Node& pod_template, const std::string& name) {
  for (const YAML::Node& c : pod_template["spec"]["containers"]) {
    if (c["name"].as<std::string>("") == name) return c;
  }
  ADD_FAILURE() << "no container named " << name;
  return YAML::Node();
}

// The ConfigMap's job.yaml through the project's loader (every rule of configs/README.md).
JobConfig LoadConfigMapJob(const YAML::Node& config_map, const std::string& file) {
  const std::string text = config_map["data"]["job.yaml"].as<std::string>("");
  EXPECT_FALSE(text.empty()) << file << ": the ConfigMap holds no job.yaml";
  StatusOr<JobConfig> job = ParseJobConfig(
      text, file + " ConfigMap " + config_map["metadata"]["name"].as<std::string>() + " job.yaml",
      {});
  EXPECT_TRUE(job.ok()) << job.status();
  return job.ok() ? *job : JobConfig{};
}

// The mount paths of a container's volumes, by volume name.
std::map<std::string, std::string> Mounts(const YAML::Node& container) {
  std::map<std::string, std::string> out;
  for (const YAML::Node& m : container["volumeMounts"]) {
    out[m["name"].as<std::string>()] = m["mountPath"].as<std::string>();
  }
  return out;
}

// Volume name -> what backs it ("configMap NAME", "pvc NAME").
std::map<std::string, std::string> Volumes(const YAML::Node& pod_template) {
  std::map<std::string, std::string> out;
  for (const YAML::Node& v : pod_template["spec"]["volumes"]) {
    const std::string name = v["name"].as<std::string>();
    if (v["configMap"]) out[name] = "configMap " + v["configMap"]["name"].as<std::string>();
    if (v["persistentVolumeClaim"])
      out[name] = "pvc " + v["persistentVolumeClaim"]["claimName"].as<std::string>();
  }
  return out;
}

// The mount path of the ReadWriteMany claim of the file (checkpoints must be reachable from every
// pod); "" when the container does not mount it.
std::string SharedMount(const std::vector<YAML::Node>& docs, const YAML::Node& pod_template,
                        const YAML::Node& container) {
  const std::vector<YAML::Node> claims = OfKind(docs, "PersistentVolumeClaim");
  std::set<std::string> rwx;
  for (const YAML::Node& c : claims) {
    if (c["spec"]["accessModes"][0].as<std::string>("") == "ReadWriteMany")
      rwx.insert(c["metadata"]["name"].as<std::string>());
  }
  const auto volumes = Volumes(pod_template);
  for (const auto& [volume, mount] : Mounts(container)) {
    auto it = volumes.find(volume);
    if (it != volumes.end() && it->second.rfind("pvc ", 0) == 0 && rwx.count(it->second.substr(4)))
      return mount;
  }
  return "";
}

// The container mounts the file's ConfigMap at /etc/tandem and runs
// `/bin/sh /etc/tandem/entry.sh MODE tandem ROLE --config /etc/tandem/job.yaml`.
void ExpectEntryCommand(const YAML::Node& pod_template, const YAML::Node& container,
                        const std::string& config_map, const std::string& mode,
                        const std::string& role) {
  const std::string conf = std::string(kConfigMount);
  EXPECT_EQ(Strings(container["command"]),
            (std::vector<std::string>{"/bin/sh", conf + "/entry.sh", mode, "tandem", role,
                                      "--config", conf + "/job.yaml"}))
      << role;
  EXPECT_FALSE(container["args"]) << role << ": args would follow the command";
  const auto mounts = Mounts(container);
  const auto volumes = Volumes(pod_template);
  bool mounted = false;
  for (const auto& [volume, path] : mounts) {
    if (path == conf && volumes.count(volume) && volumes.at(volume) == "configMap " + config_map)
      mounted = true;
  }
  EXPECT_TRUE(mounted) << role << ": ConfigMap " << config_map << " is not mounted at " << conf;
}

// The labels of a pod template contain every pair of `selector`.
void ExpectSelects(const YAML::Node& selector, const YAML::Node& labels, const std::string& what) {
  ASSERT_TRUE(selector.IsMap()) << what;
  for (const auto& kv : selector) {
    EXPECT_EQ(labels[kv.first.as<std::string>()].as<std::string>(""), kv.second.as<std::string>())
        << what << " selects " << kv.first.as<std::string>();
  }
}

TEST(K8sManifestsTest, EveryManifestParses) {
  std::set<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(kDir)) {
    if (e.path().extension() != ".yaml") continue;
    names.insert(e.path().filename().string());
    std::vector<YAML::Node> docs;
    try {
      docs = LoadYamlDocuments(e.path().string());
    } catch (const YAML::Exception& ex) {
      ADD_FAILURE() << e.path() << ": " << ex.what();
      continue;
    }
    EXPECT_FALSE(docs.empty()) << e.path();
    for (const YAML::Node& doc : docs) {
      ASSERT_TRUE(doc.IsMap()) << e.path();
      EXPECT_FALSE(doc["apiVersion"].as<std::string>("").empty()) << e.path();
      EXPECT_FALSE(doc["kind"].as<std::string>("").empty()) << e.path();
      EXPECT_FALSE(doc["metadata"]["name"].as<std::string>("").empty()) << e.path();
    }
  }
  EXPECT_EQ(names, (std::set<std::string>{"tfjob.yaml", "statefulset.yaml"}))
      << "a new manifest needs its own checks here";
}

TEST(K8sManifestsTest, TfJobHasChiefPsWorkerWithExitCodeRestarts) {
  const auto docs = LoadYamlDocuments(kTfJob);
  const YAML::Node tfjob = One(docs, "TFJob");
  ASSERT_TRUE(tfjob);
  EXPECT_EQ(tfjob["apiVersion"].as<std::string>(), "kubeflow.org/v1");
  // A TFJob failed by a 75 (or a 2 or 3) must not leave the other daemons running.
  EXPECT_EQ(tfjob["spec"]["runPolicy"]["cleanPodPolicy"].as<std::string>(""), "Running");
  const YAML::Node specs = tfjob["spec"]["tfReplicaSpecs"];
  std::set<std::string> types;
  for (const auto& kv : specs) types.insert(kv.first.as<std::string>());
  EXPECT_EQ(types, (std::set<std::string>{"Chief", "PS", "Worker"}));
  EXPECT_EQ(specs["Chief"]["replicas"].as<int>(), 1);
  EXPECT_EQ(specs["PS"]["replicas"].as<int>(), 2);
  EXPECT_EQ(specs["Worker"]["replicas"].as<int>(), 2);
  const YAML::Node config_map = One(docs, "ConfigMap");
  const std::string config_map_name = config_map["metadata"]["name"].as<std::string>();
  for (const auto& kv : specs) {
    const std::string type = kv.first.as<std::string>();
    const YAML::Node spec = kv.second;
    // ExitCode: the operator re-creates a pod that failed with 128-255 and fails the job on
    // 1-127; the entry script maps tandem's 1 and 76 into 128-255 (tests/cluster/k8s_test.cc).
    EXPECT_EQ(spec["restartPolicy"].as<std::string>(""), "ExitCode") << type;
    EXPECT_FALSE(spec["template"]["spec"]["restartPolicy"])
        << type << ": the operator sets the pod's policy from the replica's";
    // TF_CONFIG goes only into a container named "tensorflow", and only its exit status counts.
    const YAML::Node container = Container(spec["template"], "tensorflow");
    ASSERT_TRUE(container) << type;
    std::string role = type == "PS" ? "ps" : type == "Chief" ? "chief" : "worker";
    ExpectEntryCommand(spec["template"], container, config_map_name, "tfjob", role);
    ASSERT_TRUE(container["ports"].IsSequence()) << type;
    EXPECT_EQ(container["ports"][0]["name"].as<std::string>(""), "tfjob-port") << type;
    EXPECT_EQ(container["ports"][0]["containerPort"].as<int>(), 2222) << type;
    EXPECT_EQ(spec["template"]["spec"]["terminationGracePeriodSeconds"].as<int>(0), 120) << type;
    // Everything a re-created pod needs again is on the shared claim.
    const std::string shared = SharedMount(docs, spec["template"], container);
    EXPECT_EQ(shared, "/shared") << type;
    bool markers = false;
    for (const YAML::Node& env : container["env"]) {
      if (env["name"].as<std::string>() == "TANDEM_RESTART_MARKERS")
        markers = StartsWith(env["value"].as<std::string>(), shared);
    }
    EXPECT_TRUE(markers) << type << ": TANDEM_RESTART_MARKERS must be on the shared volume";
    const YAML::Node pdb = One(docs, "PodDisruptionBudget");
    ExpectSelects(pdb["spec"]["selector"]["matchLabels"], spec["template"]["metadata"]["labels"],
                  "PodDisruptionBudget of " + type);
  }
}

TEST(K8sManifestsTest, TfJobConfigMapHoldsAJobWhoseStateIsShared) {
  const auto docs = LoadYamlDocuments(kTfJob);
  const JobConfig job = LoadConfigMapJob(One(docs, "ConfigMap"), kTfJob);
  // No cluster section: the defaults, which TF_CONFIG replaces.
  StatusOr<JobConfig> empty = ParseJobConfig("", "empty", {});
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(job.cluster, empty->cluster);
  // The operator may re-create any pod elsewhere: checkpoints, outputs and shard data on the
  // ReadWriteMany claim every replica mounts at /shared.
  EXPECT_TRUE(StartsWith(job.checkpoint.dir, "/shared")) << job.checkpoint.dir;
  EXPECT_TRUE(StartsWith(job.output.dir, "/shared")) << job.output.dir;
  EXPECT_TRUE(StartsWith(job.ps.data_dir, "/shared")) << job.ps.data_dir;
  EXPECT_EQ(job.collective.iface, "eth0");
  // A pod re-created on another node must find every acknowledged push in the shard's log.
  EXPECT_EQ(job.ps.push_log_durability, "machine");
  const YAML::Node claim = One(docs, "PersistentVolumeClaim");
  EXPECT_EQ(Strings(claim["spec"]["accessModes"]), std::vector<std::string>{"ReadWriteMany"});
}

TEST(K8sManifestsTest, TheOperatorsTfConfigResolvesEveryReplica) {
  const auto docs = LoadYamlDocuments(kTfJob);
  const YAML::Node tfjob = One(docs, "TFJob");
  ASSERT_TRUE(tfjob);
  const JobConfig loaded = LoadConfigMapJob(One(docs, "ConfigMap"), kTfJob);
  const std::string ns = testing::NamespaceOf(tfjob);
  EXPECT_EQ(ns, "default") << "the manifest names no namespace: kubectl apply -n picks it";
  // Byte for byte what genTFConfigJSONStr writes for ps 0 of this TFJob in namespace "default".
  EXPECT_EQ(testing::OperatorTfConfig(testing::OperatorCluster(tfjob, ns), "ps", 0),
            R"({"cluster":{"chief":["tandem-chief-0.default.svc:2222"],)"
            R"("ps":["tandem-ps-0.default.svc:2222","tandem-ps-1.default.svc:2222"],)"
            R"("worker":["tandem-worker-0.default.svc:2222","tandem-worker-1.default.svc:2222"]},)"
            R"("task":{"type":"ps","index":0},"environment":"cloud"})");
  // Without and with the operator's CUSTOM_CLUSTER_DOMAIN, in the default namespace and another.
  for (const std::string& namespace_name : {ns, std::string("training")}) {
    for (const std::string& domain : {std::string(), std::string("cluster.local")}) {
      const auto cluster = testing::OperatorCluster(tfjob, namespace_name, domain);
      ASSERT_EQ(cluster.size(), 3u);
      const std::string suffix =
          "." + namespace_name + ".svc" + (domain.empty() ? std::string() : "." + domain) + ":2222";
      for (const auto& [type, addresses] : cluster) {
        const Role role = type == "chief" ? Role::kChief : type == "ps" ? Role::kPs : Role::kWorker;
        for (int i = 0; i < static_cast<int>(addresses.size()); ++i) {
          const std::string tf = testing::OperatorTfConfig(cluster, type, i);
          JobConfig job = loaded;
          StatusOr<ResolvedTask> r = ResolveTask(std::nullopt, tf, "job.yaml", &job);
          ASSERT_TRUE(r.ok()) << tf << ": " << r.status();
          EXPECT_EQ(r->task, (TaskId{role, i})) << tf;
          EXPECT_EQ(r->address, "tandem-" + type + "-" + std::to_string(i) + suffix) << tf;
          EXPECT_EQ(r->cluster_from, "TF_CONFIG");
          EXPECT_EQ(r->task_from, "TF_CONFIG");
          EXPECT_EQ(job.cluster.chief, cluster.at("chief"));
          EXPECT_EQ(job.cluster.ps, cluster.at("ps"));
          EXPECT_EQ(job.cluster.workers, cluster.at("worker"));
          // The daemon cannot bind a DNS name: it binds every interface at the port and tells
          // the chief and its peers the name.
          const BindAddress bind = BindAddressFor(r->address);
          EXPECT_EQ(bind.bind, "0.0.0.0:2222") << r->address;
          EXPECT_EQ(bind.advertise, r->address.substr(0, r->address.rfind(':')));
          // The entry script gives no --task: a --task would have to agree anyway.
          job = loaded;
          EXPECT_TRUE(ResolveTask(r->task.ToString(), tf, "job.yaml", &job).ok());
        }
      }
    }
  }
}

// What the entry script does in a StatefulSet pod: "<statefulset>-<N>" -> "ROLE:N".
std::string TaskFromHostName(const std::string& role, const std::string& host) {
  return role + ":" + host.substr(host.rfind('-') + 1);
}

TEST(K8sManifestsTest, StatefulSetsMatchTheirServicesAndTheJobsCluster) {
  const auto docs = LoadYamlDocuments(kStatefulSet);
  const YAML::Node config_map = One(docs, "ConfigMap");
  const JobConfig loaded = LoadConfigMapJob(config_map, kStatefulSet);
  const std::string config_map_name = config_map["metadata"]["name"].as<std::string>();
  EXPECT_EQ(OfKind(docs, "StatefulSet").size(), 3u);
  const std::map<std::string, const std::vector<std::string>*> lists = {
      {"chief", &loaded.cluster.chief},
      {"ps", &loaded.cluster.ps},
      {"worker", &loaded.cluster.workers}};
  for (const auto& [role, list] : lists) {
    const std::string name = "tandem-sts-" + role;
    const YAML::Node sts = One(docs, "StatefulSet", name);
    ASSERT_TRUE(sts) << name;
    const YAML::Node pod = sts["spec"]["template"];
    EXPECT_EQ(pod["spec"]["restartPolicy"].as<std::string>(""), "Always")
        << name << ": a StatefulSet takes no other; the entry script keeps 0, 2, 3, 75 down";
    ExpectSelects(sts["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"], name);
    const YAML::Node container = Container(pod, "tandem");
    ASSERT_TRUE(container) << name;
    ExpectEntryCommand(pod, container, config_map_name, "statefulset", role);
    // Parked (tandem exited and is not restarted): not ready.
    EXPECT_EQ(Strings(container["readinessProbe"]["exec"]["command"]),
              (std::vector<std::string>{"/bin/sh", "-c", "test ! -e /tmp/tandem-parked"}))
        << name;
    const int port = container["ports"][0]["containerPort"].as<int>();
    // The governing Service: headless, publishing pods before they are ready, selecting them.
    const std::string service_name = sts["spec"]["serviceName"].as<std::string>("");
    EXPECT_EQ(service_name, name);
    const YAML::Node service = One(docs, "Service", service_name);
    ASSERT_TRUE(service) << name;
    EXPECT_EQ(service["spec"]["clusterIP"].as<std::string>(""), "None") << name;
    EXPECT_TRUE(service["spec"]["publishNotReadyAddresses"].as<bool>(false)) << name;
    ExpectSelects(service["spec"]["selector"], pod["metadata"]["labels"], service_name);
    EXPECT_EQ(service["spec"]["ports"][0]["port"].as<int>(), port) << name;
    // Checkpoints on the ReadWriteMany claim.
    const std::string shared = SharedMount(docs, pod, container);
    EXPECT_EQ(shared, "/shared") << name;
    EXPECT_TRUE(StartsWith(loaded.checkpoint.dir, shared)) << loaded.checkpoint.dir;
    EXPECT_TRUE(StartsWith(loaded.output.dir, shared)) << loaded.output.dir;
    // The job's cluster lists exactly the StatefulSet's pods, by their Service's DNS names.
    const int replicas = sts["spec"]["replicas"].as<int>();
    std::vector<std::string> expected;
    for (int i = 0; i < replicas; ++i)
      expected.push_back(name + "-" + std::to_string(i) + "." + service_name + ":" +
                         std::to_string(port));
    EXPECT_EQ(*list, expected) << name << ": replicas and the job's cluster disagree";
    // Each pod's task, as the entry script takes it from the host name, resolves to its name.
    for (int i = 0; i < replicas; ++i) {
      const std::string host = name + "-" + std::to_string(i);
      JobConfig job = loaded;
      StatusOr<ResolvedTask> r =
          ResolveTask(TaskFromHostName(role, host), std::nullopt, "job.yaml", &job);
      ASSERT_TRUE(r.ok()) << host << ": " << r.status();
      EXPECT_EQ(r->address, host + "." + service_name + ":" + std::to_string(port));
      EXPECT_EQ(r->cluster_from, "config job.yaml");
      const BindAddress bind = BindAddressFor(r->address);
      EXPECT_EQ(bind.bind, "0.0.0.0:" + std::to_string(port));
      EXPECT_EQ(bind.advertise, host + "." + service_name);
    }
    const YAML::Node pdb = One(docs, "PodDisruptionBudget");
    ExpectSelects(pdb["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"],
                  "PodDisruptionBudget of " + name);
  }
  EXPECT_EQ(loaded.ps.push_log_durability, "machine");
  // Each PS shard keeps its data on a volume of its own (volumeClaimTemplates).
  const YAML::Node ps = One(docs, "StatefulSet", "tandem-sts-ps");
  ASSERT_TRUE(ps);
  const YAML::Node claim = ps["spec"]["volumeClaimTemplates"][0];
  ASSERT_TRUE(claim);
  EXPECT_EQ(Strings(claim["spec"]["accessModes"]), std::vector<std::string>{"ReadWriteOnce"});
  const auto mounts = Mounts(Container(ps["spec"]["template"], "tandem"));
  const std::string claim_name = claim["metadata"]["name"].as<std::string>();
  ASSERT_TRUE(mounts.count(claim_name));
  EXPECT_TRUE(StartsWith(loaded.ps.data_dir, mounts.at(claim_name))) << loaded.ps.data_dir;
}

TEST(K8sManifestsTest, BothManifestsCarryTheSameEntryScript) {
  const std::string tfjob =
      One(LoadYamlDocuments(kTfJob), "ConfigMap")["data"]["entry.sh"].as<std::string>("");
  const std::string sts =
      One(LoadYamlDocuments(kStatefulSet), "ConfigMap")["data"]["entry.sh"].as<std::string>("");
  EXPECT_FALSE(tfjob.empty());
  EXPECT_EQ(tfjob, sts) << "the two copies of entry.sh drifted apart";
  EXPECT_EQ(tfjob.rfind("#!/bin/sh\n", 0), 0u);
}

}  // namespace
}  // namespace tandem::config
