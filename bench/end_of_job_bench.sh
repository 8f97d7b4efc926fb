#!/usr/bin/env bash
# End of job against table size (issue "Huge tables for real", target: the time from the last
# step to `tandem local` exiting stays within 2x from a 10^6-row to a 10^8-row table). Runs
# bench/scale_bench.sh --cache-bytes once per vocabulary, every job with the same steps,
# batch, checkpoint interval and cache, so that only the table's size differs: with Zipf 0.5
# over 10^9 ids a field nearly every id is new (about 26 rows a record), over 40,000 ids a
# field the table stops at about 10^6 rows.
#
# Usage: bench/end_of_job_bench.sh [--vocabs "V1 V2 ..."] [--steps S] [--batch B] [--zipf Z]
#                                  [--cache-bytes C] [--reps N] [--out DIR] [-- SCALE_ARGS]
#   Defaults: vocabs "40000 1000000000", 1900 steps, batch 1024 per worker (3.9 M records:
#   about 10^8 rows for the large vocabulary), Zipf 0.5, 256 MiB of cache per shard (the small
#   table fits, the large one is ~30x it), a checkpoint every steps/2 steps, 1 rep,
#   out/end_of_job_bench. Needs ~40 GB of disk for the default large table.
#
# Prints scale_bench's scale_job line for each vocabulary, then one line: the end of job of
# the largest table over that of the smallest (target <= 2), with both tables' rows; then the
# same measured from the last step's apply (last_apply_to_exit_s), which always holds the final
# restore point.
set -euo pipefail
cd "$(dirname "$0")/.."
vocabs="40000 1000000000" steps=1900 batch=1024 zipf=0.5 cache=$((256 << 20)) reps=1
out=out/end_of_job_bench extra=()
while (($# > 0)); do
  case $1 in
    --vocabs) vocabs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --zipf) zipf=$2; shift 2 ;;
    --cache-bytes) cache=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '9,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 0 ;;
    *) echo "end_of_job_bench: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
json_num() { sed -n "s/.*\"$1\": *\(-\{0,1\}[0-9][0-9.eE+-]*\).*/\1/p" <<<"$2"; }

lines=()
for v in $vocabs; do
  echo "end_of_job_bench: vocab $v" >&2
  line=$(bench/scale_bench.sh --vocab "$v" --zipf "$zipf" --batch "$batch" --steps "$steps" \
    --ckpt-every $(((steps + 1) / 2)) --cache-bytes "$cache" --reps "$reps" \
    --out "$out/vocab-$v" ${extra[@]+"${extra[@]}"} | grep '"scale_job"' || true)
  [[ -n $line ]] || { echo "end_of_job_bench: no result for vocab $v" >&2; exit 1; }
  echo "$line"
  lines+=("$line")
done
# Smallest and largest table by rows.
small="" large=""
for l in "${lines[@]}"; do
  r=$(json_num table_rows "$l")
  if [[ -z $small ]] || ((r < $(json_num table_rows "$small"))); then small=$l; fi
  if [[ -z $large ]] || ((r > $(json_num table_rows "$large"))); then large=$l; fi
done
a=$(json_num value "$large") b=$(json_num value "$small")
rc=0
for l in "${lines[@]}"; do ((rc |= $(json_num rc "$l"))) || true; done
printf '{"bench": "end_of_job_vs_table_rows", "value": %s, "unit": "s", "better": "lower", "baseline": "end of job with the smallest table", "baseline_value": %s, "ratio": %s, "rows": %s, "baseline_rows": %s, "rows_ratio": %s, "target_ratio": 2, "rc": %s}\n' \
  "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.4f", (b > 0 ? a / b : 0)}')" \
  "$(json_num table_rows "$large")" "$(json_num table_rows "$small")" \
  "$(awk -v a="$(json_num table_rows "$large")" -v b="$(json_num table_rows "$small")" 'BEGIN {printf "%.1f", (b > 0 ? a / b : 0)}')" "$rc"
# The same from the last step's apply: the final restore point always in (see scale_bench).
a=$(json_num last_apply_to_exit_s "$large") b=$(json_num last_apply_to_exit_s "$small")
printf '{"bench": "end_of_job_from_last_apply_vs_table_rows", "value": %s, "unit": "s", "better": "lower", "baseline": "the same with the smallest table", "baseline_value": %s, "ratio": %s, "rc": %s}\n' \
  "${a:-null}" "${b:-null}" "$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.4f", (b > 0 ? a / b : 0)}')" "$rc"
exit "$rc"
