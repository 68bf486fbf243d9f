#!/usr/bin/env bash
# run_python_tests.sh [BUILD]: the nccl_trim package's tests (tests/python, stdlib unittest) against
# BUILD/lib's libraries (default build), without installing the package. Tests that need torch
# skip with a reason where it is missing (not under make test: TRIM_REQUIRE_TORCH=1); a missing
# library of BUILD fails (TRIM_REQUIRE_LIBS=0 to skip instead). Environment: PYTHON (default python3).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-build}
[[ $build = /* ]] || build=$root/$build
PYTHON=${PYTHON:-python3}
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
export NCCL_TRIM_LIB_DIR=$build/lib
# The build made them: a missing library is a failure here, not a skip (tests/python/_support.py).
export TRIM_REQUIRE_LIBS=${TRIM_REQUIRE_LIBS:-1}
# No __pycache__ in the source tree (not PYTHONPYCACHEPREFIX: it also hides the installed
# packages' bytecode, which doubles the time of every `import torch`).
export PYTHONDONTWRITEBYTECODE=1
cd "$root"
exec "$PYTHON" -m unittest discover -s tests/python -t tests/python -v
