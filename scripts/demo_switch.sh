#!/usr/bin/env bash
# demo_switch.sh BUILD: make demo's part that needs no root (scripts/demo.sh runs it where
# network namespaces cannot be made, or with DEMO_SWITCH=1): a 4-rank ring AllReduce through
# trim-switch on loopback, once with a trimming
# switch and once with an ordinary tail-drop switch (same seed, same cross traffic). Prints a
# side-by-side table; the last line is one JSON object.
#
# Outputs under $BUILD/demo/:
#   switch_{trim,drop}.jsonl   the daemon's stats lines (listening, interval every 100 ms, final)
#   harness_{trim,drop}.json   trim-harness's result line
#   iters_{trim,drop}.csv      per-iteration times (trim-harness --csv)
#   trimrate_{trim,drop}.dat   per 100 ms: time, real packets forwarded, of which trimmed
#   switch_demo.png            iteration time and trim rate over time, trim vs drop
#
# Parameters (override through the environment; defaults chosen for a 2-core VM):
#   DEMO_RATE_GBPS=1       egress port rate. Four ranks plus the daemon on two cores push at most
#                          ~0.6 Gbit/s per port through the daemon (docs/BENCHMARKS.md, "Switch
#                          emulator"); the ring's own load here is ~0.2 Gbit/s per port, so the
#                          congestion that matters is the cross traffic's bursts, not the CPU.
#   DEMO_BUFFER_PACKETS=8  data queue of 8 packets (32 KiB at the 4 KiB MTU): the shallow buffer
#                          of NDP's evaluation, so that bursts overflow it.
#   DEMO_MTU=4096          NCCL_TRIM_MTU of the ranks: the size the buffer, the cross traffic's
#                          packets (trim-switch's default 4096) and docs/RESULTS.md assume; auto
#                          would give loopback's 9000.
#   DEMO_PROP_US=200       link delay: a loss costs at least a round trip, a trim does not.
#   DEMO_CROSS=incast:8:0.04:all
#                          background incast toward every receiver: 8 senders at 0.04 Gbit/s
#                          each, in step, so that every 0.8 ms a burst of 8 packets lands at once
#                          and fills the buffer (0.32 Gbit/s on average, a third of the port).
#   DEMO_TRIM_EXACT=1      the trimming switch cuts exact-class packets (allgather half,
#                          small messages) to a bare header, which the receiver NACKs at once
#                          (NDP's and UEC's rule, trim-switch's default); 0 drops them as the
#                          tail-drop switch does.
#   DEMO_BYTES=1M DEMO_ITERS=60 DEMO_RANKS=4 DEMO_SEED=7
#                          per-rank AllReduce size, timed iterations, ranks, seed (the data,
#                          the switch's random choices and the cross-traffic phases).
#   DEMO_NICE=0            nice level of the ranks. Their engine threads poll; on two cores they
#                          can keep the daemon off the CPU for a time slice (~10 ms), a stall no
#                          real switch has. Nice 10 removes those stalls but slows the ranks
#                          more than it helps (iterations ~70 ms instead of ~50), so it is off.
# With these, trim vs drop differ reproducibly in retransmissions (about half) and p50 (10-20%
# lower with trimming over 4 runs); p99 of 60 iterations on a shared 2-core VM moves by +-30%
# between runs of the same mode (docs/RESULTS.md, "Through the switch emulator").
# Everything the script starts is killed on exit, error or Ctrl-C (trap below).
set -euo pipefail
# shellcheck source=scripts/switch_port.sh
. "$(dirname "${BASH_SOURCE[0]}")/switch_port.sh"
build=${1:-build}
out="$build/demo"
rate=${DEMO_RATE_GBPS:-1}
buffer_packets=${DEMO_BUFFER_PACKETS:-8}
mtu=${DEMO_MTU:-4096}
prop_us=${DEMO_PROP_US:-200}
cross=${DEMO_CROSS:-incast:8:0.04:all}
trim_exact=${DEMO_TRIM_EXACT:-1}
bytes=${DEMO_BYTES:-1M}
iters=${DEMO_ITERS:-60}
ranks=${DEMO_RANKS:-4}
seed=${DEMO_SEED:-7}
nice_ranks=${DEMO_NICE:-0}
mkdir -p "$out"

pids=()    # processes started here
groups=()  # process groups started here (setsid): the harness and its ranks
cleanup() {
  for g in "${groups[@]}"; do
    kill -KILL -- "-$g" 2>/dev/null || true
  done
  for p in "${pids[@]}"; do
    kill -TERM "$p" 2>/dev/null || true
  done
  for p in "${pids[@]}" "${groups[@]}"; do
    wait "$p" 2>/dev/null || true
  done
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

# run_mode MODE: one switch, one harness run through it.
run_mode() {
  local mode=$1 log="$out/switch_$1.jsonl"
  rm -f "$log"
  "$build/bin/trim-switch" --mode "$mode" --rate-gbps "$rate" --buffer-packets "$buffer_packets" \
    --buffer-bytes 0 --prop-delay-us "$prop_us" --cross "$cross" --seed "$seed" \
    --trim-exact "$( [ "$mode" = trim ] && echo "$trim_exact" || echo 0 )" \
    --stats-interval-ms 100 >"$log" &
  local sw=$!
  pids+=("$sw")
  local port="" rc=0
  port=$(switch_port "$log" "$sw") || rc=$?
  ((rc != 1)) || { echo "demo: trim-switch exited at start" >&2; return 1; }
  ((rc == 0)) || { echo "demo: trim-switch did not report its port" >&2; return 1; }
  local rc=0
  # In the background and waited for: a trapped signal interrupts `wait` at once, while a
  # foreground child would delay the trap until it ended.
  # setsid: the harness and the ranks it forks get a process group of their own, which cleanup
  # kills whole (the ranks outlive a killed harness parent otherwise).
  NCCL_TRIM_MTU="$mtu" NCCL_TRIM_SWITCH="127.0.0.1:$port" setsid nice -n "$nice_ranks" "$build/bin/trim-harness" --mode allreduce --ranks "$ranks" \
    --bytes "$bytes" --iters "$iters" --warmup 1 --seed "$seed" --deadline-s 60 --json \
    --csv "$out/iters_$mode.csv" >"$out/harness_$mode.json" 2>"$out/harness_$mode.log" &
  local hp=$!
  groups+=("$hp")
  wait "$hp" || rc=$?
  kill -TERM "$sw"
  wait "$sw" || true
  if [ "$rc" -ne 0 ]; then
    echo "demo: trim-harness ($mode) failed (exit $rc): $(cat "$out/harness_$mode.json")" >&2
    tail -5 "$out/harness_$mode.log" >&2
    return 1
  fi
}

echo "== switch demo: ${ranks}-rank AllReduce of $bytes through trim-switch ($rate Gbit/s, $buffer_packets-packet buffer, ${prop_us} us, cross $cross)"
echo "   our plugin with trimming vs our plugin with tail drop, on loopback (not NCCL Socket: the Socket"
echo "   head-to-head through one bottleneck is in docs/RESULTS.md, \"On a GPU machine\")"
run_mode trim
run_mode drop

# The table, the trim-rate series and the JSON summary.
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
res = {}
for mode in ("trim", "drop"):
    h = json.loads(open(f"{out}/harness_{mode}.json").read())
    lines = [json.loads(l) for l in open(f"{out}/switch_{mode}.jsonl") if l.startswith("{")]
    final = [d for d in lines if d.get("event") == "final"][-1]
    with open(f"{out}/trimrate_{mode}.dat", "w") as f:
        f.write("# t_s forwarded trimmed trim_rate\n")
        prev = (0, 0)
        for d in lines:
            if d.get("event") != "interval":
                continue
            fwd, trm = d["forwarded"] - prev[0], d["forwarded_trimmed"] - prev[1]
            prev = (d["forwarded"], d["forwarded_trimmed"])
            if fwd > 0:
                f.write(f"{d['t_ms'] / 1000:.2f} {fwd} {trm} {trm / fwd:.4f}\n")
    res[mode] = (h, final)

def row(name, fmt, key):
    vals = [fmt(key(res[m][0], res[m][1])) for m in ("trim", "drop")]
    print(f"  {name:<28}{vals[0]:>16}{vals[1]:>16}")

print(f"  {'':<28}{'plugin, trim':>16}{'plugin, drop':>16}")
row("iteration p50 (ms)", lambda v: f"{v:.1f}", lambda h, s: h["p50_ms"])
row("iteration p99 (ms)", lambda v: f"{v:.1f}", lambda h, s: h["p99_ms"])
row("goodput (Gbit/s)", lambda v: f"{v:.3f}", lambda h, s: h["gbps"])
row("bus bandwidth (Gbit/s)", lambda v: f"{v:.3f}", lambda h, s: h["busbw_gbps"])
row("trim rate (receivers)", lambda v: f"{v:.4f}", lambda h, s: h["trim_rate"])
# Real packets (ours) the switch forwarded cut / dropped; the cross traffic's own drops excluded.
row("switch: ours cut / dropped", lambda v: v,
    lambda h, s: f"{s['forwarded_trimmed']}/{s['datagrams'] - s['bad'] - s['forwarded']}")
row("retransmissions", lambda v: f"{v}", lambda h, s: h["retransmits"])
row("NMSE of the result", lambda v: f"{v:.3g}", lambda h, s: h["nmse"])
row("replicas identical", lambda v: v, lambda h, s: "yes" if h["replicas_identical"] else "NO")
row("verify", lambda v: v, lambda h, s: h["verify"])
t, d = res["trim"][0], res["drop"][0]
summary = {
    "trim_p50_ms": round(t["p50_ms"], 3), "trim_p99_ms": round(t["p99_ms"], 3),
    "drop_p50_ms": round(d["p50_ms"], 3), "drop_p99_ms": round(d["p99_ms"], 3),
    "p99_ratio": round(t["p99_ms"] / d["p99_ms"], 4) if d["p99_ms"] > 0 else None,
    "p50_ratio": round(t["p50_ms"] / d["p50_ms"], 4) if d["p50_ms"] > 0 else None,
    "trim_gbps": t["gbps"], "drop_gbps": d["gbps"],
    "trim_rate": t["trim_rate"], "trim_retransmits": t["retransmits"], "drop_retransmits": d["retransmits"],
    "nmse": t["nmse"], "replicas_identical": bool(t["replicas_identical"] and d["replicas_identical"]),
}
with open(f"{out}/summary.json", "w") as f:
    f.write(json.dumps(summary) + "\n")
PY

if command -v gnuplot >/dev/null 2>&1; then
  gnuplot <<GP
set terminal pngcairo size 1100,480 font ",10"
set output "$out/switch_demo.png"
set datafile separator ","
set multiplot layout 1,2 title "4-rank AllReduce through trim-switch: trimming vs tail drop"
set title "iteration time"
set xlabel "iteration"
set ylabel "ms (slowest rank)"
set grid
plot "$out/iters_trim.csv" using 1:2 every ::1 with linespoints title "trim", \
     "$out/iters_drop.csv" using 1:2 every ::1 with linespoints title "drop"
set datafile separator whitespace
set title "trimmed share of forwarded packets (per 100 ms)"
set xlabel "time since the switch started (s)"
set ylabel "trim rate"
plot "$out/trimrate_trim.dat" using 1:4 with linespoints title "trim", \
     "$out/trimrate_drop.dat" using 1:4 with linespoints title "drop"
unset multiplot
GP
  echo "plot: $out/switch_demo.png"
else
  echo "gnuplot not found: no plot (scripts/setup.sh installs gnuplot-nox)" >&2
fi

cat "$out/summary.json"
