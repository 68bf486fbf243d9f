#!/usr/bin/env bash
# One emulated bottleneck that every protocol crosses: one network namespace per rank, and
# trim-switch as the IPv4 router between them (--tun-netns: a TUN device per rank, created in
# its namespace, addressed 198.18.0.(K+1)/24). NCCL's Socket transport (TCP), our UDP and
# anything else between two ranks go through the same modelled egress port of the receiver
# (rate, buffer, cross traffic, random loss): docs/ARCHITECTURE.md, "One bottleneck for TCP
# and UDP".
#
# usage: scripts/netns_bottleneck.sh [OPTIONS] -- CMD [ARGS...]
#   --build DIR [build]  --ranks N [2, 2..16]  --rate-gbps G [1]  --buffer-bytes B [262144]
#   --cross PCT [0]      cross traffic into every port, PCT % of the rate on average
#   --cross-period-ms P  0 [default]: constant; else line-rate bursts, PCT % of every P ms
#   --cross-prio high|shared  shared [default]: the cross traffic queues with training's (FIFO);
#                        high: another tenant's strict-priority class served first (never trimmed)
#   --loss PCT [0]  --mode trim|drop [trim]  --seed N [1]  --prop-delay-us US [5]  --mtu BYTES [9000]
#   --tcp-rto-min-us US  TCP's minimum RTO in every namespace (0 [default]: Linux's 200 ms): the
#                        per-namespace sysctl net.ipv4.tcp_rto_min_us where the kernel has it
#                        (Linux >= 6.11), else rto_min on every route; prints which
#   --switch-arg ARG     one more trim-switch argument (repeatable)
#   --log FILE           the switch's JSON lines (default: a temp file, removed on exit)
#   --per-rank           CMD once per rank inside its namespace (ip netns exec), all at once; else
#                        once in the caller's namespace (trim-harness --netns {netns})
#   --rank-output PREFIX with --per-rank: rank K's stdout/stderr into PREFIX<K>.out/.log
#   --print-only         print the switch's and the command(s)' lines; set nothing up (no root)
#   --veth               no switch: the two namespaces (--ranks 2) joined by a veth pair at --mtu,
#                        as two hosts on one link (bench backend --netns-mtu); the command gets
#                        GLOO_SOCKET_IFNAME = NCCL_SOCKET_IFNAME = the veth's name and no
#                        NCCL_TRIM_IFNAME (the plugin picks the veth by itself). Ignores the
#                        switch's options (rate, buffer, cross traffic, loss).
# Placeholders in CMD: {netns} (NS0,NS1,...), {ranks}, {addr0}; with --per-rank {rank}, {addr}.
# The command gets NCCL_TRIM_IFNAME = NCCL_SOCKET_IFNAME = the TUN's name, TRIM_BN_NETNS,
# TRIM_BN_ADDR0, TRIM_BN_RANKS (and TRIM_BN_RANK). Prints {"event":"bottleneck_ready",...} once
# the namespaces are up, {"event":"tcp","rank":K,"tcp_retrans_segs":N} per namespace after the
# command (RetransSegs of its /proc/net/snmp) and the switch's {"event":"final",...} at the end.
# Exit status: the command's (the largest of the ranks'), 1 when the bottleneck could not be set
# up, 2 for bad options, 77 when this machine cannot make namespaces or TUN devices (the reason is
# printed). Everything is torn down on exit, error, SIGINT and SIGTERM.
set -euo pipefail

BUILD=build RANKS=2 RATE=1 BUFFER=262144 CROSS=0 PERIOD_MS=0 LOSS=0 MODE=trim SEED=1 PROP=5 MTU=9000
LOG="" PER_RANK=0 PRINT_ONLY=0 RANK_OUT="" TUN_NAME=trimbn RTO_MIN_US=0 VETH=0 PRIO=shared VETH_NAME=trimveth
SW_EXTRA=()
die() { echo "netns_bottleneck: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --ranks) RANKS=$2; shift 2 ;;
    --rate-gbps) RATE=$2; shift 2 ;;
    --buffer-bytes) BUFFER=$2; shift 2 ;;
    --cross) CROSS=$2; shift 2 ;;
    --cross-period-ms) PERIOD_MS=$2; shift 2 ;;
    --cross-prio) PRIO=$2; shift 2 ;;
    --loss) LOSS=$2; shift 2 ;;
    --mode) MODE=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --prop-delay-us) PROP=$2; shift 2 ;;
    --mtu) MTU=$2; shift 2 ;;
    --switch-arg) SW_EXTRA+=("$2"); shift 2 ;;
    --tcp-rto-min-us) RTO_MIN_US=$2; shift 2 ;;
    --log) LOG=$2; shift 2 ;;
    --per-rank) PER_RANK=1; shift ;;
    --rank-output) RANK_OUT=$2; shift 2 ;;
    --print-only) PRINT_ONLY=1; shift ;;
    --veth) VETH=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    --) shift; break ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[[ $# -gt 0 ]] || die "no command after -- (see --help)"
[[ $RANKS =~ ^[0-9]+$ && $RANKS -ge 2 && $RANKS -le 16 ]] || die "--ranks $RANKS: expected 2..16"
[[ $CROSS =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v c="$CROSS" 'BEGIN{exit !(c < 100)}' || die "--cross $CROSS: expected a percentage below 100"
[[ $PRIO == high || $PRIO == shared ]] || die "--cross-prio $PRIO: expected high or shared"
PRIO_OPT=$([[ $PRIO == high ]] && echo ":prio=high" || true)
[[ $PERIOD_MS =~ ^[0-9]+$ ]] || die "--cross-period-ms $PERIOD_MS: expected whole milliseconds"
[[ $LOSS =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v c="$LOSS" 'BEGIN{exit !(c <= 100)}' || die "--loss $LOSS: expected a percentage 0..100"
[[ $MODE == trim || $MODE == drop ]] || die "--mode $MODE: expected trim or drop"
[[ $RTO_MIN_US =~ ^[0-9]+$ ]] || die "--tcp-rto-min-us $RTO_MIN_US: expected whole microseconds"
[[ $MTU =~ ^[0-9]+$ && $MTU -ge 576 && $MTU -le 65535 ]] || die "--mtu $MTU: expected 576..65535"
((VETH == 0 || RANKS == 2)) || die "--veth joins two namespaces: --ranks $RANKS (expected 2)"

# Names unique per run (PID), so parallel runs never share a namespace.
NS=()
for ((k = 0; k < RANKS; k++)); do NS+=("tbn$$r$k"); done
NS_LIST=$(IFS=,; echo "${NS[*]}")
ADDR0=198.18.0.1
addr_of() { echo "198.18.0.$(($1 + 1))"; }

SW_ARGS=(--tun-netns "$NS_LIST" --tun-name "$TUN_NAME" --tun-base "$ADDR0" --tun-mtu "$MTU"
         --mode "$MODE" --rate-gbps "$RATE" --buffer-bytes "$BUFFER" --prop-delay-us "$PROP" --seed "$SEED")
if awk -v c="$CROSS" 'BEGIN{exit !(c > 0)}'; then
  if awk -v b="$PERIOD_MS" 'BEGIN{exit !(b > 0)}'; then
    read -r on_ms off_ms < <(awk -v c="$CROSS" -v p="$PERIOD_MS" 'BEGIN{on = int(p * c / 100 + 0.5); if (on < 1) on = 1; print on, p - on}')
    ((off_ms >= 0)) || die "--cross-period-ms $PERIOD_MS: shorter than its 1-ms burst"
    SW_ARGS+=(--cross "onoff:$RATE:$on_ms:$off_ms:all$PRIO_OPT")
  else
    SW_ARGS+=(--cross "const:$(awk -v c="$CROSS" -v r="$RATE" 'BEGIN{printf "%.6g", c / 100 * r}'):all$PRIO_OPT")
  fi
fi
if awk -v c="$LOSS" 'BEGIN{exit !(c > 0)}'; then
  SW_ARGS+=(--loss-p "$(awk -v c="$LOSS" 'BEGIN{printf "%.6g", c / 100}')")
fi
SW_ARGS+=("${SW_EXTRA[@]}")

# fill RANK ARGS...: the command with its placeholders filled in, one word per line in FILLED.
fill() {
  local rank=$1; shift
  FILLED=()
  local a
  for a in "$@"; do
    a=${a//\{netns\}/$NS_LIST}; a=${a//\{ranks\}/$RANKS}; a=${a//\{addr0\}/$ADDR0}
    if [[ $rank -ge 0 ]]; then a=${a//\{rank\}/$rank}; a=${a//\{addr\}/$(addr_of "$rank")}; fi
    FILLED+=("$a")
  done
}

# --print-only: the lines --dry-run would print, nothing set up.
if ((PRINT_ONLY)); then
  if ((VETH)); then
    echo "+ veth $VETH_NAME: ${NS[0]} $(addr_of 0)/24 <-> ${NS[1]} $(addr_of 1)/24, mtu $MTU" >&2
  else
    echo "+ $BUILD/bin/trim-switch ${SW_ARGS[*]}" >&2
  fi
  if ((PER_RANK)); then
    for ((k = 0; k < RANKS; k++)); do
      fill "$k" "$@"
      echo "+ [rank $k] TRIM_BN_RANK=$k ip netns exec ${NS[$k]} ${FILLED[*]}" >&2
    done
  else
    fill -1 "$@"
    echo "+ ${FILLED[*]}" >&2
  fi
  exit 0
fi

# What this machine must offer; 77 (skip) with the reason when it does not.
skip() { echo "netns_bottleneck: SKIP: $*" >&2; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "not root (network namespaces and TUN devices need CAP_NET_ADMIN/CAP_SYS_ADMIN)"
command -v ip >/dev/null || skip "no ip (iproute2)"
if ((!VETH)); then
  [[ -c /dev/net/tun ]] || skip "no /dev/net/tun"
  [[ -x $BUILD/bin/trim-switch ]] || { echo "netns_bottleneck: no $BUILD/bin/trim-switch: run 'make -j2 all' first" >&2; exit 1; }
fi

TMPLOG=""
if [[ -z $LOG ]]; then TMPLOG=$(mktemp /tmp/netns_bottleneck.XXXXXX); LOG=$TMPLOG; fi
SW_PID="" CMD_PIDS=() CREATED=() VETH_TMP=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local p
  # The command(s) first (each leads a process group of its own: its children go with it).
  for p in "${CMD_PIDS[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done
  for p in "${CMD_PIDS[@]}"; do
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  # The switch: SIGTERM makes it print its final stats line.
  if [[ -n $SW_PID ]]; then
    kill -TERM "$SW_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$SW_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SW_PID" 2>/dev/null || true
    wait "$SW_PID" 2>/dev/null || true
    grep '"event":"final"' "$LOG" 2>/dev/null | tail -1 || true
  fi
  for p in "${CREATED[@]}"; do ip netns del "$p" 2>/dev/null || true; done
  # A veth pair goes with its namespaces; one still here failed before it moved.
  [[ -n $VETH_TMP ]] && ip link del "${VETH_TMP}a" 2>/dev/null || true
  [[ -n $TMPLOG ]] && rm -f "$TMPLOG" "$TMPLOG.err"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for n in "${NS[@]}"; do
  ip netns add "$n" || { echo "netns_bottleneck: ip netns add $n failed" >&2; exit 1; }
  CREATED+=("$n")
  # IPv4 only: no IPv6 router solicitations or DAD packets for the router to count as bad.
  ip netns exec "$n" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 2>/dev/null || true
done

if ((VETH)); then
  # Two hosts on one link: a veth pair, one end in each namespace, made under names unique to
  # this run and renamed as it moves in.
  VETH_TMP=tbv$$
  echo "+ veth $VETH_NAME: ${NS[0]} $(addr_of 0)/24 <-> ${NS[1]} $(addr_of 1)/24, mtu $MTU" >&2
  ip link add "${VETH_TMP}a" mtu "$MTU" type veth peer name "${VETH_TMP}b" mtu "$MTU" ||
    { echo "netns_bottleneck: could not make a veth pair" >&2; exit 1; }
  for k in 0 1; do
    end=${VETH_TMP}$([[ $k == 0 ]] && echo a || echo b)
    ip link set "$end" netns "${NS[$k]}" name "$VETH_NAME"
    ip -n "${NS[$k]}" addr add "$(addr_of "$k")/24" dev "$VETH_NAME"
    ip -n "${NS[$k]}" link set "$VETH_NAME" up
    ip -n "${NS[$k]}" link set lo up
  done
else
  echo "+ $BUILD/bin/trim-switch ${SW_ARGS[*]}" >&2
  "$BUILD/bin/trim-switch" "${SW_ARGS[@]}" >"$LOG" 2>"$LOG.err" &
  SW_PID=$!
  for _ in $(seq 100); do
    grep -q '"event":"listening"' "$LOG" 2>/dev/null && break
    kill -0 "$SW_PID" 2>/dev/null || break
    sleep 0.05
  done
  if ! grep -q '"event":"listening"' "$LOG" 2>/dev/null; then
    echo "netns_bottleneck: trim-switch did not come up: $(cat "$LOG.err" 2>/dev/null)" >&2
    exit 1
  fi
  rm -f "$LOG.err"
fi

# TCP as a datacenter operator tunes it: the per-namespace sysctl, else (older kernels) the
# routes' rto_min (whole milliseconds), now that the TUN devices and their routes exist.
if ((RTO_MIN_US > 0)); then
  method=sysctl
  for n in "${NS[@]}"; do
    if ! ip netns exec "$n" sysctl -qw "net.ipv4.tcp_rto_min_us=$RTO_MIN_US" 2>/dev/null; then
      method=route
      while read -r route; do
        # shellcheck disable=SC2086  # the route's words
        ip netns exec "$n" ip route change $route rto_min "$(((RTO_MIN_US + 999) / 1000))ms" ||
          { echo "netns_bottleneck: could not set rto_min on '$route' in $n" >&2; exit 1; }
      done < <(ip netns exec "$n" ip -4 route show)
    fi
  done
  printf '{"event":"tcp_rto_min","us":%d,"method":"%s"}\n' "$RTO_MIN_US" "$method"
  echo "netns_bottleneck: TCP minimum RTO ${RTO_MIN_US} us in every namespace ($method)" >&2
fi

# Always the TUN: a namespace has nothing else but lo, and an inherited NCCL_TRIM_IFNAME=lo
# (the harness's default, or a caller's) would bypass the bottleneck.
# With --veth the plugin picks its interface by itself (the veth: lo is left only when nothing else is up).
if ((VETH)); then
  unset NCCL_TRIM_IFNAME
  export GLOO_SOCKET_IFNAME=$VETH_NAME NCCL_SOCKET_IFNAME=$VETH_NAME
  IFNAME=$VETH_NAME
else
  export NCCL_TRIM_IFNAME=$TUN_NAME NCCL_SOCKET_IFNAME=$TUN_NAME
  IFNAME=$TUN_NAME
fi
export TRIM_BN_NETNS=$NS_LIST TRIM_BN_ADDR0=$ADDR0 TRIM_BN_RANKS=$RANKS
printf '{"event":"bottleneck_ready","veth":%d,"mtu":%d,"netns":"%s","ranks":%d,"addr0":"%s","ifname":"%s","rate_gbps":%s,"buffer_bytes":%s,"cross_pct":%s,"cross_period_ms":%s,"loss_pct":%s,"mode":"%s","seed":%s,"tcp_rto_min_us":%d,"switch_log":"%s"}\n' \
  "$VETH" "$MTU" "$NS_LIST" "$RANKS" "$ADDR0" "$IFNAME" "$RATE" "$BUFFER" "$CROSS" "$PERIOD_MS" "$LOSS" "$MODE" "$SEED" "$RTO_MIN_US" "$LOG"

rc=0
if [[ $PER_RANK -eq 0 ]]; then
  fill -1 "$@"
  echo "+ ${FILLED[*]}" >&2
  setsid "${FILLED[@]}" &
  CMD_PIDS+=($!)
else
  for ((k = 0; k < RANKS; k++)); do
    fill "$k" "$@"
    echo "+ [rank $k] TRIM_BN_RANK=$k ip netns exec ${NS[$k]} ${FILLED[*]}" >&2
    if [[ -n $RANK_OUT ]]; then
      TRIM_BN_RANK=$k setsid ip netns exec "${NS[$k]}" "${FILLED[@]}" >"$RANK_OUT$k.out" 2>"$RANK_OUT$k.log" &
    else
      TRIM_BN_RANK=$k setsid ip netns exec "${NS[$k]}" "${FILLED[@]}" &
    fi
    CMD_PIDS+=($!)
  done
fi
for p in "${CMD_PIDS[@]}"; do
  r=0
  wait "$p" || r=$?
  ((r > rc)) && rc=$r
done
CMD_PIDS=()
# TCP's retransmissions per namespace (its own /proc/net/snmp), read before the namespaces go.
for ((k = 0; k < RANKS; k++)); do
  ip netns exec "${NS[$k]}" awk -v k="$k" '/^Tcp:/ { if (!h) { for (i = 1; i <= NF; i++) c[$i] = i; h = 1 }
    else printf "{\"event\":\"tcp\",\"rank\":%d,\"tcp_retrans_segs\":%d}\n", k, $c["RetransSegs"] }' /proc/net/snmp || true
done
exit "$rc"
