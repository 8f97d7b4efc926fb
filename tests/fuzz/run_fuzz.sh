#!/usr/bin/env bash
# Builds tests/fuzz/message_fuzz.cc with clang + libFuzzer + ASan/UBSan straight from the few
# sources it needs (the rest of tandem builds with g++; Debian's capnp, kj and zmq are libstdc++
# libraries either compiler links), seeds a corpus with valid messages and fuzzes for a bounded
# time. Exit 0 when nothing was found; otherwise nonzero, with the reproducer's path printed.
# Usage: run_fuzz.sh SOURCE_DIR GEN_DIR WORK_DIR [SECONDS]
#   GEN_DIR: the build's generated headers (schemas/*.capnp.{h,c++}, tandem_build_id.h).
# Reproduce a finding: WORK_DIR/message_fuzz WORK_DIR/artifacts/crash-...
set -euo pipefail
SRC=$(cd "$1" && pwd)
GEN=$(cd "$2" && pwd)
WORK=$3
SECONDS_TO_RUN=${4:-30}
CXX=${FUZZ_CXX:-clang++-14}
mkdir -p "$WORK/obj"
WORK=$(cd "$WORK" && pwd)

# clang-14 and libFuzzer (libclang-rt-14-dev) come from setup.sh's list like everything else.
if ! command -v "$CXX" >/dev/null || ! "$CXX" -print-file-name=libclang_rt.fuzzer-x86_64.a |
  grep -q /; then
  "$SRC/scripts/setup.sh"
fi

SOURCES=(
  "$SRC/tests/fuzz/message_fuzz.cc"
  "$SRC/common/wire/message.cc"
  "$SRC/common/wire/identity.cc"
  "$SRC/common/config/role.cc"
  "$SRC/common/build_info.cc"
  "$SRC/common/job_id.cc"
  "$SRC/common/status.cc"
  "$SRC/common/slot_map.cc"
  "$SRC/server/ps/shard_validation.cc"
  "$SRC/server/ps/ps_service_requests.cc"
  "$GEN"/schemas/*.capnp.c++
)
# -O1 and line tables only: this runs in CI, where compiling is part of the test's time.
FLAGS=(-std=c++20 -O1 -gline-tables-only -fno-omit-frame-pointer
       -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
       -I "$SRC" -I "$GEN")
export CXX WORK
export FLAGS_STR="${FLAGS[*]}"
# Everything is compiled every time (about 10 s on two cores): objects kept from an older run
# could disagree with a changed header.
rm -f "$WORK"/obj/*.o
printf '%s\n' "${SOURCES[@]}" | xargs -P "$(nproc)" -I{} bash -c '
  src={}; $CXX $FLAGS_STR -c "$src" -o "$WORK/obj/$(echo "$src" | md5sum | cut -c1-12).o"'
"$CXX" -fsanitize=fuzzer,address,undefined "$WORK"/obj/*.o -o "$WORK/message_fuzz" \
  -lcapnp -lkj -lzmq -lxxhash -lpthread

# A fresh corpus each run, seeded with valid messages (written by the target itself, so they
# follow the schema); tests/fuzz/corpus/ holds inputs worth keeping (past findings), if any.
rm -rf "$WORK/corpus" "$WORK/artifacts"
mkdir -p "$WORK/corpus" "$WORK/artifacts"
TANDEM_FUZZ_WRITE_SEEDS="$WORK/corpus" "$WORK/message_fuzz" >/dev/null 2>&1
extra=()
if [[ -d $SRC/tests/fuzz/corpus ]]; then extra+=("$SRC/tests/fuzz/corpus"); fi

set +e
# A fixed seed: CI explores the same inputs each run, so a red run is reproducible.
"$WORK/message_fuzz" -seed=1 -max_total_time="$SECONDS_TO_RUN" -timeout=10 -rss_limit_mb=2048 \
  -max_len=65536 -print_final_stats=1 -artifact_prefix="$WORK/artifacts/" \
  "$WORK/corpus" "${extra[@]}" >"$WORK/fuzz.log" 2>&1
rc=$?
set -e
grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|Done [0-9]+ runs)' "$WORK/fuzz.log" || true
if [[ $rc -ne 0 ]]; then
  tail -n 60 "$WORK/fuzz.log"
  for f in "$WORK"/artifacts/*; do
    [[ -e $f ]] && echo "reproducer: $f (run: $WORK/message_fuzz $f)"
  done
  echo "message_fuzz failed (exit $rc); full log: $WORK/fuzz.log"
  exit 1
fi
echo "message_fuzz: no finding in ${SECONDS_TO_RUN}s"
