// Loads, validates and prints the job config (DESIGN §12). Every key is one row of a schema
// table that binds its dotted path to a struct field and a rule; the YAML walker, `--set`,
// ToYaml() and ComputationHash() are all driven by those two tables (job keys, table keys).
#include "common/config/job_config.h"

#include <yaml-cpp/yaml.h>
// Inline xxHash so that tandem_common needs no extra link dependency for one hash call.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <type_traits>
#include <variant>

#include "common/config/yaml_scalars.h"

namespace tandem::config {
namespace {

// The scalar readers and the Rule type live in yaml_scalars.h.
using internal::Above;
using internal::Addresses;
using internal::Any;
using internal::AtLeast;
using internal::CheckCount;
using internal::Describe;
using internal::FromBelow;
using internal::Layers;
using internal::NonEmpty;
using internal::Num;
using internal::OneOf;
using internal::Quote;
using internal::ReadValue;
using internal::Rule;
using internal::Within;

// ---------------------------------------------------------------------------------------------
// Schema

// A typed pointer to the field a key is bound to. The alternative held is the key's type.
using FieldRef =
    std::variant<int64_t*, uint64_t*, double*, bool*, std::string*, std::vector<int64_t>*,
                 std::vector<double>*, std::vector<std::string>*>;

// One key: its path (relative to `tables.<name>` for table keys), its field and its rule.
template <typename Root>
struct KeySpec {
  std::string_view path;
  FieldRef (*bind)(Root&);
  Rule rule;
};

// The JobConfig member that holds a section struct, found by the section's type.
template <typename Section>
Section& SectionOf(JobConfig& c) {
  if constexpr (std::is_same_v<Section, ClusterConfig>) return c.cluster;
  if constexpr (std::is_same_v<Section, ModelConfig>) return c.model;
  if constexpr (std::is_same_v<Section, DataConfig>) return c.data;
  if constexpr (std::is_same_v<Section, TrainConfig>) return c.train;
  if constexpr (std::is_same_v<Section, PsConfig>) return c.ps;
  if constexpr (std::is_same_v<Section, ChiefConfig>) return c.chief;
  if constexpr (std::is_same_v<Section, CollectiveConfig>) return c.collective;
  if constexpr (std::is_same_v<Section, RecoveryConfig>) return c.recovery;
  if constexpr (std::is_same_v<Section, CheckpointConfig>) return c.checkpoint;
  if constexpr (std::is_same_v<Section, OutputConfig>) return c.output;
  if constexpr (std::is_same_v<Section, SecurityConfig>) return c.security;
  if constexpr (std::is_same_v<Section, MetricsConfig>) return c.metrics;
}

template <typename Class, typename T>
Class ClassOf(T Class::*);

// Binds a key to `&Section::field`; the section is found from the member pointer's class.
template <auto kField, typename Root>
FieldRef Bind(Root& root) {
  using Section = decltype(ClassOf(kField));
  if constexpr (std::is_same_v<Section, Root>) {
    return &(root.*kField);
  } else {
    return &(SectionOf<Section>(root).*kField);
  }
}

using JobKey = KeySpec<JobConfig>;
using TableKey = KeySpec<TableConfig>;
using FeatureKey = KeySpec<FeatureConfig>;

constexpr Rule Labels() {
  Rule r = NonEmpty();
  r.min_items = 1;
  r.max_items = 16;
  return r;
}
constexpr Rule Weights() {
  Rule r = AtLeast(0);
  r.max_items = 16;
  return r;
}

// Every key outside `tables`. Adding a key is one row here (plus its field and README line).
// The order is the order of ToYaml(); keys of one section must stay together.
constexpr JobKey kJobKeys[] = {
    {"cluster.chief", Bind<&ClusterConfig::chief>, Addresses(1, 1)},
    {"cluster.ps", Bind<&ClusterConfig::ps>, Addresses(1, 4096)},
    {"cluster.workers", Bind<&ClusterConfig::workers>, Addresses(1, 4096)},
    {"model.embedding_dim", Bind<&ModelConfig::embedding_dim>, Within(1, 4096)},
    {"model.bottom_mlp", Bind<&ModelConfig::bottom_mlp>, Layers()},
    {"model.top_mlp", Bind<&ModelConfig::top_mlp>, Layers()},
    {"model.interaction", Bind<&ModelConfig::interaction>, OneOf("dot|concat")},
    {"model.type", Bind<&ModelConfig::type>, OneOf("dlrm|dcn_v2|deepfm|wide_deep|mmoe")},
    {"model.dcn.cross_layers", Bind<&ModelConfig::dcn_cross_layers>, Within(1, 64)},
    {"model.dcn.low_rank", Bind<&ModelConfig::dcn_low_rank>, Within(0, 4096)},
    {"model.dcn.structure", Bind<&ModelConfig::dcn_structure>, OneOf("stacked|parallel")},
    {"model.mmoe.num_experts", Bind<&ModelConfig::mmoe_num_experts>, Within(1, 64)},
    {"model.mmoe.expert_mlp", Bind<&ModelConfig::mmoe_expert_mlp>, Layers()},
    {"model.wide.optimizer", Bind<&ModelConfig::wide_optimizer>,
     OneOf("sgd|adagrad|rowwise_adagrad|adam|ftrl")},
    {"data.format", Bind<&DataConfig::format>, OneOf("criteo|binary|synthetic|text")},
    {"data.train", Bind<&DataConfig::train>, Any()},
    {"data.eval", Bind<&DataConfig::eval>, Any()},
    {"data.max_bad_fraction", Bind<&DataConfig::max_bad_fraction>, Within(0, 1)},
    {"data.memory_bytes", Bind<&DataConfig::memory_bytes>, AtLeast(0)},
    {"data.num_dense", Bind<&DataConfig::num_dense>, Within(0, 4096)},
    {"data.num_categorical", Bind<&DataConfig::num_categorical>, Within(1, 4096)},
    {"data.labels", Bind<&DataConfig::labels>, Labels()},
    {"data.text.separator", Bind<&DataConfig::text_separator>, NonEmpty()},
    {"data.text.list_separator", Bind<&DataConfig::text_list_separator>, NonEmpty()},
    {"data.text.columns", Bind<&DataConfig::text_columns>, NonEmpty()},
    {"data.synthetic.vocab", Bind<&DataConfig::synthetic_vocab>, AtLeast(1)},
    {"data.synthetic.zipf", Bind<&DataConfig::synthetic_zipf>, Above(0)},
    {"data.synthetic.teacher", Bind<&DataConfig::synthetic_teacher>, OneOf("fm|linear|cross")},
    {"data.synthetic.task_correlation", Bind<&DataConfig::synthetic_task_correlation>,
     Within(0, 1)},
    {"data.synthetic.eval_rows", Bind<&DataConfig::synthetic_eval_rows>, AtLeast(0)},
    {"train.steps", Bind<&TrainConfig::steps>, AtLeast(1)},
    {"train.batch_size", Bind<&TrainConfig::batch_size>, AtLeast(1)},
    {"train.embedding_staleness", Bind<&TrainConfig::embedding_staleness>, AtLeast(0)},
    {"train.seed", Bind<&TrainConfig::seed>, Any()},
    {"train.device", Bind<&TrainConfig::device>, OneOf("cpu|cuda")},
    {"train.precision", Bind<&TrainConfig::precision>, OneOf("fp32|bf16|fp16")},
    {"train.deterministic", Bind<&TrainConfig::deterministic>, OneOf("strict|relaxed")},
    {"train.dense_optimizer", Bind<&TrainConfig::dense_optimizer>, OneOf("sgd|adam|adamw|adagrad")},
    {"train.dense_lr", Bind<&TrainConfig::dense_lr>, Above(0)},
    {"train.dense_momentum", Bind<&TrainConfig::dense_momentum>, FromBelow(0, 1)},
    {"train.dense_weight_decay", Bind<&TrainConfig::dense_weight_decay>, AtLeast(0)},
    {"train.lr_warmup_steps", Bind<&TrainConfig::lr_warmup_steps>, AtLeast(0)},
    {"train.lr_decay", Bind<&TrainConfig::lr_decay>, OneOf("none|step|cosine")},
    {"train.lr_decay_steps", Bind<&TrainConfig::lr_decay_steps>, AtLeast(1)},
    {"train.lr_decay_rate", Bind<&TrainConfig::lr_decay_rate>, Within(0, 1, /*lo_open=*/true)},
    {"train.eval_every_steps", Bind<&TrainConfig::eval_every_steps>, AtLeast(0)},
    {"train.log_every_steps", Bind<&TrainConfig::log_every_steps>, AtLeast(1)},
    {"train.threads", Bind<&TrainConfig::threads>, Within(1, 1024)},
    {"train.loss_weights", Bind<&TrainConfig::loss_weights>, Weights()},
    {"ps.data_dir", Bind<&PsConfig::data_dir>, NonEmpty()},
    {"ps.cache_bytes", Bind<&PsConfig::cache_bytes>, Above(0)},
    {"ps.max_dirty_bytes", Bind<&PsConfig::max_dirty_bytes>, AtLeast(-1)},
    {"ps.storage", Bind<&PsConfig::storage>, OneOf("rocksdb|memory")},
    {"ps.push_log.durability", Bind<&PsConfig::push_log_durability>, OneOf("process|machine")},
    {"ps.push_log.group_ms", Bind<&PsConfig::push_log_group_ms>, AtLeast(1)},
    {"ps.push_log.io", Bind<&PsConfig::push_log_io>, OneOf("direct|buffered")},
    {"ps.push_log.max_bytes", Bind<&PsConfig::push_log_max_bytes>, Above(0)},
    {"ps.restore_point_every_bytes", Bind<&PsConfig::restore_point_every_bytes>, AtLeast(0)},
    {"ps.max_buffered_bytes", Bind<&PsConfig::max_buffered_bytes>, Above(0)},
    {"ps.wire_precision", Bind<&PsConfig::wire_precision>, OneOf("fp32|bf16|fp16")},
    {"ps.nan_policy", Bind<&PsConfig::nan_policy>, OneOf("reject|skip_rows")},
    {"ps.watchdog_ms", Bind<&PsConfig::watchdog_ms>, AtLeast(100)},
    {"ps.handler_threads", Bind<&PsConfig::handler_threads>, Within(1, 1024)},
    {"chief.heartbeat_interval_ms", Bind<&ChiefConfig::heartbeat_interval_ms>, AtLeast(10)},
    {"chief.heartbeat_timeout_ms", Bind<&ChiefConfig::heartbeat_timeout_ms>, AtLeast(1)},
    {"collective.timeout_ms", Bind<&CollectiveConfig::timeout_ms>, AtLeast(1)},
    {"collective.iface", Bind<&CollectiveConfig::iface>, NonEmpty()},
    {"collective.abort_grace_ms", Bind<&CollectiveConfig::abort_grace_ms>, AtLeast(1)},
    {"recovery.max_wait_s", Bind<&RecoveryConfig::max_wait_s>, AtLeast(1)},
    {"recovery.max_rollbacks", Bind<&RecoveryConfig::max_rollbacks>, AtLeast(0)},
    {"checkpoint.dir", Bind<&CheckpointConfig::dir>, NonEmpty()},
    {"checkpoint.every_steps", Bind<&CheckpointConfig::every_steps>, AtLeast(0)},
    {"checkpoint.every_seconds", Bind<&CheckpointConfig::every_seconds>, AtLeast(0)},
    {"checkpoint.keep", Bind<&CheckpointConfig::keep>, AtLeast(2)},
    {"checkpoint.resume", Bind<&CheckpointConfig::resume>, OneOf("auto|never|required")},
    {"checkpoint.final_part", Bind<&CheckpointConfig::final_part>, OneOf("cheaper|delta|full")},
    {"output.dir", Bind<&OutputConfig::dir>, NonEmpty()},
    {"security.keys", Bind<&SecurityConfig::keys>, Any()},
    {"security.max_connections", Bind<&SecurityConfig::max_connections>, Within(1, 1000000)},
    {"security.max_in_flight_per_client", Bind<&SecurityConfig::max_in_flight_per_client>,
     Within(1, 1000000)},
    {"security.max_message_bytes", Bind<&SecurityConfig::max_message_bytes>, AtLeast(4096)},
    {"metrics.port", Bind<&MetricsConfig::port>, Within(-1, 65535)},
};

// Keys of one embedding table, under `tables.default.` or `tables.<name>.`.
constexpr TableKey kTableKeys[] = {
    {"dim", Bind<&TableConfig::dim>, Within(0, 4096)},
    {"optimizer", Bind<&TableConfig::optimizer>, OneOf("sgd|adagrad|rowwise_adagrad|adam|ftrl")},
    {"lr", Bind<&TableConfig::lr>, Above(0)},
    {"init.dist", Bind<&TableConfig::init_dist>, OneOf("uniform|normal|zeros")},
    {"init.scale", Bind<&TableConfig::init_scale>, AtLeast(0)},
    {"admission.min_count", Bind<&TableConfig::admission_min_count>, AtLeast(0)},
    {"eviction.ttl_steps", Bind<&TableConfig::eviction_ttl_steps>, AtLeast(0)},
    {"adagrad.initial_accumulator", Bind<&TableConfig::adagrad_initial_accumulator>, AtLeast(0)},
    {"adam.beta1", Bind<&TableConfig::adam_beta1>, FromBelow(0, 1)},
    {"adam.beta2", Bind<&TableConfig::adam_beta2>, FromBelow(0, 1)},
    {"adam.eps", Bind<&TableConfig::adam_eps>, Above(0)},
    {"ftrl.alpha", Bind<&TableConfig::ftrl_alpha>, Above(0)},
    {"ftrl.beta", Bind<&TableConfig::ftrl_beta>, AtLeast(0)},
    {"ftrl.l1", Bind<&TableConfig::ftrl_l1>, AtLeast(0)},
    {"ftrl.l2", Bind<&TableConfig::ftrl_l2>, AtLeast(0)},
};

// Keys of one sparse feature, under `features.<name>.`.
constexpr FeatureKey kFeatureKeys[] = {
    {"table", Bind<&FeatureConfig::table>, Any()},
    {"max_len", Bind<&FeatureConfig::max_len>, Within(1, 65536)},
    {"pooling", Bind<&FeatureConfig::pooling>, OneOf("sum|mean")},
    {"weighted", Bind<&FeatureConfig::weighted>, Any()},
};

// The sections whose keys define the computation (PROTOCOLS §1), besides `tables`.
constexpr std::string_view kComputationSections[] = {"model.", "data.", "train.",
                                                     "ps.wire_precision"};

// ---------------------------------------------------------------------------------------------
// Key lookup

enum class KeyKind { kUnknown, kSection, kJobLeaf, kTableLeaf, kFeatureLeaf };

struct KeyInfo {
  KeyKind kind = KeyKind::kUnknown;
  const JobKey* job = nullptr;
  const TableKey* table = nullptr;
  const FeatureKey* feature = nullptr;
};

// Classifies `rel` against `keys`: a leaf, a section (a proper prefix of some key) or unknown.
template <typename Spec, size_t N>
KeyKind Classify(std::string_view rel, const Spec (&keys)[N], const Spec** leaf) {
  KeyKind kind = KeyKind::kUnknown;
  for (const Spec& spec : keys) {
    if (spec.path == rel) {
      *leaf = &spec;
      return KeyKind::kJobLeaf;  // caller maps to the right leaf kind
    }
    if (spec.path.size() > rel.size() && spec.path.starts_with(rel) &&
        spec.path[rel.size()] == '.') {
      kind = KeyKind::kSection;
    }
  }
  return kind;
}

// Looks up a full dotted path. `tables.<name>` is always a section here: which names exist
// depends on data.num_categorical, so names are checked once the whole tree is read.
KeyInfo Lookup(std::string_view path) {
  KeyInfo info;
  if (path == "tables") {
    info.kind = KeyKind::kSection;
  } else if (path.starts_with("tables.")) {
    std::string_view rest = path.substr(7);
    size_t dot = rest.find('.');
    if (dot == 0 || rest.empty()) return info;
    if (dot == std::string_view::npos) {
      info.kind = KeyKind::kSection;
      return info;
    }
    info.kind = Classify(rest.substr(dot + 1), kTableKeys, &info.table);
    if (info.kind == KeyKind::kJobLeaf) info.kind = KeyKind::kTableLeaf;
  } else if (path == "features") {
    info.kind = KeyKind::kSection;
  } else if (path.starts_with("features.")) {
    std::string_view rest = path.substr(9);
    size_t dot = rest.find('.');
    if (dot == 0 || rest.empty()) return info;
    if (dot == std::string_view::npos) {
      info.kind = KeyKind::kSection;
      return info;
    }
    info.kind = Classify(rest.substr(dot + 1), kFeatureKeys, &info.feature);
    if (info.kind == KeyKind::kJobLeaf) info.kind = KeyKind::kFeatureLeaf;
  } else if (!path.empty()) {
    info.kind = Classify(path, kJobKeys, &info.job);
  }
  return info;
}

// The keys allowed directly under `section` ("" = top level), for "unknown key" messages.
std::string KnownChildren(std::string_view section) {
  std::vector<std::string_view> rels;
  std::string_view prefix = section;
  if (section.starts_with("tables.")) {
    size_t dot = section.find('.', 7);
    prefix = dot == std::string_view::npos ? "" : section.substr(dot + 1);
    for (const TableKey& k : kTableKeys) rels.push_back(k.path);
  } else if (section.starts_with("features.")) {
    size_t dot = section.find('.', 9);
    prefix = dot == std::string_view::npos ? "" : section.substr(dot + 1);
    for (const FeatureKey& k : kFeatureKeys) rels.push_back(k.path);
  } else {
    for (const JobKey& k : kJobKeys) rels.push_back(k.path);
    rels.push_back("tables.default");
    rels.push_back("features.<name>");
  }
  std::vector<std::string> names;
  for (std::string_view rel : rels) {
    if (!prefix.empty()) {
      if (!rel.starts_with(prefix) || rel.size() <= prefix.size() || rel[prefix.size()] != '.')
        continue;
      rel.remove_prefix(prefix.size() + 1);
    }
    std::string name(rel.substr(0, rel.find('.')));
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// ---------------------------------------------------------------------------------------------
// Printing (ToYaml and the hash's canonical text share it)

template <typename T>
std::string JoinList(const std::vector<T>& items, std::string (*format)(const T&)) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + format(items[i]);
  return out + "]";
}

std::string FormatField(const FieldRef& field) {
  struct Printer {
    std::string operator()(int64_t* v) const { return std::to_string(*v); }
    std::string operator()(uint64_t* v) const { return std::to_string(*v); }
    std::string operator()(double* v) const { return Num(*v); }
    std::string operator()(bool* v) const { return *v ? "true" : "false"; }
    std::string operator()(std::string* v) const { return Quote(*v); }
    std::string operator()(std::vector<int64_t>* v) const {
      return JoinList<int64_t>(*v, [](const int64_t& x) { return std::to_string(x); });
    }
    std::string operator()(std::vector<double>* v) const {
      return JoinList<double>(*v, [](const double& x) { return Num(x); });
    }
    std::string operator()(std::vector<std::string>* v) const {
      return JoinList<std::string>(*v, [](const std::string& x) { return Quote(x); });
    }
  };
  return std::visit(Printer{}, field);
}

// Writes dotted-path leaves as nested block maps; consecutive keys sharing a prefix share
// its map, so callers must emit each section's keys together.
class YamlWriter {
 public:
  void Comment(std::string_view text) { out_ << "# " << text << "\n"; }

  void Put(std::string_view path, const std::string& value) {
    std::vector<std::string> parts;
    for (size_t start = 0;;) {
      size_t dot = path.find('.', start);
      parts.emplace_back(path.substr(start, dot - start));
      if (dot == std::string_view::npos) break;
      start = dot + 1;
    }
    size_t common = 0;
    while (common + 1 < parts.size() && common < open_.size() && open_[common] == parts[common]) {
      ++common;
    }
    open_.resize(common);
    for (size_t i = common; i + 1 < parts.size(); ++i) {
      out_ << std::string(2 * i, ' ') << parts[i] << ":\n";
      open_.push_back(parts[i]);
    }
    out_ << std::string(2 * open_.size(), ' ') << parts.back() << ": " << value << "\n";
  }

  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::vector<std::string> open_;  // the maps the last key was written in
};

// ---------------------------------------------------------------------------------------------
// Overrides: `--set key.path=value` edits the YAML tree before validation.

using OriginMap = std::map<std::string, std::string>;  // key path -> "--set key=value"

Status OverrideError(const Override& o, std::string_view key, std::string_view what) {
  return Status::InvalidArgument("--set " + o.flag_text + ": " + std::string(key) + ": " +
                                 std::string(what));
}

// Parses an override's value as YAML flow; an empty value is an error for non-string keys.
StatusOr<YAML::Node> LoadFlow(const std::string& value) {
  if (value.find_first_not_of(" \t") == std::string::npos) {
    return Status::InvalidArgument("empty value");
  }
  try {
    return YAML::Load(value);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("cannot parse " + Quote(value) + " as YAML: " + e.msg);
  }
}

// Builds the node a `--set` puts at `key`: verbatim for strings, YAML otherwise.
StatusOr<YAML::Node> OverrideValue(std::string_view key, const std::string& value) {
  KeyInfo info = Lookup(key);
  if (info.kind == KeyKind::kUnknown) return Status::InvalidArgument("unknown key");
  FieldRef field;
  JobConfig scratch_job;  // binding to scratch objects tells us the key's type
  TableConfig scratch_table;
  FeatureConfig scratch_feature;
  if (info.kind == KeyKind::kJobLeaf) field = info.job->bind(scratch_job);
  if (info.kind == KeyKind::kTableLeaf) field = info.table->bind(scratch_table);
  if (info.kind == KeyKind::kFeatureLeaf) field = info.feature->bind(scratch_feature);
  if (info.kind != KeyKind::kSection && std::holds_alternative<std::string*>(field)) {
    return YAML::Node(value);
  }
  TANDEM_ASSIGN_OR_RETURN(YAML::Node node, LoadFlow(value));
  if (info.kind == KeyKind::kSection && !node.IsMap()) {
    return Status::InvalidArgument("is a section: expected a YAML flow map like {key: value}");
  }
  return node;
}

// Records every leaf under `node` as set by `flag`, so errors there name the flag.
void RecordOrigins(const YAML::Node& node, const std::string& path, const std::string& flag,
                   OriginMap* origins) {
  (*origins)[path] = flag;
  if (!node.IsMap()) return;
  for (auto it = node.begin(); it != node.end(); ++it) {
    RecordOrigins(it->second, path + "." + it->first.Scalar(), flag, origins);
  }
}

// Merges map `src` into map `dst` key by key; anything else replaces what was there.
void MergeInto(YAML::Node dst, const std::string& key, const YAML::Node& src) {
  YAML::Node existing = dst[key];
  if (!src.IsMap() || !existing.IsMap()) {
    dst[key] = src;
    return;
  }
  for (auto it = src.begin(); it != src.end(); ++it) {
    MergeInto(existing, it->first.Scalar(), it->second);
  }
}

Status ApplyOverride(const Override& o, YAML::Node root, OriginMap* origins) {
  size_t eq = o.flag_text.find('=');
  if (eq == std::string::npos || eq == 0) {
    return Status::InvalidArgument("--set " + o.flag_text + ": expected key.path=value");
  }
  std::string key = o.flag_text.substr(0, eq);
  StatusOr<YAML::Node> value = OverrideValue(key, o.flag_text.substr(eq + 1));
  if (!value.ok()) return OverrideError(o, key, value.status().message());
  // Walk down to the parent map, creating (or replacing non-map values with) maps on the way.
  YAML::Node cur = root;
  size_t start = 0;
  for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', start)) {
    std::string part = key.substr(start, dot - start);
    if (!cur[part].IsMap()) cur[part] = YAML::Node(YAML::NodeType::Map);
    YAML::Node next = cur[part];
    cur.reset(next);
    start = dot + 1;
  }
  MergeInto(cur, key.substr(start), *value);
  RecordOrigins(*value, key, "--set " + o.flag_text, origins);
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// The walker: reads the (overridden) tree into a JobConfig, then checks cross-field rules.

class Builder {
 public:
  Builder(std::string name, OriginMap origins)
      : name_(std::move(name)), origins_(std::move(origins)) {
    job_.cluster.chief = {"127.0.0.1:0"};
    job_.cluster.ps = {"127.0.0.1:0"};
    job_.cluster.workers = {"127.0.0.1:0"};
  }

  StatusOr<JobConfig> Build(const YAML::Node& root) {
    TANDEM_RETURN_IF_ERROR(WalkMap(root, "", {}));
    TANDEM_RETURN_IF_ERROR(BuildFeatures());
    TANDEM_RETURN_IF_ERROR(BuildTables());
    TANDEM_RETURN_IF_ERROR(CheckCrossField());
    return job_;
  }

 private:
  std::string FileLine(int zero_based_line) const {
    return name_ + ":" + std::to_string(std::max(zero_based_line, 0) + 1);
  }

  // Where `path` was set: its `--set` flag, else its line in the file.
  std::string Locate(const std::string& path, const YAML::Mark& mark) const {
    auto it = origins_.find(path);
    if (it != origins_.end()) return it->second;
    if (mark.line >= 0) return FileLine(mark.line);
    it = origins_.lower_bound(path + ".");  // a key created by a section override
    if (it != origins_.end() && it->first.starts_with(path + ".")) return it->second;
    return FileLine(0);
  }

  // The location of the first of `paths` that was given explicitly, else the file start.
  std::string WhereAny(std::initializer_list<std::string> paths) const {
    for (const std::string& p : paths) {
      auto it = where_.find(p);
      if (it != where_.end()) return it->second;
    }
    return FileLine(0);
  }

  static Status Fail(const std::string& where, std::string_view path, std::string_view what) {
    return Status::InvalidArgument(where + ": " + std::string(path) + ": " + std::string(what));
  }

  // Where the leaves of a named section (`tables.<name>`, `features.<name>`) go.
  struct Target {
    TableConfig* table = nullptr;
    FeatureConfig* feature = nullptr;
  };

  // Reads one map level. Returns the first error in document order.
  Status WalkMap(const YAML::Node& map, const std::string& path, Target target) {
    if (map.IsNull()) return Status::Ok();  // `section:` with nothing under it
    if (!map.IsMap()) {
      std::string where = path.empty() ? FileLine(map.Mark().line) : where_[path];
      return Fail(where, path.empty() ? "(top level)" : path,
                  "expected a map of keys, got " + Describe(map));
    }
    std::set<std::string> seen;
    for (auto it = map.begin(); it != map.end(); ++it) {
      std::string child;
      TANDEM_RETURN_IF_ERROR(ReadKey(it->first, path, &seen, &child));
      if (child == "tables") {
        TANDEM_RETURN_IF_ERROR(WalkTables(it->second));
        continue;
      }
      if (child == "features") {
        TANDEM_RETURN_IF_ERROR(WalkFeatures(it->second));
        continue;
      }
      TANDEM_RETURN_IF_ERROR(WalkEntry(child, it->second, target));
    }
    return Status::Ok();
  }

  // Checks a map key (a plain string, not seen before) and records where it was written.
  Status ReadKey(const YAML::Node& key, const std::string& path, std::set<std::string>* seen,
                 std::string* child) {
    if (!key.IsScalar()) {
      return Fail(Locate(path, key.Mark()), path.empty() ? "(top level)" : path,
                  "keys must be strings, got " + Describe(key));
    }
    *child = path.empty() ? key.Scalar() : path + "." + key.Scalar();
    where_[*child] = Locate(*child, key.Mark());
    if (!seen->insert(key.Scalar()).second) return Fail(where_[*child], *child, "duplicate key");
    return Status::Ok();
  }

  Status WalkEntry(const std::string& path, const YAML::Node& value, Target target) {
    KeyInfo info = Lookup(path);
    switch (info.kind) {
      case KeyKind::kSection:
        return WalkMap(value, path, target);
      case KeyKind::kJobLeaf:
        return Assign(info.job->bind(job_), info.job->rule, value, path);
      case KeyKind::kTableLeaf:
        if (target.table == nullptr) break;  // a table key outside `tables`
        return Assign(info.table->bind(*target.table), info.table->rule, value, path);
      case KeyKind::kFeatureLeaf:
        if (target.feature == nullptr) break;
        return Assign(info.feature->bind(*target.feature), info.feature->rule, value, path);
      case KeyKind::kUnknown:
        break;
    }
    size_t dot = path.rfind('.');
    std::string section = dot == std::string::npos ? "" : path.substr(0, dot);
    return Fail(where_[path], path, "unknown key (known here: " + KnownChildren(section) + ")");
  }

  // `tables.default` first, whatever the document order, because every named table starts
  // from it; then each `tables.<name>` on top of a copy.
  Status WalkTables(const YAML::Node& tables) {
    if (tables.IsNull()) return Status::Ok();
    if (!tables.IsMap()) {
      return Fail(where_["tables"], "tables", "expected a map of tables, got " + Describe(tables));
    }
    std::set<std::string> seen;
    for (auto it = tables.begin(); it != tables.end(); ++it) {
      std::string child;
      TANDEM_RETURN_IF_ERROR(ReadKey(it->first, "tables", &seen, &child));
      if (child == "tables.default") {
        TANDEM_RETURN_IF_ERROR(WalkMap(it->second, child, {.table = &job_.table_default}));
      }
    }
    for (auto it = tables.begin(); it != tables.end(); ++it) {
      std::string name = it->first.Scalar();
      if (name == "default") continue;
      TableConfig table = job_.table_default;
      TANDEM_RETURN_IF_ERROR(WalkMap(it->second, "tables." + name, {.table = &table}));
      named_tables_[name] = table;
    }
    return Status::Ok();
  }

  // `features.<name>` in document order: the order is the model's input order.
  Status WalkFeatures(const YAML::Node& features) {
    if (features.IsNull()) return Status::Ok();
    if (!features.IsMap()) {
      return Fail(where_["features"], "features",
                  "expected a map of features (name: {table, max_len, pooling}), got " +
                      Describe(features));
    }
    std::set<std::string> seen;
    for (auto it = features.begin(); it != features.end(); ++it) {
      std::string child;
      TANDEM_RETURN_IF_ERROR(ReadKey(it->first, "features", &seen, &child));
      const std::string name = it->first.Scalar();
      FeatureConfig feature;
      TANDEM_RETURN_IF_ERROR(WalkMap(it->second, child, {.feature = &feature}));
      job_.features.emplace_back(name, std::move(feature));
    }
    return Status::Ok();
  }

  // Names each feature's table and sets data.num_categorical to the feature count.
  Status BuildFeatures() {
    if (job_.features.empty()) return Status::Ok();
    // Given explicitly (as ToYaml prints it), it must count the features.
    if (where_.count("data.num_categorical") &&
        job_.data.num_categorical != static_cast<int64_t>(job_.features.size())) {
      return Fail(where_["data.num_categorical"], "data.num_categorical",
                  "must equal the number of features (" + std::to_string(job_.features.size()) +
                      ") when a features section is given, got " +
                      std::to_string(job_.data.num_categorical));
    }
    if (job_.features.size() > 4096) {
      return Fail(where_["features"], "features", "at most 4096 features");
    }
    for (auto& [name, feature] : job_.features) {
      const std::string path = "features." + name;
      if (name.empty() || name.find_first_of(" \t,.") != std::string::npos) {
        return Fail(where_[path], path, "a feature name must be non-empty, without blanks, , or .");
      }
      if (feature.table.empty()) feature.table = name;
      if (feature.table == "default" || feature.table.find('.') != std::string::npos) {
        return Fail(where_[path], path + ".table",
                    "a table name must not be default or contain '.', got " + Quote(feature.table));
      }
    }
    job_.data.num_categorical = static_cast<int64_t>(job_.features.size());
    return Status::Ok();
  }

  Status Assign(FieldRef field, const Rule& rule, const YAML::Node& value,
                const std::string& path) {
    if (value.IsNull()) return Status::Ok();  // `key:` or `key: ~` keeps the default
    return std::visit([&](auto* f) { return Store(f, rule, value, path); }, field);
  }

  template <typename T>
  Status Store(T* field, const Rule& rule, const YAML::Node& value, const std::string& path) {
    StatusOr<T> x = ReadValue(field, rule, value);
    if (!x.ok()) return Fail(where_[path], path, x.status().message());
    *field = std::move(x).value();
    return Status::Ok();
  }

  // Element errors name the element (`model.bottom_mlp[1]`) and its own line.
  template <typename T>
  Status Store(std::vector<T>* field, const Rule& rule, const YAML::Node& value,
               const std::string& path) {
    if (!value.IsSequence()) {
      return Fail(where_[path], path, "expected a list, got " + Describe(value));
    }
    std::vector<T> items;
    for (size_t i = 0; i < value.size(); ++i) {
      StatusOr<T> item = ReadValue(static_cast<T*>(nullptr), rule, value[i]);
      if (!item.ok()) {
        return Fail(Locate(path, value[i].Mark()), path + "[" + std::to_string(i) + "]",
                    item.status().message());
      }
      items.push_back(std::move(item).value());
    }
    Status s = CheckCount(items.size(), rule);
    if (!s.ok()) return Fail(where_[path], path, s.message());
    *field = std::move(items);
    return Status::Ok();
  }

  // Fills `tables` with every table from the default, then applies each named table.
  Status BuildTables() {
    job_.tables.clear();
    for (const std::string& name : TableNames(job_)) job_.tables[name] = job_.table_default;
    for (const auto& [name, table] : named_tables_) {
      auto it = job_.tables.find(name);
      if (it == job_.tables.end()) {
        std::string path = "tables." + name;
        return Fail(where_[path], path,
                    job_.features.empty() ? "unknown table (tables are default and C1..C" +
                                                std::to_string(job_.data.num_categorical) +
                                                ", from data.num_categorical)"
                                          : "unknown table (no feature looks it up)");
      }
      it->second = table;
    }
    return Status::Ok();
  }

  Status CheckCrossField() const;
  // Labels, feature widths and the text columns against each other and data.format.
  Status CheckSchema() const;

  std::string name_;
  OriginMap origins_;
  std::map<std::string, std::string> where_;  // key path -> where it was written
  std::map<std::string, TableConfig> named_tables_;
  JobConfig job_;
};

// The rules that tie keys together (the single-key rules live in the schema tables).
Status Builder::CheckCrossField() const {
  const JobConfig& c = job_;
  if (c.model.type == "dlrm" && c.model.interaction == "dot" &&
      c.model.bottom_mlp.back() != c.model.embedding_dim) {
    return Fail(WhereAny({"model.bottom_mlp", "model.embedding_dim", "model.interaction"}),
                "model.bottom_mlp",
                "last layer " + std::to_string(c.model.bottom_mlp.back()) +
                    " must equal model.embedding_dim " + std::to_string(c.model.embedding_dim) +
                    " when model.interaction is dot");
  }
  if (HasWideTables(c)) {
    for (const std::string& name : TableNames(c)) {
      if (name.ends_with(kWideTableSuffix)) {
        return Fail(WhereAny({"model.type"}), "model.type",
                    "table '" + name + "' ends in '" + std::string(kWideTableSuffix) +
                        "', the suffix of the wide tables " + c.model.type + " adds");
      }
    }
  }
  const auto num_labels = static_cast<int64_t>(c.data.labels.size());
  if (c.model.top_mlp.back() != num_labels) {
    return Fail(WhereAny({"model.top_mlp", "data.labels"}), "model.top_mlp",
                "last layer must be " + std::to_string(num_labels) +
                    " (one logit per data.labels entry), got " +
                    std::to_string(c.model.top_mlp.back()));
  }
  if (!c.train.loss_weights.empty() &&
      static_cast<int64_t>(c.train.loss_weights.size()) != num_labels) {
    return Fail(WhereAny({"train.loss_weights"}), "train.loss_weights",
                "needs one weight per data.labels entry (" + std::to_string(num_labels) +
                    "), got " + std::to_string(c.train.loss_weights.size()));
  }
  TANDEM_RETURN_IF_ERROR(CheckSchema());
  if (c.chief.heartbeat_timeout_ms <= c.chief.heartbeat_interval_ms) {
    return Fail(WhereAny({"chief.heartbeat_timeout_ms", "chief.heartbeat_interval_ms"}),
                "chief.heartbeat_timeout_ms",
                "must exceed chief.heartbeat_interval_ms " +
                    std::to_string(c.chief.heartbeat_interval_ms) + ", got " +
                    std::to_string(c.chief.heartbeat_timeout_ms));
  }
  if (c.collective.timeout_ms <= c.chief.heartbeat_timeout_ms) {
    return Fail(
        WhereAny({"collective.timeout_ms", "chief.heartbeat_timeout_ms"}), "collective.timeout_ms",
        "must exceed chief.heartbeat_timeout_ms " + std::to_string(c.chief.heartbeat_timeout_ms) +
            " (failure detection must come first), got " + std::to_string(c.collective.timeout_ms));
  }
  if (c.data.format != "synthetic" && c.data.train.empty()) {
    return Fail(WhereAny({"data.train", "data.format"}), "data.train",
                "required when data.format is " + c.data.format);
  }
  return Status::Ok();
}

Status Builder::CheckSchema() const {
  const JobConfig& c = job_;
  std::set<std::string> names;
  for (const std::string& label : c.data.labels) {
    if (!names.insert(label).second || label == "-") {
      return Fail(WhereAny({"data.labels"}), "data.labels",
                  "label names must be unique and not \"-\", got " + Quote(label) + " twice");
    }
  }
  bool multi_hot = false;
  for (const auto& [name, feature] : c.features) {
    multi_hot |= feature.max_len > 1 || feature.weighted;
    if (!names.insert(name).second) {
      return Fail(WhereAny({"features." + name}), "features." + name,
                  "the name is already used by a label");
    }
  }
  // Binary version 2 records carry bags, id weights and several labels; Criteo lines cannot.
  if (c.data.format == "criteo" && (multi_hot || c.data.labels.size() != 1)) {
    return Fail(WhereAny({"data.format"}), "data.format",
                "criteo records hold one label and one unweighted id per feature; use text (or "
                "binary converted from text by tandem convert) for multi-hot or weighted "
                "features or several labels");
  }
  if (c.data.text_separator.size() != 1 || c.data.text_list_separator.size() != 1 ||
      c.data.text_separator == c.data.text_list_separator || c.data.text_separator == "\n") {
    return Fail(WhereAny({"data.text.separator", "data.text.list_separator"}),
                "data.text.separator",
                "the separators must be two different single characters (not a newline), got " +
                    Quote(c.data.text_separator) + " and " + Quote(c.data.text_list_separator));
  }
  if (!c.data.text_columns.empty()) {
    std::set<std::string> known = names, seen;
    for (int64_t i = 1; i <= c.data.num_dense; ++i) known.insert("I" + std::to_string(i));
    if (c.features.empty()) {
      for (int64_t i = 1; i <= c.data.num_categorical; ++i) known.insert("C" + std::to_string(i));
    }
    for (const std::string& col : c.data.text_columns) {
      if (col == "-") continue;
      if (!known.count(col)) {
        return Fail(WhereAny({"data.text.columns"}), "data.text.columns",
                    "unknown column " + Quote(col) +
                        " (columns are labels, I1..In, features, or - to skip one)");
      }
      if (!seen.insert(col).second) {
        return Fail(WhereAny({"data.text.columns"}), "data.text.columns",
                    "column " + Quote(col) + " appears twice");
      }
    }
    for (const std::string& label : c.data.labels) {
      if (!seen.count(label)) {
        return Fail(WhereAny({"data.text.columns"}), "data.text.columns",
                    "has no column for label " + Quote(label));
      }
    }
  }
  return Status::Ok();
}

StatusOr<JobConfig> Parse(const std::string& text, const std::string& name,
                          const std::vector<Override>& overrides) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::ParserException& e) {
    return Status::InvalidArgument(name + ":" + std::to_string(e.mark.line + 1) +
                                   ": YAML syntax error: " + e.msg);
  }
  if (docs.size() > 1) {
    return Status::InvalidArgument(name + ":1: (top level): expected one YAML document, found " +
                                   std::to_string(docs.size()));
  }
  YAML::Node root = docs.empty() || docs[0].IsNull() ? YAML::Node(YAML::NodeType::Map) : docs[0];
  if (!root.IsMap()) {
    return Status::InvalidArgument(name + ":" + std::to_string(root.Mark().line + 1) +
                                   ": (top level): expected a map of sections, got " +
                                   Describe(root));
  }
  OriginMap origins;
  for (const Override& o : overrides) TANDEM_RETURN_IF_ERROR(ApplyOverride(o, root, &origins));
  return Builder(name, std::move(origins)).Build(root);
}

}  // namespace

std::vector<std::string> TableNames(const JobConfig& job) {
  std::vector<std::string> names;
  if (job.features.empty()) {
    for (int64_t i = 1; i <= job.data.num_categorical; ++i)
      names.push_back("C" + std::to_string(i));
    return names;
  }
  for (const auto& [name, feature] : job.features) {
    const std::string& table = feature.table.empty() ? name : feature.table;
    if (std::find(names.begin(), names.end(), table) == names.end()) names.push_back(table);
  }
  return names;
}

bool HasWideTables(const JobConfig& job) {
  return job.model.type == "deepfm" || job.model.type == "wide_deep";
}

Status ValidateAddress(std::string_view address) {
  std::string quoted = Quote(address);
  size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) {
    return Status::InvalidArgument("expected host:port, got " + quoted);
  }
  std::string_view host = address.substr(0, colon);
  std::string_view port = address.substr(colon + 1);
  // IPv6 hosts come in brackets ("[::1]:7000") so that the port's colon stays unambiguous.
  bool bracketed = host.size() > 2 && host.front() == '[' && host.back() == ']';
  std::string_view bare = bracketed ? host.substr(1, host.size() - 2) : host;
  if (bare.empty() || bare.find_first_of(" \t[]/") != std::string_view::npos ||
      (!bracketed && bare.find(':') != std::string_view::npos)) {
    return Status::InvalidArgument("bad host in " + quoted +
                                   " (expected host:port; IPv6 as [addr]:port)");
  }
  uint32_t value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || port.size() > 5 || ec != std::errc() || end != port.data() + port.size() ||
      value > 65535) {
    return Status::InvalidArgument("bad port in " + quoted + " (expected 0..65535)");
  }
  return Status::Ok();
}

StatusOr<JobConfig> ParseJobConfig(const std::string& yaml_text, const std::string& name,
                                   const std::vector<Override>& overrides) {
  try {
    return Parse(yaml_text, name, overrides);
  } catch (const YAML::Exception& e) {
    // Defensive: the walker checks node types before using them, so this should not happen.
    return Status::InvalidArgument(name + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
}

StatusOr<JobConfig> LoadJobConfig(const std::string& path, const std::vector<Override>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::InvalidArgument(path + ": cannot read: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::InvalidArgument(path + ": read failed: " + std::strerror(errno));
  return ParseJobConfig(text.str(), path, overrides);
}

std::string JobConfig::ToYaml() const {
  JobConfig copy = *this;  // the schema binds mutable fields
  YamlWriter w;
  w.Comment("Effective tandem job config. Tables not listed under `tables` (and keys not");
  w.Comment("listed under one) are equal to tables.default.");
  for (const JobKey& key : kJobKeys) w.Put(key.path, FormatField(key.bind(copy)));
  for (const TableKey& key : kTableKeys) {
    w.Put("tables.default." + std::string(key.path), FormatField(key.bind(copy.table_default)));
  }
  // Only what differs from tables.default: with 26 tables the full list would bury the rest.
  for (const std::string& name : TableNames(copy)) {
    for (const TableKey& key : kTableKeys) {
      std::string value = FormatField(key.bind(copy.tables[name]));
      if (value != FormatField(key.bind(copy.table_default))) {
        w.Put("tables." + name + "." + std::string(key.path), value);
      }
    }
  }
  for (auto& [name, feature] : copy.features) {
    for (const FeatureKey& key : kFeatureKeys) {
      w.Put("features." + name + "." + std::string(key.path), FormatField(key.bind(feature)));
    }
  }
  return w.str();
}

namespace {
// model.type's own keys define the computation only for that type, and keys a type ignores do
// not (issue 19): so a DLRM's hash is what it was before model.type existed, and changing an
// unused key never makes processes of one job disagree. The generator's teacher keys of issue 19
// count only away from their defaults, for the same reason.
bool InHash(std::string_view path, const JobConfig& c) {
  const std::string& type = c.model.type;
  // How a worker reads its records, not which: workers may differ in it.
  if (path == "data.memory_bytes") return false;
  if (path == "data.synthetic.teacher") return c.data.synthetic_teacher != "fm";
  if (path == "data.synthetic.task_correlation") return c.data.synthetic_task_correlation != 0;
  if (path == "model.type") return type != "dlrm";
  if (path == "model.interaction") return type == "dlrm";
  if (path.starts_with("model.dcn.")) return type == "dcn_v2";
  if (path.starts_with("model.mmoe.")) return type == "mmoe";
  if (path.starts_with("model.wide.")) return type == "deepfm" || type == "wide_deep";
  return true;
}
}  // namespace

std::string JobConfig::ComputationHash() const {
  JobConfig copy = *this;
  std::vector<std::string> lines;
  for (const JobKey& key : kJobKeys) {
    if (!InHash(key.path, *this)) continue;
    for (std::string_view section : kComputationSections) {
      if (key.path.starts_with(section)) {
        lines.push_back(std::string(key.path) + "=" + FormatField(key.bind(copy)));
      }
    }
  }
  // The features' order is the model's input order: it is part of the computation.
  for (size_t i = 0; i < copy.features.size(); ++i) {
    auto& [name, feature] = copy.features[i];
    for (const FeatureKey& key : kFeatureKeys) {
      lines.push_back("features[" + std::to_string(i) + "]." + name + "." + std::string(key.path) +
                      "=" + FormatField(key.bind(feature)));
    }
  }
  for (auto& [name, table] : copy.tables) {
    for (const TableKey& key : kTableKeys) {
      lines.push_back("tables." + name + "." + std::string(key.path) + "=" +
                      FormatField(key.bind(table)));
    }
  }
  std::sort(lines.begin(), lines.end());
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  uint64_t hash = XXH3_64bits(text.data(), text.size());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, hash >>= 4) out[i] = kHex[hash & 0xf];
  return out;
}

}  // namespace tandem::config
