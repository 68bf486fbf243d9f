#!/usr/bin/env bash
# Installs what `make test` / `make demo` need, and only what is missing (Debian packages).
# Checking costs a few dpkg queries, so every make test runs it.
set -euo pipefail

# Debian package -> why we need it
declare -A need=(
  [g++]="compiler"
  [make]="build"
  [libgtest-dev]="GoogleTest (tests)"
  [libspdlog-dev]="logging (header-only use)"
  [libfmt-dev]="formatting, compiled into the plugin"
  [gnuplot-nox]="make demo's plot"
  [python3]="make demo's table"
)
if [ "${1:-}" = "--fuzz" ]; then
  need[clang]="libFuzzer builds (make fuzz)"
  need[libclang-rt-14-dev]="libFuzzer runtime"
fi

missing=()
for pkg in "${!need[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing missing packages: ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "setup: not root and no sudo; please install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
