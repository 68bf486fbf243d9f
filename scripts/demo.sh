#!/usr/bin/env bash
# make demo: the project's claim on one machine. PyTorch DDP training (scripts/ddp_train.py,
# widemlp: 11.6 MB of gradient a step) on CPU tensors, two ranks, through ONE emulated congested
# bottleneck (scripts/netns_bottleneck.sh: a network namespace per rank, trim-switch as their
# router), once over Gloo (TCP, what CPU users run) and once over the plugin trimming, with the
# same port, buffer, cross traffic and seed (scripts/congestion_bench.sh --cpu). Prints a
# side-by-side table and writes a time-to-accuracy plot, then the codec table (error after
# trimming, per encoding). The last line is one JSON object:
#   tta_ratio_vs_gloo   time to the target accuracy, trimming / Gloo (when Gloo never reached
#                       it, trimming's time over Gloo's whole run, and tta_is_upper_bound true)
#   p50_ratio_vs_gloo, p99_ratio_vs_gloo   iteration time ratios
#   acc_delta_points    final val accuracy, trimming - Gloo, in points (same number of steps; null
#                       when Gloo did not finish within DEMO_LIMIT_S: gloo_finished false, and the
#                       ratios then use how far it got, marked *_is_upper_bound)
#   replicas_identical  every rank of every finished run ended with bit-identical parameters
# Network namespaces need root, /dev/net/tun and iproute2. Without them the headline is skipped
# (the reason is printed) and scripts/demo_switch.sh runs instead: the plugin trimming vs the
# plugin with tail drop through trim-switch's UDP mode, which needs none of them. DEMO_SWITCH=1
# runs it as well.
#
# Parameters (environment; defaults sized for a 2-core VM, docs/RESULTS.md "Training through one
# bottleneck: trimming vs Gloo"):
#   DEMO_RATE_GBPS=0.5     the bottleneck's rate: the ranks' own traffic fills it (a step moves
#                          11.6 MB each way, ~190 ms at this rate, against ~60 ms of compute)
#   DEMO_BUFFER_BYTES=131072  a shallow port buffer (~2 ms at the rate)
#   DEMO_CROSS=60          another tenant's traffic, % of the rate on average ...
#   DEMO_CROSS_PERIOD_MS=10  ... in line-rate bursts: 6 ms on, 4 ms off (0: constant)
#   DEMO_TRIM=hook         the trimming transport: hook (the comm hook rotates each bucket once,
#                          what `python -m nccl_trim.run --trim-cpu` gives a script) or trim
#                          (per-hop rotation in the plugin)
#   DEMO_STEPS=40          optimizer steps (widemlp reaches 0.95 after ~35)
#   DEMO_LIMIT_S=100       wall clock limit of a run (training stops by itself 15 s before)
# Outputs under $BUILD/demo/: headline/ (congestion_bench.sh's runs, report.md,
# time_to_accuracy.png), codec_nmse.{dat,png}, summary.json (the last line).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:-build}
[[ $build = /* ]] || build="$PWD/$build"
out="$build/demo"
PYTHON=${PYTHON:-python3}
trim_tr=${DEMO_TRIM:-hook}
[[ $trim_tr == hook || $trim_tr == trim ]] || { echo "demo: DEMO_TRIM=$trim_tr: expected hook or trim" >&2; exit 2; }
mkdir -p "$out"
rm -f "$out/summary.json"

headline=skipped why=""
if [[ $(id -u) -ne 0 ]]; then why="not root (network namespaces and TUN devices need it)"
elif [[ ! -c /dev/net/tun ]]; then why="no /dev/net/tun"
elif ! command -v ip >/dev/null; then why="no ip (iproute2)"
elif ! "$PYTHON" -c "import torch, sklearn" 2>/dev/null; then why="no torch or scikit-learn in $PYTHON (make demo installs them)"
fi

if [[ -z $why ]]; then
  cross=${DEMO_CROSS:-60} period=${DEMO_CROSS_PERIOD_MS:-10}
  echo "== headline: DDP training (widemlp, 2 ranks, CPU) through one bottleneck: ${DEMO_RATE_GBPS:-0.5} Gbit/s," \
    "$((${DEMO_BUFFER_BYTES:-131072} / 1024)) KiB buffer, cross traffic ${cross} % $( ((period)) && echo "in line-rate bursts (${period} ms period)" || echo constant)"
  echo "   Gloo (TCP) vs the plugin trimming ($trim_tr); about 2 minutes"
  rc=0
  "$here/congestion_bench.sh" --cpu --plan "widemlp:c$cross" --transports "gloo,$trim_tr" \
    --rate-gbps "${DEMO_RATE_GBPS:-0.5}" --buffer-bytes "${DEMO_BUFFER_BYTES:-131072}" --cross-period-ms "$period" \
    --max-steps "${DEMO_STEPS:-40}" --timeout-s "${DEMO_LIMIT_S:-100}" --build "$build" --out "$out/headline" \
    >"$out/headline.report" 2>"$out/headline.log" || rc=$?
  mv "$out/headline.report" "$out/headline/report.md" 2>/dev/null || true
  if ((rc != 0)); then
    if grep -q 'failed (124)' "$out/headline.log" && ! grep -q 'failed ([^1]' "$out/headline.log"; then
      echo "   (a run was stopped by its ${DEMO_LIMIT_S:-100} s limit, as Gloo often is at this congestion: the table says how far it got)"
    else
      echo "demo: a training run failed (exit $rc); the bench's log:" >&2
      tail -15 "$out/headline.log" >&2
    fi
  fi
  headline=ran
  "$PYTHON" - "$out/headline" "$trim_tr" "$out/summary.json" "$here" <<'PY'
import json, sys
from pathlib import Path
root, tr, out = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
sys.path.insert(0, sys.argv[4])
from plot_congestion import base_ttt
runs = {}
for f in root.glob("*/summary.json"):
    s = json.loads(f.read_text())
    runs[s.get("transport")] = s
g, t = runs.get("gloo") or {}, runs.get(tr) or {}

def v(r, k, spec):
    x = r.get(k)
    return "-" if x is None else (("yes" if x else "NO") if isinstance(x, bool) else format(x, spec))

rows = [("time to 0.95 val accuracy (s)", "time_to_target_s", ".1f"), ("steps to 0.95", "steps_to_target", "d"),
        ("iteration p50 (ms)", "iter_p50_ms", ".0f"), ("iteration p99 (ms)", "iter_p99_ms", ".0f"),
        ("final val accuracy", "val_acc", ".4f"), ("steps run", "steps", "d"),
        ("trimmed share (switch)", "trim_rate", ".3f"), ("retransmissions (plugin)", "retx_plugin", "d"),
        ("TCP retransmitted segments", "retx_tcp", "d"), ("replicas identical", "params_identical", ""),
        ("status", "status", "")]
name = {"hook": "trim (hook)", "trim": "trim (per hop)"}[tr]
print(f"  {'':<32}{'Gloo (TCP)':>16}{name:>16}")
for label, k, spec in rows:
    print(f"  {label:<32}{v(g, k, spec):>16}{v(t, k, spec):>16}")
pr = g.get("progress") or {}  # a Gloo run stopped by its limit: how far it got
if not g.get("time_to_target_s") and g.get("run_wall_s"):
    print(f"  (Gloo did not reach 0.95 in its {g.get('steps')} steps, {g['run_wall_s']:.0f} s of training)")
elif pr.get("train_s"):
    print(f"  (Gloo was stopped by the {g.get('limit_s')} s limit at step {pr.get('steps')}, after {pr['train_s']:.0f} s of"
          f" training, val accuracy {pr.get('val_acc') or 0:.3f}; its slowest epoch's p99 {pr.get('iter_p99_ms_at_least') or 0:.0f} ms)")

def ratio(a, b):
    return round(a / b, 3) if a is not None and b else None

tt = t.get("time_to_target_s")
# Where Gloo never reached the target, its run (or the part of it before the limit) bounds its time.
tg, exact, _ = base_ttt(g)
bound = tt is not None and not exact and bool(tg)
acc = (round(100 * (t["val_acc"] - g["val_acc"]), 3)
       if t.get("val_acc") is not None and g.get("val_acc") is not None and t.get("steps") == g.get("steps") else None)
p99_g = g.get("iter_p99_ms") or pr.get("iter_p99_ms_at_least")
summary = {
    "demo": "headline", "task": t.get("task") or g.get("task"), "trim_transport": tr,
    "cross_pct": t.get("cross_pct"), "rate_gbps": t.get("rate_gbps"), "buffer_bytes": t.get("buffer_bytes"),
    "tta_ratio_vs_gloo": ratio(tt, tg), "tta_is_upper_bound": bound,
    "p50_ratio_vs_gloo": ratio(t.get("iter_p50_ms"), g.get("iter_p50_ms") or pr.get("iter_p50_ms")),
    "p99_ratio_vs_gloo": ratio(t.get("iter_p99_ms"), p99_g), "p99_is_upper_bound": not g.get("iter_p99_ms") and bool(p99_g),
    "acc_delta_points": acc,
    # every rank of every run that finished; a run stopped by its limit has no final parameters
    "replicas_identical": bool(t.get("params_identical") and (g.get("params_identical") or g.get("status") != "ok")),
    "gloo_finished": g.get("status") == "ok",
    "trim_rate": t.get("trim_rate"),
    "gloo": {k: g.get(k) for k in ("status", "time_to_target_s", "iter_p50_ms", "iter_p99_ms", "val_acc", "steps", "retx_tcp")},
    "trim": {k: t.get(k) for k in ("status", "time_to_target_s", "iter_p50_ms", "iter_p99_ms", "val_acc", "steps", "retx_plugin")},
}
Path(out).write_text(json.dumps(summary) + "\n")
PY
  echo "report: $out/headline/report.md (every number, the goal's verdict)"
  [[ -f $out/headline/time_to_accuracy.png ]] && echo "plot: $out/headline/time_to_accuracy.png"
else
  echo "== headline skipped: $why"
  echo "   (it trains through network namespaces: run make demo as root on Linux with iproute2)"
fi

if [[ $headline == skipped || ${DEMO_SWITCH:-0} == 1 ]]; then
  "$here/demo_switch.sh" "$build"
  [[ $headline == skipped ]] && "$PYTHON" - "$out/summary.json" "$why" <<'PY'
import json, sys
f, why = sys.argv[1:3]
s = json.loads(open(f).read())
keys = ("tta_ratio_vs_gloo", "p50_ratio_vs_gloo", "p99_ratio_vs_gloo", "acc_delta_points")
s = {"demo": "switch", "headline_skipped": why, **{k: None for k in keys},
     "replicas_identical": s.get("replicas_identical"), "switch": s}
open(f, "w").write(json.dumps(s) + "\n")
PY
fi

echo "== codec demo"
"$build/bin/trim-demo" --out "$out"
if command -v gnuplot >/dev/null 2>&1; then
  gnuplot -e "datafile='$out/codec_nmse.dat'; outfile='$out/codec_nmse.png'" "$here/plot_demo.gp"
  echo "plot: $out/codec_nmse.png"
fi
cat "$out/summary.json"
