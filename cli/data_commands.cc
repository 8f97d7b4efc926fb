#include "cli/data_commands.h"

#include <cstdio>

#include "common/exit_codes.h"
#include "worker/data/binary_format.h"
#include "worker/data/synthetic.h"

namespace tandem::cli {

int RunDatagen(const DatagenArgs& args) {
  if (args.rows < 1 || args.vocab < 1 || !(args.zipf > 0)) {
    std::fprintf(stderr, "tandem datagen: --rows and --vocab must be >= 1 and --zipf > 0\n");
    return kExitUsage;
  }
  data::SyntheticSpec spec;
  spec.seed = args.seed;
  spec.vocab = args.vocab;
  spec.zipf = args.zipf;
  spec.stream = args.stream == "eval" ? 1 : 0;
  auto auc = args.format == "binary" ? data::WriteSyntheticBinary(args.out, spec, args.rows)
                                     : data::WriteSyntheticCriteo(args.out, spec, args.rows);
  if (!auc.ok()) {
    std::fprintf(stderr, "tandem datagen: %s\n", auc.status().ToString().c_str());
    return kExitRuntimeFailure;
  }
  std::printf(
      "wrote %lld %s rows (%s stream, seed %llu) to %s; teacher AUC %.4f (the best "
      "achievable)\n",
      static_cast<long long>(args.rows), args.format.c_str(), args.stream.c_str(),
      static_cast<unsigned long long>(args.seed), args.out.c_str(), *auc);
  return kExitOk;
}

int RunConvert(const ConvertArgs& args) {
  auto r = data::Convert(args.in, args.out);
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
