#!/usr/bin/env bash
# The Debian package (issue 23): cpack builds tandem_<version>_<arch>.deb from the build folder
# into a temporary folder; lintian reports no error; the control fields, conffiles and file
# list are those cmake/TandemPackage.cmake promises; the extracted binary runs (--version); the
# extracted units pass `systemd-analyze verify` against the extracted tree (--root: ExecStart
# must be the packaged /usr/bin/tandem; a negative control removes it); the maintainer scripts
# run, with their absolute paths moved under a temporary root and stand-ins for the commands
# that change the system (which they record), and do what they should on a first install, a
# second one, a removal and a purge.
# With TANDEM_DEB_INSTALL=1, as root, on a host without the package or a `tandem` user, it also
# installs the package for real (dpkg -i), checks the user, directories and units, then purges
# it and deletes the user again.
# Usage: debian_package_test.sh SOURCE_DIR BUILD_DIR VERSION
set -euo pipefail
src=$1
build=$2
version=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

for tool in cpack dpkg-deb dpkg-shlibdeps lintian systemd-analyze; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is missing (scripts/setup.sh test installs it)"; exit 1; }
done

# 1. Build it.
arch=$(dpkg --print-architecture)
if ! cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/out" >"$tmp/cpack.log" 2>&1; then
  cat "$tmp/cpack.log"; echo "FAIL: cpack"; exit 1
fi
deb=$tmp/out/tandem_${version}_${arch}.deb
[[ -f $deb ]] || { cat "$tmp/cpack.log"; echo "FAIL: no $deb"; ls "$tmp/out"; exit 1; }
echo "built $(basename "$deb") ($(du -h "$deb" | cut -f1))"

# 2. lintian: no E: line (warnings and infos are printed).
lintian_rc=0
lintian --display-info --fail-on error "$deb" >"$tmp/lintian.log" 2>&1 || lintian_rc=$?
cat "$tmp/lintian.log"
if grep -q '^E: ' "$tmp/lintian.log"; then bad "lintian reports errors"; fi
if ((lintian_rc != 0 && lintian_rc != 1)); then bad "lintian exited $lintian_rc"; fi
echo "lintian: $(grep -c '^E: ' "$tmp/lintian.log") errors," \
  "$(grep -c '^W: ' "$tmp/lintian.log") warnings"

# 3. Control fields.
field() { dpkg-deb -f "$deb" "$1"; }
[[ $(field Package) == tandem ]] || bad "Package: $(field Package)"
[[ $(field Version) == "$version" ]] || bad "Version: $(field Version), the project's is $version"
[[ $(field Architecture) == "$arch" ]] || bad "Architecture: $(field Architecture)"
[[ -n $(field Maintainer) ]] || bad "no Maintainer"
depends=$(field Depends)
echo "Depends: $depends"
# adduser for postinst; the rest is dpkg-shlibdeps's: the C and C++ runtimes and a few of the
# libraries tandem links (a missing one means shlibdeps did not run or found nothing).
for dep in adduser libc6 'libstdc\+\+6' libgcc-s1 librocksdb libzmq5 libyaml-cpp libspdlog; do
  grep -Eq "(^|, )${dep}[^,]*(,|$)" <<<"$depends" || bad "Depends lacks $dep"
done

# 4. Control files: conffiles, maintainer scripts (0755, valid sh).
dpkg-deb -e "$deb" "$tmp/control"
[[ $(cat "$tmp/control/conffiles" 2>/dev/null) == /etc/tandem/job.yaml ]] ||
  bad "conffiles: '$(cat "$tmp/control/conffiles" 2>/dev/null)', want /etc/tandem/job.yaml"
for s in postinst prerm postrm; do
  [[ -f $tmp/control/$s ]] || { bad "no $s"; continue; }
  [[ $(stat -c %a "$tmp/control/$s") == 755 ]] || bad "$s mode $(stat -c %a "$tmp/control/$s")"
  sh -n "$tmp/control/$s" || bad "$s: sh syntax"
done

# 5. Contents.
dpkg-deb -x "$deb" "$tmp/root"
root=$tmp/root
for f in usr/bin/tandem etc/tandem/job.yaml usr/share/doc/tandem/README.md \
  usr/share/doc/tandem/copyright usr/share/doc/tandem/changelog.gz \
  usr/share/doc/tandem/examples/local.yaml usr/share/doc/tandem/examples/two-hosts.yaml \
  usr/share/doc/tandem/examples/README.md usr/share/man/man1/tandem.1.gz; do
  [[ -f $root/$f ]] || bad "the package lacks /$f"
done
cmp -s "$root/etc/tandem/job.yaml" "$src/configs/two-hosts.yaml" ||
  bad "/etc/tandem/job.yaml is not configs/two-hosts.yaml"
units=()
for f in "$src"/configs/systemd/*.service; do
  u=$(basename "$f")
  units+=("$u")
  pu=$root/lib/systemd/system/$u
  [[ -f $pu ]] || { bad "the package lacks /lib/systemd/system/$u"; continue; }
  # Each ExecStart names the packaged binary; the Documentation file is in the package.
  while read -r line; do
    [[ $line == ExecStart=/usr/bin/tandem\ * ]] || bad "$u: $line"
  done < <(grep '^ExecStart' "$pu")
  grep -q '^ExecStart=' "$pu" || bad "$u: no ExecStart"
  doc=$(sed -n 's|^Documentation=file://||p' "$pu")
  [[ -z $doc || -f $root$doc ]] || bad "$u: Documentation $doc is not in the package"
done
if find "$root" -path "$root/usr/local*" | grep -q .; then bad "files under /usr/local"; fi
# A CUDA build carries its GPU part as a plugin the binary opens from <bin>/../lib/tandem/.
if [[ -f $build/worker/device/tandem-cuda.so ]]; then
  [[ -f $root/usr/lib/tandem/tandem-cuda.so ]] || bad "the package lacks /usr/lib/tandem/tandem-cuda.so"
fi

# 6. The extracted binary runs.
if out=$(TANDEM_CUDA_PLUGIN= "$root/usr/bin/tandem" --version 2>&1); then
  echo "$out"
  [[ $out == "tandem $version"* ]] || bad "--version prints '$out'"
  # The device probe's library versions come from the packaged plugin (named, so that the build
  # tree's cannot stand in for it; the lookup order itself is CudaPluginTest's).
  plugin=$root/usr/lib/tandem/tandem-cuda.so
  if [[ -f $plugin ]]; then
    probe=$(TANDEM_CUDA_PLUGIN=$plugin "$root/usr/bin/tandem" --version 2>&1)
    [[ $probe == *cublas* ]] || bad "the packaged CUDA plugin does not open: '$probe'"
  fi
else
  bad "extracted tandem --version exited $?: $out"
fi

# The manual page names every subcommand --help lists (at the start of an entry).
subs=$("$root/usr/bin/tandem" --help |
  awk '/^Subcommands:/ {f = 1; next} f && /^  [a-z]/ {print $1}')
[[ -n $subs ]] || bad "no subcommands in tandem --help"
zcat "$root/usr/share/man/man1/tandem.1.gz" | sed 's/\\f[BIR]//g' >"$tmp/man.txt"
for sub in $subs; do
  grep -Eq "^\.B ([a-z]+, )*$sub( |,|$)" "$tmp/man.txt" ||
    bad "the manual page (packaging/tandem.1) lacks the subcommand $sub"
done
# Libraries that no Debian package provides (CUDA's from /usr/local/cuda in a CUDA build) are not
# in Depends: listed, to be on every host.
mapfile -t libs < <(ldd "$root/usr/bin/tandem" | awk '$2 == "=>" && $3 ~ /^\// {print $3}')
unowned=$( (dpkg -S "${libs[@]}" 2>&1 >/dev/null || true) |
  sed -n 's/.*no path found matching pattern //p')
foreign=()
for l in $unowned; do dpkg -S "$(readlink -f "$l")" >/dev/null 2>&1 || foreign+=("$l"); done
echo "libraries from no Debian package (not in Depends): ${foreign[*]:-none}"

# 7. systemd-analyze verify on the extracted tree. --root resolves ExecStart and the unit search
# path inside it; the host's own units (targets, ...) are copied beside the package's so that
# sysinit.target and network-online.target exist there. Any output fails (verify exits 0 on
# parse warnings).
mkdir -p "$root/usr/lib/systemd/system"
find /lib/systemd/system/ -mindepth 1 -maxdepth 1 ! -name 'tandem-*' \
  -exec cp -a -t "$root/usr/lib/systemd/system/" {} +
names=()
for u in "${units[@]}"; do names+=("${u/@.service/@0.service}"); done
if ! out=$(systemd-analyze verify --root="$root" "${names[@]}" 2>&1) || [[ -n $out ]]; then
  bad "systemd-analyze verify ${names[*]}: $out"
else
  echo "systemd-analyze verify --root: ${names[*]}: clean"
fi
# Negative control: without the binary at the path the units name, verify must complain.
mv "$root/usr/bin/tandem" "$tmp/tandem.moved"
if out=$(systemd-analyze verify --root="$root" "${names[0]}" 2>&1) && [[ -z $out ]]; then
  bad "verify passed without /usr/bin/tandem in the root"
fi
mv "$tmp/tandem.moved" "$root/usr/bin/tandem"

# 8. The maintainer scripts, run with /etc/tandem, /var/lib/tandem and /run/systemd moved under
# $fake and stand-ins for every command they may run (PATH holds nothing else, so an unexpected
# command fails the script). The stand-ins record their arguments; rm and rmdir also act.
fake=$tmp/fake
mkdir -p "$fake/bin" "$fake/etc" "$fake/run/systemd/system"
for c in addgroup adduser install systemctl deb-systemd-invoke; do
  printf '#!/bin/sh\necho "%s $*" >>"%s/calls"\n' "$c" "$fake" >"$fake/bin/$c"
done
for c in rm rmdir; do
  printf '#!/bin/sh\necho "%s $*" >>"%s/calls"\nexec /bin/%s "$@"\n' "$c" "$fake" "$c" \
    >"$fake/bin/$c"
done
# getent: the user and group exist once $fake/user-exists does.
printf '#!/bin/sh\n[ -e "%s/user-exists" ]\n' "$fake" >"$fake/bin/getent"
chmod +x "$fake/bin"/*
for s in postinst prerm postrm; do
  sed -e "s|/etc/tandem|$fake/etc/tandem|g" -e "s|/var/lib/tandem|$fake/var/lib/tandem|g" \
    -e "s|/run/systemd|$fake/run/systemd|g" "$tmp/control/$s" >"$fake/$s"
done
run_script() {  # SCRIPT ARG...: runs it, prints its calls
  rm -f "$fake/calls"
  touch "$fake/calls"
  PATH=$fake/bin /bin/sh "$fake/$1" "${@:2}" || bad "$* exited $?"
}
expect_call() {  # REGEX: one recorded call matches
  grep -Eq "$1" "$fake/calls" || { bad "expected a call matching '$1'; calls:"; cat "$fake/calls"; }
}
run_script postinst configure
expect_call '^addgroup --system .*tandem$'
expect_call '^adduser --system .*--ingroup tandem .*--home [^ ]*/var/lib/tandem .*tandem$'
expect_call "^install -d -o tandem -g tandem -m 0755 $fake/var/lib/tandem$"
expect_call "^install -d -o tandem -g tandem -m 0700 $fake/etc/tandem/keys$"
expect_call '^systemctl --system daemon-reload$'
# A second configure (an upgrade): the user and the directories exist and are left as they are.
touch "$fake/user-exists"
mkdir -p "$fake/var/lib/tandem" "$fake/etc/tandem/keys"
run_script postinst configure 2.0
if grep -Eq '^(addgroup|adduser|install) ' "$fake/calls"; then
  bad "second configure:"
  cat "$fake/calls"
fi
run_script prerm upgrade 0.0.1
[[ ! -s $fake/calls ]] || { bad "prerm upgrade stops daemons:"; cat "$fake/calls"; }
run_script prerm remove
expect_call "^deb-systemd-invoke stop tandem-\*\.service$"
run_script postrm remove
expect_call '^systemctl --system daemon-reload$'
echo "secret" >"$fake/etc/tandem/keys/cluster.key"
echo "data" >"$fake/var/lib/tandem/kept"
run_script postrm purge
[[ ! -e $fake/etc/tandem ]] || bad "purge left $fake/etc/tandem: $(ls -R "$fake/etc/tandem")"
[[ -f $fake/var/lib/tandem/kept ]] || bad "purge removed data in /var/lib/tandem"
rm "$fake/var/lib/tandem/kept"
run_script postrm purge
[[ ! -e $fake/var/lib/tandem ]] || bad "purge left an empty /var/lib/tandem"
if PATH=$fake/bin /bin/sh "$fake/postinst" bogus >/dev/null 2>&1; then
  bad "postinst accepted an unknown argument"
fi

# 9. Optional: a real install on this host.
if [[ ${TANDEM_DEB_INSTALL:-0} == 1 ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    bad "TANDEM_DEB_INSTALL=1 needs root"
  elif dpkg-query -W tandem >/dev/null 2>&1 || getent passwd tandem >/dev/null; then
    bad "TANDEM_DEB_INSTALL=1: this host already has the tandem package or user"
  else
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$deb" \
      >"$tmp/install.log" 2>&1; then
      cat "$tmp/install.log"; bad "apt-get install of the package failed"
    else
      getent passwd tandem >/dev/null || bad "no tandem user after install"
      for d in /var/lib/tandem:755 /etc/tandem/keys:700; do
        got=$(stat -c %U:%a "${d%:*}")
        [[ $got == "tandem:${d#*:}" ]] || bad "${d%:*}: $got, want tandem:${d#*:}"
      done
      dpkg-query -W -f='${Conffiles}\n' tandem | grep -q '/etc/tandem/job.yaml' ||
        bad "job.yaml is no conffile"
      /usr/bin/tandem --version >/dev/null || bad "installed tandem --version"
      if ! out=$(systemd-analyze verify "${names[@]}" 2>&1) || [[ -n $out ]]; then
        bad "verify installed units: $out"
      fi
      sudo_out=$(runuser -u tandem -- /usr/bin/tandem keys --out /etc/tandem/keys 2>&1) ||
        bad "tandem keys as the tandem user: $sudo_out"
      echo "real install: user, directories, conffile, units and keys: checked"
    fi
    dpkg --purge tandem >>"$tmp/install.log" 2>&1 || bad "dpkg --purge tandem"
    [[ ! -e /etc/tandem && ! -e /var/lib/tandem && ! -e /usr/bin/tandem ]] || bad "purge left files"
    if getent passwd tandem >/dev/null; then deluser --quiet --system tandem >/dev/null || true; fi
    if getent group tandem >/dev/null; then delgroup --quiet --system tandem >/dev/null || true; fi
  fi
fi

exit $fail
