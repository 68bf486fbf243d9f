#!/usr/bin/env bash
# Rewrites the golden traces of the switch port model (tests/golden/switch_port_*.txt) from the
# current switch_sim/port.cc: builds the test binary, then runs the golden tests with
# TRIM_UPDATE_GOLDEN=1 (they write the files instead of comparing). Review
# `git diff tests/golden` before committing: every changed line is a change of behaviour.
# Usage: scripts/update-golden.sh [build-dir]    (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
make --no-print-directory -j"$(nproc 2>/dev/null || echo 2)" BUILD="$build" "$build/bin/trim-tests"
TRIM_UPDATE_GOLDEN=1 "$build/bin/trim-tests" --gtest_filter='SwitchPortGolden.*'
git --no-pager diff --stat -- tests/golden 2>/dev/null || true
