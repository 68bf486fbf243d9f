#!/usr/bin/env bash
# trim/drop p99 as a curve over the baseline's loss-recovery clock and over seeds: trim-sim's ring
# AllReduce (16 MiB per host, 4:1 leaves, bursty background) in trim and drop mode, both with the
# plugin's recovery unit (transport/recovery.h), at each minimum RTO (tail probe at RTO/4).
# Prints one line per run, a table of the p99 ratio (median and range over seeds) per RTO, and
# last one JSON line.
#
# Usage: scripts/sim_recovery_curve.sh [--hosts N] [--rto-us LIST] [--seeds LIST] [--build DIR] [--out DIR]
#   defaults: --hosts 256 --rto-us 100,500,1000,2500,10000 --seeds 1,2,3
set -euo pipefail
hosts=256 rtos=100,500,1000,2500,10000 seeds=1,2,3 build=build out=""
while (($#)); do
  case $1 in
    --hosts) hosts=$2; shift 2 ;;
    --rto-us) rtos=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "sim_recovery_curve: unknown option $1" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
sim=$build/bin/trim-sim
[[ -x $sim ]] || { echo "sim_recovery_curve: $sim not built (make -j)" >&2; exit 1; }
out=${out:-$build/sim_curve_$hosts}
mkdir -p "$out"
IFS=, read -r -a rto_list <<<"$rtos"
IFS=, read -r -a seed_list <<<"$seeds"
for rto in "${rto_list[@]}"; do
  for seed in "${seed_list[@]}"; do
    for mode in trim drop; do
      f=$out/${mode}_rto${rto}_seed${seed}.json
      [[ -s $f ]] || "$sim" --hosts "$hosts" --workload allreduce --bytes 16M --iters 5 --mtu 9000 --oversub 4 \
        --background bursty --mode "$mode" --rto-us "$rto" --seed "$seed" --json | tail -1 >"$f"
      python3 - "$f" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(f"hosts {j['hosts']} rto {j['rto_us']:g} us seed {j['seed']} {j['mode']:4}: p50 {j['jct_p50_ms']:.2f} "
      f"p99 {j['jct_p99_ms']:.2f} ms, retx rack/probe/rto {j['retx_rack']}/{j['retx_tlp']}/{j['retx_rto']}, "
      f"trimmable resent {j['retx_trimmable']}, wall {j['wall_seconds']:.0f} s", flush=True)
PY
    done
  done
done
python3 - "$out" <<'PY'
import glob, json, os, statistics, sys
runs = [json.load(open(f)) for f in glob.glob(os.path.join(sys.argv[1], "*.json"))]
by = {}
for j in runs:
    by.setdefault((j["rto_us"], j["seed"]), {})[j["mode"]] = j
curve = []
for rto in sorted({k[0] for k in by}):
    ratios, trim99, drop99 = [], [], []
    for (r, seed), m in sorted(by.items()):
        if r != rto or "trim" not in m or "drop" not in m:
            continue
        trim99.append(m["trim"]["jct_p99_ms"])
        drop99.append(m["drop"]["jct_p99_ms"])
        ratios.append(m["trim"]["jct_p99_ms"] / m["drop"]["jct_p99_ms"])
    if ratios:
        curve.append({"rto_us": rto, "seeds": len(ratios), "ratio_median": round(statistics.median(ratios), 3),
                      "ratio_min": round(min(ratios), 3), "ratio_max": round(max(ratios), 3),
                      "trim_p99_ms_median": round(statistics.median(trim99), 2),
                      "drop_p99_ms_median": round(statistics.median(drop99), 2)})
print(f"\n{'RTO (us)':>9} {'trim p99':>9} {'drop p99':>9} {'p99 trim/drop: median [min, max]':>34}")
for c in curve:
    print(f"{c['rto_us']:>9g} {c['trim_p99_ms_median']:>9.2f} {c['drop_p99_ms_median']:>9.2f}   "
          f"{c['ratio_median']:.3f} [{c['ratio_min']:.3f}, {c['ratio_max']:.3f}] over {c['seeds']} seeds")
hosts = runs[0]["hosts"] if runs else 0
print(json.dumps({"bench": "sim_recovery_curve", "hosts": hosts, "curve": curve}, separators=(",", ":")))
PY
