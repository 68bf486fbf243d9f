#!/usr/bin/env bash
# Shared by the sim_*.sh scenarios: run trim-sim with --json and print one table row of the
# fields that matter. Usage (sourced): sim_row LABEL trim-sim-args...
set -euo pipefail
BUILD="${BUILD:-build}"
SIM="${SIM:-$BUILD/bin/trim-sim}"
[[ -x "$SIM" ]] || { echo "no $SIM: run 'make -j2 all' first" >&2; exit 1; }

sim_header() {
  printf '%-34s %10s %10s %9s %9s %8s %9s %8s\n' scenario p50_ms p99_ms trim_rate drop_rate nmse maxq_up_KB wall_s
}

sim_row() {
  local label="$1"; shift
  "$SIM" "$@" --json | tail -1 | python3 -c '
import json, sys
d = json.load(sys.stdin)
up = max(d["tiers"]["leaf_up"]["max_queue_bytes"], d["tiers"]["leaf_down"]["max_queue_bytes"]) / 1024
print("%-34s %10.3f %10.3f %9.4f %9.4f %8.4f %9.1f %8.2f" % (sys.argv[1], d["jct_p50_ms"], d["jct_p99_ms"],
      d["trim_rate"], d["drop_rate"], d["nmse"], up, d["wall_seconds"]))' "$label"
}
