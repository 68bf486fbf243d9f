#!/usr/bin/env bash
# check_ddp_scripts.sh: the CI check of the PyTorch DDP scripts (no GPU needed, < 2 minutes).
#   1. static: python3 -m py_compile on the .py files, bash -n on run_ddp.sh, --help of each
#   2. run_ddp.sh --dry-run for every mode: the rank environment each mode promises (plugin by
#      absolute path, NCCL_NET, one NCCL_HOSTID per rank, the switch only where it belongs)
#   3. the GPU-machine scripts without a GPU: check-gpu.sh --dry-run (every step, nothing run),
#      check-gpu.sh itself on a machine without a GPU (a clear reason, exit 2, in seconds, and
#      its JSON line), check_gpu_report.py's verdicts on made-up results (pass, goal missed, a
#      survivor that hung, a skipped step)
#   4. if `$PYTHON -c 'import torch, sklearn'` works: a real 2-rank gloo run on the CPU of
#      ddp_train.py (digits, a few steps) and of allreduce_bench.py (small sizes) through
#      run_ddp.sh --cpu, asserting identical parameter checksums on both ranks, a decreased
#      val loss and exact all_reduce sums, and a run where rank 1 SIGKILLs itself
#      (--die-after-iters, run_ddp.sh --wait-all): rank 0 must fail by itself; else
#      "ddp smoke: skipped (torch not installed)".
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

py=("$here/ddp_train.py" "$here/allreduce_bench.py" "$here/plot_ddp.py" "$here/plot_congestion.py"
  "$here/check_gpu_report.py")
# py_compile writes __pycache__ next to the sources; compile into the temp dir instead.
check "py_compile" env PYTHONPYCACHEPREFIX="$tmp/pycache" python3 -m py_compile "${py[@]}"
check "bash -n run_ddp.sh" bash -n "$here/run_ddp.sh"
check "bash -n check_ddp_scripts.sh" bash -n "$here/check_ddp_scripts.sh"
check "bash -n congestion_bench.sh" bash -n "$here/congestion_bench.sh"
check "bash -n netns_bottleneck.sh" bash -n "$here/netns_bottleneck.sh"
for f in check-gpu.sh pack-gpu.sh fetch-iproute2.sh; do check "bash -n $f" bash -n "$here/$f"; done
check "run_ddp.sh --bench congestion --help" "$here/run_ddp.sh" --bench congestion --help
for f in "${py[@]}"; do
  check "$(basename "$f") --help" env PYTHONDONTWRITEBYTECODE=1 "$PYTHON" "$f" --help
done
check "run_ddp.sh --help" "$here/run_ddp.sh" --help
check "check-gpu.sh --help" "$here/check-gpu.sh" --help
help_has() {  # help_has SCRIPT WORD...: SCRIPT --help names every WORD
  local f=$1 w; shift
  "$f" --help >"$tmp/help.txt" 2>&1 || return 1
  for w in "$@"; do grep -q -- "$w" "$tmp/help.txt" || { echo "no $w in $f --help"; return 1; }; done
}
check "ddp_train.py --help: test options" help_has "$here/ddp_train.py" --deterministic --die-after-iters --die-rank
check "allreduce_bench.py --help: --target-ms" help_has "$here/allreduce_bench.py" --target-ms
run_ddp_help() { help_has "$here/run_ddp.sh" --wait-all --no-plots && ! grep -q -- --gdr-level "$tmp/help.txt"; }
check "run_ddp.sh --help: --wait-all, --no-plots, no --gdr-level" run_ddp_help

# dry_run_has MODE PATTERN... : the dry run of MODE prints every PATTERN (grep -E) and, for a
# pattern written !PATTERN, not that one.
dry_run_has() {  # dry_run_has "MODE [FLAGS...]" PATTERN...  (!PATTERN: must not appear)
  local m flags
  read -r m flags <<<"$1"; shift
  # shellcheck disable=SC2086  # FLAGS are words
  "$here/run_ddp.sh" --mode "$m" $flags --ranks 3 --dry-run --out "$tmp/dry" >"$tmp/dry.txt" 2>&1 || return 1
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
# Host buffers: the plugin takes no GPU memory, so no NCCL_NET_GDR_* is set.
check "dry-run lossless" dry_run_has lossless "$so" 'NCCL_NET=Trim ' 'NCCL_HOSTID=ddp-rank2 ' \
  '!NCCL_NET_GDR' '!NCCL_TRIM_SWITCH=' '!# switch:'
check "dry-run random" dry_run_has random "$so" 'NCCL_TRIM_SWITCH=127\.0\.0\.1:' '# switch: .*--mode random .*--random-p 0\.1'
check "dry-run trim" dry_run_has trim "$so" 'NCCL_TRIM_SWITCH=127\.0\.0\.1:' '# switch: .*--mode trim .*--cross '
check "dry-run drop" dry_run_has drop "$so" '# switch: .*--mode drop .*--cross '
# --hook: the ranks run under nccl_trim's bootstrap, from the checkout's python/ and the build's libraries.
check "dry-run random --hook" dry_run_has "random --hook" "$so" '-m nccl_trim\._boot /[^ ]*/ddp_train\.py' \
  'PYTHONPATH=/[^ ]*/python' 'NCCL_TRIM_LIB_DIR=/[^ ]*/lib ' '^# run random_rht_hb1_p0\.1_hook_digits '
check "dry-run lossless (no --hook)" dry_run_has lossless '!nccl_trim\._boot' '!NCCL_TRIM_LIB_DIR'
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

# ---- the GPU machine's scripts, here without a GPU
cg_dry() {
  "$here/check-gpu.sh" --dry-run --build "$tmp/nobuild" --out "$tmp/cg-dry" >"$tmp/cg-dry.txt" 2>&1 || return 1
  [[ ! -e $tmp/cg-dry ]] || { echo "--dry-run made $tmp/cg-dry"; return 1; }
  local s
  for s in preflight allreduce_2r allreduce_4r ddp_lossless ddp_random_trim rank_killed socket_sweep_2r \
      socket_sweep_4r codec_threads_2r harness_scaling; do
    grep -q "^\[$s" "$tmp/cg-dry.txt" || { echo "no step $s"; cat "$tmp/cg-dry.txt"; return 1; }
  done
  grep -q -- '--die-after-iters 15' "$tmp/cg-dry.txt" || { echo "no --die-after-iters"; return 1; }
  grep -q 'NCCL_ALGO=Ring NCCL_PROTO=Simple' "$tmp/cg-dry.txt" || { echo "no Ring/Simple"; return 1; }
  ! grep -q 'NCCL_NET_GDR' "$tmp/cg-dry.txt" || { echo "sets NCCL_NET_GDR_*"; return 1; }
  grep -Eq '^\[congestion_quick|^# step 5 here: ' "$tmp/cg-dry.txt" || { echo "no step 5"; return 1; }
}
check "check-gpu.sh --dry-run: every step, nothing run" cg_dry
cg_no_gpu() {
  local t0=$SECONDS rc=0
  "$here/check-gpu.sh" --build "$tmp/nobuild" --out "$tmp/cg" >"$tmp/cg.txt" 2>&1 || rc=$?
  ((rc == 2)) || { echo "exit $rc, not 2"; cat "$tmp/cg.txt"; return 1; }
  ((SECONDS - t0 < 90)) || { echo "took $((SECONDS - t0)) s"; return 1; }
  grep -q 'cannot run here' "$tmp/cg.txt" || { echo "no reason given"; cat "$tmp/cg.txt"; return 1; }
  tail -1 "$tmp/cg.txt" | "$PYTHON" -c '
import json, sys
d = json.loads(sys.stdin.read())
assert d["exit"] == 2 and d["result"] == "fail", d
assert d["steps"]["preflight"]["result"] == "fail" and "no build" in d["steps"]["preflight"]["why"], d
assert all(v["result"] == "skip" for k, v in d["steps"].items() if k != "preflight"), d
assert len(d["steps"]) == 14 and all(g["state"] == "unknown" for g in d["goals"]), d'
}
if nvidia-smi -L >/dev/null 2>&1; then
  echo "check-gpu.sh without a GPU: skipped (this machine has one: run scripts/check-gpu.sh itself)"
else
  check "check-gpu.sh without a GPU: exit 2 in seconds, the reason, the JSON line" cg_no_gpu
fi
# check_gpu_report.py on made-up results: OUT as check-gpu.sh leaves it.
make_results() {  # make_results DIR good|hang
  "$PYTHON" - "$@" <<'PY'
import json, sys
from pathlib import Path
out, variant = Path(sys.argv[1]), sys.argv[2]
sizes = [1 << (20 + i) for i in range(9)]
steps = []
def w(p, obj):
    f = out / p
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(obj if isinstance(obj, str) else json.dumps(obj))
def bench(p, bw, mode):
    w(p + "/summary.json", {"status": "ok", "kind": "bench", "mode": mode, "all_exact": True,
                            "bench": [{"bytes": b, "busbw_GBps": bw, "max_err": 0} for b in sizes]})
def rec(step, part, rc=0):
    steps.append({"step": step, "part": part, "rc": rc, "seconds": 10, "limit": 60})
w("preflight.json", {"ok": True, "why": [], "gpu": "NVIDIA H200", "torch": "2.11.0", "nccl": "2.28.9",
                     "cores": 16, "settings": {"budget_s": 330, "channels": "2", "kill_bound_s": 60}})
rec("preflight", "")
for r in (2, 4):
    bench(f"ar{r}/lossless", 1.9, "lossless"); bench(f"ar{r}/socket", 1.8, "socket"); rec(f"allreduce_{r}r", "")
for c, bw in (("1x1", 1.7), ("2x1", 2.0)):
    bench(f"sweep2/{c}/socket", bw, "socket"); rec("socket_sweep_2r", c)
bench("sweep4/2x1/socket", 1.5, "socket"); rec("socket_sweep_4r", "2x1")
steps.append({"step": "codec_threads_2r", "part": "0", "skip": "time budget: 20s left"})
h = "ab" * 32
for m, p50 in (("lossless", 5.1), ("socket", 5.0)):
    w(f"ddp_{m}/summary.json", {"status": "ok", "iter_p50_ms": p50, "params_identical": True})
    w(f"ddp_{m}/rank0.jsonl", json.dumps({"event": "final", "param_sha256": [h, h]}) + "\n")
    rec("ddp_lossless", m)
w("ddp_random/summary.json", {"status": "ok", "ranks": 4, "params_identical": True,
                              "switch": {"forwarded_trimmed": 99, "trim_rate": 0.2}})
rec("ddp_random_trim", "")
w("ddp_kill/rank1.jsonl", json.dumps({"event": "die", "step": 15, "time": 1000.0}) + "\n")
w("ddp_kill/rank1.exit", {"rank": 1, "status": 137, "time": 1000.1})
if variant != "hang":
    w("ddp_kill/rank0.exit", {"rank": 0, "status": 134, "time": 1002.5})
w("ddp_kill/rank0.log", "NCCL WARN NET/Trim: peer x closed the control connection without saying goodbye\n")
rec("rank_killed", "", 1)
steps.append({"step": "congestion_quick", "part": "", "skip": "iproute2 missing: no ip; see docs/GPU-MACHINE.md"})
w("kernels_bench.log", "".join(json.dumps({"bench": "cuda", "dtype": d, "op": o, "ratio": r, "copy_gbps": 2900.0}) + "\n"
                               for d, o, r in (("fp32", "forward", 0.7), ("fp32", "inverse", 0.6), ("bf16", "forward", 0.4))))
rec("kernels", "tests"); rec("kernels", "bench")
seen = "NCCL INFO NET/Trim: comm 0x1 is the nccl_trim comm hook's (traffic class 116): ...\n"
for h, p50 in (("plain", 40.0), ("hook", 41.0)):
    w(f"hook_{h}/summary.json", {"status": "ok", "iter_p50_ms": p50})
    rec("hook_overhead", h)
w("hook_hook/rank0.log", seen)
for t, acc in (("socket", 0.60), ("rht", 0.585), ("hook", 0.59)):
    w(f"hookacc/{t}_s1/summary.json", {"status": "ok", "val_acc": acc, "params_identical": True})
    rec("hook_accuracy", f"{t}_s1")
w("hookacc/hook_s1/rank0.log", seen)
w("steps.jsonl", "".join(json.dumps(s) + "\n" for s in steps))
PY
}
report_says() {  # report_says VARIANT EXIT PYTHON-EXPR (over the JSON line d)
  rm -rf "$tmp/res"
  make_results "$tmp/res" "$1" || return 1
  local rc=0
  "$PYTHON" "$here/check_gpu_report.py" "$tmp/res" --elapsed-s 1 >"$tmp/res.txt" 2>&1 || rc=$?
  ((rc == $2)) || { echo "exit $rc, not $2"; cat "$tmp/res.txt"; return 1; }
  tail -1 "$tmp/res.txt" | "$PYTHON" -c 'import json, sys; d = json.loads(sys.stdin.read()); e = sys.argv[1]
assert eval("(" + e + ")"), e + "\n" + json.dumps(d)' "$3"
}
check "check_gpu_report.py: all pass, Socket best 2x1 beats the plugin: goal missed (exit 3)" report_says good 3 \
  'd["result"] == "pass" and d["steps"]["allreduce_2r"]["socket_best"] == "2x1" and
   d["steps"]["allreduce_2r"]["plugin_over_socket_default"][0] == 1.056 and
   d["steps"]["allreduce_2r"]["plugin_over_socket_best"][0] == 0.95 and
   d["steps"]["allreduce_4r"]["socket_best"] == "default" and
   d["steps"]["ddp_lossless"]["hash_equal"] and d["steps"]["rank_killed"]["cause"] == "plugin" and
   d["steps"]["rank_killed"]["seconds_to_error"] == 2.5 and d["steps"]["codec_threads_2r"]["result"] == "skip" and
   d["steps"]["congestion_quick"]["why"].startswith("iproute2 missing") and
   d["steps"]["kernels"]["ratios"]["fp32 forward"] == 0.7 and d["steps"]["hook_overhead"]["p50_hook_over_plain"] == 1.025 and
   d["steps"]["hook_accuracy"]["hook_points_below_socket"] == 1.0 and
   [g["state"] for g in d["goals"]] == ["met", "missed", "met", "met", "met", "met", "met", "met"]'
check "check_gpu_report.py: a survivor that never ended is a failure (exit 1)" report_says hang 1 \
  'd["steps"]["rank_killed"]["result"] == "fail" and "hang" in d["steps"]["rank_killed"]["why"]'
best_socket() { [[ $("$PYTHON" "$here/check_gpu_report.py" --best-socket "$tmp/res/sweep2" --top 2 | tr '\n' ' ') == "2x1 1x1 " ]]; }
check "check_gpu_report.py --best-socket: configs by geometric-mean busbw" best_socket

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
      --min-bytes 64K --max-bytes 1M --warmup 1 --iters 3 --target-ms 20 >"$tmp/bench.out" 2>&1; then
    ok "ddp smoke: run_ddp.sh --cpu --bench allreduce (2 ranks, 64 KiB..1 MiB)"
    check "ddp smoke: all_reduce sums exact at 5 sizes" \
      assert_summary "$bench/cpu/summary.json" 's["all_exact"] and len(s["bench"]) == 5 and s["peak_busbw_GBps"] > 0'
  else
    bad "ddp smoke: run_ddp.sh --cpu --bench allreduce"
    tail -30 "$tmp/bench.out" | sed 's/^/     /'
  fi
  # A rank lost mid-training: rank 1 SIGKILLs itself after 5 steps; rank 0 must end by itself
  # with an error (gloo: connection closed, or the 20 s collective timeout), never hang.
  kill_dir=$tmp/smoke_kill
  "$here/run_ddp.sh" --cpu --ranks 2 --task digits --epochs 5 --wait-all --timeout-s 90 --out "$kill_dir" -- \
    --die-after-iters 5 --timeout-s 20 >"$tmp/kill.out" 2>&1 || true
  check "ddp smoke: rank 1 killed after 5 steps, rank 0 fails by itself" "$PYTHON" -c '
import json, sys
d = sys.argv[1]
die = [json.loads(l) for l in open(d + "/rank1.jsonl") if "\"die\"" in l]
e0, e1 = (json.load(open(f"{d}/rank{r}.exit")) for r in (0, 1))
assert die and die[0]["step"] == 5, die
assert e1["status"] == 137 and e0["status"] != 0, (e0, e1)
assert e0["time"] - die[0]["time"] < 60, (e0, die)' "$kill_dir"
else
  echo "ddp smoke: skipped (torch not installed)"
fi
echo "check_ddp_scripts: $passed passed, $failed failed"
((failed == 0))
