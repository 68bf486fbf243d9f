#!/usr/bin/env bash
# Live ring AllReduce with background bursts through trim-switch: 4 ranks, 1 MiB per rank, no
# background / constant / on-off bursts toward every receiver, trim vs drop (same seed, same
# cross traffic). The live counterpart of sim_allreduce_bursts.sh (which runs 64 hosts).
# Switch: 1 Gbit/s per egress port, 8-packet (32 KiB) buffer, 200 us delay. Background (exact,
# 4 KiB packets, toward every egress port):
#   none
#   constant  --cross const:0.15:all           15% of the port
#   onoff     --cross onoff:1:3:17:all      line-rate bursts of 3 ms every 20 ms (15% mean)
# Default NCCL_TRIM_PHASE (reduce_scatter): only the reduce-scatter half of the ring is trimmable.
# Usage: live_allreduce_bursts.sh [BUILD_DIR] [--quick]   (--quick: 10 iterations instead of 60)
# Typical wall time on the 2-core VM: ~25 s (default), ~7 s (--quick).
set -euo pipefail
source "$(dirname "$0")/live_lib.sh"
live_init allreduce_bursts "$@"
iters=60; [[ $QUICK = 1 ]] && iters=10
echo "== live allreduce bursts: 4-rank ring AllReduce of 1 MiB, $iters iterations, 1 Gbit/s, 8-packet buffer, 200 us"
live_header
for bg in none constant onoff; do
  case $bg in
    none) cross=() ;;
    constant) cross=(--cross const:0.15:all) ;;
    onoff) cross=(--cross onoff:1:3:17:all) ;;
  esac
  for mode in trim drop; do
    live_run "allreduce bg=$bg $mode" -- \
      --mode "$mode" --rate-gbps 1 --buffer-packets 8 --buffer-bytes 0 --prop-delay-us 200 \
      ${cross[@]+"${cross[@]}"} --seed 7 -- \
      --mode allreduce --ranks 4 --bytes 1M --iters "$iters" --warmup 1 --seed 7 --deadline-s 90
  done
done
live_summary allreduce_bursts
