#!/usr/bin/env bash
# check_ddp_scripts.sh: the CI check of the PyTorch DDP scripts (no GPU needed, < 2 minutes).
#   1. static: python3 -m py_compile on the .py files, bash -n on run_ddp.sh, --help of each
#   2. run_ddp.sh --dry-run for every mode: the rank environment each mode promises (plugin by
#      absolute path, NCCL_NET, one NCCL_HOSTID per rank, the switch only where it belongs)
#   3. if `$PYTHON -c 'import torch, sklearn'` works: a real 2-rank gloo run on the CPU of
#      ddp_train.py (digits, a few steps) and of allreduce_bench.py (small sizes) through
#      run_ddp.sh --cpu, asserting identical parameter checksums on both ranks, a decreased
#      val loss and exact all_reduce sums; else "ddp smoke: skipped (torch not installed)".
# Exits non-zero on any failure. Environment: PYTHON (default python3).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python3}
export PYTHON
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
ok() { echo "ok   $*"; passed=$((passed + 1)); }
bad() { echo "FAIL $*"; failed=$((failed + 1)); }
check() {  # check NAME COMMAND...: run it quietly, show its output only when it fails
  local name=$1; shift
  if "$@" >"$tmp/out" 2>&1; then ok "$name"; else bad "$name"; sed 's/^/     /' "$tmp/out" | tail -20; fi
}

py=("$here/ddp_train.py" "$here/allreduce_bench.py" "$here/plot_ddp.py" "$here/plot_congestion.py")
# py_compile writes __pycache__ next to the sources; compile into the temp dir instead.
check "py_compile" env PYTHONPYCACHEPREFIX="$tmp/pycache" python3 -m py_compile "${py[@]}"
check "bash -n run_ddp.sh" bash -n "$here/run_ddp.sh"
check "bash -n check_ddp_scripts.sh" bash -n "$here/check_ddp_scripts.sh"
check "bash -n congestion_bench.sh" bash -n "$here/congestion_bench.sh"
check "bash -n netns_bottleneck.sh" bash -n "$here/netns_bottleneck.sh"
check "run_ddp.sh --bench congestion --help" "$here/run_ddp.sh" --bench congestion --help
for f in "${py[@]}"; do
  check "$(basename "$f") --help" env PYTHONDONTWRITEBYTECODE=1 "$PYTHON" "$f" --help
done
check "run_ddp.sh --help" "$here/run_ddp.sh" --help

# dry_run_has MODE PATTERN... : the dry run of MODE prints every PATTERN (grep -E) and, for a
# pattern written !PATTERN, not that one.
dry_run_has() {
  local m=$1; shift
  "$here/run_ddp.sh" --mode "$m" --ranks 3 --dry-run --out "$tmp/dry" >"$tmp/dry.txt" 2>&1 || return 1
  local p
  for p in "$@"; do
    if [[ $p == !* ]]; then
      if grep -Eq -- "${p#!}" "$tmp/dry.txt"; then echo "unexpected: ${p#!}"; cat "$tmp/dry.txt"; return 1; fi
    else
      grep -Eq -- "$p" "$tmp/dry.txt" || { echo "missing: $p"; cat "$tmp/dry.txt"; return 1; }
    fi
  done
}
so='NCCL_NET_PLUGIN=/[^ ]*/lib/libnccl-net-trim\.so '
check "dry-run lossless" dry_run_has lossless "$so" 'NCCL_NET=Trim ' 'NCCL_HOSTID=ddp-rank2 ' \
  'NCCL_NET_GDR_LEVEL=SYS' '!NCCL_TRIM_SWITCH=' '!# switch:'
check "dry-run random" dry_run_has random "$so" 'NCCL_TRIM_SWITCH=127\.0\.0\.1:' '# switch: .*--mode random .*--random-p 0\.1'
check "dry-run trim" dry_run_has trim "$so" 'NCCL_TRIM_SWITCH=127\.0\.0\.1:' '# switch: .*--mode trim .*--cross '
check "dry-run drop" dry_run_has drop "$so" '# switch: .*--mode drop .*--cross '
check "dry-run socket" dry_run_has socket 'NCCL_NET=Socket ' 'NCCL_NET_PLUGIN=none ' '!libnccl-net-trim' '!# switch:'
# The accuracy sweep: every run gets its own trim probability, scheme, head bits and phase.
sweep_has() {
  "$here/run_ddp.sh" --sweep accuracy --dry-run --out "$tmp/dry" >"$tmp/sweep.txt" 2>&1 || return 1
  local runs; runs=$(grep -c '^# run ' "$tmp/sweep.txt")
  [[ $runs -eq 26 ]] || { echo "expected 26 runs, got $runs"; return 1; }
  grep -A1 '^# run random_sd_hb1_p0.75 ' "$tmp/sweep.txt" | grep -q -- '--random-p 0.75' || { echo "p of random_sd_hb1_p0.75"; return 1; }
  grep -A2 '^# run random_sd_hb1_p0.75 ' "$tmp/sweep.txt" | grep -q 'NCCL_TRIM_SCHEME=sd ' || { echo "scheme of random_sd_hb1_p0.75"; return 1; }
  grep -A2 '^# run random_rht_hb16_p0.5 ' "$tmp/sweep.txt" | grep -q 'NCCL_TRIM_HEAD_BITS=16 ' || { echo "head bits"; return 1; }
  grep -A2 '^# run random_rht_hb1_p0.5_phaseall ' "$tmp/sweep.txt" | grep -q 'NCCL_TRIM_PHASE=all ' || { echo "phase"; return 1; }
}
check "dry-run sweep accuracy (26 runs, per-run settings)" sweep_has

if "$PYTHON" -c 'import torch, sklearn' >/dev/null 2>&1; then
  # assert_summary FILE EXPR: EXPR (Python, over the summary dict s) must hold.
  assert_summary() {
    "$PYTHON" - "$1" "$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
if not eval(sys.argv[2], {}, {"s": s}):
    sys.exit(f"assertion failed: {sys.argv[2]}\nsummary: {json.dumps(s)}")
PY
  }
  train=$tmp/smoke_train
  if "$here/run_ddp.sh" --cpu --ranks 2 --task digits --epochs 2 --max-steps 30 --out "$train" \
      >"$tmp/train.out" 2>&1; then
    ok "ddp smoke: run_ddp.sh --cpu ddp_train.py (2 ranks, digits, 30 steps)"
    check "ddp smoke: parameter checksums of both ranks identical" \
      assert_summary "$train/summary.json" 's["params_identical"] and len(set(s["param_sha256"])) == 1 and len(s["param_sha256"]) == 2'
    check "ddp smoke: val loss decreased" \
      assert_summary "$train/summary.json" 's["loss_decreased"] and s["val_loss"] < s["initial_val_loss"]'
    check "ddp smoke: summary line printed" \
      "$PYTHON" -c 'import json, sys; d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); assert d["status"] == "ok", d' "$tmp/train.out"
  else
    bad "ddp smoke: run_ddp.sh --cpu ddp_train.py"
    tail -30 "$tmp/train.out" | sed 's/^/     /'
  fi
  bench=$tmp/smoke_bench
  if "$here/run_ddp.sh" --cpu --ranks 2 --bench allreduce --out "$bench" -- \
      --min-bytes 64K --max-bytes 1M --warmup 1 --iters 3 >"$tmp/bench.out" 2>&1; then
    ok "ddp smoke: run_ddp.sh --cpu --bench allreduce (2 ranks, 64 KiB..1 MiB)"
    check "ddp smoke: all_reduce sums exact at 5 sizes" \
      assert_summary "$bench/cpu/summary.json" 's["all_exact"] and len(s["bench"]) == 5 and s["peak_busbw_GBps"] > 0'
  else
    bad "ddp smoke: run_ddp.sh --cpu --bench allreduce"
    tail -30 "$tmp/bench.out" | sed 's/^/     /'
  fi
else
  echo "ddp smoke: skipped (torch not installed)"
fi
echo "check_ddp_scripts: $passed passed, $failed failed"
((failed == 0))
