// `tandem drill --config JOB.yaml --faults SPEC [--reference DIR]` and every flag of `tandem
// local` (issue 7, DESIGN §6): runs the job with `tandem local` as a child process, fires each
// fault of SPEC (cli/drill_faults.h) when the job's step reaches it, measures per fault the time
// to detect and the recovery time, then runs the same job without faults (or reads a finished
// reference run) and compares the final AUC and, at k = 0, the model_checksums.
#pragma once

#include <string>

#include "cli/local_command.h"

namespace tandem::cli {

struct DrillArgs {
  LocalArgs local;        // the job, exactly as `tandem local` takes it
  std::string faults;     // --faults SPEC
  std::string reference;  // --reference DIR: a finished fault-free run's output.dir
  int poll_ms = 100;      // how often the chief's view is read
};

// Prints one row per fault and a summary and writes output.dir/drill.json. The faulty run's
// output goes to output.dir/drill-local.log. Without --reference the fault-free run writes to
// siblings of the job's directories (`<output.dir>-reference`, `<checkpoint.dir>-reference`,
// `<ps.data_dir>-reference`), which are removed first if they exist.
// Exit 0 when every fault recovered, the job ended with exit 0 and (at k = 0) the checksums are
// equal; 1 otherwise; 2 for a malformed --faults; 3 for a bad config.
int RunDrill(const DrillArgs& args);

}  // namespace tandem::cli
