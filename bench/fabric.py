"""Native vs fabric-mode trimming at one trim size (`fabric`), and NCCL_TRIM_RX_CUT off vs on
(`fabric rx-cut`, root: trim-switch --fabric 1 as the TUN router of scripts/netns_bottleneck.sh).

fabric: the demo's AllReduce (4 ranks, 1 MiB, 60 iterations, trim-switch on loopback at 1 Gbit/s,
8-packet buffer, 200 us, incast cross traffic, MTU 4096) with the switch as
  native             the demo's: cut at the plane-0 trim point, exact packets cut to a header
  native-SIZE        native, cut at SIZE - 18 IP bytes (what a SIZE-byte fabric trim keeps)
  fabric-SIZE        --fabric 1 --trim-size SIZE: trims by DSCP, exact classes dropped
  fabric-SIZE-sized  the same, the ranks with NCCL_TRIM_FABRIC_TRIM_BYTES=SIZE
rx-cut: a 2-rank AllReduce, each trimmable packet trimmed with probability --p at --size whatever
the queue (so every configuration sees the same trims), the switch leaving the lengths it cuts:
  fixed            the switch rewrites the lengths (the kernel takes every cut); knob off
  ip-keep-off      --rewrite-ip-length keep, NCCL_TRIM_RX_CUT=off: every cut a loss, resent
  ip-keep-packet   the same, NCCL_TRIM_RX_CUT=packet: cuts read from the packet socket
  udp-keep-packet  --rewrite-udp-length keep, NCCL_TRIM_RX_CUT=packet
Configurations alternated round by round (the machine's load drifts); one JSON line per run,
then one summary line per configuration (medians over the rounds)."""

import json
import os
import statistics
import subprocess
import tempfile

from . import SCRIPTS, build_dir
from .codec import built, options, parser, positive
from .jsonio import parse_jsonl
from .proc import cpu_run
from .rounds import alternate
from .scenarios import INCAST8, allreduce, switch, through_switch

FABRIC_KEYS = ("p50_ms", "p99_ms", "gbps", "nmse", "trim_rate", "retransmits", "trimmed_accepted", "trimmed_marked",
               "header_cuts", "replicas_identical", "verify")
RX_CUT_KEYS = ("p50_ms", "p99_ms", "plugin_cpu_s", "nmse", "retransmits", "dup_packets", "trimmed_accepted",
               "cut_received", "cut_rejected", "replicas_identical", "verify")
NO_RESULT = {"verify": "fail", "error": "no result"}


def fabric_plan(size):
    """config -> (switch arguments, rank environment)."""
    fab = ["--fabric", 1, "--trim-size", size]
    return {"native": (["--trim-exact", 1], {}), f"native-{size}": (["--trim-exact", 1, "--trim-bytes", size - 18], {}),
            f"fabric-{size}": (fab, {}), f"fabric-{size}-sized": (fab, {"NCCL_TRIM_FABRIC_TRIM_BYTES": size})}


RX_CUT = {"fixed": ([], "off"), "ip-keep-off": (["--rewrite-ip-length", "keep"], "off"),  # switch arguments, knob
          "ip-keep-packet": (["--rewrite-ip-length", "keep"], "packet"),
          "udp-keep-packet": (["--rewrite-udp-length", "keep"], "packet")}


def rx_cut_command(a, config):
    """(command, NCCL_TRIM_RX_CUT) of one rx-cut run."""
    keep, knob = RX_CUT[config]
    sw = ["--mode", "random", "--random-p", a.p, "--fabric", 1, "--trim-size", a.size, *keep]
    return [str(x) for x in [SCRIPTS / "netns_bottleneck.sh", "--build", a.build, "--ranks", 2, "--rate-gbps", a.rate_gbps,
            "--seed", 5, *(y for x in sw for y in ("--switch-arg", x)), "--", build_dir(a.build) / "bin/trim-harness",
            "--json", "--deadline-s", 90, "--netns", "{netns}", "--mode", "allreduce", "--ranks", 2, "--bytes", a.bytes,
            "--iters", a.iters, "--warmup", 1, "--seed", 3]], knob


def rx_cut_row(config, lines):
    """One rx-cut run's row from its JSON lines (the harness's result, the switch's final stats)."""
    h = next((d for d in reversed(lines) if d.get("bench") == "harness"), NO_RESULT)
    sw = next((d for d in reversed(lines) if d.get("event") == "final"), {})
    # The switch names a DSCP only once it saw one of its packets: none trimmable (a message under
    # NCCL_TRIM_MIN_BYTES) is no cut, not an unknown count.
    r = {"config": config, "cuts": sw.get("dscp_18_trimmed", 0) if sw else None, **{k: h.get(k) for k in RX_CUT_KEYS}}
    return {**r, "resent_not_dup": r["retransmits"] - r["dup_packets"]} if r["retransmits"] is not None else r


def summary(rows, medians, digits, extra):
    """One summary dict per configuration: MEDIANS (row keys) over its completed runs, and EXTRA(runs)."""
    out = []
    for config in dict.fromkeys(r["label"] for r in rows):
        rs = [r for r in rows if r["label"] == config and r.get("p50_ms") is not None]
        out.append({"summary": config, "runs": len(rs),
                    **{f"{k}_median": round(statistics.median(r[k] for r in rs), digits) for k in medians},
                    "p50_ms_all": [round(r["p50_ms"], 1) for r in rs], **extra(rs),
                    "verify": sorted({r["verify"] for r in rs}), "replicas_identical": all(r["replicas_identical"] for r in rs)}
                   if rs else {"summary": config, "error": "no run completed"})
    return out


def fabric_summary(rows):
    return summary(rows, ("p50_ms", "p99_ms", "retransmits"), 3, lambda rs: {
        "p99_ms_all": [round(r["p99_ms"], 1) for r in rs], "nmse_mean": statistics.mean(r["nmse"] for r in rs),
        "trim_rate_mean": round(statistics.mean(r["trim_rate"] for r in rs), 4)})


def rx_cut_summary(rows):
    return summary(rows, ("p50_ms", "p99_ms", "nmse", "cuts", "retransmits", "resent_not_dup", "cut_received",
                          "plugin_cpu_s"), 4, lambda rs: {"retransmits_all": [r["retransmits"] for r in rs]})


def main(argv):
    rx, ap = parser("fabric", __doc__, argv, "rx-cut")
    options(ap, build="build", rounds=5 if rx else 3)
    ap.add_argument("--size", type=positive, default=256, help="trim size (frame bytes)")
    if rx:
        options(ap, iters=20, bytes="2M")
        ap.add_argument("--p", type=float, default=0.2, help="trim probability of a trimmable packet")
        ap.add_argument("--rate-gbps", type=float, default=2)
    a = ap.parse_args(argv[rx:])
    if not built("fabric", a.build, "bin/trim-harness", "bin/trim-switch"):
        return 1
    if rx:
        def run(config, _):
            cmd, knob = rx_cut_command(a, config)
            lines = parse_jsonl(cpu_run(cmd, 900, env={**os.environ, "NCCL_TRIM_RX_CUT": knob},
                                        stderr=subprocess.DEVNULL)[3])
            return rx_cut_row(config, lines)
        summaries = rx_cut_summary(alternate(list(RX_CUT), a.rounds, run))
    else:
        plan = fabric_plan(a.size)
        with tempfile.TemporaryDirectory() as tmp:
            def run(config, _):
                sw, env = plan[config]
                h = through_switch(a.build, switch("trim", *INCAST8, *sw), allreduce(60), env, tmp, "run")[0]
                return {"config": config, **{k: (h if "p50_ms" in h else NO_RESULT).get(k) for k in FABRIC_KEYS}}
            summaries = fabric_summary(alternate(list(plan), a.rounds, run))
    for s in summaries:
        print(json.dumps(s))
    return 0
