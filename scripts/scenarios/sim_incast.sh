#!/usr/bin/env bash
# Incast: 2..16 senders of 2 MiB each into host 0 (one leaf of 32 hosts), trim vs drop.
# The bottleneck is the leaf's port to host 0; trimmable payload (as gradients pushed to a
# parameter server).
source "$(dirname "$0")/sim_lib.sh"
sim_header
for k in 2 4 8 16; do
  for mode in trim drop; do
    sim_row "incast k=$k $mode" --hosts 32 --hosts-per-leaf 32 --workload incast --incast-senders "$k" \
      --bytes 2M --iters 5 --mode "$mode" --seed 1
  done
done
