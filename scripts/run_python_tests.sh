#!/usr/bin/env bash
# run_python_tests.sh [BUILD]: the Python tests (tests/python, stdlib unittest: the nccl_trim
# package's and the bench package's) against BUILD/lib's libraries (default build), without
# installing the package. Tests that need torch skip with a reason where it is missing (not under
# make test: TRIM_REQUIRE_TORCH=1); a missing library of BUILD fails (TRIM_REQUIRE_LIBS=0 to skip
# instead). Environment: PYTHON (default python3).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-build}
[[ $build = /* ]] || build=$root/$build
PYTHON=${PYTHON:-python3}
export PYTHONPATH=$root/python:$root${PYTHONPATH:+:$PYTHONPATH}
export NCCL_TRIM_LIB_DIR=$build/lib
# The build made them: a missing library is a failure here, not a skip (tests/python/_support.py).
export TRIM_REQUIRE_LIBS=${TRIM_REQUIRE_LIBS:-1}
# No __pycache__ in the source tree (not PYTHONPYCACHEPREFIX: it also hides the installed
# packages' bytecode, which doubles the time of every `import torch`).
export PYTHONDONTWRITEBYTECODE=1
cd "$root/tests/python"
# Three shards side by side (TRIM_TEST_SPLIT=0: one process): the spawn-heavy modules wait on
# process start-up, peers and timeouts more than they compute, so a 2-core machine has room for
# them. A is listed, C the bench package's tests and the ones listed, B every other test_*.py.
# Balanced on the times with forkserver ranks (tests/python/_support.py rank_context), measured on
# a loaded 2-core machine: A 510, B 431, C 463 s of wall; 70, 71 and 108 s of CPU.
if [[ ${TRIM_TEST_SPLIT:-1} == 0 ]]; then
  exec "$PYTHON" -m unittest discover -s . -t . -v
fi
shard_a=(test_backend test_conformance test_launcher_ddp test_hook_local)
shard_c_listed=(test_packaging test_launcher_powersgd)
shard_b=() shard_c=()
for f in test_*.py; do
  m=${f%.py}
  if [[ $m == test_bench_* || " ${shard_c_listed[*]} " == *" $m "* ]]; then shard_c+=("$m")
  elif [[ " ${shard_a[*]} " != *" $m "* ]]; then shard_b+=("$m")
  fi
done
pids=() logs=()
for shard in a b c; do
  declare -n mods="shard_$shard"
  logs+=("$(mktemp)")
  "$PYTHON" -m unittest -v "${mods[@]}" >"${logs[-1]}" 2>&1 &
  pids+=($!)
done
summary="" failed=0 i=0
for shard in A B C; do
  rc=0
  wait "${pids[$i]}" || rc=$?
  declare -n mods="shard_${shard,,}"
  echo "== python tests, shard $shard: ${mods[*]}"
  cat "${logs[$i]}"
  rm -f "${logs[$i]}"
  summary+=" $shard rc=$rc"
  ((rc == 0)) || failed=1
  i=$((i + 1))
done
echo "python tests:$summary"
exit "$failed"
