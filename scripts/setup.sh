#!/usr/bin/env bash
# Installs what `make test` / `make demo` need, and only what is missing: Debian packages, then
# torch, numpy, scikit-learn (the training scripts' digits data) and matplotlib (make demo's plots) from
# PyPI for the PyTorch tests and the demo
# (--no-torch, or TRIM_SKIP_TORCH=1, skips those).
# Checking costs a few dpkg queries and one `import torch`, so every make test runs it.
set -euo pipefail

want_torch=1
[ "${TRIM_SKIP_TORCH:-0}" = "1" ] && want_torch=0
for arg in "$@"; do
  [ "$arg" = "--no-torch" ] && want_torch=0
done
PYTHON=${PYTHON:-python3}

# torch from PyPI: on Linux x86_64 the only wheel is the CUDA build, which also runs on a CPU
# (about 2.7 GB to download with its nvidia-* wheels, 5 GB installed, ~1.5 min here). Installed
# into the Python that runs the tests ($PYTHON), only when `import torch` fails.
install_torch() {
  if "$PYTHON" -c "import torch, numpy, sklearn, matplotlib, expecttest" >/dev/null 2>&1; then
    return 0
  fi
  echo "setup: installing torch, numpy, scikit-learn, matplotlib and expecttest (torch's test utilities) from PyPI for the PyTorch tests (about 2.8 GB to download, 5 GB on disk;" \
       "TRIM_SKIP_TORCH=1 skips them)"
  if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
    echo "setup: $PYTHON has no pip; install python3-pip (or use a virtualenv), then run make test again" >&2
    return 1
  fi
  if ! PIP_DISABLE_PIP_VERSION_CHECK=1 "$PYTHON" -m pip install -q --progress-bar off "torch>=2.11" numpy scikit-learn matplotlib expecttest; then
    echo "setup: pip could not install torch into $PYTHON (an externally managed Python? use a virtualenv and" \
         "PYTHON=/path/to/venv/bin/python make test)" >&2
    return 1
  fi
  "$PYTHON" -c "import torch; print('setup: torch', torch.__version__)"
}

# Debian package -> why we need it
declare -A need=(
  [g++]="compiler"
  [make]="build"
  [libgtest-dev]="GoogleTest (tests)"
  [libspdlog-dev]="logging (header-only use)"
  [libfmt-dev]="formatting, compiled into the plugin"
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
  [ "$want_torch" = 1 ] && install_torch
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
[ "$want_torch" = 1 ] && install_torch
exit 0
