#include "server/ps/ps_metrics.h"

#include <string>
#include <vector>

#include "server/ps/shard.h"

namespace tandem::ps {

using metrics::AddCount;
using metrics::AddGauge;
using Sample = metrics::Registry::Sample;

void AddPsMetrics(metrics::Registry* registry, Shard* shard) {
  registry->AddCollector([shard](std::vector<Sample>* out) {
    const ShardStats s = shard->stats();
    const StoreStats c = shard->store()->stats();
    AddGauge(out, "tandem_ps_applied_step", "The newest step the shard applied",
             static_cast<double>(shard->applied_step()));
    AddCount(out, "tandem_ps_pushes_logged_total", "Pushes written to the push log",
             s.pushes_logged);
    AddCount(out, "tandem_ps_duplicate_pushes_total", "Pushes already logged (acknowledged again)",
             s.duplicates);
    AddCount(out, "tandem_ps_steps_applied_total", "Steps applied", s.steps_applied);
    AddCount(out, "tandem_ps_rows_applied_total", "Rows updated by applied pushes", s.rows_applied);
    AddCount(out, "tandem_ps_rows_admitted_total",
             "Rows materialised on reaching admission.min_count", s.rows_admitted);
    AddCount(out, "tandem_ps_rows_not_admitted_total", "Row gradients dropped below min_count",
             s.rows_not_admitted);
    AddCount(out, "tandem_ps_rows_expired_total", "Rows treated as absent by eviction.ttl_steps",
             s.rows_expired);
    AddCount(out, "tandem_ps_restore_points_total", "Restore points taken", s.restore_points);
    // A full disk: pushes are refused (never acknowledged) until their records, and the rows
    // the store writes to RocksDB, can be written.
    const char* refused_help =
        "Pushes refused before anything of them was stored: their push-log record failed to "
        "write (no_space, io_error), or RocksDB refused the shard's rows (store_unwritable)";
    AddCount(out, "tandem_ps_pushes_refused_total", refused_help, s.pushes_refused_log_full,
             {{"reason", "no_space"}});
    AddCount(out, "tandem_ps_pushes_refused_total", refused_help, s.pushes_refused_log_error,
             {{"reason", "io_error"}});
    AddGauge(out, "tandem_ps_push_log_full", "1 while pushes are refused for lack of log space",
             s.push_log_full ? 1 : 0);
    AddCount(out, "tandem_ps_pushes_refused_total", refused_help, s.pushes_refused_store,
             {{"reason", "store_unwritable"}});
    AddGauge(out, "tandem_ps_store_unwritable",
             "1 while RocksDB refuses the shard's rows (a full disk): evicted rows stay in memory "
             "and pushes are refused",
             s.store_unwritable ? 1 : 0);
    AddGauge(out, "tandem_ps_replayed_records", "Log records replayed at the last recovery",
             static_cast<double>(s.replayed_records));
    AddGauge(out, "tandem_ps_push_log_bytes", "Bytes in the push-log segments",
             static_cast<double>(shard->push_log_bytes()));
    AddGauge(out, "tandem_ps_rows_cached", "Rows in the cache", static_cast<double>(c.cached_rows));
    AddGauge(out, "tandem_ps_cache_bytes", "Cache memory in use (slabs and index)",
             static_cast<double>(c.cache_bytes_used));
    AddCount(out, "tandem_ps_cache_hits_total", "Row reads served by the cache", c.hits);
    AddCount(out, "tandem_ps_cache_misses_total", "Row reads that went to RocksDB", c.misses);
    AddCount(out, "tandem_ps_cache_misses_known_absent_total",
             "Misses answered without RocksDB: a read had found the row absent, and nothing stored "
             "it since",
             c.misses_known_absent);
    AddCount(out, "tandem_ps_cache_misses_reread_total",
             "Misses read again alone, their batched read possibly older than a write since",
             c.rereads);
    AddCount(out, "tandem_ps_rows_evicted_total", "Rows evicted from the cache", c.evictions);
    AddCount(out, "tandem_ps_cache_writebacks_total", "Dirty rows written back to RocksDB",
             c.writebacks);
    AddCount(out, "tandem_ps_cache_written_ahead_total",
             "Dirty rows of a full cache written back ahead of eviction (ps.max_dirty_bytes)",
             c.written_ahead);
    AddGauge(out, "tandem_ps_cache_dirty_bytes", "Row bytes of the dirty rows in the cache",
             static_cast<double>(c.dirty_bytes));
    AddGauge(out, "tandem_ps_staged_rows", "Evicted dirty rows waiting for their key-ordered write",
             static_cast<double>(c.staged_rows));
    AddGauge(out, "tandem_ps_staged_bytes", "Memory of the stage of evicted dirty rows",
             static_cast<double>(c.staged_bytes));
    AddGauge(out, "tandem_ps_staged_peak_bytes",
             "The most row bytes the stage of evicted dirty rows has held at once",
             static_cast<double>(c.staged_peak_bytes));
    AddCount(out, "tandem_ps_stage_drains_total", "Key-ordered writes of the staged rows",
             c.drains);
    // estimate-table-readers-mem: RocksDB's memory for the SSTs' filters and indexes, a few KB
    // whatever the table's size, as they are read through mmap.
    for (const char* p : {"rocksdb.estimate-num-keys", "rocksdb.total-sst-files-size",
                          "rocksdb.cur-size-all-mem-tables", "rocksdb.num-running-compactions",
                          "rocksdb.estimate-table-readers-mem"})
      AddGauge(out, "tandem_ps_rocksdb", "RocksDB integer properties of the live DB",
               static_cast<double>(shard->store()->RocksIntProperty(p)), {{"property", p}});
  });
}

}  // namespace tandem::ps
