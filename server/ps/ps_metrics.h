// A shard's /metrics (issue 9): its store, cache and push log, read at scrape time from the
// stats the shard keeps anyway.
#pragma once

#include "common/metrics/prometheus.h"

namespace tandem::ps {

class Shard;

// `shard` is not owned and must outlive the registry's scrapes.
void AddPsMetrics(metrics::Registry* registry, Shard* shard);

}  // namespace tandem::ps
