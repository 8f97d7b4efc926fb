#!/usr/bin/env bash
# Eval AUC of each model type against its PyTorch twin trained on the same data and steps
# (issue 19: "ends within 0.005 AUC of tandem's"). Per model: `tandem datagen --config
# configs/<example>.yaml --format binary` writes a train file of exactly steps x batch records
# and an eval file (same teacher, disjoint records); `tandem local --config configs/<example>.yaml
# --ps 1 --workers 1` trains on it (data.format binary, k = 0, train.steps/batch_size as given,
# evaluation only at the end); bench/torch_models_train.py trains the twin of
# bench/torch_models.py (same architecture, Glorot dense init, sparse Adagrad tables, FTRL wide
# tables, dense Adam, from `models_bench --describe` of the same config and overrides) on the
# same files and steps, one thread. Both see each training record once, in their own random
# order, and start from their own random draws of the same initialisation scheme, so the gap
# mixes any difference in the computation with run-to-run noise (--seeds N repeats the whole
# comparison with train.seed 1..N and reports the mean gap too).
#
# Usage: bench/models_auc_vs_torch.sh [--models a,b,...] [--steps 1000] [--batch 256]
#                                     [--eval-rows 20000] [--seeds 1] [--out DIR]
#   Defaults: every model, 1000 steps of 256, 20000 eval rows, one seed, out/models_auc_vs_torch.
#   About 1 minute per model and seed on 2 cores. TANDEM=path overrides build/cli/tandem,
#   MODELS_BENCH=path build/bench/models_bench, PYTHON the interpreter (/usr/bin/python3).
# Prints one JSON line per model and label: tandem's eval AUC as value, the twin's as
# baseline_value, abs_diff, target_abs_diff 0.005, and the per-seed AUCs.
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
from_caller() { if [[ $1 == /* ]]; then echo "$1"; else echo "$caller/$1"; fi; }

models=dlrm,dcn_v2,deepfm,wide_deep,mmoe steps=1000 batch=256 eval_rows=20000 seeds=1
out=out/models_auc_vs_torch
usage() { sed -n '15,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }
while (($# > 0)); do
  case $1 in
    --models) models=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --eval-rows) eval_rows=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --out) out=$(from_caller "$2"); shift 2 ;;
    -h | --help) usage 0 ;;
    *) echo "models_auc_vs_torch: unknown argument '$1'" >&2; usage ;;
  esac
done
for n in "$steps" "$batch" "$eval_rows" "$seeds"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "models_auc_vs_torch: '$n' is not a positive number" >&2; exit 2; }
done
if [[ -n ${TANDEM:-} ]]; then TANDEM=$(from_caller "$TANDEM"); else TANDEM=${BUILD_DIR:-build}/cli/tandem; fi
if [[ -n ${MODELS_BENCH:-} ]]; then MODELS_BENCH=$(from_caller "$MODELS_BENCH"); else MODELS_BENCH=${BUILD_DIR:-build}/bench/models_bench; fi
for b in "$TANDEM" "$MODELS_BENCH"; do
  [[ -x $b ]] || { echo "models_auc_vs_torch: no binary at $b (build first)" >&2; exit 2; }
done
TANDEM=$(realpath "$TANDEM")
PYTHON=${PYTHON:-/usr/bin/python3}
"$PYTHON" -c 'import torch, numpy' 2>/dev/null || {
  echo "models_auc_vs_torch: $PYTHON cannot import torch and numpy (scripts/setup.sh bench installs python3-torch)" >&2
  exit 2
}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
unset TF_CONFIG
mkdir -p "$out"
out=$(realpath "$out")
log() { echo "models_auc_vs_torch: $*" >&2; }

example() {
  case $1 in
    dlrm) echo configs/local.yaml ;;
    dcn_v2) echo configs/dcn-v2.yaml ;;
    wide_deep) echo configs/wide-deep.yaml ;;
    *) echo "configs/$1.yaml" ;;
  esac
}

failed=0
IFS=, read -r -a model_list <<<"$models"
for model in "${model_list[@]}"; do
  config=$(example "$model")
  [[ -f $config ]] || { log "unknown model '$model'"; exit 2; }
  for ((seed = 1; seed <= seeds; seed++)); do
    dir="$out/$model/seed$seed"
    rm -rf "$dir"
    mkdir -p "$dir"
    # The generator's teacher is a function of --seed: the same data for every train.seed.
    data="$out/$model/data"
    mkdir -p "$data"
    train_file="$data/train-$((steps * batch)).bin"
    eval_file="$data/eval-$eval_rows.bin"
    [[ -s $train_file ]] || "$TANDEM" datagen --config "$config" --format binary \
      --rows $((steps * batch)) --seed 1 --stream train --out "$train_file" >"$data/datagen.log"
    [[ -s $eval_file ]] || "$TANDEM" datagen --config "$config" --format binary \
      --rows "$eval_rows" --seed 1 --stream eval --out "$eval_file" >>"$data/datagen.log"
    sets=(
      data.format=binary "data.train=$train_file" "data.eval=$eval_file"
      "train.steps=$steps" "train.batch_size=$batch" "train.seed=$seed" train.embedding_staleness=0
      train.eval_every_steps=0 train.log_every_steps=100 train.threads=1
      ps.storage=memory "ps.data_dir=$dir/ps" "checkpoint.dir=$dir/ckpt" checkpoint.every_steps=0
      checkpoint.every_seconds=0 checkpoint.resume=never "output.dir=$dir/out"
    )
    argv=("$TANDEM" local --config "$config" --ps 1 --workers 1)
    margs=("$MODELS_BENCH" --describe --config "$config")
    for s in "${sets[@]}"; do argv+=(--set "$s"); margs+=(--set "$s"); done
    "${margs[@]}" >"$dir/describe.json"
    rc=0
    "${argv[@]}" >"$dir/tandem.log" 2>&1 || rc=$?
    if ((rc != 0)); then
      log "$model seed $seed: tandem local exited $rc; last lines of $dir/tandem.log:"
      tail -n 15 "$dir/tandem.log" >&2
      failed=1
    fi
    rc=0
    "$PYTHON" bench/torch_models_train.py --describe "$dir/describe.json" --train "$train_file" \
      --eval "$eval_file" >"$dir/torch.json" 2>"$dir/torch.log" || rc=$?
    if ((rc != 0)); then
      log "$model seed $seed: torch_models_train exited $rc; last lines of $dir/torch.log:"
      tail -n 15 "$dir/torch.log" >&2
      failed=1
    fi
    log "$model seed $seed: tandem $(grep '"final"' "$dir/out/metrics.jsonl" 2>/dev/null | tail -1 | grep -o '"auc":[0-9.]*' | head -1); torch $(grep -o '"auc": \[[^]]*\]' "$dir/torch.json" || true)"
  done
done

"$PYTHON" - "$out" "$models" "$seeds" "$steps" "$batch" "$eval_rows" <<'EOF'
import json, statistics, sys
out, models, seeds, steps, batch, eval_rows = sys.argv[1], sys.argv[2].split(","), \
    int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
def tandem_aucs(d, labels):
    final = None
    try:
        with open(f"{d}/out/metrics.jsonl") as f:
            for line in f:
                j = json.loads(line)
                if j.get("final"):
                    final = j
    except OSError:
        pass
    if final is None:
        return [None] * len(labels)
    if "tasks" in final:
        return [final["tasks"][l]["auc"] for l in labels]
    return [final.get("auc")]
for model in models:
    rows = []
    for seed in range(1, seeds + 1):
        d = f"{out}/{model}/seed{seed}"
        desc = json.loads(open(f"{d}/describe.json").readline())
        labels = desc.get("labels") or [f"label{t}" for t in range(desc["num_labels"])]
        try:
            torch = json.loads(open(f"{d}/torch.json").readline())["auc"]
        except (OSError, ValueError, KeyError):
            torch = [None] * desc["num_labels"]
        rows.append((labels, tandem_aucs(d, labels), torch))
    for t in range(len(rows[0][0])):
        ta = [r[1][t] for r in rows]
        pa = [r[2][t] for r in rows]
        ok = all(x is not None for x in ta + pa)
        tv = statistics.mean(ta) if ok else None
        pv = statistics.mean(pa) if ok else None
        diff = abs(tv - pv) if ok else None
        print(json.dumps({
            "bench": f"{model}_eval_auc_vs_torch", "label": rows[0][0][t],
            "value": round(tv, 5) if ok else None, "unit": "AUC", "better": "higher",
            "baseline": "torch_twin_same_data_steps", "baseline_value": round(pv, 5) if ok else None,
            "abs_diff": round(diff, 5) if ok else None, "target_abs_diff": 0.005,
            "meets_target": diff <= 0.005 if ok else False,
            "tandem_auc_per_seed": ta, "torch_auc_per_seed": pa,
            "steps": steps, "batch": batch, "eval_rows": eval_rows, "seeds": seeds}))
EOF
exit $failed
