#!/usr/bin/env bash
# Trim size sweep: where the switch cuts (plane0 = the packet's own 1-bit-heads end; fixed sizes
# as NDP/UEC/SONiC/Spectrum use), on a congested ring allreduce (random ring, 4:1, bursty).
# Plane 0 of a 9000-byte fp32 packet ends at 363 bytes: fixed sizes below it cut into the heads,
# so the receiver NACKs those packets and they are resent whole (trim then acts as NDP's
# loss notification, not as compression).
source "$(dirname "$0")/sim_lib.sh"
HOSTS="${HOSTS:-64}"
sim_header
for t in plane0 64 128 256 512 1024; do
  sim_row "trim size $t" --hosts "$HOSTS" --bytes 16M --iters 3 --oversub 4 --ring random \
    --background bursty --trim-bytes "$t" --mode trim --seed 1
done
sim_row "drop (baseline)" --hosts "$HOSTS" --bytes 16M --iters 3 --oversub 4 --ring random \
  --background bursty --mode drop --seed 1
