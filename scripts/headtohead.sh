#!/usr/bin/env bash
# headtohead.sh: the congestion head-to-head of issue 20 as ONE bounded command for the GPU
# machine, whose time is short (docs/GPU-MACHINE.md, "The congestion head-to-head (issue 20)").
# It decides whether trimming beats NCCL's Socket transport (TCP) where the network matters:
# DDP training through one emulated bottleneck (scripts/congestion_bench.sh: widemlp with 11.6 MB
# of gradient a step, and the digits CNN; Socket, our plugin with tail drop, trim with 1-bit
# heads, trim16), the goal being trim's time to target <= 0.5x Socket's and iteration p99 <= 0.5x
# at 60 % cross load with final accuracy within 0.3 points (scripts/plot_congestion.py judges).
#
#   1. preflight (seconds): the carried build (plugin, trim-switch), a GPU (nvidia-smi), torch
#      with CUDA and its NCCL, scikit-learn (digits data), `ip` (the machine's, or
#      .gpu/iproute2 from scripts/fetch-iproute2.sh, put first on PATH as check-gpu.sh does),
#      root, /dev/net/tun, and one network namespace made and removed. Anything missing: every
#      reason printed, the JSON line, exit 2, nothing else run.
#   2. the bench within the budget: congestion_bench.sh (its default preset, or --quick) with
#      --budget-s = what is left minus 10 s for the report and the bundle and 10 s for the
#      bench's last tear-down, under `timeout` as a backstop. The
#      bench runs its points in priority order and skips, saying so, those that no longer fit.
#   3. the report: the runs' table, every point against Socket, the goal's verdict, the plots,
#      with device, driver, torch, NCCL, commit and plugin sha256; the JSON line last.
#
# usage: scripts/headtohead.sh [options] [-- congestion_bench.sh options]
#   --quick          the bench's short preset: 16 runs, estimated ~4.2 min [budget 330 s]
#   --budget-s S     wall clock of the whole command [580; with --quick 330]: the bench gets
#                    what preflight leaves minus 20 s (~552 s; --quick ~302 s), where the default
#                    preset's 28 runs are estimated at 548 s (10 s start-up a run, trim no faster
#                    than Socket); device tool timeout_s 600 (--quick: 400)
#   --bundle DIR     write DIR/headtohead.json (the JSON line), DIR/headtohead.md (tables and
#                    verdict), DIR/time_to_target.png and DIR/congestion.png (when matplotlib is
#                    there), DIR/headtohead-logs.tgz (every log and result, < 15 MiB: without the
#                    NCCL rank logs, then without the switch's stats lines, if it would be more)
#   --out DIR        logs and results [BUILD/headtohead; wiped first if it holds an earlier run]
#   --build DIR      bin/ and lib/ [.gpu/build when it holds the plugin, else build]
#   --iproute2 DIR   fetch-iproute2.sh's folder, used when `ip` is missing [.gpu/iproute2]
#   --dry-run        what preflight checks, and the bench's plan with per-run estimates and
#                    limits (congestion_bench.sh --dry-run); runs nothing
#   --no-gpu         test only: leave out the GPU and CUDA checks, for a CPU smoke run of the
#                    whole flow (root, ip, /dev/net/tun and the build still needed), e.g.
#                    `--no-gpu -- --plan widemlp:c0 --transports socket,trim -- --device cpu
#                    --backend gloo` with GLOO_SOCKET_IFNAME=trimbn; the JSON line says no_gpu
# Environment: PYTHON [python3] (with torch), TRAIN_PYTHON [PYTHON]. NCCL_* variables that would
# change what is measured (NCCL_TRIM_*, NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD, NCCL_ALGO,
# NCCL_PROTO, NCCL_*NCHANNELS, NCCL_NET_GDR_*, NCCL_BUFFSIZE, NCCL_NET, NCCL_NET_PLUGIN) are
# unset first and listed in preflight.json.
# Exit status: 0 the goal met; 3 missed; 4 unknown (e.g. its point did not run); 1 a run failed
# or the bench broke off (the report still comes); 2 preflight failed or bad options.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/gpu_common.sh
. "$here/gpu_common.sh"
repo=$(cd "$here/.." && pwd)
PYTHON=${PYTHON:-python3}
export PYTHON
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "headtohead: $*" >&2; exit 2; }

quick=0 no_gpu=0 budget="" bundle="" out="" build="" iproute2="" dry=0 extra=()
while (($#)); do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --quick) quick=1; shift; continue ;;
    --dry-run) dry=1; shift; continue ;;
    --no-gpu) no_gpu=1; shift; continue ;;
    --) shift; extra=("$@"); break ;;
  esac
  (($# >= 2)) || die "$1 needs a value (see --help)"
  case $1 in
    --budget-s) budget=$2 ;;
    --bundle) bundle=$2 ;;
    --out) out=$2 ;;
    --build) build=$2 ;;
    --iproute2) iproute2=$2 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift 2
done
budget=${budget:-$( ((quick)) && echo 330 || echo 580)}
[[ $budget =~ ^[0-9]+$ ]] || die "--budget-s: a number of seconds"
start=$SECONDS
reserve=10  # kept for the report and the bundle
margin=10   # for the bench's last run's tear-down beyond its budget
preflight_guess=8  # seconds, for --dry-run's arithmetic

cd "$repo"
if [[ -z $build ]]; then
  build=build
  [[ -f .gpu/build/lib/libnccl-net-trim.so ]] && build=.gpu/build
fi
[[ $build = /* ]] || build=$repo/$build
out=${out:-$build/headtohead}
[[ $out = /* ]] || out=$PWD/$out
iproute2=${iproute2:-$repo/.gpu/iproute2}
[[ $iproute2 = /* ]] || iproute2=$repo/$iproute2
if [[ -n $bundle ]]; then
  [[ $bundle = /* ]] || bundle=$PWD/$bundle
fi

# `ip`: the carried copy (scripts/fetch-iproute2.sh) when the machine has none (as check-gpu.sh).
use_carried_ip "$iproute2"

unset_measured_env

preset_args=()
((quick)) && preset_args=(--quick)

if ((dry)); then
  echo "# headtohead.sh --dry-run: build $build, out $out, budget ${budget}s${bundle:+, bundle $bundle} (nothing is run)"
  echo "# preflight (seconds): $build/lib/libnccl-net-trim.so, $build/bin/trim-switch; nvidia-smi -L;"
  echo "#   $PYTHON: import torch, torch.cuda.is_available(), torch.cuda.nccl.version(), import sklearn;"
  echo "#   ip -V (${ip_note:-no ip here; $iproute2/bin/ip would be used}), root, /dev/net/tun, ip netns add/del"
  echo "# bench: congestion_bench.sh --budget-s $((budget - preflight_guess - reserve - margin)) (what is left after" \
    "~${preflight_guess}s of preflight, minus $((reserve + margin))s)"
  "$here/congestion_bench.sh" "${preset_args[@]}" --build "$build" --out "$out/bench" \
    --budget-s $((budget - preflight_guess - reserve - margin)) "${extra[@]}" --dry-run
  echo "# then: plot_congestion.py $out/bench --meta $out/preflight.json (tables, verdict, plots, JSON line)"
  exit 0
fi

# ---------------------------------------------------------------- preflight
if [[ -d $out && -n $(ls -A "$out" 2>/dev/null) && ! -f $out/preflight.json ]]; then
  die "--out $out holds something else than an earlier headtohead.sh run: not wiping it"
fi
rm -rf "$out"
mkdir -p "$out" || die "cannot make $out"
why=()
[[ -f $build/lib/libnccl-net-trim.so ]] ||
  why+=("no build: $build/lib/libnccl-net-trim.so missing (make here, or carry .gpu/build from scripts/pack-gpu.sh)")
[[ -x $build/bin/trim-switch ]] || why+=("no $build/bin/trim-switch (make, or scripts/pack-gpu.sh)")
gpu="" driver=""
if ((no_gpu)); then
  echo "headtohead: --no-gpu: GPU and CUDA not checked (a CPU smoke run, not a result)" >&2
elif ! command -v nvidia-smi >/dev/null 2>&1; then
  why+=("no GPU: nvidia-smi not found")
elif ! timeout 20 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$out/nvidia-smi.txt" 2>&1 ||
    ! [[ -s $out/nvidia-smi.txt ]] || grep -qi 'fail\|error\|no devices' "$out/nvidia-smi.txt"; then
  why+=("no GPU: nvidia-smi: $(head -1 "$out/nvidia-smi.txt")")
else
  IFS=, read -r gpu driver <"$out/nvidia-smi.txt"
  driver=${driver# }
fi
rc=0
probe_torch "$out/preflight_torch.json" "$out/preflight.log" || rc=$?
torch_why=$("$PYTHON" -c '
import json, os, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception:
    print("torch check did not finish (exit " + sys.argv[2] + ")"); sys.exit()
if "torch_error" in d: print("torch: " + d["torch_error"])
elif not d.get("cuda_available") and sys.argv[3] == "0": print("torch " + d["torch"] + " sees no GPU (torch.cuda.is_available() is False)")
if not d.get("sklearn") and not os.environ.get("DDP_DIGITS_CSV"):
    print("no scikit-learn (the digits data): install it, or set DDP_DIGITS_CSV to a copy of digits.csv.gz")
 ' "$out/preflight_torch.json" "$rc" "$no_gpu" 2>&1) || true
while IFS= read -r line; do [[ -n $line ]] && why+=("$line"); done <<<"$torch_why"
if ! command -v ip >/dev/null 2>&1; then
  why+=("iproute2 missing: no ip on PATH and no $iproute2/bin/ip; run scripts/fetch-iproute2.sh (or pack-gpu.sh --iproute2) on the build machine and carry .gpu")
elif ! ip -V >/dev/null 2>&1; then
  why+=("iproute2 broken: '$(command -v ip) -V' fails: $(ip -V 2>&1 | head -1)")
fi
(($(id -u) == 0)) || why+=("not root: network namespaces and TUN devices need root")
[[ -c /dev/net/tun ]] || why+=("no /dev/net/tun")
if (($(id -u) == 0)) && ip -V >/dev/null 2>&1; then
  probe=h2hprobe$$
  if ip netns add "$probe" 2>"$out/netns.err"; then
    ip netns del "$probe" 2>/dev/null || true
  else
    why+=("cannot make a network namespace: $(head -1 "$out/netns.err")")
  fi
fi
commit=$(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null || true)
[[ -n $commit && -n $(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null) ]] && commit+="-dirty"
[[ -n $commit ]] || commit=$(sed -n 's/^commit //p' "$build/BUILD_INFO" 2>/dev/null | head -1)
so_sha=$(sha256sum "$build/lib/libnccl-net-trim.so" 2>/dev/null | cut -c1-16 || true)
"$PYTHON" - "$out/preflight.json" "$out/preflight_torch.json" "$gpu" "$driver" "${commit:-unknown}" "$so_sha" \
  "$(nproc)" "$ip_note" "${unset_env[*]:-}" "$budget" "$quick" "$build" "$no_gpu" "${why[@]}" <<'PY'
import json, sys
f, tj, gpu, driver, commit, so, cores, ipn, unset, budget, quick, build, no_gpu = sys.argv[1:14]
why = sys.argv[14:]
try:
    t = json.load(open(tj))
except Exception:
    t = {}
json.dump({"ok": not why, "why": why, "device": gpu or t.get("gpu"), "driver": driver or None, **t,
           "commit": commit, "plugin_sha256": so or None, "build": build, "cores": int(cores), "ip": ipn or None,
           "unset_env": unset.split(), "budget_s": int(budget), "quick": quick == "1",
           "no_gpu": no_gpu == "1"}, open(f, "w"), indent=1)
PY

# finish RESULT EXIT [BENCH_JSON]: the JSON line (stdout, last), and the bundle.
finish() {
  local result=$1 code=$2 bench_json=${3:-}
  "$PYTHON" - "$out/preflight.json" "$result" "$code" "$((SECONDS - start))" "$budget" "$bench_json" \
    >"$out/headtohead.json" <<'PY'
import json, sys
pre, result, code, elapsed, budget, bj = sys.argv[1:7]
p = json.load(open(pre))
d = {"check": "headtohead", "result": result, "exit": int(code), "elapsed_s": int(elapsed), "budget_s": int(budget),
     "versions": {k: p.get(k) for k in ("device", "driver", "torch", "torch_cuda", "nccl", "python", "commit",
                                        "plugin_sha256", "cores")},
     "why": p.get("why") or None, "no_gpu": p.get("no_gpu")}
if bj:
    try:
        b = json.loads(open(bj).read().strip().splitlines()[-1])
        b.pop("meta", None)
        for k, v in (b.pop("versions", None) or {}).items():  # what the ranks saw fills the gaps
            if d["versions"].get(k) is None:
                d["versions"][k] = v
        d.update(b)
    except Exception as e:
        d["report_error"] = f"{type(e).__name__}: {e}"
print(json.dumps(d))
PY
  if [[ -n $bundle ]]; then
    mkdir -p "$bundle"
    cp "$out/headtohead.json" "$bundle/headtohead.json"
    cp "$out/headtohead.md" "$bundle/headtohead.md" 2>/dev/null || true
    local png
    for png in time_to_target.png congestion.png; do
      [[ -f $out/bench/$png ]] && cp "$out/bench/$png" "$bundle/$png"
    done
    local tgz=$bundle/headtohead-logs.tgz
    tar -czf "$tgz" -C "$(dirname "$out")" "$(basename "$out")" 2>/dev/null || true
    # The device tool brings back files of at most 16 MiB.
    if (($(stat -c %s "$tgz" 2>/dev/null || echo 0) > 15 * 1024 * 1024)); then
      tar -czf "$tgz" --exclude='rank*.log' -C "$(dirname "$out")" "$(basename "$out")" 2>/dev/null || true
    fi
    if (($(stat -c %s "$tgz" 2>/dev/null || echo 0) > 15 * 1024 * 1024)); then
      tar -czf "$tgz" --exclude='rank*.log' --exclude='switch.jsonl' -C "$(dirname "$out")" "$(basename "$out")" 2>/dev/null || true
    fi
  fi
  cat "$out/headtohead.json"
  exit "$code"
}

if ((${#why[@]})); then
  {
    echo "headtohead: cannot run here ($((SECONDS - start)) s):"
    printf '  - %s\n' "${why[@]}"
    echo "  The head-to-head needs the GPU machine (as root), torch with CUDA, iproute2 and the plugin built"
    echo "  here and carried: scripts/pack-gpu.sh --iproute2, then carry .gpu (docs/GPU-MACHINE.md)."
  } | tee "$out/headtohead.md" >&2
  finish fail 2
fi
echo "headtohead: preflight ok ($((SECONDS - start)) s): ${gpu:-GPU}, driver ${driver:-?}, ${ip_note}" >&2

# ---------------------------------------------------------------- the bench
left=$((budget - (SECONDS - start) - reserve))
((left >= 60)) || { echo "headtohead: only ${left}s left of --budget-s $budget for the bench" >&2; finish fail 1; }
echo "headtohead: congestion_bench.sh ${preset_args[*]:-} --budget-s $((left - margin)) (log $out/bench.log)" >&2
brc=0
timeout --kill-after=15 "$left" "$here/congestion_bench.sh" "${preset_args[@]}" --build "$build" --out "$out/bench" \
  --budget-s $((left - margin)) "${extra[@]}" >"$out/bench.log" 2>&1 </dev/null || brc=$?
grep '^congestion_bench: ' "$out/bench.log" >&2 || true
((brc == 124 || brc == 137)) && echo "headtohead: the bench ran out of its ${left}s and was stopped" | tee -a "$out/bench.log" >&2

# ---------------------------------------------------------------- the report
rrc=0
"$PYTHON" "$here/plot_congestion.py" "$out/bench" --meta "$out/preflight.json" >"$out/report.txt" 2>>"$out/bench.log" || rrc=$?
{
  echo "# Congestion head-to-head (issue 20): $(date -u +%FT%TZ)"
  "$PYTHON" - "$out/preflight.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
print("device {device}, driver {driver}, torch {torch} (CUDA {torch_cuda}), NCCL {nccl}, commit {commit}, "
      "plugin sha256 {plugin_sha256}, {cores} cores".format(**{k: p.get(k) for k in (
          "device", "driver", "torch", "torch_cuda", "nccl", "commit", "plugin_sha256", "cores")}))
PY
  echo "command: scripts/headtohead.sh ${preset_args[*]:-} --budget-s $budget; bench exit $brc"
  echo
  sed '$d' "$out/report.txt"
} >"$out/headtohead.md"
cat "$out/headtohead.md"
state=$("$PYTHON" -c 'import json, sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["goal"]["state"])' \
  "$out/report.txt" 2>/dev/null || echo unknown)
code=0
case $state in met) code=0 ;; missed) code=3 ;; *) code=4 ;; esac
result=pass
if ((brc != 0 || rrc != 0)); then code=1 result=fail; fi
finish "$result" "$code" "$out/report.txt"
