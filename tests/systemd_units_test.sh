#!/usr/bin/env bash
# configs/systemd/*.service pass `systemd-analyze verify` with no warning (it exits 0 on parse
# warnings, so any output fails the test), keep PROTOCOLS §12's rules (WatchdogSec no higher
# than the default heartbeat timeout, 75 never restarted), and a broken copy is caught (the
# check can fail). Usage: systemd_units_test.sh SOURCE_DIR TANDEM_BINARY
set -euo pipefail
src=$1
tandem=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in "$src"/configs/systemd/*.service; do
  # The units name the installed binary; verify checks that ExecStart is executable.
  sed "s|=/usr/bin/tandem |=$tandem |" "$f" >"$tmp/$(basename "$f")"
done
cd "$tmp"
fail=0
verify() {
  local out
  out=$(systemd-analyze verify "$@" 2>&1) || { echo "verify $*: exit $?: $out"; return 1; }
  if [[ -n $out ]]; then echo "verify $*: $out"; return 1; fi
}
verify ./tandem-chief.service ./tandem-ps@0.service ./tandem-worker@0.service \
  ./tandem-serve.service || fail=1
grep -q '^Type=notify$' tandem-serve.service || { echo "tandem-serve.service: not Type=notify"; fail=1; }
grep -q '^KillSignal=SIGTERM$' tandem-serve.service || { echo "tandem-serve: no SIGTERM"; fail=1; }
heartbeat_timeout_ms=$(sed -n 's/.*heartbeat_timeout_ms = \([0-9]*\);.*/\1/p' \
  "$src/common/config/job_config.h" | head -1)
for f in tandem-chief.service tandem-ps@.service tandem-worker@.service; do
  w=$(sed -n 's/^WatchdogSec=\([0-9]*\)$/\1/p' "$f")
  if [[ -z $w || $((w * 1000)) -gt ${heartbeat_timeout_ms:-0} ]]; then
    echo "$f: WatchdogSec=$w, the heartbeat timeout is ${heartbeat_timeout_ms:-?} ms"; fail=1
  fi
  grep -q '^RestartPreventExitStatus=.*\b75\b' "$f" || { echo "$f: 75 is restarted"; fail=1; }
  grep -q '^Type=notify$' "$f" || { echo "$f: not Type=notify"; fail=1; }
done
# The negative control: a misspelt directive must be reported.
sed 's/^Restart=on-failure/Restart=sometimes/' tandem-chief.service >broken.service
if verify ./broken.service >/dev/null; then echo "a broken unit passed verify"; fail=1; fi
exit $fail
