#!/usr/bin/env bash
# fetch-iproute2.sh [DEST]: Debian 12's iproute2 (`ip`, `ss`) and the shared libraries it needs,
# unpacked into DEST [.gpu/iproute2] so that it runs on a machine that has no iproute2 and no
# package manager (the GPU machine: docs/GPU-MACHINE.md). Run it HERE, on a Debian 12 machine
# with apt (root: apt-get update if the lists are empty); carry DEST there with .gpu/.
#
#   DEST/root/...     the packages unpacked with dpkg -x (docs and man pages removed)
#   DEST/bin/ip       a wrapper: runs ROOT/bin/ip through the dynamic loader with ROOT's library
#   DEST/bin/ss       folders first, ROOT found from the wrapper's own location (so DEST may be
#                     moved or carried anywhere):
#                       /lib64/ld-linux-x86-64.so.2 --library-path ROOT/lib/x86_64-linux-gnu:
#                         ROOT/usr/lib/x86_64-linux-gnu ROOT/bin/ip "$@"
#   DEST/MANIFEST     the packages and versions, and the libraries ip resolved here
#
# The package list starts from iproute2's library dependencies (apt-cache depends) and is closed
# over what the binaries actually load: every library the loader resolves outside ROOT, except
# glibc's own, is looked up with dpkg -S and fetched too. glibc comes from the target machine
# (any glibc >= Debian 12's 2.36 runs these binaries). Then it runs `ip -V` and `ip link show`
# through the wrapper as a check. Exit status non-zero when anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.gpu/iproute2}
case $dest in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
die() { echo "fetch-iproute2: $*" >&2; exit 1; }
command -v apt-get >/dev/null && command -v dpkg >/dev/null || die "needs apt-get and dpkg (a Debian 12 machine)"
[[ $(uname -m) == x86_64 ]] || die "the GPU machine is x86-64; this machine is $(uname -m)"
loader=/lib64/ld-linux-x86-64.so.2
[[ -x $loader ]] || die "no $loader"
grep -q '^VERSION_CODENAME=bookworm' /etc/os-release 2>/dev/null ||
  echo "fetch-iproute2: warning: not Debian 12 (bookworm): the packages come from $(. /etc/os-release; echo "$PRETTY_NAME")" >&2

# Library packages iproute2 depends on (apt's view), plus the ones seen loaded by bin/ip.
pkgs=(iproute2 libbpf1 libmnl0 libxtables12 libelf1 libdb5.3 libcap2 libbsd0 libmd0 libtirpc3 zlib1g)
mapfile -t deps < <(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
  --no-replaces --no-enhances iproute2 2>/dev/null | sed -n 's/^ *Depends: \(lib[^<> ]*\)$/\1/p' |
  grep -vx 'libc6\|libcap2-bin' || true)
pkgs+=("${deps[@]}")
mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)

if [[ -d $dest && -n $(ls -A "$dest" 2>/dev/null) && ! -f $dest/MANIFEST ]]; then
  die "$dest holds something else than an earlier fetch-iproute2.sh: not wiping it"
fi
rm -rf "$dest"
mkdir -p "$dest/debs" "$dest/root" "$dest/bin"
dest=$(cd "$dest" && pwd)
root=$dest/root
libpath=$root/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu

fetch() {  # fetch PKG...: download into debs/ (apt-get update once if apt knows none of them)
  if ! (cd "$dest/debs" && apt-get download "$@" >"$dest/debs/apt.log" 2>&1); then
    echo "fetch-iproute2: apt-get download failed; running apt-get update once" >&2
    apt-get update -qq >/dev/null 2>&1 || die "apt-get update failed (root? network?)"
    (cd "$dest/debs" && apt-get download "$@" >"$dest/debs/apt.log" 2>&1) ||
      { cat "$dest/debs/apt.log" >&2; die "apt-get download $* failed"; }
  fi
  local f
  for f in "$dest"/debs/*.deb; do dpkg -x "$f" "$root"; done
}
fetch "${pkgs[@]}"
[[ -x $root/bin/ip || -x $root/sbin/ip ]] || die "no bin/ip in the iproute2 package"
ip_bin=bin/ip; [[ -x $root/$ip_bin ]] || ip_bin=sbin/ip
ss_bin=bin/ss; [[ -x $root/$ss_bin ]] || ss_bin=usr/bin/ss

# Close the list over what the loader resolves outside ROOT (glibc's own libraries excepted).
outside() {
  local b
  for b in "$root/$ip_bin" "$root/$ss_bin"; do
    [[ -x $b ]] || continue
    "$loader" --library-path "$libpath" --list "$b" 2>/dev/null
  done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | grep -v "^$root/" |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64)\.so' | sort -u || true
}
for _ in 1 2 3; do
  mapfile -t libs < <(outside)
  ((${#libs[@]})) || break
  more=()
  for l in "${libs[@]}"; do
    p=$(dpkg -S "$(readlink -f "$l")" 2>/dev/null | head -1 | cut -d: -f1) || true
    [[ -n $p ]] || p=$(dpkg -S "$l" 2>/dev/null | head -1 | cut -d: -f1) || true
    [[ -n $p ]] || die "no package owns $l (needed by ip)"
    more+=("$p")
  done
  echo "fetch-iproute2: also needed: ${more[*]}" >&2
  fetch "${more[@]}"
  pkgs+=("${more[@]}")
done
[[ -z $(outside) ]] || die "still resolved outside $root: $(outside | tr '\n' ' ')"

rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/lintian" "$root/usr/share/bash-completion"

# The wrappers: ROOT from the wrapper's own (link-resolved) location.
for tool in ip ss; do
  bin=$ip_bin; [[ $tool == ss ]] && bin=$ss_bin
  [[ -x $root/$bin ]] || continue
  cat >"$dest/bin/$tool" <<EOF
#!/bin/sh
# $tool from Debian 12's iproute2, unpacked by scripts/fetch-iproute2.sh; runs through the
# loader with the unpacked libraries first, wherever this folder was carried to.
here=\$(dirname "\$(readlink -f "\$0")")
ROOT=\$(cd "\$here/../root" && pwd) || exit 127
exec $loader --library-path "\$ROOT/lib/x86_64-linux-gnu:\$ROOT/usr/lib/x86_64-linux-gnu" "\$ROOT/$bin" "\$@"
EOF
  chmod +x "$dest/bin/$tool"
done

{
  echo "# fetched by scripts/fetch-iproute2.sh on $(date -u +%FT%TZ) from $(. /etc/os-release; echo "$PRETTY_NAME")"
  for f in "$dest"/debs/*.deb; do dpkg-deb -f "$f" Package Version | paste -sd' '; done
  echo "# libraries of $ip_bin, resolved through the wrapper's library path:"
  "$loader" --library-path "$libpath" --list "$root/$ip_bin" | sed "s|$root|ROOT|g"
} >"$dest/MANIFEST"
rm -rf "$dest/debs"

# The check: through the wrapper, as the GPU machine will run it.
"$dest/bin/ip" -V || die "$dest/bin/ip -V failed"
"$dest/bin/ip" link show >/dev/null || die "$dest/bin/ip link show failed"
echo "fetch-iproute2: ok: $dest/bin/ip ($(du -sh "$dest" | cut -f1)); on the GPU machine check-gpu.sh puts $dest/bin first on PATH when ip is missing" >&2
