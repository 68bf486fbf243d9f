#!/usr/bin/env bash
# pack-gpu.sh [--iproute2] [BUILD] [DEST]: what scripts/check-gpu.sh needs on the GPU machine (which
# has no compiler packages and no Debian packages), without debug info, into DEST [.gpu/build]
# (.gpu/ is in .gitignore; carry it):
#   lib/libnccl-net-trim.so (+ the libnccl-net.so link), bin/trim-switch (random mode, the
#   netns bottleneck), bin/trim-harness, bin/trim-config, bin/trim-bench (`trim-bench cuda`: the
#   comm hook's rotation vs a device copy), lib/libtrim-rht.so (the hook's GPU rotation, for
#   python3 -m bench ddp --hook), lib/libtrim-coll.so (the torch backend "trim", for the "cpu:trim,cuda:nccl"
#   test: tests/python test_backend.BackendMixedCudaTest) and bin/trim-tests (its RotateCuda.* tests;
#   the GPU machine has no gtest).
# The plugin makes no CUDA call; only libtrim-rht, trim-bench and trim-tests link CUDA (static). BUILD [build] is built first
# when the plugin or trim-switch is missing (make -j all). --iproute2 also runs
# scripts/fetch-iproute2.sh (Debian 12's ip into .gpu/iproute2) unless .gpu/iproute2/bin/ip exists.
# DEST/BUILD_INFO names the commit (with -dirty for uncommitted changes) and the plugin's sha256:
# the device's copy of the tree need not be a git checkout of this commit, so results there name
# their build through it (check-gpu.sh reads it, and refuses a plugin whose sha256 differs). On the
# GPU machine: scripts/check-gpu.sh (it finds .gpu/build and .gpu/iproute2 by itself); see
# docs/GPU-MACHINE.md.
set -euo pipefail
cd "$(dirname "$0")/.."
iproute2=0
if [[ ${1:-} == --iproute2 ]]; then iproute2=1; shift; fi
case ${1:-} in -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
build=${1:-build} dest=${2:-.gpu/build}
if [[ ! -f $build/lib/libnccl-net-trim.so || ! -x $build/bin/trim-switch || ! -x $build/bin/trim-tests ]]; then
  echo "pack-gpu: building $build (make -j all trim-tests)" >&2
  make -j"$(nproc)" BUILD="$build" all "$build/bin/trim-tests" >&2
fi
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib"
for t in trim-switch trim-harness trim-config trim-bench trim-tests; do
  if [[ -x $build/bin/$t ]]; then
    strip --strip-debug -o "$dest/bin/$t" "$build/bin/$t"
  elif [[ $t == trim-switch ]]; then
    echo "pack-gpu: no $build/bin/$t" >&2; exit 1
  fi
done
strip --strip-debug -o "$dest/lib/libnccl-net-trim.so" "$build/lib/libnccl-net-trim.so"
[[ -f $build/lib/libtrim-rht.so ]] && strip --strip-debug -o "$dest/lib/libtrim-rht.so" "$build/lib/libtrim-rht.so"
[[ -f $build/lib/libtrim-coll.so ]] && strip --strip-debug -o "$dest/lib/libtrim-coll.so" "$build/lib/libtrim-coll.so"
ln -sf libnccl-net-trim.so "$dest/lib/libnccl-net.so"
if ((iproute2)) && [[ ! -x .gpu/iproute2/bin/ip ]]; then
  scripts/fetch-iproute2.sh .gpu/iproute2
fi
sha=$(sha256sum "$dest/lib/libnccl-net-trim.so" | cut -c1-16)
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[[ $commit != unknown && -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]] && commit+="-dirty"
printf 'commit %s\nplugin_sha256 %s\npacked %s\n' "$commit" "$sha" "$(date -u +%FT%TZ)" >"$dest/BUILD_INFO"
echo "pack-gpu: $dest ($(du -sh "$dest" | cut -f1), plugin sha256 $sha, from $commit)" >&2
[[ -x .gpu/iproute2/bin/ip ]] && echo "pack-gpu: .gpu/iproute2 ($(du -sh .gpu/iproute2 | cut -f1)) is there too" >&2 ||
  echo "pack-gpu: no .gpu/iproute2: the congestion steps will not run there; pack-gpu.sh --iproute2 fetches it" >&2
echo "pack-gpu: carry .gpu; there: scripts/check-gpu.sh --bundle \$OUT, then --continue (docs/GPU-MACHINE.md)" >&2
