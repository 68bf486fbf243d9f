#!/usr/bin/env bash
# alternate_rounds.sh [--rounds N] [--steps N] [--out DIR] LABEL=ARGS ... : the uncongested
# comparison on a noisy machine. Runs scripts/run_ddp.sh --cpu --task widemlp once per LABEL per
# round, alternating, so that the machine's swings land on every configuration alike; prints a line
# a round (CPU seconds of all ranks, user + system, and the median step) and then one JSON line:
# for each LABEL its median step and CPU, and the median over rounds of its ratio to the first
# LABEL in the same round (the paired median), also kept in DIR/summary.json.
#
#   scripts/alternate_rounds.sh --rounds 10 gloo= trim="--mode lossless"
#   scripts/alternate_rounds.sh before="--build /tmp/old --mode lossless" after="--mode lossless"
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
rounds=10 steps=160 out=""
while (($#)); do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *=*) break ;;
    *) echo "alternate_rounds.sh: unknown argument '$1' (LABEL=ARGS expected)" >&2; exit 2 ;;
  esac
done
(($#)) || { echo "alternate_rounds.sh: name at least one LABEL=ARGS" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ && $steps =~ ^[1-9][0-9]*$ ]] || { echo "alternate_rounds.sh: --rounds and --steps take positive integers" >&2; exit 2; }
out=${out:-$(mktemp -d /tmp/alternate_rounds.XXXXXX)}
mkdir -p "$out"
results="$out/rounds.jsonl"
: > "$results"
for r in $(seq 1 "$rounds"); do
  line="round $r:"
  for spec in "$@"; do
    label=${spec%%=*} args=${spec#*=}
    dir="$out/${label}_$r"
    # CPU of the run and every process it waited for (the ranks), as /usr/bin/time counts it, which
    # the GPU machine lacks: "user system" seconds into $dir.time.
    # shellcheck disable=SC2086  # ARGS are words for run_ddp.sh
    python3 -c '
import resource, subprocess, sys
subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{r.ru_utime:.2f} {r.ru_stime:.2f}\n")' "$dir.time" \
      "$repo/scripts/run_ddp.sh" --cpu $args --task widemlp --epochs 100 --max-steps "$steps" --out "$dir" || true
    python3 - "$label" "$r" "$dir" >> "$results" <<'EOF'
import json, sys
label, r, d = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    user, system = map(float, open(d + ".time").read().split()[-2:])
    step = json.load(open(d + "/summary.json"))["iter_p50_ms"]
    print(json.dumps({"label": label, "round": r, "cpu_s": round(user + system, 2), "step_p50_ms": round(step, 2)}))
except (OSError, ValueError, KeyError) as e:
    print(json.dumps({"label": label, "round": r, "error": f"{type(e).__name__}: {e} (see {d})"}))
EOF
    line+=" $(tail -1 "$results")"
  done
  echo "$line"
done
python3 - "$results" "${@%%=*}" <<'EOF' | tee "$out/summary.json"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
labels = sys.argv[2:]
ok = {(x["label"], x["round"]): x for x in rows if "error" not in x}
summary = {"rounds": max(x["round"] for x in rows), "baseline": labels[0]}
for label in labels:
    mine = [x for (lb, _), x in ok.items() if lb == label]
    paired = [(x, ok[(labels[0], x["round"])]) for x in mine if (labels[0], x["round"]) in ok]
    summary[label] = {
        "ok_rounds": len(mine),
        "step_p50_ms_median": round(statistics.median(x["step_p50_ms"] for x in mine), 2) if mine else None,
        "cpu_s_median": round(statistics.median(x["cpu_s"] for x in mine), 2) if mine else None,
        "step_paired_ratio": round(statistics.median(x["step_p50_ms"] / b["step_p50_ms"] for x, b in paired), 3) if paired else None,
        "cpu_paired_ratio": round(statistics.median(x["cpu_s"] / b["cpu_s"] for x, b in paired), 3) if paired else None,
    }
print(json.dumps(summary))
EOF
