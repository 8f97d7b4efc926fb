# Sourced by the job benchmarks (scale_bench.sh, dlrm_vs_torch.sh): binary synthetic data made
# once per (vocab, rows) under $out/data and kept for later invocations. Needs TANDEM, out,
# vocab, rows, eval_rows, ZIPF and a log function; sets train_file and eval_file ("" without
# eval rows).
data_dir="$out/data"
mkdir -p "$data_dir"
train_file="$data_dir/train-v$vocab-z$ZIPF-r$rows.bin"
eval_file="$data_dir/eval-v$vocab-z$ZIPF-r$eval_rows.bin"
gen() {  # FILE ROWS STREAM
  [[ -s $1 ]] && return 0
  log "generating $2 $3 rows (vocab $vocab, zipf $ZIPF) into $1"
  "$TANDEM" datagen --format binary --vocab "$vocab" --zipf "$ZIPF" --rows "$2" --seed 1 \
    --stream "$3" --out "$1.tmp" >&2
  mv "$1.tmp" "$1"
}
gen "$train_file" "$rows" train
if ((eval_rows > 0)); then gen "$eval_file" "$eval_rows" eval; else eval_file=""; fi
