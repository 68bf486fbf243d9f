#!/usr/bin/env python3
"""Results of scripts/congestion_bench.sh: one bottleneck, four transports.

  plot_congestion.py --augment RUNDIR   add the bottleneck's view to RUNDIR/summary.json (written
                                        by plot_ddp.py --summarize): the switch's per-class
                                        counters, our trim rate, TCP and plugin retransmissions
  plot_congestion.py DIR [--no-plots]   every run under DIR: a markdown table, DIR/congestion.png
                                        (matplotlib, if installed) and, last, one JSON line

Columns: iteration time p50/p99/max (ms), time to the target accuracy (s), final val accuracy,
trim rate (our data packets the switch cut / our data packets it forwarded), retransmissions
(TCP RetransSegs of the ranks' namespaces for socket; the plugin's retransmitted packets
otherwise), replicas identical (every rank's parameters hash alike at the end).
Reads only the standard library unless plotting.
"""
import argparse
import json
import sys
from pathlib import Path

TRANSPORTS = ["socket", "drop", "trim", "trim16"]


def read_jsonl(path):
    out = []
    try:
        for line in Path(path).read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    except OSError:
        pass
    return out


def augment(d):
    d = Path(d)
    try:
        s = json.loads((d / "summary.json").read_text())
    except (OSError, json.JSONDecodeError):
        s = {"label": d.name, "status": "failed (no summary)"}
    run = json.loads((d / "run.json").read_text())
    s["transport"] = run.get("transport")
    s.update(run.get("bottleneck") or {})
    finals = [e for e in read_jsonl(d / "switch.jsonl") if e.get("event") == "final"]
    w = finals[-1] if finals else {}
    keys = ["trim_forwarded", "trim_trimmed", "trim_dropped", "trim_lost", "trimctl_dropped", "tcp_forwarded",
            "tcp_dropped", "tcp_lost", "lost", "cross", "max_queue", "bad", "no_route"]
    s["bottleneck_switch"] = {k: w.get(k) for k in keys} if w else None
    fwd = w.get("trim_forwarded") or 0
    s["trim_rate"] = (w.get("trim_trimmed") or 0) / fwd if fwd else None
    tcp = sum(e.get("tcp_retrans_segs", 0) for r in sorted(d.glob("rank*.tcp")) for e in read_jsonl(r))
    s["tcp_retrans_segs"] = tcp
    plugin = s.get("plugin") or {}
    s["retransmissions"] = tcp if s["transport"] == "socket" else plugin.get("retransmitted")
    (d / "summary.json").write_text(json.dumps(s) + "\n")


def fmt(v, spec=".3f"):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    return format(v, spec) if isinstance(v, float) else str(v)


def load(root):
    runs = []
    for f in sorted(Path(root).glob("*/summary.json")):
        try:
            runs.append(json.loads(f.read_text()))
        except json.JSONDecodeError:
            pass
    order = {t: i for i, t in enumerate(TRANSPORTS)}
    runs.sort(key=lambda r: (r.get("task") or "", r.get("loss_pct") or 0, r.get("cross_pct") or 0,
                             order.get(r.get("transport"), 9)))
    return runs


def table(runs):
    head = ["task", "transport", "cross %", "loss %", "p50 ms", "p99 ms", "max ms", "to target s", "final acc",
            "trim rate", "retx", "identical", "status"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in runs:
        lines.append("| " + " | ".join([
            fmt(r.get("task")), fmt(r.get("transport")), fmt(r.get("cross_pct"), "g"), fmt(r.get("loss_pct"), "g"),
            fmt(r.get("iter_p50_ms"), ".2f"), fmt(r.get("iter_p99_ms"), ".2f"), fmt(r.get("iter_max_ms"), ".2f"),
            fmt(r.get("time_to_target_s"), ".1f"), fmt(r.get("val_acc"), ".4f"), fmt(r.get("trim_rate"), ".4f"),
            fmt(r.get("retransmissions")), fmt(r.get("params_identical")), fmt(r.get("status"))]) + " |")
    return "\n".join(lines)


def plot(runs, out, plt):
    tasks = sorted({r.get("task") for r in runs if r.get("task")})
    if not tasks:
        return None
    fig, axes = plt.subplots(len(tasks), 3, figsize=(15, 4 * len(tasks)), squeeze=False)
    for i, task in enumerate(tasks):
        for tr in TRANSPORTS:
            rs = [r for r in runs if r.get("task") == task and r.get("transport") == tr]
            cross = sorted((r["cross_pct"], r) for r in rs if not r.get("loss_pct"))
            loss = sorted((r["loss_pct"], r) for r in rs if r.get("loss_pct") and not r.get("cross_pct"))
            if cross:
                axes[i][0].plot([c for c, _ in cross], [r.get("iter_p99_ms") for _, r in cross], "o-", label=f"{tr} p99")
                axes[i][0].plot([c for c, _ in cross], [r.get("iter_p50_ms") for _, r in cross], "x--", label=f"{tr} p50")
                axes[i][2].plot([c for c, _ in cross], [r.get("time_to_target_s") for _, r in cross], "o-", label=tr)
            if loss:
                axes[i][1].plot([x for x, _ in loss], [r.get("iter_p99_ms") for _, r in loss], "o-", label=f"{tr} p99")
        axes[i][0].set(title=f"{task}: iteration time vs cross load", xlabel="cross load (% of port rate)", ylabel="ms")
        axes[i][1].set(title=f"{task}: iteration p99 vs random loss", xlabel="loss (%)", ylabel="ms", xscale="log")
        axes[i][2].set(title=f"{task}: time to target accuracy", xlabel="cross load (%)", ylabel="s")
        for ax in axes[i]:
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    path = Path(out) / "congestion.png"
    fig.savefig(path, dpi=110)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", nargs="?")
    p.add_argument("--augment", metavar="RUNDIR")
    p.add_argument("--no-plots", action="store_true")
    a = p.parse_args()
    if a.augment:
        augment(a.augment)
        return 0
    if not a.dir:
        p.error("DIR or --augment RUNDIR")
    runs = load(a.dir)
    print(table(runs))
    if not a.no_plots:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            png = plot(runs, a.dir, plt)
            if png:
                print(f"plot: {png}", file=sys.stderr)
        except ImportError:
            print("plot: skipped (no matplotlib)", file=sys.stderr)
    keep = ["label", "task", "transport", "cross_pct", "loss_pct", "status", "iter_p50_ms", "iter_p99_ms",
            "iter_max_ms", "time_to_target_s", "val_acc", "trim_rate", "retransmissions", "params_identical"]
    print(json.dumps({"bench": "congestion", "runs": [{k: r.get(k) for k in keep} for r in runs]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
