#!/usr/bin/env bash
# Scale benchmark (issue "Huge tables for real", item 6): a whole `tandem local` job (2 PS x 2
# workers, k = 0, batch 1024 per worker) on binary Zipf data, once with every row of the table
# in the PS caches and once each with caches of about 1/10 and 1/100 of the table, so the cost of
# a table far larger than memory is measured end to end (pulls that miss, writebacks, RocksDB
# compactions, checkpoints of a big live DB, the end of the job).
#
# Usage: bench/scale_bench.sh [--vocab V] [--zipf Z] [--batch B] [--rows R] [--steps S]
#                             [--reps N] [--out DIR] [--eval-rows E] [--ckpt-every C]
#                             [--set KEY=VALUE]... [--cache-bytes C] [--ps-memory-max M]
#                             [--keep]
#   (or scripts/bench.sh scale -- ARGS). Defaults: vocab 20000000 ids per field, Zipf 1.05,
#   batch 1024 per worker, rows = one pass over the data (steps x 2 x batch), 1200 steps,
#   1 rep, out/scale_bench, 20000 eval rows, a checkpoint every steps/4 steps. --set adds a
#   job override to every run (e.g. checkpoint.final_part=full). --cache-bytes runs one job
#   with C bytes of cache per shard instead of the three ratios, and prints one line
#   (scale_job; bench/end_of_job_bench.sh compares table sizes with it).
#   --ps-memory-max puts each PS of a run with a bounded cache in a memory cgroup of M bytes
#   (root; cgroup v1, or v2 where this shell may make a child group): its own memory and the page
#   cache it touches (RocksDB's SSTs, its logs) together, so a table larger than M is read back
#   from disk as on a host whose memory is smaller than the table. Without it the page cache
#   holds the whole table. The all-in-cache run is never bounded.
#   A quick run: --vocab 200000 --rows 200000 --steps 200.
#   TANDEM=path/to/tandem overrides the binary (default ${BUILD_DIR:-build}/cli/tandem).
#
# Prints one JSON line per cache setting (medians over --reps), then one line of samples/s
# ratios against the all-in-cache run; progress goes to stderr. How each figure is measured:
#   samples_per_sec    median of metrics.jsonl's step lines (a window of log_every_steps each),
#                      the first 20% of them left out as warm-up; mean_samples_per_sec is the
#                      global samples of that steady part over its wall time.
#   table_bytes        rows stored (`tandem checksum` of the all-in-cache run) x row bytes
#                      (RowMeta 16 B + embedding and adagrad accumulator, 2 x dim floats); the
#                      caches of the other runs are ratio x table_bytes / PS, per shard.
#   cache_bytes        ps.cache_bytes x PS; for the all-in-cache run 1 TiB per shard, a bound
#                      no run here reaches (its evictions, 0, show that every row stayed).
#   ps_peak_rss_bytes  the largest VmHWM of a `tandem ps` process (pids from cluster.json),
#                      read from /proc every 0.25 s while the job runs; it includes the SST
#                      pages RocksDB maps (page cache). ps_peak_anon_bytes: the largest
#                      RssAnon seen, the PS's own memory (cache, memtables, buffers).
#   cache figures      the PS shards' Prometheus /metrics (metrics.port 0), scraped while the
#                      job runs (every 1.5 s) and summed over shards; the last scrape is < 2 s
#                      before the end.
#   *_dir_bytes        du -sb of ps.data_dir and checkpoint.dir after the job.
#   checkpoint_s       worker 0's "checkpoint of step N written in X s" (median, and max): the
#                      background write; checkpoint_held_s its "training held X s" (median).
#   final_checkpoint_s worker 0's write time of the last step's checkpoint, and
#                      final_checkpoint_copied_bytes what the shards copied for it: a delta
#                      part's change log since the previous checkpoint, or a full part's SSTs
#                      compaction wrote since then (the rest is shared); final_delta_parts is
#                      how many shards sent a delta part (the cheaper of the two).
#   end_of_job_s       from the wall_time of the last step's metrics line to `tandem local`
#                      exiting (taken by the shell right after it returns): the final
#                      checkpoint, the final eval, the model checksum, the members leaving. final_line_to_exit_s is the part after the final line,
#                      chief_exit_to_exit_s the part after the chief's last log line.
#                      last_apply_to_exit_s is from the later shard's log line that it applied
#                      the job's last step to the exit: always with the final restore point.
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
# Paths the caller gave are relative to where it ran; the defaults to the repository.
from_caller() { if [[ $1 == /* ]]; then echo "$1"; else echo "$caller/$1"; fi; }

vocab=20000000 rows=0 steps=1200 reps=1 out=out/scale_bench eval_rows=20000 ckpt_every=0
keep=0 extra_sets=() ZIPF=1.05 BATCH=1024 fixed_cache=0 ps_memory_max=0
usage() { sed -n '8,25p' "$0" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }
while (($# > 0)); do
  case $1 in
    --vocab) vocab=$2; shift 2 ;;
    --zipf) ZIPF=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --cache-bytes) fixed_cache=$2; shift 2 ;;
    --ps-memory-max) ps_memory_max=$2; shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --out) out=$(from_caller "$2"); shift 2 ;;
    --eval-rows) eval_rows=$2; shift 2 ;;
    --ckpt-every) ckpt_every=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --set) extra_sets+=("$2"); shift 2 ;;
    -h | --help) usage 0 ;;
    *) echo "scale_bench: unknown argument '$1'" >&2; usage ;;
  esac
done
for n in "$vocab" "$rows" "$steps" "$reps" "$eval_rows" "$ckpt_every" "$BATCH" "$fixed_cache" "$ps_memory_max"; do
  [[ $n =~ ^[0-9]+$ ]] || { echo "scale_bench: '$n' is not a number" >&2; exit 2; }
done
((steps >= 1 && reps >= 1 && vocab >= 1 && BATCH >= 1)) ||
  { echo "scale_bench: need steps, reps, vocab, batch >= 1" >&2; exit 2; }
[[ $ZIPF =~ ^[0-9]*\.?[0-9]+$ ]] || { echo "scale_bench: --zipf '$ZIPF' is not a number" >&2; exit 2; }
readonly ZIPF BATCH

readonly PS=2 WORKERS=2 DIM=16
readonly ROW_BYTES=$((16 + 4 * 2 * DIM))  # TableSpec::row_bytes() for adagrad
# "Whole table in memory": a budget no job here reaches (cache memory is allocated as rows
# arrive, so this costs nothing); the run's evictions (0) show that it held every row.
readonly UNBOUNDED_CACHE=$((1 << 40))
((rows > 0)) || rows=$((steps * WORKERS * BATCH))
((ckpt_every > 0)) || ckpt_every=$(((steps + 3) / 4))
if [[ -n ${TANDEM:-} ]]; then TANDEM=$(from_caller "$TANDEM"); else TANDEM=${BUILD_DIR:-build}/cli/tandem; fi
[[ -x $TANDEM ]] || { echo "scale_bench: no tandem binary at $TANDEM (build first)" >&2; exit 2; }
TANDEM=$(realpath "$TANDEM")
unset TF_CONFIG
mkdir -p "$out"
out=$(realpath "$out")
log() { echo "scale_bench: $*" >&2; }

# --- data: generated once per (vocab, rows), kept for later invocations ---------------------
source bench/bench_data.sh

# --- helpers ------------------------------------------------------------------------------
now() { date +%s.%N; }
# The median of the numbers on stdin, one a line; null when there are none.
median() {
  sort -g | awk 'NF {v[++n] = $1}
    END {if (n == 0) print "null"; else if (n % 2) print v[(n + 1) / 2]; else print (v[n / 2] + v[n / 2 + 1]) / 2}'
}
# The number after "KEY": in one JSON line (nlohmann's dump: no spaces).
json_num() { sed -n "s/.*\"$1\": *\(-\{0,1\}[0-9][0-9.eE+-]*\).*/\1/p" <<<"$2"; }
json_str() { sed -n "s/.*\"$1\": *\"\([^\"]*\)\".*/\1/p" <<<"$2"; }

# metrics.jsonl's step lines in order, lines a recovery replayed left out.
step_lines() { { grep samples_per_sec "$1" 2>/dev/null || true; } | { grep -v '"replay"' || true; }; }

# --ps-memory-max: the group this shell is in (CG_BASE), under which each bounded PS gets a
# group of its own, and the names of the limit and peak files there; exits if it cannot make
# one.
cg_setup() {
  local p
  p=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3; exit}' /proc/self/cgroup)
  if [[ -n $p && -d /sys/fs/cgroup/memory$p ]]; then
    CG_BASE=/sys/fs/cgroup/memory${p%/} CG_LIMIT=memory.limit_in_bytes CG_PEAK=memory.max_usage_in_bytes CG_V1=1
  else
    p=$(awk -F: '$1 == 0 {print $3; exit}' /proc/self/cgroup)
    CG_BASE=/sys/fs/cgroup${p%/} CG_LIMIT=memory.max CG_PEAK=memory.peak CG_V1=0
  fi
  local probe=$CG_BASE/tandem-scale-$$-probe
  if ! mkdir "$probe" 2>/dev/null || [[ ! -f $probe/$CG_LIMIT ]] ||
    ! echo "$ps_memory_max" 2>/dev/null >"$probe/$CG_LIMIT"; then
    rmdir "$probe" 2>/dev/null || true
    log "--ps-memory-max needs a memory cgroup this shell may make groups under ($CG_BASE): root, and on cgroup v2 the memory controller enabled for its children"
    exit 2
  fi
  rmdir "$probe"
}
# Moves PS number I (pid PID) into its group, made with the limit on first use.
cg_join() {  # I PID
  local g=$CG_BASE/tandem-scale-$$-ps$1
  if [[ ! -d $g ]]; then
    mkdir "$g" && echo "$ps_memory_max" >"$g/$CG_LIMIT" || return 1
    # v1 leaves what a task touched before the move charged to its old group unless asked.
    if ((CG_V1)); then echo 3 2>/dev/null >"$g/memory.move_charge_at_immigrate" || true; fi
  fi
  echo "$2" 2>/dev/null >"$g/cgroup.procs"
}
# The largest peak of the PS groups (bytes; null if none), and the groups removed.
cg_finish() {
  local i g v peak=null
  for ((i = 0; i < PS; i++)); do
    g=$CG_BASE/tandem-scale-$$-ps$i
    [[ -d $g ]] || continue
    v=$(cat "$g/$CG_PEAK" 2>/dev/null || true)
    if [[ $v =~ ^[0-9]+$ ]] && { [[ $peak == null ]] || ((v > peak)); }; then peak=$v; fi
    rmdir "$g" 2>/dev/null || log "could not remove the cgroup $g"
  done
  echo "$peak"
}

# One HTTP/1.0 GET of a shard's /metrics with bash's /dev/tcp (no curl needed); keeps the
# counters this benchmark reports in the named associative array.
scrape() {  # PORT ARRAY
  local -n into=$2
  local fd line name value
  # The braces keep the 2>/dev/null from becoming the shell's own stderr (exec would make it so).
  { exec {fd}<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
  printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&"$fd"
  # One grep reads the reply in large reads and keeps the few lines wanted. bash's `read` from a
  # socket makes a system call a byte: a scrape of the 9 KB page cost ~58 ms of CPU, 7-8 % of
  # this 2-core machine at two shards every 0.75 s, taken from the job being measured (`perf`
  # put the benchmark's bash at ~6 % of a 1/57-of-the-table job; 2026-12-06). Now ~27 ms, the
  # two forks of timeout and grep.
  local lines
  lines=$(timeout 5 grep -E '^tandem_ps_(rows_evicted_total|cache_hits_total|cache_misses_total|cache_bytes|rows_cached|cache_writebacks_total|cache_written_ahead_total) ' <&"$fd" || true)
  exec {fd}>&-
  local got=0
  while IFS= read -r line; do  # only the wanted lines are left
    [[ -n $line ]] || continue
    line=${line%$'\r'}
    name=${line%% *} value=${line##* }
    into[$name]=$value got=1
    if [[ $name == tandem_ps_cache_bytes && $value =~ ^[0-9]+$ ]] &&
      ((value > ${into[cache_bytes_max]:-0})); then
      into[cache_bytes_max]=$value
    fi
  done <<<"$lines"
  ((got))
}

# The job's --set overrides (into SETS) for a run under DIR with CACHE bytes per shard.
job_sets() {  # DIR CACHE
  local dir=$1 cache=$2
  SETS=(
    model.embedding_dim=$DIM "model.bottom_mlp=[64,$DIM]" tables.default.optimizer=adagrad
    data.format=binary "data.train=$train_file" "data.eval=$eval_file"
    train.steps=$steps train.batch_size=$BATCH train.embedding_staleness=0
    train.eval_every_steps=0 train.log_every_steps=10
    ps.storage=rocksdb ps.cache_bytes=$cache "ps.data_dir=$dir/ps"
    "checkpoint.dir=$dir/ckpt" checkpoint.every_steps=$ckpt_every checkpoint.resume=never
    "output.dir=$dir/out" metrics.port=0
    ${extra_sets[@]+"${extra_sets[@]}"}
  )
}

# Runs the job once with CACHE bytes per shard under DIR; writes DIR/result (KEY=VALUE lines).
# BOUND 1: each PS in a memory cgroup of ps_memory_max bytes.
run_job() {  # DIR CACHE BOUND
  local dir=$1 cache=$2 bound=${3:-0}
  rm -rf "$dir"
  mkdir -p "$dir"
  job_sets "$dir" "$cache"
  local argv=("$TANDEM" local --config configs/local.yaml --ps $PS --workers $WORKERS)
  for s in "${SETS[@]}"; do argv+=(--set "$s"); done
  printf '%q ' "${argv[@]}" >"$dir/command"
  local t0
  t0=$(now)
  # The exit time is taken in the same subshell as the job, so it is not quantised by the poll.
  ( set +e; "${argv[@]}" >"$dir/local.log" 2>&1; rc=$?; now >"$dir/exit_time"; exit $rc ) &
  local job=$!

  declare -A hwm=() anon=() port=() m0=() m1=() moved=()
  local polls=0 i pid k v
  local re='"pid": ([0-9]+),[^}]*"task": "ps:([0-9]+)"'
  while kill -0 "$job" 2>/dev/null; do
    sleep 0.25
    polls=$((polls + 1))
    [[ -f $dir/out/cluster.json ]] || continue
    local c
    c=$(<"$dir/out/cluster.json") || continue
    c=${c//$'\n'/ }
    while [[ $c =~ $re ]]; do
      pid=${BASH_REMATCH[1]} i=${BASH_REMATCH[2]}
      c=${c#*"${BASH_REMATCH[0]}"}
      [[ -r /proc/$pid/status ]] || continue
      if ((bound)) && [[ ${moved[$i]:-} != "$pid" ]]; then
        cg_join "$i" "$pid" && moved[$i]=$pid || log "could not move ps:$i ($pid) into its cgroup"
      fi
      while read -r k v _; do
        if [[ $k == VmHWM: ]] && ((v * 1024 > ${hwm[$i]:-0})); then hwm[$i]=$((v * 1024)); fi
        if [[ $k == RssAnon: ]] && ((v * 1024 > ${anon[$i]:-0})); then anon[$i]=$((v * 1024)); fi
      done <"/proc/$pid/status" 2>/dev/null || true
    done
    if ((polls % 6 == 0)); then  # /metrics about every 1.5 s (a scrape costs ~27 ms of CPU)
      for ((i = 0; i < PS; i++)); do
        if [[ -z ${port[$i]:-} ]]; then
          port[$i]=$(sed -n 's|.*metrics on http://[^:]*:\([0-9]*\)/metrics.*|\1|p' \
            "$dir/out/logs/ps-$i.log" 2>/dev/null | tail -1)
          [[ -n ${port[$i]} ]] || continue
        fi
        if ((i == 0)); then scrape "${port[$i]}" m0 || port[$i]=""; else scrape "${port[$i]}" m1 || port[$i]=""; fi
      done
    fi
  done
  local rc=0
  wait "$job" || rc=$?
  local t_exit
  t_exit=$(<"$dir/exit_time")

  local metrics="$dir/out/metrics.jsonl" final="" last_step=""
  if [[ -f $metrics ]]; then
    final=$(grep '"final":true' "$metrics" | tail -1 || true)
    last_step=$( (grep "\"step\":$((steps - 1))," "$metrics" || true) | grep samples_per_sec | tail -1 || true)
  fi
  local checksum auc sps mean_sps
  checksum=$(json_str model_checksum "$final")
  auc=$(json_num auc "$final")
  # Step lines in order; the first 20% are warm-up (cold caches, first compactions).
  sps=$(step_lines "$metrics" |
    sed 's/.*"samples_per_sec":\([^,}]*\).*/\1/' |
    awk '{v[NR] = $1} END {for (i = int(NR / 5) + 1; i <= NR; i++) print v[i]}' | median || true)
  mean_sps=$(step_lines "$metrics" |
    sed 's/.*"step":\([0-9]*\).*"wall_time":\([0-9.e+]*\).*/\1 \2/' |
    awk -v gb=$((WORKERS * BATCH)) '{s[NR] = $1; w[NR] = $2}
      END {a = int(NR / 5) + 1; if (NR - a < 1 || w[NR] <= w[a]) print 0;
           else printf "%.1f\n", (s[NR] - s[a]) * gb / (w[NR] - w[a])}' || true)
  local ckpts ckpt_med ckpt_max
  ckpts=$(sed -n 's/.*checkpoint of step [0-9]* written in \([0-9.]*\) s.*/\1/p' \
    "$dir/out/logs/worker-0.log" 2>/dev/null || true)
  ckpt_med=$(median <<<"$ckpts")
  local held
  held=$(sed -n 's/.*checkpoint of step [0-9]*: training held \([0-9.]*\) s.*/\1/p' \
    "$dir/out/logs/worker-0.log" 2>/dev/null | median || true)
  ckpt_max=$(sort -g <<<"$ckpts" | tail -1)
  # The final checkpoint: its write time, and the bytes the shards copied into checkpoint.dir
  # (SSTs compaction wrote since the previous checkpoint), which the end of the job waits for.
  local final_ckpt_s final_copied=0 final_deltas=0 b
  final_ckpt_s=$(sed -n "s/.*checkpoint of step $((steps - 1)) written in \([0-9.]*\) s.*/\1/p" \
    "$dir/out/logs/worker-0.log" 2>/dev/null | tail -1 || true)
  for ((i = 0; i < PS; i++)); do
    b=$(sed -n "s/.*checkpoint part of step $((steps - 1)): [0-9]* files, [0-9]* copied (\([0-9]*\) bytes).*/\1/p" \
      "$dir/out/logs/ps-$i.log" 2>/dev/null | tail -1 || true)
    final_copied=$((final_copied + ${b:-0}))
    if grep -q "the final part is step [0-9]* plus" "$dir/out/logs/ps-$i.log" 2>/dev/null; then
      final_deltas=$((final_deltas + 1))
    fi
  done
  local end_s="" final_s=""
  if [[ -n $last_step ]]; then
    end_s=$(awk -v a="$t_exit" -v b="$(json_num wall_time "$last_step")" 'BEGIN {printf "%.3f", a - b}')
  fi
  if [[ -n $final ]]; then
    final_s=$(awk -v a="$t_exit" -v b="$(json_num wall_time "$final")" 'BEGIN {printf "%.3f", a - b}')
  fi
  # From the later shard's apply of the last step: unlike end_of_job_s, it always holds the
  # final restore point, which falls before or after the last metrics line by chance (it is
  # cut in the apply of the push that completes the step, whichever rank sent it).
  local apply_s="" t_apply="" ts
  for ((i = 0; i < PS; i++)); do
    ts=$( (grep -h "is the job's last" "$dir/out/logs/ps-$i.log" 2>/dev/null || true) | tail -1 | cut -d' ' -f1)
    if [[ -n $ts ]] && ts=$(date -d "$ts" +%s.%N 2>/dev/null); then
      if [[ -z $t_apply ]] || awk -v a="$ts" -v b="$t_apply" 'BEGIN {exit !(a > b)}'; then t_apply=$ts; fi
    fi
  done
  if [[ -n $t_apply ]]; then
    apply_s=$(awk -v a="$t_exit" -v b="$t_apply" 'BEGIN {printf "%.3f", a - b}')
  fi
  # The chief's last log line ("stopped: ...") is local time, as GNU date reads it.
  local chief_s="" ts
  ts=$( (grep -h 'stopped:' "$dir/out/logs/chief-0.log" 2>/dev/null || true) | tail -1 | cut -d' ' -f1)
  if [[ -n $ts ]] && ts=$(date -d "$ts" +%s.%N 2>/dev/null); then
    chief_s=$(awk -v a="$t_exit" -v b="$ts" 'BEGIN {printf "%.3f", a - b}')
  fi
  local peak=0
  for v in "${hwm[@]}"; do if ((v > peak)); then peak=$v; fi; done
  local peak_anon=0
  for v in "${anon[@]}"; do if ((v > peak_anon)); then peak_anon=$v; fi; done
  sum2() {  # KEY: summed over the shards; null when no scrape ever answered
    if [[ -z ${m0[$1]:-}${m1[$1]:-} ]]; then echo null; return; fi
    awk -v a="${m0[$1]:-0}" -v b="${m1[$1]:-0}" 'BEGIN {printf "%.0f", a + b}'
  }
  local cg_peak=null
  if ((bound)); then cg_peak=$(cg_finish); fi
  local live=0
  for ((i = 0; i < PS; i++)); do
    if [[ -d $dir/ps/shard-$i/live ]]; then
      live=$((live + $(du -sb "$dir/ps/shard-$i/live" | cut -f1)))
    fi
  done
  {
    echo "rc=$rc"
    echo "job_s=$(awk -v a="$t_exit" -v b="$t0" 'BEGIN {printf "%.3f", a - b}')"
    echo "samples_per_sec=${sps:-0}"
    echo "mean_samples_per_sec=${mean_sps:-0}"
    echo "ps_peak_rss_bytes=$peak"
    echo "ps_peak_anon_bytes=$peak_anon"
    echo "ps_memory_max=$((bound ? ps_memory_max : 0))"
    echo "ps_cgroup_peak_bytes=$cg_peak"
    echo "ps_dir_bytes=$(du -sb "$dir/ps" 2>/dev/null | cut -f1)"
    echo "live_db_bytes=$live"
    echo "checkpoint_dir_bytes=$(du -sb "$dir/ckpt" 2>/dev/null | cut -f1)"
    echo "checkpoints=$(grep -c . <<<"$ckpts" || true)"
    echo "checkpoint_s=${ckpt_med:-null}"
    echo "checkpoint_max_s=${ckpt_max:-null}"
    echo "checkpoint_held_s=${held:-null}"
    echo "final_checkpoint_s=${final_ckpt_s:-null}"
    echo "final_checkpoint_copied_bytes=$final_copied"
    echo "final_delta_parts=$final_deltas"
    echo "end_of_job_s=${end_s:-null}"
    echo "final_line_to_exit_s=${final_s:-null}"
    echo "chief_exit_to_exit_s=${chief_s:-null}"
    echo "last_apply_to_exit_s=${apply_s:-null}"
    echo "auc=${auc:-null}"
    echo "model_checksum=${checksum:-none}"
    echo "evictions=$(sum2 tandem_ps_rows_evicted_total)"
    echo "writebacks=$(sum2 tandem_ps_cache_writebacks_total)"
    echo "written_ahead=$(sum2 tandem_ps_cache_written_ahead_total)"
    echo "cache_hits=$(sum2 tandem_ps_cache_hits_total)"
    echo "cache_misses=$(sum2 tandem_ps_cache_misses_total)"
    echo "cache_bytes_used_max=$(sum2 cache_bytes_max)"
    echo "rows_cached=$(sum2 tandem_ps_rows_cached)"
  } >"$dir/result"
  if ((rc != 0)) || [[ -z $final ]]; then
    log "$(basename "$dir"): tandem local exited $rc$([[ -z $final ]] && echo ", no final metrics line"); last lines of $dir/local.log:"
    tail -n 15 "$dir/local.log" >&2 || true
  fi
}

get() { sed -n "s/^$2=//p" "$1/result"; }

# The rows the stopped job under DIR stored (into table_rows, table_bytes), counted by
# `tandem checksum` on its shards, which also checks the final line's model_checksum.
count_rows() {  # DIR CACHE
  local dir=$1 sum_out first s
  job_sets "$dir" "$2"
  local sum_args=("$TANDEM" checksum --config configs/local.yaml --ps $PS --workers $WORKERS)
  for s in "${SETS[@]}"; do sum_args+=(--set "$s"); done
  sum_out=$("${sum_args[@]}" 2>&1 || true)
  table_rows=$(sed -n 's/^rows: \([0-9]*\).*/\1/p' <<<"$sum_out" | head -1)
  if [[ -z $table_rows || $table_rows == 0 ]]; then
    log "cannot count the table's rows: $sum_out"
    exit 1
  fi
  table_bytes=$((table_rows * ROW_BYTES))
  first=$(head -1 <<<"$sum_out")
  [[ $first == "$(get "$dir" model_checksum)" ]] ||
    log "WARNING: tandem checksum of the shards ($first) != the final line's ($(get "$dir" model_checksum))"
  log "table: $table_rows rows x $ROW_BYTES B = $table_bytes B ($(get "$dir" live_db_bytes) B of live RocksDB)"
}

# --- runs ---------------------------------------------------------------------------------
log "vocab $vocab, $rows rows, $steps steps x $WORKERS workers x batch $BATCH, $PS PS, checkpoint every $ckpt_every steps, $reps rep(s), in $out"
if ((ps_memory_max > 0)); then
  cg_setup
  # Groups of a run cut short: removed once their PS are gone (best effort).
  trap 'rmdir "$CG_BASE"/tandem-scale-$$-ps* 2>/dev/null || true' EXIT
  log "each PS of a run with a bounded cache in a memory cgroup of $ps_memory_max bytes under $CG_BASE"
fi
table_rows=0
table_bytes=0
failed=0
if ((fixed_cache > 0)); then
  # One job at a fixed cache: the figures of each rep, then one line of their medians.
  for ((rep = 1; rep <= reps; rep++)); do
    dir="$out/runs/cache-$fixed_cache-rep$rep"
    log "rep $rep: ps.cache_bytes=$fixed_cache per shard"
    run_job "$dir" "$fixed_cache" $((ps_memory_max > 0))
    if ((rep == 1)); then count_rows "$dir" "$fixed_cache"; fi
    [[ $(get "$dir" rc) == 0 ]] || failed=1
    log "  $(tr '\n' ' ' <"$dir/result")"
    ((keep)) || rm -rf "$dir/ps" "$dir/ckpt"
  done
  fmed() {  # KEY: the median over reps
    for ((rep = 1; rep <= reps; rep++)); do get "$out/runs/cache-$fixed_cache-rep$rep" "$1"; done |
      { grep -v -e '^null$' -e '^$' || true; } | median
  }
  printf '{"bench": "scale_job", "value": %s, "unit": "s", "better": "lower", "of": "end of job: last step to tandem local exiting", "baseline": "none", "baseline_value": 0, "ratio": 0, "cache_bytes": %s, "table_rows": %s, "table_bytes": %s, "vocab": %s, "zipf": %s, "rows": %s, "steps": %s, "ps": %s, "workers": %s, "batch_per_worker": %s, "reps": %s, "samples_per_sec": %s, "live_db_bytes": %s, "checkpoint_dir_bytes": %s, "final_checkpoint_s": %s, "final_checkpoint_copied_bytes": %s, "final_delta_parts": %s, "final_line_to_exit_s": %s, "chief_exit_to_exit_s": %s, "last_apply_to_exit_s": %s, "job_s": %s, "ps_peak_anon_bytes": %s, "ps_memory_max": %s, "ps_cgroup_peak_bytes": %s, "model_checksum": "%s", "rc": %s}\n' \
    "$(fmed end_of_job_s)" "$((fixed_cache * PS))" "$table_rows" "$table_bytes" "$vocab" "$ZIPF" \
    "$rows" "$steps" $PS $WORKERS $BATCH "$reps" "$(fmed samples_per_sec)" "$(fmed live_db_bytes)" \
    "$(fmed checkpoint_dir_bytes)" "$(fmed final_checkpoint_s)" \
    "$(fmed final_checkpoint_copied_bytes)" "$(fmed final_delta_parts)" \
    "$(fmed final_line_to_exit_s)" "$(fmed chief_exit_to_exit_s)" "$(fmed last_apply_to_exit_s)" \
    "$(fmed job_s)" "$(fmed ps_peak_anon_bytes)" "$ps_memory_max" "$(fmed ps_cgroup_peak_bytes)" "$(get "$out/runs/cache-$fixed_cache-rep1" model_checksum)" "$failed"
  exit $failed
fi
ratios=(1 0.1 0.01)
labels=("1" "1/10" "1/100")
for ((rep = 1; rep <= reps; rep++)); do
  for j in "${!ratios[@]}"; do
    r=${ratios[$j]}
    dir="$out/runs/ratio-$r-rep$rep"
    if [[ $r == 1 ]]; then
      cache=$UNBOUNDED_CACHE
    else
      cache=$(awk -v t="$table_bytes" -v r="$r" -v p=$PS 'BEGIN {c = int(t * r / p); printf "%d", (c > 0 ? c : 1)}')
    fi
    log "rep $rep, cache ${labels[$j]} of the table: ps.cache_bytes=$cache per shard"
    run_job "$dir" "$cache" $((ps_memory_max > 0 && j > 0))
    echo "cache_bytes=$cache" >>"$dir/result"
    # The table's size: the rows the all-in-cache run stored.
    if [[ $r == 1 && $rep == 1 ]]; then count_rows "$dir" "$cache"; fi
    [[ $(get "$dir" rc) == 0 ]] || failed=1
    log "  $(tr '\n' ' ' <"$dir/result")"
    ((keep)) || rm -rf "$dir/ps" "$dir/ckpt"
  done
done

# --- report -------------------------------------------------------------------------------
med() {  # RATIO KEY: the median over reps
  local r
  for ((r = 1; r <= reps; r++)); do get "$out/runs/ratio-$1-rep$r" "$2"; done |
    { grep -v -e '^null$' -e '^$' || true; } | median
}
base_sps=$(med 1 samples_per_sec)
ratio_fields=""
checksums_equal=true
ref_checksum=$(get "$out/runs/ratio-1-rep1" model_checksum)
for j in "${!ratios[@]}"; do
  r=${ratios[$j]}
  sps=$(med "$r" samples_per_sec)
  rel=$(awk -v a="$sps" -v b="$base_sps" 'BEGIN {printf "%.4f", (b > 0 ? a / b : 0)}')
  ratio_fields+=", \"cache_${labels[$j]/\//_}\": $rel"
  cs=$(get "$out/runs/ratio-$r-rep1" model_checksum)
  rcs=""
  for ((rep = 1; rep <= reps; rep++)); do
    rcs+="$(get "$out/runs/ratio-$r-rep$rep" rc),"
    [[ $(get "$out/runs/ratio-$r-rep$rep" model_checksum) == "$ref_checksum" ]] || checksums_equal=false
  done
  cache_total=$(awk -v c="$(get "$out/runs/ratio-$r-rep1" cache_bytes)" -v p=$PS 'BEGIN {printf "%.0f", c * p}')
  printf '{"bench": "scale_samples_per_sec_cache_%s", "value": %s, "unit": "samples/s", "better": "higher", "baseline": "scale_samples_per_sec_cache_1", "baseline_value": %s, "ratio": %s, "cache_ratio": %s, "cache_bytes": %s, "table_rows": %s, "table_bytes": %s, "vocab": %s, "rows": %s, "steps": %s, "ps": %s, "workers": %s, "batch_per_worker": %s, "reps": %s, "exit_codes": "%s", "mean_samples_per_sec": %s, "ps_peak_rss_bytes": %s, "ps_peak_anon_bytes": %s, "ps_memory_max": %s, "ps_cgroup_peak_bytes": %s, "ps_dir_bytes": %s, "live_db_bytes": %s, "checkpoint_dir_bytes": %s, "checkpoints": %s, "checkpoint_s": %s, "checkpoint_max_s": %s, "checkpoint_held_s": %s, "final_checkpoint_s": %s, "final_checkpoint_copied_bytes": %s, "final_delta_parts": %s, "end_of_job_s": %s, "final_line_to_exit_s": %s, "chief_exit_to_exit_s": %s, "job_s": %s, "evictions": %s, "writebacks": %s, "cache_hits": %s, "cache_misses": %s, "cache_bytes_used_max": %s, "auc": %s, "model_checksum": "%s"}\n' \
    "${labels[$j]/\//_}" "$sps" "$base_sps" "$rel" "$r" "$cache_total" "$table_rows" "$table_bytes" \
    "$vocab" "$rows" "$steps" $PS $WORKERS $BATCH "$reps" "${rcs%,}" \
    "$(med "$r" mean_samples_per_sec)" "$(med "$r" ps_peak_rss_bytes)" \
    "$(med "$r" ps_peak_anon_bytes)" "$(med "$r" ps_memory_max)" "$(med "$r" ps_cgroup_peak_bytes)" \
    "$(med "$r" ps_dir_bytes)" \
    "$(med "$r" live_db_bytes)" "$(med "$r" checkpoint_dir_bytes)" "$(med "$r" checkpoints)" \
    "$(med "$r" checkpoint_s)" "$(med "$r" checkpoint_max_s)" "$(med "$r" checkpoint_held_s)" \
    "$(med "$r" final_checkpoint_s)" "$(med "$r" final_checkpoint_copied_bytes)" "$(med "$r" final_delta_parts)" "$(med "$r" end_of_job_s)" \
    "$(med "$r" final_line_to_exit_s)" "$(med "$r" chief_exit_to_exit_s)" "$(med "$r" job_s)" "$(med "$r" evictions)" \
    "$(med "$r" writebacks)" "$(med "$r" cache_hits)" "$(med "$r" cache_misses)" \
    "$(med "$r" cache_bytes_used_max)" "$(get "$out/runs/ratio-$r-rep1" auc)" "$cs"
done
small=$(med 0.01 samples_per_sec)
printf '{"bench": "scale_samples_per_sec_ratio", "value": %s, "unit": "x", "better": "higher", "baseline": "scale_samples_per_sec_cache_1", "baseline_value": %s, "ratio": %s, "of": "samples/s at cache 1/100 / all in cache"%s, "checksums_equal": %s}\n' \
  "$(awk -v a="$small" -v b="$base_sps" 'BEGIN {printf "%.4f", (b > 0 ? a / b : 0)}')" "$base_sps" \
  "$(awk -v a="$small" -v b="$base_sps" 'BEGIN {printf "%.4f", (b > 0 ? a / b : 0)}')" \
  "$ratio_fields" "$checksums_equal"
exit $failed
