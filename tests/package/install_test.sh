#!/bin/bash
# Installing muster as a user would: `cmake --install` into a prefix (everything lands under
# it), and the .deb that `cpack -G DEB` makes (dependencies from dpkg-shlibdeps, resolvable
# by apt on Debian 12), installed into a fresh dpkg root, run from there, then removed with
# nothing left behind. Usage: install_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
work=$(mktemp -d /tmp/muster-package-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== cmake --install --prefix"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
while read -r path; do
  [[ $path == "$work/prefix/"* ]] || fail "cmake --install wrote outside the prefix: $path"
done <"$build/install_manifest.txt"
for f in bin/muster share/man/man1/muster.1 share/man/man5/muster-cluster.5 \
         share/doc/muster/remote-start.md share/doc/muster/slurm.md share/doc/muster/smoke.md \
         share/doc/muster/reliability.md share/muster/doctor.schema.json \
         share/muster/topology.schema.json share/muster/cluster.example.yaml \
         share/muster/ci/github-actions.yml share/muster/monitoring/muster-doctor.timer \
         share/bash-completion/completions/muster share/zsh/site-functions/_muster; do
  [[ -e $work/prefix/$f ]] || fail "cmake --install did not install $f"
done
"$work/prefix/bin/muster" --version | grep -q "^build " || fail "the installed muster does not run"
# The agent's binary, where an installed muster looks for it (launcher/remote/bundle.h).
cmp -s "$work/prefix/libexec/muster/muster-node" "$build/muster-node" ||
  fail "cmake --install did not install muster-node in libexec/muster"
# The bundle an installed muster writes carries the node binary muster holds inside itself,
# which loads neither libssh, Kerberos nor yaml-cpp.
bundle=$("$work/prefix/bin/muster" bundle "$work/bundle" 2>&1 | grep -o "$work/bundle/[0-9a-f]*" | head -1)
[[ -n $bundle ]] || fail "the installed muster did not write a bundle"
cmp -s "$bundle/muster" "$build/muster-node" || fail "the bundle's muster is not muster-node"
for lib in "$bundle"/lib/libssh.so* "$bundle"/lib/libyaml-cpp.so* "$bundle"/lib/libkrb5* "$bundle"/lib/libgssapi*; do
  [[ ! -e $lib ]] || fail "the bundle carries $lib, which the node binary does not need"
done

echo "== cpack -G DEB"
(cd "$work" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/deb" >/dev/null) ||
  fail "cpack -G DEB failed"
deb=$(ls "$work"/deb/muster_*.deb)
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
# What the package holds (checked in the .deb itself: a site's dpkg may leave docs out).
contents=$(dpkg-deb -c "$deb")
for f in ./usr/share/man/man5/muster-cluster.5 ./usr/share/doc/muster/remote-start.md \
         ./usr/share/doc/muster/slurm.md ./usr/share/doc/muster/smoke.md; do
  grep -q " $f\$" <<<"$contents" || fail "the package does not hold /${f#./}"
done
for lib in libssh libhwloc libyaml-cpp libgloo libfmt libc6; do
  [[ $depends == *"$lib"* ]] || fail "the package's Depends lacks $lib: $depends"
done
# apt resolves every dependency from Debian's archive (a simulation: nothing is installed).
if command -v apt-get >/dev/null; then
  apt-get install -s "$deb" >"$work/apt.log" 2>&1 || { cat "$work/apt.log"; fail "apt cannot install $deb"; }
fi

echo "== dpkg --root: install, run, remove"
root=$work/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
touch "$root/var/lib/dpkg/status"
# The fresh root has none of the libraries: the binary runs with this machine's.
dpkg --root="$root" --force-depends --force-not-root --force-script-chrootless \
  --log=/dev/null -i "$deb" >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; fail "dpkg -i failed"; }
for f in usr/bin/muster usr/libexec/muster/muster-node usr/share/man/man1/muster.1 usr/share/muster/doctor.schema.json \
         usr/share/bash-completion/completions/muster usr/share/zsh/vendor-completions/_muster; do
  [[ -e $root/$f ]] || fail "the package did not install /$f"
done
"$root/usr/bin/muster" --version
"$root/usr/bin/muster" doctor --json "$work/doctor.json" >/dev/null 2>&1 ||
  fail "muster doctor from the installed package failed: $(cat "$work/doctor.json")"
grep -q '"status": "pass"' "$work/doctor.json" || fail "doctor did not pass"
dpkg --root="$root" --force-not-root --force-script-chrootless --log=/dev/null -r muster >/dev/null
left=$(find "$root" -path "$root/var" -prune -o \( -type f -o -type l \) -print)
[[ -z $left ]] || fail "removing the package left files behind: $left"
echo "ok"
