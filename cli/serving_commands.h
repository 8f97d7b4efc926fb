// `tandem export`, `tandem predict` and `tandem eval`: a trained model out of its checkpoint
// (offline/bundle.h), and scored on a data file with the trainer's own evaluator and model code
// (worker/frozen_model.h), so the figures equal the trainer's eval of that model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::cli {

struct ExportArgs {
  std::string checkpoint;  // checkpoint.dir (its LATEST) or one ckpt-<step> directory
  std::string out;         // the bundle directory to create
  int64_t since = -1;      // >= 0: a delta bundle of the rows changed after this step
  std::string log_level = "warn";
};

struct PredictArgs {
  std::string model;                // a bundle directory
  std::string data;                 // a Criteo TSV or binary file (or a glob of them)
  std::string out;                  // scores file; empty: stdout
  std::string unknown = "initial";  // initial | zero: the row of an id the bundle lacks
  std::string format = "auto";      // auto | criteo | text | binary
  std::string device;               // cpu | cuda; empty: cpu
  double max_bad_fraction = -1;     // < 0: the bundle config's data.max_bad_fraction
  std::string log_level = "warn";
};

struct EvalArgs {
  std::string checkpoint;         // checkpoint.dir (its LATEST) or one ckpt-<step> directory
  std::string config_path;        // optional: its data.* (and train.device, train.threads) are used
  std::vector<std::string> sets;  // --set key.path=value, applied to config_path
  std::string log_level = "warn";
};

// Writes the bundle of a committed checkpoint, every file of which is verified (CRC32C) first.
// Prints a summary on stderr. Exit 0; 2 when --out exists and is not an empty directory; 3 when
// there is no intact checkpoint (the bad file named); 1 for I/O errors.
int RunExport(const ExportArgs& args);

// Scores every record of --data with the bundle's model, one line per record in file order:
// the click probability as "%.9g" (which reads back as the same float), or "nan" for a
// malformed record. The scores go to --out (written whole, then renamed into place) or stdout.
// Then one JSON object on stderr: records, malformed, samples, auc, logloss (over the
// well-formed records; null when undefined), unknown_ids (lookups of ids the bundle lacks, each
// distinct id once per batch of records).
// Exit 0; 3 for a corrupt bundle (the file named), unreadable data, or malformed records above
// data.max_bad_fraction; 1 for I/O errors.
int RunPredict(const PredictArgs& args);

// Evaluates a checkpoint on the eval data of --config (or of the checkpoint's own config) and
// prints one JSON object on stdout: step, auc, logloss, samples (and teacher_auc on synthetic
// data). Exit codes as RunPredict's.
int RunEval(const EvalArgs& args);

}  // namespace tandem::cli
