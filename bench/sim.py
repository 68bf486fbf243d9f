"""trim-sim studies (a simulated leaf-spine: 16 hosts a leaf, 100 Gbit/s links, 500 ns a link).

  curve   trim/drop p99 over the baseline's loss-recovery clock and seeds: a ring AllReduce (16 MiB
          a host, 4:1 leaves, bursty background) in both modes at each minimum RTO (probe at RTO/4);
          one line a run (cached in --out), a table of the ratio per RTO, one JSON line
  scale   the ring AllReduce at 16, 64, 256 and 1024 hosts (--sizes) in four transports: trimming,
          our transport on tail-drop switches, and a TCP-like baseline (trim-sim --transport tcp:
          cumulative ACKs, SACK and RACK fast recovery, RTO) with a 1 ms (tuned) and a 200 ms (Linux default)
          minimum RTO; the congestion is the ring's own: ranks placed at random on 4-host leaves with
          2:1 uplinks, so most ring hops cross the spine and collide there at every size (no background:
          a 200 ms stall costs no simulated packets). One JSON line a run (cached in --out), a table of
          p50/p99 and trim/tcp-1ms, one summary JSON line. With the default 8M a host, a 1024-host ring
          step is one 8 KB packet a rank and nothing collides (no trim, no drop): run 1024 with
          --bytes 32M --iters 3 (the 256-host chunk of 32 KB; ~2 min a run)
  htsim   the same workloads in trim-sim and in htsim's NDP (Broadcom/csg-htsim, built by the user:
          `cd sim && make && cd datacenter && make htsim_ndp`) on the same leaf-spine, side by side.
          NDP is receiver-pulled and bounces trimmed headers to the sender; trim-sim pushes with a
          window and NACKs from the receiver. Only trim mode: NDP has no tail-drop twin.
  a table, trim vs drop unless named:
    incast            2 MiB from K = 2..16 senders into one host of a 32-host leaf (trimmable)
    allreduce_bursts  ring AllReduce, 4:1, background none / constant / bursty at 15%
    oversub           every ring hop across the spine, 1:1 / 4:1 / 8:1 leaves, ECMP vs spraying
    trim_size         where the switch cuts: plane0 (363 B of 9000) vs 64..1024 B, and a drop
                      baseline; cuts below plane 0 are NACKed and resent whole
    buffer            per-port buffer 8 packets / 1 BDP / 5 BDP"""

import itertools
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

from . import build_dir
from .codec import built, int_list, options, parser, positive
from .jsonio import emit, load_json, parse_jsonl, write_json
from .report import fmt, ratio, table as text_table


def table(name, hosts):
    """[(label, trim-sim arguments)] of table NAME."""
    def both(label, *args):  # trim vs drop, seed 1
        return [(f"{label} {m}", [*args, "--mode", m, "--seed", 1]) for m in ("trim", "drop")]
    ring = ["--hosts", hosts, "--bytes", "16M", "--iters", 3, "--ring", "random"]
    congested = [*ring, "--oversub", 4, "--background", "bursty"]
    return {
        "incast": [r for k in (2, 4, 8, 16) for r in both(f"incast k={k}", "--hosts", 32, "--hosts-per-leaf", 32,
                   "--workload", "incast", "--incast-senders", k, "--bytes", "2M", "--iters", 5)],
        "allreduce_bursts": [r for bg in ("none", "constant", "bursty") for r in both(f"allreduce bg={bg}", "--hosts", hosts,
                             "--bytes", "16M", "--iters", 5, "--oversub", 4, "--background", bg, "--bg-load", 0.15)],
        "oversub": [r for o in (1, 4, 8) for rt in ("ecmp", "spray")
                    for r in both(f"oversub {o}:1 {rt}", *ring, "--oversub", o, "--routing", rt)],
        "trim_size": [(f"trim size {t}", both("", *congested, "--trim-bytes", t)[0][1])
                      for t in ("plane0", 64, 128, 256, 512, 1024)] + [("drop (baseline)", both("", *congested)[1][1])],
        "buffer": [r for b in ("8pkt", "1bdp", "5bdp") for r in both(f"buffer {b}", *congested, "--buffer", b)],
    }[name]


def trim_sim(build, args):
    """trim-sim ARGS --json (a failure raises): its last JSON line (None when there is none)."""
    out = subprocess.run([str(build_dir(build) / "bin/trim-sim"), *map(str, args), "--json"], stdout=subprocess.PIPE,
                         text=True, check=True).stdout
    return (parse_jsonl(out) or [None])[-1]


def print_table(a):
    print("%-34s %10s %10s %9s %9s %8s %9s %8s" % ("scenario", "p50_ms", "p99_ms", "trim_rate", "drop_rate", "nmse",
                                                   "maxq_up_KB", "wall_s"), flush=True)
    for label, args in table(a.cmd, a.hosts):
        d = trim_sim(a.build, args)
        up_kb = max(d["tiers"]["leaf_up"]["max_queue_bytes"], d["tiers"]["leaf_down"]["max_queue_bytes"]) / 1024
        print("%-34s %10.3f %10.3f %9.4f %9.4f %8.4f %9.1f %8.2f" % (label, d["jct_p50_ms"], d["jct_p99_ms"],
              d["trim_rate"], d["drop_rate"], d["nmse"], up_kb, d["wall_seconds"]), flush=True)


def complete(runs, key, kind, kinds):
    """[(KEY value, [{KIND value: run} of each seed, in order, that ran all KINDS])], by KEY value; those
    with no such seed are left out."""
    by = {}
    for j in runs:
        by.setdefault(j[key], {}).setdefault(j["seed"], {})[j[kind]] = j
    return [(k, full) for k, seeds in sorted(by.items())
            if (full := [v for _, v in sorted(seeds.items()) if set(v) >= set(kinds)])]


def cached(build, f, args, **extra):
    """trim-sim ARGS's JSON with EXTRA, kept in the file F: run only when F is not readable."""
    if load_json(f) is None:  # what an earlier run left is kept
        write_json(f, {**trim_sim(build, args), **extra})
    return load_json(f)


def curve_points(runs):
    """Per RTO, the trim/drop p99 ratio over the seeds that ran both modes."""
    out = []
    for rto, full in complete(runs, "rto_us", "mode", ("trim", "drop")):
        trim, drop = ([v[m]["jct_p99_ms"] for v in full] for m in ("trim", "drop"))
        ratios = [t / d for t, d in zip(trim, drop)]
        out.append({"rto_us": rto, "seeds": len(ratios), "ratio_median": round(statistics.median(ratios), 3),
                    "ratio_min": round(min(ratios), 3), "ratio_max": round(max(ratios), 3),
                    "trim_p99_ms_median": round(statistics.median(trim), 2),
                    "drop_p99_ms_median": round(statistics.median(drop), 2)})
    return out


def curve(a):
    out = Path(a.out or build_dir(a.build) / f"sim_curve_{a.hosts}")
    out.mkdir(parents=True, exist_ok=True)
    for rto, seed, mode in itertools.product(a.rto_us, a.seeds, ("trim", "drop")):
        j = cached(a.build, out / f"{mode}_rto{rto}_seed{seed}.json", ["--hosts", a.hosts, "--workload", "allreduce",
                   "--bytes", "16M", "--iters", 5, "--mtu", 9000, "--oversub", 4, "--background", "bursty",
                   "--mode", mode, "--rto-us", rto, "--seed", seed])
        print(f"hosts {j['hosts']} rto {j['rto_us']:g} us seed {j['seed']} {j['mode']:4}: p50 {j['jct_p50_ms']:.2f} "
              f"p99 {j['jct_p99_ms']:.2f} ms, retx rack/probe/rto {j['retx_rack']}/{j['retx_tlp']}/{j['retx_rto']}, "
              f"trimmable resent {j['retx_trimmable']}, wall {j['wall_seconds']:.0f} s", flush=True)
    runs = [load_json(f) for f in sorted(out.glob("*.json"))]
    points = curve_points([j for j in runs if j])
    print(f"\n{'RTO (us)':>9} {'trim p99':>9} {'drop p99':>9} {'p99 trim/drop: median [min, max]':>34}")
    for c in points:
        print(f"{c['rto_us']:>9g} {c['trim_p99_ms_median']:>9.2f} {c['drop_p99_ms_median']:>9.2f}   "
              f"{c['ratio_median']:.3f} [{c['ratio_min']:.3f}, {c['ratio_max']:.3f}] over {c['seeds']} seeds")
    print(json.dumps({"bench": "sim_recovery_curve", "hosts": runs[0]["hosts"] if runs else 0, "curve": points},
                     separators=(",", ":")))


# The scale sweep's transports (trim-sim flags) and its fabric: what makes ring hops collide at every size.
SCALE_VARIANTS = {"trim": ["--mode", "trim"], "drop": ["--mode", "drop"],
                  "tcp_1ms": ["--mode", "drop", "--transport", "tcp", "--rto-us", 1000],
                  "tcp_200ms": ["--mode", "drop", "--transport", "tcp", "--rto-us", 200000]}
SCALE_FABRIC = ["--hosts-per-leaf", 4, "--oversub", 2, "--ring", "random", "--max-sim-ms", 1000000]


def scale_args(hosts, variant, seed, a):
    return ["--hosts", hosts, *SCALE_FABRIC, "--workload", "allreduce", "--bytes", a.bytes, "--iters", a.iters,
            "--seed", seed, *SCALE_VARIANTS[variant]]


def scale_rows(runs):
    """Per host count: each transport's p50 and p99 JCT (ms; the median over the seeds that ran all
    four) and trimming's ratio to tuned TCP. RUNS: trim-sim JSON lines with "variant" added."""
    rows = []
    for hosts, full in complete(runs, "hosts", "variant", SCALE_VARIANTS):
        row = {"hosts": hosts, "seeds": len(full), "hung": any(v[k]["hung"] for v in full for k in SCALE_VARIANTS)}
        row.update({f"{k}_{q}_ms": round(statistics.median(v[k][f"jct_{q}_ms"] for v in full), 3)
                    for k in SCALE_VARIANTS for q in ("p50", "p99")})
        rows.append({**row, **{f"trim_over_tcp_1ms_{q}": ratio(row[f"trim_{q}_ms"], row[f"tcp_1ms_{q}_ms"])
                               for q in ("p50", "p99")}})
    return rows


def falls(values):
    """Whether VALUES fall strictly from each one to the next (at least two of them)."""
    return len(values) >= 2 and all(b < a for a, b in zip(values, values[1:]))


def scale_table(rows):
    heads = ["hosts"] + [f"{k} p50/p99 ms" for k in SCALE_VARIANTS] + ["trim/tcp1ms p50", "trim/tcp1ms p99"]
    cells = [[r["hosts"], *(f"{r[f'{k}_p50_ms']:.2f}/{r[f'{k}_p99_ms']:.2f}" for k in SCALE_VARIANTS),
              fmt(r["trim_over_tcp_1ms_p50"]), fmt(r["trim_over_tcp_1ms_p99"])] for r in rows]
    return text_table(heads, cells)


def scale(a):
    out = Path(a.out or build_dir(a.build) / "sim_scale")
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for hosts, seed, variant in itertools.product(a.sizes, a.seeds, SCALE_VARIANTS):
        runs.append(cached(a.build, out / f"{variant}_n{hosts}_b{a.bytes}_i{a.iters}_seed{seed}.json",
                           scale_args(hosts, variant, seed, a), variant=variant))
        print(json.dumps({k: runs[-1][k] for k in ("variant", "hosts", "seed", "jct_p50_ms", "jct_p99_ms", "drop_rate",
                                                   "trim_rate", "retx", "rto_events", "tcp_fast_recoveries", "hung",
                                                   "wall_seconds")}), flush=True)
    rows = scale_rows(runs)
    print("\n" + scale_table(rows))
    print(json.dumps({"bench": "sim_scale", "bytes": a.bytes, "iters": a.iters, "rows": rows,
                      "p99_ratio_falls": falls([r["trim_over_tcp_1ms_p99"] for r in rows])}, separators=(",", ":")))


# htsim's two-tier fat tree as trim-sim builds its leaf-spine: 16 hosts a leaf, 4 uplinks a leaf (4:1).
TOPO = """Nodes {n}\nTiers 2\nPodsize {n}\n\nTier 0\nDownlink_speed_Gbps 100\nRadix_Down 16\nRadix_Up 4
Downlink_Latency_ns 500\nSwitch_Latency_ns 0\nOversubscribed 4\n\nTier 1\nDownlink_speed_Gbps 100\nRadix_Down {leaves}
Downlink_Latency_ns 500\nSwitch_Latency_ns 0\n"""
# Incast and permutation exact: cut to headers and resent, as NDP treats all data. NDP sprays each
# flow over 4 paths; trim-sim routes per flow by default, so the permutation also runs sprayed.
HTSIM_WORKLOADS = {"allreduce": ["--workload", "allreduce"],
                   "incast": ["--workload", "incast", "--incast-senders", 16, "--exact"],
                   "permutation": ["--workload", "permutation", "--exact"],
                   "permutation_spray": ["--workload", "permutation", "--exact", "--routing", "spray"]}


def htsim_row(name, t, txt):
    """One comparison row from trim-sim's JSON T and htsim_ndp's output TXT."""
    fin = [float(x) for x in re.findall(r"finished at ([0-9.]+)", txt)]
    stats = re.search(r"New: (\d+) Rtx: (\d+) Bounced: (\d+)", txt)
    conns = re.search(r"Connections: (\d+)", txt)
    h_ms = max(fin) / 1000 if fin else None
    new, rtx, bounced = (int(x) for x in stats.groups()) if stats else (None,) * 3
    return {"workload": name, "hosts": t["hosts"], "trimsim_ms": t["jct_p50_ms"], "htsim_ndp_ms": h_ms,
            "ratio_htsim_over_trimsim": ratio(h_ms, t["jct_p50_ms"]),
            "htsim_flows_finished": len(fin), "htsim_flows": int(conns.group(1)) if conns else 0,
            "trimsim_trimmed": t["trimmed"], "trimsim_exact_cut": t.get("exact_cut", 0),
            "htsim_new": new, "htsim_rtx": rtx, "htsim_bounced": bounced}


def htsim(a):
    ndp = Path(a.htsim_dir) / "htsim_ndp"
    if not os.access(ndp, os.X_OK):
        sys.exit(f"sim htsim: no htsim_ndp in {a.htsim_dir} (build csg-htsim first)")
    out = Path(a.out or build_dir(a.build) / f"htsim_crosscheck_{a.hosts}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "leafspine.topo").write_text(TOPO.format(n=a.hosts, leaves=a.hosts // 16))
    rows, results = [], out / "results.jsonl"
    results.write_text("")
    for name, w in HTSIM_WORKLOADS.items():
        t = trim_sim(a.build, ["--hosts", a.hosts, *w, "--bytes", a.bytes, "--iters", 1, "--mtu", 9000, "--oversub", 4,
                               "--background", "none", "--mode", "trim", "--seed", 1, "--cm", out / f"{name}.cm"])
        write_json(out / f"{name}.trimsim.json", t)
        txt = subprocess.run([str(ndp.resolve()), "-nodes", str(a.hosts), "-tm", f"{name}.cm", "-topo", "leafspine.topo",
                              "-mtu", "9000", "-q", str(a.queue_pkts), "-strat", "ecmp_host", "-paths", "4", "-cwnd", "16",
                              "-end", "10000000", "-seed", "1"], cwd=out, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, errors="replace").stdout
        (out / f"{name}.htsim.txt").write_text(txt)
        rows.append(emit(htsim_row(name, t, txt), results))
    print(f"\n{'workload':12} {'trim-sim ms':>12} {'htsim NDP ms':>13} {'ratio':>7} {'trim-sim trims':>15} {'htsim bounced':>14}")
    for r in rows:
        print(f"{r['workload']:12} {r['trimsim_ms']:>12.3f} {fmt(r['htsim_ndp_ms']):>13} "
              f"{fmt(r['ratio_htsim_over_trimsim']):>7} {r['trimsim_trimmed'] + r['trimsim_exact_cut']:>15} "
              f"{fmt(r['htsim_bounced'], 'd'):>14}")
    print(json.dumps({"bench": "htsim_crosscheck", "rows": rows}, separators=(",", ":")))


def parse(argv):
    ap = parser("sim", __doc__)[1]
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = options(sub.add_parser("curve", help="trim/drop p99 over the minimum RTO and seeds"), hosts=256,
                rto_us=[100, 500, 1000, 2500, 10000], seeds=[1, 2, 3])
    sc = options(sub.add_parser("scale", help="ring p50/p99: trimming against TCP-like baselines, 16..1024 hosts"),
                 bytes="8M", iters=10, seeds=[1])
    sc.add_argument("--sizes", type=int_list, default=[16, 64, 256, 1024], help="host counts (each >= 2)")
    h = sub.add_parser("htsim", help="trim-sim against htsim's NDP")
    h.add_argument("htsim_dir", help="the folder holding the built htsim_ndp (csg-htsim's sim/datacenter)")
    h.add_argument("--hosts", type=positive, default=64, help="a multiple of 16 (hosts per leaf)")
    h.add_argument("--queue-pkts", type=positive, default=10, help="htsim's data queue (trim-sim's 1 BDP is 9.6 packets)")
    options(h, bytes="16M")
    for p in (c, h, sc):
        p.add_argument("--out", default="", help="results folder (default BUILD/sim_curve_HOSTS, "
                                                   "BUILD/htsim_crosscheck_HOSTS, BUILD/sim_scale)")
    for name in ("incast", "allreduce_bursts", "oversub", "trim_size", "buffer"):
        options(sub.add_parser(name, help="a trim-sim table"), hosts=64)
    for p in sub.choices.values():
        options(p, build="build")
    a = ap.parse_args(argv)
    if a.cmd == "scale" and min(a.sizes) < 2:
        ap.error(f"--sizes {','.join(map(str, a.sizes))}: every host count must be >= 2")
    if a.cmd == "htsim" and a.hosts % 16:
        ap.error(f"--hosts {a.hosts} is not a multiple of 16 (hosts per leaf)")
    return a


def main(argv):
    a = parse(argv)
    if not built("sim", a.build, "bin/trim-sim"):
        return 1
    {"curve": curve, "htsim": htsim, "scale": scale}.get(a.cmd, print_table)(a)
    return 0
