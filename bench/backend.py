"""all_reduce through the "trim" torch.distributed backend vs gloo on one host, as users run it: the
bench sets no NCCL_TRIM_* or GLOO_SOCKET_IFNAME (the caller's environment is passed on), so each
picks its interface as it would under torchrun (one torch thread per rank, as torchrun's
OMP_NUM_THREADS=1 gives). Per rank count, each round runs every backend in turn (alternated), each
size: warm-up calls, then about 1.5 s of timed float32 SUM all_reduces, every call started together
(a barrier on a separate gloo group). trim: the plugin's defaults; trim-raw: NCCL_TRIM_SCHEME=none
(the transport alone); gloo-lo and trim-lo: both pinned to loopback, the project's earlier
configuration (an extra row, not the headline). One JSON line per (round, ranks, backend, size):
median s per call, algbw and busbw (2(n-1)/n x bytes / time) in GB/s, rank 0's CPU s per call (all
its threads); per size a summary line: each variant's speed relative to gloo. Needs torch; the
plugin from NCCL_TRIM_LIB_DIR (default build/lib)."""

import argparse
import os
import statistics
import sys
import time

from . import REPO
from .ddp import free_port
from .jsonio import emit

POINT_S = 1.5  # timed calls per point: about this long, at least 5 and at most 400
# What each --backends name runs: the torch backend and the plugin's environment.
LOOPBACK = {"NCCL_TRIM_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo"}
VARIANTS = {"gloo": ("gloo", {}), "trim": ("trim", {}), "trim-raw": ("trim", {"NCCL_TRIM_SCHEME": "none"}),
            "gloo-lo": ("gloo", LOOPBACK), "trim-lo": ("trim", LOOPBACK)}


def parse_bytes(text):
    t = text.strip().upper().rstrip("B").rstrip("I")
    return int(float(t[:-1]) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[t[-1]]) if t[-1:] in ("K", "M", "G") else int(t)


def worker(rank, n, port, variant, sizes, q):
    backend, env = VARIANTS[variant]
    os.environ.update(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist
    import nccl_trim  # noqa: F401 - registers "trim"

    torch.set_num_threads(1)
    dist.init_process_group(backend, rank=rank, world_size=n)
    sync = dist.new_group(backend="gloo")  # barriers off the measured backend
    results = []
    for nbytes in sizes:
        x = torch.randn(max(1, nbytes // 4), generator=torch.Generator().manual_seed(rank))
        t = x.clone()
        t0 = time.perf_counter()
        for _ in range(3):
            dist.all_reduce(t)
        # Every rank must make the same number of calls: the slowest rank's warm-up decides.
        probe = torch.tensor([(time.perf_counter() - t0) / 3])
        dist.all_reduce(probe, op=dist.ReduceOp.MAX, group=sync)
        times, cpu_s = [], 0.0
        for _ in range(max(5, min(400, int(POINT_S / max(float(probe), 1e-6))))):
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
        results.append({"bytes": t.numel() * 4, "median_s": statistics.median(times), "calls": len(times),
                        "cpu_s_per_call": cpu_s / len(times),
                        "replicas_identical": all(torch.equal(p, parts[0]) for p in parts)})
    dist.destroy_process_group()
    if rank == 0:
        q.put(results)


def run_point(n, backend, sizes):
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q, port = ctx.Queue(), free_port()
    procs = [ctx.Process(target=worker, args=(r, n, port, backend, sizes, q)) for r in range(n)]
    for p in procs:
        p.start()
    results = q.get(timeout=1800)
    for p in procs:
        p.join(timeout=120)
        if p.exitcode != 0:
            raise SystemExit(f"bench backend: a {backend} rank exited with {p.exitcode}")
    return results


def main(argv):
    ap = argparse.ArgumentParser(prog="python3 -m bench backend", description=__doc__)
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--sizes", default="4K,1M,4M,16M,64M,256M")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backends", default="gloo,trim,trim-raw", help=f"of {','.join(VARIANTS)}; gloo first")
    args = ap.parse_args(argv)
    backends = args.backends.split(",")
    bad = [b for b in backends if b not in VARIANTS]
    if bad:
        ap.error(f"--backends: unknown backend '{bad[0]}' (known: {', '.join(VARIANTS)})")
    try:
        sizes = [parse_bytes(s) for s in args.sizes.split(",")]
    except (ValueError, IndexError):
        ap.error(f"--sizes: '{args.sizes}' is not a list of sizes like 4K,1M")
    os.environ.setdefault("NCCL_TRIM_LIB_DIR", str(REPO / "build" / "lib"))
    sys.path.insert(0, str(REPO / "python"))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), str(REPO), os.environ.get("PYTHONPATH", "")])
    medians = {}
    for n in (int(x) for x in args.ranks.split(",")):
        for rnd in range(args.rounds):
            for backend in backends:
                for r in run_point(n, backend, sizes):
                    s, algbw = r["median_s"], r["bytes"] / r["median_s"] / 1e9
                    emit({"bench": "backend_allreduce", "round": rnd, "ranks": n, "backend": backend,
                          "bytes": r["bytes"], "median_s": round(s, 7), "calls": r["calls"],
                          "algbw_gbs": round(algbw, 4), "busbw_gbs": round(algbw * 2 * (n - 1) / n, 4),
                          "cpu_s_per_call": round(r["cpu_s_per_call"], 7), "replicas_identical": r["replicas_identical"]})
                    medians.setdefault((n, backend, r["bytes"]), []).append(s)
        if "gloo" not in backends:
            continue
        for nbytes in sorted({k[2] for k in medians if k[0] == n}):
            g = statistics.median(medians[(n, "gloo", nbytes)])
            line = {"bench": "backend_allreduce_summary", "ranks": n, "bytes": nbytes, "gloo_s": round(g, 7)}
            for b in (b for b in backends if b != "gloo"):
                t = statistics.median(medians[(n, b, nbytes)])
                line.update({f"{b}_s": round(t, 7), f"{b}_speed_vs_gloo": round(g / t, 3)})
            emit(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
