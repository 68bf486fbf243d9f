#!/usr/bin/env bash
# Oversubscribed uplinks: ring allreduce with every ring hop crossing the spine (--ring random),
# 1:1, 4:1 and 8:1 leaves, ECMP and packet spraying, trim vs drop.
source "$(dirname "$0")/sim_lib.sh"
HOSTS="${HOSTS:-64}"
sim_header
for o in 1 4 8; do
  for routing in ecmp spray; do
    for mode in trim drop; do
      sim_row "oversub $o:1 $routing $mode" --hosts "$HOSTS" --bytes 16M --iters 3 --oversub "$o" \
        --ring random --routing "$routing" --mode "$mode" --seed 1
    done
  done
done
