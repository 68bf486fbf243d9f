#!/usr/bin/env bash
# Buffer sweep: 8 packets (NDP), 1 BDP and 5 BDP per switch port, congested ring allreduce
# (random ring, 4:1, bursty background), trim vs drop.
source "$(dirname "$0")/sim_lib.sh"
HOSTS="${HOSTS:-64}"
sim_header
for b in 8pkt 1bdp 5bdp; do
  for mode in trim drop; do
    sim_row "buffer $b $mode" --hosts "$HOSTS" --bytes 16M --iters 3 --oversub 4 --ring random \
      --background bursty --buffer "$b" --mode "$mode" --seed 1
  done
done
