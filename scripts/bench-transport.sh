#!/usr/bin/env bash
# Transport goodput on loopback against a yardstick: trim-harness sendrecv (one connection,
# MTU 9000) next to one iperf3 TCP stream, then a 4-rank ring allreduce.
# Prints both JSON results and, last of the comparison, "ratio: X" (harness / iperf3 Gbit/s).
#
# Usage: scripts/bench-transport.sh [--bytes SIZE] [--iters N] [--build DIR] [--port PORT]
set -euo pipefail

bytes=256M
iters=5
build=build
port=5299
while [ $# -gt 0 ]; do
  case "$1" in
    --bytes) bytes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "bench-transport: unknown argument $1" >&2; exit 2 ;;
  esac
done

harness="$build/bin/trim-harness"
if [ ! -x "$harness" ]; then
  echo "bench-transport: $harness not found (run make first)" >&2
  exit 1
fi

if ! command -v iperf3 >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq iperf3
fi

# Reads one numeric field out of a JSON text on stdin: json_field KEY.
json_field() {
  python3 -c 'import json,sys; print(json.loads(sys.stdin.read())[sys.argv[1]])' "$1"
}

echo "== trim-harness sendrecv, MTU 9000, $bytes x $iters"
rc=0
harness_json=$("$harness" --mode sendrecv --mtu 9000 --bytes "$bytes" --iters "$iters" \
  --deadline-s 600 --json) || rc=$?
echo "$harness_json"
if [ "$rc" -ne 0 ]; then
  echo "bench-transport: trim-harness failed (exit $rc)" >&2
  exit "$rc"
fi
harness_gbps=$(echo "$harness_json" | json_field gbps)

echo "== iperf3, one TCP stream on loopback, 5 s"
# -1: the server serves one client and exits; killed on the way out should the client fail.
iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
sleep 0.5
iperf_json=$(iperf3 -c 127.0.0.1 -p "$port" -t 5 -J)
wait "$server" 2>/dev/null || true
iperf_gbps=$(echo "$iperf_json" | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(d["end"]["sum_received"]["bits_per_second"] / 1e9)')
echo "{\"bench\":\"iperf3\",\"streams\":1,\"gbps\":$iperf_gbps}"

python3 -c 'import sys; h, i = map(float, sys.argv[1:]); print(f"ratio: {h / i:.4f}")' "$harness_gbps" "$iperf_gbps"

echo "== trim-harness allreduce, 4 ranks, $bytes"
"$harness" --mode allreduce --ranks 4 --bytes "$bytes" --iters "$iters" --deadline-s 600 --json
