#!/usr/bin/env bash
# Live incast through trim-switch: many senders into one receiver, trim vs drop (same seed, same
# cross traffic). The live counterpart of sim_incast.sh.
# trim-harness has no incast mode (sendrecv, allreduce, mixed only), so the real traffic is one
# sender: `--mode sendrecv --op allreduce` (rank 0 -> rank 1, announced as a one-hop fp32 ring
# AllReduce, trimmable with NCCL_TRIM_PHASE=all: gradients pushed to a parameter server), and
# the other senders are emulated by the daemon's built-in synchronised incast toward the
# receiver's egress port: --cross incast:K:0.04:all (K senders in step at 0.04 Gbit/s each, a
# burst of K packets every 0.8 ms). "all" is the receiver's port: in sendrecv only rank 1
# receives data through the switch (ACKs bypass it), so that port is the only one.
# K in {2, 4, 8, 16}: 1 + K senders. Egress 1 Gbit/s, 8-packet (32 KiB) buffer, 200 us delay.
# Cross packets are exact (not trimmable), as other tenants' traffic would be.
# Usage: live_incast.sh [BUILD_DIR] [--quick]   (--quick: 10 iterations instead of 100)
# Typical wall time on the 2-core VM: ~17 s (default), ~5 s (--quick).
set -euo pipefail
source "$(dirname "$0")/live_lib.sh"
live_init incast "$@"
iters=100; [[ $QUICK = 1 ]] && iters=10
echo "== live incast: 1 real sender (1 MiB per iteration, $iters iterations) + K cross senders -> 1 receiver, 1 Gbit/s, 8-packet buffer, 200 us"
live_header
for k in 2 4 8 16; do
  for mode in trim drop; do
    live_run "incast k=$k $mode" NCCL_TRIM_PHASE=all -- \
      --mode "$mode" --rate-gbps 1 --buffer-packets 8 --buffer-bytes 0 --prop-delay-us 200 \
      --cross "incast:$k:0.04:all" --seed 7 -- \
      --mode sendrecv --op allreduce --ranks 2 --bytes 1M --iters "$iters" --warmup 1 --seed 7 --deadline-s 60
  done
done
live_summary incast
