#!/usr/bin/env bash
# Live trim size sweep through trim-switch: where the switch cuts (--trim-bytes 0 = plane0, the
# packet's own end of its 1-bit heads; fixed sizes counted from the IP header as NDP/UEC/SONiC/
# Spectrum do), on the demo's congested 4-rank ring AllReduce (1 MiB per rank, 1 Gbit/s,
# 8-packet buffer, 200 us, --cross incast:8:0.04:all), plus the drop baseline. Same seed and
# cross traffic everywhere. The live counterpart of sim_trim_size.sh.
# With the plugin's default 4 KiB MTU, plane 0 of an fp32 packet ends at roughly 210 bytes from
# the IP header (measured from the bytes each size removes per trim against plane0: 3,848 vs
# 3,802 at 256, 3,545 at 512, 3,034 at 1024). Sizes above it (256+) also forward part of the
# following planes, which the receiver's decoder uses (the NMSE falls); sizes below it (64, 128)
# cut into the heads. Unlike trim-sim (which NACKs such packets), the live receiver accepts
# them (acc/nack column: no NACKs) and decodes without the cut heads, so the NMSE rises instead
# of the packets being resent. 64 B (IP) is below the 80-byte header + 28
# bytes of IP/UDP, so the daemon keeps just the header: no heads at all.
# The JSON line pairs every size with the drop baseline (p50/p99 ratios).
# Usage: live_trim_size.sh [BUILD_DIR] [--quick]   (--quick: 10 iterations instead of 40)
# Typical wall time on the 2-core VM: ~26 s (default), ~9 s (--quick).
set -euo pipefail
source "$(dirname "$0")/live_lib.sh"
live_init trim_size "$@"
iters=40; [[ $QUICK = 1 ]] && iters=10
sw=(--rate-gbps 1 --buffer-packets 8 --buffer-bytes 0 --prop-delay-us 200 --cross incast:8:0.04:all --seed 7)
h=(--mode allreduce --ranks 4 --bytes 1M --iters "$iters" --warmup 1 --seed 7 --deadline-s 90)
echo "== live trim size: 4-rank ring AllReduce of 1 MiB, $iters iterations, 1 Gbit/s, 8-packet buffer, 200 us, incast:8:0.04 background"
live_header
for t in 0 64 128 256 512 1024; do
  label="trim size $t"; [[ $t = 0 ]] && label="trim size plane0"
  live_run "$label" -- --mode trim --trim-bytes "$t" "${sw[@]}" -- "${h[@]}"
done
live_run "drop (baseline)" -- --mode drop "${sw[@]}" -- "${h[@]}"
live_summary trim_size
