#!/usr/bin/env bash
# congestion_bench.sh (also: scripts/run_ddp.sh --bench congestion): the congestion head-to-head
# (issue 20). PyTorch DDP training (scripts/ddp_train.py) through ONE emulated bottleneck that
# NCCL's Socket transport (TCP) and our plugin's UDP cross by the same rule:
# scripts/netns_bottleneck.sh, one network namespace per rank, trim-switch as their IPv4 router
# over TUN devices (docs/ARCHITECTURE.md, "One bottleneck for TCP and UDP"). Every run of a point
# gets the same port (rate, buffer, propagation delay), the same cross traffic, the same random
# loss and the same switch seed; only the transport changes:
#   socket   NCCL_NET=Socket (TCP), no plugin; the switch tail-drops (--mode drop)
#   gloo     (--cpu) torch's Gloo backend (TCP) on CPU tensors; the switch tail-drops
#   hook     the plugin trimming, gradients rotated once by the nccl_trim comm hook (wire
#            scheme rotated): the launcher's worker bootstrap (python -m nccl_trim._boot, with
#            --trim-cpu under --cpu) around the unmodified script
#   drop     our plugin (rht), the switch tail-drops
#   trim     our plugin (rht, 1-bit heads), the switch trims (exact packets cut to headers)
#   trim16   the same with 16-bit heads (NCCL_TRIM_HEAD_BITS=16)
# Needs a GPU machine with torch + NCCL, root, /dev/net/tun and iproute2; one GPU is enough
# (every rank gets its own NCCL_HOSTID, so NCCL puts all traffic on the network); --cpu needs no
# GPU. On the GPU machine scripts/check-gpu.sh runs it (steps congestion_c60 and congestion_grid).
#
# Tasks (why two): digits, the CNN, moves 1.1 MB of gradient a step, so the GPU and Python set
# most of its iteration time; widemlp (ddp_train.py --task widemlp, 64-1664-1664-10 on the same
# images) moves 11.6 MB for a few ms of GPU work, so the network sets it.
#   widemlp  60 steps (its defaults: 128 per rank, 12 epochs of 5 steps at 2 ranks), target 0.95
#            (reached after 35-40 steps in CPU runs), --measure-compute 10
#   digits   --max-steps 160 --eval-every 10, target 0.95 (reached after ~95 steps in CPU runs)
#   charlm   its defaults (3 epochs), target 0.45; in no preset
# Every run adds --deterministic (socket and drop, both exact, must then end with the same
# parameter bits: a check that they moved the same sums).
#
# Presets (used when none of --plan, --tasks, --cross, --loss is given), all four transports at
# every point. The port is the same with or without a preset: 2.5 Gbit/s (--cpu: 0.5), a 128 KiB
# buffer, 20 us propagation, seed 7, cross traffic in line-rate bursts, N % of every 10 ms:
#   default  widemlp at c0 c60 c90 l1, digits at c60, widemlp at c30 l0.1   (28 runs)
#            estimated 548 s (~9.1 min): one check-gpu.sh --continue call
#   --quick  widemlp at c0 c60 l1, digits at c60                            (16 runs)
#            estimated 252 s (~4.2 min): within ~302 s (6 minutes with room for a slow start-up)
#   --cpu    (issue 25, every machine) PyTorch on CPU tensors, the baseline Gloo (TCP):
#            widemlp at c0 c60 c30 c90 l1 l0.1, digits at c60 (28 runs), rate 0.5 Gbit/s, no
#            calibration; transports gloo,drop,trim,hook
# (cN: cross traffic N % of the port rate, no loss; lN: N % random loss, no cross traffic.)
# The order is the priority: the uncongested point first (the reference, and the calibration),
# the goal's 60 % next; a point cut by --budget-s loses its transports together.
#
# Estimate per run (printed by --dry-run; it only decides what fits the budget):
#   startup + steps x (compute + comm) x 1.05 (evaluations), with startup = --startup-s [10]
#   (torch import, CUDA, NCCL init, namespaces: 8-10 s per launch, estimated, not measured) and
#   comm = grad_bytes x 8 / (rate x 0.7) / (1 - cross) x (1 + 0.5 x loss%); 0.7 is the TCP goodput
#   share seen through this port (256 KiB, 2-2.5 Gbit/s, iperf3 on the build VM). compute is
#   assumed (widemlp 5 ms, digits 8 ms, charlm 15 ms) until the calibration measures it; trim
#   is assumed no faster than socket, so where trimming helps the estimate is an upper bound.
#   At 2.5 Gbit/s widemlp's uncongested comm is ~53 ms a step: ~90 % of the iteration.
#
# Calibration (--calibrate; on in the presets): the rate must make communication at least half
# of the uncongested iteration. The first run (widemlp, socket, c0) also times forward+backward
# without gradient sync on both ranks at once (ddp_train.py --measure-compute: the GPU's part);
# comm share = 1 - compute / iteration p50. At >= 0.5 the rate stays; below, it becomes
# rate x comm / (1.5 x compute) (comm then ~1.5 x compute), that run moves to DIR/calibration_run
# and is redone at the new rate with all the others. Either way DIR/calibration.json holds the
# numbers (and the goodput the port gave: grad_bytes x 8 / comm), and later estimates use the
# measured compute time. (Why not a wide-open run: NCCL Socket on loopback moves ~1.8 GB/s, so
# even without a bottleneck 11.6 MB costs ~6 ms of network; no_sync leaves the GPU alone.)
# Every widemlp run measures its compute time the same way, so each point reports its share.
#
# usage: scripts/congestion_bench.sh [options] [-- extra ddp_train.py arguments]
#   --quick                     the short preset (above)
#   --plan LIST                 TASK:POINT,... in run order, e.g. widemlp:c60,digits:l1
#   --tasks LIST --cross LIST --loss LIST   instead of a plan: every task at every cross load
#                               (no loss), then every loss (no cross load); missing ones from
#                               [widemlp,digits] [0,60,90,30] [1,0.1]
#   --transports LIST [socket,drop,trim,trim16; --cpu: gloo,drop,trim,hook]   (in this order
#                               within every point)
#   --cpu                       CPU tensors: gloo instead of socket, drop/trim/trim16/hook through
#                               the nccl_trim package's CPU backend "trim" (ddp_train.py --backend
#                               trim); its own preset (above)
#   --cross-period-ms P [10]    cross traffic in line-rate bursts, PCT % of every P ms (0: constant)
#   --ranks N [2]  --rate-gbps G [2.5; --cpu 0.5]  --buffer-bytes B [131072]  --prop-delay-us US [20]
#   --seed N [7]   the switch's seed (cross phases, loss)
#   --target-acc-digits A [0.95]  --target-acc-widemlp A [0.95]  --target-acc-charlm A [0.45]
#   --epochs E  --max-steps K   passed to ddp_train.py for every task (else the per-task ones)
#   --calibrate / --no-calibrate   (default: on for the presets, off otherwise)
#   --budget-s S                wall-clock budget of the whole sweep (0: none) [0]
#   --startup-s S [10]          the estimate's start-up cost per run
#   --out DIR [build/congestion]  --build DIR [build]  --timeout-s S [1800 per run]
#   --resume                    keep runs whose summary.json says ok (else DIR's runs are wiped)
#   --dry-run                   print every run's switch and rank commands (with environment),
#                               its estimate and limit, and the plan's total; sets nothing up
#                               (netns_bottleneck.sh --print-only: no root, GPU or build needed)
# Output: per run DIR/<task>_<transport>_c<cross>_l<loss>/ with run.json, rank<R>.{jsonl,out,
# log,tcp}, switch.jsonl, summary.json (plot_ddp.py --summarize plus the bottleneck's view);
# DIR/bench.json (settings, plan, estimates), DIR/skipped.jsonl, DIR/calibration.json; then
# scripts/plot_congestion.py DIR: a markdown table, the goal's verdict (trim vs socket at 60 %
# cross), DIR/congestion.png and DIR/time_to_target.png (when matplotlib is there) and, as the
# last stdout line, one JSON line with every run. Exit status: 0 every run that started was ok,
# 1 one failed, 2 bad options.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
PYTHON=${PYTHON:-python3}
TRAIN_PYTHON=${TRAIN_PYTHON:-$PYTHON}  # the ranks' interpreter (a venv with torch), if not PYTHON

# Internal: one rank's wrapper, run inside its namespace by netns_bottleneck.sh. Keeps the
# rank's stdout/stderr and the namespace's TCP retransmissions (RetransSegs of
# /proc/net/snmp, which is per network namespace) before and after.
if [[ ${1:-} == --rank-wrapper ]]; then
  prefix=$2; shift 3  # --rank-wrapper PREFIX --
  retrans() { awk '/^Tcp:/ { if (!h) { for (i = 1; i <= NF; i++) c[$i] = i; h = 1 } else print $c["RetransSegs"] }' /proc/net/snmp; }
  before=$(retrans)
  rc=0
  "$@" >"$prefix.out" 2>"$prefix.log" || rc=$?
  echo "{\"tcp_retrans_segs\":$(( $(retrans) - before ))}" >"$prefix.tcp"
  exit "$rc"
fi

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "congestion_bench: $*" >&2; exit 2; }

ranks=2 transports="" cpu=0 tasks="" crosses="" losses="" plan="" quick=0
rate="" buffer="" period_ms="" prop=20 seed=7 epochs="" max_steps="" calibrate="" budget=0 startup=10
declare -A target=([digits]=0.95 [widemlp]=0.95 [charlm]=0.45)
declare -A compute_ms=([digits]=8 [widemlp]=5 [charlm]=15)  # assumed until measured
out="" build=build timeout_s=1800 resume=0 dry=0 extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --dry-run) dry=1; shift; continue ;;
    --resume) resume=1; shift; continue ;;
    --quick) quick=1; shift; continue ;;
    --cpu) cpu=1; shift; continue ;;
    --calibrate) calibrate=1; shift; continue ;;
    --no-calibrate) calibrate=0; shift; continue ;;
    --) shift; extra=("$@"); break ;;
  esac
  [[ $# -ge 2 ]] || die "$1 needs a value (see --help)"
  case "$1" in
    --ranks) ranks=$2 ;;
    --plan) plan=$2 ;;
    --tasks) tasks=$2 ;;
    --transports) transports=$2 ;;
    --cross) crosses=$2 ;;
    --loss) losses=$2 ;;
    --rate-gbps) rate=$2 ;;
    --buffer-bytes) buffer=$2 ;;
    --cross-period-ms) period_ms=$2 ;;
    --prop-delay-us) prop=$2 ;;
    --seed) seed=$2 ;;
    --target-acc-digits) target[digits]=$2 ;;
    --target-acc-widemlp) target[widemlp]=$2 ;;
    --target-acc-charlm) target[charlm]=$2 ;;
    --epochs) epochs=$2 ;;
    --max-steps) max_steps=$2 ;;
    --budget-s) budget=$2 ;;
    --startup-s) startup=$2 ;;
    --out) out=$2 ;;
    --build) build=$2 ;;
    --timeout-s) timeout_s=$2 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift 2
done
[[ $build = /* ]] || build="$repo/$build"
out=${out:-$build/congestion}
[[ $out = /* ]] || out="$PWD/$out"
plugin_so="$build/lib/libnccl-net-trim.so"
num='^[0-9]+(\.[0-9]+)?$'
[[ ${rate:-1} =~ $num && ${buffer:-0} =~ ^[0-9]+$ && ${period_ms:-0} =~ ^[0-9]+$ && $prop =~ $num && $seed =~ ^[0-9]+$ ]] ||
  die "--rate-gbps, --buffer-bytes, --cross-period-ms, --prop-delay-us, --seed: numbers"
[[ $budget =~ ^[0-9]+$ && $startup =~ $num && $timeout_s =~ ^[0-9]+$ && $ranks =~ ^[0-9]+$ ]] ||
  die "--budget-s, --startup-s, --timeout-s, --ranks: numbers"

# The plan: TASK:POINT items in run order.
preset=""
if [[ -z $plan && -z $tasks && -z $crosses && -z $losses ]] && ((cpu)); then
  ((quick)) && die "--quick is a GPU preset: with --cpu use --plan"
  # The CPU preset (issue 25): a shallow buffer (128 KiB, ~2 ms at the rate) and cross traffic
  # in line-rate bursts, as another tenant's collectives arrive; widemlp at every point first,
  # then digits at the goal's point.
  preset=cpu plan=widemlp:c0,widemlp:c60,widemlp:c30,widemlp:c90,widemlp:l1,widemlp:l0.1,digits:c60
  calibrate=${calibrate:-0}
elif [[ -z $plan && -z $tasks && -z $crosses && -z $losses ]]; then
  if ((quick)); then
    preset=quick plan=widemlp:c0,widemlp:c60,widemlp:l1,digits:c60
  else
    preset=default plan=widemlp:c0,widemlp:c60,widemlp:c90,widemlp:l1,digits:c60,widemlp:c30,widemlp:l0.1
  fi
  calibrate=${calibrate:-1}
elif [[ -z $plan ]]; then
  ((quick)) && die "--quick is a preset: not with --tasks/--cross/--loss (use --plan)"
  items=()
  IFS=, read -r -a tl <<<"${tasks:-widemlp,digits}"
  IFS=, read -r -a cl <<<"${crosses:-0,60,90,30}"
  IFS=, read -r -a ll <<<"${losses:-1,0.1}"
  for t in "${tl[@]}"; do
    for c in "${cl[@]}"; do items+=("$t:c$c"); done
    for l in "${ll[@]}"; do [[ $l == 0 ]] || items+=("$t:l$l"); done
  done
  plan=$(IFS=,; echo "${items[*]}")
else
  ((quick)) && die "--quick is a preset: not with --plan"
fi
# The port is the preset's whatever the plan (a --plan of one point measures that point of the
# preset): 2.5 Gbit/s on a GPU, 0.5 on CPU, a 128 KiB buffer and line-rate bursts of cross traffic
# (docs/RESULTS.md, "Training through one bottleneck": constant cross traffic or a deep buffer
# leave TCP nothing to recover from, and the transports tie).
calibrate=${calibrate:-0} rate=${rate:-$( ((cpu)) && echo 0.5 || echo 2.5)} buffer=${buffer:-131072} period_ms=${period_ms:-10}
base=socket
((cpu)) && base=gloo
transports=${transports:-$( ((cpu)) && echo gloo,drop,trim,hook || echo socket,drop,trim,trim16)}
IFS=, read -r -a plan_list <<<"$plan"
IFS=, read -r -a transport_list <<<"$transports"
for t in "${transport_list[@]}"; do
  [[ $t =~ ^(socket|gloo|drop|trim|trim16|hook)$ ]] || die "unknown transport $t (socket gloo drop trim trim16 hook)"
  [[ $t == socket && $cpu == 1 ]] && die "--cpu: no socket (NCCL's transport needs CUDA tensors); the CPU baseline is gloo"
  [[ $t == gloo && $cpu == 0 ]] && die "transport gloo: only with --cpu"
done
for it in "${plan_list[@]}"; do
  [[ $it =~ ^(digits|widemlp|charlm):(c|l)[0-9]+(\.[0-9]+)?$ ]] || die "plan item '$it': TASK:cN or TASK:lN (tasks digits, widemlp, charlm)"
done
if ((calibrate)); then
  [[ ${plan_list[0]} =~ :c0$ && ${transport_list[0]} == "$base" ]] ||
    die "--calibrate: the plan must start with a cross-0 point and the transports with $base (it is that run)"
fi
((dry)) || [[ -f $plugin_so ]] || die "no $plugin_so: run 'make -j2 all' first (or pass --build)"

# Per-task ddp_train.py arguments of this bench (before the caller's extra ones).
task_args() {  # task_args TASK -> TARGS
  TARGS=(--task "$1" --seed 0 --deterministic --target-acc "${target[$1]}")
  [[ -n $epochs ]] && TARGS+=(--epochs "$epochs")
  [[ -n $max_steps ]] && TARGS+=(--max-steps "$max_steps")
  case $1 in
    digits)
      [[ -z $epochs && -z $max_steps ]] && TARGS+=(--max-steps 160)
      TARGS+=(--eval-every 10) ;;
    widemlp) TARGS+=(--measure-compute 10) ;;
  esac
  [[ -n ${DDP_DIGITS_CSV:-} && $1 != charlm ]] && TARGS+=(--digits-csv "$DDP_DIGITS_CSV")
  TARGS+=("${extra[@]}")
}

# Sizes of each task (ddp_train.py --describe: computed, no torch): grad bytes and steps.
declare -A grad_bytes steps
for it in "${plan_list[@]}"; do
  t=${it%%:*}
  [[ -n ${steps[$t]:-} ]] && continue
  task_args "$t"
  d=$(WORLD_SIZE=$ranks "$PYTHON" "$here/ddp_train.py" "${TARGS[@]}" --describe) || die "ddp_train.py --describe failed for $t"
  read -r grad_bytes[$t] steps[$t] < <("$PYTHON" -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["grad_bytes"], d["steps"])' "$d")
done

# estimate TASK CROSS LOSS -> seconds (see the usage text)
estimate() {
  awk -v s="$startup" -v n="${steps[$1]}" -v cms="${compute_ms[$1]}" -v gb="${grad_bytes[$1]}" -v r="$rate" \
    -v c="$2" -v l="$3" 'BEGIN { comm = gb * 8 / (r * 1e9 * 0.7) * 1000 / (1 - c / 100) * (1 + 0.5 * l);
      printf "%d", s + n * (cms + comm) / 1000 * 1.05 + 0.999 }'
}
point_of() { local p=${1#*:}; if [[ $p == c* ]]; then echo "${p#c} 0"; else echo "0 ${p#l}"; fi; }
plan_total() {  # the whole plan's estimate, seconds
  local it c l tot=0 e
  for it in "${plan_list[@]}"; do
    read -r c l < <(point_of "$it")
    e=$(estimate "${it%%:*}" "$c" "$l")
    tot=$((tot + e * ${#transport_list[@]}))
  done
  echo "$tot"
}
run_limit() {  # run_limit ESTIMATE LEFT -> this run's wall-clock limit
  local lim=$((3 * $1))
  ((lim < 60)) && lim=60
  ((lim > timeout_s)) && lim=$timeout_s
  ((budget > 0 && lim > $2)) && lim=$2
  echo "$lim"
}

# rank_cmd TASK TRANSPORT DIR LIMIT: ddp_train.py with its environment, {rank} left for
# netns_bottleneck.sh to fill in; the command runs inside rank {rank}'s namespace.
rank_cmd() {
  local task=$1 tr=$2 dir=$3 limit=$4
  cmd=("$here/$(basename "$0")" --rank-wrapper "$dir/rank{rank}" -- env RANK={rank} WORLD_SIZE="$ranks" LOCAL_RANK={rank}
       LOCAL_WORLD_SIZE="$ranks" MASTER_ADDR={addr0} MASTER_PORT=29500 PYTHONUNBUFFERED=1
       NCCL_HOSTID=ddp-rank{rank} NCCL_SOCKET_IFNAME=trimbn GLOO_SOCKET_IFNAME=trimbn NCCL_DEBUG="${NCCL_DEBUG:-INFO}"
       NCCL_DEBUG_SUBSYS="${NCCL_DEBUG_SUBSYS:-INIT,NET}")
  local launch=() backend=()
  case $tr in
    socket) cmd+=(NCCL_NET=Socket NCCL_NET_PLUGIN=none) ;;
    gloo) backend=(--backend gloo) ;;
    *)
      local hb=1
      [[ $tr == trim16 ]] && hb=16
      # hook: per-hop rht for what is not the hook's; the hook's buckets travel rotated.
      cmd+=(NCCL_NET_PLUGIN="$plugin_so" NCCL_NET=Trim NCCL_TRIM_IFNAME=trimbn NCCL_TRIM_SCHEME=rht
            NCCL_TRIM_HEAD_BITS="$hb")  # host buffers: NCCL stages GPU data (the plugin takes no GPU memory)
      if ((cpu)); then
        # The CPU backend finds the plugin in the build (not an installed package's copy).
        cmd+=(NCCL_TRIM_LIB_DIR="$build/lib" PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}")
        if [[ $tr == hook ]]; then
          # The launcher's worker bootstrap, as `python -m nccl_trim.run --trim-cpu` runs it: the
          # script's gloo groups become trim groups and every DDP model gets the RHT hook.
          launch=(-m nccl_trim._boot --trim-cpu) backend=(--backend gloo)
        else
          backend=(--backend trim)
        fi
      elif [[ $tr == hook ]]; then
        cmd+=(PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}")
        launch=(-m nccl_trim._boot)
      fi ;;
  esac
  task_args "$task"
  ((cpu)) && TARGS+=(--device cpu "${backend[@]}")
  # Training stops by itself 15 s before the run's limit, so a slow run still ends with numbers.
  local tl=$((limit - 15))
  ((tl < 5)) && tl=5
  cmd+=(timeout "$limit" "$TRAIN_PYTHON" "${launch[@]}" "$here/ddp_train.py" "${TARGS[@]}" --time-limit-s "$tl"
        --json-out "$dir/rank{rank}.jsonl")
}

# The runs, point by point, the transports of a point back to back.
runs=()
for it in "${plan_list[@]}"; do
  read -r c l < <(point_of "$it")
  for tr in "${transport_list[@]}"; do runs+=("${it%%:*} $tr $c $l"); done
done
total=$(plan_total)

if ((dry)); then
  echo "# congestion_bench.sh --dry-run: ${preset:-custom} plan, ${#runs[@]} runs, rate $rate Gbit/s, buffer $buffer B," \
    "propagation $prop us, seed $seed, $ranks ranks (nothing is run)"
  for t in "${!steps[@]}"; do
    echo "# task $t: grad_bytes ${grad_bytes[$t]} ($(awk -v b="${grad_bytes[$t]}" 'BEGIN{printf "%.1f", b / 1e6}') MB), ${steps[$t]} steps," \
      "target ${target[$t]}, compute ${compute_ms[$t]} ms a step (assumed)"
  done
  ((calibrate)) && echo "# calibration: the first run (${runs[0]% * *} c0) measures compute; rate stays $rate Gbit/s" \
    "while communication >= 50 % of its iteration, else it is lowered and that run redone"
  left=$budget
  for r in "${runs[@]}"; do
    read -r task tr c l <<<"$r"
    label="${task}_${tr}_c${c}_l${l}"
    e=$(estimate "$task" "$c" "$l")
    lim=$(run_limit "$e" "$left")
    swmode=trim
    [[ $tr == socket || $tr == gloo || $tr == drop ]] && swmode=drop
    rank_cmd "$task" "$tr" "$out/$label" "$lim"
    echo "# run $label -> $out/$label (estimate ${e} s, limit ${lim} s)"
    "$here/netns_bottleneck.sh" --print-only --build "$build" --ranks "$ranks" --rate-gbps "$rate" \
      --buffer-bytes "$buffer" --prop-delay-us "$prop" --cross "$c" --cross-period-ms "$period_ms" --loss "$l" --mode "$swmode" --seed "$seed" \
      --per-rank --switch-arg --stats-interval-ms --switch-arg 1000 -- "${cmd[@]}" 2>&1 | sed 's/^/#   /'
  done
  verdict=""
  ((budget > 0)) && verdict=$( ((total <= budget)) && echo ", fits --budget-s $budget" ||
    echo ", over --budget-s $budget: the last points would be skipped")
  echo "# plan: ${#runs[@]} runs in ${#plan_list[@]} point(s), estimated $total s ($(awk -v t="$total" 'BEGIN{printf "%.1f", t / 60}') min)$verdict;" \
    "startup ${startup} s a run, trim assumed no faster than socket"
  exit 0
fi

# A fresh sweep starts from an empty results folder (its own earlier runs only).
mkdir -p "$out"
if ((!resume)); then
  for d in "$out"/*/; do [[ -f $d/run.json ]] && rm -rf "$d"; done
  rm -f "$out/bench.json" "$out/skipped.jsonl" "$out/calibration.json"
fi

write_bench_json() {
  "$PYTHON" - "$out/bench.json" "$preset" "$plan" "$transports" "$ranks" "$rate" "$buffer" "$prop" "$seed" \
    "$budget" "$startup" "$calibrate" "$total" "$period_ms" "$cpu" "${runs[@]}" <<'PY'
import json, sys
f, preset, plan, transports, ranks, rate, buf, prop, seed, budget, startup, cal, total, period_ms, cpu = sys.argv[1:16]
runs = [r.split() for r in sys.argv[16:]]
json.dump({"preset": preset or None, "plan": plan.split(","), "transports": transports.split(","),
           "device": "cpu" if cpu == "1" else "cuda", "cross_period_ms": float(period_ms),
           "ranks": int(ranks), "rate_gbps": float(rate), "buffer_bytes": int(buf),
           "prop_delay_us": float(prop), "seed": int(seed), "budget_s": int(budget), "startup_s": float(startup),
           "calibrate": cal == "1", "estimate_s": int(total),
           "runs": [{"task": t, "transport": tr, "cross_pct": float(c), "loss_pct": float(l)} for t, tr, c, l in runs]},
          open(f, "w"), indent=1)
PY
}
write_bench_json
echo "congestion_bench: ${preset:-custom} plan, ${#runs[@]} runs, rate $rate Gbit/s, estimated $total s" \
  "(budget ${budget:-none} s)" >&2

skip_run() {  # skip_run LABEL TASK TR C L WHY
  printf '{"label":"%s","task":"%s","transport":"%s","cross_pct":%s,"loss_pct":%s,"why":"%s"}\n' "$@" >>"$out/skipped.jsonl"
  echo "congestion_bench: $1: skipped: $6" >&2
}

# calibrate_after DIR: the comm share of the first run; may lower the rate (return 1: redo).
calibrate_after() {
  local d=$1 res
  res=$("$PYTHON" - "$d/summary.json" "$d/rank0.jsonl" "$rate" "$out/calibration.json" <<'PY'
import json, math, sys
summ, jl, rate, f = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
try:
    s = json.load(open(summ))
except Exception:
    s = {}
final = {}
for line in open(jl, errors="replace") if s else []:
    if '"final"' in line:
        try:
            final = json.loads(line)
        except ValueError:
            pass
c, p50, gb = final.get("compute_ms"), s.get("iter_p50_ms"), final.get("grad_bytes")
d = {"run": s.get("label"), "status": s.get("status"), "rate_gbps": rate, "compute_ms": c, "iter_p50_ms": p50,
     "grad_bytes": gb}
new = rate
if s.get("status") == "ok" and c and p50:
    comm = max(p50 - c, 1e-3)
    d.update(comm_ms=comm, comm_share=comm / p50, goodput_gbps=gb * 8 / (comm / 1e3) / 1e9 if gb else None)
    if comm / p50 < 0.5:
        # Never below a quarter of the rate in one step: a compute time near the whole iteration
        # says more about the measurement than about the network.
        want = max(rate * comm / (1.5 * c), rate / 4)
        e = math.floor(math.log10(want))
        new = math.floor(want / 10 ** (e - 1)) * 10 ** (e - 1)  # 2 significant digits, down
        clamp = " (clamped to a quarter)" if want == rate / 4 else ""
        d["decision"] = (f"communication {comm / p50:.0%} of the iteration < 50 %: "
                         f"rate {rate:g} -> {new:g} Gbit/s{clamp}")
    else:
        d["decision"] = f"communication {comm / p50:.0%} of the iteration >= 50 %: rate stays {rate:g} Gbit/s"
else:
    d["decision"] = "not measured (the run failed or logged no compute time): rate stays"
d["new_rate_gbps"] = new
json.dump(d, open(f, "w"), indent=1)
print(f"{new:g} {c or ''}")
print(d["decision"], file=sys.stderr)
PY
)
  local new cms
  read -r new cms <<<"$res"
  [[ -n $cms ]] && compute_ms[${runs[0]%% *}]=$cms
  if [[ $new != "$rate" ]]; then
    rate=$new
    rm -rf "$out/calibration_run"
    mv "$d" "$out/calibration_run"
    return 1
  fi
}

n_ok=0 n_fail=0 start=$SECONDS i=0 group_ok=1 prev_point=""
while ((i < ${#runs[@]})); do
  read -r task tr c l <<<"${runs[$i]}"
  label="${task}_${tr}_c${c}_l${l}"
  dir="$out/$label"
  e=$(estimate "$task" "$c" "$l")
  left=$((budget > 0 ? budget - (SECONDS - start) : timeout_s))
  # A point starts only when all its transports' estimates fit what is left.
  if [[ "$task $c $l" != "$prev_point" ]]; then
    prev_point="$task $c $l" group_ok=1
    if ((budget > 0 && e * ${#transport_list[@]} > left)); then group_ok=0; fi
  fi
  if ((!group_ok)); then
    skip_run "$label" "$task" "$tr" "$c" "$l" "time budget: ${left} s left of --budget-s $budget, the point needs ~$((e * ${#transport_list[@]})) s"
    i=$((i + 1)); continue
  fi
  if ((budget > 0 && left < e)); then  # the point started, but its earlier runs took longer
    skip_run "$label" "$task" "$tr" "$c" "$l" "time budget: ${left} s left of --budget-s $budget, the run needs ~${e} s"
    i=$((i + 1)); continue
  fi
  if ((resume)) && grep -q '"status": "ok"' "$dir/summary.json" 2>/dev/null; then
    echo "congestion_bench: $label: done before, skipped (--resume)" >&2
    i=$((i + 1)); continue
  fi
  lim=$(run_limit "$e" "$left")
  swmode=trim
  [[ $tr == socket || $tr == gloo || $tr == drop ]] && swmode=drop
  rank_cmd "$task" "$tr" "$dir" "$lim"
  bn=("$here/netns_bottleneck.sh" --build "$build" --ranks "$ranks" --rate-gbps "$rate" --buffer-bytes "$buffer"
      --prop-delay-us "$prop" --cross "$c" --cross-period-ms "$period_ms" --loss "$l" --mode "$swmode" --seed "$seed" --per-rank
      --switch-arg --stats-interval-ms --switch-arg 1000)
  rm -rf "$dir"
  mkdir -p "$dir"
  mode=$tr
  [[ $tr == trim16 || $tr == hook ]] && mode=trim
  "$PYTHON" - "$dir/run.json" "$label" "$mode" "$ranks" "$task" "$tr" "$c" "$l" "$rate" "$buffer" "$seed" "$prop" \
    "$e" "$lim" "$period_ms" <<'PY'
import json, sys
f, label, mode, ranks, task, tr, c, l, rate, buf, seed, prop, est, lim, period_ms = sys.argv[1:16]
plugin = tr not in ("socket", "gloo")
json.dump({"kind": "train", "label": label, "mode": mode, "ranks": int(ranks), "task": task,
           "transport": tr, "scheme": ("rotated" if tr == "hook" else "rht") if plugin else None,
           "head_bits": (16 if tr == "trim16" else 1) if plugin else None,
           "phase": "reduce_scatter" if plugin else None, "trim_p": None,
           "estimate_s": int(est), "limit_s": int(lim),
           "bottleneck": {"cross_pct": float(c), "cross_period_ms": float(period_ms), "loss_pct": float(l), "rate_gbps": float(rate),
                          "buffer_bytes": int(buf), "seed": int(seed), "prop_delay_us": float(prop)}},
          open(f, "w"), indent=1)
PY
  echo "congestion_bench: $label -> $dir (estimate ${e} s, limit ${lim} s)" >&2
  t0=$SECONDS rc=0
  # The bottleneck gets the limit too (plus its own set-up and tear-down), as a backstop.
  timeout --kill-after=10 $((lim + 20)) "${bn[@]}" --log "$dir/switch.jsonl" -- "${cmd[@]}" \
    >"$dir/bottleneck.out" 2>"$dir/bottleneck.err" || rc=$?
  "$PYTHON" "$here/plot_ddp.py" --summarize "$dir" --status "$rc" --wall-s "$((SECONDS - t0))" >/dev/null || true
  "$PYTHON" "$here/plot_congestion.py" --augment "$dir" || true
  if ((rc == 0)); then n_ok=$((n_ok + 1)); else n_fail=$((n_fail + 1)); echo "congestion_bench: $label failed ($rc)" >&2; fi
  if ((calibrate && i == 0)); then
    calibrate=0
    if ! calibrate_after "$dir"; then
      total=$(plan_total)
      write_bench_json
      echo "congestion_bench: calibration: rate now $rate Gbit/s; redoing $label, estimated $total s" >&2
      n_ok=0 n_fail=0 prev_point=""
      continue
    fi
  fi
  i=$((i + 1))
done
n_skip=0
[[ -f $out/skipped.jsonl ]] && n_skip=$(wc -l <"$out/skipped.jsonl")
echo "congestion_bench: $n_ok runs ok, $n_fail failed, $n_skip skipped, $((SECONDS - start)) s" >&2
"$PYTHON" "$here/plot_congestion.py" "$out"
((n_fail == 0))
