// The Kubernetes manifests of configs/k8s/ as tests read them: the documents of a file, the files
// a ConfigMap holds, and the TF_CONFIG that Kubeflow's training operator writes into a TFJob
// replica's pod.
#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <string>
#include <vector>

namespace tandem::testing {

// configs/k8s/ under `source_dir`.
std::string K8sDir(const std::string& source_dir);

// Every document of a (multi-document) YAML file, in order; throws YAML::Exception.
std::vector<YAML::Node> LoadYamlDocuments(const std::string& path);

// The documents of `kind` (and `name`, when not empty).
std::vector<YAML::Node> OfKind(const std::vector<YAML::Node>& docs, const std::string& kind,
                               const std::string& name = "");

// The namespace an object lands in: metadata.namespace, else "default" (`kubectl apply`
// without -n).
std::string NamespaceOf(const YAML::Node& object);

// The cluster the training operator puts into TF_CONFIG for `tfjob` (a kubeflow.org/v1 TFJob),
// as its genClusterSpec builds it (pkg/controller.v1/tensorflow/tensorflow.go): per replica
// type, the type in lower case -> "<job>-<type>-<i>.<namespace>.svc[.<domain>]:<port>" for
// i < replicas (1 when unset), the port that of the container named "tensorflow" named
// "tfjob-port", else 2222. `cluster_domain` is the operator's CUSTOM_CLUSTER_DOMAIN ("" unset).
std::map<std::string, std::vector<std::string>> OperatorCluster(
    const YAML::Node& tfjob, const std::string& ns, const std::string& cluster_domain = "");

// TF_CONFIG byte for byte as the operator writes it (genTFConfigJSONStr: Go's json.Marshal of
// {Cluster, Task{Type, Index}, Environment: "cloud"}: compact, struct fields in declaration
// order, map keys sorted).
std::string OperatorTfConfig(const std::map<std::string, std::vector<std::string>>& cluster,
                             const std::string& type, int index);

}  // namespace tandem::testing
