#!/usr/bin/env bash
# Runs the GoogleTest binary (further arguments go to it, e.g. --gtest_filter=...) and ends
# with one plain summary line ("N passed, N failed").
set -uo pipefail
bin=$1
shift
out=$(mktemp)
"$bin" --gtest_brief=1 --gtest_output="json:${out}.json" "$@" 2>&1
rc=$?
python3 - "$out.json" "$rc" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"tests: could not read results ({e}); exit code {sys.argv[2]}")
    sys.exit(0)
tests = [t for s in d.get("testsuites", []) for t in s.get("testsuite", [])]
skipped = sum(1 for t in tests if t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN")
failed = sum(1 for t in tests if "failures" in t)
passed = len(tests) - failed - skipped
print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
PY
rm -f "$out" "$out.json"
exit $rc
