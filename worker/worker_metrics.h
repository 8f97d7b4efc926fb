// A worker's /metrics (issue 9): its progress, updated by its training loop and read at scrape
// time.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/metrics/prometheus.h"

namespace tandem::worker {

struct WorkerGauges {
  std::atomic<int64_t> step{-1};
  std::atomic<uint64_t> generation{0};
  std::atomic<double> samples_per_sec{0};
  std::atomic<uint64_t> recoveries{0};
};

// `gauges` is not owned and must outlive the registry's scrapes.
void AddWorkerMetrics(metrics::Registry* registry, const WorkerGauges* gauges);

}  // namespace tandem::worker
