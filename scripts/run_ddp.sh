#!/usr/bin/env bash
# run_ddp.sh: PyTorch DDP training (scripts/ddp_train.py) or the all_reduce bandwidth benchmark
# (scripts/allreduce_bench.py) with N rank processes on one machine (one GPU is enough: every
# rank gets its own NCCL_HOSTID, so NCCL treats each as a node of its own and routes all traffic
# through the network transport), over our plugin, optionally through trim-switch.
#
# Usage: scripts/run_ddp.sh [options] [-- extra arguments for the Python script]
#
# Transport (--mode, default lossless):
#   lossless   our plugin (NCCL_NET=Trim), no switch: nothing is trimmed
#   random     our plugin through trim-switch --mode random: each trimmable packet trimmed with
#              probability --trim-p (port fast and unbounded, so nothing else happens there)
#   trim       our plugin through trim-switch --mode trim with cross traffic (--cross)
#   drop       the same switch tail-dropping instead of trimming
#   socket     NCCL's own Socket transport (NCCL_NET=Socket), no plugin: the baseline
#   --cpu      CPU tensors: alone, gloo without the plugin; with a plugin mode (any --mode, or the
#              trimacc sweep) the nccl_trim package's CPU backend "trim" carries DDP's traffic
#              through the plugin (ddp_train.py --backend trim; with --hook, gloo groups made
#              trim by the launcher's bootstrap, python -m nccl_trim._boot --trim-cpu)
#
# What runs (default: one training run):
#   --bench allreduce    allreduce_bench.py once per mode of --modes (default lossless,socket),
#                        then a side-by-side table
#   --bench congestion   scripts/congestion_bench.sh with the remaining options: socket (TCP),
#                        plugin drop, trim and trim16 through one netns/TUN bottleneck, cross
#                        load and random loss sweeps (see its --help; root needed)
#   --sweep NAME         a series of short runs, each in a directory of its own under --out:
#     accuracy   digits: lossless and socket baselines; random trimming at --trim-ps (default
#                0,0.01,0.1,0.5,0.75) for each of --schemes (default sign,sq,sd,rht); rht with
#                16-bit heads at 0.1,0.5,0.75; rht at 0.5 with NCCL_TRIM_PHASE=all
#     latency    trim vs drop switch with the same cross traffic (and lossless, no switch)
#     charlm     the transformer: lossless, socket, random rht at 0.1 and 0.5
#     trimacc    (--cpu; issue 25) accuracy under random trimming, on every machine: Gloo
#                (exact), per-hop rht, the hook (rotated), rht and the hook with 16-bit heads,
#                the hook with NCCL_TRIM_HEAD_SCALE=mse (the hook scales buckets by Adam's
#                second moments; hookmsenopc: with NCCL_TRIM_HOOK_PRECONDITION=off; hook2mse:
#                with 2-bit heads, NCCL_TRIM_HEAD_BITS=2), per-hop rht and the hook with error
#                feedback (NCCL_TRIM_ERROR_FEEDBACK=1), at each p of --trim-ps (default
#                here 0.5,0.75), each over --seeds (default 0,1,2); then a table of the mean
#                final accuracy per configuration against Gloo's
#     bench      = --bench allreduce
#   A sweep ends with scripts/plot_ddp.py on --out (PNGs if matplotlib is there, tables).
#
# Options (defaults in brackets):
#   --ranks N [2]  --task digits|charlm|widemlp [digits]  --epochs E  --batch-size B  --lr LR
#   --seed S [0]  --target-acc A  --max-steps K       passed to ddp_train.py (its defaults)
#   --seeds LIST [0,1,2]             the trimacc sweep's seeds
#   --scheme none|sign|sq|sd|rht [rht]  --head-bits 1|2|16 [1]  --phase reduce_scatter|all
#                                    NCCL_TRIM_SCHEME / _HEAD_BITS / _PHASE of the plugin
#   --trim-p P [0.1]                 random mode's trim probability
#   --hook                           plugin modes: each rank runs under the nccl_trim comm hook
#                                    (python -m nccl_trim._boot, from python/ and --build's lib/):
#                                    DDP rotates every gradient bucket on the GPU before NCCL sums
#                                    it, and the plugin packs it as scheme rotated
#   --rate-gbps G                    switch port rate [random 100, trim/drop 2]
#   --buffer-packets N               switch data queue in packets [random 0 = unbounded, trim/drop 8]
#   --buffer-bytes B [0]             switch data queue in bytes (0: no byte cap)
#   --prop-delay-us US               [random 1, trim/drop 200]
#   --cross SPEC                     cross traffic, repeatable [trim/drop: incast:8:0.1:all]
#   --trim-exact 0|1 [0]             trim mode: cut exact packets to a header (NDP) instead of dropping
#   --switch-seed N [7]  --switch-arg ARG (repeatable, appended to trim-switch's command line)
#   --out DIR                        run dir (one run) or results root (bench, sweep)
#                                    [build/ddp/<label> | build/ddp/bench | build/ddp/sweep_<name>]
#   --label NAME                     run name (default from mode, scheme, head bits, p)
#   --timeout-s S [600]              kill a run that takes longer
#   --wait-all                       when a rank fails, wait for the others to end by themselves
#                                    (until --timeout-s) instead of killing them: to see how the
#                                    survivors of a lost rank end (ddp_train.py --die-after-iters)
#   --build DIR [build]              where libnccl-net-trim.so and trim-switch are
#   --no-plots                       tables only at the end of a bench or sweep (no PNGs)
#   --dry-run                        print the switch and rank commands with their environment
#   --resume                         skip runs whose summary.json says ok (a sweep cut short by a
#                                    time limit goes on where it stopped)
# Environment: PYTHON [python3]; DDP_DIGITS_CSV: a copy of scikit-learn's digits.csv.gz, for a
# machine without scikit-learn. NCCL_* and NCCL_TRIM_* already set are passed on (the flags
# above win for the variables they set). NCCL_DEBUG defaults to INFO with INIT,NET, so that
# rank logs show which network NCCL used and the plugin's counters.
#
# The plugin gets host buffers (it advertises NCCL_PTR_HOST only; NCCL's kernel stages GPU data
# through pinned host memory, as for Socket): no NCCL_NET_GDR_* is set here.
#
# Per run dir: run.json (the launcher's settings, versions), rank<R>.jsonl (each rank's JSON
# lines), rank<R>.log (stderr: NCCL and plugin log), rank0.out (rank 0's stdout),
# rank<R>.exit (how the rank ended: {"rank","status","time"}, unix time; status 128+N for
# signal N; absent when the launcher killed it),
# switch.jsonl (trim-switch's stats lines), summary.json. The last stdout line of the whole
# invocation is one JSON summary. Everything started here runs in process groups of its own
# (setsid) and is killed by group on exit, error or Ctrl-C.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
PYTHON=${PYTHON:-python3}
# shellcheck source=scripts/switch_port.sh
. "$here/switch_port.sh"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "run_ddp: $*" >&2; exit 2; }

if ((BASH_VERSINFO[0] < 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] < 1))); then
  die "needs bash >= 5.1 (wait -n -p)"
fi

# ---------------------------------------------------------------- options
# The congestion bench has options of its own: hand everything after `--bench congestion` on.
if [[ ${1:-} == --bench && ${2:-} == congestion ]]; then exec "$here/congestion_bench.sh" "${@:3}"; fi
mode=lossless mode_set=0 cpu=0 bench="" sweep="" modes="lossless,socket"
ranks=2 task=digits epochs="" batch_size="" lr="" seed=0 target_acc="" max_steps=""
scheme=rht head_bits=1 phase=reduce_scatter trim_p=0.1
rate_gbps="" buffer_packets="" buffer_bytes=0 prop_us="" trim_exact=0 switch_seed=7
crosses=() switch_extra=() out="" label="" timeout_s=600 build=build dry_run=0 resume=0 wait_all=0 no_plots=0 hook=0
schemes="sign,sq,sd,rht" trim_ps="" seeds="0,1,2"
extra=()
while [[ $# -gt 0 ]]; do
  a=$1
  case "$a" in
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    --cpu) cpu=1; shift; continue ;;
    --dry-run) dry_run=1; shift; continue ;;
    --resume) resume=1; shift; continue ;;
    --wait-all) wait_all=1; shift; continue ;;
    --no-plots) no_plots=1; shift; continue ;;
    --hook) hook=1; shift; continue ;;
    --mode|--modes|--bench|--sweep|--ranks|--task|--epochs|--batch-size|--lr|--seed|--target-acc| \
    --max-steps|--scheme|--schemes|--head-bits|--phase|--trim-p|--trim-ps|--seeds|--rate-gbps| \
    --buffer-packets|--buffer-bytes|--prop-delay-us|--cross|--trim-exact|--switch-seed| \
    --switch-arg|--out|--label|--timeout-s|--build) ;;
    *) die "unknown option $a (see --help)" ;;
  esac
  [[ $# -ge 2 ]] || die "$a needs a value (see --help)"
  v=$2
  case "$a" in
    --mode) mode=$v mode_set=1 ;;
    --modes) modes=$v ;;
    --bench) bench=$v ;;
    --sweep) sweep=$v ;;
    --ranks) ranks=$v ;;
    --task) task=$v ;;
    --epochs) epochs=$v ;;
    --batch-size) batch_size=$v ;;
    --lr) lr=$v ;;
    --seed) seed=$v ;;
    --target-acc) target_acc=$v ;;
    --max-steps) max_steps=$v ;;
    --scheme) scheme=$v ;;
    --schemes) schemes=$v ;;
    --head-bits) head_bits=$v ;;
    --phase) phase=$v ;;
    --trim-p) trim_p=$v ;;
    --trim-ps) trim_ps=$v ;;
    --seeds) seeds=$v ;;
    --rate-gbps) rate_gbps=$v ;;
    --buffer-packets) buffer_packets=$v ;;
    --buffer-bytes) buffer_bytes=$v ;;
    --prop-delay-us) prop_us=$v ;;
    --cross) crosses+=("$v") ;;
    --trim-exact) trim_exact=$v ;;
    --switch-seed) switch_seed=$v ;;
    --switch-arg) switch_extra+=("$v") ;;
    --out) out=$v ;;
    --label) label=$v ;;
    --timeout-s) timeout_s=$v ;;
    --build) build=$v ;;
  esac
  shift 2
done

valid_mode() { [[ $1 =~ ^(lossless|random|trim|drop|socket)$ ]] || die "unknown mode '$1' (lossless|random|trim|drop|socket)"; }
valid_mode "$mode"
[[ $task =~ ^(digits|charlm|widemlp)$ ]] || die "unknown task '$task' (digits|charlm|widemlp)"
[[ $ranks =~ ^[1-9][0-9]*$ ]] || die "--ranks must be a positive integer"
[[ $scheme =~ ^(none|sign|sq|sd|rht)$ ]] || die "unknown scheme '$scheme' (none|sign|sq|sd|rht)"
[[ $head_bits =~ ^(1|2|16)$ ]] || die "--head-bits must be 1, 2 or 16"
[[ $phase =~ ^(reduce_scatter|all)$ ]] || die "--phase must be reduce_scatter or all"
[[ -z $bench || $bench == allreduce ]] || die "unknown benchmark '$bench' (allreduce)"
[[ -z $sweep || $sweep =~ ^(accuracy|latency|charlm|trimacc|bench)$ ]] || die "unknown sweep '$sweep' (accuracy|latency|charlm|trimacc|bench)"
[[ $sweep == trimacc && $cpu == 0 ]] && die "--sweep trimacc runs on CPU tensors: add --cpu"
[[ $cpu == 1 && ($mode == socket) ]] && die "--cpu: socket needs CUDA tensors (--cpu alone runs gloo)"
[[ $sweep == bench ]] && { bench=allreduce; sweep=""; }
[[ $build = /* ]] || build="$repo/$build"
plugin_so="$build/lib/libnccl-net-trim.so"
switch_bin="$build/bin/trim-switch"

# ---------------------------------------------------------------- process bookkeeping
groups=()  # process groups (setsid) started here: trim-switch, each rank
watchdog=""
cleanup() {
  local g
  for g in "${groups[@]}"; do
    kill -KILL -- "-$g" 2>/dev/null || true
  done
  [[ -n $watchdog ]] && kill "$watchdog" 2>/dev/null || true
  for g in "${groups[@]}"; do
    wait "$g" 2>/dev/null || true
  done
  groups=()
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM
forget() {  # forget a group that was waited for: its id may be reused, never kill it again
  local g keep=()
  for g in "${groups[@]}"; do [[ $g == "$1" ]] || keep+=("$g"); done
  groups=("${keep[@]}")
}

free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ---------------------------------------------------------------- versions
# Which GPU, driver, NCCL, torch and plugin build produced each number. The GPU name, torch and
# NCCL versions come from rank 0's own config line; here, what only the machine knows.
collect_versions() {
  local f=$1 gpu="" drv="" so_sha="" commit="" dirty=""
  if command -v nvidia-smi >/dev/null 2>&1; then
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
    drv=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
  fi
  [[ -f $plugin_so ]] && so_sha=$(sha256sum "$plugin_so" | cut -c1-16)
  if [[ -f $build/BUILD_INFO ]]; then
    # A packed build (scripts/pack-gpu.sh) names its own commit: the tree it runs in on the GPU
    # machine need not be a git checkout of it.
    commit=$(sed -n 's/^commit //p' "$build/BUILD_INFO")
    [[ $commit == *-dirty ]] && dirty=true || dirty=false
    commit=${commit%-dirty}
  elif git -C "$repo" rev-parse HEAD >/dev/null 2>&1; then
    commit=$(git -C "$repo" rev-parse --short=12 HEAD)
    [[ -z $(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null) ]] && dirty=false || dirty=true
  fi
  "$PYTHON" - "$f" "$gpu" "$drv" "$so_sha" "$commit" "$dirty" "$(uname -r)" <<'PY'
import json, sys
f, gpu, drv, so, commit, dirty, kernel = sys.argv[1:8]
json.dump({"gpu_smi": gpu or None, "driver": drv or None, "plugin_sha256": so or None,
           "git_commit": commit or None, "git_dirty": {"true": True, "false": False}.get(dirty),
           "kernel": kernel}, open(f, "w"))
PY
}

# ---------------------------------------------------------------- one run
# start_switch DIR SWMODE: trim-switch in a process group of its own, stats into DIR/switch.jsonl;
# sets sw_pid and sw_port (the port is read from its first line, as scripts/demo.sh does).
sw_pid="" sw_port=""
switch_cmd=()
make_switch_cmd() {
  local swmode=$1 rate=$rate_gbps bp=$buffer_packets prop=$prop_us
  local cr=("${crosses[@]}")
  if [[ $swmode == random ]]; then
    # Only the coin trims: a fast port with an unbounded queue never overflows.
    rate=${rate:-100} bp=${bp:-0} prop=${prop:-1}
  else
    rate=${rate:-2} bp=${bp:-8} prop=${prop:-200}
    [[ ${#cr[@]} -gt 0 ]] || cr=("incast:8:0.1:all")
  fi
  switch_cmd=("$switch_bin" --mode "$swmode" --rate-gbps "$rate" --buffer-packets "$bp"
    --buffer-bytes "$buffer_bytes" --prop-delay-us "$prop" --seed "$switch_seed" --stats-interval-ms 1000)
  [[ $swmode == random ]] && switch_cmd+=(--random-p "$run_p")
  [[ $swmode == trim ]] && switch_cmd+=(--trim-exact "$trim_exact")
  local c
  for c in "${cr[@]}"; do switch_cmd+=(--cross "$c"); done
  switch_cmd+=("${switch_extra[@]}")
}
start_switch() {
  local dir=$1 log="$1/switch.jsonl"
  rm -f "$log"
  setsid "${switch_cmd[@]}" >"$log" 2>"$dir/switch.err" &
  sw_pid=$!
  groups+=("$sw_pid")
  local rc=0
  sw_port=$(switch_port "$log" "$sw_pid") || rc=$?
  ((rc == 0)) && return 0
  if ((rc == 1)); then echo "run_ddp: trim-switch exited at start: $(cat "$dir/switch.err")" >&2
  else echo "run_ddp: trim-switch did not report its port" >&2; fi
  return 1
}
stop_switch() {
  [[ -n $sw_pid ]] || return 0
  kill -TERM "$sw_pid" 2>/dev/null || true  # TERM: it writes its "final" stats line
  wait "$sw_pid" 2>/dev/null || true
  forget "$sw_pid"
  sw_pid=""
}

# rank_env MODE R N PORT: the environment of rank R, one env(1) argument a line (the -u NAME
# pairs first: env takes options only before the first NAME=VALUE).
rank_env() {
  local m=$1 r=$2 n=$3 port=$4
  local unset=() e=(RANK="$r" WORLD_SIZE="$n" LOCAL_RANK="$r" LOCAL_WORLD_SIZE="$n" MASTER_ADDR=127.0.0.1
    MASTER_PORT="$port" PYTHONUNBUFFERED=1)
  if ((cpu)); then
    e+=(GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-lo}" CUDA_VISIBLE_DEVICES=)
    # The CPU backend takes the plugin from this build, not from an installed package.
    [[ $m == cpu ]] || e+=(NCCL_TRIM_LIB_DIR="$build/lib" PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}")
  fi
  if [[ $m == cpu ]]; then
    printf '%s\n' "${e[@]}"
    return
  fi
  # Set from our flags or not at all: an NCCL_TRIM_SWITCH left in the caller's environment
  # must not send a lossless or socket run through a switch.
  unset=(-u NCCL_TRIM_SWITCH)
  # A host id per rank: NCCL sees N nodes, so no P2P/SHM between ranks that share the GPU,
  # and every byte goes through the network transport under test.
  e+=(NCCL_HOSTID="ddp-rank$r" NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}"
    NCCL_DEBUG="${NCCL_DEBUG:-INFO}" NCCL_DEBUG_SUBSYS="${NCCL_DEBUG_SUBSYS:-INIT,NET}")
  if [[ $m == socket ]]; then
    e+=(NCCL_NET=Socket NCCL_NET_PLUGIN=none)
  else
    e+=(NCCL_NET_PLUGIN="$plugin_so" NCCL_NET=Trim NCCL_TRIM_IFNAME="${NCCL_TRIM_IFNAME:-lo}"
      NCCL_TRIM_SCHEME="$run_scheme" NCCL_TRIM_HEAD_BITS="$run_head_bits" NCCL_TRIM_PHASE="$run_phase")
    [[ $m == lossless ]] || e+=(NCCL_TRIM_SWITCH="127.0.0.1:$sw_port")
    # Inherited anyway; named so that the printed command and run.json show it.
    [[ -n ${NCCL_TRIM_HEAD_SCALE:-} ]] && e+=(NCCL_TRIM_HEAD_SCALE="$NCCL_TRIM_HEAD_SCALE")
    [[ -n ${NCCL_TRIM_ERROR_FEEDBACK:-} ]] && e+=(NCCL_TRIM_ERROR_FEEDBACK="$NCCL_TRIM_ERROR_FEEDBACK")
    [[ -n ${NCCL_TRIM_HOOK_PRECONDITION:-} ]] && e+=(NCCL_TRIM_HOOK_PRECONDITION="$NCCL_TRIM_HOOK_PRECONDITION")
    ((run_hook && !cpu)) && e+=(PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}" NCCL_TRIM_LIB_DIR="$build/lib")
  fi
  printf '%s\n' "${unset[@]}" "${e[@]}"
}

# run_one KIND LABEL MODE: KIND = train|bench. Uses run_scheme, run_head_bits, run_phase,
# run_p and run_dir. Returns the ranks' status; the summary goes to run_dir/summary.json.
run_scheme="" run_head_bits="" run_phase="" run_p="" run_dir="" run_hook=0
run_one() {
  local kind=$1 lbl=$2 m=$3 dir=$run_dir
  local script args=()
  if [[ $kind == bench ]]; then
    script="$here/../bench/workloads/allreduce_bench.py"
    args=(--label "$m")
  else
    script="$here/../bench/workloads/ddp_train.py"
    args=(--task "$task" --seed "$seed")
    [[ -n $epochs ]] && args+=(--epochs "$epochs")
    [[ -n $batch_size ]] && args+=(--batch-size "$batch_size")
    [[ -n $lr ]] && args+=(--lr "$lr")
    [[ -n $target_acc ]] && args+=(--target-acc "$target_acc")
    [[ -n $max_steps ]] && args+=(--max-steps "$max_steps")
    [[ -n ${DDP_DIGITS_CSV:-} && $task != charlm ]] && args+=(--digits-csv "$DDP_DIGITS_CSV")
  fi
  # On CPU: gloo without the plugin (mode cpu) or under the hook's bootstrap (which turns gloo
  # groups into trim groups), else the trim backend.
  if ((cpu)); then
    args+=(--device cpu --backend "$( [[ $m == cpu ]] || ((run_hook)) && echo gloo || echo trim)")
  fi
  args+=(--json-out "$dir/rank{rank}.jsonl" "${extra[@]}")
  # --hook: the script runs under nccl_trim's bootstrap, which installs the comm hook on DDP.
  local launch=("$script")
  if ((run_hook)) && [[ $m != cpu && $m != socket ]]; then
    launch=(-m nccl_trim._boot "$script")
    ((cpu)) && launch=(-m nccl_trim._boot --trim-cpu "$script")
  fi

  local swmode=""
  switch_cmd=()
  case $m in random|trim|drop) swmode=$m ;; esac
  [[ -n $swmode ]] && make_switch_cmd "$swmode"
  local port; port=$(free_port)

  if ((dry_run)); then
    echo "# run $lbl -> $dir"
    [[ -n $swmode ]] && { echo "# switch: ${switch_cmd[*]}"; sw_port='<port>'; }
    local r
    for ((r = 0; r < ranks; r++)); do
      echo "# rank $r: env $(rank_env "$m" "$r" "$ranks" "$port" | tr '\n' ' ')setsid $PYTHON ${launch[*]} ${args[*]}"
    done
    return 0
  fi
  if [[ $m != cpu && $m != socket ]]; then
    [[ -f $plugin_so ]] || { echo "run_ddp: no $plugin_so: run 'make -j' first (or pass --build)" >&2; return 1; }
  fi
  if [[ -n $swmode ]]; then
    [[ -x $switch_bin ]] || { echo "run_ddp: no $switch_bin: run 'make -j' first (or pass --build)" >&2; return 1; }
  fi
  mkdir -p "$dir"
  rm -f "$dir"/rank*.jsonl "$dir"/rank*.log "$dir"/rank*.out "$dir"/rank*.exit "$dir"/switch.* "$dir"/summary.json

  "$PYTHON" - "$dir/run.json" "$kind" "$lbl" "$m" "$ranks" "$task" "$run_scheme" "$run_head_bits" \
    "$run_phase" "$run_p" "$root/versions.json" "${switch_cmd[*]:-}" "${args[*]}" "${launch[*]}" <<'PY'
import json, sys
(f, kind, label, mode, ranks, task, scheme, hb, phase, p, versions, sw, args, launch) = sys.argv[1:15]
plugin = mode not in ("cpu", "socket")
run = {"kind": kind, "label": label, "mode": mode, "ranks": int(ranks),
       "task": task if kind == "train" else None,
       "scheme": scheme if plugin else None, "head_bits": int(hb) if plugin else None,
       "phase": phase if plugin else None, "trim_p": float(p) if mode == "random" else None,
       "switch_cmd": sw if mode in ("random", "trim", "drop") else None,
       "script_args": args, "hook": launch.startswith("-m nccl_trim._boot"),
       "versions": json.load(open(versions))}
json.dump(run, open(f, "w"), indent=1)
PY

  echo "run_ddp: $lbl ($kind, mode $m, $ranks ranks) -> $dir" >&2
  local t0=$SECONDS
  sw_pid=""
  if [[ -n $swmode ]]; then
    start_switch "$dir" || return 1
  fi
  local pids=() r
  declare -A rank_of=()
  for ((r = 0; r < ranks; r++)); do
    local envs=()
    mapfile -t envs < <(rank_env "$m" "$r" "$ranks" "$port")
    # setsid: each rank leads a process group of its own (a background job of a script is no
    # group leader, so setsid execs in place and $! is the rank = its group id).
    env "${envs[@]}" setsid "$PYTHON" "${launch[@]}" "${args[@]}" >"$dir/rank$r.out" 2>"$dir/rank$r.log" &
    pids+=("$!")
    groups+=("$!")
    rank_of[$!]=$r
  done
  # Wait for the ranks; the first one to fail, or the watchdog, ends the run (the others would
  # otherwise sit in a collective until its timeout); with --wait-all only the watchdog does.
  sleep "$timeout_s" &
  watchdog=$!
  local rc=0 running=("${pids[@]}") done_pid st p
  while ((${#running[@]} > 0)); do
    st=0
    wait -n -p done_pid "${running[@]}" "$watchdog" || st=$?
    if [[ $done_pid == "$watchdog" ]]; then
      echo "run_ddp: $lbl: timed out after ${timeout_s}s" >&2
      rc=124
      break
    fi
    forget "$done_pid"
    printf '{"rank":%s,"status":%s,"time":%s}\n' "${rank_of[$done_pid]}" "$st" "${EPOCHREALTIME/,/.}" \
      >"$dir/rank${rank_of[$done_pid]}.exit"
    local still=()
    for p in "${running[@]}"; do [[ $p == "$done_pid" ]] || still+=("$p"); done
    running=("${still[@]}")
    if ((st != 0)); then
      echo "run_ddp: $lbl: rank ${rank_of[$done_pid]} (pid $done_pid) failed with status $st" >&2
      ((rc == 0)) && rc=$st
      ((wait_all)) || break
    fi
  done
  kill "$watchdog" 2>/dev/null || true
  wait "$watchdog" 2>/dev/null || true
  watchdog=""
  if ((rc != 0)); then
    for p in "${running[@]}"; do kill -KILL -- "-$p" 2>/dev/null || true; done
    for p in "${running[@]}"; do wait "$p" 2>/dev/null || true; forget "$p"; done
    local f
    for f in "$dir"/rank*.log; do
      echo "--- tail of $f" >&2
      tail -5 "$f" >&2
    done
  fi
  stop_switch
  PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m bench ddp-report --summarize "$dir" --status "$rc" --wall-s "$((SECONDS - t0))" >/dev/null || ((rc)) || rc=1
  return "$rc"
}

# run LABEL MODE [SCHEME HEAD_BITS PHASE P]: one run in $root/LABEL (or --out for a single run).
failures=0
run() {
  local kind=$1 lbl=$2 m=$3
  run_scheme=${4:-$scheme} run_head_bits=${5:-$head_bits} run_phase=${6:-$phase} run_p=${7:-$trim_p}
  run_hook=${8:-$hook}
  run_dir=${single_dir:-$root/$lbl}
  if ((resume)) && grep -q '"status": "ok"' "$run_dir/summary.json" 2>/dev/null; then
    echo "run_ddp: $lbl: done before (--resume), skipped" >&2
    return 0
  fi
  if ! run_one "$kind" "$lbl" "$m"; then
    failures=$((failures + 1))
  fi
  # Progress of a bench or sweep: each run's summary on stderr as it ends.
  ((dry_run)) || [[ -n $single_dir ]] || cat "$run_dir/summary.json" 2>/dev/null >&2 || true
}

default_label() {  # default_label MODE
  local h=""
  ((hook)) && h=_hook
  case $1 in
    cpu|socket) echo "$1_$task" ;;
    lossless) echo "lossless_${scheme}_hb${head_bits}${h}_$task" ;;
    random) echo "random_${scheme}_hb${head_bits}_p${trim_p}${h}_$task" ;;
    *) echo "$1_${scheme}_hb${head_bits}${h}_$task" ;;
  esac
}

# ---------------------------------------------------------------- what to run
single_dir=""
if [[ -n $sweep ]]; then
  root=${out:-$repo/build/ddp/sweep_$sweep}
elif [[ -n $bench ]]; then
  root=${out:-$repo/build/ddp/bench}
else
  lbl=${label:-$(default_label "$( ((cpu && !mode_set)) && echo cpu || echo "$mode")")}
  root=${out:-$repo/build/ddp/$lbl}
  single_dir=$root
fi
mkdir -p "$root"
root=$(cd "$root" && pwd)
[[ -n $single_dir ]] && single_dir=$root
((dry_run)) || collect_versions "$root/versions.json"

IFS=, read -r -a scheme_list <<<"$schemes"
IFS=, read -r -a p_list <<<"${trim_ps:-$( [[ $sweep == trimacc ]] && echo 0.5,0.75 || echo 0,0.01,0.1,0.5,0.75)}"
IFS=, read -r -a seed_list <<<"$seeds"

if [[ -n $bench ]]; then
  if ((cpu)); then
    run bench cpu cpu
  else
    IFS=, read -r -a mode_list <<<"$modes"
    for m in "${mode_list[@]}"; do valid_mode "$m"; run bench "$m" "$m"; done
  fi
elif [[ -n $sweep ]]; then
  if ((cpu)) && [[ $sweep != trimacc ]]; then
    die "--sweep $sweep runs GPU experiments; on CPU: --sweep trimacc, single runs or --bench"
  fi
  case $sweep in
    accuracy)
      [[ $task == digits ]] || echo "run_ddp: accuracy sweep on task $task" >&2
      [[ -n $target_acc ]] || target_acc=0.95
      run train socket socket
      run train "lossless_rht" lossless rht 1 reduce_scatter 0
      for s in "${scheme_list[@]}"; do
        for p in "${p_list[@]}"; do
          run train "random_${s}_hb1_p$p" random "$s" 1 reduce_scatter "$p"
        done
      done
      for p in 0.1 0.5 0.75; do
        run train "random_rht_hb16_p$p" random rht 16 reduce_scatter "$p"
      done
      run train "random_rht_hb1_p0.5_phaseall" random rht 1 all 0.5
      ;;
    latency)
      run train "lossless_$scheme" lossless
      run train "trim_$scheme" trim
      run train "drop_$scheme" drop
      ;;
    charlm)
      task=charlm
      run train socket socket
      run train lossless_rht lossless rht 1 reduce_scatter 0
      run train random_rht_hb1_p0.1 random rht 1 reduce_scatter 0.1
      run train random_rht_hb1_p0.5 random rht 1 reduce_scatter 0.5
      ;;
    trimacc)
      for sd in "${seed_list[@]}"; do
        seed=$sd
        run train "gloo_s$sd" cpu
        for p in "${p_list[@]}"; do
          run train "rht_p${p}_s$sd" random rht 1 reduce_scatter "$p" 0
          run train "hook_p${p}_s$sd" random rht 1 reduce_scatter "$p" 1
          run train "rht16_p${p}_s$sd" random rht 16 reduce_scatter "$p" 0
          run train "hook16_p${p}_s$sd" random rht 16 reduce_scatter "$p" 1
          NCCL_TRIM_HEAD_SCALE=mse run train "hookmse_p${p}_s$sd" random rht 1 reduce_scatter "$p" 1
          NCCL_TRIM_HEAD_SCALE=mse NCCL_TRIM_HOOK_PRECONDITION=off run train "hookmsenopc_p${p}_s$sd" random rht 1 reduce_scatter "$p" 1
          NCCL_TRIM_HEAD_SCALE=mse run train "hook2mse_p${p}_s$sd" random rht 2 reduce_scatter "$p" 1
          NCCL_TRIM_ERROR_FEEDBACK=1 run train "rhtef_p${p}_s$sd" random rht 1 reduce_scatter "$p" 0
          NCCL_TRIM_ERROR_FEEDBACK=1 run train "hookef_p${p}_s$sd" random rht 1 reduce_scatter "$p" 1
        done
      done
      ;;
  esac
else
  if ((cpu && !mode_set)); then
    run train "$lbl" cpu
  else
    run train "$lbl" "$mode"
  fi
fi
((dry_run)) && exit 0

# The closing line: one run's summary, or the tables and a short line per run of a bench/sweep.
if [[ -n $single_dir ]]; then
  cat "$single_dir/summary.json"
else
  plot_args=()
  ((no_plots)) || ! "$PYTHON" -c 'import matplotlib' 2>/dev/null && plot_args+=(--no-plots)
  # (plot_ddp.py exits 1 when a run failed too: those are already counted)
  PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m bench ddp-report "$root" "${plot_args[@]}" --summary-line || ((failures)) || failures=1
fi
((failures == 0)) || { echo "run_ddp: $failures run(s) failed" >&2; exit 1; }
