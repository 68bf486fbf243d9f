"""all_reduce through the "trim" torch.distributed backend vs gloo on one host, as users run it:
no NCCL_TRIM_* or GLOO_SOCKET_IFNAME is set (each picks its interface as under torchrun), one torch
thread a rank. Per rank count and round every backend in turn (alternated): 1.2 s of calls first (a
new trim connection is encoded for its first second, NCCL_TRIM_QUIET_MS: paid once a job), then each
size: warm-up, then ~1.5 s of timed float32 SUM all_reduces started together (a barrier on a
separate gloo group).
trim: the plugin's defaults; trim-raw: NCCL_TRIM_SCHEME=none (the transport alone); gloo-lo,
trim-lo: pinned to loopback (the earlier configuration). One JSON line per (round, ranks, backend,
size): median s a call, algbw and busbw in GB/s, rank 0's CPU s and context switches a call
(voluntary ones are wake-ups, issue 39 item 4); per size a summary line, each variant's speed
relative to gloo. Needs torch; the plugin from NCCL_TRIM_LIB_DIR (default build/lib).

--netns-mtu 1500,9000 (root): the 2 ranks in two namespaces joined by a veth pair at that MTU
(netns_bottleneck.sh --veth), as two hosts on one link. Rows add rank 0's CPU s per GB moved; the
summary, trim's CPU per byte over gloo's against issue 39's goal (<= 1.3x at 1500, <= 1.0x at 9000)."""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import REPO, SCRIPTS
from .ddp import free_port
from .jsonio import emit, parse_jsonl
from .workloads.ddp_train import parse_size

POINT_S = 1.5  # timed calls per point: about this long, at least 5 and at most 400
# Calls before the first point, every backend alike: a new trim connection is encoded for its first
# second (NCCL_TRIM_QUIET_MS), which a job pays once; the points measure the steady state.
SETTLE_S = 1.2
# What each --backends name runs: the torch backend and the plugin's environment.
LOOPBACK = {"NCCL_TRIM_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo"}
VARIANTS = {"gloo": ("gloo", {}), "trim": ("trim", {}), "trim-raw": ("trim", {"NCCL_TRIM_SCHEME": "none"}),
            "gloo-lo": ("gloo", LOOPBACK), "trim-lo": ("trim", LOOPBACK)}
# Issue 39's goals, per MTU: trim's CPU per byte at most this many times TCP's (gloo's).
CPU_GOAL = {1500: 1.3, 9000: 1.0}
NETNS_PORT = 29500  # each run's namespaces are new: nothing else listens there


def bus_bytes(n, nbytes):
    """Bytes each rank sends (and receives) in one ring all_reduce of NBYTES over N ranks."""
    return 2 * (n - 1) / n * nbytes


def cpu_s_per_gb(cpu_s_per_call, n, nbytes):
    """A rank's CPU seconds per GB (1e9 bytes) it moved."""
    return cpu_s_per_call / (bus_bytes(n, nbytes) / 1e9)


def switches(vcsw, ivcsw, calls, n, nbytes):
    """A rank's context switches (all its threads) per call and per MiB it moved: voluntary ones
    are its wake-ups (a thread that slept), involuntary ones preemptions."""
    mib = bus_bytes(n, nbytes) / (1 << 20)
    return {"vcsw_per_call": round(vcsw / calls, 1), "ivcsw_per_call": round(ivcsw / calls, 1),
            "vcsw_per_mib": round(vcsw / calls / mib, 2) if mib else None}


def parse_mtus(text):
    """--netns-mtu: a list of MTUs (576..65535), or [] for ''."""
    mtus = [int(x) for x in text.split(",")] if text else []
    if any(not 576 <= m <= 65535 for m in mtus):
        raise ValueError(text)
    return mtus


def worker(rank, n, port, variant, sizes, q, master="127.0.0.1"):
    backend, env = VARIANTS[variant]
    os.environ.update(env, MASTER_ADDR=master, MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist
    import nccl_trim  # noqa: F401 - registers "trim"

    torch.set_num_threads(1)
    dist.init_process_group(backend, rank=rank, world_size=n)
    sync = dist.new_group(backend="gloo")  # barriers off the measured backend
    settle = torch.zeros(max(1, sizes[0] // 4))
    t0 = time.perf_counter()
    while True:  # every rank the same number of calls: rank 0's clock decides when to stop
        dist.all_reduce(settle)
        done = torch.tensor([float(time.perf_counter() - t0 >= SETTLE_S)])
        dist.broadcast(done, 0, group=sync)
        if done.item():
            break
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
        times, cpu_s, vcsw, ivcsw = [], 0.0, 0, 0
        for _ in range(max(5, min(400, int(POINT_S / max(float(probe), 1e-6))))):
            t.copy_(x)
            dist.barrier(group=sync)
            r0, c0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.process_time(), time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - t0)
            cpu_s += time.process_time() - c0
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            vcsw, ivcsw = vcsw + r1.ru_nvcsw - r0.ru_nvcsw, ivcsw + r1.ru_nivcsw - r0.ru_nivcsw
        # The same inputs every call, so every rank ends with the same sum: replicas must match.
        digest = torch.tensor([float(t.double().sum()), float(t.double().abs().sum())])
        parts = [torch.empty(2, dtype=digest.dtype) for _ in range(n)]
        dist.all_gather(parts, digest, group=sync)
        results.append({"bytes": t.numel() * 4, "median_s": statistics.median(times), "calls": len(times),
                        "cpu_s_per_call": cpu_s / len(times),
                        **switches(vcsw, ivcsw, len(times), n, t.numel() * 4),
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


class _PrintResults:
    """A rank in a namespace hands its results back on stdout (one JSON line)."""
    put = staticmethod(lambda results: emit({"rank_results": results}))


def netns_command(mtu, variant, sizes, out_prefix, build="build"):
    """(netns_bottleneck.sh --veth with its options, then each rank's command)."""
    return [str(SCRIPTS / "netns_bottleneck.sh"), "--veth", "--mtu", str(mtu), "--ranks", "2", "--build", str(build),
            "--per-rank", "--rank-output", str(out_prefix), "--", sys.executable, "-m", "bench", "backend",
            "--rank", "{rank}", "--master", "{addr0}", "--port", str(NETNS_PORT), "--variant", variant,
            "--sizes", ",".join(str(s) for s in sizes)]


def run_netns_point(mtu, backend, sizes):
    """Rank 0's results of one run of BACKEND with its 2 ranks in namespaces joined at MTU."""
    with tempfile.TemporaryDirectory(prefix="bench-backend-") as d:
        p = subprocess.run(netns_command(mtu, backend, sizes, Path(d) / "rank"), cwd=REPO, capture_output=True,
                           text=True, timeout=1800)
        out = Path(d) / "rank0.out"
        rows = [r["rank_results"] for r in parse_jsonl(out.read_text() if out.exists() else "") if "rank_results" in r]
        if p.returncode != 0 or not rows:
            logs = "".join(f"\n-- rank {k}: {(Path(d) / f'rank{k}.log').read_text()[-1500:]}" for k in (0, 1)
                           if (Path(d) / f"rank{k}.log").exists())
            raise SystemExit(f"bench backend: {backend} at MTU {mtu} failed (exit {p.returncode}): "
                             f"{p.stderr.strip()[-800:]}{logs}")
        return rows[-1]


def result_row(r, n, rnd, backend, **extra):
    """The JSON row of one (round, backend, size) from rank 0's result R of an N-rank run."""
    algbw = r["bytes"] / r["median_s"] / 1e9
    return {"bench": "backend_allreduce", **extra, "round": rnd, "ranks": n, "backend": backend,
            "bytes": r["bytes"], "median_s": round(r["median_s"], 7), "calls": r["calls"],
            "algbw_gbs": round(algbw, 4), "busbw_gbs": round(bus_bytes(n, algbw), 4),
            "cpu_s_per_call": round(r["cpu_s_per_call"], 7),
            **{k: r[k] for k in ("vcsw_per_call", "ivcsw_per_call", "vcsw_per_mib") if k in r},
            "replicas_identical": r["replicas_identical"]}


def netns_summary(mtu, nbytes, rows):
    """The summary line of one (MTU, size): ROWS are its emitted rows, every round and backend."""
    by = {}
    for r in rows:
        by.setdefault(r["backend"], []).append(r)
    line = {"bench": "backend_netns_summary", "mtu": mtu, "ranks": 2, "bytes": nbytes}
    med = {b: (statistics.median(x["busbw_gbs"] for x in rs), statistics.median(x["cpu_s_per_gb"] for x in rs))
           for b, rs in by.items()}
    for b, (busbw, cpu) in med.items():
        line.update({f"{b}_busbw_gbs": round(busbw, 4), f"{b}_cpu_s_per_gb": round(cpu, 4)})
    if "gloo" in med:
        goal = CPU_GOAL.get(mtu)
        for b in (b for b in med if b != "gloo"):
            ratio = med[b][1] / med["gloo"][1]
            line[f"{b}_cpu_vs_gloo"] = round(ratio, 3)
            line[f"{b}_busbw_vs_gloo"] = round(med[b][0] / med["gloo"][0], 3)
            if goal is not None:
                line.update({"cpu_goal": goal, f"{b}_meets_cpu_goal": ratio <= goal})
    return line


def run_all(args, backends, sizes, mtus):
    """Every point (a rank count, or 2 ranks in namespaces at an MTU) x round x backend; per size a summary line."""
    for n, mtu in [(2, m) for m in mtus] or [(int(x), None) for x in args.ranks.split(",")]:
        rows, medians = [], {}
        for rnd in range(args.rounds):
            for backend in backends:
                for r in run_netns_point(mtu, backend, sizes) if mtu else run_point(n, backend, sizes):
                    row = result_row(r, n, rnd, backend, **({"mtu": mtu} if mtu else {}))
                    if mtu:
                        row["cpu_s_per_gb"] = round(cpu_s_per_gb(r["cpu_s_per_call"], 2, r["bytes"]), 4)
                    rows.append(emit(row))
                    medians.setdefault((backend, r["bytes"]), []).append(r["median_s"])
        for nbytes in sorted({r["bytes"] for r in rows}):
            if mtu:
                emit(netns_summary(mtu, nbytes, [r for r in rows if r["bytes"] == nbytes]))
            elif "gloo" in backends:
                g = statistics.median(medians[("gloo", nbytes)])
                line = {"bench": "backend_allreduce_summary", "ranks": n, "bytes": nbytes, "gloo_s": round(g, 7)}
                for b in (b for b in backends if b != "gloo"):
                    t = statistics.median(medians[(b, nbytes)])
                    line.update({f"{b}_s": round(t, 7), f"{b}_speed_vs_gloo": round(g / t, 3)})
                emit(line)
    return 0


def main(argv):
    ap = argparse.ArgumentParser(prog="python3 -m bench backend", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    a = ap.add_argument
    a("--ranks", default="2,4")
    a("--sizes", default="4K,1M,4M,16M,64M,256M")
    a("--rounds", type=int, default=3)
    a("--backends", default="gloo,trim,trim-raw", help=f"of {','.join(VARIANTS)}; gloo first")
    a("--netns-mtu", default="", help="e.g. 1500,9000: 2 ranks in namespaces joined by a veth pair at each MTU "
      "(root; see above)")
    # One rank of a --netns-mtu run, inside its namespace (netns_bottleneck.sh starts it).
    a("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    a("--master", default="127.0.0.1", help=argparse.SUPPRESS)
    a("--port", type=int, default=0, help=argparse.SUPPRESS)
    a("--variant", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    backends = args.backends.split(",")
    if bad := [b for b in backends if b not in VARIANTS]:
        ap.error(f"--backends: unknown backend '{bad[0]}' (known: {', '.join(VARIANTS)})")
    if args.rounds < 1:
        ap.error(f"--rounds: '{args.rounds}' (expected 1 or more)")
    try:
        sizes = [parse_size(s) for s in args.sizes.split(",")]
    except (ValueError, IndexError, KeyError):
        ap.error(f"--sizes: '{args.sizes}' is not a list of sizes like 4K,1M")
    try:
        mtus = parse_mtus(args.netns_mtu)
    except ValueError:
        ap.error(f"--netns-mtu: '{args.netns_mtu}' is not a list of MTUs (576..65535) like 1500,9000")
    if mtus and (pinned := [b for b in backends if b.endswith("-lo")]):
        ap.error(f"--netns-mtu: '{pinned[0]}' is pinned to loopback, which a namespace keeps to itself")
    if mtus and args.ranks != "2":
        ap.error(f"--netns-mtu: --ranks '{args.ranks}' (one veth pair joins two namespaces: 2)")
    os.environ.setdefault("NCCL_TRIM_LIB_DIR", str(REPO / "build" / "lib"))
    sys.path.insert(0, str(REPO / "python"))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), str(REPO), os.environ.get("PYTHONPATH", "")])
    if args.rank >= 0:
        if args.variant not in VARIANTS:
            ap.error(f"--variant: unknown backend '{args.variant}'")
        worker(args.rank, 2, args.port, args.variant, sizes, _PrintResults, args.master)
        return 0
    return run_all(args, backends, sizes, mtus)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
