#!/usr/bin/env bash
# check_ddp_scripts.sh: the CI check of the PyTorch DDP scripts (no GPU needed, < 2 minutes).
#   1. static: python3 -m py_compile on the .py files, bash -n on run_ddp.sh, --help of each
#   2. run_ddp.sh --dry-run for every mode: the rank environment each mode promises (plugin by
#      absolute path, NCCL_NET, one NCCL_HOSTID per rank, the switch only where it belongs)
#   3. scripts/check-gpu.sh without a GPU: --dry-run of the first invocation (its 7 steps in
#      order, each with a limit and an estimate, the limits summing to <= 480 s, nothing made)
#      and of --continue (the rest in order, what the budget leaves for later, the grid and
#      --plan at the preset's 2.5 Gbit/s); check-gpu.sh itself on a machine without a GPU (exit
#      2 in seconds, the reasons, the commit from BUILD_INFO, the bundle); check_gpu_report.py's
#      verdicts on made-up results (passes, goal missed, a survivor that hung, a part that timed
#      out or was running when the check was stopped = failed, every RotateCuda test skipped =
#      failed, parts the budget left = not run, a grid that timed out with runs the budget left =
#      failed, not "not run"); --continue appending to an earlier bundle
#   4. the congestion head-to-head (issue 20) without a GPU: ddp_train.py --describe (widemlp
#      moves >= 10 MB a step); congestion_bench.sh --dry-run of the default and --quick presets
#      (run count and order, one switch setting per point for every transport, the mode by
#      transport, the tasks' arguments, estimates quoted by --help) and as check-gpu.sh's
#      congestion_c60 calls it; plot_congestion.py's verdict on made-up results (met, missed,
#      unknown, Socket too slow to reach the target) with where Socket wins and why
#   5. if `$PYTHON -c 'import torch, sklearn'` works: a real 2-rank gloo run on the CPU of
#      ddp_train.py (digits, a few steps) and of allreduce_bench.py (small sizes) through
#      run_ddp.sh --cpu, asserting identical parameter checksums on both ranks, a decreased
#      val loss and exact all_reduce sums; the same digits run with --eval-every and
#      --measure-compute ending with the same parameter bits; --describe against the real
#      models; a short widemlp run; and a run where rank 1 SIGKILLs itself
#      (--die-after-iters, run_ddp.sh --wait-all): rank 0 must fail by itself; else
#      "ddp smoke: skipped (torch not installed)".
#   6. only with CHECK_NETNS_SMOKE=1 (about a minute; root, ip, /dev/net/tun, a build, torch,
#      scikit-learn and numpy): check-gpu.sh --no-gpu --only congestion_grid through the real
#      netns bottleneck on the CPU (Gloo vs trim, digits at 60 % cross): the flow, report, bundle.
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

py=("$here/ddp_train.py" "$here/allreduce_bench.py" "$here/plot_ddp.py" "$here/plot_congestion.py" "$here/jsonio.py"
  "$here/check_gpu_report.py")
# py_compile writes __pycache__ next to the sources; compile into the temp dir instead.
# trim_model_sim.py is compiled only: it imports torch at once (tests/python runs it).
check "py_compile" env PYTHONPYCACHEPREFIX="$tmp/pycache" python3 -m py_compile "${py[@]}" "$here/trim_model_sim.py"
check "bash -n run_ddp.sh" bash -n "$here/run_ddp.sh"
check "bash -n check_ddp_scripts.sh" bash -n "$here/check_ddp_scripts.sh"
check "bash -n congestion_bench.sh" bash -n "$here/congestion_bench.sh"
check "bash -n netns_bottleneck.sh" bash -n "$here/netns_bottleneck.sh"
for f in check-gpu.sh pack-gpu.sh fetch-iproute2.sh; do check "bash -n $f" bash -n "$here/$f"; done
check "run_ddp.sh --bench congestion --help" "$here/run_ddp.sh" --bench congestion --help
check "bash -n alternate_rounds.sh" bash -n "$here/alternate_rounds.sh"
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
alt_rounds_args() {  # a bad argument, no LABEL=ARGS, a bad count: exit 2 with a reason, before any run
  local args
  for args in "--bogus gloo=" "--rounds 3" "--rounds 0 gloo="; do
    # shellcheck disable=SC2086
    "$here/alternate_rounds.sh" $args >"$tmp/alt.txt" 2>&1 && { echo "exit 0 for: $args"; return 1; }
    [[ $? == 2 ]] && grep -q "alternate_rounds.sh: " "$tmp/alt.txt" || { echo "no exit 2 and reason for: $args"; cat "$tmp/alt.txt"; return 1; }
  done
  help_has "$here/alternate_rounds.sh" --rounds --steps LABEL=ARGS
}
check "alternate_rounds.sh: --help, and exit 2 on bad arguments" alt_rounds_args
check "ddp_train.py --help: test options" help_has "$here/ddp_train.py" --deterministic --die-after-iters --die-rank
check "allreduce_bench.py --help: --target-ms" help_has "$here/allreduce_bench.py" --target-ms
check "ddp_train.py --help: widemlp, --describe, --measure-compute, --eval-every, --time-limit-s" help_has \
  "$here/ddp_train.py" widemlp --describe --measure-compute --eval-every --time-limit-s
check "check-gpu.sh --help: --continue, --budget-s, --bundle, --from, --plan, --no-gpu, --dry-run" help_has "$here/check-gpu.sh" \
  --continue --budget-s --bundle --from --plan --no-gpu --dry-run
check "congestion_bench.sh --help: presets, calibration, budget" help_has "$here/congestion_bench.sh" --quick --plan \
  --calibrate --budget-s --startup-s
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

# ---- the GPU machine's one command, here without a GPU
part1="ddp_lossless allreduce_2r congestion_c60 kernels hook_overhead hook_accuracy rank_killed"
part2="allreduce_4r ddp_random_trim socket_sweep_2r socket_sweep_4r hook_accuracy_more kernels_ncu codec_threads_2r harness_scaling cpu_uncongested congestion_grid"
# cg_steps FILE: a dry run's steps ("= STEP: limit Ls, estimate Es"), as "STEP LIMIT ESTIMATE" lines.
cg_steps() { sed -n 's/^= \([a-z0-9_]*\): limit \([0-9]*\)s, estimate \([0-9]*\)s$/\1 \2 \3/p' "$1"; }
cg_dry() {
  "$here/check-gpu.sh" --dry-run --build "$tmp/nobuild" --out "$tmp/cg-dry" >"$tmp/cg-dry.txt" 2>&1 || return 1
  local f=$tmp/cg-dry.txt order sum total
  [[ ! -e $tmp/cg-dry ]] || { echo "--dry-run made $tmp/cg-dry"; return 1; }
  order=$(cg_steps "$f" | cut -d' ' -f1 | tr '\n' ' ')
  [[ $order == "$part1 " ]] || { echo "steps: $order"; cat "$f"; return 1; }
  # Each step has its limit and estimate; preflight, the steps and the reports' reserve fit 8 minutes.
  sum=$(( $(sed -n 's/^\[preflight\] limit \([0-9]*\)s.*/\1/p' "$f") + $(cg_steps "$f" | awk '{ s += $2 } END { print s }') +
    $(sed -n 's/^# total: .* (preflight, steps, \([0-9]*\) s for the reports).*/\1/p' "$f") ))
  total=$(sed -n 's/^# total: limits \([0-9]*\) s .*of --budget-s 480; estimated [0-9]* s$/\1/p' "$f")
  [[ -n $total ]] && ((total == sum && total <= 480)) || { echo "limits: total '$total', sum $sum (<= 480?)"; return 1; }
  ! cg_steps "$f" | awk '$3 <= 0 || $3 > $2 { bad = 1 } END { exit !bad }' || { echo "an estimate is 0 or over its limit"; return 1; }
  grep -q -- '--die-after-iters 15' "$f" && grep -q 'NCCL_ALGO=Ring NCCL_PROTO=Simple' "$f" && grep -qF -- '--sizes 1M\,16M\,128M' "$f" &&
    grep -q -- "--gtest_filter=RotateCuda" "$f" && ! grep -q 'NCCL_NET_GDR' "$f" || { echo "a step's command"; cat "$f"; return 1; }
  # congestion_c60 at the preset's rate, with an explicit --plan
  grep -q -- '--plan widemlp:c60 --transports socket\\,trim --rate-gbps 2.5 ' "$f" &&
    grep -q '# congestion_bench.sh --dry-run: custom plan, 2 runs, rate 2.5 Gbit/s' "$f" || { echo "congestion_c60"; return 1; }
}
check "check-gpu.sh --dry-run: the 7 steps in order, limits summing to <= 480 s, estimates, nothing run" cg_dry
cg_dry_rest() {
  "$here/check-gpu.sh" --continue --dry-run --build "$tmp/nobuild" --out "$tmp/cg-dry" --plan widemlp:c60,digits:c60 \
    >"$tmp/cg-dry2.txt" 2>&1 || return 1
  local f=$tmp/cg-dry2.txt order
  order=$(cg_steps "$f" | cut -d' ' -f1 | tr '\n' ' ')
  [[ $order == "$part1 $part2 " ]] || { echo "steps: $order"; return 1; }
  # What the budget leaves for later is said; what fits sums to <= --budget-s 560.
  grep -q '^\[allreduce_2r\] limit 45s, estimate 25s, log allreduce_2r.log$' "$f" &&
    grep -q '^\[socket_sweep_2r 4x1\] limit 30s, estimate 13s: beyond --budget-s 560 (check-gpu.sh --continue again)$' "$f" &&
    grep -q '^\[congestion_grid\] not run: time budget' "$f" && grep -q '# check-gpu.sh --dry-run: invocation 1 (continue)' "$f" &&
    [[ $(sed -n 's/^# total: limits \([0-9]*\) s .*/\1/p' "$f") -le 560 ]] || { cat "$f"; return 1; }
  # The grid: congestion_bench.sh's preset; --plan keeps the preset's rate (alone it would take 1 Gbit/s).
  "$here/check-gpu.sh" --continue --dry-run --only congestion_grid --build "$tmp/nobuild" --out "$tmp/cg-dry" >"$tmp/cg-dry3.txt" 2>&1 &&
    grep -q '# congestion_bench.sh --dry-run: default plan, 28 runs, rate 2.5 Gbit/s' "$tmp/cg-dry3.txt" &&
    grep -q '^= congestion_grid: limit 525s, estimate 548s$' "$tmp/cg-dry3.txt" || { cat "$tmp/cg-dry3.txt"; return 1; }
  "$here/check-gpu.sh" --continue --dry-run --only congestion_grid --plan widemlp:c60,digits:c60 --build "$tmp/nobuild" \
    --out "$tmp/cg-dry" >"$tmp/cg-dry4.txt" 2>&1 &&
    grep -q '# congestion_bench.sh --dry-run: custom plan, 8 runs, rate 2.5 Gbit/s' "$tmp/cg-dry4.txt" || { cat "$tmp/cg-dry4.txt"; return 1; }
}
check "check-gpu.sh --continue --dry-run: the rest in order, what fits the budget; the grid, --plan at the preset's 2.5 Gbit/s" cg_dry_rest
# A build dir as pack-gpu.sh leaves it, but a plugin changed after packing.
mkdir -p "$tmp/fakebuild/lib"
echo "not a plugin" >"$tmp/fakebuild/lib/libnccl-net-trim.so"
printf 'commit feedc0ffee12\nplugin_sha256 0123456789abcdef\npacked 2026-01-01T00:00:00Z\n' >"$tmp/fakebuild/BUILD_INFO"
cg_no_gpu() {
  local t0=$SECONDS rc=0
  "$here/check-gpu.sh" --build "$tmp/fakebuild" --out "$tmp/cg" --bundle "$tmp/cg-b" >"$tmp/cg.txt" 2>&1 || rc=$?
  ((rc == 2)) || { echo "exit $rc, not 2"; cat "$tmp/cg.txt"; return 1; }
  ((SECONDS - t0 < 60)) || { echo "took $((SECONDS - t0)) s"; return 1; }
  grep -q 'cannot run here' "$tmp/cg.txt" && grep -q -- '- no GPU' "$tmp/cg.txt" || { echo "no reason given"; cat "$tmp/cg.txt"; return 1; }
  tail -1 "$tmp/cg.txt" | "$PYTHON" -c '
import json, sys
d = json.loads(sys.stdin.read())
assert d == json.load(open(sys.argv[1] + "/check-gpu.json")), "bundle"
assert d["exit"] == 2 and d["result"] == "fail", d
# the commit is the one BUILD_INFO names (this checkout is a git repository of another commit)
assert d["versions"]["commit"] == "feedc0ffee12", d["versions"]
why = d["steps"]["preflight"]["why"]
assert "no GPU" in why and "repack" in why and "trim-switch" in why, why
p1, p2 = sys.argv[2].split(), sys.argv[3].split()
assert all(d["steps"][s]["result"] == "not run" and d["steps"][s]["why"] == "preflight failed" for s in p1), d["steps"]
assert all(d["steps"][s]["result"] == "not planned" for s in p2), d["steps"]
assert len(d["steps"]) == 18 and all(g["state"] == "unknown" for g in d["goals"]), d' "$tmp/cg-b" "$part1" "$part2"
}
if nvidia-smi -L >/dev/null 2>&1; then
  echo "check-gpu.sh without a GPU: skipped (this machine has one: run scripts/check-gpu.sh itself)"
else
  check "check-gpu.sh without a GPU: exit 2 in seconds, the reasons, the commit from BUILD_INFO, the bundle" cg_no_gpu
fi
# check_gpu_report.py on made-up results: OUT as check-gpu.sh leaves it after both invocations.
make_results() {  # make_results DIR VARIANT: good | hang | timeout | exit | skipped | budget | killed | grid | part1
  "$PYTHON" - "$@" "$part1" "$part2" <<'PY'
import json, sys
from pathlib import Path
out, variant, p1, p2 = Path(sys.argv[1]), sys.argv[2], sys.argv[3].split(), sys.argv[4].split()
sizes = [1 << 20, 16 << 20, 128 << 20]
steps = [{"invocation": 1, "plan": p1, "budget_s": 480}]
if variant != "part1":
    steps.append({"invocation": 2, "plan": p2, "budget_s": 560})
inv = 1
def w(p, obj):
    f = out / p
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(obj if isinstance(obj, str) else json.dumps(obj))
def bench(p, bw, mode):
    w(p + "/summary.json", {"status": "ok", "kind": "bench", "mode": mode, "all_exact": True,
                            "bench": [{"bytes": b, "busbw_GBps": bw, "max_err": 0} for b in sizes]})
def rec(step, part, rc=0, **kw):
    steps.append({"invocation": inv, "step": step, "part": part, "rc": rc, "seconds": 10, "limit": 60, **kw})
def pre(n):
    w(f"preflight_{n}.json", {"ok": True, "invocation": n, "commit": "abc", "plugin_sha256": "f00"})
w("preflight.json", {"ok": True, "why": [], "gpu": "NVIDIA H200", "torch": "2.11.0", "nccl": "2.28.9", "cores": 16,
                     "commit": "abc", "plugin_sha256": "f00"})
pre(1); rec("preflight", "")
h = "ab" * 32
for m, p50 in (("lossless", 5.1), ("socket", 5.0)):
    w(f"ddp_{m}/summary.json", {"status": "ok", "iter_p50_ms": p50, "params_identical": True})
    w(f"ddp_{m}/rank0.jsonl", json.dumps({"event": "final", "param_sha256": [h, h]}) + "\n")
    rec("ddp_lossless", m)
bench("ar2/lossless", 1.9, "lossless"); bench("ar2/socket", 1.8, "socket"); rec("allreduce_2r", "")
steps.append({"invocation": 1, "step": "congestion_c60", "part": "", "not_run": "iproute2 missing: no ip; see docs/GPU-MACHINE.md"})
if variant == "skipped":  # what a build without nvcc prints on the GPU machine
    w("kernels_tests.log", "[==========] Running 2 tests from 1 test suite.\n" + "".join(
        f"[ RUN      ] RotateCuda.{t}\ntests/rotate_cuda_test.cc:32: Skipped\nbuilt without nvcc: \n\n"
        f"[  SKIPPED ] RotateCuda.{t} (0 ms)\n" for t in ("A", "B")) +
        "[==========] 2 tests from 1 test suite ran. (0 ms total)\n[  PASSED  ] 0 tests.\n[  SKIPPED ] 2 tests, listed below:\n")
else:
    w("kernels_tests.log", "".join(f"[ RUN      ] RotateCuda.{t}\n[       OK ] RotateCuda.{t} (5 ms)\n" for t in "ABC"))
w("kernels_bench.log", "".join(json.dumps({"bench": "cuda", "dtype": d, "op": o, "ratio": r, "copy_gbps": 2900.0}) + "\n"
                               for d, o, r in (("fp32", "forward", 0.7), ("fp32", "inverse", 0.6), ("bf16", "forward", 0.4))))
rec("kernels", "tests"); rec("kernels", "bench")
seen = "NCCL INFO NET/Trim: comm 0x1 is the nccl_trim comm hook's (traffic class 116): ...\n"
for x, p50 in (("plain", 40.0), ("hook", 41.0)):
    w(f"hook_{x}/summary.json", {"status": "ok", "iter_p50_ms": p50})
    rec("hook_overhead", x, {"timeout": 124 if x == "hook" else 0, "exit": 1 if x == "plain" else 0}.get(variant, 0))
w("hook_hook/rank0.log", seen)
def hookacc(step, seed, accs):
    for t, acc in zip(("socket", "rht", "hook"), accs):
        w(f"hookacc/{t}_s{seed}/summary.json", {"status": "ok", "val_acc": acc, "params_identical": True})
    w(f"hookacc/hook_s{seed}/rank0.log", seen)
    rec(step, f"s{seed}")
hookacc("hook_accuracy", 1, (0.60, 0.585, 0.59))
w("ddp_kill/rank1.jsonl", json.dumps({"event": "die", "step": 15, "time": 1000.0}) + "\n")
w("ddp_kill/rank1.exit", {"rank": 1, "status": 137, "time": 1000.1})
if variant != "hang":
    w("ddp_kill/rank0.exit", {"rank": 0, "status": 134, "time": 1002.5})
w("ddp_kill/rank0.log", "NCCL WARN NET/Trim: peer x closed the control connection without saying goodbye\n")
if variant == "killed":  # check-gpu.sh stopped during this part
    rec("rank_killed", "", 143, killed="check-gpu.sh was stopped")
else:
    rec("rank_killed", "", 1)
if variant != "part1":
    inv = 2
    pre(2); rec("preflight", "")
    bench("ar4/lossless", 1.5, "lossless"); bench("ar4/socket", 1.4, "socket"); rec("allreduce_4r", "")
    for c, bw in (("1x1", 1.7), ("2x1", 2.0)):
        bench(f"sweep2/{c}/socket", bw, "socket"); rec("socket_sweep_2r", c)
    bench("sweep4/2x1/socket", 1.3, "socket"); rec("socket_sweep_4r", "2x1")
    hookacc("hook_accuracy_more", 2, (0.61, 0.58, 0.60))
    if variant == "budget":  # the budget ended before seed 3: not run, never a pass
        steps.append({"invocation": 2, "step": "hook_accuracy_more", "part": "s3", "not_run": "time budget: 40 s left"})
    else:
        hookacc("hook_accuracy_more", 3, (0.59, 0.575, 0.58))
    # alternate_rounds.sh's summary: trim 1.08x Gloo's step (paired median of 3 rounds), CPU 1.07x
    w("cpu_uncongested/summary.json", {"rounds": 3, "baseline": "gloo",
        "gloo": {"ok_rounds": 3, "step_p50_ms_median": 50.0, "cpu_s_median": 30.0, "step_paired_ratio": 1.0, "cpu_paired_ratio": 1.0},
        "trim": {"ok_rounds": 3, "step_p50_ms_median": 54.0, "cpu_s_median": 32.1, "step_paired_ratio": 1.08, "cpu_paired_ratio": 1.07}})
    rec("cpu_uncongested", "")
    # ddp_random_trim, kernels_ncu, codec_threads_2r, harness_scaling, congestion_grid: not reached
    # (budget) in this made-up second invocation
    for s in ("ddp_random_trim", "kernels_ncu", "codec_threads_2r", "harness_scaling", "congestion_grid"):
        if variant == "grid" and s == "congestion_grid":  # as check-gpu.sh: the part, then the runs it left
            rec(s, "", 124, dir="congestion", log="congestion_grid.log")
            steps.append({"invocation": 2, "step": s, "part": "", "not_run": "3 run(s) left for lack of time"})
        elif variant != "budget" or s != "congestion_grid":
            steps.append({"invocation": 2, "step": s, "part": "", "not_run": "time budget: 12 s left"})
by = {}
for r in steps:  # as check-gpu.sh: a step is complete when every part of it ran
    if "step" in r:
        by.setdefault(r["step"], {})[r["part"]] = "rc" in r
steps += [{"step": k, "part": "", "complete": 1} for k, v in by.items() if all(v.values()) and k != "preflight"]
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
check "check_gpu_report.py: the first invocation passed; a step it could not run (no ip) is not a pass (exit 4)" \
  report_says part1 4 \
  'd["result"] == "incomplete" and d["not_run"] == ["congestion_c60"] and d["steps"]["ddp_lossless"]["hash_equal"] and
   d["steps"]["allreduce_2r"]["plugin_over_socket_default"] == [1.056] * 3 and d["steps"]["rank_killed"]["cause"] == "plugin" and
   d["steps"]["rank_killed"]["seconds_to_error"] == 2.5 and d["steps"]["congestion_c60"]["why"].startswith("iproute2 missing") and
   d["steps"]["kernels"]["tests"]["passed"] == 3 and d["steps"]["kernels"]["ratios"]["fp32 forward"] == 0.7 and
   d["steps"]["hook_overhead"]["p50_hook_over_plain"] == 1.025 and d["steps"]["allreduce_4r"]["result"] == "not planned" and
   d["next"][0] == "congestion_c60" and "allreduce_4r" in d["next"] and [i["invocation"] for i in d["invocations"]] == [1]'
check "check_gpu_report.py: both invocations; Socket best 2x1 beats the plugin, goal missed; the CPU step 1.08x Gloo, missed; steps left not run (exit 4)" \
  report_says good 4 \
  'd["steps"]["allreduce_2r"]["socket_best"] == "2x1" and d["steps"]["allreduce_2r"]["plugin_over_socket_best"][0] == 0.95 and
   d["steps"]["allreduce_4r"]["socket_best"] == "default" and d["steps"]["hook_accuracy_more"]["result"] == "pass" and
   [g["state"] for g in d["goals"]] == ["met", "missed", "met", "met", "met", "unknown", "met", "met", "met", "unknown", "missed"] and
   d["steps"]["cpu_uncongested"]["step_ratio"] == 1.08 and d["steps"]["cpu_uncongested"]["cpu_ratio"] == 1.07 and
   d["steps"]["cpu_uncongested"]["result"] == "pass" and d["goals"][10]["detail"].startswith("1.08x over 3 rounds") and
   "seeds 1,2,3" in d["goals"][8]["detail"] and d["steps"]["harness_scaling"]["result"] == "not run" and
   len(d["invocations"]) == 2 and d["next"][0] == "congestion_c60"'
check "check_gpu_report.py: a survivor that never ended is a failure (exit 1)" report_says hang 1 \
  'd["steps"]["rank_killed"]["result"] == "fail" and "hang" in d["steps"]["rank_killed"]["why"]'
check "check_gpu_report.py: a part that ran out of its limit fails its step, whatever it left (exit 1)" report_says timeout 1 \
  'd["steps"]["hook_overhead"]["result"] == "fail" and d["steps"]["hook_overhead"]["why"] == "timed out: hook after its 60 s limit" and
   d["failed"] == ["hook_overhead"]'
check "check_gpu_report.py: a part that exited non-zero fails its step, whatever its summary says (exit 1)" report_says exit 1 \
  'd["steps"]["hook_overhead"]["result"] == "fail" and d["steps"]["hook_overhead"]["why"] == "exit 1 (plain)"'
check "check_gpu_report.py: check-gpu.sh stopped during a part: that step failed (exit 1)" report_says killed 1 \
  'd["steps"]["rank_killed"]["result"] == "fail" and "stopped during rank_killed" in d["steps"]["rank_killed"]["why"]'
check "check_gpu_report.py: every RotateCuda test skipped is a failure (exit 1)" report_says skipped 1 \
  'd["steps"]["kernels"]["result"] == "fail" and "every test skipped (built without nvcc:" in d["steps"]["kernels"]["why"]'
check "check_gpu_report.py: parts the budget left, and a step never reached, are not run, never pass (exit 4)" report_says budget 4 \
  'd["steps"]["hook_accuracy_more"]["result"] == "not run" and "1 part(s) not run: time budget" in d["steps"]["hook_accuracy_more"]["why"] and
   d["steps"]["congestion_grid"]["result"] == "not run" and "stopped before it" in d["steps"]["congestion_grid"]["why"]'
check "check_gpu_report.py: a grid that timed out, then runs it left for lack of time: failed, both reasons kept (exit 1)" \
  report_says grid 1 \
  'd["steps"]["congestion_grid"]["result"] == "fail" and d["failed"] == ["congestion_grid"] and
   d["steps"]["congestion_grid"]["why"].startswith("timed out: congestion_grid after its 60 s limit") and
   "3 run(s) left for lack of time" in d["steps"]["congestion_grid"]["why"] and d["gpu_steps_run"] > 0'
best_socket() { [[ $("$PYTHON" "$here/check_gpu_report.py" --best-socket "$tmp/res/sweep2" --top 2 | tr '\n' ' ') == "2x1 1x1 " ]]; }
check "check_gpu_report.py --best-socket: configs by geometric-mean busbw" best_socket
# The second invocation appends: from the first one's bundle (another machine), then in place.
cg_continue() {
  rm -rf "$tmp/res" "$tmp/b1" "$tmp/cg2" "$tmp/b2"
  make_results "$tmp/res" part1 && mkdir -p "$tmp/b1" && tar -czf "$tmp/b1/check-gpu-logs.tgz" -C "$tmp" res || return 1
  # The dry run reads what the bundle says is done, and makes nothing.
  "$here/check-gpu.sh" --continue --dry-run --from "$tmp/b1" --build "$tmp/fakebuild" --out "$tmp/cg2" >"$tmp/cg2-dry.txt" 2>&1 &&
    grep -q '^# check-gpu.sh --dry-run: invocation 2 (continue)' "$tmp/cg2-dry.txt" && [[ ! -e $tmp/cg2 ]] &&
    grep -q "^# plan: congestion_c60 $part2$" "$tmp/cg2-dry.txt" || { cat "$tmp/cg2-dry.txt"; return 1; }
  local rc=0 i
  for i in 2 3; do
    rc=0
    "$here/check-gpu.sh" --continue --from "$tmp/b1" --build "$tmp/fakebuild" --out "$tmp/cg2" --bundle "$tmp/b2" \
      >"$tmp/cg2.txt" 2>&1 || rc=$?
    ((rc == 2)) || { echo "exit $rc"; cat "$tmp/cg2.txt"; return 1; }
    tail -1 "$tmp/cg2.txt" | "$PYTHON" -c '
import json, sys
d = json.loads(sys.stdin.read())
n, p1, p2 = int(sys.argv[1]), sys.argv[2].split(), sys.argv[3].split()
assert [i["invocation"] for i in d["invocations"]] == list(range(1, n + 1)), d["invocations"]
assert d["invocations"][1]["plan"] == ["congestion_c60"] + p2 and d["invocations"][1]["continue"] == 1, d["invocations"]
s = d["steps"]
assert s["ddp_lossless"]["result"] == "pass" and s["ddp_lossless"]["hash_equal"], s["ddp_lossless"]  # kept from the first
assert s["allreduce_4r"]["result"] == "not run" and s["allreduce_4r"]["why"] == "preflight failed", s["allreduce_4r"]
assert d["exit"] == 2 and s["preflight"]["result"] == "fail", d' "$i" "$part1" "$part2" || return 1
  done
  tar -tzf "$tmp/b2/check-gpu-logs.tgz" >"$tmp/b2.list"  # (not into grep -q: SIGPIPE under pipefail)
  grep -q '^cg2/ddp_lossless/summary.json$' "$tmp/b2.list" || { echo "the bundle lost the first invocation"; return 1; }
  [[ $(grep -c '"plan"' "$tmp/cg2/steps.jsonl") == 3 ]] || { echo "not appended"; return 1; }
}
if nvidia-smi -L >/dev/null 2>&1; then
  echo "check-gpu.sh --continue without a GPU: skipped (this machine has one)"
else
  check "check-gpu.sh --continue: its dry run reads the bundle; it appends to the first invocation's bundle, then to its own results" cg_continue
fi

# ---- the congestion head-to-head (issue 20), here without a GPU
# ddp_train.py --describe (no torch): the big task moves >= 10 MB of gradient a step.
describe_has() {  # describe_has TASK PYTHON-EXPR (over the JSON object d)
  local d
  d=$(WORLD_SIZE=2 "$PYTHON" "$here/ddp_train.py" --task "$1" --describe) || return 1
  "$PYTHON" -c 'import json, sys; d = json.loads(sys.argv[1]); assert eval(sys.argv[2]), d' "$d" "$2"
}
check "ddp_train.py --describe widemlp: >= 10 MB of gradient, 60 steps at 2 ranks" describe_has widemlp \
  'd["grad_bytes"] >= 10e6 and d["grad_bytes"] == 4 * d["params"] and d["steps"] == 60 and d["steps_per_epoch"] == 5'
check "ddp_train.py --describe digits: the CNN as before (283786 parameters, 22 steps an epoch)" describe_has digits \
  'd["params"] == 283786 and d["steps_per_epoch"] == 22'
# cb_dry NAME ARGS...: congestion_bench.sh --dry-run ARGS into $tmp/NAME.txt
cb_dry() {
  local name=$1; shift
  "$here/congestion_bench.sh" --dry-run --build "$tmp/nobuild" --out "$tmp/cb" "$@" >"$tmp/$name.txt" 2>&1 ||
    { cat "$tmp/$name.txt"; return 1; }
  [[ ! -e $tmp/cb ]] || { echo "--dry-run made $tmp/cb"; return 1; }
}
# cb_plan FILE: what the dry run says, as JSON: runs (label, estimate, limit, the switch's
# arguments without its per-process namespace names, and each rank's command) and the total.
cb_plan() {
  "$PYTHON" - "$1" <<'PY'
import json, re, sys
runs, cur, total = [], None, None
for line in open(sys.argv[1]):
    m = re.match(r"# run (\S+) -> \S+ \(estimate (\d+) s, limit (\d+) s\)", line)
    if m:
        cur = {"label": m[1], "estimate": int(m[2]), "limit": int(m[3]), "ranks": []}
        runs.append(cur)
        continue
    m = re.match(r"#   \+ \S+/trim-switch (.*)", line)
    if m and cur:
        cur["switch"] = re.sub(r"--tun-netns \S+ ", "", m[1]).split()
        continue
    m = re.match(r"#   \+ \[rank (\d+)\] .*? (env .*)", line)
    if m and cur:
        cur["ranks"].append(m[2])
    m = re.match(r"# plan: (\d+) runs .* estimated (\d+) s", line)
    if m:
        total = int(m[2])
print(json.dumps({"runs": runs, "total": total}))
PY
}
# The switch's settings are the point's, equal for every transport; only --mode follows the transport.
cb_same_switch() {  # cb_same_switch FILE EXPECTED_RUNS
  cb_plan "$1" >"$tmp/plan.json" || return 1
  "$PYTHON" - "$tmp/plan.json" "$2" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
runs, want = p["runs"], int(sys.argv[2])
assert len(runs) == want, f"{len(runs)} runs, not {want}"
points = {}
for r in runs:
    task, tr, c, l = r["label"].split("_")
    sw = r["switch"]
    mode = sw[sw.index("--mode") + 1]
    assert mode == ("drop" if tr in ("socket", "drop") else "trim"), (r["label"], mode)
    rest = sw[:sw.index("--mode")] + sw[sw.index("--mode") + 2:]
    points.setdefault((task, c, l), {})[tr] = rest
    assert len(r["ranks"]) == 2 and all(f"NCCL_HOSTID=ddp-rank{k} " in r["ranks"][k] for k in (0, 1)), r["label"]
    sock = "NCCL_NET=Socket NCCL_NET_PLUGIN=none" in r["ranks"][0]
    assert sock == (tr == "socket"), r["label"]
    assert (tr == "socket") != ("libnccl-net-trim.so NCCL_NET=Trim" in r["ranks"][0]), r["label"]
    assert ("NCCL_TRIM_HEAD_BITS=16" in r["ranks"][0]) == (tr == "trim16"), r["label"]
    assert f"--time-limit-s {r['limit'] - 15}" in r["ranks"][0] and "--deterministic" in r["ranks"][0], r["label"]
for pt, trs in points.items():
    assert len(trs) == 4, (pt, sorted(trs))
    vals = list(trs.values())
    assert all(v == vals[0] for v in vals), (pt, trs)
    want_cross = pt[1] != "c0"
    assert ("--cross" in vals[0]) == want_cross and ("--loss-p" in vals[0]) == (pt[2] != "l0"), (pt, vals[0])
    assert vals[0][vals[0].index("--rate-gbps") + 1] == "2.5" and vals[0][vals[0].index("--seed") + 1] == "7", vals[0]
PY
}
cb_default() {
  cb_dry cb_default || return 1
  cb_same_switch "$tmp/cb_default.txt" 28 || return 1
  local order
  order=$(grep -o '^# run [a-z]*_socket_c[0-9.]*_l[0-9.]*' "$tmp/cb_default.txt" | sed 's/# run //' | tr '\n' ' ')
  [[ $order == "widemlp_socket_c0_l0 widemlp_socket_c60_l0 widemlp_socket_c90_l0 widemlp_socket_c0_l1 digits_socket_c60_l0 widemlp_socket_c30_l0 widemlp_socket_c0_l0.1 " ]] ||
    { echo "order: $order"; return 1; }
  grep -q -- '--task widemlp .*--measure-compute 10' "$tmp/cb_default.txt" || { echo "no widemlp args"; return 1; }
  grep -q -- '--task digits .*--max-steps 160 --eval-every 10' "$tmp/cb_default.txt" || { echo "no digits args"; return 1; }
  grep -q '^# calibration: the first run (widemlp socket c0)' "$tmp/cb_default.txt" || { echo "no calibration"; return 1; }
  grep -q '^# task widemlp: grad_bytes 11581480 (11.6 MB), 60 steps' "$tmp/cb_default.txt" || { echo "no widemlp size"; return 1; }
  ! grep -q -- '--loss-p 0.02\b\|_l2 ' "$tmp/cb_default.txt" || { echo "2 % loss is no longer a point"; return 1; }
  local total
  total=$(sed -n 's/^# plan: 28 runs in 7 point(s), estimated \([0-9]*\) s.*/\1/p' "$tmp/cb_default.txt")
  [[ -n $total ]] || { echo "no estimate"; return 1; }
  # The usage text quotes the dry run's estimates.
  "$here/congestion_bench.sh" --help >"$tmp/cb_help.txt" 2>&1  # (grep -q in a pipe: SIGPIPE under pipefail)
  grep -q "estimated $total s (" "$tmp/cb_help.txt" ||
    { echo "congestion_bench.sh --help does not say 'estimated $total s'"; return 1; }
}
check "congestion_bench.sh --dry-run: 28 runs, one switch setting per point, priority order, the estimate quoted by --help" cb_default
cb_quick() {
  cb_dry cb_quick --quick || return 1
  cb_same_switch "$tmp/cb_quick.txt" 16 || return 1
  local q d
  q=$(sed -n 's/^# plan: .* estimated \([0-9]*\) s.*/\1/p' "$tmp/cb_quick.txt")
  d=$(sed -n 's/^# plan: .* estimated \([0-9]*\) s.*/\1/p' "$tmp/cb_default.txt")
  ((q < d && q <= 302)) || { echo "--quick estimate $q s vs default $d s (must be smaller, <= 302)"; return 1; }
  "$here/congestion_bench.sh" --help >"$tmp/cb_help.txt" 2>&1
  grep -q "estimated $q s (" "$tmp/cb_help.txt" || { echo "--help does not say 'estimated $q s'"; return 1; }
  grep -q '^# run widemlp_trim_c60_l0 ' "$tmp/cb_quick.txt" && grep -q '^# run digits_socket_c60_l0 ' "$tmp/cb_quick.txt" ||
    { echo "--quick lost the goal's point or digits"; return 1; }
}
check "congestion_bench.sh --quick --dry-run: 16 runs, same switch per point, a smaller estimate (<= 302 s)" cb_quick
# check-gpu.sh's congestion_c60 as it calls congestion_bench.sh: one point, two transports, the preset's
# port (2.5 Gbit/s, 128 KiB, 60 % cross as line-rate bursts: 6 ms of every 10).
cb_cg() {
  cb_dry cb_cg --plan widemlp:c60 --transports socket,trim --rate-gbps 2.5 --timeout-s 40 || return 1
  [[ $(grep -c '^# run ' "$tmp/cb_cg.txt") -eq 2 ]] && grep -q -- '--rate-gbps 2.5 --buffer-bytes 131072 .*--cross onoff:2.5:6:4:all' "$tmp/cb_cg.txt" &&
    grep -q '^# run widemlp_trim_c60_l0 .*limit 40 s' "$tmp/cb_cg.txt" && ! grep -q '^# calibration' "$tmp/cb_cg.txt" ||
    { cat "$tmp/cb_cg.txt"; return 1; }
}
check "congestion_bench.sh --dry-run as check-gpu.sh's congestion_c60 calls it: 2 runs, the preset's port, 40 s, no calibration" cb_cg
# The CPU head-to-head (issue 25): Gloo the baseline; drop/trim through the trim backend, the
# hook under the launcher's bootstrap; cross traffic in line-rate bursts; no socket on CPU.
cb_cpu() {
  cb_dry cb_cpu --cpu || return 1
  local f=$tmp/cb_cpu.txt
  [[ $(grep -c '^# run ' "$f") -eq 28 ]] && grep -q '^# run widemlp_gloo_c0_l0 ' "$f" && grep -q '^# run widemlp_hook_c60_l0 ' "$f" &&
    grep -q -- '--rate-gbps 0.5 --buffer-bytes 131072 .*--cross onoff:0.5:6:4:all' "$f" &&
    grep -A1 '^# run widemlp_gloo_c60' "$f" | grep -q -- '--mode drop' &&
    grep -A3 '^# run widemlp_hook_c0' "$f" | grep 'rank 0' | grep -q -- '-m nccl_trim._boot --trim-cpu .*--device cpu --backend gloo' &&
    grep -A3 '^# run widemlp_trim_c0' "$f" | grep 'rank 0' | grep -q -- 'NCCL_TRIM_LIB_DIR=.*--device cpu --backend trim' &&
    grep -A3 '^# run widemlp_gloo_c0' "$f" | grep 'rank 0' | grep -q -- 'GLOO_SOCKET_IFNAME=trimbn .*--backend gloo' ||
    { cat "$f"; return 1; }
  ! "$here/congestion_bench.sh" --cpu --transports socket,trim --dry-run >/dev/null 2>&1
}
check "congestion_bench.sh --cpu --dry-run: 28 runs vs gloo, bursts, the hook under --trim-cpu; socket refused" cb_cpu
trimacc_dry() {
  "$here/run_ddp.sh" --cpu --sweep trimacc --task charlm --dry-run --out "$tmp/ta" >"$tmp/ta.txt" 2>&1 || { cat "$tmp/ta.txt"; return 1; }
  # 3 seeds x (gloo + 2 p x (rht, hook, rht16, hook16, hookmse, hookmsenopc, hook2mse, rhtef, hookef))
  # = 57 runs; random trimming through the switch
  [[ $(grep -c '^# run ' "$tmp/ta.txt") -eq 57 ]] && grep -q -- '--random-p 0.75' "$tmp/ta.txt" &&
    grep -A4 '^# run hook2mse_p0.5_s1 ' "$tmp/ta.txt" | grep 'rank 0' | grep -q 'NCCL_TRIM_HEAD_BITS=2 .*NCCL_TRIM_HEAD_SCALE=mse .*_boot --trim-cpu' &&
    grep -A4 '^# run hookmsenopc_p0.5_s1 ' "$tmp/ta.txt" | grep 'rank 0' | grep -q 'NCCL_TRIM_HEAD_SCALE=mse NCCL_TRIM_HOOK_PRECONDITION=off .*_boot --trim-cpu' &&
    ! grep -A4 '^# run hookmse_p0.5_s1 ' "$tmp/ta.txt" | grep -q 'HOOK_PRECONDITION' &&
    grep -A4 '^# run hookef_p0.5_s1 ' "$tmp/ta.txt" | grep 'rank 0' | grep -q 'NCCL_TRIM_ERROR_FEEDBACK=1 .*_boot --trim-cpu' &&
    grep -A4 '^# run rhtef_p0.75_s0 ' "$tmp/ta.txt" | grep 'rank 1' | grep -q 'NCCL_TRIM_ERROR_FEEDBACK=1 .*--backend trim' &&
    ! grep -A4 '^# run hookmse_p0.5_s0 ' "$tmp/ta.txt" | grep -q 'ERROR_FEEDBACK' &&
    grep -A4 '^# run hookmse_p0.5_s1 ' "$tmp/ta.txt" | grep 'rank 0' | grep -q 'NCCL_TRIM_HEAD_SCALE=mse .*_boot --trim-cpu' &&
    grep -A4 '^# run hook16_p0.75_s2 ' "$tmp/ta.txt" | grep 'rank 1' | grep -q 'NCCL_TRIM_HEAD_BITS=16 .*_boot --trim-cpu' &&
    ! grep -A4 '^# run hook_p0.5_s0 ' "$tmp/ta.txt" | grep -q 'HEAD_SCALE' &&
    grep -A4 '^# run hook_p0.5_s2 ' "$tmp/ta.txt" | grep 'rank 1' | grep -q -- '_boot --trim-cpu .*--seed 2 --device cpu --backend gloo' &&
    grep -A4 '^# run rht16_p0.5_s0 ' "$tmp/ta.txt" | grep 'rank 1' | grep -q 'NCCL_TRIM_HEAD_BITS=16 .*--backend trim' ||
    { cat "$tmp/ta.txt"; return 1; }
}
check "run_ddp.sh --cpu --sweep trimacc --dry-run: gloo, rht, hook, rht16, hook16, hook with the mse scale (scaled by Adam's second moments and not; 2-bit heads), rht and hook with error feedback at p 0.5/0.75 over 3 seeds" trimacc_dry
cpu_modes_dry() {  # --cpu alone is gloo; --cpu with a --mode (lossless too) goes through the plugin
  "$here/run_ddp.sh" --cpu --dry-run --out "$tmp/cm" 2>&1 | grep '# rank 0' | grep -q -- '--device cpu --backend gloo' &&
    ! "$here/run_ddp.sh" --cpu --dry-run --out "$tmp/cm" 2>&1 | grep -q NCCL_NET_PLUGIN &&
    "$here/run_ddp.sh" --cpu --mode lossless --dry-run --out "$tmp/cm" 2>&1 | grep '# rank 0' |
      grep -q -- 'NCCL_NET_PLUGIN=.*--device cpu --backend trim' &&
    "$here/run_ddp.sh" --cpu --mode lossless --hook --dry-run --out "$tmp/cm" 2>&1 | grep '# rank 0' |
      grep -q -- '-m nccl_trim._boot --trim-cpu .*--backend gloo'
}
check "run_ddp.sh --cpu: gloo alone; --mode lossless through the trim backend; --hook under _boot --trim-cpu" cpu_modes_dry
cb_budget() {  # a budget the plan does not fit: the dry run says so
  cb_dry cb_budget --quick --budget-s 100 && grep -q 'over --budget-s 100: the last points would be skipped' "$tmp/cb_budget.txt"
}
check "congestion_bench.sh --dry-run --budget-s: says when the plan does not fit" cb_budget
# plot_congestion.py's verdict on made-up results (summary.json as congestion_bench.sh leaves them).
make_congestion() {  # make_congestion DIR VARIANT: met | missed | unknown | socket_slow | gloo (met, on CPU)
  "$PYTHON" - "$@" <<'PY'
import json, sys
from pathlib import Path
out, variant = Path(sys.argv[1]), sys.argv[2]
def run(task, tr, c, l, ttt, steps_tt, p50, p99, acc, sha, steps=60, gb=11581480, status="ok", wall=None):
    if variant == "gloo":  # the CPU bench: Gloo the baseline, the hook instead of 16-bit heads
        tr = {"socket": "gloo", "trim16": "hook"}.get(tr, tr)
    d = out / f"{task}_{tr}_c{c}_l{l}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "summary.json").write_text(json.dumps({
        "label": d.name, "task": task, "transport": tr, "cross_pct": float(c), "loss_pct": float(l), "status": status,
        "time_to_target_s": ttt, "steps_to_target": steps_tt, "iter_p50_ms": p50, "iter_p99_ms": p99, "val_acc": acc,
        "val_loss": 0.1, "steps": steps, "target_acc": 0.95, "grad_bytes": gb, "val_count": 359,
        "param_sha256_full": sha, "params_identical": True, "run_wall_s": wall or (p50 * steps / 1e3 + 1 if p50 else None),
        "retx_plugin": None if tr in ("socket", "gloo") else 10, "retx_tcp": 5, "trim_rate": 0.2 if "trim" in tr else None,
        "versions": {"gpu": "made-up"}}))
S_ACC, T_ACC = 348 / 359, 347 / 359  # one val image apart
ex = "e" * 64
for c, f in ((0, 1), (60, 2.5)):
    run("widemlp", "socket", c, 0, 4.0 * f, 40, 60 * f, 90 * f, S_ACC, ex)
    run("widemlp", "drop", c, 0, 4.2 * f, 40, 63 * f, 95 * f, S_ACC, ex)
    run("widemlp", "trim16", c, 0, 3.0 * f, 40, 45 * f, 60 * f, T_ACC, "b" * 64)
trim60 = {"met": (4.0, 40, 50.0, 80.0, T_ACC), "missed": (6.0, 40, 70.0, 80.0, T_ACC),
          "unknown": None, "socket_slow": (4.0, 40, 50.0, 80.0, S_ACC), "gloo": (4.0, 40, 50.0, 80.0, T_ACC)}[variant]
run("widemlp", "trim", 0, 0, 4.0, 40, 55.0, 80.0, S_ACC, "a" * 64)
if trim60:
    run("widemlp", "trim", 60, 0, *trim60, "c" * 64)
else:
    run("widemlp", "trim", 60, 0, None, None, None, None, None, None, status="failed (124)")
if variant == "socket_slow":  # Socket never reached the target in its 60 steps (a 12 s run)
    run("widemlp", "socket", 60, 0, None, None, 200.0, 400.0, S_ACC, ex, wall=12.0)
# digits: Socket wins on steps (the trimmed run needed more of them), drop is fast
run("digits", "socket", 60, 0, 2.0, 100, 18.0, 30.0, 0.96, "d" * 64, steps=160, gb=1135144)
run("digits", "drop", 60, 0, 1.9, 100, 17.0, 29.0, 0.96, "d" * 64, steps=160, gb=1135144)
run("digits", "trim", 60, 0, 3.0, 150, 17.0, 29.0, 0.955, "f" * 64, steps=160, gb=1135144)
PY
}
judge_says() {  # judge_says VARIANT PYTHON-EXPR (over the JSON line d)
  rm -rf "$tmp/cg-res"
  make_congestion "$tmp/cg-res" "$1" || return 1
  "$PYTHON" "$here/plot_congestion.py" "$tmp/cg-res" --no-plots >"$tmp/judge.txt" 2>&1 || { cat "$tmp/judge.txt"; return 1; }
  tail -1 "$tmp/judge.txt" | "$PYTHON" -c 'import json, sys; d = json.loads(sys.stdin.read()); e = sys.argv[1]
assert eval("(" + e + ")"), e + "\n" + json.dumps(d["goal"]) + "\n" + json.dumps(d["comparisons"])' "$2"
}
check "plot_congestion.py: goal met (time 0.4x, p99 0.36x, -0.28 points) on the task with most gradient" judge_says met \
  'd["goal"]["state"] == "met" and d["goal"]["task"] == "widemlp" and d["goal"]["parts"]["time_to_target"]["ratio"] == 0.4 and
   d["goal"]["parts"]["p99"]["ratio"] == 0.356 and d["goal"]["parts"]["accuracy"]["diff_points"] == -0.279 and
   d["goal"]["parts"]["accuracy"]["resolution_points"] == 0.279'
check "plot_congestion.py: goal missed (time 0.6x); Socket wins listed, why: steps (accuracy)" judge_says missed \
  'd["goal"]["state"] == "missed" and d["goal"]["parts"]["time_to_target"]["state"] == "missed" and
   any(c["task"] == "digits" and c["transport"] == "trim" and c["baseline_wins"] and "1.5x the steps" in c["why"]
       for c in d["comparisons"]) and
   any(c["task"] == "widemlp" and c["transport"] == "drop" and c["cross_pct"] == 60 and c["params_equal_baseline"] is True
       for c in d["comparisons"])'
check "plot_congestion.py: goal unknown (the trim run at 60 % failed)" judge_says unknown \
  'd["goal"]["state"] == "unknown" and "trim run failed (124)" in d["goal"]["detail"]'
check "plot_congestion.py: Socket never reached the target: its run length bounds the ratio" judge_says socket_slow \
  'd["goal"]["parts"]["time_to_target"]["ratio_below"] == 0.333 and d["goal"]["state"] == "met"'
check "plot_congestion.py on CPU runs: Gloo the baseline, a verdict for trim (met) and one for the hook (0.75x: missed)" judge_says gloo \
  'd["goal"]["baseline"] == "gloo" and d["goal"]["state"] == "met" and [g["transport"] for g in d["goals"]] == ["trim", "hook"] and
   d["goals"][1]["state"] == "missed" and d["goals"][1]["parts"]["time_to_target"]["ratio"] == 0.75 and all(c["baseline"] == "gloo" for c in d["comparisons"] if "baseline" in c)'

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
  # The head-to-head's options leave the training alone: the same 30 digits steps with
  # --eval-every and --measure-compute end with the same parameter bits; widemlp trains.
  train2=$tmp/smoke_train2
  if "$here/run_ddp.sh" --cpu --ranks 2 --task digits --epochs 2 --max-steps 30 --out "$train2" -- \
      --eval-every 7 --measure-compute 2 --target-acc 0.5 >"$tmp/train2.out" 2>&1; then
    check "ddp smoke: --eval-every/--measure-compute change no parameter bit (same sha256 as without)" "$PYTHON" -c '
import json, sys
a, b = (json.load(open(f + "/summary.json")) for f in sys.argv[1:3])
assert a["param_sha256"] == b["param_sha256"], (a["param_sha256"], b["param_sha256"])
ev = [json.loads(l) for l in open(sys.argv[2] + "/rank0.jsonl")]
assert [e["steps"] for e in ev if e["event"] == "eval"] == [7, 14, 21, 28], ev
assert any(e["event"] == "compute" and e["steps"] == 2 for e in ev), ev' "$train" "$train2"
  else
    bad "ddp smoke: run_ddp.sh --cpu ddp_train.py --eval-every --measure-compute"
    tail -30 "$tmp/train2.out" | sed 's/^/     /'
  fi
  check "ddp smoke: --describe's parameter counts = the models build_model makes" "$PYTHON" -c '
import argparse, sys
sys.path.insert(0, sys.argv[1])
import torch.nn as nn, torch, ddp_train as D
for argv in (["--task", "digits"], ["--task", "digits", "--model", "mlp"], ["--task", "widemlp"],
             ["--task", "charlm"], ["--task", "charlm", "--d-model", "64", "--layers", "2", "--seq-len", "32"]):
    a = D.parse_args(argv)
    n = sum(p.numel() for p in D.build_model(a, nn, torch).parameters())
    assert n == D.describe(a, 2)["params"], (argv, n, D.describe(a, 2))' "$here"
  wide=$tmp/smoke_wide
  if "$here/run_ddp.sh" --cpu --ranks 2 --task widemlp --max-steps 6 --out "$wide" -- --measure-compute 2 \
      --time-limit-s 600 >"$tmp/wide.out" 2>&1; then
    check "ddp smoke: widemlp (2 ranks, 6 steps): >= 10 MB of gradient, compute timed, replicas identical" "$PYTHON" -c '
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1] + "/rank0.jsonl")]
cfg = next(e for e in ev if e["event"] == "config")
fin = next(e for e in ev if e["event"] == "final")
assert cfg["grad_bytes"] >= 10e6 and fin["grad_bytes"] == cfg["grad_bytes"], cfg
assert fin["compute_ms"] > 0 and fin["params_identical"] and fin["steps"] == 6 and not fin["stopped_by_time_limit"], fin' "$wide"
  else
    bad "ddp smoke: run_ddp.sh --cpu --task widemlp"
    tail -30 "$tmp/wide.out" | sed 's/^/     /'
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
# check-gpu.sh's whole flow through real namespaces, on the CPU (opt-in: it takes a minute or two).
if [[ ${CHECK_NETNS_SMOKE:-0} == 1 ]]; then
  cg_cpu() {
    local rc=0
    "$here/check-gpu.sh" --no-gpu --only congestion_grid --plan digits:c60 --budget-s 240 --out "$tmp/cg-cpu" \
      --bundle "$tmp/cg-cpu-b" -- --transports gloo,trim --max-steps 25 >"$tmp/cg-cpu.txt" 2>&1 || rc=$?
    ((rc == 0 || rc == 3)) || { echo "exit $rc"; tail -40 "$tmp/cg-cpu.txt"; return 1; }
    tail -1 "$tmp/cg-cpu.txt" | "$PYTHON" -c '
import json, os, sys
d = json.loads(sys.stdin.read())
g = d["steps"]["congestion_grid"]
assert g["result"] == "pass" and len(g["runs"]) == 2 and all(r["status"] == "ok" for r in g["runs"].values()), g
assert d["invocations"][0]["no_gpu"] == 1 and d["steps"]["ddp_lossless"]["result"] == "not planned", d
assert d["result"] == "pass (no GPU step ran)" and d["gpu_steps_run"] == 0, d  # never "pass"
b = json.load(open(os.path.join(sys.argv[1], "../cg-cpu/congestion/bench.json")))
assert b["rate_gbps"] == 0.5 and b["plan"] == ["digits:c60"], b  # the CPU preset rate, with --plan
for f in ("check-gpu.json", "check-gpu.txt", "check-gpu-logs.tgz", "congestion.md"):
    assert os.path.getsize(os.path.join(sys.argv[1], f)) > 0, f' "$tmp/cg-cpu-b"
  }
  check "check-gpu.sh --no-gpu: the congestion grid's flow, 2 CPU runs through the netns bottleneck, report and bundle" cg_cpu
else
  echo "netns smoke: skipped (CHECK_NETNS_SMOKE=1 runs check-gpu.sh --no-gpu on the CPU, a minute or two)"
fi
echo "check_ddp_scripts: $passed passed, $failed failed"
((failed == 0))
