#!/usr/bin/env bash
# Runs the GoogleTest binary (further arguments go to it, e.g. --gtest_filter=...) and ends
# with one plain summary line ("N passed, N failed").
#
# Without a --gtest_filter, the tests that mostly wait (Close*: frozen peers and timeouts, about
# a third of the suite's wall time and little of its CPU) run in a second process beside the rest,
# so a 2-core machine is not idle through them; with them go the simulator's runs (Sim*: ~17 s of
# one core, a trim-sim child, no network) and the harness's abort under held codec tasks (~8 s,
# mostly its ranks' 2 s waits), so that both processes take about as long (measured back to back
# on a shared 2-core machine: 81 and 89 s, where the split by Close* alone took 93 and ~55). They touch only loopback, never the network namespaces and
# TUN devices of the others. TRIM_TEST_SPLIT=0 runs everything in one process.
set -uo pipefail
bin=$1
shift
split=${TRIM_TEST_SPLIT:-1}
for a in "$@"; do [[ $a == --gtest_filter=* ]] && split=0; done
out=$(mktemp)
second='Close*:Sim*:HarnessCodecPool.AbortAndCloseWithTasksInFlight'
if [[ $split == 1 ]]; then
  "$bin" --gtest_brief=1 --gtest_output="json:${out}.wait.json" --gtest_filter="$second" "$@" >"${out}.wait.log" 2>&1 &
  waiter=$!
  "$bin" --gtest_brief=1 --gtest_output="json:${out}.json" --gtest_filter="-$second" "$@" 2>&1
  rc=$?
  wait "$waiter"
  rc_wait=$?
  cat "${out}.wait.log"
  ((rc == 0)) && rc=$rc_wait
  files=("$out.json" "$out.wait.json")
else
  "$bin" --gtest_brief=1 --gtest_output="json:${out}.json" "$@" 2>&1
  rc=$?
  files=("$out.json")
fi
python3 "$(dirname "${BASH_SOURCE[0]}")/gtest_summary.py" "$rc" "${files[@]}"
rm -f "$out" "$out.json" "$out.wait.json" "$out.wait.log"
exit $rc
