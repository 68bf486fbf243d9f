"""Codec speed and CPU over NCCL_TRIM_CODEC_THREADS (`codec`), and what encoding costs when nothing
is trimmed (`codec encoding`), on loopback with trim-harness.

codec: per round one iperf3 TCP stream, then for each thread count T, alternated:
  allreduce_none  ring AllReduce, NCCL_TRIM_SCHEME=none (raw, zero-copy): the ceiling
  allreduce_rht   the same with the default encoding (the reduce-scatter half encoded)
  sendrecv        one connection, exact (NCCL's p2p traffic: zero-copy)
  sendrecv_rht    one connection, every transfer encoded (--op allreduce, NCCL_TRIM_PHASE=all)
Each run reports its rate and CPU seconds per GB moved (= cores busy per GB/s): the plugin's own
threads (plugin_cpu_s; the whole processes' figure is process_cpu_s_per_gb), for iperf3 both of
its processes. Then a codec_summary line per T: medians, rht/none (goal >= 0.95) and
sendrecv/iperf3 (goal >= 1.0).
encoding: an AllReduce with --scheme against NCCL_TRIM_SCHEME=none, alternated; one summary line,
last "ratio: X" (busbw of the scheme / none; target >= 0.9)."""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

from . import build_dir
from .jsonio import parse_jsonl
from .proc import cpu_run
from .report import ratio
from .rounds import alternate
from .workloads.ddp_train import parse_size

IPERF_PORT = 5297
KINDS = {  # kind -> (rank environment, harness mode)
    "allreduce_none": ({"NCCL_TRIM_SCHEME": "none"}, ["--mode", "allreduce"]),
    "allreduce_rht": ({"NCCL_TRIM_SCHEME": "rht"}, ["--mode", "allreduce"]),
    "sendrecv": ({}, ["--mode", "sendrecv"]),
    "sendrecv_rht": ({"NCCL_TRIM_PHASE": "all"}, ["--mode", "sendrecv", "--op", "allreduce"]),
}


def _arg(pattern, what, convert=str):
    """An argparse type: TEXT matching PATTERN, converted; else an error naming it."""
    def check(text):
        if not re.fullmatch(pattern, text):
            raise argparse.ArgumentTypeError(f"'{text}' is not {what}")
        return convert(text)
    return check


size_arg = _arg(r"[1-9][0-9]*[KMG]?", "a size as trim-harness takes it (N, NK, NM or NG)")  # kept as text
positive = _arg(r"[1-9][0-9]*", "a positive integer", int)
int_list = _arg(r"[0-9]+(,[0-9]+)*", "a comma-separated list of integers >= 0", lambda t: [int(x) for x in t.split(",")])


# The types of the options folded into options(): the rest are positive integers or their default's type.
TYPES = {"bytes": size_arg, "threads": int_list, "rto_us": int_list, "seeds": int_list}


def options(ap, **defaults):
    """An option --NAME (underscores as dashes) for each NAME=DEFAULT, typed by TYPES, by positive for
    an int default, else by the default's type. Options with a help text are added one by one."""
    for name, default in defaults.items():
        kind = TYPES.get(name) or (positive if type(default) is int else type(default))
        ap.add_argument("--" + name.replace("_", "-"), type=kind, default=default)
    return ap


def parser(command, doc, argv=(), word=None):
    """(ARGV starts with WORD, an ArgumentParser for `python -m bench COMMAND [WORD]` described by DOC)."""
    sub = bool(word) and list(argv[:1]) == [word]
    return sub, argparse.ArgumentParser(prog=f"python -m bench {command}" + f" {word}" * sub, description=doc,
                                        formatter_class=argparse.RawDescriptionHelpFormatter)


def built(command, build, *paths):
    """Whether BUILD holds PATHS (bin/trim-harness, ...); if not, says which on stderr."""
    missing = [p for p in paths if not (build_dir(build) / p).is_file()]
    if missing:
        print(f"{command}: {build_dir(build) / missing[0]} not built (make -j2 all, or pass --build)", file=sys.stderr)
    return not missing


def harness(build, args, env=None, timeout_s=900, stderr=subprocess.DEVNULL):
    """trim-harness ARGS --json with ENV added: (its last JSON line, exit status, cpu_s, wall_s)."""
    env = {**os.environ, **{k: str(v) for k, v in (env or {}).items()}}
    rc, cpu_s, wall_s, out = cpu_run([str(build_dir(build) / "bin/trim-harness"), *map(str, args), "--json"], timeout_s,
                                     env=env, stderr=stderr)
    j = (parse_jsonl(out) or [{"error": f"no JSON (exit {rc})", "verify": "fail"}])[-1]
    return j, rc, cpu_s, wall_s


def iperf3(seconds, port=IPERF_PORT):
    """One iperf3 TCP stream on loopback: (Gbit/s, bytes received, CPU s of client and server,
    wall s), or None without iperf3."""
    if shutil.which("iperf3") is None:
        return None
    # -1: the server serves one client and exits; sh waits for it, so its CPU time counts too
    _, cpu_s, wall_s, out = cpu_run(["sh", "-c", f"iperf3 -s -1 -p {port} >/dev/null 2>&1 & sleep 0.5; "
                                     f"iperf3 -c 127.0.0.1 -p {port} -t {seconds} -J; wait"], seconds + 60)
    end = json.loads(out)["end"]["sum_received"]
    return end["bits_per_second"] / 1e9, end["bytes"], cpu_s, wall_s


def codec_run(a, label):
    if label == "iperf3":
        r = iperf3(a.iperf_seconds)
        if r is None:  # (the GPU machine has none): the ratios to it are then 0
            return {"bench": "codec", "kind": "iperf3", "gbps": 0.0, "skipped": "iperf3 not installed", "error": ""}
        gbps, moved, cpu, wall = r
        return {"bench": "codec", "kind": "iperf3", "threads": None, "gbps": round(gbps, 4), "wall_s": round(wall, 3),
                "cpu_s": round(cpu, 3), "cpu_s_per_gb": round(cpu / (moved / 1e9), 3), "error": ""}
    kind, threads = label.split(":")
    env, mode = KINDS[kind]
    ranks = ["--ranks", a.ranks] if kind.startswith("allreduce") else []
    j, _, cpu, wall = harness(a.build, [*mode, *ranks, "--bytes", a.bytes, "--iters", a.iters, "--deadline-s", 600],
                              {"NCCL_TRIM_CODEC_THREADS": threads, **env})
    b, n = parse_size(a.bytes), j.get("ranks", 2)
    # Bytes that crossed the network (+ 1 warm-up iteration): a ring AllReduce sends 2(n-1) slices of b/n per rank.
    gb = b * (a.iters + 1) * (2 * (n - 1) if "allreduce" in kind else 1) / 1e9
    plugin_cpu = j.get("plugin_cpu_s", 0.0)
    return {"bench": "codec", "kind": kind, "threads": int(threads), "verify": j.get("verify"),
            "gbps": j.get("busbw_gbps" if "allreduce" in kind else "gbps", 0.0), "codec_tasks": j.get("codec_tasks"),
            "error": j.get("error", ""), "wall_s": wall, "plugin_cpu_s": plugin_cpu,
            "cpu_s_per_gb": round(plugin_cpu / gb, 3), "process_cpu_s_per_gb": round(cpu / gb, 3), "ranks": n, "bytes": b}


def codec_summary(rows, threads, bytes_text, ranks):
    def med(kind, t=None, key="gbps"):
        v = [r[key] for r in rows if r.get("kind") == kind and r.get("threads") == t and not r.get("error")
             and "skipped" not in r]
        return statistics.median(v) if v else 0.0
    iperf, out = med("iperf3"), []
    for t in threads:
        none, rht, sr, srr = (med(k, t) for k in KINDS)
        out.append({"bench": "codec_summary", "threads": t, "cpus": os.cpu_count(), "bytes": bytes_text, "ranks": ranks,
                    "allreduce_none_busbw_gbps": none, "allreduce_rht_busbw_gbps": rht,
                    "rht_over_none": ratio(rht, none) or 0.0, "sendrecv_gbps": sr, "sendrecv_rht_gbps": srr,
                    "iperf3_gbps": iperf, "sendrecv_over_iperf3": ratio(sr, iperf) or 0.0,
                    "sendrecv_rht_over_iperf3": ratio(srr, iperf) or 0.0,
                    "cpu_s_per_gb": {k: med(k, t, "cpu_s_per_gb") for k in KINDS},
                    "iperf3_cpu_s_per_gb": med("iperf3", key="cpu_s_per_gb")})
    return out


def encoding_summary(rows, scheme):
    def med(s):
        v = [r["busbw_gbps"] for r in rows if r.get("scheme") == s and r.get("verify") != "fail"]
        return statistics.median(v) if v else 0.0
    none, enc = med("none"), med(scheme)
    return {"bench": "encoding", "scheme": scheme, "ranks": rows[0].get("ranks"), "bytes": rows[0].get("bytes"),
            "rounds": max(r["round"] for r in rows), "none_busbw_gbps": round(none, 4), "busbw_gbps": round(enc, 4),
            "verify": sorted({str(r.get("verify")) for r in rows if r.get("scheme") == scheme}),
            "failed_runs": sum(1 for r in rows if r.get("verify") == "fail" or r.get("error")),
            "ratio": ratio(enc, none) or 0.0}


def parse(argv):
    enc, ap = parser("codec", __doc__, argv, "encoding")
    options(ap, bytes="64M", iters=5 if enc else 10, rounds=3 if enc else 2, ranks=2, build="build")
    if enc:
        ap.add_argument("--scheme", default="rht", help="NCCL_TRIM_SCHEME against none")
    else:
        ap.add_argument("--threads", type=int_list, default=[0, 1, 2, 4], help="NCCL_TRIM_CODEC_THREADS values")
        options(ap, iperf_seconds=3)
        ap.add_argument("--out", default="", help="also append the JSON lines to this file")
    return enc, ap.parse_args(argv[enc:])


def main(argv):
    enc, a = parse(argv)
    if not built("codec", a.build, "bin/trim-harness"):
        return 1
    if enc:
        def run(scheme, _):
            j = harness(a.build, ["--mode", "allreduce", "--ranks", a.ranks, "--bytes", a.bytes, "--iters", a.iters],
                        {"NCCL_TRIM_SCHEME": scheme})[0]
            return {**j, "scheme": scheme}
        s = encoding_summary(alternate(["none", a.scheme], a.rounds, run), a.scheme)
        print(json.dumps(s))
        print(f"ratio: {s['ratio']:.3f}")
        return 1 if s["failed_runs"] else 0
    labels = ["iperf3"] + [f"{k}:{t}" for t in a.threads for k in KINDS]
    rows = alternate(labels, a.rounds, lambda label, _: codec_run(a, label), a.out or None)
    for s in codec_summary(rows, a.threads, a.bytes, a.ranks):
        print(json.dumps(s), flush=True)
    failed = [r for r in rows if r.get("error") or r.get("verify") == "fail"]
    if failed:
        print(f"codec: {len(failed)} run(s) failed", file=sys.stderr)
    return 1 if failed else 0
