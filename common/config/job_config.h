// The job config (DESIGN §12): one YAML file per job, overridden by `--set key.path=value`.
// Only common/config/ reads files and the environment (STYLE §7). Every key has a documented
// default (configs/README.md lists them); LoadJobConfig rejects unknown keys.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tandem::config {

// One embedding table's settings: `tables.default.*`, overridden per table by `tables.<name>.*`.
struct TableConfig {
  int64_t dim = 0;                    // row width in [0, 4096]; 0 = model.embedding_dim
  std::string optimizer = "adagrad";  // sgd | adagrad | rowwise_adagrad | adam | ftrl
  double lr = 0.05;                   // > 0
  std::string init_dist = "uniform";  // `init.dist`: uniform | normal | zeros
  double init_scale = 0.05;           // `init.scale`: half-width (uniform) or stddev (normal), >= 0
  int64_t admission_min_count = 0;    // `admission.min_count`: 0 = admit on first push, >= 0
  int64_t eviction_ttl_steps = 0;     // `eviction.ttl_steps`: 0 = never, >= 0
  double adagrad_initial_accumulator = 0.1;  // `adagrad.initial_accumulator` >= 0
  double adam_beta1 = 0.9;                   // `adam.beta1` in [0,1)
  double adam_beta2 = 0.999;                 // `adam.beta2` in [0,1)
  double adam_eps = 1e-8;                    // `adam.eps` > 0
  double ftrl_alpha = 0.05;                  // `ftrl.alpha` > 0 (FTRL's own learning rate)
  double ftrl_beta = 1.0;                    // `ftrl.beta` >= 0
  double ftrl_l1 = 0.0;                      // `ftrl.l1` >= 0
  double ftrl_l2 = 0.0;                      // `ftrl.l2` >= 0
  friend bool operator==(const TableConfig&, const TableConfig&) = default;
};

// One sparse feature: `features.<name>.*` (issue 18). Several features may look up one table.
struct FeatureConfig {
  std::string table;            // the table it looks up; empty = a table named like the feature
  int64_t max_len = 1;          // ids per sample in [1, 65536]; 1 = single-hot
  std::string pooling = "sum";  // sum | mean
  bool weighted = false;        // ids carry weights ("id:weight" in text), pooled weighted
  friend bool operator==(const FeatureConfig&, const FeatureConfig&) = default;
};

struct ClusterConfig {
  std::vector<std::string> chief;    // `cluster.chief`: exactly one "host:port" (port 0 allowed)
  std::vector<std::string> ps;       // `cluster.ps`: >= 1 addresses
  std::vector<std::string> workers;  // `cluster.workers`: >= 1 addresses
  friend bool operator==(const ClusterConfig&, const ClusterConfig&) = default;
};

struct ModelConfig {
  int64_t embedding_dim = 16;                  // `model.embedding_dim` in [1, 4096]
  std::vector<int64_t> bottom_mlp = {64, 16};  // last == embedding_dim (dot interaction)
  std::vector<int64_t> top_mlp = {64, 1};      // last == number of data.labels
  std::string interaction = "dot";             // dot | concat (dlrm only)
  // `model.type` (issue 19): dlrm | dcn_v2 | deepfm | wide_deep | mmoe.
  std::string type = "dlrm";
  int64_t dcn_cross_layers = 3;                 // `model.dcn.cross_layers` in [1, 64]
  int64_t dcn_low_rank = 0;                     // `model.dcn.low_rank`: 0 = full W x W matrices
  std::string dcn_structure = "stacked";        // `model.dcn.structure`: stacked | parallel
  int64_t mmoe_num_experts = 8;                 // `model.mmoe.num_experts` in [1, 64]
  std::vector<int64_t> mmoe_expert_mlp = {64};  // `model.mmoe.expert_mlp`
  // `model.wide.optimizer`: the wide (first-order) tables of deepfm and wide_deep.
  std::string wide_optimizer = "ftrl";
  friend bool operator==(const ModelConfig&, const ModelConfig&) = default;
};

struct DataConfig {
  std::string format = "synthetic";  // criteo | binary | synthetic | text
  std::string train;                 // path or glob; required unless synthetic
  std::string eval;                  // path or glob; optional
  double max_bad_fraction = 0.001;   // in [0, 1]
  // `data.memory_bytes` >= 0: binary files whose records fit it (train and eval each, per worker
  // process) are read into memory when opened instead of with a system call a record.
  int64_t memory_bytes = int64_t{512} << 20;
  int64_t num_dense = 13;  // `data.num_dense` >= 0 (Criteo: 13)
  // `data.num_categorical` >= 1 (Criteo: 26): features and tables C1..Cn when no `features`
  // section is given; otherwise the number of features, set from it.
  int64_t num_categorical = 26;
  std::vector<std::string> labels = {"label"};  // `data.labels`: one binary task each, 1..16
  // The general delimited text format (`data.text.*`, data.format: text).
  std::string text_separator = "\t";      // one character between columns
  std::string text_list_separator = ",";  // one character between the ids of a list column
  std::vector<std::string> text_columns;  // names in file order; empty = labels, I1..In, features
  // Synthetic generator (`data.synthetic.*`).
  int64_t synthetic_vocab = 100000;       // ids per field, >= 1
  double synthetic_zipf = 1.1;            // exponent > 0
  std::string synthetic_teacher = "fm";   // `data.synthetic.teacher`: fm | linear | cross
  double synthetic_task_correlation = 0;  // `data.synthetic.task_correlation` in [0, 1]
  int64_t synthetic_eval_rows = 20000;    // held-out rows, >= 0
  friend bool operator==(const DataConfig&, const DataConfig&) = default;
};

struct TrainConfig {
  int64_t steps = 1000;             // >= 1
  int64_t batch_size = 256;         // per worker, >= 1
  int64_t embedding_staleness = 0;  // k >= 0
  uint64_t seed = 1;
  std::string device = "cpu";  // cpu | cuda
  // fp32 | bf16 | fp16: GEMM inputs rounded to it, fp32 master weights; fp16 adds dynamic loss
  // scaling. On cpu the rounding is emulated in software (slower than fp32; it lets the
  // mixed-precision paths be tested without a GPU).
  std::string precision = "fp32";
  std::string deterministic = "strict";  // strict | relaxed
  std::string dense_optimizer = "adam";  // `train.dense_optimizer`: sgd | adam | adamw | adagrad
  double dense_lr = 0.001;               // `train.dense_lr` > 0
  double dense_momentum = 0.9;           // `train.dense_momentum` (sgd) in [0, 1)
  double dense_weight_decay = 0.0;       // `train.dense_weight_decay` >= 0 (adamw: decoupled)
  int64_t lr_warmup_steps = 0;           // `train.lr_warmup_steps`: linear warmup, >= 0
  std::string lr_decay = "none";         // `train.lr_decay`: none | step | cosine
  int64_t lr_decay_steps = 1000;         // `train.lr_decay_steps`: period / cosine length, >= 1
  double lr_decay_rate = 0.1;            // `train.lr_decay_rate` (step) in (0, 1]
  int64_t eval_every_steps = 0;          // `train.eval_every_steps`: 0 = only at the end
  int64_t log_every_steps = 10;          // `train.log_every_steps` >= 1
  int64_t threads = 1;                   // `train.threads`: BLAS threads per worker, >= 1
  // `train.loss_weights`: the weight of each label's loss in the sum; empty = all 1.
  std::vector<double> loss_weights;
  friend bool operator==(const TrainConfig&, const TrainConfig&) = default;
};

struct PsConfig {
  std::string data_dir = "out/ps";  // `ps.data_dir`; a shard uses `<data_dir>/shard-<i>`
  int64_t cache_bytes = 256 << 20;  // > 0
  // `ps.max_dirty_bytes`: once the cache is full, dirty rows beyond this are written ahead of
  // eviction, bounding what a restore point writes; 0 = a quarter of cache_bytes, at least 64 MiB
  // (ps::DefaultMaxDirtyBytes), -1 = no bound.
  int64_t max_dirty_bytes = 0;
  std::string storage = "rocksdb";              // rocksdb | memory
  std::string push_log_durability = "process";  // `ps.push_log.durability`: process | machine
  int64_t push_log_group_ms = 10;               // `ps.push_log.group_ms` >= 1
  std::string push_log_io = "direct";           // `ps.push_log.io`: direct | buffered
  std::string nan_policy = "reject";            // reject | skip_rows
  int64_t watchdog_ms = 10000;                  // >= 100
  int64_t handler_threads = 4;                  // `ps.handler_threads` >= 1
  // PROTOCOLS §6 and §14.
  int64_t push_log_max_bytes = int64_t{16} << 30;  // `ps.push_log.max_bytes`: alarm above, > 0
  // `ps.restore_point_every_bytes`: pushed bytes between extra restore points (bounds replay
  // time); 0 = only at checkpoints, >= 0.
  int64_t restore_point_every_bytes = int64_t{1} << 30;
  int64_t max_buffered_bytes = 256 << 20;  // `ps.max_buffered_bytes`: k = 0 push buffer, > 0
  // `ps.wire_precision`: fp32 | bf16 | fp16, pulled rows and pushed gradients on the wire (a
  // computation key: it changes the model).
  std::string wire_precision = "fp32";
  friend bool operator==(const PsConfig&, const PsConfig&) = default;
};

struct ChiefConfig {
  int64_t heartbeat_interval_ms = 200;  // >= 10
  int64_t heartbeat_timeout_ms = 2000;  // > heartbeat_interval_ms
  friend bool operator==(const ChiefConfig&, const ChiefConfig&) = default;
};

struct CollectiveConfig {
  int64_t timeout_ms = 10000;  // > chief.heartbeat_timeout_ms
  std::string iface = "lo";
  // PROTOCOLS §11: an abort that has not returned after this long exits the process (76), >= 1.
  int64_t abort_grace_ms = 30000;
  friend bool operator==(const CollectiveConfig&, const CollectiveConfig&) = default;
};

struct RecoveryConfig {
  int64_t max_wait_s = 300;  // >= 1
  // A chief refuses to start a job whose last max_rollbacks + 1 runs all failed from the same
  // checkpoint (a supervisor would restart it forever).
  int64_t max_rollbacks = 3;
  friend bool operator==(const RecoveryConfig&, const RecoveryConfig&) = default;
};

struct CheckpointConfig {
  std::string dir = "out/checkpoints";
  int64_t every_steps = 0;      // 0 = off, >= 0
  int64_t every_seconds = 0;    // 0 = off, >= 0
  int64_t keep = 3;             // >= 2
  std::string resume = "auto";  // auto | never | required
  // The job's last checkpoint: cheaper (a delta of the previous one when that copies less) |
  // delta (whenever there is a previous one) | full (every checkpoint self-contained).
  std::string final_part = "cheaper";
  friend bool operator==(const CheckpointConfig&, const CheckpointConfig&) = default;
};

struct OutputConfig {
  std::string dir = "out";
  friend bool operator==(const OutputConfig&, const OutputConfig&) = default;
};

struct SecurityConfig {
  std::string keys;                         // directory of CURVE keys; empty = no authentication
  int64_t max_connections = 4096;           // per server socket, refused at the handshake
  int64_t max_in_flight_per_client = 4096;  // per connection: more are answered OVERLOADED
  int64_t max_message_bytes = 1ll << 30;    // one frame; a larger one disconnects the peer
  friend bool operator==(const SecurityConfig&, const SecurityConfig&) = default;
};

struct MetricsConfig {
  int64_t port = -1;  // -1 = off, 0 = ephemeral, else 1..65535
  friend bool operator==(const MetricsConfig&, const MetricsConfig&) = default;
};

struct JobConfig {
  ClusterConfig cluster;
  ModelConfig model;
  TableConfig table_default;                  // `tables.default`
  std::map<std::string, TableConfig> tables;  // every table, defaults + overrides applied
  // `features.<name>`, in the order they were written (the model's input order). Empty: the
  // Criteo layout, features C1..Cn each looking up its own table.
  std::vector<std::pair<std::string, FeatureConfig>> features;
  DataConfig data;
  TrainConfig train;
  PsConfig ps;
  ChiefConfig chief;
  CollectiveConfig collective;
  RecoveryConfig recovery;
  CheckpointConfig checkpoint;
  OutputConfig output;
  SecurityConfig security;
  MetricsConfig metrics;

  // The effective config as YAML (logged at start, stored in checkpoint manifests).
  std::string ToYaml() const;
  // Stable 64-bit hash of the computation-defining keys (`model.*`, `tables.*`, `data.*`,
  // `train.*`), not per-host keys (PROTOCOLS §1). Hex string, 16 chars.
  std::string ComputationHash() const;

  friend bool operator==(const JobConfig&, const JobConfig&) = default;
};

// The tables in their id order: C1..Cn without a `features` section, else in the order the
// features first name them.
std::vector<std::string> TableNames(const JobConfig& job);

// DeepFM and Wide & Deep (issue 19): every table T of TableNames has a wide companion "T.wide"
// of one column per label, looked up with T's ids, after all of them in table-id order
// (embedding::TableSpecsFromConfig). It is not a `tables.*` entry: it takes T's settings with
// model.wide.optimizer and zero initialisation.
bool HasWideTables(const JobConfig& job);
inline constexpr std::string_view kWideTableSuffix = ".wide";

// Checks one "host:port" address (port 0..65535, 0 = ephemeral; an IPv6 host in brackets).
// kInvalidArgument says what is wrong, without naming a key.
Status ValidateAddress(std::string_view address);

// `--set key.path=value` as given on the command line.
struct Override {
  std::string flag_text;  // "key.path=value", kept verbatim for error messages
};

// Loads `path`, applies `overrides` in order (each value parsed by its key's type, as YAML
// flow / YAML 1.2 scalars; strings verbatim), then validates everything.
// Errors are kInvalidArgument with one line: "FILE:LINE: KEY.PATH: what is wrong", or for an
// override "--set KEY=VALUE: KEY: what is wrong". Reads no environment.
StatusOr<JobConfig> LoadJobConfig(const std::string& path, const std::vector<Override>& overrides);

// Same, from YAML text (`name` stands for the file name in errors). For tests.
StatusOr<JobConfig> ParseJobConfig(const std::string& yaml_text, const std::string& name,
                                   const std::vector<Override>& overrides);

}  // namespace tandem::config
