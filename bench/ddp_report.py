#!/usr/bin/env python3
"""Results of scripts/run_ddp.sh: per-run summaries, markdown tables, PNG plots.

  plot_ddp.py DIR                 every run under DIR (a run dir holds run.json): PNGs into DIR
                                  (or --out), markdown tables on stdout
  plot_ddp.py DIR --no-plots      tables only (no matplotlib needed)
  plot_ddp.py --summarize RUNDIR  one run: read its logs, write RUNDIR/summary.json, print it
                                  (run_ddp.sh calls this after every run)

Plots (those the runs found allow):
  accuracy_vs_epoch.png   val accuracy per epoch, one panel per scheme/head bits, a line per
                          random trim rate; the socket and lossless baselines in every panel
  accuracy_vs_trim.png    final val accuracy and time to --target-acc against the trim rate
  iteration_time.png      iteration time p50/p99 per run and per epoch: trim vs drop switch
  allreduce_busbw.png     all_reduce bus bandwidth against size, per transport
Reads only the standard library unless plotting (then matplotlib).
"""
import argparse
import json
import re
import sys
from pathlib import Path

from bench.jsonio import read_jsonl


# The plugin logs each connection's counters when NCCL closes it; summed over ranks they give
# the transport's view of the run (what it resent, what arrived trimmed).
COUNTER_RE = {
    "sent_packets": r"sent (\d+) pkts",
    "retransmitted": r"retransmitted (\d+)",
    "rto_events": r"timeouts (\d+)",
    "trimmed_accepted": r"trimmed accepted (\d+)",
    "trimmed_nacked": r"trimmed NACKed (\d+)",
}


def plugin_counters(logs):
    """Summed connection counters of all ranks, plus what rank 0's log says about NCCL's use of
    the library: whether its profiler and tuner were active, and how the sends were classified."""
    tot = {k: 0 for k in COUNTER_RE}
    closed = 0
    extra = {}
    for i, log in enumerate(logs):
        try:
            text = Path(log).read_text(errors="replace")
        except OSError:
            continue
        if i == 0:
            extra["profiler_active"] = "NET/Trim: profiler plugin active" in text
            extra["tuner_active"] = "NET/Trim: tuner plugin" in text
            extra["send_classes"] = [m.group(1)[:400] for m in
                                     re.finditer(r"by op/proto/dtype/phase: (.*)", text)][:4]
        for line in text.splitlines():
            if "NET/Trim: closed recv connection" in line or "NET/Trim: closed send connection" in line:
                closed += 1
                for k, rx in COUNTER_RE.items():
                    m = re.search(rx, line)
                    if m:
                        tot[k] += int(m.group(1))
    if not closed and not any(extra.values()):
        return None  # no plugin log at all (not a plugin run, or NCCL_DEBUG off)
    return dict(tot if closed else {}, connections_closed=closed, **extra)


def network_used(log):
    try:
        m = re.search(r"Using network (\S+)", Path(log).read_text(errors="replace"))
    except OSError:
        return None
    return m.group(1) if m else None


def summarize(run_dir, status=None, wall_s=None):
    d = Path(run_dir)
    run = json.loads((d / "run.json").read_text())
    rank0 = read_jsonl(d / "rank0.jsonl")
    cfg = next((e for e in rank0 if e.get("event") == "config"), {})
    final = next((e for e in reversed(rank0) if e.get("event") == "final"), None)
    versions = dict(run.get("versions") or {})
    versions.update({k: v for k, v in (cfg.get("versions") or {}).items()
                     if k in ("gpu", "nccl", "torch", "torch_cuda", "python")})
    s = {k: run.get(k) for k in ("label", "kind", "mode", "ranks", "task", "scheme", "head_bits",
                                 "phase", "trim_p")}
    s["status"] = "ok" if status in (None, 0) and final else f"failed ({status})"
    s["wall_s"] = wall_s
    s["backend"] = cfg.get("backend")
    logs = sorted(d.glob("rank*.log"))
    s["network"] = network_used(logs[0]) if logs else None
    # NCCL names the network it chose; a run that measured some other transport than the one
    # asked for must not pass for a result.
    want = {"socket": "Socket"}.get(run.get("mode"), "Trim")
    if s["backend"] == "nccl" and s["network"] not in (None, want):
        s["status"] = f"failed (network {s['network']}, not {want})"
    if run["kind"] == "train":
        epochs = [e for e in rank0 if e.get("event") == "epoch"]
        f = final or {}
        s.update({
            "epochs": f.get("epochs"), "steps": f.get("steps"), "val_acc": f.get("val_acc"),
            "best_val_acc": max((e["val_acc"] for e in epochs), default=None),
            "val_loss": f.get("val_loss"), "initial_val_loss": f.get("initial_val_loss"),
            "loss_decreased": f.get("loss_decreased"), "target_acc": f.get("target_acc"),
            "time_to_target_s": f.get("time_to_target_s"), "epochs_to_target": f.get("epochs_to_target"),
            "train_s": f.get("train_s"), "iter_p50_ms": f.get("iter_p50_ms"),
            "iter_p99_ms": f.get("iter_p99_ms"), "iter_max_ms": f.get("iter_max_ms"),
            "first_step_ms": f.get("first_step_ms"),
            "params_identical": f.get("params_identical"),
            "params_max_rel_l2_diff": max((x["rel_l2_diff"] for x in f.get("params_vs_rank0", [])), default=None),
            "param_sha256": [h[:16] for h in f.get("param_sha256", [])],
        })
    else:
        sizes = [e for e in rank0 if e.get("event") == "size"]
        s["bench"] = [{"bytes": e["bytes"], "time_us": e["time_us"], "busbw_GBps": e["busbw_GBps"],
                       "max_err": e["max_err"]} for e in sizes]
        s["peak_busbw_GBps"] = max((e["busbw_GBps"] for e in sizes), default=None)
        s["all_exact"] = all(e["max_err"] == 0 for e in sizes) if sizes else None
    s["plugin"] = plugin_counters(logs) if run.get("mode") not in ("cpu", "socket", "gloo") else None
    sw = [e for e in read_jsonl(d / "switch.jsonl") if e.get("event") == "final"]
    if sw:
        w = sw[-1]
        fwd = w.get("forwarded") or 0
        s["switch"] = {k: w.get(k) for k in ("received", "forwarded", "forwarded_trimmed", "dropped",
                                             "cross", "max_queue")}
        # Trimmed share of the real packets the switch forwarded (cross traffic excluded).
        s["switch"]["trim_rate"] = (w.get("forwarded_trimmed") or 0) / fwd if fwd else None
    else:
        s["switch"] = None
    s["versions"] = versions
    (d / "summary.json").write_text(json.dumps(s) + "\n")
    return s


# ---------------------------------------------------------------- tables

def fmt(v, spec=".3f"):
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, float):
        return format(v, spec)
    return str(v)


MODE_ORDER = {"cpu": 0, "socket": 1, "lossless": 2, "random": 3, "trim": 4, "drop": 5}


def run_order(r):
    return (MODE_ORDER.get(r.get("mode"), 9), r.get("scheme") or "", r.get("head_bits") or 0,
            r.get("phase") == "all", r.get("trim_p") or 0, r.get("label") or "")


def load_runs(root):
    runs = []
    for rj in sorted(Path(root).rglob("run.json")):
        d = rj.parent
        sj = d / "summary.json"
        s = json.loads(sj.read_text()) if sj.exists() else summarize(d)
        s["_dir"] = d
        s["_epochs"] = [e for e in read_jsonl(d / "rank0.jsonl") if e.get("event") == "epoch"]
        runs.append(s)
    return sorted(runs, key=run_order)


def train_table(runs):
    rows = [r for r in runs if r.get("kind") == "train"]
    if not rows:
        return []
    out = ["| run | mode | scheme | head bits | phase | p | status | net | val acc | best | time to target (s) "
           "| iter p50 / p99 (ms) | switch trim rate | trimmed acc / NACKed | resent | replicas identical |",
           "|" + "---|" * 16]
    for r in rows:
        sw, pl = r.get("switch") or {}, r.get("plugin") or {}
        out.append("| " + " | ".join([
            r["label"], fmt(r.get("mode")), fmt(r.get("scheme")), fmt(r.get("head_bits")), fmt(r.get("phase")),
            fmt(r.get("trim_p"), "g"), r.get("status", "?"), fmt(r.get("network")),
            fmt(r.get("val_acc"), ".4f"), fmt(r.get("best_val_acc"), ".4f"), fmt(r.get("time_to_target_s"), ".1f"),
            f"{fmt(r.get('iter_p50_ms'), '.2f')} / {fmt(r.get('iter_p99_ms'), '.2f')}",
            fmt(sw.get("trim_rate"), ".4f"),
            f"{fmt(pl.get('trimmed_accepted'))} / {fmt(pl.get('trimmed_nacked'))}" if pl else "–",
            fmt(pl.get("retransmitted")) if pl else "–", fmt(r.get("params_identical")),
        ]) + " |")
    return out


def human_size(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n / 1024:g} KiB"


def bench_table(runs):
    rows = [r for r in runs if r.get("kind") == "bench" and r.get("bench")]
    if not rows:
        return []
    sizes = sorted({b["bytes"] for r in rows for b in r["bench"]})
    by = {r["label"]: {b["bytes"]: b for b in r["bench"]} for r in rows}
    labels = [r["label"] for r in rows]
    # With two transports, one of them the Socket baseline: the other's busbw as a multiple of it.
    ratio = None
    if len(labels) == 2 and "socket" in labels:
        other = labels[0] if labels[1] == "socket" else labels[1]
        ratio = (other, "socket")
    head = "| size | " + " | ".join(f"{lb} busbw (GB/s)" for lb in labels)
    sep = "|---|" + "---|" * len(labels)
    if ratio:
        head += f" | {ratio[0]} / {ratio[1]}"
        sep += "---|"
    out = [head + " |", sep]
    for sz in sizes:
        vals = {lb: by[lb].get(sz, {}).get("busbw_GBps") for lb in labels}
        line = f"| {human_size(sz)} | " + " | ".join(fmt(vals[lb]) for lb in labels)
        if ratio:
            a, b = vals[ratio[0]], vals[ratio[1]]
            line += " | " + (fmt(a / b, ".2f") if a and b else "–")
        out.append(line + " |")
    exact = ", ".join(f"{r['label']}: {'exact' if r.get('all_exact') else 'NOT exact'}" for r in rows)
    out.append("")
    out.append(f"Correctness check (every element = n(n+1)/2): {exact}")
    return out


def versions_line(runs):
    """The GPU, driver, NCCL and torch behind the runs (one entry per distinct combination)."""
    seen = []
    for r in runs:
        v = r.get("versions") or {}
        t = (f"GPU {v.get('gpu') or v.get('gpu_smi') or 'none'}, driver {v.get('driver') or '–'}, "
             f"NCCL {v.get('nccl') or '–'}, torch {v.get('torch') or '–'}")
        if t not in seen:
            seen.append(t)
    return "Versions: " + "; ".join(seen)


# ---------------------------------------------------------------- plots

def series_key(r):
    return f"{r.get('scheme')} {r.get('head_bits')}-bit" + (" phase=all" if r.get("phase") == "all" else "")


def plot(runs, out, plt):
    from matplotlib.ticker import MaxNLocator
    made = []
    train = [r for r in runs if r.get("kind") == "train" and r["_epochs"]]
    base = [r for r in train if r.get("mode") in ("socket", "lossless", "cpu")]
    rnd = [r for r in train if r.get("mode") == "random"]
    title_v = versions_line(runs)[len("Versions: "):]

    if rnd:
        keys = sorted({series_key(r) for r in rnd})
        cols = min(3, len(keys))
        rows_n = (len(keys) + cols - 1) // cols
        fig, axes = plt.subplots(rows_n, cols, figsize=(5 * cols, 3.6 * rows_n), squeeze=False, sharey=True)
        for ax, key in zip(axes.flat, keys):
            for r in sorted((r for r in rnd if series_key(r) == key), key=lambda r: r.get("trim_p") or 0):
                ep = r["_epochs"]
                ax.plot([e["epoch"] for e in ep], [e["val_acc"] for e in ep], marker=".",
                        label=f"p={r.get('trim_p'):g}")
            for r in base:
                ep = r["_epochs"]
                ax.plot([e["epoch"] for e in ep], [e["val_acc"] for e in ep], "k--" if r["mode"] == "socket" else "k:",
                        lw=1, label=r["mode"])
            ax.set_title(f"random trimming, {key}")
            ax.set_xlabel("epoch")
            ax.set_ylabel("val accuracy")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        for ax in list(axes.flat)[len(keys):]:
            ax.axis("off")
        for ax in axes.flat:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        fig.suptitle(f"DDP {rnd[0].get('task')}, {rnd[0].get('ranks')} ranks: accuracy per epoch\n{title_v}", fontsize=9)
        fig.tight_layout()
        fig.savefig(out / "accuracy_vs_epoch.png", dpi=110)
        plt.close(fig)
        made.append("accuracy_vs_epoch.png")

        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
        for key in sorted({series_key(r) for r in rnd}):
            pts = sorted(((r["trim_p"], r) for r in rnd if series_key(r) == key), key=lambda t: t[0])
            a1.plot([p for p, _ in pts], [r.get("val_acc") for _, r in pts], marker="o", label=key)
            a2.plot([p for p, _ in pts], [r.get("time_to_target_s") for _, r in pts], marker="o", label=key)
        for r in base:
            a1.axhline(r.get("val_acc") or 0, ls="--" if r["mode"] == "socket" else ":", c="k", lw=1, label=r["mode"])
            if r.get("time_to_target_s"):
                a2.axhline(r["time_to_target_s"], ls="--" if r["mode"] == "socket" else ":", c="k", lw=1, label=r["mode"])
        a1.set_xlabel("trim probability p")
        a1.set_ylabel("final val accuracy")
        a2.set_xlabel("trim probability p")
        tgt = rnd[0].get("target_acc")
        a2.set_ylabel(f"wall time to val acc {tgt} (s; missing = never)")
        if not any(r.get("time_to_target_s") for r in rnd + base):
            a2.text(0.5, 0.5, f"no run reached val acc {tgt}", transform=a2.transAxes, ha="center")
        for a in (a1, a2):
            a.grid(alpha=0.3)
            a.legend(fontsize=7)
        fig.suptitle(title_v, fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "accuracy_vs_trim.png", dpi=110)
        plt.close(fig)
        made.append("accuracy_vs_trim.png")

    lat = [r for r in train if r.get("mode") in ("trim", "drop", "lossless") and r.get("iter_p50_ms")]
    if any(r["mode"] in ("trim", "drop") for r in lat):
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
        names = [r["label"] for r in lat]
        x = range(len(lat))
        a1.bar([i - 0.2 for i in x], [r["iter_p50_ms"] for r in lat], width=0.4, label="p50")
        a1.bar([i + 0.2 for i in x], [r["iter_p99_ms"] for r in lat], width=0.4, label="p99")
        a1.set_xticks(list(x))
        a1.set_xticklabels(names, rotation=20, fontsize=7)
        a1.set_ylabel("iteration time (ms), first step excluded")
        a1.legend()
        for r in lat:
            ep = [e for e in r["_epochs"] if e.get("iter_p99_ms") is not None]
            line, = a2.plot([e["epoch"] for e in ep], [e["iter_p99_ms"] for e in ep], marker="o", label=f"{r['label']} p99")
            a2.plot([e["epoch"] for e in ep], [e["iter_p50_ms"] for e in ep], ls="--", c=line.get_color(),
                    label=f"{r['label']} p50")
        a2.set_xlabel("epoch")
        a2.xaxis.set_major_locator(MaxNLocator(integer=True))
        a2.set_ylabel("iteration time (ms)")
        a2.legend(fontsize=7)
        for a in (a1, a2):
            a.grid(alpha=0.3)
        fig.suptitle(f"trimming vs tail-drop switch with cross traffic\n{title_v}", fontsize=9)
        fig.tight_layout()
        fig.savefig(out / "iteration_time.png", dpi=110)
        plt.close(fig)
        made.append("iteration_time.png")

    bench = [r for r in runs if r.get("kind") == "bench" and r.get("bench")]
    if bench:
        fig, ax = plt.subplots(figsize=(6.5, 4))
        for r in bench:
            ax.plot([b["bytes"] / (1 << 20) for b in r["bench"]], [b["busbw_GBps"] for b in r["bench"]],
                    marker="o", label=r["label"])
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (MiB)")
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.grid(alpha=0.3)
        ax.legend()
        ax.set_title(f"torch all_reduce fp32, {bench[0].get('ranks')} ranks\n{title_v}", fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "allreduce_busbw.png", dpi=110)
        plt.close(fig)
        made.append("allreduce_busbw.png")
    return made


def seed_table(runs):
    """Runs named CONFIG_s<SEED> (run_ddp.sh --sweep trimacc): per configuration, the mean and
    spread of the final val accuracy over its seeds, against the exact baseline's (the
    configuration named gloo or socket), in points; replicas identical in every run."""
    groups = {}
    for r in runs:
        m = re.fullmatch(r"(.+)_s(\d+)", r.get("label") or "")
        if m and r.get("status") == "ok" and r.get("val_acc") is not None:
            groups.setdefault(m.group(1), []).append(r)
    if not groups:
        return [], {}
    base = next((k for k in ("gloo", "socket") if k in groups), None)
    mean = {k: sum(r["val_acc"] for r in v) / len(v) for k, v in groups.items()}
    seed_of = lambda r: re.fullmatch(r"(.+)_s(\d+)", r["label"]).group(2)
    base_acc = {seed_of(r): r["val_acc"] for r in groups.get(base, [])}
    # Paired by seed (same init and data order): the seed-to-seed spread, larger than the
    # effect here, cancels.
    lines = ["| configuration | seeds | mean final val acc | min-max | vs exact, paired by seed (points) | per seed | trim rate (switch) | replicas identical |",
             "|---|---|---|---|---|---|---|---|"]
    out = {}
    for k in sorted(groups, key=lambda k: (k != base, k)):
        v = groups[k]
        accs = [r["val_acc"] for r in v]
        rates = [(r.get("switch") or {}).get("trim_rate") for r in v]
        rates = [x for x in rates if x is not None]
        pairs = {seed_of(r): 100 * (r["val_acc"] - base_acc[seed_of(r)]) for r in v
                 if k != base and seed_of(r) in base_acc}
        diff = sum(pairs.values()) / len(pairs) if pairs else None
        ident = all(r.get("params_identical") for r in v)
        out[k] = {"seeds": len(v), "mean_val_acc": mean[k], "min": min(accs), "max": max(accs),
                  "diff_points": diff, "diff_points_per_seed": pairs, "replicas_identical": ident}
        lines.append(f"| {k} | {len(v)} | {mean[k]:.4f} | {min(accs):.4f}-{max(accs):.4f} | "
                     f"{'-' if diff is None else format(diff, '+.2f')} | "
                     f"{', '.join(f's{sd} {d:+.2f}' for sd, d in sorted(pairs.items())) or '-'} | "
                     f"{format(sum(rates) / len(rates), '.3f') if rates else '-'} | {'yes' if ident else 'NO'} |")
    return lines, out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", nargs="?", help="results root (or one run dir)")
    p.add_argument("--summarize", metavar="RUNDIR", help="summarize one run and print its summary line")
    p.add_argument("--status", type=int, default=None, help="with --summarize: the ranks' exit status")
    p.add_argument("--wall-s", type=float, default=None, help="with --summarize: the run's wall time")
    p.add_argument("--out", help="where the PNGs go (default: DIR)")
    p.add_argument("--no-plots", action="store_true", help="tables only")
    p.add_argument("--summary-line", action="store_true", help="end with one JSON line over all runs")
    a = p.parse_args(argv)
    if a.summarize:
        print(json.dumps(summarize(a.summarize, a.status, a.wall_s)))
        return 0
    if not a.dir:
        p.error("a results directory is needed")
    runs = load_runs(a.dir)
    if not runs:
        print(f"plot_ddp: no runs (run.json) under {a.dir}", file=sys.stderr)
        return 1
    seeds, by_config = seed_table(runs)
    for lines in (train_table(runs), bench_table(runs), seeds):
        if lines:
            print("\n".join(lines))
            print()
    print(versions_line(runs))
    made = []
    if not a.no_plots:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        out = Path(a.out or a.dir)
        out.mkdir(parents=True, exist_ok=True)
        made = plot(runs, out, plt)
        for m in made:
            print(f"plot: {out / m}", file=sys.stderr)
    failed = [r["label"] for r in runs if r.get("status") != "ok"]
    if a.summary_line:
        short = []
        for r in runs:
            x = {k: r.get(k) for k in ("label", "mode", "scheme", "head_bits", "phase", "trim_p", "status",
                                      "val_acc", "time_to_target_s", "iter_p50_ms", "iter_p99_ms",
                                      "params_identical", "peak_busbw_GBps") if r.get(k) is not None}
            if (r.get("switch") or {}).get("trim_rate") is not None:
                x["switch_trim_rate"] = r["switch"]["trim_rate"]
            short.append(x)
        print(json.dumps({"root": str(Path(a.dir).resolve()), "runs": len(runs), "failed": failed,
                          "plots": made, "results": short, **({"by_config": by_config} if by_config else {})}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
