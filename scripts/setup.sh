#!/usr/bin/env bash
# Installs the Debian packages tandem builds with, only those missing. `apt-get update` runs only
# when something is missing, so a second run installs nothing and takes well under 5 s.
# Usage: scripts/setup.sh [GROUP...]. With no GROUP: what tandem builds with and most tests need.
# Optional groups add packages only some tools need:
#   test   lintian, slurm-wlm, munge: the package and real-Slurm tests (scripts/test.sh, CI)
#   bench  python3-torch and python3-numpy: bench/torch_dlrm_bench.py, the PyTorch baseline
#          of `scripts/bench.sh torch`, which asks for this group itself.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkgconf git
  libzmq3-dev cppzmq-dev capnproto libcapnp-dev librocksdb-dev libopenblas-dev libgloo-dev
  libspdlog-dev nlohmann-json3-dev libcli11-dev libyaml-cpp-dev libxxhash-dev libcpp-httplib-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-14 libclang-rt-14-dev  # tests/fuzz: clang with libFuzzer and the sanitizer runtimes
  systemd  # systemd-analyze: the unit files' test
  iproute2  # ip netns, veth, bridge: tests/hosts and `tandem local --netns`
  python3-matplotlib  # scripts/plot_metrics.py: the demo's plot and its test
  dpkg-dev file  # scripts/package.sh (cpack, dpkg-shlibdeps)
  openssl  # tests/cluster/serve_test.cc: a certificate for the HTTPS case
)
# Only the test command needs these (scripts/test.sh asks for them): Slurm's and munge's
# packages enable their own services on a systemd host, which nobody running the demo wants.
TEST_PACKAGES=(
  lintian  # tests/debian_package_test.sh
  slurm-wlm munge  # tests/slurm: a real slurmctld + slurmd run scripts/slurm/tandem.sbatch
)
BENCH_PACKAGES=(
  python3-torch python3-numpy  # Debian's PyTorch 1.13.1 (bookworm) for /usr/bin/python3
)

for group in "$@"; do
  case $group in
    bench) PACKAGES+=("${BENCH_PACKAGES[@]}") ;;
    test) PACKAGES+=("${TEST_PACKAGES[@]}") ;;
    *) echo "setup: unknown package group '$group' (known: bench, test)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${PACKAGES[@]}"; do
  # dpkg-query is fast and needs no package lists.
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "setup: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >&2
