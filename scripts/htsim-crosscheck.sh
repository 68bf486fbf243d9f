#!/usr/bin/env bash
# Cross-checks trim-sim against htsim's NDP simulator (Broadcom/csg-htsim, fetched and built by
# the user: `cd sim && make && cd datacenter && make htsim_ndp`; not part of CI). For each
# workload, trim-sim runs it in trim mode and exports it as an htsim connection matrix (--cm);
# htsim_ndp runs the same matrix on the same leaf-spine (hosts per leaf, spines, 4:1 uplinks,
# 100 Gbit/s, 500 ns links, MTU 9000, data queue in packets, ECMP) and the completion times are
# printed side by side, then one JSON line. Only trim mode is compared: htsim's NDP has no
# tail-drop twin of our transport. Differences to expect: NDP is receiver-pulled (PULL packets
# pace senders), trim-sim's endpoints push with a window and the plugin's loss recovery; NDP
# bounces trimmed headers back to the sender, trim-sim NACKs them from the receiver.
#
# Usage: scripts/htsim-crosscheck.sh HTSIM_DATACENTER_DIR [--hosts N] [--bytes SIZE] [--queue-pkts N]
#        [--build DIR] [--out DIR]
#   HTSIM_DATACENTER_DIR: the folder holding the built htsim_ndp (csg-htsim's sim/datacenter)
#   defaults: --hosts 64 --bytes 16M --queue-pkts 10 (trim-sim's 1-BDP buffer is 9.6 packets)
set -euo pipefail
[[ $# -ge 1 && $1 != -h && $1 != --help ]] || { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2; }
htsim_dir=$1
shift
hosts=64 bytes=16M queue_pkts=10 build=build out=""
while (($#)); do
  case $1 in
    --hosts) hosts=$2; shift 2 ;;
    --bytes) bytes=$2; shift 2 ;;
    --queue-pkts) queue_pkts=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "htsim-crosscheck: unknown option $1" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
sim=$build/bin/trim-sim
ndp=$htsim_dir/htsim_ndp
[[ -x $sim ]] || { echo "htsim-crosscheck: $sim not built (make -j)" >&2; exit 1; }
[[ -x $ndp ]] || { echo "htsim-crosscheck: no htsim_ndp in $htsim_dir (build csg-htsim first)" >&2; exit 1; }
per_leaf=16
((hosts % per_leaf == 0)) || { echo "htsim-crosscheck: --hosts must be a multiple of $per_leaf" >&2; exit 2; }
leaves=$((hosts / per_leaf))
out=${out:-$build/htsim_crosscheck_$hosts}
mkdir -p "$out"

# htsim's two-tier fat tree as trim-sim builds its leaf-spine: 16 hosts per leaf, 4 uplinks per
# leaf (4:1), every link 100 Gbit/s and 500 ns. (Queue sizes come from -q, in packets.)
cat >"$out/leafspine.topo" <<EOF
Nodes $hosts
Tiers 2
Podsize $hosts

Tier 0
Downlink_speed_Gbps 100
Radix_Down $per_leaf
Radix_Up 4
Downlink_Latency_ns 500
Switch_Latency_ns 0
Oversubscribed 4

Tier 1
Downlink_speed_Gbps 100
Radix_Down $leaves
Downlink_Latency_ns 500
Switch_Latency_ns 0
EOF

# label:trim-sim flags. Incast and permutation payload exact (--exact): cut to headers and
# resent, as NDP treats all data (a trimmable payload would complete on heads alone, which NDP
# has no notion of). htsim's NDP sprays each flow over -paths 4; trim-sim routes per flow (ECMP)
# by default, so the permutation also runs with trim-sim spraying.
workloads=("allreduce:--workload allreduce" "incast:--workload incast --incast-senders 16 --exact"
           "permutation:--workload permutation --exact"
           "permutation_spray:--workload permutation --exact --routing spray")
: >"$out/results.jsonl"
for w in "${workloads[@]}"; do
  name=${w%%:*}
  # shellcheck disable=SC2086  # the flags after the label
  "$sim" --hosts "$hosts" ${w#*:} --bytes "$bytes" --iters 1 --mtu 9000 --oversub 4 --background none \
    --mode trim --seed 1 --cm "$out/$name.cm" --json | tail -1 >"$out/$name.trimsim.json"
  (cd "$out" && "$ndp" -nodes "$hosts" -tm "$name.cm" -topo leafspine.topo -mtu 9000 -q "$queue_pkts" \
    -strat ecmp_host -paths 4 -cwnd 16 -end 10000000 -seed 1 >"$name.htsim.txt" 2>&1)
  python3 - "$out" "$name" <<'PY' | tee -a "$out/results.jsonl"
import json, re, sys
out, name = sys.argv[1:]
t = json.load(open(f"{out}/{name}.trimsim.json"))
txt = open(f"{out}/{name}.htsim.txt", errors="replace").read()
fin = [float(x) for x in re.findall(r"finished at ([0-9.]+)", txt)]
stats = re.search(r"New: (\d+) Rtx: (\d+) Bounced: (\d+)", txt)
conns = int(re.search(r"Connections: (\d+)", txt).group(1)) if re.search(r"Connections: (\d+)", txt) else 0
h_ms = max(fin) / 1000 if fin else None
print(json.dumps({"workload": name, "hosts": t["hosts"], "trimsim_ms": t["jct_p50_ms"],
                  "htsim_ndp_ms": h_ms, "ratio_htsim_over_trimsim": round(h_ms / t["jct_p50_ms"], 3) if h_ms else None,
                  "htsim_flows_finished": len(fin), "htsim_flows": conns,
                  "trimsim_trimmed": t["trimmed"], "trimsim_exact_cut": t.get("exact_cut", 0),
                  "htsim_new": int(stats.group(1)) if stats else None, "htsim_rtx": int(stats.group(2)) if stats else None,
                  "htsim_bounced": int(stats.group(3)) if stats else None}))
PY
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(f"{sys.argv[1]}/results.jsonl") if l.strip()]
print(f"\n{'workload':12} {'trim-sim ms':>12} {'htsim NDP ms':>13} {'ratio':>7} {'trim-sim trims':>15} {'htsim bounced':>14}")
for r in rows:
    h = f"{r['htsim_ndp_ms']:.3f}" if r["htsim_ndp_ms"] else "—"
    ratio = f"{r['ratio_htsim_over_trimsim']:.3f}" if r["ratio_htsim_over_trimsim"] else "—"
    print(f"{r['workload']:12} {r['trimsim_ms']:>12.3f} {h:>13} {ratio:>7} "
          f"{r['trimsim_trimmed'] + r['trimsim_exact_cut']:>15} {r['htsim_bounced'] if r['htsim_bounced'] is not None else '—':>14}")
print(json.dumps({"bench": "htsim_crosscheck", "rows": rows}, separators=(",", ":")))
PY
