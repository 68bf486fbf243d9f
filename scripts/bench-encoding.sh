#!/usr/bin/env bash
# What encoding costs the transport when nothing is trimmed: a 2-rank trim-harness ring
# AllReduce with the default encoding (NCCL_TRIM_SCHEME=rht, reduce-scatter half encoded) against
# the same run with NCCL_TRIM_SCHEME=none (raw bytes, zero-copy), alternated in the same minutes.
# Prints one JSON line per run, one summary JSON line, and last "ratio: X" (median busbw of rht /
# median busbw of none; the target is >= 0.9: encoding must not be what limits the rate).
#
# Usage: scripts/bench-encoding.sh [--bytes SIZE] [--iters N] [--rounds R] [--ranks N] [--scheme S] [--build DIR]
#   defaults: --bytes 64M --iters 5 --rounds 3 --ranks 2 --scheme rht
set -euo pipefail
bytes=64M iters=5 rounds=3 ranks=2 scheme=rht build=build
while (($#)); do
  case $1 in
    --bytes) bytes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --scheme) scheme=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-encoding: unknown option $1" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
h=$build/bin/trim-harness
[[ -x $h ]] || { echo "bench-encoding: $h not built (make -j)" >&2; exit 1; }
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((r = 0; r < rounds; r++)); do
  for s in none "$scheme"; do
    line=$(NCCL_TRIM_SCHEME=$s "$h" --mode allreduce --ranks "$ranks" --bytes "$bytes" --iters "$iters" --json 2>/dev/null |
      tail -1)
    python3 -c 'import json,sys; j=json.loads(sys.argv[1]); j["scheme"]=sys.argv[2]; print(json.dumps(j))' "$line" "$s" |
      tee -a "$results"
  done
done
python3 - "$results" "$scheme" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
scheme = sys.argv[2]
def med(s):
    v = [r["busbw_gbps"] for r in runs if r["scheme"] == s and r["verify"] != "fail"]
    return statistics.median(v) if v else 0.0
none, enc = med("none"), med(scheme)
bad = [r for r in runs if r["verify"] == "fail" or r.get("error")]
ratio = enc / none if none > 0 else 0.0
print(json.dumps({"bench": "encoding", "scheme": scheme, "ranks": runs[0]["ranks"], "bytes": runs[0]["bytes"],
                  "rounds": len(runs) // 2, "none_busbw_gbps": round(none, 4), "busbw_gbps": round(enc, 4),
                  "verify": sorted({r["verify"] for r in runs if r["scheme"] == scheme}), "failed_runs": len(bad),
                  "ratio": round(ratio, 3)}))
print(f"ratio: {ratio:.3f}")
sys.exit(1 if bad else 0)
PY
