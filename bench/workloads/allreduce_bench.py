#!/usr/bin/env python3
"""torch.distributed.all_reduce bandwidth, nccl-tests style: fp32 sum per size (--min-bytes doubling
to --max-bytes, or --sizes); --warmup calls, then --iters calls back to back timed together (one
device sync at the end). --target-ms T: more calls for small sizes, about T ms each (rank 0's
count for all, capped at --max-iters and at log_n(1e30) calls so the in-place sum stays finite).
Per size: time_us (slowest rank's mean), algbw = bytes/time, busbw = algbw * 2(n-1)/n, max_err
(an extra out-of-place call where rank r adds r+1: every element must be n(n+1)/2). Launched like
any torchrun job; rank 0 prints JSON lines (config, size, final), then a '#' table; --json-out
PATH: every rank's lines ("{rank}" replaced)."""
import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_train import Logger, barrier, init_distributed, parse_size, run_facts, sync  # noqa: E402  (same directory)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("--min-bytes", type=parse_size, default=parse_size("1M"), help="default 1M")
    a("--max-bytes", type=parse_size, default=parse_size("256M"), help="default 256M")
    a("--sizes", type=lambda v: [parse_size(x) for x in v.split(",")],
      help="these sizes instead of --min-bytes..--max-bytes, e.g. 1M,16M,128M")
    a("--warmup", type=int, default=5)
    a("--iters", type=int, default=20, help="timed calls per size (at least)")
    a("--target-ms", type=float, default=0,
      help="time each size over about this many ms (more calls for small sizes); 0: --iters")
    a("--max-iters", type=int, default=1000, help="cap of the calls --target-ms may ask for")
    a("--device", choices=["auto", "cuda", "cpu"], default="auto")
    a("--backend", choices=["auto", "nccl", "gloo"], default="auto")
    a("--timeout-s", type=float, default=300)
    a("--json-out")
    a("--label", default="", help="free text copied into every line (e.g. the transport)")
    return p.parse_args(argv)


def main():
    args = parse_args()
    import torch
    import torch.distributed as dist

    rank, world, device, backend = init_distributed(args, torch, dist)
    log = Logger(rank, args.json_out)
    log("config", label=args.label, world_size=world, backend=backend, device=str(device),
        args=vars(args), **run_facts(torch, device))

    bus_factor = 2.0 * (world - 1) / world if world > 1 else 1.0
    # Timed calls that keep the in-place sum (n-fold per call, from values of about 1) finite.
    finite_cap = int(math.log(1e30) / math.log(world)) if world > 1 else args.max_iters
    rows = []
    sizes = args.sizes or [args.min_bytes << i for i in range(64) if args.min_bytes << i <= args.max_bytes]
    gen = torch.Generator(device=device).manual_seed(1234 + rank)
    for size in sizes:
        count = size // 4
        buf = torch.randn(count, generator=gen, device=device)
        for _ in range(max(0, args.warmup - 1)):
            dist.all_reduce(buf)
        iters = args.iters
        if args.warmup > 0:
            # The last warmup call alone, synchronized: how long one call takes at this size.
            sync(torch, device)
            t1 = time.perf_counter()
            dist.all_reduce(buf)
            sync(torch, device)
            one = time.perf_counter() - t1
            if args.target_ms > 0:
                # Rank 0's choice for all: every rank must issue the same number of calls.
                want = min(args.max_iters, finite_cap, int(args.target_ms / 1e3 / max(one, 1e-6)))
                n = torch.tensor([max(args.iters, want)], dtype=torch.int64, device=device)
                dist.broadcast(n, 0)
                iters = int(n.item())
        # An in-place sum grows by a factor of n per call: refill after the warmup so that the
        # timed calls (n^iters) stay finite, with values shaped like gradients (not zeros).
        buf.normal_(generator=gen)
        sync(torch, device)
        barrier(dist, device)
        sync(torch, device)
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        sync(torch, device)
        elapsed = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64, device=device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        t = elapsed.item()
        # Correctness, out of the timed loop: every element must sum to n(n+1)/2 exactly.
        chk = torch.full((count,), float(rank + 1), device=device)
        dist.all_reduce(chk)
        err = (chk - world * (world + 1) / 2).abs().max().item()
        algbw = size / t / 1e9
        row = {"bytes": size, "count": count, "dtype": "float32", "iters": iters, "time_us": t * 1e6,
               "algbw_GBps": algbw, "busbw_GBps": algbw * bus_factor, "max_err": err}
        rows.append(row)
        log("size", label=args.label, **row)
        del buf, chk

    peak = max((r["busbw_GBps"] for r in rows), default=None)
    avg = sum(r["busbw_GBps"] for r in rows) / len(rows) if rows else None
    log("final", label=args.label, world_size=world, sizes=len(rows), peak_busbw_GBps=peak,
        avg_busbw_GBps=avg, all_exact=all(r["max_err"] == 0 for r in rows))
    if rank == 0:
        print(f"# all_reduce fp32 sum, {world} ranks, backend {backend}{', ' + args.label if args.label else ''}")
        print(f"# {'bytes':>12} {'count':>11} {'time(us)':>11} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'max_err':>9}")
        for r in rows:
            print(f"# {r['bytes']:>12} {r['count']:>11} {r['time_us']:>11.1f} {r['algbw_GBps']:>12.3f} "
                  f"{r['busbw_GBps']:>12.3f} {r['max_err']:>9.3g}")
        print(f"# avg busbw {avg:.3f} GB/s, peak {peak:.3f} GB/s" if rows else "# no sizes")
        sys.stdout.flush()
    barrier(dist, device)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
