#!/usr/bin/env bash
# Ring allreduce (16 MiB per host) with background bursts: none, constant and bursty at 15% load,
# 64 hosts, 4:1 oversubscribed leaves, trim vs drop.
source "$(dirname "$0")/sim_lib.sh"
HOSTS="${HOSTS:-64}"
sim_header
for bg in none constant bursty; do
  for mode in trim drop; do
    sim_row "allreduce bg=$bg $mode" --hosts "$HOSTS" --bytes 16M --iters 5 --oversub 4 --background "$bg" \
      --bg-load 0.15 --mode "$mode" --seed 1
  done
done
