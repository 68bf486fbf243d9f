#!/usr/bin/env bash
# Live buffer sweep through trim-switch: data queue of 8 packets (NDP), 1 BDP and 5 BDP per
# egress port, on the demo's congested 4-rank ring AllReduce (1 MiB per rank, --cross
# incast:8:0.04:all), trim vs drop (same seed, same cross traffic). The live counterpart of
# sim_buffer.sh.
# BDP, from the configured rate and delay: 1 Gbit/s x RTT, RTT = 2 x 200 us propagation delay
# (the switch models the forward delay; ACKs bypass it, the reverse path is counted as equal):
# 1e9 b/s x 400e-6 s / 8 = 50,000 bytes (~12 packets of 4 KiB). 8 packets = --buffer-packets 8
# (32 KiB); 1 BDP = --buffer-bytes 50000; 5 BDP = --buffer-bytes 250000.
# Usage: live_buffer.sh [BUILD_DIR] [--quick]   (--quick: 10 iterations instead of 40)
# Typical wall time on the 2-core VM: ~15-19 s (default), ~8 s (--quick).
set -euo pipefail
source "$(dirname "$0")/live_lib.sh"
live_init buffer "$@"
iters=40; [[ $QUICK = 1 ]] && iters=10
rate=1; prop_us=200
bdp=$(python3 -c "print(int($rate * 1e9 * 2 * $prop_us * 1e-6 / 8))")
echo "== live buffer: 4-rank ring AllReduce of 1 MiB, $iters iterations, $rate Gbit/s, ${prop_us} us (BDP = $rate Gbit/s x 2 x ${prop_us} us = $bdp B), incast:8:0.04 background"
live_header
for b in 8pkt 1bdp 5bdp; do
  case $b in
    8pkt) buf=(--buffer-packets 8 --buffer-bytes 0) ;;
    1bdp) buf=(--buffer-packets 0 --buffer-bytes "$bdp") ;;
    5bdp) buf=(--buffer-packets 0 --buffer-bytes $((5 * bdp))) ;;
  esac
  for mode in trim drop; do
    live_run "buffer $b $mode" -- \
      --mode "$mode" --rate-gbps "$rate" "${buf[@]}" --prop-delay-us "$prop_us" \
      --cross incast:8:0.04:all --seed 7 -- \
      --mode allreduce --ranks 4 --bytes 1M --iters "$iters" --warmup 1 --seed 7 --deadline-s 90
  done
done
live_summary buffer
