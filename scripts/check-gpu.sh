#!/usr/bin/env bash
# check-gpu.sh: the one command that checks the plugin on the GPU machine (docs/GPU-MACHINE.md).
# The plugin makes no CUDA call: it takes host buffers only (NCCL_PTR_HOST) and NCCL's kernel
# stages GPU data through pinned host memory, as for NCCL's Socket transport; the codec runs on
# CPU worker threads (NCCL_TRIM_CODEC_THREADS). So this is real NCCL + PyTorch through the plugin
# against NCCL Socket, every rank on the one GPU with its own NCCL_HOSTID (all traffic on the
# network transport), over loopback:
#   preflight         GPU, torch + NCCL, the carried build; nothing else runs without them
#   1 allreduce_2r    ring allreduce busbw 1..256 MiB, 2 ranks, lossless plugin vs Socket at its
#     allreduce_4r    defaults, the same at 4 ranks (NCCL_ALGO=Ring NCCL_PROTO=Simple, channels
#                     pinned alike); goal: plugin >= 1.0x Socket at every size
#     socket_sweep_2r Socket tuned: NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD (--socket-sweep);
#     socket_sweep_4r at 4 ranks the --sweep4-top best of the 2-rank sweep; the best config
#                     (geometric mean over sizes) is "Socket best"; goal: plugin >= 1.0x it
#     codec_threads_2r  the plugin at NCCL_TRIM_CODEC_THREADS = --codec-threads (default auto above)
#   2 ddp_lossless    DDP (ddp_train.py --deterministic) through the plugin and through Socket: the
#                     final parameter sha256 must be equal; goal: iteration p50 plugin <= 1.05x
#   3 ddp_random_trim DDP through trim-switch --mode random, trim probability 0.5 (run_ddp.sh
#                     --mode random): something trimmed, replicas identical on every rank
#   4 rank_killed     DDP where rank 1 SIGKILLs itself after N steps (ddp_train.py
#                     --die-after-iters): rank 0 must fail by itself, with the plugin's dead-peer /
#                     closed-connection error or an NCCL error, within 60 s (NCCL_TRIM_TIMEOUT_MS
#                     10000, collective timeout 30 s); a hang is a failure
#   5 congestion_quick  scripts/congestion_bench.sh at one point (60 % cross load), Socket vs plugin
#                     trim through one netns/TUN bottleneck; only where `ip` (iproute2), root and
#                     /dev/net/tun are there (else skipped, saying why)
#   6 kernels         libtrim-rht's GPU rotation (the comm hook's): trim-tests --gtest_filter=
#                     --kernel-tests (bit-identical to the host twin on odd sizes), then
#                     trim-bench cuda --json: forward/inverse per dtype vs a device-to-device copy of
#                     the same bytes in the same run; goal: fp32 ratio >= 0.5 (aim 0.85); ncu's
#                     full set on the first launches (kernels_ncu.log), where ncu exists
#   7 hook_overhead   char-LM DDP through the plugin, lossless, without and with the comm hook
#                     (run_ddp.sh --hook), --hook-steps steps each; goal: p50 with hook <= 1.05x
#   8 hook_accuracy   char-LM under random trimming p = --hook-p, --hook-epochs epochs, per seed of
#                     --hook-seeds: Socket (nothing trimmed), the plugin with per-hop rht, the plugin
#                     with the hook; final val accuracy per transport (goal: hook >= per-hop rht;
#                     aim: within 0.3 points of Socket) and replicas identical in every run
# Execution order: preflight, 1 (plugin vs Socket default), 2, 3, 4, 5, 6, 7, 8, then the sweeps
# of 1 with the time left. Every part runs under `timeout` and within --budget-s for the whole (a part
# is skipped, saying so, when too little is left); each has a log under --out. The end: a table,
# the busbw per size, and ONE JSON line (scripts/check_gpu_report.py). Exit status: 0 every step
# passed or was skipped and no goal was missed; 3 steps passed but a goal was missed; 1 a step
# failed; 2 preflight failed (no GPU, no torch, no build: said why, in seconds). A part whose
# limit the budget had cut and that ran out of it counts as skipped (cut short), not failed.
#
# Usage: scripts/check-gpu.sh [options]
#   --build DIR        bin/ and lib/ [.gpu/build when it holds the plugin, else build]
#   --out DIR          logs and results [BUILD/check-gpu; wiped first, if it holds an earlier run]
#   --bundle DIR       also write DIR/check-gpu.json, DIR/check-gpu.txt and DIR/check-gpu-logs.tgz
#                      (three files: what the device tool can bring back from $OUT)
#   --budget-s S       wall-clock budget of the whole run [330]
#   --quick            up to 64 MiB, 3 Socket configs, 1 at 4 ranks, codec threads 0 and 4
#   --skip LIST        leave out steps: allreduce,sweep,codec,ddp,random,kill,congestion,kernels,hook,hookacc
#   --only LIST        run only these (same names as --skip), e.g. --only kernels,hook,hookacc
#   --kernel-tests F   gtest filter of step 6 [RotateCuda*]
#   --hook-steps N     optimizer steps per run of step 7 [60]
#   --hook-seeds L     seeds of step 8 [1,2,3]   --hook-epochs E [3]   --hook-p P [0.5]
#   --channels N       NCCL_MIN/MAX_NCHANNELS for the allreduce steps [2]; 'default': unset
#   --socket-sweep L   NTHREADSxNSOCKS configs, in this order [4x1,2x1,4x2,2x2,1x2,1x1]
#   --sweep4-top N     how many of the best 2-rank configs to rerun at 4 ranks [2]
#   --codec-threads L  NCCL_TRIM_CODEC_THREADS values for codec_threads_2r [0,2,4,4e2]; TeE also sets
#                      NCCL_TRIM_ENGINES=E (progress engines per device)
#   --ddp-task T       digits|charlm for ddp_lossless [digits] (charlm: minutes)  --ddp-epochs E [4]
#   --kill-after N     rank 1 dies after N steps [15]
#   --iproute2 DIR     fetch-iproute2.sh's folder, used when `ip` is missing [.gpu/iproute2]
#   --dry-run          print every step's command, limit and log; run nothing
# Environment: PYTHON [python3] (with torch). NCCL_* variables that change what is measured
# (NCCL_TRIM_*, NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD, NCCL_ALGO, NCCL_PROTO,
# NCCL_*NCHANNELS, NCCL_NET_GDR_*, NCCL_BUFFSIZE) are unset first, and listed in preflight.json.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/gpu_common.sh
. "$here/gpu_common.sh"
repo=$(cd "$here/.." && pwd)
PYTHON=${PYTHON:-python3}
export PYTHON
build="" out="" bundle="" budget=330 quick=0 skip="" dry=0 channels=2
socket_sweep="4x1,2x1,4x2,2x2,1x2,1x1" sweep4_top=2 codec_threads="0,2,4,4e2"
ddp_task=digits ddp_epochs=4 kill_after=15 iproute2="" only=""
kernel_tests='RotateCuda*' hook_steps=60 hook_seeds=1,2,3 hook_epochs=3 hook_p=0.5
trim_p=0.5 trim_ranks=4 kill_bound_s=60
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "check-gpu: $*" >&2; exit 2; }
while (($#)); do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --quick) quick=1; shift; continue ;;
    --dry-run) dry=1; shift; continue ;;
  esac
  (($# >= 2)) || die "$1 needs a value (see --help)"
  case $1 in
    --build) build=$2 ;;
    --out) out=$2 ;;
    --bundle) bundle=$2 ;;
    --budget-s) budget=$2 ;;
    --skip) skip=$2 ;;
    --only) only=$2 ;;
    --kernel-tests) kernel_tests=$2 ;;
    --hook-steps) hook_steps=$2 ;;
    --hook-seeds) hook_seeds=$2 ;;
    --hook-epochs) hook_epochs=$2 ;;
    --hook-p) hook_p=$2 ;;
    --channels) channels=$2 ;;
    --socket-sweep) socket_sweep=$2 ;;
    --sweep4-top) sweep4_top=$2 ;;
    --codec-threads) codec_threads=$2 ;;
    --ddp-task) ddp_task=$2 ;;
    --ddp-epochs) ddp_epochs=$2 ;;
    --kill-after) kill_after=$2 ;;
    --iproute2) iproute2=$2 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift 2
done
[[ $budget =~ ^[0-9]+$ ]] || die "--budget-s: a number of seconds"
[[ $channels == default || $channels =~ ^[1-9][0-9]*$ ]] || die "--channels: a number or 'default'"
[[ $ddp_task =~ ^(digits|charlm)$ ]] || die "--ddp-task: digits or charlm"
[[ $kill_after =~ ^[1-9][0-9]*$ && $ddp_epochs =~ ^[1-9][0-9]*$ && $sweep4_top =~ ^[0-9]+$ ]] ||
  die "--kill-after, --ddp-epochs, --sweep4-top: numbers"
for s in ${skip//,/ } ${only//,/ }; do
  [[ $s =~ ^(allreduce|sweep|codec|ddp|random|kill|congestion|kernels|hook|hookacc)$ ]] ||
    die "--skip/--only: unknown step '$s'"
done
[[ $hook_steps =~ ^[1-9][0-9]*$ && $hook_epochs =~ ^[1-9][0-9]*$ && $hook_seeds =~ ^[0-9]+(,[0-9]+)*$ ]] ||
  die "--hook-steps, --hook-epochs: numbers; --hook-seeds: comma-separated numbers"
IFS=, read -r -a hook_seed_list <<<"$hook_seeds"
max_bytes=256M
if ((quick)); then
  max_bytes=64M socket_sweep="2x1,4x1,2x2" sweep4_top=1 codec_threads="0,4,4e2" ddp_epochs=3 hook_steps=30
fi
IFS=, read -r -a sweep_list <<<"$socket_sweep"
IFS=, read -r -a codec_list <<<"$codec_threads"
for c in "${sweep_list[@]}"; do [[ $c =~ ^[0-9]+x[0-9]+$ ]] || die "--socket-sweep: NTHREADSxNSOCKS, not '$c'"; done
for c in "${codec_list[@]}"; do [[ $c =~ ^([0-9]+|auto)(e[0-9]+)?$ ]] || die "--codec-threads: numbers or auto, each maybe with eE (E engines), not '$c'"; done

cd "$repo" || exit 2
if [[ -z $build ]]; then
  build=build
  [[ -f .gpu/build/lib/libnccl-net-trim.so ]] && build=.gpu/build
fi
[[ $build = /* ]] || build=$repo/$build
out=${out:-$build/check-gpu}
[[ $out = /* ]] || out=$PWD/$out
iproute2=${iproute2:-$repo/.gpu/iproute2}
[[ $iproute2 = /* ]] || iproute2=$repo/$iproute2
skipped() { [[ ",$skip," == *",$1,"* ]] || [[ -n $only && ",$only," != *",$1,"* ]]; }
# want STEP KEY...: false (and STEP recorded as skipped) when one of the KEYs is in --skip
want() {
  local step=$1 k
  shift
  for k in "$@"; do
    if skipped "$k"; then
      if [[ ",$skip," == *",$k,"* ]]; then skip_part "$step" "" "--skip $k"; else skip_part "$step" "" "not in --only $only"; fi
      return 1
    fi
  done
}

# `ip` for step 5: the carried copy (scripts/fetch-iproute2.sh) when the machine has none.
use_carried_ip "$iproute2"
congestion_why=""  # why step 5 cannot run here ("" = it can)
if ! command -v ip >/dev/null 2>&1; then
  congestion_why="iproute2 missing: no ip on PATH and no $iproute2/bin/ip; run scripts/fetch-iproute2.sh on the build machine and carry .gpu (see docs/GPU-MACHINE.md)"
elif ! ip -V >/dev/null 2>&1; then
  congestion_why="iproute2 broken: '$(command -v ip) -V' fails ($(ip -V 2>&1 | head -1)); see docs/GPU-MACHINE.md"
elif (($(id -u) != 0)); then
  congestion_why="not root: network namespaces and TUN devices need root"
elif [[ ! -c /dev/net/tun ]]; then
  congestion_why="no /dev/net/tun"
fi

unset_measured_env

# ---------------------------------------------------------------- the parts
bench_env=(env NCCL_ALGO=Ring NCCL_PROTO=Simple)
[[ $channels != default ]] && bench_env+=(NCCL_MIN_NCHANNELS="$channels" NCCL_MAX_NCHANNELS="$channels")
bench_args=(-- --min-bytes 1M --max-bytes "$max_bytes" --warmup 2 --iters 5 --target-ms 100 --timeout-s 45)
rd=("$here/run_ddp.sh" --build "$build" --no-plots)

start=$SECONDS
deadline=$((start + budget))
reserve=10     # kept for the report
min_start=25   # a part is not started with less than this left
steps=$out/steps.jsonl

# record STEP PART KEY=VALUE... (values numbers, or strings without quotes/backslashes)
record() {
  local step=$1 part=$2 kv
  shift 2
  local line="{\"step\":\"$step\",\"part\":\"$part\""
  for kv in "$@"; do
    local k=${kv%%=*} v=${kv#*=}
    if [[ $v =~ ^-?[0-9]+(\.[0-9]+)?$ ]]; then line+=",\"$k\":$v"; else line+=",\"$k\":\"${v//\"/\'}\""; fi
  done
  echo "$line}" >>"$steps"
}
skip_part() {  # skip_part STEP PART REASON
  if ((dry)); then echo "[$1${2:+ $2}] skipped: $3"; return; fi
  record "$1" "$2" "skip=$3"
  echo "check-gpu: $1${2:+ $2}: skipped: $3" >&2
}

# reap DIR: kill what a part left running (ranks are in sessions of their own; run_ddp.sh kills
# them on TERM, this is the backstop when it was killed): processes whose command line names DIR.
reap() {
  local dir=$1 p pid n=0 args
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
    mapfile -d '' args 2>/dev/null <"$p/cmdline" || continue
    if [[ "${args[*]}" == *"$dir"* ]]; then
      kill -KILL "$pid" 2>/dev/null && n=$((n + 1))
    fi
  done
  ((n == 0)) || echo "check-gpu: killed $n leftover process(es) of $dir" >&2
}

# part STEP PART LIMIT DIR -- COMMAND...: COMMAND under `timeout` (and within the budget), its
# output in OUT/STEP[_PART].log, a record in steps.jsonl. DIR is the part's results (relative).
part() {
  local step=$1 name=$2 limit=$3 dir=$4
  shift 5
  local log=$step${name:+_$name}.log
  if ((dry)); then
    printf '[%s%s] limit %ss, results %s, log %s\n  %s\n' "$step" "${name:+ $name}" "$limit" "$dir" "$log" \
      "$(printf '%q ' "$@")"
    return 0
  fi
  local left=$((deadline - SECONDS - reserve))
  if ((left < min_start)); then
    skip_part "$step" "$name" "time budget: ${left}s left of --budget-s $budget"
    return 1
  fi
  local clipped=0
  ((limit > left)) && limit=$left clipped=1
  echo "check-gpu: $step${name:+ $name} (limit ${limit}s, log $log)" >&2
  local t0=$SECONDS rc
  timeout --kill-after=10 "$limit" "$@" >"$out/$log" 2>&1 </dev/null
  rc=$?
  ((rc == 124 || rc == 137)) && echo "check-gpu: timed out after ${limit}s" >>"$out/$log"
  reap "$out/$dir/"
  record "$step" "$name" "rc=$rc" "seconds=$((SECONDS - t0))" "limit=$limit" "clipped=$clipped" "dir=$dir" "log=$log"
  echo "check-gpu: $step${name:+ $name}: exit $rc after $((SECONDS - t0))s" >&2
  return "$rc"
}

# ---------------------------------------------------------------- preflight
if ((dry)); then
  echo "# check-gpu.sh --dry-run: build $build, out $out, budget ${budget}s (nothing is run)"
  echo "[preflight] limit 60s: $build/lib/libnccl-net-trim.so and bin/trim-switch; nvidia-smi -L;"
  echo "  $PYTHON -c 'import torch; torch.cuda.is_available(); torch.cuda.nccl.version()'; sklearn"
  echo "# step 5 here: ${congestion_why:-would run (${ip_note})}"
else
  # Wiped first, but only an earlier check's output (or an empty folder).
  if [[ -d $out && -n $(ls -A "$out" 2>/dev/null) && ! -f $out/steps.jsonl ]]; then
    die "--out $out holds something else than an earlier check-gpu.sh run: not wiping it"
  fi
  rm -rf "$out"
  mkdir -p "$out" || die "cannot make $out"
  out=$(cd "$out" && pwd)
  steps=$out/steps.jsonl
  : >"$steps"
  t0=$SECONDS
  why=()
  [[ -f $build/lib/libnccl-net-trim.so ]] ||
    why+=("no build: $build/lib/libnccl-net-trim.so missing (make here, or carry .gpu/build from scripts/pack-gpu.sh)")
  [[ -x $build/bin/trim-switch ]] || why+=("no $build/bin/trim-switch (make, or scripts/pack-gpu.sh)")
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    why+=("no GPU: nvidia-smi not found")
  elif ! timeout 20 nvidia-smi -L >"$out/nvidia-smi.txt" 2>&1 || ! grep -q '^GPU ' "$out/nvidia-smi.txt"; then
    why+=("no GPU: nvidia-smi -L: $(head -1 "$out/nvidia-smi.txt")")
  fi
  ((BASH_VERSINFO[0] > 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] >= 1))) || why+=("bash ${BASH_VERSION} < 5.1 (run_ddp.sh)")
  probe_torch "$out/preflight_torch.json" "$out/preflight.log"
  rc=$?
  torch_why=$("$PYTHON" -c '
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception:
    print("torch check did not finish (exit " + sys.argv[2] + ")"); sys.exit()
if "torch_error" in d: print("torch: " + d["torch_error"])
elif not d.get("cuda_available"): print("torch " + d["torch"] + " sees no GPU (torch.cuda.is_available() is False)")
' "$out/preflight_torch.json" "$rc" 2>&1)
  [[ -n $torch_why ]] && why+=("$torch_why")
  so_sha=$(sha256sum "$build/lib/libnccl-net-trim.so" 2>/dev/null | cut -c1-16)
  # The device's copy of the tree has no .git: pack-gpu.sh wrote the commit into BUILD_INFO.
  commit=$(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null ||
    sed -n 's/^commit //p' "$build/BUILD_INFO" 2>/dev/null | head -1)
  commit=${commit:-unknown}
  "$PYTHON" - "$out/preflight.json" "$out/preflight_torch.json" "$build" "$so_sha" "$commit" "$(nproc)" \
    "$congestion_why" "$ip_note" "${unset_env[*]:-}" "$budget" "$channels" "$max_bytes" "$socket_sweep" \
    "$sweep4_top" "$codec_threads" "$ddp_task" "$ddp_epochs" "$kill_after" "$quick" "$trim_p" "$trim_ranks" \
    "$kill_bound_s" "${why[@]}" <<'PY'
import json, sys
a = sys.argv[1:]
(f, tj, build, so, commit, cores, cong, ipn, unset, budget, ch, maxb, sweep, top, codec, task, epochs,
 kill_after, quick, trim_p, trim_ranks, kill_bound) = a[:22]
why = a[22:]
try:
    t = json.load(open(tj))
except Exception:
    t = {}
json.dump({"ok": not why, "why": why, "build": build, "plugin_sha256": so or None, "commit": commit,
           "cores": int(cores), "congestion_blocker": cong or None, "ip": ipn or None,
           "unset_env": unset.split(), **t,
           "settings": {"budget_s": int(budget), "channels": ch, "max_bytes": maxb, "socket_sweep": sweep,
                        "sweep4_top": int(top), "codec_threads": codec, "ddp_task": task,
                        "ddp_epochs": int(epochs), "kill_after": int(kill_after), "quick": quick == "1",
                        "trim_p": float(trim_p), "trim_ranks": int(trim_ranks),
                        "kill_bound_s": int(kill_bound)}},
          open(f, "w"))
PY
  if ((${#why[@]})); then
    record preflight "" rc=1 "seconds=$((SECONDS - t0))" limit=60 log=preflight.log
    {
      echo "check-gpu: cannot run here:"
      printf '  - %s\n' "${why[@]}"
      echo "  This check needs the GPU machine, torch with CUDA, and the plugin built here and carried"
      echo "  (scripts/pack-gpu.sh): see docs/GPU-MACHINE.md."
    } >&2
  else
    record preflight "" rc=0 "seconds=$((SECONDS - t0))" limit=60 log=preflight.log
  fi
fi
preflight_ok=1
((dry)) || [[ -z ${why[*]:-} ]] || preflight_ok=0

# ---------------------------------------------------------------- the steps
if ((preflight_ok)); then
  # 1. allreduce busbw, plugin (lossless) vs Socket at its defaults.
  if want allreduce_2r allreduce; then
    part allreduce_2r "" 150 ar2 -- "${bench_env[@]}" "${rd[@]}" --bench allreduce --modes lossless,socket \
      --ranks 2 --timeout-s 70 --out "$out/ar2" "${bench_args[@]}"
  fi
  if want allreduce_4r allreduce; then
    part allreduce_4r "" 200 ar4 -- "${bench_env[@]}" "${rd[@]}" --bench allreduce --modes lossless,socket \
      --ranks 4 --timeout-s 95 --out "$out/ar4" "${bench_args[@]}"
  fi
  # 2. DDP lossless: plugin and Socket end with the same parameter bits.
  if want ddp_lossless ddp; then
    for m in lossless socket; do
      part ddp_lossless "$m" 90 "ddp_$m" -- "${rd[@]}" --mode "$m" --ranks 2 --task "$ddp_task" \
        --epochs "$ddp_epochs" --timeout-s 80 --out "$out/ddp_$m" -- --deterministic
    done
  fi
  # 3. DDP with random trimming: replicas stay identical.
  if want ddp_random_trim random; then
    part ddp_random_trim "" 120 ddp_random -- "${rd[@]}" --mode random --trim-p "$trim_p" --ranks "$trim_ranks" \
      --task digits --epochs 3 --timeout-s 105 --out "$out/ddp_random"
  fi
  # 4. A rank lost mid-training: the survivor fails by itself, in bounded time.
  if want rank_killed kill; then
    part rank_killed "" 110 ddp_kill -- env NCCL_TRIM_TIMEOUT_MS=10000 "${rd[@]}" --mode lossless --ranks 2 \
      --wait-all --timeout-s 95 --task digits --epochs 50 --out "$out/ddp_kill" -- \
      --die-after-iters "$kill_after" --die-rank 1 --timeout-s 30
  fi
  # 5. The congestion head-to-head, one point, where namespaces can be made.
  if want congestion_quick congestion; then
    if [[ -n $congestion_why ]]; then
      skip_part congestion_quick "" "$congestion_why"
    else
      part congestion_quick "" 150 congestion -- "$here/congestion_bench.sh" --build "$build" --ranks 2 \
        --tasks digits --transports socket,trim --cross 60 --loss 0 --max-steps 80 --timeout-s 60 \
        --out "$out/congestion"
    fi
  fi
  # 6. The comm hook's GPU kernels: bit-identical to the host twin, then their speed vs a copy.
  if want kernels kernels; then
    part kernels tests 90 kernels -- "$build/bin/trim-tests" --gtest_filter="$kernel_tests"
    part kernels bench 120 kernels -- "$build/bin/trim-bench" cuda --json
    # What bounds each kernel (dram throughput vs shared-memory bank conflicts vs barrier stalls):
    # ncu's full set on the first fp32/bf16/fp16 forward and inverse launches, where ncu exists.
    if command -v ncu >/dev/null 2>&1 || ((dry)); then
      part kernels ncu 150 kernels -- ncu --set full -k regex:rotate_tiles -c 6 "$build/bin/trim-bench" cuda --quick --reps 1
    else
      skip_part kernels ncu "ncu not found"
    fi
  fi
  # 7. The hook's cost per iteration: char-LM, lossless, without and with it.
  if want hook_overhead hook; then
    for h in plain hook; do
      hflag=()
      [[ $h == hook ]] && hflag=(--hook)
      part hook_overhead "$h" 100 "hook_$h" -- "${rd[@]}" --mode lossless "${hflag[@]}" --ranks 2 --task charlm \
        --max-steps "$hook_steps" --timeout-s 90 --out "$out/hook_$h"
    done
  fi
  # 8. Accuracy under random trimming: Socket, per-hop rht, the hook; per seed.
  if want hook_accuracy hookacc; then
    for s in "${hook_seed_list[@]}"; do
      for t in socket rht hook; do
        case $t in
          socket) targs=(--mode socket) ;;
          rht) targs=(--mode random --trim-p "$hook_p") ;;
          hook) targs=(--mode random --trim-p "$hook_p" --hook) ;;
        esac
        part hook_accuracy "${t}_s$s" 150 "hookacc/${t}_s$s" -- "${rd[@]}" "${targs[@]}" --ranks 2 --task charlm \
          --epochs "$hook_epochs" --seed "$s" --timeout-s 140 --out "$out/hookacc/${t}_s$s"
      done
    done
  fi
  # 1, continued with the time left: Socket tuned, at 2 ranks, then its best at 4; codec threads.
  sweeps=1
  want socket_sweep_2r allreduce sweep || sweeps=0
  want socket_sweep_4r allreduce sweep || sweeps=0
  # One Socket config TxS (NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD): socket_part STEP TxS RANKS LIMIT DIR.
  socket_part() {
    local step=$1 c=$2 ranks=$3 limit=$4 dir=$5
    part "$step" "$c" "$limit" "$dir/$c" -- env NCCL_SOCKET_NTHREADS="${c%x*}" NCCL_NSOCKS_PERTHREAD="${c#*x}" \
      "${bench_env[@]}" "${rd[@]}" --bench allreduce --modes socket --ranks "$ranks" --timeout-s $((limit - 10)) \
      --out "$out/$dir/$c" "${bench_args[@]}"
  }
  if ((sweeps)); then
    for c in "${sweep_list[@]}"; do socket_part socket_sweep_2r "$c" 2 75 sweep2; done
    if ((sweep4_top > 0)); then
      if ((dry)); then
        top=("TxS")
        echo "# socket_sweep_4r: the $sweep4_top best of socket_sweep_2r (geometric mean busbw) at 4 ranks:"
      else
        mapfile -t top < <("$PYTHON" "$here/check_gpu_report.py" --best-socket "$out/sweep2" --top "$sweep4_top")
        ((${#top[@]})) || skip_part socket_sweep_4r "" "no 2-rank Socket config finished"
      fi
      for c in "${top[@]}"; do socket_part socket_sweep_4r "$c" 4 100 sweep4; done
    fi
  fi
  if want harness_scaling codec; then
    # No GPU needed: the transport's own speed and CPU cost over codec workers on these cores.
    part harness_scaling "" 120 harness_scaling -- "$PYTHON" "$here/bench_codec.py" --build "$build" \
      --threads 0,2,4,8 --rounds 1 --bytes 64M --iters 5 --out "$out/harness_scaling.jsonl"
  fi
  if want codec_threads_2r allreduce codec; then
    for c in "${codec_list[@]}"; do
      # "TeE": T codec threads and E progress engines per device (NCCL_TRIM_ENGINES); plain T: 1 engine.
      engines=1
      [[ $c == *e* ]] && engines=${c#*e}
      part codec_threads_2r "$c" 75 "codec2/$c" -- env NCCL_TRIM_CODEC_THREADS="${c%e*}" NCCL_TRIM_ENGINES="$engines" \
        "${bench_env[@]}" "${rd[@]}" \
        --bench allreduce --modes lossless --ranks 2 --timeout-s 65 --out "$out/codec2/$c" "${bench_args[@]}"
    done
  fi
fi
((dry)) && { echo "# then: $PYTHON scripts/check_gpu_report.py OUT (table + one JSON line)"; exit 0; }

# ---------------------------------------------------------------- the report
"$PYTHON" "$here/check_gpu_report.py" "$out" --elapsed-s "$((SECONDS - start))" | tee "$out/report.txt"
rc=${PIPESTATUS[0]}
if [[ -n $bundle ]]; then
  mkdir -p "$bundle"
  tail -1 "$out/report.txt" >"$bundle/check-gpu.json"
  cp "$out/report.txt" "$bundle/check-gpu.txt"
  tar -czf "$bundle/check-gpu-logs.tgz" -C "$(dirname "$out")" "$(basename "$out")" 2>/dev/null
  # The device tool brings back files of at most 16 MiB: without the NCCL logs if too big.
  if (($(stat -c %s "$bundle/check-gpu-logs.tgz") > 15 * 1024 * 1024)); then
    tar -czf "$bundle/check-gpu-logs.tgz" --exclude='rank*.log' -C "$(dirname "$out")" "$(basename "$out")"
  fi
fi
exit "$rc"
