#!/usr/bin/env bash
# congestion_bench.sh (also: scripts/run_ddp.sh --bench congestion): PyTorch DDP training
# (scripts/ddp_train.py) through ONE emulated bottleneck that NCCL's Socket transport (TCP) and
# our plugin's UDP cross by the same rule: scripts/netns_bottleneck.sh, one network namespace per
# rank, trim-switch as their IPv4 router over TUN devices (docs/ARCHITECTURE.md, "One bottleneck
# for TCP and UDP"). Every run gets the same port (rate, buffer), the same cross traffic and
# the same switch seed; only the transport changes:
#   socket   NCCL_NET=Socket (TCP), no plugin; the switch tail-drops (--mode drop)
#   drop     our plugin (rht), the switch tail-drops
#   trim     our plugin (rht, 1-bit heads), the switch trims (exact packets cut to headers)
#   trim16   the same with 16-bit heads (NCCL_TRIM_HEAD_BITS=16)
# Sweep: per task and transport, cross load 0/30/60/90 % of the port rate (no random loss),
# then random loss 0.1/1/2 % (no cross load). Needs a GPU machine with torch + NCCL, root,
# /dev/net/tun and iproute2; one GPU is enough (every rank gets its own NCCL_HOSTID, so NCCL
# puts all traffic on the network).
#
# usage: scripts/congestion_bench.sh [options] [-- extra ddp_train.py arguments]
#   --ranks N [2]               --tasks LIST [digits,charlm]
#   --transports LIST [socket,drop,trim,trim16]
#   --cross LIST [0,30,60,90]   --loss LIST [0.1,1,2] (percent)
#   --rate-gbps G [1]  --buffer-bytes B [262144]  --prop-delay-us US [20]  --seed N [7]
#   --target-acc-digits A [0.95]  --target-acc-charlm A [0.45]   (time to target accuracy)
#   --epochs E  --max-steps K   passed to ddp_train.py (its defaults otherwise)
#   --out DIR [build/congestion]  --build DIR [build]  --timeout-s S [1800 per run]
#   --resume                    skip runs whose summary.json says ok
#   --dry-run                   per run: set up the namespaces and the bottleneck, print every
#                               command (switch and ranks, with environment), tear down
# Output: per run DIR/<task>_<transport>_c<cross>_l<loss>/ with run.json, rank<R>.{jsonl,out,
# log,tcp}, switch.jsonl, summary.json (plot_ddp.py --summarize plus the bottleneck's view);
# DIR/congestion.png (scripts/plot_congestion.py, when matplotlib is there), a markdown table
# and, as the last stdout line, one JSON line with every run.
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

ranks=2 tasks=digits,charlm transports=socket,drop,trim,trim16 crosses=0,30,60,90 losses=0.1,1,2
rate=1 buffer=262144 prop=20 seed=7 acc_digits=0.95 acc_charlm=0.45 epochs="" max_steps=""
out="" build=build timeout_s=1800 resume=0 dry=0 extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --dry-run) dry=1; shift; continue ;;
    --resume) resume=1; shift; continue ;;
    --) shift; extra=("$@"); break ;;
  esac
  [[ $# -ge 2 ]] || die "$1 needs a value (see --help)"
  case "$1" in
    --ranks) ranks=$2 ;;
    --tasks) tasks=$2 ;;
    --transports) transports=$2 ;;
    --cross) crosses=$2 ;;
    --loss) losses=$2 ;;
    --rate-gbps) rate=$2 ;;
    --buffer-bytes) buffer=$2 ;;
    --prop-delay-us) prop=$2 ;;
    --seed) seed=$2 ;;
    --target-acc-digits) acc_digits=$2 ;;
    --target-acc-charlm) acc_charlm=$2 ;;
    --epochs) epochs=$2 ;;
    --max-steps) max_steps=$2 ;;
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
IFS=, read -r -a task_list <<<"$tasks"
IFS=, read -r -a transport_list <<<"$transports"
IFS=, read -r -a cross_list <<<"$crosses"
IFS=, read -r -a loss_list <<<"$losses"
for t in "${task_list[@]}"; do [[ $t =~ ^(digits|charlm)$ ]] || die "unknown task $t"; done
for t in "${transport_list[@]}"; do [[ $t =~ ^(socket|drop|trim|trim16)$ ]] || die "unknown transport $t"; done
((dry)) || [[ -f $plugin_so ]] || die "no $plugin_so: run 'make -j' first (or pass --build)"
mkdir -p "$out"

# Runs: each cross load without loss, then each loss without cross load (0/0 only once).
points=()
for c in "${cross_list[@]}"; do points+=("$c:0"); done
for l in "${loss_list[@]}"; do [[ $l == 0 ]] || points+=("0:$l"); done

# rank_cmd TASK TRANSPORT DIR: ddp_train.py with its environment, {rank} left for
# netns_bottleneck.sh to fill in; the command runs inside rank {rank}'s namespace.
rank_cmd() {
  local task=$1 tr=$2 dir=$3 acc=$acc_digits
  [[ $task == charlm ]] && acc=$acc_charlm
  cmd=("$here/$(basename "$0")" --rank-wrapper "$dir/rank{rank}" -- env RANK={rank} WORLD_SIZE="$ranks" LOCAL_RANK={rank}
       LOCAL_WORLD_SIZE="$ranks" MASTER_ADDR={addr0} MASTER_PORT=29500 PYTHONUNBUFFERED=1
       NCCL_HOSTID=ddp-rank{rank} NCCL_SOCKET_IFNAME=trimbn NCCL_DEBUG="${NCCL_DEBUG:-INFO}"
       NCCL_DEBUG_SUBSYS="${NCCL_DEBUG_SUBSYS:-INIT,NET}")
  if [[ $tr == socket ]]; then
    cmd+=(NCCL_NET=Socket NCCL_NET_PLUGIN=none)
  else
    local hb=1
    [[ $tr == trim16 ]] && hb=16
    cmd+=(NCCL_NET_PLUGIN="$plugin_so" NCCL_NET=Trim NCCL_TRIM_IFNAME=trimbn NCCL_TRIM_SCHEME=rht
          NCCL_TRIM_HEAD_BITS="$hb")  # host buffers: NCCL stages GPU data (the plugin takes no GPU memory)
  fi
  cmd+=(timeout "$timeout_s" "$TRAIN_PYTHON" "$here/ddp_train.py" --task "$task" --seed 0 --target-acc "$acc"
        --json-out "$dir/rank{rank}.jsonl")
  [[ -n $epochs ]] && cmd+=(--epochs "$epochs")
  [[ -n $max_steps ]] && cmd+=(--max-steps "$max_steps")
  [[ -n ${DDP_DIGITS_CSV:-} && $task == digits ]] && cmd+=(--digits-csv "$DDP_DIGITS_CSV")
  cmd+=("${extra[@]}")
}

n_ok=0 n_fail=0
for task in "${task_list[@]}"; do
  for tr in "${transport_list[@]}"; do
    for pt in "${points[@]}"; do
      c=${pt%%:*} l=${pt##*:}
      label="${task}_${tr}_c${c}_l${l}"
      dir="$out/$label"
      if ((resume)) && grep -q '"status": "ok"' "$dir/summary.json" 2>/dev/null; then
        echo "congestion_bench: $label: done before, skipped (--resume)" >&2
        continue
      fi
      swmode=trim
      [[ $tr == socket || $tr == drop ]] && swmode=drop
      rank_cmd "$task" "$tr" "$dir"
      bn=("$here/netns_bottleneck.sh" --build "$build" --ranks "$ranks" --rate-gbps "$rate" --buffer-bytes "$buffer"
          --prop-delay-us "$prop" --cross "$c" --loss "$l" --mode "$swmode" --seed "$seed" --per-rank
          --switch-arg --stats-interval-ms --switch-arg 1000)
      if ((dry)); then
        echo "# run $label -> $dir"
        "${bn[@]}" --dry-run -- "${cmd[@]}" 2>&1 | grep -v '"event":"final"' | sed 's/^/#   /'
        continue
      fi
      mkdir -p "$dir"
      rm -f "$dir"/rank* "$dir"/switch.jsonl "$dir"/summary.json
      mode=$tr
      [[ $tr == trim16 ]] && mode=trim
      "$PYTHON" - "$dir/run.json" "$label" "$mode" "$ranks" "$task" "$tr" "$c" "$l" "$rate" "$buffer" "$seed" <<'PY'
import json, sys
f, label, mode, ranks, task, tr, c, l, rate, buf, seed = sys.argv[1:12]
plugin = tr != "socket"
json.dump({"kind": "train", "label": label, "mode": mode, "ranks": int(ranks), "task": task,
           "transport": tr, "scheme": "rht" if plugin else None,
           "head_bits": (16 if tr == "trim16" else 1) if plugin else None,
           "phase": "reduce_scatter" if plugin else None, "trim_p": None,
           "bottleneck": {"cross_pct": float(c), "loss_pct": float(l), "rate_gbps": float(rate),
                          "buffer_bytes": int(buf), "seed": int(seed)}}, open(f, "w"), indent=1)
PY
      echo "congestion_bench: $label -> $dir" >&2
      t0=$SECONDS rc=0
      "${bn[@]}" --log "$dir/switch.jsonl" -- "${cmd[@]}" >"$dir/bottleneck.out" 2>"$dir/bottleneck.err" || rc=$?
      "$PYTHON" "$here/plot_ddp.py" --summarize "$dir" --status "$rc" --wall-s "$((SECONDS - t0))" >/dev/null || true
      "$PYTHON" "$here/plot_congestion.py" --augment "$dir" || true
      if ((rc == 0)); then n_ok=$((n_ok + 1)); else n_fail=$((n_fail + 1)); echo "congestion_bench: $label failed ($rc)" >&2; fi
    done
  done
done
((dry)) && exit 0
echo "congestion_bench: $n_ok runs ok, $n_fail failed" >&2
"$PYTHON" "$here/plot_congestion.py" "$out"
