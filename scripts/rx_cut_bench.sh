#!/usr/bin/env bash
# NCCL_TRIM_RX_CUT off vs on, through a fabric switch that leaves the lengths of what it cuts
# (trim-switch --fabric 1 as the TUN router between network namespaces, scripts/netns_bottleneck.sh;
# root). A 2-rank fp32 AllReduce, each trimmable packet trimmed with probability P at the trim
# size, whatever the queue, so every configuration sees the same trims. Configurations,
# alternated ROUNDS times (the machine may be shared, and its load drifts):
#   fixed            the switch rewrites the lengths (the kernel takes every cut); knob off
#   ip-keep-off      --rewrite-ip-length keep, NCCL_TRIM_RX_CUT=off: every cut a loss, resent
#   ip-keep-packet   the same, NCCL_TRIM_RX_CUT=packet: cuts read from the packet socket
#   udp-keep-packet  --rewrite-udp-length keep, NCCL_TRIM_RX_CUT=packet
# One JSON line per run on stdout ({"config":...,"round":...,"p50_ms":...}), then one summary
# line per configuration (medians over the rounds).
# usage: scripts/rx_cut_bench.sh [BUILD]    env: ROUNDS=5 ITERS=20 BYTES=2M SIZE=256 P=0.2 RATE_GBPS=2
set -euo pipefail
build=${1:-build}
rounds=${ROUNDS:-5}
iters=${ITERS:-20}
bytes=${BYTES:-2M}
size=${SIZE:-256}
p=${P:-0.2}
rate=${RATE_GBPS:-2}
here=$(dirname "${BASH_SOURCE[0]}")
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# run CONFIG ROUND: one bottleneck, one harness run through it; prints the run's JSON line.
run() {
  local config=$1 round=$2 keep=() knob=off
  case "$config" in
    fixed) ;;
    ip-keep-off) keep=(--switch-arg --rewrite-ip-length --switch-arg keep) ;;
    ip-keep-packet) keep=(--switch-arg --rewrite-ip-length --switch-arg keep); knob=packet ;;
    udp-keep-packet) keep=(--switch-arg --rewrite-udp-length --switch-arg keep); knob=packet ;;
  esac
  local o
  o=$(NCCL_TRIM_RX_CUT=$knob "$here/netns_bottleneck.sh" --build "$build" --ranks 2 --rate-gbps "$rate" --seed 5 \
        --switch-arg --mode --switch-arg random --switch-arg --random-p --switch-arg "$p" \
        --switch-arg --fabric --switch-arg 1 --switch-arg --trim-size --switch-arg "$size" "${keep[@]}" -- \
        "$build/bin/trim-harness" --json --deadline-s 90 --netns '{netns}' --mode allreduce --ranks 2 \
        --bytes "$bytes" --iters "$iters" --warmup 1 --seed 3 2>/dev/null) || true
  python3 - "$config" "$round" "$o" <<'PY'
import json, sys
config, rnd, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
h, sw = {"verify": "fail", "error": "no result"}, {}
for line in out.splitlines():
    if '"bench":"harness"' in line: h = json.loads(line)
    if '"event":"final"' in line: sw = json.loads(line)
keys = ("p50_ms", "p99_ms", "plugin_cpu_s", "nmse", "retransmits", "dup_packets", "trimmed_accepted", "cut_received", "cut_rejected",
        "replicas_identical", "verify")
print(json.dumps({"config": config, "round": rnd, "cuts": sw.get("dscp_18_trimmed"), **{k: h.get(k) for k in keys}}))
PY
}

configs=(fixed ip-keep-off ip-keep-packet udp-keep-packet)
for ((r = 0; r < rounds; r++)); do
  for c in "${configs[@]}"; do run "$c" "$r" | tee -a "$out"; done
done
python3 - "$out" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
for config in dict.fromkeys(r["config"] for r in runs):
    rs = [r for r in runs if r["config"] == config and r["p50_ms"] is not None]
    if not rs:
        print(json.dumps({"summary": config, "error": "no run completed"}))
        continue
    med = lambda f: round(statistics.median(f(r) for r in rs), 4)
    print(json.dumps({"summary": config, "runs": len(rs), "p50_ms_median": med(lambda r: r["p50_ms"]),
                      "p99_ms_median": med(lambda r: r["p99_ms"]), "nmse_median": med(lambda r: r["nmse"]),
                      "cuts_median": med(lambda r: r["cuts"]), "retransmits_median": med(lambda r: r["retransmits"]),
                      "resent_not_dup_median": med(lambda r: r["retransmits"] - r["dup_packets"]),
                      "cut_received_median": med(lambda r: r["cut_received"]), "plugin_cpu_s_median": med(lambda r: r["plugin_cpu_s"]),
                      "p50_ms_all": [round(r["p50_ms"], 1) for r in rs],
                      "retransmits_all": [r["retransmits"] for r in rs],
                      "verify": sorted({r["verify"] for r in rs}), "replicas_identical": all(r["replicas_identical"] for r in rs)}))
PY
