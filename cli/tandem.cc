// The `tandem` command: wires subcommands to the parts of the system. Only this file includes
// CLI11 (it costs seconds per translation unit).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "cli/checksum_command.h"
#include "cli/data_commands.h"
#include "cli/drill_command.h"
#include "cli/keys_command.h"
#include "cli/local_command.h"
#include "cli/serve_command.h"
#include "cli/serving_commands.h"
#include "cli/status_command.h"
#include "common/build_info.h"
#include "common/daemon/daemon.h"
#include "common/daemon/member.h"
#include "common/exit_codes.h"
#include "server/chief/chief_main.h"
#include "server/ps/ps_main.h"
#include "worker/device/cpu/blas_kernels.h"
#include "worker/device/device_info.h"
#include "worker/worker_main.h"

namespace tandem::cli {
namespace {

void AddDaemon(CLI::App& app, const char* name, const char* help, daemon::DaemonArgs* a) {
  auto* sub = app.add_subcommand(name, help);
  sub->add_option("--config", a->config_path, "job config (YAML)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--task", a->task,
                  "TYPE:INDEX, e.g. ps:0 (or TF_CONFIG's task, or a Slurm heterogeneous job's)");
  sub->add_option("--set", a->sets, "override a config key: key.path=value (repeatable)");
  sub->add_option("--job-id", a->job_id,
                  "32 hex chars; default: read/create checkpoint.dir/job_id");
  sub->add_option("--incarnation", a->incarnation,
                  "the incarnation the chief last issued to this process (0: a fresh start)");
  sub->add_option("--ready-file", a->ready_file, "write {address, pid} as JSON here once bound");
  sub->add_flag("--new-run", a->new_run,
                "chief: every process of the job was started afresh (a supervisor's start or "
                "rollback): a job start even if the last run was left open");
  sub->add_option("--log-level", a->log_level, "trace|debug|info|warn|error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
}

// The flags of `tandem local`, also taken by `tandem drill` for the job it runs.
void AddLocalFlags(CLI::App* cmd, LocalArgs* a) {
  cmd->add_option("--config", a->config_path, "job config (YAML)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", a->sets, "override a config key: key.path=value (repeatable)");
  cmd->add_option("--ps", a->num_ps, "number of PS shards")->check(CLI::Range(1, 256));
  cmd->add_option("--workers", a->num_workers, "number of workers")->check(CLI::Range(1, 256));
  cmd->add_option("--max-restarts", a->max_restarts,
                  "restarts of one crashed child before the job is stopped");
  cmd->add_option("--max-rollbacks", a->max_rollbacks,
                  "whole-job restarts from the last checkpoint after a process failure failed "
                  "the job (0: none)");
  cmd->add_option("--log-level", a->log_level, "children's log level");
  cmd->add_flag("--netns", a->netns,
                "every process on a host of its own: a network namespace on a bridge, "
                "198.19.N.0/24 (needs root; what `tandem drill` uses for partition faults)");
}

int Main(int argc, char** argv) {
  CLI::App app{
      "tandem: trains recommendation models with huge embedding tables on parameter servers\n"
      "(RocksDB-backed shards) and data-parallel dense workers, with recovery you can prove."};
  // Built only when asked for: the device probe opens the CUDA plugin, which no daemon that does
  // not use a GPU should carry (worker/device/cuda/cuda_plugin.h).
  app.set_version_flag("--version", [] {
    return std::string("tandem ") + std::string(BuildId()) + " (" +
           device::ProbeDevices().ToString() +
           "; openblas kernels: " + device::BlasKernelsDescription() + ")";
  });
  app.require_subcommand(1);

  daemon::DaemonArgs chief, ps, worker;
  chief.role = config::Role::kChief;
  ps.role = config::Role::kPs;
  worker.role = config::Role::kWorker;
  AddDaemon(app, "chief", "run the chief daemon (membership, barriers, checkpoints)", &chief);
  AddDaemon(app, "ps", "run a parameter-server shard daemon", &ps);
  AddDaemon(app, "worker", "run a training worker daemon", &worker);

  LocalArgs local;
  auto* local_cmd = app.add_subcommand(
      "local", "run a job on this machine: chief, PS shards and workers on 127.0.0.1, supervised");
  AddLocalFlags(local_cmd, &local);

  StatusArgs status;
  auto* status_cmd = app.add_subcommand("status", "show which processes of a cluster answer");
  status_cmd->add_option("--config", status.config_path, "job config: ask the addresses it names");
  status_cmd->add_option("--dir", status.dir, "a local cluster's output.dir (reads cluster.json)");
  status_cmd->add_option("--set", status.sets, "override a config key (repeatable)");
  status_cmd->add_option("--job-id", status.job_id, "job id to present (32 hex chars)");
  status_cmd->add_flag("--json", status.json, "print one JSON object");
  status_cmd->add_option("--timeout-ms", status.timeout_ms, "per-process answer timeout");

  DrillArgs drill_args;
  auto* drill =
      app.add_subcommand("drill", "run a job under injected faults, then without, and compare");
  AddLocalFlags(drill, &drill_args.local);  // a drill takes every flag `local` takes
  drill
      ->add_option("--faults", drill_args.faults,
                   "e.g. \"kill ps:0 @step 100; stop ps:1 @step 200 for 2s; kill chief @step "
                   "300; lose ps:1 @step 400; corrupt-latest @step 500; die-after-allreduce "
                   "worker:1 @step 600\" (or die-in-restore-point ps:I @step S, one fault point "
                   "a drill)")
      ->required();
  drill->add_option("--reference", drill_args.reference, "reuse a fault-free run's output dir")
      ->check(CLI::ExistingDirectory);
  DatagenArgs gen;
  auto* datagen = app.add_subcommand("datagen", "write synthetic CTR data with a known best AUC");
  datagen->add_option("--format", gen.format, "criteo|binary|text (text: data.text.* layout)")
      ->required()
      ->check(CLI::IsMember({"criteo", "binary", "text"}));
  datagen->add_option("--rows", gen.rows, "number of records");
  datagen->add_option("--seed", gen.seed, "generator seed (the teacher model is a function of it)");
  datagen->add_option("--out", gen.out, "output file")->required();
  auto* gen_vocab = datagen->add_option("--vocab", gen.vocab, "distinct ids per categorical field");
  auto* gen_zipf = datagen->add_option("--zipf", gen.zipf, "Zipf exponent of the ids");
  datagen->add_option("--stream", gen.stream, "train|eval: same teacher, disjoint records")
      ->check(CLI::IsMember({"train", "eval"}));
  datagen
      ->add_option("--config", gen.config_path,
                   "job config: its features, labels and data.text.* shape the data")
      ->check(CLI::ExistingFile);
  datagen->add_option("--set", gen.sets, "override a config key: key.path=value (repeatable)");
  ConvertArgs conv;
  auto* convert = app.add_subcommand(
      "convert", "convert Criteo TSV or the text format to the binary packed format");
  convert->add_option("--in", conv.in, "input file(s), in order")->required();
  convert->add_option("--out", conv.out, "binary output file")->required();
  convert
      ->add_option("--config", conv.config_path,
                   "job config: its schema (features, labels) and data.text.* layout")
      ->check(CLI::ExistingFile);
  convert->add_option("--set", conv.sets, "override a config key: key.path=value (repeatable)");
  convert
      ->add_option("--from", conv.from,
                   "criteo|text (default: text when the config's data.format is text or its "
                   "schema is multi-hot, weighted or multi-label)")
      ->check(CLI::IsMember({"criteo", "text"}));
  EvalArgs ev;
  auto* eval = app.add_subcommand("eval", "evaluate a checkpoint on held-out data (AUC, logloss)");
  eval->add_option("--checkpoint", ev.checkpoint,
                   "a checkpoint: checkpoint.dir (its LATEST) or one ckpt-<step> directory")
      ->required();
  eval->add_option("--config", ev.config_path,
                   "evaluate on this config's data.eval (default: the checkpoint's own config)")
      ->check(CLI::ExistingFile);
  eval->add_option("--set", ev.sets, "override a config key: key.path=value (repeatable)");
  ExportArgs ex;
  auto* exp =
      app.add_subcommand("export", "write a self-contained serving bundle from a checkpoint");
  exp->add_option("--checkpoint", ex.checkpoint,
                  "a checkpoint: checkpoint.dir (its LATEST) or one ckpt-<step> directory")
      ->required();
  exp->add_option("--out", ex.out, "the bundle directory to create (absent or empty)")->required();
  exp->add_option("--since", ex.since,
                  "a delta bundle: only the rows changed after this committed step (for "
                  "tandem serve --model BASE --delta)")
      ->check(CLI::NonNegativeNumber);
  PredictArgs pr;
  auto* predict = app.add_subcommand("predict", "score a data file with an exported bundle");
  predict->add_option("--model", pr.model, "a bundle directory (tandem export)")
      ->required()
      ->check(CLI::ExistingDirectory);
  predict->add_option("--data", pr.data, "Criteo TSV, text or binary data file (or a glob)")
      ->required();
  predict->add_option("--out", pr.out, "write the scores here, one per record (default: stdout)");
  predict->add_option("--unknown", pr.unknown, "initial|zero: the row of an id the bundle lacks")
      ->check(CLI::IsMember({"initial", "zero"}));
  predict
      ->add_option("--format", pr.format,
                   "auto|criteo|text|binary (auto: binary by the file's header, else text for a "
                   "model trained on text or with multi-hot features or several labels)")
      ->check(CLI::IsMember({"auto", "criteo", "text", "binary"}));
  predict->add_option("--device", pr.device, "cpu|cuda (default cpu)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  predict
      ->add_option("--max-bad-fraction", pr.max_bad_fraction,
                   "fail above this fraction of malformed records (default: the bundle's "
                   "data.max_bad_fraction)")
      ->check(CLI::Range(0.0, 1.0));
  ServeArgs sv;
  serve::ServeOptions& so = sv.options;
  auto* srv = app.add_subcommand(
      "serve", "answer TF-Serving-style HTTP predict requests from a bundle or a live checkpoint");
  auto* srv_model = srv->add_option("--model", so.model, "a bundle directory (tandem export)")
                        ->check(CLI::ExistingDirectory);
  srv->add_option("--delta", so.deltas,
                  "with --model: a delta bundle (tandem export --since), applied in order "
                  "(repeatable)")
      ->check(CLI::ExistingDirectory)
      ->needs(srv_model);
  srv->add_option("--follow", so.follow,
                  "a job's checkpoint.dir: serve its newest checkpoint and apply each new one's "
                  "changed rows")
      ->check(CLI::ExistingDirectory)
      ->excludes(srv_model);
  srv->add_option("--host", so.http.host, "address to listen on (default 0.0.0.0)");
  srv->add_option("--port", so.http.port, "port (default 8501; 0: any free port)")
      ->check(CLI::Range(0, 65535));
  srv->add_option("--name", so.http.model_name, "the model's name in /v1/models/<name>");
  srv->add_option("--state-dir", so.state_dir,
                  "--follow: where checkpoints are opened (default: DIR/serve-state/<host>-<pid>)");
  srv->add_option("--cache-mb", sv.cache_mb, "--follow: row cache per PS shard of the checkpoint")
      ->check(CLI::Range(0.0, 1e7));
  srv->add_option("--poll-seconds", so.poll_seconds, "--follow: how often LATEST is read")
      ->check(CLI::Range(0.05, 3600.0));
  srv->add_option("--max-delta-rows", so.max_delta_rows,
                  "--follow: changed rows held in memory before the newest checkpoint is opened "
                  "whole instead");
  srv->add_flag("--verify", so.verify, "--model: check every table file's CRC32C first");
  srv->add_option("--unknown", sv.unknown, "initial|zero: the row of an id the model lacks")
      ->check(CLI::IsMember({"initial", "zero"}));
  srv->add_option("--device", so.version.device, "cpu|cuda (default cpu)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  srv->add_option("--scorers", so.version.scorers, "requests scored at once (default 4)")
      ->check(CLI::Range(1, 256));
  srv->add_option("--max-concurrent", so.http.max_concurrent,
                  "predict requests in flight; more are answered 503 (default 8)")
      ->check(CLI::Range(1, 4096));
  srv->add_option("--max-instances", so.http.max_instances,
                  "instances per request; more are answered 413 (default 4096)")
      ->check(CLI::Range(1, 1 << 20));
  srv->add_option("--max-body-mb", sv.max_body_mb, "request body bound; more is answered 413")
      ->check(CLI::Range(0.001, 4096.0));
  srv->add_option("--read-timeout", so.http.read_timeout_seconds,
                  "seconds a client may stall while sending (default 10)")
      ->check(CLI::Range(1, 3600));
  srv->add_option("--token-file", sv.token_file,
                  "require \"Authorization: Bearer <token>\" (the file's content)")
      ->check(CLI::ExistingFile);
  srv->add_option("--tls-cert", so.http.tls_cert, "PEM certificate: serve HTTPS")
      ->check(CLI::ExistingFile);
  srv->add_option("--tls-key", so.http.tls_key, "PEM private key of --tls-cert")
      ->check(CLI::ExistingFile);
  srv->add_option("--log-level", sv.log_level, "trace|debug|info|warn|error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  ChecksumArgs sum;
  auto* checksum = app.add_subcommand(
      "checksum",
      "print a model_checksum: a checkpoint's, or a stopped job's (PS shards + dense.ckpt)");
  auto* sum_checkpoint = checksum->add_option(
      "--checkpoint", sum.checkpoint,
      "a checkpoint: checkpoint.dir (its LATEST) or one ckpt-<step> directory");
  checksum->add_flag(
      "--verify", sum.verify,
      "verify every file's CRC32C and sum every row against the kept sum (with --checkpoint)");
  checksum
      ->add_option("--config", sum.config_path,
                   "a stopped job's config: read its PS shards and output.dir/model/dense.ckpt")
      ->check(CLI::ExistingFile)
      ->excludes(sum_checkpoint);
  checksum->add_option("--set", sum.sets, "override a config key: key.path=value (repeatable)");
  checksum->add_option("--ps", sum.num_ps, "the job's number of PS shards (a `local` job)")
      ->check(CLI::Range(1, 256));
  checksum->add_option("--workers", sum.num_workers, "the job's number of workers (a `local` job)")
      ->check(CLI::Range(1, 256));
  checksum->add_flag("--sparse", sum.sparse,
                     "the embedding part only, from the PS shards (with --config)");
  KeysArgs keys_args;
  auto* keys = app.add_subcommand("keys", "generate the cluster's CURVE key material");
  keys->add_option("--out", keys_args.out, "directory for cluster.key (created 0700)")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }

  const char* tf = std::getenv("TF_CONFIG");
  const std::optional<std::string> tf_config = tf ? std::optional<std::string>(tf) : std::nullopt;
  if (app.got_subcommand("chief")) return tandem::chief::RunChief(chief, tf_config);
  // A member declared lost that nobody replaced comes back as a new process
  // (common/daemon/member.h).
  if (app.got_subcommand("ps") || app.got_subcommand("worker")) {
    const int status = app.got_subcommand("ps") ? tandem::ps::RunPs(ps, tf_config)
                                                : tandem::worker::RunWorker(worker, tf_config);
    return status == daemon::kRoleRejoin ? daemon::ExecAgainToRejoin(argv) : status;
  }
  if (app.got_subcommand("local")) return RunLocal(local);
  if (app.got_subcommand("status")) return RunStatus(status);
  if (app.got_subcommand("datagen")) {
    gen.vocab_given = gen_vocab->count() > 0;
    gen.zipf_given = gen_zipf->count() > 0;
    return RunDatagen(gen);
  }
  if (app.got_subcommand("convert")) return RunConvert(conv);
  if (app.got_subcommand("drill")) return RunDrill(drill_args);
  if (app.got_subcommand("keys")) return RunKeys(keys_args);
  if (app.got_subcommand("export")) return RunExport(ex);
  if (app.got_subcommand("predict")) return RunPredict(pr);
  if (app.got_subcommand("serve")) return RunServe(std::move(sv));
  if (app.got_subcommand("eval")) return RunEval(ev);
  if (app.got_subcommand("checksum")) {
    if (!sum.checkpoint.empty()) return RunCheckpointChecksum(sum);
    if (!sum.config_path.empty()) return RunChecksum(sum);
    std::fprintf(stderr, "tandem checksum: give --checkpoint DIR or --config JOB.yaml\n");
    return kExitUsage;
  }
  return kExitUsage;
}

}  // namespace
}  // namespace tandem::cli

int main(int argc, char** argv) {
  // Before anything else runs: it may execute the program again (blas_kernels.h).
  tandem::device::PinBlasKernels(argv);
  return tandem::cli::Main(argc, argv);
}
