#!/usr/bin/env bash
# check-gpu.sh: the one command for the GPU machine (docs/GPU-MACHINE.md). Real NCCL under real
# PyTorch through the plugin against NCCL's Socket transport, every rank on the one GPU with its
# own NCCL_HOSTID (so all traffic takes the network transport), over loopback; the comm hook's
# kernels; the congestion head-to-head through one netns/TUN bottleneck. A machine is lent for
# ~15 minutes, its start included, so the check comes in invocations, each bounded:
#
#   check-gpu.sh              preflight, then these steps in this order, each under its own limit
#                             (the limits, preflight and the reports sum to <= --budget-s [480]);
#                             --dry-run prints every limit and estimate
#     ddp_lossless        DDP (digits, --deterministic) through the plugin and through Socket:
#                         final parameter sha256 equal; goal: iteration p50 plugin <= 1.05x Socket
#     allreduce_2r        lossless busbw at 1/16/128 MiB, 2 ranks, plugin vs Socket's defaults
#                         (Ring, Simple, 2 channels for both); goal: >= 1.0x at every size
#     congestion_c60      widemlp at 60 % cross load through the bottleneck (2.5 Gbit/s, the
#                         preset's rate), Socket vs trim; needs ip, root, /dev/net/tun
#     kernels             trim-tests --gtest_filter='RotateCuda*' (bit-exact to the host twin; every
#                         test skipped is a failure), then trim-bench cuda: speed vs a device copy
#     hook_overhead       char-LM iteration p50 with the comm hook vs without, lossless
#     hook_accuracy       char-LM under random trimming p 0.5, seed 1: Socket, per-hop rht and the
#                         hook, the three at once (only their accuracy is compared)
#     rank_killed         rank 1 SIGKILLs itself mid-training: rank 0 must fail by itself, with the
#                         plugin's or NCCL's error, within 20 s of the kill
#   check-gpu.sh --continue   what is left, appended to the same results and bundle, in this
#                             order, within --budget-s [560]; again until the report says complete
#     allreduce_4r, ddp_random_trim (4 ranks); socket_sweep_2r, socket_sweep_4r (Socket tuned:
#     NTHREADS x NSOCKS_PERTHREAD, then the 2 best at 4 ranks); hook_accuracy_more (seeds 2, 3);
#     kernels_ncu (ncu --set full); codec_threads_2r, harness_scaling (codec threads);
#     cpu_uncongested (no GPU: widemlp on CPU tensors, the trim backend vs Gloo, 3 alternated
#     rounds, with cores to spare: goal iteration p50 <= 1.05x Gloo);
#     congestion_grid (congestion_bench.sh's preset, 28 runs; resumed where a budget stopped it)
#
# Results: every part runs under `timeout` with its own limit and is started only when its whole
# limit fits what is left of the budget (never cut short). A part that runs out of its limit is a
# FAILURE; a part never started (budget, a missing prerequisite, or the run was killed before it)
# is "not run" with the reason, never a pass. After every step the report and the bundle are
# written again, so a killed run still leaves them. Exit status (scripts/check_gpu_report.py):
# 0 every planned step passed and no goal was missed; 3 the same but a goal was missed; 4 no
# failure but a planned step was not run (--continue runs it); 1 a step failed; 2 preflight failed
# (no GPU, torch, build: said why, in seconds).
#
# Usage: scripts/check-gpu.sh [options] [-- extra congestion_bench.sh options]
#   --continue        run what earlier invocations left (their results: --out, else the bundle
#                     in --from), appending
#   --budget-s S      wall clock of this invocation [480; --continue 560]
#   --bundle DIR      after every step: DIR/check-gpu.json (the JSON line), check-gpu.txt (the
#                     table), check-gpu-logs.tgz (every result and log, < 15 MiB), and once a
#                     congestion step ran congestion.md, congestion.png, time_to_target.png
#   --from DIR        --continue: an earlier bundle (its check-gpu-logs.tgz) to continue from
#                     when --out holds no results [.gpu/check-gpu]
#   --out DIR         results and logs [build/check-gpu, outside the carried .gpu so that a warm
#                     machine keeps it for --continue; wiped first unless --continue]
#   --build DIR       bin/ and lib/ [.gpu/build when it holds the plugin, else build]
#   --only LIST       only these steps (names above; with --continue, again even if they ran);
#                     --skip LIST: all but these
#   --plan LIST       congestion_grid: congestion_bench.sh --plan LIST at the preset's rate
#   --iproute2 DIR    scripts/fetch-iproute2.sh's folder, used when `ip` is missing [.gpu/iproute2]
#   --dry-run         print each step's parts, limits and estimates, and the totals; run nothing
#   --no-gpu          test only: the congestion steps on CPU tensors (congestion_bench.sh --cpu,
#                     Gloo the baseline), for a smoke run of the flow where there is no GPU; the
#                     report's result is then "pass (no GPU step ran)", never "pass"
# Environment: PYTHON [python3] (with torch). NCCL_* variables that change what is measured
# (NCCL_TRIM_*, NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD, NCCL_ALGO, NCCL_PROTO,
# NCCL_*NCHANNELS, NCCL_NET_GDR_*, NCCL_BUFFSIZE, NCCL_NET, NCCL_NET_PLUGIN) are unset first.
# The commit is the one scripts/pack-gpu.sh wrote into BUILD/BUILD_INFO (the device's copy of the
# tree need not be a git checkout of it), checked against the plugin's sha256 there.
# shellcheck disable=SC2317  # (the steps, s_NAME, and the signal handler are called indirectly)
set -uo pipefail

# Internal: the commands separated by ::: at once; the first failure's status.
if [[ ${1:-} == --together ]]; then
  shift
  cmd=() pids=() rc=0
  for a in "$@" :::; do
    if [[ $a == ::: ]]; then "${cmd[@]}" & pids+=($!); cmd=(); sleep 0.5; else cmd+=("$a"); fi
  done
  for p in "${pids[@]}"; do wait "$p" || { s=$?; ((rc)) || rc=$s; }; done
  exit "$rc"
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
PYTHON=${PYTHON:-python3}
export PYTHON
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | grep -v shellcheck | sed 's/^# \{0,1\}//'; }
die() { echo "check-gpu: $*" >&2; exit 2; }
part1=(ddp_lossless allreduce_2r congestion_c60 kernels hook_overhead hook_accuracy rank_killed)
part2=(allreduce_4r ddp_random_trim socket_sweep_2r socket_sweep_4r hook_accuracy_more kernels_ncu
  codec_threads_2r harness_scaling cpu_uncongested congestion_grid)

cont=0 budget="" bundle="" from="" out="" build="" only="" skip="" plan="" iproute2="" dry=0 no_gpu=0 extra=()
while (($#)); do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --continue) cont=1; shift; continue ;;
    --dry-run) dry=1; shift; continue ;;
    --no-gpu) no_gpu=1; shift; continue ;;
    --) shift; extra=("$@"); break ;;
  esac
  (($# >= 2)) || die "$1 needs a value (see --help)"
  case $1 in
    --budget-s) budget=$2 ;;
    --bundle) bundle=$2 ;;
    --from) from=$2 ;;
    --out) out=$2 ;;
    --build) build=$2 ;;
    --only) only=$2 ;;
    --skip) skip=$2 ;;
    --plan) plan=$2 ;;
    --iproute2) iproute2=$2 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift 2
done
budget=${budget:-$( ((cont)) && echo 560 || echo 480)}
[[ $budget =~ ^[0-9]+$ ]] || die "--budget-s: a number of seconds"
for s in ${only//,/ } ${skip//,/ }; do
  [[ " ${part1[*]} ${part2[*]} " == *" $s "* ]] || die "--only/--skip: no step '$s' (${part1[*]} ${part2[*]})"
done

cd "$repo" || exit 2
if [[ -z $build ]]; then
  build=build
  [[ -f .gpu/build/lib/libnccl-net-trim.so ]] && build=.gpu/build
fi
abs() { [[ $1 = /* ]] && echo "$1" || echo "$repo/$1"; }
build=$(abs "$build")
out=$(abs "${out:-build/check-gpu}")
from=$(abs "${from:-.gpu/check-gpu}")
iproute2=$(abs "${iproute2:-.gpu/iproute2}")
[[ -z $bundle ]] || bundle=$(abs "$bundle")
steps=$out/steps.jsonl

# What is measured must not depend on the caller's environment.
unset_env=()
for v in $(compgen -e); do
  case $v in
    NCCL_TRIM_*|NCCL_SOCKET_NTHREADS|NCCL_NSOCKS_PERTHREAD|NCCL_ALGO|NCCL_PROTO|NCCL_MIN_NCHANNELS| \
    NCCL_MAX_NCHANNELS|NCCL_NET_GDR_LEVEL|NCCL_NET_GDR_READ|NCCL_BUFFSIZE|NCCL_NET|NCCL_NET_PLUGIN)
      unset_env+=("$v"); unset "$v" ;;
  esac
done
# `ip` for the congestion steps: the carried copy (scripts/fetch-iproute2.sh) when the machine has none.
ip_note=""
if ! command -v ip >/dev/null 2>&1 && [[ -x $iproute2/bin/ip ]]; then
  PATH=$iproute2/bin:$PATH ip_note="ip from $iproute2 (fetch-iproute2.sh)"
elif command -v ip >/dev/null 2>&1; then
  ip_note="ip at $(command -v ip)"
fi

# ---------------------------------------------------------------- the results so far
# steps.jsonl, one record a line: an invocation's plan; a part that ran (rc, seconds, limit); a
# part not run (not_run: why); a step complete (every part ran). The latest run of a part wins; a
# not_run after it (the grid's runs the budget left) marks it unfinished (--continue resumes it)
# but never hides its failure (check_gpu_report.py).
if ((!dry && !cont)); then
  if [[ -d $out && -n $(ls -A "$out" 2>/dev/null) && ! -f $steps ]]; then
    die "--out $out holds something else than an earlier check-gpu.sh run: not wiping it"
  fi
  rm -rf "$out"
elif ((!dry)) && [[ ! -f $steps && -f $from/check-gpu-logs.tgz ]]; then
  mkdir -p "$out" || die "cannot make $out"
  tar -xzf "$from/check-gpu-logs.tgz" --strip-components=1 -C "$out" || die "cannot unpack $from/check-gpu-logs.tgz into $out"
  echo "check-gpu: continuing from $from/check-gpu-logs.tgz" >&2
fi
((dry)) || { mkdir -p "$out" && touch "$steps"; } || die "cannot make $out"
state=$out  # --continue --dry-run here: what the bundle says is done
if ((dry && cont)) && [[ ! -f $steps && -f $from/check-gpu-logs.tgz ]]; then
  state=$(mktemp -d)
  trap 'rm -rf "$state"' EXIT
  tar -xzf "$from/check-gpu-logs.tgz" --strip-components=1 -C "$state" --wildcards '*/steps.jsonl' 2>/dev/null
fi
declare -A ran=() complete=()
invocation=1
while read -r kind key; do
  case $kind in
    ran) ran[$key]=1 ;;
    complete) complete[$key]=1 ;;
    invocation) invocation=$((key + 1)) ;;
  esac
done < <([[ -f $state/steps.jsonl ]] && "$PYTHON" "$here/check_gpu_report.py" --state "$state")

# The plan of this invocation.
wanted() { [[ -z $only || ",$only," == *",$1,"* ]] && [[ ",$skip," != *",$1,"* ]]; }
planned=()
if ((cont)); then candidates=("${part1[@]}" "${part2[@]}"); elif [[ -n $only ]]; then
  candidates=("${part1[@]}" "${part2[@]}"); else candidates=("${part1[@]}"); fi
for s in "${candidates[@]}"; do
  [[ -n ${complete[$s]:-} && ",$only," != *",$s,"* ]] && continue  # --only STEP runs it again
  ((no_gpu)) && [[ $s != congestion_* ]] && continue
  wanted "$s" && planned+=("$s")
done

# ---------------------------------------------------------------- recording and running parts
start=$SECONDS
deadline=$((start + budget))
reserve=10  # for the reports and bundles written after every step (about 1 s each)
record() {  # record STEP PART KEY=VALUE...: values are numbers, or strings without quotes
  local line="{\"invocation\":$invocation,\"step\":\"$1\",\"part\":\"$2\"" kv k v
  shift 2
  for kv in "$@"; do
    k=${kv%%=*} v=${kv#*=}
    if [[ $v =~ ^-?[0-9]+(\.[0-9]+)?$ ]]; then line+=",\"$k\":$v"; else line+=",\"$k\":\"${v//\"/\'}\""; fi
  done
  echo "$line}" >>"$steps"
}
step_not_run=0 dry_limit=0 dry_est=0
not_run() {  # not_run STEP PART WHY
  step_not_run=1
  if ((dry)); then echo "[$1${2:+ $2}] not run: $3"; return; fi
  record "$1" "$2" "not_run=$3"
  echo "check-gpu: $1${2:+ $2}: not run: $3" >&2
}

# reap DIR: end what a part left running: the processes whose command line names DIR (run_ddp.sh
# and congestion_bench.sh end their own; this is the backstop). TERM first, so that
# netns_bottleneck.sh takes down its switch and namespaces; KILL what is left 8 s later.
named() {
  local p pid args
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
    mapfile -d '' args 2>/dev/null <"$p/cmdline" || continue
    [[ "${args[*]}" == *"$1"* ]] && echo "$pid"
  done
}
reap() {
  local pids
  pids=$(named "$1")
  [[ -n $pids ]] || return 0
  echo "check-gpu: ending $(wc -w <<<"$pids") leftover process(es) of $1" >&2
  # shellcheck disable=SC2086  # pids: words
  kill -TERM $pids 2>/dev/null
  for _ in $(seq 40); do
    sleep 0.2
    pids=$(named "$1")
    [[ -n $pids ]] || return 0
  done
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null
}

# part STEP PART LIMIT ESTIMATE DIR -- COMMAND...: COMMAND under `timeout` (TERM at LIMIT - 5 s,
# KILL at LIMIT), its output in OUT/STEP[_PART].log, its record in steps.jsonl. DIR: its results.
current="" tpid=""
part() {
  local step=$1 name=$2 limit=$3 est=$4 dir=$5
  shift 6
  local log=$step${name:+_$name}.log
  if ((dry)); then
    if ((dry_limit + limit > budget - reserve)); then
      echo "[$step${name:+ $name}] limit ${limit}s, estimate ${est}s: beyond --budget-s $budget (check-gpu.sh --continue again)"
      step_not_run=1
      return 1
    fi
    printf '[%s%s] limit %ss, estimate %ss, log %s\n  %s\n' "$step" "${name:+ $name}" "$limit" "$est" "$log" \
      "$(printf '%q ' "$@")"
    dry_limit=$((dry_limit + limit)) dry_est=$((dry_est + est))
    return 0
  fi
  if [[ -n ${ran[$step/$name]:-} && ",$only," != *",$step,"* ]]; then
    echo "check-gpu: $step${name:+ $name}: ran before, kept" >&2
    return 0
  fi
  local left=$((deadline - SECONDS - reserve))
  if ((limit > left)); then
    not_run "$step" "$name" "time budget: ${left} s left of --budget-s $budget, its limit is ${limit} s"
    return 1
  fi
  echo "check-gpu: $step${name:+ $name} (limit ${limit} s, estimate ${est} s, log $log)" >&2
  local t0=$SECONDS rc=0
  current="$step|$name|$dir|$log|$t0|$limit"
  timeout --kill-after=5 $((limit - 5)) "$@" >"$out/$log" 2>&1 </dev/null &
  tpid=$!
  wait "$tpid" || rc=$?
  current=""
  ((rc == 124 || rc == 137)) && echo "check-gpu: timed out: its limit is ${limit} s (a failure)" >>"$out/$log"
  reap "$out/$dir"
  record "$step" "$name" "rc=$rc" "seconds=$((SECONDS - t0))" "limit=$limit" "estimate=$est" "dir=$dir" "log=$log"
  echo "check-gpu: $step${name:+ $name}: exit $rc after $((SECONDS - t0)) s" >&2
  return "$rc"
}
# Killed (the device tool's timeout, Ctrl-C): the part in progress is a failure; the bundle stays.
on_signal() {
  if [[ -n $current ]]; then
    local step name dir log t0 limit
    IFS='|' read -r step name dir log t0 limit <<<"$current"
    kill -TERM "$tpid" 2>/dev/null  # timeout passes it on, and KILLs 5 s later
    reap "$out/$dir"
    record "$step" "$name" rc=143 "seconds=$((SECONDS - t0))" "limit=$limit" "dir=$dir" "log=$log" "killed=check-gpu.sh was stopped"
  fi
  publish >/dev/null
  exit 143
}

# publish [STEP]: the report and the bundle as they stand (the congestion tables and plots again
# after a congestion step).
publish() {
  local rc=0 cong
  "$PYTHON" "$here/check_gpu_report.py" "$out" --elapsed-s "$((SECONDS - start))" >"$out/report.txt" 2>"$out/report.err" || rc=$?
  [[ -n $bundle ]] || return "$rc"
  mkdir -p "$bundle"
  tail -1 "$out/report.txt" >"$bundle/check-gpu.json"
  cp "$out/report.txt" "$bundle/check-gpu.txt"
  for cong in congestion congestion_c60; do  # the grid's tables and plots, else the one point's
    [[ -f $out/$cong/bench.json ]] || continue
    [[ ${1:-} == congestion_* || ! -f $bundle/congestion.md ]] || break
    "$PYTHON" "$here/plot_congestion.py" "$out/$cong" --meta "$out/preflight.json" 2>/dev/null | sed '$d' >"$bundle/congestion.md"
    cp "$out/$cong"/{congestion,time_to_target}.png "$bundle/" 2>/dev/null
    break
  done
  # The device tool brings back files of at most 16 MiB: without the NCCL rank logs, then without
  # the switch's stats, when the logs would be more.
  local tgz=$bundle/check-gpu-logs.tgz ex
  for ex in "" "--exclude=rank*.log" "--exclude=rank*.log --exclude=switch.jsonl"; do
    # shellcheck disable=SC2086  # ex: words
    tar -czf "$tgz" $ex -C "$(dirname "$out")" "$(basename "$out")" 2>/dev/null
    (($(stat -c %s "$tgz" 2>/dev/null || echo 0) <= 15 * 1024 * 1024)) && break
  done
  return "$rc"
}

# ---------------------------------------------------------------- preflight
((dry)) || trap on_signal TERM INT
rec_plan() {
  local s list=""
  for s in "${planned[@]}"; do list+="${list:+,}\"$s\""; done
  echo "{\"invocation\":$invocation,\"plan\":[$list],\"budget_s\":$budget,\"continue\":$cont,\"no_gpu\":$no_gpu,\"time\":${EPOCHREALTIME/,/.}}" >>"$steps"
}
# The congestion steps need ip (iproute2), root, /dev/net/tun (and, checked below, a namespace).
blocked_netns=""
if ! command -v ip >/dev/null 2>&1; then
  blocked_netns="iproute2 missing: no ip on PATH and no $iproute2/bin/ip; run scripts/pack-gpu.sh --iproute2 on the build machine and carry .gpu (docs/GPU-MACHINE.md)"
elif ! ip -V >/dev/null 2>&1; then
  blocked_netns="iproute2 broken: '$(command -v ip) -V' fails: $(ip -V 2>&1 | head -1)"
elif (($(id -u) != 0)); then
  blocked_netns="not root: network namespaces and TUN devices need root"
elif [[ ! -c /dev/net/tun ]]; then
  blocked_netns="no /dev/net/tun"
fi
why=()
commit=$(sed -n 's/^commit //p' "$build/BUILD_INFO" 2>/dev/null | head -1)
packed_sha=$(sed -n 's/^plugin_sha256 //p' "$build/BUILD_INFO" 2>/dev/null | head -1)
so_sha=$(sha256sum "$build/lib/libnccl-net-trim.so" 2>/dev/null | cut -c1-16)
if ((dry)); then
  echo "# check-gpu.sh --dry-run: invocation $invocation ($( ((cont)) && echo continue || echo fresh)), build $build," \
    "out $out, budget ${budget} s (nothing is run)"
  echo "# plan: ${planned[*]:-(nothing left)}"
  echo "[preflight] limit 25s, estimate 10s: the build ($build/lib/libnccl-net-trim.so, bin/trim-switch, BUILD_INFO:" \
    "commit ${commit:-none here}); nvidia-smi; $PYTHON: torch, CUDA, NCCL, sklearn; ip (${ip_note:-none here}), root, /dev/net/tun, a netns"
  echo "  # the congestion steps here: ${blocked_netns:-would run}"
  dry_limit=25 dry_est=10
else
  rec_plan
  t0=$SECONDS
  [[ -f $build/lib/libnccl-net-trim.so ]] ||
    why+=("no build: $build/lib/libnccl-net-trim.so missing (make here, or carry .gpu/build from scripts/pack-gpu.sh)")
  [[ -x $build/bin/trim-switch ]] || why+=("no $build/bin/trim-switch (make, or scripts/pack-gpu.sh)")
  gpu="" driver=""
  if ((no_gpu)); then
    echo "check-gpu: --no-gpu: GPU and CUDA not checked (a CPU smoke run of the congestion steps, not a result)" >&2
  elif ! command -v nvidia-smi >/dev/null 2>&1; then
    why+=("no GPU: nvidia-smi not found")
  elif ! timeout 20 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$out/nvidia-smi.txt" 2>&1 ||
      [[ ! -s $out/nvidia-smi.txt ]] || grep -qi 'fail\|error\|no devices' "$out/nvidia-smi.txt"; then
    why+=("no GPU: nvidia-smi: $(head -1 "$out/nvidia-smi.txt")")
  else
    IFS=, read -r gpu driver <"$out/nvidia-smi.txt"
  fi
  if [[ -z $blocked_netns ]]; then
    if ip netns add "ckgpu$$" 2>"$out/netns.err"; then
      ip netns del "ckgpu$$" 2>/dev/null
    else
      blocked_netns="cannot make a network namespace: $(head -1 "$out/netns.err")"
    fi
  fi
  [[ -z $packed_sha || $packed_sha == "$so_sha" ]] ||
    why+=("$build/BUILD_INFO names plugin sha256 $packed_sha, the plugin there is $so_sha: repack (scripts/pack-gpu.sh)")
  [[ -n $commit ]] || commit="unknown (no $build/BUILD_INFO: scripts/pack-gpu.sh writes it)"
  # torch, CUDA (a first tensor: the context, and warm caches for the steps), NCCL, scikit-learn,
  # then preflight.json with all of the above; out: every reason not to go on, a line each.
  rm -f "$out/preflight.json"
  shell_why=("${why[@]}")
  mapfile -t why < <(timeout 20 "$PYTHON" - "$out/preflight.json" "$gpu" "${driver# }" "$commit" "$so_sha" "$(nproc)" \
    "$ip_note" "$blocked_netns" "${unset_env[*]:-}" "$build" "$no_gpu" "$invocation" "${why[@]}" 2>"$out/preflight.log" <<'PY'
import json, platform, sys, time
f, gpu, driver, commit, so, cores, ipn, netns, unset, build, no_gpu, inv = sys.argv[1:13]
why, t, d = sys.argv[13:], time.time(), {"python": platform.python_version()}
try:
    import torch
    d.update(torch=torch.__version__, torch_cuda=torch.version.cuda, import_s=round(time.time() - t, 2))
    if torch.cuda.is_available():
        t = time.time()
        torch.zeros(1, device="cuda").sum().item()
        v = torch.cuda.nccl.version()
        d.update(cuda_init_s=round(time.time() - t, 2), nccl=".".join(map(str, v)) if isinstance(v, tuple) else str(v))
        gpu = gpu or torch.cuda.get_device_name(0)
    elif no_gpu != "1":
        why.append(f"torch {torch.__version__} sees no GPU (torch.cuda.is_available() is False)")
except Exception as e:  # no torch, or a broken one
    why.append(f"torch: {type(e).__name__}: {e}")
try:
    import sklearn
    d["sklearn"] = sklearn.__version__
except Exception:
    d["sklearn"] = None
json.dump({"ok": not why, "why": why, "invocation": int(inv), "gpu": gpu or None, "driver": driver or None, **d,
           "commit": commit, "plugin_sha256": so or None, "build": build, "cores": int(cores), "ip": ipn or None,
           "netns_blocker": netns or None, "unset_env": unset.split(), "no_gpu": no_gpu == "1"}, open(f, "w"), indent=1)
if why:
    print("\n".join(why))
PY
  )
  if [[ ! -s $out/preflight.json ]]; then  # torch hung or crashed: the reasons without it
    why=("${shell_why[@]}" "torch check failed or did not finish in 20 s (see preflight.log)")
    "$PYTHON" -c 'import json, sys; json.dump({"ok": False, "why": sys.argv[3:], "commit": sys.argv[2]}, open(sys.argv[1], "w"))' \
      "$out/preflight.json" "$commit" "${why[@]}"
  fi
  cp "$out/preflight.json" "$out/preflight_$invocation.json"
  record preflight "" "rc=$((${#why[@]} ? 1 : 0))" "seconds=$((SECONDS - t0))" limit=25 estimate=10 log=preflight.log
  if ((${#why[@]})); then
    {
      echo "check-gpu: cannot run here ($((SECONDS - start)) s):"
      printf '  - %s\n' "${why[@]}"
      echo "  This check needs the GPU machine, torch with CUDA, and the plugin built here and carried"
      echo "  (scripts/pack-gpu.sh): see docs/GPU-MACHINE.md."
    } >&2
    for s in "${planned[@]}"; do not_run "$s" "" "preflight failed" 2>/dev/null; done
    publish
    cat "$out/report.txt"
    exit 2
  fi
  echo "check-gpu: preflight ok ($((SECONDS - t0)) s): ${gpu:-no GPU}, commit $commit, ${ip_note:-no ip}" >&2
fi

# ---------------------------------------------------------------- the steps
sizes=1M,16M,128M
bench_env=(env NCCL_ALGO=Ring NCCL_PROTO=Simple NCCL_MIN_NCHANNELS=2 NCCL_MAX_NCHANNELS=2)
bench_args=(-- --sizes "$sizes" --warmup 2 --iters 5 --target-ms 100 --timeout-s 20)
rd=("$here/run_ddp.sh" --build "$build" --no-plots)
base=socket preset_rate=2.5 cb=("$here/congestion_bench.sh" --build "$build")
((no_gpu)) && base=gloo preset_rate=0.5 cb+=(--cpu)
# congestion_bench.sh's --dry-run, reduced to its settings and total (the limits are ours).
cb_dry() { "$@" --dry-run 2>&1 | grep -E '^# (congestion_bench.sh --dry-run|plan:)' | sed 's/^#/  #/'; }


# allreduce STEP PART MODES RANKS LIMIT EST DIR [VAR=VALUE...]: busbw at $sizes, one run per mode.
allreduce() {
  local step=$1 name=$2 modes=$3 ranks=$4 limit=$5 est=$6 dir=$7 runs
  shift 7
  IFS=, read -r -a runs <<<"$modes"
  part "$step" "$name" "$limit" "$est" "$dir" -- "${bench_env[@]}" "$@" "${rd[@]}" --bench allreduce --modes "$modes" \
    --ranks "$ranks" --timeout-s $(((limit - 10) / ${#runs[@]})) --out "$out/$dir" "${bench_args[@]}"
}
# hookacc STEP SEED: char-LM under random trimming p 0.5 for Socket, per-hop rht and the hook, at once.
hookacc() {
  local t targs cmds=()
  for t in socket rht hook; do
    case $t in
      socket) targs=(--mode socket) ;;
      rht) targs=(--mode random --trim-p 0.5) ;;
      hook) targs=(--mode random --trim-p 0.5 --hook) ;;
    esac
    ((${#cmds[@]})) && cmds+=(:::)
    cmds+=("${rd[@]}" "${targs[@]}" --ranks 2 --task charlm --epochs 3 --seed "$2" --timeout-s 70 --out "$out/hookacc/${t}_s$2")
  done
  part "$1" "s$2" 80 55 hookacc -- "$here/check-gpu.sh" --together "${cmds[@]}"
}
needs() {  # needs STEP FILE...: the step is not run when the build lacks one of them
  local f
  for f in "${@:2}"; do
    [[ -e $build/$f ]] || ((dry)) || { not_run "$1" "" "no $build/$f (scripts/pack-gpu.sh carries it)"; return 1; }
  done
}
netns_ok() {
  [[ -z $blocked_netns ]] && return 0
  ((dry)) && { echo "  # here: not run ($blocked_netns)"; return 0; }
  not_run "$1" "" "$blocked_netns"
  return 1
}

s_ddp_lossless() {
  local m
  for m in lossless socket; do
    part ddp_lossless "$m" 30 15 "ddp_$m" -- "${rd[@]}" --mode "$m" --ranks 2 --task digits --epochs 4 --timeout-s 22 \
      --out "$out/ddp_$m" -- --deterministic
  done
}
s_allreduce_2r() { allreduce allreduce_2r "" lossless,socket 2 45 25 ar2; }
s_congestion_c60() {
  netns_ok congestion_c60 || return
  local a=("${cb[@]}" --plan widemlp:c60 --transports "$base,trim" --rate-gbps "$preset_rate" --timeout-s 40
    --out "$out/congestion_c60" "${extra[@]}")
  ((dry)) && cb_dry "${a[@]}"
  part congestion_c60 "" 95 45 congestion_c60 -- "${a[@]}"
}
s_kernels() {
  needs kernels bin/trim-tests bin/trim-bench || return
  part kernels tests 20 5 kernels -- "$build/bin/trim-tests" --gtest_filter='RotateCuda*'
  part kernels bench 30 10 kernels -- "$build/bin/trim-bench" cuda --json
}
s_hook_overhead() {
  needs hook_overhead lib/libtrim-rht.so || return
  local h hook=()
  for h in plain hook; do
    [[ $h == hook ]] && hook=(--hook)
    part hook_overhead "$h" 35 20 "hook_$h" -- "${rd[@]}" --mode lossless "${hook[@]}" --ranks 2 --task charlm \
      --max-steps 40 --timeout-s 27 --out "$out/hook_$h"
  done
}
s_hook_accuracy() { needs hook_accuracy lib/libtrim-rht.so && hookacc hook_accuracy 1; }
s_rank_killed() {
  # The plugin declares a silent peer dead after 10 s; PyTorch's collective timeout (25 s) lies
  # beyond the report's bound (20 s), so a survivor only it ends is a failure.
  part rank_killed "" 45 20 ddp_kill -- env NCCL_TRIM_TIMEOUT_MS=10000 "${rd[@]}" --mode lossless --ranks 2 --wait-all \
    --timeout-s 38 --task digits --epochs 50 --out "$out/ddp_kill" -- --die-after-iters 15 --die-rank 1 --timeout-s 25
}
s_allreduce_4r() { allreduce allreduce_4r "" lossless,socket 4 60 30 ar4; }
s_ddp_random_trim() {
  part ddp_random_trim "" 50 20 ddp_random -- "${rd[@]}" --mode random --trim-p 0.5 --ranks 4 --task digits --epochs 3 \
    --timeout-s 42 --out "$out/ddp_random"
}
s_socket_sweep_2r() {  # NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD
  local c
  for c in 4x1 2x1 4x2 2x2 1x2 1x1; do
    allreduce socket_sweep_2r "$c" socket 2 30 13 "sweep2/$c" NCCL_SOCKET_NTHREADS="${c%x*}" NCCL_NSOCKS_PERTHREAD="${c#*x}"
  done
}
s_socket_sweep_4r() {  # the 2 best 2-rank configs (geometric-mean busbw) at 4 ranks
  local c top=(TxS)
  if ((!dry)); then
    mapfile -t top < <("$PYTHON" "$here/check_gpu_report.py" --best-socket "$out/sweep2" --top 2)
    ((${#top[@]})) || { not_run socket_sweep_4r "" "no 2-rank Socket config finished"; return; }
  fi
  for c in "${top[@]}"; do
    allreduce socket_sweep_4r "$c" socket 4 35 17 "sweep4/$c" NCCL_SOCKET_NTHREADS="${c%x*}" NCCL_NSOCKS_PERTHREAD="${c#*x}"
  done
}
s_hook_accuracy_more() {
  needs hook_accuracy_more lib/libtrim-rht.so || return
  hookacc hook_accuracy_more 2
  hookacc hook_accuracy_more 3
}
s_kernels_ncu() {  # what bounds the rotation: ncu's full set on its first 6 launches
  needs kernels_ncu bin/trim-bench || return
  command -v ncu >/dev/null 2>&1 || ((dry)) || { not_run kernels_ncu "" "ncu not found"; return; }
  part kernels_ncu "" 150 60 kernels -- ncu --set full -k regex:rotate_tiles -c 6 "$build/bin/trim-bench" cuda --quick --reps 1
}
s_codec_threads_2r() {  # TeE: T codec threads, E progress engines (NCCL_TRIM_ENGINES)
  local c e
  for c in 0 2 4 4e2; do
    e=1
    [[ $c == *e* ]] && e=${c#*e}
    allreduce codec_threads_2r "$c" lossless 2 30 13 "codec2/$c" NCCL_TRIM_CODEC_THREADS="${c%e*}" NCCL_TRIM_ENGINES="$e"
  done
}
s_harness_scaling() {  # no GPU: trim-harness over codec threads, CPU per GB
  part harness_scaling "" 120 50 harness_scaling -- "$PYTHON" "$here/bench_codec.py" --build "$build" \
    --threads 0,2,4,8 --rounds 1 --bytes 64M --iters 5 --out "$out/harness_scaling.jsonl"
}
s_cpu_uncongested() {  # no GPU: the trim backend vs Gloo on CPU tensors, where cores are to spare
  needs cpu_uncongested lib/libtrim-coll.so || return
  part cpu_uncongested "" 200 110 cpu_uncongested -- "$here/alternate_rounds.sh" --rounds 3 \
    --out "$out/cpu_uncongested" gloo= trim="--build $build --mode lossless"
}
s_congestion_grid() {  # congestion_bench.sh's preset (or --plan), within what the budget leaves
  netns_ok congestion_grid || return
  local d=$out/congestion a lim est rate
  a=("${cb[@]}" --out "$d" "${extra[@]}")
  [[ -n $plan ]] && a+=(--plan "$plan")
  # Resumed: at the rate the first invocation's calibration chose. --plan: at the preset's rate.
  rate=$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["new_rate_gbps"])' "$d/calibration.json" 2>/dev/null)
  if [[ -n $rate ]]; then a+=(--rate-gbps "$rate" --no-calibrate); elif [[ -n $plan ]]; then a+=(--rate-gbps "$preset_rate"); fi
  if [[ -d $d ]] && ((!dry)); then a+=(--resume); rm -f "$d/skipped.jsonl"; fi
  est=$("${a[@]}" --dry-run 2>/dev/null | sed -n 's/^# plan: .* estimated \([0-9]*\) s.*/\1/p')
  lim=$((deadline - SECONDS - reserve - 1))
  ((dry)) && lim=$((budget - dry_limit - reserve))
  ((lim > 590)) && lim=590
  ((lim >= 150)) || { not_run congestion_grid "" "time budget: ${lim} s left, it needs at least 150 s"; return; }
  a+=(--budget-s $((lim - 40)))
  ((dry)) && cb_dry "${a[@]}"
  # The runs the budget left: a not_run after the part's run (a failed run stays a failure).
  part congestion_grid "" "$lim" "${est:-0}" congestion -- "${a[@]}"
  ((dry)) || [[ ! -s $d/skipped.jsonl ]] ||
    not_run congestion_grid "" "$(wc -l <"$d/skipped.jsonl") run(s) left for lack of time: --continue resumes it"
}

for s in "${planned[@]}"; do
  step_not_run=0 l0=$dry_limit e0=$dry_est
  "s_$s"
  if ((dry)); then
    echo "= $s: limit $((dry_limit - l0))s, estimate $((dry_est - e0))s"
    continue
  fi
  ((step_not_run)) || record "$s" "" complete=1
  publish "$s" >/dev/null
done
if ((dry)); then
  echo "# total: limits $((dry_limit + reserve)) s (preflight, steps, ${reserve} s for the reports) of --budget-s $budget;" \
    "estimated $((dry_est + reserve)) s"
  echo "# after every step: $PYTHON scripts/check_gpu_report.py OUT (table + one JSON line), and the bundle"
  exit 0
fi
publish
rc=$?
cat "$out/report.txt"
exit "$rc"
