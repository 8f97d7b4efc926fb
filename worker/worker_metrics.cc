#include "worker/worker_metrics.h"

#include <string>
#include <vector>

namespace tandem::worker {

using metrics::AddCount;
using metrics::AddGauge;
using Sample = metrics::Registry::Sample;

void AddWorkerMetrics(metrics::Registry* registry, const WorkerGauges* g) {
  registry->AddCollector([g](std::vector<Sample>* out) {
    AddGauge(out, "tandem_worker_step", "The last step this worker completed",
             static_cast<double>(g->step.load()));
    AddGauge(out, "tandem_generation", "The generation of this worker's all-reduce group",
             static_cast<double>(g->generation.load()));
    AddGauge(out, "tandem_worker_samples_per_second", "This worker's share of the global rate",
             g->samples_per_sec.load());
    AddCount(out, "tandem_worker_recoveries_total", "Roll-forward recoveries taken part in",
             g->recoveries.load());
  });
}

}  // namespace tandem::worker
