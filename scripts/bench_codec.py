#!/usr/bin/env python3
"""The transport's speed and CPU cost over codec worker threads, against baselines in the same run.

For each round and each NCCL_TRIM_CODEC_THREADS value T, on loopback:
  allreduce_none   trim-harness ring AllReduce, NCCL_TRIM_SCHEME=none (raw, zero-copy): the ceiling
  allreduce_rht    the same with the default encoding (rht; the reduce-scatter half encoded), T workers
  sendrecv         one connection, exact (NCCL's p2p traffic: zero-copy), T workers (unused)
  sendrecv_rht     one connection, every transfer encoded (--op allreduce, NCCL_TRIM_PHASE=all), T workers
  iperf3           one TCP stream (once per round): what a socket moves on this machine
Every run reports its rate and its CPU cost per GB moved (= cores kept busy per GB/s): for the
harness, the CPU seconds of the plugin's own threads (trim-engine, trim-codec; "plugin_cpu_s"),
since the harness's data generation and checks are no part of the transport (the whole
processes' figure is "process_cpu_s_per_gb"); for iperf3, both of its processes. One JSON line per run,
then one summary line per T ("bench":"codec_summary") with the medians and the ratios
rht/none (goal >= 0.95) and sendrecv/iperf3 (goal >= 1.0).

Usage: scripts/bench_codec.py [--threads 0,1,2,4] [--bytes 64M] [--iters 10] [--ranks 2]
                              [--rounds 2] [--build build] [--iperf-seconds 3] [--out FILE]
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

PORT = 5297


def size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * mult[text[-1]] if text[-1] in mult else int(text)


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd, env):
    """Runs cmd; returns (stdout, wall_s, cpu_s of it and its children)."""
    cpu0, t0 = children_cpu_s(), time.monotonic()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=900)
    return p.stdout, time.monotonic() - t0, children_cpu_s() - cpu0, p.returncode


def harness(args, kind, threads, extra_env, harness_args):
    env = dict(os.environ)
    env["NCCL_TRIM_CODEC_THREADS"] = str(threads)
    env.update(extra_env)
    cmd = [os.path.join(args.build, "bin", "trim-harness")] + harness_args + [
        "--bytes", args.bytes, "--iters", str(args.iters), "--deadline-s", "600", "--json"]
    out, wall, cpu, rc = timed(cmd, env)
    lines = [l for l in out.splitlines() if l.startswith("{")]
    j = json.loads(lines[-1]) if lines else {"error": f"no JSON (exit {rc})", "verify": "fail"}
    b, n, runs = size(args.bytes), j.get("ranks", 2), args.iters + 1  # + the warm-up iteration
    # Bytes that crossed the network: a ring AllReduce sends 2(n-1) slices of b/n per rank.
    moved = b * runs * (2 * (n - 1) if "allreduce" in kind else 1)
    rate = j.get("busbw_gbps" if "allreduce" in kind else "gbps", 0.0)
    plugin_cpu = j.get("plugin_cpu_s", 0.0)
    return {"bench": "codec", "kind": kind, "threads": threads, "gbps": rate, "verify": j.get("verify"),
            "codec_tasks": j.get("codec_tasks"), "error": j.get("error", ""), "wall_s": round(wall, 3),
            "plugin_cpu_s": plugin_cpu, "cpu_s_per_gb": round(plugin_cpu / (moved / 1e9), 3),
            "process_cpu_s_per_gb": round(cpu / (moved / 1e9), 3), "ranks": n, "bytes": b}


def iperf3(args):
    if shutil.which("iperf3") is None:  # (the GPU machine has none): the ratio to it is then 0
        return {"bench": "codec", "kind": "iperf3", "gbps": 0.0, "skipped": "iperf3 not installed", "error": ""}
    server = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(PORT)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    cpu0 = children_cpu_s()
    out, wall, _, _ = timed(["iperf3", "-c", "127.0.0.1", "-p", str(PORT), "-t", str(args.iperf_seconds), "-J"],
                            dict(os.environ))
    server.wait(timeout=30)
    cpu = children_cpu_s() - cpu0  # client and server
    d = json.loads(out)
    gbps = d["end"]["sum_received"]["bits_per_second"] / 1e9
    moved = d["end"]["sum_received"]["bytes"]
    return {"bench": "codec", "kind": "iperf3", "threads": None, "gbps": round(gbps, 4), "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3), "cpu_s_per_gb": round(cpu / (moved / 1e9), 3), "error": ""}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="0,1,2,4")
    ap.add_argument("--bytes", default="64M")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--build", default="build")
    ap.add_argument("--iperf-seconds", type=int, default=3)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    results = []

    def emit(r):
        results.append(r)
        line = json.dumps(r)
        print(line, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(line + "\n")

    ar = ["--mode", "allreduce", "--ranks", str(args.ranks)]
    for _ in range(args.rounds):
        emit(iperf3(args))
        for t in threads:  # alternated within the round, so drift in the machine hits all alike
            emit(harness(args, "allreduce_none", t, {"NCCL_TRIM_SCHEME": "none"}, ar))
            emit(harness(args, "allreduce_rht", t, {"NCCL_TRIM_SCHEME": "rht"}, ar))
            emit(harness(args, "sendrecv", t, {}, ["--mode", "sendrecv"]))
            emit(harness(args, "sendrecv_rht", t, {"NCCL_TRIM_PHASE": "all"}, ["--mode", "sendrecv", "--op", "allreduce"]))

    def med(kind, t, key="gbps"):
        v = [r[key] for r in results if r["kind"] == kind and r.get("threads") == t and not r.get("error")]
        return statistics.median(v) if v else 0.0

    ran = [r for r in results if r["kind"] == "iperf3" and "skipped" not in r]
    iperf = statistics.median([r["gbps"] for r in ran] or [0.0])
    iperf_cpu = statistics.median([r.get("cpu_s_per_gb", 0) for r in ran] or [0.0])
    failed = [r for r in results if r.get("error") or r.get("verify") == "fail"]
    for t in threads:
        none, rht = med("allreduce_none", t), med("allreduce_rht", t)
        sr, srr = med("sendrecv", t), med("sendrecv_rht", t)
        print(json.dumps({
            "bench": "codec_summary", "threads": t, "cpus": os.cpu_count(), "bytes": args.bytes, "ranks": args.ranks,
            "allreduce_none_busbw_gbps": none, "allreduce_rht_busbw_gbps": rht,
            "rht_over_none": round(rht / none, 3) if none else 0.0,
            "sendrecv_gbps": sr, "sendrecv_rht_gbps": srr, "iperf3_gbps": iperf,
            "sendrecv_over_iperf3": round(sr / iperf, 3) if iperf else 0.0,
            "sendrecv_rht_over_iperf3": round(srr / iperf, 3) if iperf else 0.0,
            "cpu_s_per_gb": {k: med(k, t, "cpu_s_per_gb") for k in
                             ("allreduce_none", "allreduce_rht", "sendrecv", "sendrecv_rht")},
            "iperf3_cpu_s_per_gb": iperf_cpu}), flush=True)
    if failed:
        print(f"bench_codec: {len(failed)} run(s) failed", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
