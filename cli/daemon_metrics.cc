#include "cli/daemon_metrics.h"

#include <string>
#include <vector>

#include "server/chief/chief_service.h"
#include "server/ps/shard.h"

namespace tandem::cli {
namespace {

using Sample = metrics::Registry::Sample;

void Gauge(std::vector<Sample>* out, const std::string& name, const std::string& help, double v,
           metrics::Labels labels = {}) {
  out->push_back({name, help, "gauge", std::move(labels), v});
}
void Count(std::vector<Sample>* out, const std::string& name, const std::string& help, uint64_t v,
           metrics::Labels labels = {}) {
  out->push_back({name, help, "counter", std::move(labels), static_cast<double>(v)});
}

}  // namespace

void AddChiefMetrics(metrics::Registry* registry, const chief::ChiefService* chief) {
  registry->AddCollector([chief](std::vector<Sample>* out) {
    const chief::JobSnapshot j = chief->Snapshot();
    Gauge(out, "tandem_chief_term", "The chief's term", static_cast<double>(j.term));
    Gauge(out, "tandem_generation", "The job's generation", static_cast<double>(j.generation));
    Gauge(out, "tandem_timeline", "The job's timeline", static_cast<double>(j.timeline));
    Gauge(out, "tandem_job_step", "The lowest step completed by every worker",
          static_cast<double>(j.step));
    Gauge(out, "tandem_job_samples_per_second", "Training samples per second, all workers",
          j.samples_per_sec);
    Gauge(out, "tandem_last_checkpoint_step", "The newest committed checkpoint",
          static_cast<double>(j.last_checkpoint_step));
    // "up" counts every member present, whatever it reported.
    for (MemberState state : {MemberState::kUp, MemberState::kLost, MemberState::kStarting}) {
      double n = 0;
      for (const auto& m : j.members)
        n += state == MemberState::kUp ? IsPresent(m.state) : m.state == state;
      Gauge(out, "tandem_members", "PS and workers by state", n,
            {{"state", std::string(Name(state))}});
    }
  });
}

void AddPsMetrics(metrics::Registry* registry, ps::Shard* shard) {
  registry->AddCollector([shard](std::vector<Sample>* out) {
    const ps::ShardStats s = shard->stats();
    const ps::StoreStats c = shard->store()->stats();
    Gauge(out, "tandem_ps_applied_step", "The newest step the shard applied",
          static_cast<double>(shard->applied_step()));
    Count(out, "tandem_ps_pushes_logged_total", "Pushes written to the push log", s.pushes_logged);
    Count(out, "tandem_ps_duplicate_pushes_total", "Pushes already logged (acknowledged again)",
          s.duplicates);
    Count(out, "tandem_ps_steps_applied_total", "Steps applied", s.steps_applied);
    Count(out, "tandem_ps_rows_applied_total", "Rows updated by applied pushes", s.rows_applied);
    Count(out, "tandem_ps_rows_admitted_total", "Rows materialised on reaching admission.min_count",
          s.rows_admitted);
    Count(out, "tandem_ps_rows_not_admitted_total", "Row gradients dropped below min_count",
          s.rows_not_admitted);
    Count(out, "tandem_ps_rows_expired_total", "Rows treated as absent by eviction.ttl_steps",
          s.rows_expired);
    Count(out, "tandem_ps_restore_points_total", "Restore points taken", s.restore_points);
    // A full disk: pushes are refused (never acknowledged) until their records can be written.
    const char* refused_help = "Pushes refused because their push-log record failed to write";
    Count(out, "tandem_ps_pushes_refused_total", refused_help, s.pushes_refused_log_full,
          {{"reason", "no_space"}});
    Count(out, "tandem_ps_pushes_refused_total", refused_help, s.pushes_refused_log_error,
          {{"reason", "io_error"}});
    Gauge(out, "tandem_ps_push_log_full", "1 while pushes are refused for lack of log space",
          s.push_log_full ? 1 : 0);
    Gauge(out, "tandem_ps_replayed_records", "Log records replayed at the last recovery",
          static_cast<double>(s.replayed_records));
    Gauge(out, "tandem_ps_push_log_bytes", "Bytes in the push-log segments",
          static_cast<double>(shard->push_log_bytes()));
    Gauge(out, "tandem_ps_rows_cached", "Rows in the cache", static_cast<double>(c.cached_rows));
    Gauge(out, "tandem_ps_cache_bytes", "Cache memory in use (slabs and index)",
          static_cast<double>(c.cache_bytes_used));
    Count(out, "tandem_ps_cache_hits_total", "Row reads served by the cache", c.hits);
    Count(out, "tandem_ps_cache_misses_total", "Row reads that went to RocksDB", c.misses);
    Count(out, "tandem_ps_rows_evicted_total", "Rows evicted from the cache", c.evictions);
    Count(out, "tandem_ps_cache_writebacks_total", "Dirty rows written back to RocksDB",
          c.writebacks);
    for (const char* p : {"rocksdb.estimate-num-keys", "rocksdb.total-sst-files-size",
                          "rocksdb.cur-size-all-mem-tables", "rocksdb.num-running-compactions"})
      Gauge(out, "tandem_ps_rocksdb", "RocksDB integer properties of the live DB",
            static_cast<double>(shard->store()->RocksIntProperty(p)), {{"property", p}});
  });
}

void AddWorkerMetrics(metrics::Registry* registry, const WorkerGauges* g) {
  registry->AddCollector([g](std::vector<Sample>* out) {
    Gauge(out, "tandem_worker_step", "The last step this worker completed",
          static_cast<double>(g->step.load()));
    Gauge(out, "tandem_generation", "The generation of this worker's all-reduce group",
          static_cast<double>(g->generation.load()));
    Gauge(out, "tandem_worker_samples_per_second", "This worker's share of the global rate",
          g->samples_per_sec.load());
    Count(out, "tandem_worker_recoveries_total", "Roll-forward recoveries taken part in",
          g->recoveries.load());
  });
}

}  // namespace tandem::cli
