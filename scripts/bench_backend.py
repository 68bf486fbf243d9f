#!/usr/bin/env python3
"""all_reduce through the "trim" torch.distributed backend vs gloo, on loopback, in one run.

    scripts/bench_backend.py [--ranks 2,4] [--sizes 4K,1M,4M,16M,64M,256M] [--rounds 3]
                             [--backends gloo,trim,trim-raw]

For each rank count, each round runs every backend in turn (alternated, so all see the same
machine), each size: warm-up calls, then about 1.5 s of timed float32 SUM all_reduces of N(0,1)
data, every call started together (a barrier on a separate gloo group first). `trim` is the plugin as configured
(default: rht encoding of the reduce-scatter half); `trim-raw` the same with NCCL_TRIM_SCHEME=none
(the transport alone, nothing encoded). Prints one JSON line per (round, ranks, backend, size):
median seconds per call, algbw and busbw (2(n-1)/n x bytes / time, NCCL's definition) in GB/s, rank
0's CPU time per call (all its threads: the plugin's, gloo's, Python's), and
per size a summary line: each trim variant's speed relative to gloo (gloo's median time over
rounds / its own). Needs torch; the plugin and libtrim-coll from NCCL_TRIM_LIB_DIR (default:
build/lib of this checkout).
"""

import argparse
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().rstrip("B").rstrip("I")
    return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


POINT_S = 1.5  # timed calls per point: about this long, at least 5 and at most 400


def calls_for(probe_s: float) -> int:
    return max(5, min(400, int(POINT_S / max(probe_s, 1e-6))))


# What each --backends name runs: the torch backend and the plugin's environment.
VARIANTS = {"gloo": ("gloo", {}), "trim": ("trim", {}), "trim-raw": ("trim", {"NCCL_TRIM_SCHEME": "none"})}


def worker(rank: int, n: int, port: int, variant: str, sizes, q) -> None:
    backend, env = VARIANTS[variant]
    os.environ.update(env)
    import torch
    import torch.distributed as dist
    import nccl_trim  # noqa: F401 - registers "trim"

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(backend, rank=rank, world_size=n)
    sync = dist.new_group(backend="gloo")  # barriers off the measured backend
    results = []
    for nbytes in sizes:
        g = torch.Generator().manual_seed(rank)
        x = torch.randn(max(1, nbytes // 4), generator=g)
        t = x.clone()
        t0 = time.perf_counter()
        for _ in range(3):
            dist.all_reduce(t)
        # Every rank must make the same number of calls: the slowest rank's warm-up decides.
        probe = torch.tensor([(time.perf_counter() - t0) / 3])
        dist.all_reduce(probe, op=dist.ReduceOp.MAX, group=sync)
        times = []
        cpu_s = 0.0
        for _ in range(calls_for(float(probe))):
            t.copy_(x)
            dist.barrier(group=sync)
            c0, t0 = time.process_time(), time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - t0)
            cpu_s += time.process_time() - c0
        # The same inputs every call, so every rank ends with the same sum: replicas must match.
        digest = torch.tensor([float(t.double().sum()), float(t.double().abs().sum())])
        parts = [torch.empty(2, dtype=digest.dtype) for _ in range(n)]
        dist.all_gather(parts, digest, group=sync)
        same = all(torch.equal(p, parts[0]) for p in parts)
        results.append({"bytes": t.numel() * 4, "median_s": statistics.median(times), "calls": len(times),
                        "cpu_s_per_call": cpu_s / len(times), "replicas_identical": same})
    dist.destroy_process_group()
    if rank == 0:
        q.put(results)


def run_point(n: int, backend: str, sizes):
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, n, port, backend, sizes, q)) for r in range(n)]
    for p in procs:
        p.start()
    results = q.get(timeout=1800)
    for p in procs:
        p.join(timeout=120)
        if p.exitcode != 0:
            raise SystemExit(f"bench_backend: a {backend} rank exited with {p.exitcode}")
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--sizes", default="4K,1M,4M,16M,64M,256M")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backends", default="gloo,trim,trim-raw")
    args = ap.parse_args()
    os.environ.setdefault("NCCL_TRIM_LIB_DIR", str(ROOT / "build" / "lib"))
    os.environ.setdefault("NCCL_TRIM_IFNAME", "lo")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    for b in args.backends.split(","):
        if b not in VARIANTS:
            raise SystemExit(f"bench_backend: unknown backend {b!r} (known: {', '.join(VARIANTS)})")
    sys.path.insert(0, str(ROOT / "python"))
    os.environ["PYTHONPATH"] = str(ROOT / "python") + os.pathsep + os.environ.get("PYTHONPATH", "")
    sizes = [parse_bytes(s) for s in args.sizes.split(",")]
    backends = args.backends.split(",")
    medians = {}
    for n in (int(x) for x in args.ranks.split(",")):
        for rnd in range(args.rounds):
            for backend in backends:
                for r in run_point(n, backend, sizes):
                    s = r["median_s"]
                    algbw = r["bytes"] / s / 1e9
                    line = {"bench": "backend_allreduce", "round": rnd, "ranks": n, "backend": backend,
                            "bytes": r["bytes"], "median_s": round(s, 7), "calls": r["calls"],
                            "algbw_gbs": round(algbw, 4), "busbw_gbs": round(algbw * 2 * (n - 1) / n, 4),
                            "cpu_s_per_call": round(r["cpu_s_per_call"], 7),
                            "replicas_identical": r["replicas_identical"]}
                    print(json.dumps(line), flush=True)
                    medians.setdefault((n, backend, r["bytes"]), []).append(s)
        if "gloo" in backends:
            for nbytes in sorted({k[2] for k in medians if k[0] == n}):
                g = statistics.median(medians[(n, "gloo", nbytes)])
                line = {"bench": "backend_allreduce_summary", "ranks": n, "bytes": nbytes, "gloo_s": round(g, 7)}
                for b in backends:
                    if b != "gloo":
                        t = statistics.median(medians[(n, b, nbytes)])
                        line[f"{b}_s"] = round(t, 7)
                        line[f"{b}_speed_vs_gloo"] = round(g / t, 3)
                print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
