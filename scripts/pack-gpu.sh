#!/usr/bin/env bash
# pack-gpu.sh [BUILD] [DEST]: copies the built binaries and plugin, without debug info, into DEST
# [.gpu/build] (ignored by git), small enough to carry to a GPU machine that has no compiler or
# Debian packages; there: scripts/check-gpu.sh --build DEST. (.gpu/ is in .gitignore.)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build} dest=${2:-.gpu/build}
[[ -f $build/lib/libnccl-net-trim.so && -x $build/bin/trim-tests ]] || { echo "pack-gpu: build first (make -j all $build/bin/trim-tests)" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib"
for f in "$build"/bin/trim-*; do strip --strip-debug -o "$dest/bin/$(basename "$f")" "$f"; done
strip --strip-debug -o "$dest/lib/libnccl-net-trim.so" "$build/lib/libnccl-net-trim.so"
ln -sf libnccl-net-trim.so "$dest/lib/libnccl-net.so"
du -sh "$dest"
