"""The live scenarios: the real plugin through trim-switch on loopback (the live counterparts of
`python -m bench sim NAME`). Each run starts one trim-switch (UDP, 1 Gbit/s ports, 8-packet
buffer, 200 us unless named) and trim-harness ranks through it (NCCL_TRIM_SWITCH, 4 KiB packets),
once per case with --mode trim and --mode drop, same seed and cross traffic (exact, 4 KiB):
  incast            1 real sender (sendrecv --op allreduce, NCCL_TRIM_PHASE=all, 1 MiB) + K = 2..16
                    emulated senders (--cross incast:K:0.04:all) into one receiver
  allreduce_bursts  4-rank ring AllReduce of 1 MiB, background none / const:0.15 / onoff:1:3:17
  oversub           the AllReduce with the egress port at 2 / 0.5 / 0.25 Gbit/s, const:0.1 background
  trim_size         --trim-bytes plane0 / 64..1024 (IP bytes) plus a drop baseline, incast:8:0.04
  buffer            8 packets / 1 BDP / 5 BDP (BDP = 1 Gbit/s x 2 x 200 us = 50,000 B), incast:8:0.04
Each prints a table and one JSON line (every row, p50/p99 ratios trim/drop); files under
BUILD/scenarios/live_NAME/ (LABEL.harness.json, LABEL.switch.jsonl, LABEL.harness.log, rows.jsonl).
Sized for a 2-core VM, where scheduling noise dominates tails: compare medians and counters."""

import json
import sys
import time

from . import build_dir
from .codec import built, harness, options, parser
from .jsonio import emit, read_jsonl, write_json
from .proc import start_switch, stop

INCAST8 = ["--cross", "incast:8:0.04:all", "--seed", 7]
# name -> title, iterations (full, --quick)
SCENARIOS = {"incast": ("live incast", (100, 10)), "allreduce_bursts": ("live allreduce bursts", (60, 10)),
             "oversub": ("live oversubscribed uplink", (40, 8)), "trim_size": ("live trim size", (40, 10)),
             "buffer": ("live buffer", (40, 10))}
HEADER = ("%-28s %8s %8s %7s %9s %11s %9s %5s %9s %6s %6s" % ("scenario", "p50_ms", "p99_ms", "gbps", "trim_rate",
          "sw_trim/drop", "acc/nack", "retx", "nmse", "verify", "wall_s"))


def switch(mode, *more, rate=1, buffer=(8, 0)):
    """trim-switch arguments: MODE, RATE Gbit/s ports, BUFFER (packets, bytes), 200 us, MORE."""
    return ["--mode", mode, "--rate-gbps", rate, "--buffer-packets", buffer[0], "--buffer-bytes", buffer[1],
            "--prop-delay-us", 200, *more]


def allreduce(iters, op=("--mode", "allreduce", "--ranks", 4), deadline_s=90):
    return [*op, "--bytes", "1M", "--iters", iters, "--warmup", 1, "--seed", 7, "--deadline-s", deadline_s]


def scenario(name, quick):
    """(title, [(label, rank env, switch args, harness args)]) of scenario NAME."""
    modes, it = ("trim", "drop"), SCENARIOS[name][1][quick]
    if name == "incast":
        h = allreduce(it, ("--mode", "sendrecv", "--op", "allreduce", "--ranks", 2), 60)
        return (f"1 real sender (1 MiB per iteration, {it} iterations) + K cross senders -> 1 receiver, 1 Gbit/s, "
                "8-packet buffer, 200 us", [(f"incast k={k} {m}", {"NCCL_TRIM_PHASE": "all"},
                switch(m, "--cross", f"incast:{k}:0.04:all", "--seed", 7), h) for k in (2, 4, 8, 16) for m in modes])
    if name == "allreduce_bursts":
        bg = {"none": [], "constant": ["--cross", "const:0.15:all"], "onoff": ["--cross", "onoff:1:3:17:all"]}
        return (f"4-rank ring AllReduce of 1 MiB, {it} iterations, 1 Gbit/s, 8-packet buffer, 200 us",
                [(f"allreduce bg={b} {m}", {}, switch(m, *c, "--seed", 7), allreduce(it))
                 for b, c in bg.items() for m in modes])
    if name == "oversub":
        return (f"4-rank ring AllReduce of 1 MiB, {it} iterations, const 0.1 Gbit/s background, 8-packet buffer, 200 us",
                [(f"oversub {r}G {m}", {}, switch(m, "--cross", "const:0.1:all", "--seed", 7, rate=r),
                  allreduce(it)) for r in ("2", "0.5", "0.25") for m in modes])
    if name == "trim_size":
        return (f"4-rank ring AllReduce of 1 MiB, {it} iterations, 1 Gbit/s, 8-packet buffer, 200 us, incast:8:0.04 background",
                [(f"trim size {t or 'plane0'}", {}, switch("trim", "--trim-bytes", t, *INCAST8), allreduce(it))
                 for t in (0, 64, 128, 256, 512, 1024)] + [("drop (baseline)", {}, switch("drop", *INCAST8), allreduce(it))])
    bdp = int(1e9 * 2 * 200e-6 / 8)  # 1 Gbit/s x RTT (2 x 200 us): 50,000 B, ~12 packets of 4 KiB
    bufs = {"8pkt": (8, 0), "1bdp": (0, bdp), "5bdp": (0, 5 * bdp)}
    return (f"4-rank ring AllReduce of 1 MiB, {it} iterations, 1 Gbit/s, 200 us (BDP = 1 Gbit/s x 2 x 200 us = {bdp} B), "
            "incast:8:0.04 background", [(f"buffer {b} {m}", {}, switch(m, *INCAST8, buffer=buf), allreduce(it))
                                         for b, buf in bufs.items() for m in modes])


def through_switch(build, switch_args, harness_args, env, out_dir, tag, mtu=4096):
    """One trim-switch on loopback and one trim-harness run through it (4 KiB packets unless MTU or
    ENV says otherwise); files OUT_DIR/TAG.{switch.jsonl,harness.json,harness.log}. Returns (the
    harness's JSON, the switch's final line, exit status, wall s)."""
    sw, port = start_switch(build_dir(build) / "bin/trim-switch", switch_args, f"{out_dir}/{tag}.switch.jsonl")
    try:
        with open(f"{out_dir}/{tag}.harness.log", "w") as log:
            h, rc, _, wall_s = harness(build, harness_args, {"NCCL_TRIM_MTU": mtu, **env, "NCCL_TRIM_SWITCH": f"127.0.0.1:{port}"},
                                       600, stderr=log)
    finally:
        stop(sw)
    write_json(f"{out_dir}/{tag}.harness.json", h)
    final = [d for d in read_jsonl(f"{out_dir}/{tag}.switch.jsonl") if d.get("event") == "final"]
    return h, (final[-1] if final else {}), rc, wall_s


def row(label, h, s, wall_s):
    """A table row's dict from the harness's JSON H and the switch's final line S."""
    return {"label": label, **{k: h.get(k) for k in ("p50_ms", "p99_ms", "gbps", "busbw_gbps", "trim_rate", "retransmits",
            "dup_packets", "nmse", "verify", "replicas_identical")}, "sw_trimmed": s.get("forwarded_trimmed"),
            # our packets the switch dropped (cross traffic's own drops excluded: sw_dropped_all has them)
            "sw_dropped": (s["datagrams"] - s["bad"] - s["forwarded"]) if s else None, "sw_dropped_all": s.get("dropped"),
            "trimmed_accepted": h.get("trimmed_accepted"), "trimmed_nacked": h.get("trimmed_nacked"),
            "sw_cross": s.get("cross"), "sw_cross_skipped": s.get("cross_skipped"), "sw_max_queue": s.get("max_queue"),
            "wall_s": round(wall_s, 2)}


def line(r):
    return "%-28s %8.2f %8.2f %7.3f %9.4f %11s %9s %5d %9.3g %6s %6.1f" % (
        r["label"], r["p50_ms"], r["p99_ms"], r["gbps"], r["trim_rate"], f"{r['sw_trimmed']}/{r['sw_dropped']}",
        f"{r['trimmed_accepted']}/{r['trimmed_nacked']}", r["retransmits"], r["nmse"], r["verify"], r["wall_s"])


def pairs(rows):
    """Rows labelled "X trim" and "X drop" paired (p50/p99 ratios trim/drop); with a "drop
    (baseline)" row, every other row is paired with it."""
    by = {r["label"]: r for r in rows}
    base = by.get("drop (baseline)")
    todo = [(r["label"][:-5], r, by.get(r["label"][:-5] + " drop")) for r in rows if r["label"].endswith(" trim")]
    todo += [(r["label"] + " vs drop (baseline)", r, base) for r in rows
             if base and r is not base and not r["label"].endswith((" trim", " drop"))]
    return [{"case": case, **{f"{q}_ratio": round(t[f"{q}_ms"] / d[f"{q}_ms"], 4) if d[f"{q}_ms"] > 0 else None
             for q in ("p50", "p99")}, "retx_trim": t["retransmits"], "retx_drop": d["retransmits"]}
            for case, t, d in todo if d]


def run(name, a):
    out = build_dir(a.build) / "scenarios" / f"live_{name}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "rows.jsonl").unlink(missing_ok=True)
    t0 = time.monotonic()
    title, cases = scenario(name, a.quick)
    print(f"== {SCENARIOS[name][0]}: {title}\n{HEADER}", flush=True)
    rows = []
    for label, env, sw, h in cases:
        # --trim-exact 0 reproduces the runs recorded before exact packets were cut to headers by default
        hj, s, rc, wall_s = through_switch(a.build, ["--trim-exact", a.trim_exact, *sw], h, env, out,
                                           label.replace(" ", "_"), a.mtu)
        if rc or "p50_ms" not in hj:
            print(f"{name}: trim-harness ({label}) failed (exit {rc}): {json.dumps(hj)}; see {out}", file=sys.stderr)
            return 1
        rows.append(row(label, hj, s, wall_s))
        with open(out / "rows.jsonl", "a") as f:
            f.write(json.dumps(rows[-1]) + "\n")
        print(line(rows[-1]), flush=True)
    emit({"scenario": f"live_{name}", "quick": a.quick, "wall_s": round(time.monotonic() - t0, 1), "pairs": pairs(rows),
          "rows": [{k: r[k] for k in ("label", "p50_ms", "p99_ms", "gbps", "trim_rate", "retransmits", "nmse", "verify",
                                      "sw_trimmed", "sw_dropped")} for r in rows]})
    return 0


def main(argv):
    ap = options(parser("scenarios", __doc__)[1], build="build")
    ap.add_argument("names", nargs="+", choices=list(SCENARIOS), metavar="NAME", help=", ".join(SCENARIOS))
    ap.add_argument("--quick", action="store_true", help="a few iterations (~5-9 s a scenario)")
    ap.add_argument("--trim-exact", choices=("0", "1"), default="1", help="trim-switch --trim-exact")
    ap.add_argument("--mtu", type=int, default=4096, help="NCCL_TRIM_MTU of the ranks")
    a = ap.parse_args(argv)
    if not built("scenarios", a.build, "bin/trim-switch", "bin/trim-harness", "lib/libnccl-net-trim.so"):
        return 1
    return max(run(name, a) for name in a.names)
