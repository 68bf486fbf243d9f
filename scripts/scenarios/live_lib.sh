#!/usr/bin/env bash
# Shared by the live_*.sh scenarios: the live counterparts of sim_*.sh. Each run starts one
# build/bin/trim-switch on loopback (port 0, read from its {"event":"listening","port":N} line,
# as scripts/demo.sh does), runs trim-harness ranks through it with NCCL_TRIM_SWITCH, stops the
# switch and keeps both JSON results. Sourced; the sourcing script calls, in this order:
#   live_init NAME "$@"            parses [BUILD_DIR] [--quick], checks the binaries, sets $QUICK,
#                                  $BUILD, $OUT (= $BUILD/scenarios/live_NAME), installs the trap
#   live_header                    the table's header line
#   live_run LABEL [ENV=VAL...] -- SWITCH_ARGS... -- HARNESS_ARGS...
#                                  one switch + one harness run; prints one table row and keeps
#                                  $OUT/LABEL.{harness.json,switch.jsonl,harness.log}
#   live_summary NAME              one JSON line: every row of this scenario, trim/drop ratios
# Everything started here runs in a process group of its own (setsid) and is killed by group id
# on exit, error or Ctrl-C; nothing is ever killed by name.
set -euo pipefail

live_init() {
  LIVE_NAME=$1; shift
  QUICK=0
  BUILD=build
  local a
  for a in "$@"; do
    case "$a" in
      --quick) QUICK=1 ;;
      -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
      -*) echo "$(basename "$0"): unknown option $a (usage: $(basename "$0") [BUILD_DIR] [--quick])" >&2; exit 2 ;;
      *) BUILD=$a ;;
    esac
  done
  local b
  for b in "$BUILD/bin/trim-switch" "$BUILD/bin/trim-harness"; do
    [[ -x "$b" ]] || { echo "$(basename "$0"): no executable $b: run 'make -j2 all' first (or pass the build dir)" >&2; exit 1; }
  done
  [[ -f "$BUILD/lib/libnccl-net-trim.so" ]] || { echo "$(basename "$0"): no $BUILD/lib/libnccl-net-trim.so: run 'make -j2 all' first" >&2; exit 1; }
  OUT="$BUILD/scenarios/live_$LIVE_NAME"
  mkdir -p "$OUT"
  rm -f "$OUT"/rows.jsonl
  LIVE_T0=$(date +%s.%N)
  trap live_cleanup EXIT
  trap 'live_cleanup; exit 130' INT TERM
}

live_groups=()  # process-group ids (setsid) started here: switches, harnesses and their ranks
live_cleanup() {
  local g
  for g in "${live_groups[@]}"; do
    kill -KILL -- "-$g" 2>/dev/null || true
  done
  for g in "${live_groups[@]}"; do
    wait "$g" 2>/dev/null || true
  done
  live_groups=()
}

live_header() {
  # sw_trim/drop: real packets the switch forwarded trimmed / real packets it dropped (cross
  # traffic's own drops excluded; the JSON rows keep the total as sw_dropped_all).
  # acc/nack: trimmed packets the receivers accepted / NACKed (a cut into plane 0 is resent).
  printf '%-28s %8s %8s %7s %9s %11s %9s %5s %9s %6s %6s\n' scenario p50_ms p99_ms gbps trim_rate sw_trim/drop acc/nack retx nmse verify wall_s
}

# live_run LABEL [ENV=VAL...] -- SWITCH_ARGS... -- HARNESS_ARGS...
live_run() {
  local label=$1; shift
  local envs=() sw_args=() h_args=()
  while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  while [[ $# -gt 0 && $1 != -- ]]; do sw_args+=("$1"); shift; done
  shift
  h_args=("$@")
  local tag=${label// /_}
  local log="$OUT/$tag.switch.jsonl" hj="$OUT/$tag.harness.json" hl="$OUT/$tag.harness.log"
  rm -f "$log" "$hj" "$hl"
  local t0; t0=$(date +%s.%N)
  # setsid: the switch leads a process group of its own. A background job of a non-interactive
  # script is no group leader, so setsid execs in place and $! is the switch = the group id.
  # LIVE_TRIM_EXACT=0 reproduces the runs recorded before exact-class header cuts became the
  # switch's default (docs/RESULTS.md); a scenario's own --trim-exact comes later and wins.
  setsid "$BUILD/bin/trim-switch" --trim-exact "${LIVE_TRIM_EXACT:-1}" "${sw_args[@]}" >"$log" 2>"$OUT/$tag.switch.err" &
  local sw=$!
  live_groups+=("$sw")
  local port=""
  for _ in $(seq 500); do
    port=$(head -1 "$log" 2>/dev/null | sed -n 's/^{"event":"listening","port":\([0-9][0-9]*\)}$/\1/p' || true)
    [[ -n "$port" ]] && break
    kill -0 "$sw" 2>/dev/null || { echo "$LIVE_NAME: trim-switch exited at start: $(cat "$OUT/$tag.switch.err")" >&2; return 1; }
    sleep 0.01
  done
  [[ -n "$port" ]] || { echo "$LIVE_NAME: trim-switch did not report its port" >&2; return 1; }
  local rc=0
  # Background + wait: a trapped signal interrupts wait at once. setsid: the harness and the
  # ranks it forks form one process group, which cleanup kills whole.
  # NCCL_TRIM_MTU: the scenarios' buffers, cross traffic and recorded results (docs/RESULTS.md)
  # are in 4 KiB packets; loopback's auto would be 9000. LIVE_MTU changes it, a scenario's env wins.
  env NCCL_TRIM_MTU="${LIVE_MTU:-4096}" "${envs[@]}" NCCL_TRIM_SWITCH="127.0.0.1:$port" \
    setsid "$BUILD/bin/trim-harness" "${h_args[@]}" \
    --json >"$hj" 2>"$hl" &
  local hp=$!
  live_groups+=("$hp")
  wait "$hp" || rc=$?
  kill -TERM "$sw" 2>/dev/null || true
  wait "$sw" || true
  live_groups=()  # both waited for: their ids may be reused by now, never kill them again
  local t1; t1=$(date +%s.%N)
  if [[ $rc -ne 0 ]]; then
    echo "$LIVE_NAME: trim-harness ($label) failed (exit $rc): $(cat "$hj")" >&2
    tail -5 "$hl" >&2
    return 1
  fi
  python3 - "$label" "$hj" "$log" "$t0" "$t1" "$OUT/rows.jsonl" <<'PY'
import json, sys
label, hj, log, t0, t1, rows = sys.argv[1:7]
h = json.loads(open(hj).read().strip().splitlines()[-1])
lines = [json.loads(l) for l in open(log) if l.startswith("{")]
fin = [d for d in lines if d.get("event") == "final"]
s = fin[-1] if fin else {}
wall = float(t1) - float(t0)
row = {"label": label, "p50_ms": h["p50_ms"], "p99_ms": h["p99_ms"], "gbps": h["gbps"],
       "busbw_gbps": h.get("busbw_gbps"), "trim_rate": h["trim_rate"],
       "retransmits": h["retransmits"], "dup_packets": h.get("dup_packets"), "nmse": h["nmse"],
       "verify": h["verify"], "replicas_identical": h.get("replicas_identical"),
       "sw_trimmed": s.get("forwarded_trimmed"),
       "sw_dropped": (s["datagrams"] - s["bad"] - s["forwarded"]) if s else None,
       "sw_dropped_all": s.get("dropped"),
       "trimmed_accepted": h.get("trimmed_accepted"), "trimmed_nacked": h.get("trimmed_nacked"),
       "sw_cross": s.get("cross"), "sw_cross_skipped": s.get("cross_skipped"),
       "sw_max_queue": s.get("max_queue"), "wall_s": round(wall, 2)}
open(rows, "a").write(json.dumps(row) + "\n")
print("%-28s %8.2f %8.2f %7.3f %9.4f %11s %9s %5d %9.3g %6s %6.1f" % (label, row["p50_ms"], row["p99_ms"],
      row["gbps"], row["trim_rate"], f"{row['sw_trimmed']}/{row['sw_dropped']}",
      f"{row['trimmed_accepted']}/{row['trimmed_nacked']}", row["retransmits"],
      row["nmse"], row["verify"], wall))
PY
}

# live_summary NAME: one JSON line. Rows whose labels differ only in a trailing " trim"/" drop"
# are paired and get p50/p99 ratios (trim / drop); with a row labelled "drop (baseline)", every
# other row is paired with it.
live_summary() {
  python3 - "$1" "$OUT/rows.jsonl" "$LIVE_T0" "$QUICK" <<'PY'
import json, sys, time
name, rows_path, t0, quick = sys.argv[1:5]
rows = [json.loads(l) for l in open(rows_path)]
by = {r["label"]: r for r in rows}
pairs = []
for r in rows:
    if r["label"].endswith(" trim"):
        base = r["label"][:-5]
        d = by.get(base + " drop")
        if d:
            pairs.append({"case": base,
                          "p50_ratio": round(r["p50_ms"] / d["p50_ms"], 4) if d["p50_ms"] > 0 else None,
                          "p99_ratio": round(r["p99_ms"] / d["p99_ms"], 4) if d["p99_ms"] > 0 else None,
                          "retx_trim": r["retransmits"], "retx_drop": d["retransmits"]})
base = by.get("drop (baseline)")
if base:
    for r in rows:
        if r is not base and not r["label"].endswith((" trim", " drop")):
            pairs.append({"case": r["label"] + " vs drop (baseline)",
                          "p50_ratio": round(r["p50_ms"] / base["p50_ms"], 4) if base["p50_ms"] > 0 else None,
                          "p99_ratio": round(r["p99_ms"] / base["p99_ms"], 4) if base["p99_ms"] > 0 else None,
                          "retx_trim": r["retransmits"], "retx_drop": base["retransmits"]})
print(json.dumps({"scenario": "live_" + name, "quick": quick == "1",
                  "wall_s": round(time.time() - float(t0), 1), "pairs": pairs,
                  "rows": [{k: r[k] for k in ("label", "p50_ms", "p99_ms", "gbps", "trim_rate",
                            "retransmits", "nmse", "verify", "sw_trimmed", "sw_dropped")} for r in rows]}))
PY
}
