#include "cli/data_commands.h"

#include <cstdio>
#include <optional>

#include "common/config/job_config.h"
#include "common/exit_codes.h"
#include "worker/data/binary_format.h"
#include "worker/data/record_source.h"
#include "worker/data/synthetic.h"
#include "worker/data/text_format.h"

namespace tandem::cli {
namespace {

StatusOr<config::JobConfig> LoadJob(const std::string& path, const std::vector<std::string>& sets) {
  if (path.empty()) return config::JobConfig{};
  std::vector<config::Override> overrides;
  for (const auto& s : sets) overrides.push_back({s});
  return config::LoadJobConfig(path, overrides);
}

}  // namespace

int RunDatagen(const DatagenArgs& args) {
  if (args.rows < 1 || args.vocab < 1 || !(args.zipf > 0)) {
    std::fprintf(stderr, "tandem datagen: --rows and --vocab must be >= 1 and --zipf > 0\n");
    return kExitUsage;
  }
  auto job = LoadJob(args.config_path, args.sets);
  if (!job.ok()) {
    std::fprintf(stderr, "tandem datagen: %s\n", job.status().message().c_str());
    return kExitInvalid;
  }
  data::SyntheticSpec spec;
  spec.seed = args.seed;
  spec.vocab = args.vocab;
  spec.zipf = args.zipf;
  spec.stream = args.stream == "eval" ? 1 : 0;
  if (!args.config_path.empty()) {
    spec.schema = data::SchemaFromConfig(*job);
    if (!args.vocab_given) spec.vocab = job->data.synthetic_vocab;
    if (!args.zipf_given) spec.zipf = job->data.synthetic_zipf;
    spec.teacher = data::TeacherFromName(job->data.synthetic_teacher);
    spec.task_correlation = job->data.synthetic_task_correlation;
  }
  if (args.format == "criteo" && !spec.schema.single_hot()) {
    std::fprintf(stderr,
                 "tandem datagen: Criteo TSV holds one label and one unweighted id per feature; "
                 "use --format text or binary for %s's schema\n",
                 args.config_path.c_str());
    return kExitUsage;
  }
  StatusOr<std::vector<double>> aucs = std::vector<double>{};
  if (args.format == "binary") {
    aucs = data::WriteSyntheticBinaryTasks(args.out, spec, args.rows);
  } else if (args.format == "text") {
    auto layout = data::TextLayout::FromConfig(*job);
    if (!layout.ok()) {
      std::fprintf(stderr, "tandem datagen: %s\n", layout.status().message().c_str());
      return kExitInvalid;
    }
    aucs = data::WriteSyntheticText(args.out, spec, *layout, args.rows);
  } else {
    auto auc = data::WriteSyntheticCriteo(args.out, spec, args.rows);
    aucs = auc.ok() ? StatusOr<std::vector<double>>(std::vector<double>{*auc})
                    : StatusOr<std::vector<double>>(auc.status());
  }
  if (!aucs.ok()) {
    std::fprintf(stderr, "tandem datagen: %s\n", aucs.status().ToString().c_str());
    return kExitRuntimeFailure;
  }
  std::printf("wrote %lld %s rows (%s stream, seed %llu) to %s", static_cast<long long>(args.rows),
              args.format.c_str(), args.stream.c_str(), static_cast<unsigned long long>(args.seed),
              args.out.c_str());
  if (aucs->size() == 1) {
    std::printf("; teacher AUC %.4f (the best achievable)\n", (*aucs)[0]);
    return kExitOk;
  }
  // One line per task, so each label's bar can be read (and grepped) on its own.
  std::printf("; teacher AUC per label (the best achievable):\n");
  for (size_t t = 0; t < aucs->size(); ++t) {
    std::printf("teacher AUC %s %.4f\n", job->data.labels[t].c_str(), (*aucs)[t]);
  }
  return kExitOk;
}

int RunConvert(const ConvertArgs& args) {
  auto job = LoadJob(args.config_path, args.sets);
  if (!job.ok()) {
    std::fprintf(stderr, "tandem convert: %s\n", job.status().message().c_str());
    return kExitInvalid;
  }
  const data::Schema schema =
      args.config_path.empty() ? data::Schema{} : data::SchemaFromConfig(*job);
  std::string from = args.from;
  if (from.empty()) {
    from = !args.config_path.empty() &&
                   (job->data.format == "text" || data::BinaryVersionFor(schema) != 1)
               ? "text"
               : "criteo";
  }
  std::optional<data::TextLayout> layout;
  if (from == "text") {
    auto l = data::TextLayout::FromConfig(*job);
    if (!l.ok()) {
      std::fprintf(stderr, "tandem convert: %s\n", l.status().message().c_str());
      return kExitInvalid;
    }
    layout = *l;
  }
  auto r = data::Convert(args.in, args.out, schema, layout ? &*layout : nullptr);
  if (!r.ok()) {
    std::fprintf(stderr, "tandem convert: %s\n", r.status().ToString().c_str());
    return ExitCodeFor(r.status());
  }
  for (const auto& line : r->bad_reports)
    std::fprintf(stderr, "tandem convert: bad line %s\n", line.c_str());
  std::printf("converted %lld lines (%lld malformed, kept as weight-0 records) to %s\n",
              static_cast<long long>(r->rows), static_cast<long long>(r->bad_rows),
              args.out.c_str());
  return kExitOk;
}

}  // namespace tandem::cli
