#!/usr/bin/env bash
# Live "oversubscribed uplink" through trim-switch: 4-rank ring AllReduce of 1 MiB per rank with
# constant background, egress port rate swept from above to below what the ranks offer, trim vs
# drop (same seed, same cross traffic). The live counterpart of sim_oversub.sh; there is one
# switch here, no leaf-spine, so the "uplink" is each rank's egress port and oversubscription
# is its rate below the ranks' offered load: on this 2-core VM four ranks push at most ~0.6
# Gbit/s per port through the daemon (CPU-bound), so 2 Gbit/s is not oversubscribed, 0.5 and
# 0.25 Gbit/s are (about 1.2:1 and 2.4:1, plus the background).
# Background: --cross const:0.1:all (exact, 0.1 Gbit/s toward every port). Buffer 8 packets
# (32 KiB), 200 us delay.
# Usage: live_oversub.sh [BUILD_DIR] [--quick]   (--quick: 8 iterations instead of 40)
# Typical wall time on the 2-core VM: ~20 s (default), ~7 s (--quick).
set -euo pipefail
source "$(dirname "$0")/live_lib.sh"
live_init oversub "$@"
iters=40; [[ $QUICK = 1 ]] && iters=8
echo "== live oversubscribed uplink: 4-rank ring AllReduce of 1 MiB, $iters iterations, const 0.1 Gbit/s background, 8-packet buffer, 200 us"
live_header
for rate in 2 0.5 0.25; do
  for mode in trim drop; do
    live_run "oversub ${rate}G $mode" -- \
      --mode "$mode" --rate-gbps "$rate" --buffer-packets 8 --buffer-bytes 0 --prop-delay-us 200 \
      --cross const:0.1:all --seed 7 -- \
      --mode allreduce --ranks 4 --bytes 1M --iters "$iters" --warmup 1 --seed 7 --deadline-s 90
  done
done
live_summary oversub
