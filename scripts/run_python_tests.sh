#!/usr/bin/env bash
# run_python_tests.sh [BUILD] [--with-script-checks]: the nccl_trim package's tests (tests/python,
# stdlib unittest; with the flag, scripts/check_ddp_scripts.sh beside them) against
# BUILD/lib's libraries (default build), without installing the package. Tests that need torch
# skip with a reason where it is missing (not under make test: TRIM_REQUIRE_TORCH=1); a missing
# library of BUILD fails (TRIM_REQUIRE_LIBS=0 to skip instead). Environment: PYTHON (default python3).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-build}
script_checks=0
[[ ${2:-} == --with-script-checks ]] && script_checks=1
[[ $build = /* ]] || build=$root/$build
PYTHON=${PYTHON:-python3}
export PYTHONPATH=$root/python:$root${PYTHONPATH:+:$PYTHONPATH}
export NCCL_TRIM_LIB_DIR=$build/lib
# The build made them: a missing library is a failure here, not a skip (tests/python/_support.py).
export TRIM_REQUIRE_LIBS=${TRIM_REQUIRE_LIBS:-1}
# No __pycache__ in the source tree (not PYTHONPYCACHEPREFIX: it also hides the installed
# packages' bytecode, which doubles the time of every `import torch`).
export PYTHONDONTWRITEBYTECODE=1
cd "$root"
# Two shards side by side (TRIM_TEST_SPLIT=0: one process): the spawn-heavy modules wait on
# process start-up, peers and timeouts more than they compute, so a 2-core machine has room for
# both. Shard A is listed; B is every other test_*.py.
if [[ ${TRIM_TEST_SPLIT:-1} == 0 ]]; then
  exec "$PYTHON" -m unittest discover -s tests/python -t tests/python -v
fi
shard_a=(test_backend test_conformance test_launcher_ddp test_hook_local test_packaging)
shard_b=()
for f in tests/python/test_*.py; do
  m=$(basename "$f" .py)
  [[ " ${shard_a[*]} " == *" $m "* ]] || shard_b+=("$m")
done
log_a=$(mktemp) log_b=$(mktemp) log_s=$(mktemp)
(cd tests/python && "$PYTHON" -m unittest -v "${shard_a[@]}") >"$log_a" 2>&1 &
pid_a=$!
rc_a=0 rc_b=0 rc_s=0
if [[ $script_checks == 1 ]]; then
  scripts/check_ddp_scripts.sh >"$log_s" 2>&1 &
  pid_s=$!
fi
(cd tests/python && "$PYTHON" -m unittest -v "${shard_b[@]}") >"$log_b" 2>&1 || rc_b=$?
wait "$pid_a" || rc_a=$?
if [[ $script_checks == 1 ]]; then
  wait "$pid_s" || rc_s=$?
fi
echo "== python tests, shard A: ${shard_a[*]}"
cat "$log_a"
echo "== python tests, shard B: ${shard_b[*]}"
cat "$log_b"
if [[ $script_checks == 1 ]]; then
  echo "== scripts/check_ddp_scripts.sh"
  cat "$log_s"
fi
rm -f "$log_a" "$log_b" "$log_s"
echo "python tests: shard A rc=$rc_a, shard B rc=$rc_b$([[ $script_checks == 1 ]] && echo ", check_ddp_scripts rc=$rc_s")"
[[ $rc_a == 0 && $rc_b == 0 && $rc_s == 0 ]]
