// What each daemon adds to its /metrics (issue 9; the RPC server adds requests and latencies per
// RPC itself): the chief's view of the job, a shard's store, cache and log, a worker's progress.
// Values are read at scrape time from the stats the modules keep anyway.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/metrics/prometheus.h"

namespace tandem::ps {
class Shard;
}
namespace tandem::chief {
class ChiefService;
}

namespace tandem::cli {

// Not owned; each must outlive the registry's scrapes.
void AddChiefMetrics(metrics::Registry* registry, const chief::ChiefService* chief);
void AddPsMetrics(metrics::Registry* registry, ps::Shard* shard);

// A worker's progress, updated by its training loop.
struct WorkerGauges {
  std::atomic<int64_t> step{-1};
  std::atomic<uint64_t> generation{0};
  std::atomic<double> samples_per_sec{0};
  std::atomic<uint64_t> recoveries{0};
};
void AddWorkerMetrics(metrics::Registry* registry, const WorkerGauges* gauges);

}  // namespace tandem::cli
