#!/usr/bin/env bash
# Native vs fabric mode at one trim size, on the demo's AllReduce (scripts/demo.sh's harness run
# with its parameters: 4 ranks, 1 MiB, 60 iterations, through trim-switch on loopback at 1 Gbit/s
# with an 8-packet buffer, 200 us, incast cross traffic, MTU 4096). Configurations, alternated
# ROUNDS times (the machine may be shared, and its load drifts):
#   native        the demo's switch: cut at the plane-0 trim point, exact packets cut to a header
#   native-SIZE   the native mode cutting at SIZE - 18 IP bytes (the bytes a SIZE-byte fabric
#                 trim keeps), exact packets cut to a header
#   fabric-SIZE   --fabric 1 --trim-size SIZE: trims by DSCP, exact classes dropped
#   fabric-SIZE-sized  the same, the ranks with NCCL_TRIM_FABRIC_TRIM_BYTES=SIZE
# One JSON line per run on stdout ({"config":...,"round":...,"p50_ms":...}), then one summary
# line per configuration (medians of p50 and p99 over the rounds, mean NMSE, retransmissions).
# usage: scripts/fabric_bench.sh [BUILD]    env: SIZE=256 ROUNDS=3, DEMO_* as scripts/demo_switch.sh
set -euo pipefail
# shellcheck source=scripts/switch_port.sh
. "$(dirname "${BASH_SOURCE[0]}")/switch_port.sh"
build=${1:-build}
size=${SIZE:-256}
rounds=${ROUNDS:-3}
rate=${DEMO_RATE_GBPS:-1}
buffer_packets=${DEMO_BUFFER_PACKETS:-8}
mtu=${DEMO_MTU:-4096}
prop_us=${DEMO_PROP_US:-200}
cross=${DEMO_CROSS:-incast:8:0.04:all}
bytes=${DEMO_BYTES:-1M}
iters=${DEMO_ITERS:-60}
ranks=${DEMO_RANKS:-4}
seed=${DEMO_SEED:-7}
out=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$out"
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

# run CONFIG ROUND: one switch, one harness run through it; prints the run's JSON line.
run() {
  local config=$1 round=$2 sw_args=() env=()
  case "$config" in
    native) sw_args=(--trim-exact 1) ;;
    native-*) sw_args=(--trim-exact 1 --trim-bytes $((size - 18))) ;;
    fabric-*-sized) sw_args=(--fabric 1 --trim-size "$size"); env=(NCCL_TRIM_FABRIC_TRIM_BYTES="$size") ;;
    fabric-*) sw_args=(--fabric 1 --trim-size "$size") ;;
  esac
  local log="$out/switch.jsonl"
  setsid "$build/bin/trim-switch" --mode trim --rate-gbps "$rate" --buffer-packets "$buffer_packets" \
    --buffer-bytes 0 --prop-delay-us "$prop_us" --cross "$cross" --seed "$seed" "${sw_args[@]}" >"$log" &
  local sw=$!
  pids+=("$sw")
  local port
  port=$(switch_port "$log" "$sw") || { echo "fabric_bench: trim-switch did not start" >&2; return 1; }
  local h
  h=$(env "${env[@]}" NCCL_TRIM_MTU="$mtu" NCCL_TRIM_SWITCH="127.0.0.1:$port" "$build/bin/trim-harness" \
        --mode allreduce --ranks "$ranks" --bytes "$bytes" --iters "$iters" --warmup 1 --seed "$seed" \
        --deadline-s 90 --json 2>/dev/null) || true
  kill -TERM "$sw" 2>/dev/null || true
  wait "$sw" 2>/dev/null || true
  python3 - "$config" "$round" "$h" <<'PY'
import json, sys
config, rnd, line = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    h = json.loads(line)
except Exception:
    h = {"verify": "fail", "error": "no result"}
keys = ("p50_ms", "p99_ms", "gbps", "nmse", "trim_rate", "retransmits", "trimmed_accepted", "trimmed_marked",
        "header_cuts", "replicas_identical", "verify")
print(json.dumps({"config": config, "round": rnd, **{k: h.get(k) for k in keys}}))
PY
}

configs=(native "native-$size" "fabric-$size" "fabric-$size-sized")
for ((r = 0; r < rounds; r++)); do
  for c in "${configs[@]}"; do run "$c" "$r" | tee -a "$out/runs.jsonl"; done
done
python3 - "$out/runs.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
for config in dict.fromkeys(r["config"] for r in runs):
    rs = [r for r in runs if r["config"] == config and r["p50_ms"] is not None]
    if not rs:
        print(json.dumps({"summary": config, "error": "no run completed"}))
        continue
    med = lambda k: round(statistics.median(r[k] for r in rs), 3)
    print(json.dumps({"summary": config, "runs": len(rs), "p50_ms_median": med("p50_ms"), "p99_ms_median": med("p99_ms"),
                      "p50_ms_all": [round(r["p50_ms"], 1) for r in rs], "p99_ms_all": [round(r["p99_ms"], 1) for r in rs],
                      "nmse_mean": statistics.mean(r["nmse"] for r in rs), "trim_rate_mean": round(statistics.mean(r["trim_rate"] for r in rs), 4),
                      "retransmits_median": med("retransmits"), "verify": sorted({r["verify"] for r in rs}),
                      "replicas_identical": all(r["replicas_identical"] for r in rs)}))
PY
