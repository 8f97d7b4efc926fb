// The chief's /metrics (issue 9): its view of the job, read at scrape time from the snapshot the
// chief keeps anyway. The RPC server adds requests and latencies per RPC itself.
#pragma once

#include "common/metrics/prometheus.h"

namespace tandem::chief {

class ChiefService;

// `chief` is not owned and must outlive the registry's scrapes.
void AddChiefMetrics(metrics::Registry* registry, const ChiefService* chief);

}  // namespace tandem::chief
