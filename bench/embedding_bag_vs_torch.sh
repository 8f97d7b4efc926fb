#!/usr/bin/env bash
# tandem's embedding bags against PyTorch's (issue 18, target: tandem >= 1.5x): forward +
# backward of multi-hot bags on one core, batch 2048 x 8 features, bag lengths uniform in
# [0, 40] (mean 20), dim 32, ids Zipf(1.1) over 1e6 per feature (--dist uniform: uniform),
# sum and mean pooling; tandem: build/bench/embedding_bag_bench (the CPU backend's
# EmbeddingBagForward / EmbeddingBagBackward), PyTorch: bench/torch_embedding_bag_bench.py
# (nn.EmbeddingBag, torch.set_num_threads(1), Debian's python3-torch), which reads the batches
# tandem's side wrote, so both pool the same bags. Two variants (see both files' headers):
#   unique: the de-duplication left out on both sides. tandem gets each batch's unique rows and
#     inverse index, as the worker does; PyTorch's nn.EmbeddingBag (dense gradient) has the same
#     unique rows as its weight and the inverse as its input. The headline figure.
#   dedup: included on both sides. tandem de-duplicates the raw ids (FlatIdIndex, as
#     Batch::Dedup) and gathers the unique rows from a 1e6 x 32 table per feature; PyTorch runs
#     nn.EmbeddingBag(1e6, 32, sparse=True) on the raw ids and coalesces the sparse gradient
#     (the per-id sums). torch_uncoalesced_samples_per_s, PyTorch without the coalesce (no
#     per-row sums, so not the same work), is there for reference.
#
# Usage: bench/embedding_bag_vs_torch.sh [--reps N] [--runs R] [--steps S] [--dist zipf|uniform]
#                                        [--variant unique|dedup|both] [--out DIR]
#   (or scripts/bench.sh bag -- ARGS). Defaults: 3 reps, 5 runs per side and rep, 16 steps
#   (batches of 2048) per run, zipf, both variants, out/embedding_bag_vs_torch. About 2.5
#   minutes on 2 cores (30 s with --variant unique). BAG_BENCH=path overrides
#   build/bench/embedding_bag_bench, PYTHON the interpreter (default /usr/bin/python3).
#
# Runs: rep 1 tandem, rep 1 torch, rep 2 tandem, ... (interleaved, so a noisy neighbour hits
# both sides); each run is S steps, after one untimed warm-up run per process and figure.
# Prints one JSON line per variant and pooling mode: tandem's median samples/s (a sample = one
# bag per feature) over all reps x runs as value, PyTorch's as baseline_value, their ratio, the
# target 1.5, and whether both sides' results agree (results_agree; sum: the same bits, as the
# inputs are exact in fp32; mean: within 1e-6 relative). Without torch it prints tandem's
# figures with baseline "none" and says why on stderr.
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
from_caller() { if [[ $1 == /* ]]; then echo "$1"; else echo "$caller/$1"; fi; }

reps=3 runs=5 steps=16 dist=zipf variant=both out=out/embedding_bag_vs_torch
usage() { sed -n '18,23p' "$0" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }
while (($# > 0)); do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --dist) dist=$2; shift 2 ;;
    --variant) variant=$2; shift 2 ;;
    --out) out=$(from_caller "$2"); shift 2 ;;
    -h | --help) usage 0 ;;
    *) echo "embedding_bag_vs_torch: unknown argument '$1'" >&2; usage ;;
  esac
done
for n in "$reps" "$runs" "$steps"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "embedding_bag_vs_torch: '$n' is not a positive number" >&2; exit 2; }
done
[[ $dist == zipf || $dist == uniform ]] ||
  { echo "embedding_bag_vs_torch: --dist is zipf or uniform" >&2; exit 2; }
[[ $variant == unique || $variant == dedup || $variant == both ]] ||
  { echo "embedding_bag_vs_torch: --variant is unique, dedup or both" >&2; exit 2; }

if [[ -n ${BAG_BENCH:-} ]]; then BAG_BENCH=$(from_caller "$BAG_BENCH"); else BAG_BENCH=${BUILD_DIR:-build}/bench/embedding_bag_bench; fi
[[ -x $BAG_BENCH ]] || { echo "embedding_bag_vs_torch: no binary at $BAG_BENCH (build first)" >&2; exit 2; }
PYTHON=${PYTHON:-/usr/bin/python3}
log() { echo "embedding_bag_vs_torch: $*" >&2; }
have_torch=1
"$PYTHON" -c 'import torch, numpy' 2>/dev/null || {
  log "$PYTHON cannot import torch and numpy (scripts/setup.sh bench installs python3-torch): the PyTorch figure is skipped"
  have_torch=0
}
mkdir -p "$out"
out=$(realpath "$out")
rm -f "$out"/tandem-rep*.json "$out"/torch-rep*.json

data="$out/bags.bin"
for ((rep = 1; rep <= reps; rep++)); do
  extra=()
  ((rep > 1)) || extra=(--write-data "$data")
  "$BAG_BENCH" --dist "$dist" --variant "$variant" --runs "$runs" --steps "$steps" "${extra[@]}" \
    >"$out/tandem-rep$rep.json" 2>"$out/tandem.log"
  if ((have_torch)); then
    "$PYTHON" bench/torch_embedding_bag_bench.py --data "$data" --variant "$variant" --runs "$runs" \
      --steps "$steps" \
      >"$out/torch-rep$rep.json" 2>"$out/torch.log"
  fi
  log "rep $rep: $(sed -n 's/.*"bench": "\([^"]*\)", "value": \([^,]*\),.*/\1 \2/p' \
    "$out/tandem-rep$rep.json" "$out/torch-rep$rep.json" 2>/dev/null | tr '\n' ';' || true)"
done
cat "$out/tandem.log" >&2
((have_torch)) && cat "$out/torch.log" >&2

# One line per variant and mode: all runs of all reps, per side.
"$PYTHON" - "$out" "$reps" "$have_torch" "$steps" <<'EOF'
import json, statistics, sys
out, reps, have_torch, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
def lines(side):
    res = {}
    for rep in range(1, reps + 1):
        with open(f"{out}/{side}-rep{rep}.json") as f:
            for line in f:
                if line.strip():
                    j = json.loads(line)
                    res.setdefault((j["variant"], j["mode"]), []).append(j)
    return res
tandem = lines("tandem")
torch = lines("torch") if have_torch else {}
for (variant, mode), ts in tandem.items():
    t_runs = [v for j in ts for v in j["runs"]]
    t = statistics.median(t_runs)
    first = ts[0]
    fig = {"bench": first["bench"], "value": round(t, 1), "unit": "samples/s", "better": "higher"}
    ps = torch.get((variant, mode))
    if ps:
        p_runs = [v for j in ps for v in j["runs"]]
        p = statistics.median(p_runs)
        tol = 0.0 if mode == "sum" else 1e-6
        agree = all(abs(first[k] - ps[0][k]) <= tol * max(1.0, abs(ps[0][k]))
                    for k in ("pooled_sum", "d_rows_sum"))
        baseline = "torch_nn_embeddingbag_" + mode + (
            "_sparse_coalesced" if variant == "dedup" else "") + "_1_thread"
        fig.update({"baseline": baseline, "baseline_value": round(p, 1), "ratio": round(t / p, 4),
                    "target_ratio": 1.5, "meets_target": t / p >= 1.5,
                    "tandem_bags_per_s": round(t * first["features"], 1),
                    "torch_bags_per_s": round(p * first["features"], 1), "results_agree": agree})
        if variant == "dedup":
            fig["torch_uncoalesced_samples_per_s"] = round(
                statistics.median(j["uncoalesced_samples_per_s"] for j in ps), 1)
    else:
        fig.update({"baseline": "none", "baseline_value": 0, "ratio": 0.0,
                    "tandem_bags_per_s": round(t * first["features"], 1),
                    "torch_skipped": "python3-torch not importable"})
    fig.update({"runs_per_side": len(t_runs), "tandem_runs": t_runs,
                "torch_runs": [v for j in ps for v in j["runs"]] if ps else None})
    for k in ("variant", "mode", "dedup", "batch", "features", "dim", "max_len", "ids", "zipf",
              "vocab", "seed", "lookups_per_batch", "unique_per_batch", "dedup_ms_per_batch"):
        fig[k] = first[k]
    fig["steps_per_run"] = steps
    if ps:
        fig["torch"] = ps[0]["torch"]
    print(json.dumps(fig))
EOF
