"""Results of `python3 -m bench ddp`: per-run summaries (--summarize RUNDIR writes its summary.json),
markdown tables of every run under DIR, and its PNGs (accuracy_vs_epoch, accuracy_vs_trim,
iteration_time, allreduce_busbw: those the runs allow; matplotlib only for them)."""
import argparse
import json
import re
import sys
from pathlib import Path

from .jsonio import read_jsonl, write_json
from .plot import finish, panels, pyplot, save
from .report import fmt, table


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
    tot, closed, extra = dict.fromkeys(COUNTER_RE, 0), 0, {}
    for i, log in enumerate(logs):
        text = Path(log).read_text(errors="replace")
        if i == 0:
            extra = {"profiler_active": "NET/Trim: profiler plugin active" in text,
                     "tuner_active": "NET/Trim: tuner plugin" in text,
                     "send_classes": [m[:400] for m in re.findall(r"by op/proto/dtype/phase: (.*)", text)][:4]}
        for line in re.findall(r".*NET/Trim: closed (?:recv|send) connection.*", text):
            closed += 1
            for k, rx in COUNTER_RE.items():
                tot[k] += sum(int(n) for n in re.findall(rx, line)[:1])
    if not closed and not any(extra.values()):
        return None  # no plugin log at all (not a plugin run, or NCCL_DEBUG off)
    return dict(tot if closed else {}, connections_closed=closed, **extra)


def events(lines, name):
    """The lines (a list, or a JSON-lines file's) whose event is NAME."""
    return [e for e in (read_jsonl(lines) if isinstance(lines, Path) else lines) if e.get("event") == name]


FINAL_KEYS = ("epochs", "steps", "val_acc", "val_loss", "initial_val_loss", "loss_decreased", "target_acc",
              "time_to_target_s", "epochs_to_target", "train_s", "iter_p50_ms", "iter_p99_ms", "iter_max_ms",
              "first_step_ms", "params_identical")
SWITCH_KEYS = ("received", "forwarded", "forwarded_trimmed", "dropped", "cross", "max_queue")


def summarize(run_dir, status=None, wall_s=None):
    """RUN_DIR's summary (settings, status, results, plugin and switch counters, versions), also
    written to RUN_DIR/summary.json. STATUS: the ranks' exit status (None/0: ok if a final line)."""
    d = Path(run_dir)
    run = json.loads((d / "run.json").read_text())
    rank0 = read_jsonl(d / "rank0.jsonl")
    cfg, final = (events(rank0, "config") or [{}])[0], (events(rank0, "final") or [None])[-1]
    s = {k: run.get(k) for k in ("label", "kind", "mode", "ranks", "task", "scheme", "head_bits", "phase", "trim_p")}
    s.update(status="ok" if status in (None, 0) and final else f"failed ({status})", wall_s=wall_s,
             backend=cfg.get("backend"))
    logs = sorted(d.glob("rank*.log"))
    net = re.search(r"Using network (\S+)", logs[0].read_text(errors="replace")) if logs else None
    s["network"] = net and net.group(1)
    # NCCL names the network it chose: a run over another transport than asked must not pass.
    want = "Socket" if run.get("mode") == "socket" else "Trim"
    if s["backend"] == "nccl" and s["network"] not in (None, want):
        s["status"] = f"failed (network {s['network']}, not {want})"
    if run["kind"] == "train":
        f = final or {}
        s.update({k: f.get(k) for k in FINAL_KEYS})
        s["best_val_acc"] = max((e["val_acc"] for e in events(rank0, "epoch")), default=None)
        s["params_max_rel_l2_diff"] = max((x["rel_l2_diff"] for x in f.get("params_vs_rank0", [])), default=None)
        s["param_sha256"] = [h[:16] for h in f.get("param_sha256", [])]
    else:
        sizes = events(rank0, "size")
        s["bench"] = [{k: e[k] for k in ("bytes", "time_us", "busbw_GBps", "max_err")} for e in sizes]
        s["peak_busbw_GBps"] = max((e["busbw_GBps"] for e in sizes), default=None)
        s["all_exact"] = all(e["max_err"] == 0 for e in sizes) if sizes else None
    s["plugin"] = plugin_counters(logs) if run.get("mode") not in ("cpu", "socket", "gloo") else None
    w = (events(d / "switch.jsonl", "final") or [None])[-1]
    s["switch"] = w and {k: w.get(k) for k in SWITCH_KEYS}
    if w:  # trimmed share of the real packets the switch forwarded (cross traffic excluded)
        s["switch"]["trim_rate"] = (w.get("forwarded_trimmed") or 0) / w["forwarded"] if w.get("forwarded") else None
    s["versions"] = {**(run.get("versions") or {}), **{k: v for k, v in (cfg.get("versions") or {}).items()
                                                       if k in ("gpu", "nccl", "torch", "torch_cuda", "python")}}
    write_json(d / "summary.json", s)
    return s


# ---------------------------------------------------------------- tables

MODE_ORDER = {"cpu": 0, "socket": 1, "lossless": 2, "random": 3, "trim": 4, "drop": 5}


def run_order(r):
    return (MODE_ORDER.get(r.get("mode"), 9), r.get("scheme") or "", r.get("head_bits") or 0,
            r.get("phase") == "all", r.get("trim_p") or 0, r.get("label") or "")


def load_runs(root):
    """The summary of every run (a folder with run.json) under ROOT, in mode order, each with its
    epoch events (_epochs)."""
    runs = []
    for rj in sorted(Path(root).rglob("run.json")):
        d = rj.parent
        s = json.loads((d / "summary.json").read_text()) if (d / "summary.json").exists() else summarize(d)
        runs.append(dict(s, _epochs=events(d / "rank0.jsonl", "epoch")))
    return sorted(runs, key=run_order)


def train_table(runs):
    rows = []
    for r in (r for r in runs if r.get("kind") == "train"):
        sw, pl = r.get("switch") or {}, r.get("plugin") or {}
        c = lambda k, spec=".3f": fmt(r.get(k), spec)  # noqa: E731
        rows.append([r["label"], c("mode"), c("scheme"), c("head_bits", "d"), c("phase"), c("trim_p", "g"),
                     r.get("status", "?"), c("network"), c("val_acc", ".4f"), c("best_val_acc", ".4f"),
                     c("time_to_target_s", ".1f"), f"{c('iter_p50_ms', '.2f')} / {c('iter_p99_ms', '.2f')}",
                     fmt(sw.get("trim_rate"), ".4f"),
                     f"{fmt(pl.get('trimmed_accepted'), 'd')} / {fmt(pl.get('trimmed_nacked'), 'd')}" if pl else "-",
                     fmt(pl.get("retransmitted"), "d") if pl else "-", c("params_identical")])
    heads = ["run", "mode", "scheme", "head bits", "phase", "p", "status", "net", "val acc", "best",
             "time to target (s)", "iter p50 / p99 (ms)", "switch trim rate", "trimmed acc / NACKed", "resent",
             "replicas identical"]
    return table(heads, rows, md=True).splitlines() if rows else []


def human_size(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n / 1024:g} KiB"


def bench_table(runs):
    """busbw per size and transport; with two, one of them Socket, the other's as a multiple of it."""
    rows = [r for r in runs if r.get("kind") == "bench" and r.get("bench")]
    if not rows:
        return []
    by = {r["label"]: {b["bytes"]: b.get("busbw_GBps") for b in r["bench"]} for r in rows}
    labels = list(by)
    other = [lb for lb in labels if lb != "socket"] if len(labels) == 2 and "socket" in labels else []
    heads = ["size"] + [f"{lb} busbw (GB/s)" for lb in labels] + [f"{o} / socket" for o in other]
    cells = []
    for sz in sorted({sz for v in by.values() for sz in v}):
        ratio = [fmt(by[o].get(sz) / by["socket"][sz], ".2f") if by[o].get(sz) and by["socket"].get(sz) else "-"
                 for o in other]
        cells.append([human_size(sz)] + [fmt(by[lb].get(sz)) for lb in labels] + ratio)
    exact = ", ".join(f"{r['label']}: {'exact' if r.get('all_exact') else 'NOT exact'}" for r in rows)
    return table(heads, cells, md=True).splitlines() + ["", f"Correctness check (every element = n(n+1)/2): {exact}"]


def versions_line(runs):
    """The GPU, driver, NCCL and torch behind the runs (one entry per distinct combination)."""
    return "Versions: " + "; ".join(dict.fromkeys(
        f"GPU {v.get('gpu') or v.get('gpu_smi') or 'none'}, driver {v.get('driver') or '-'}, "
        f"NCCL {v.get('nccl') or '-'}, torch {v.get('torch') or '-'}" for v in (r.get("versions") or {} for r in runs)))


def seed_table(runs):
    """Runs named CONFIG_s<SEED> (the trimacc sweep): per configuration the mean and spread of the
    final val accuracy over its seeds, and its difference to the exact baseline's (gloo or socket)
    paired by seed, in points (same init and data order: the seed-to-seed spread cancels)."""
    groups, seed = {}, {}
    for r in runs:
        m = re.fullmatch(r"(.+)_s(\d+)", r.get("label") or "")
        if m and r.get("status") == "ok" and r.get("val_acc") is not None:
            groups.setdefault(m.group(1), []).append(r)
            seed[r["label"]] = m.group(2)
    if not groups:
        return [], {}
    base = next((k for k in ("gloo", "socket") if k in groups), None)
    base_acc = {seed[r["label"]]: r["val_acc"] for r in groups.get(base, [])}
    rows, out = [], {}
    for k in sorted(groups, key=lambda k: (k != base, k)):
        v = groups[k]
        accs = [r["val_acc"] for r in v]
        rates = [x for x in ((r.get("switch") or {}).get("trim_rate") for r in v) if x is not None]
        pairs = {seed[r["label"]]: 100 * (r["val_acc"] - base_acc[seed[r["label"]]]) for r in v
                 if k != base and seed[r["label"]] in base_acc}
        diff = sum(pairs.values()) / len(pairs) if pairs else None
        mean = sum(accs) / len(accs)
        ident = all(r.get("params_identical") for r in v)
        out[k] = {"seeds": len(v), "mean_val_acc": mean, "min": min(accs), "max": max(accs),
                  "diff_points": diff, "diff_points_per_seed": pairs, "replicas_identical": ident}
        rows.append([k, len(v), f"{mean:.4f}", f"{min(accs):.4f}-{max(accs):.4f}", fmt(diff, "+.2f"),
                     ", ".join(f"s{sd} {d:+.2f}" for sd, d in sorted(pairs.items())) or "-",
                     fmt(sum(rates) / len(rates) if rates else None), fmt(ident)])
    heads = ["configuration", "seeds", "mean final val acc", "min-max", "vs exact, paired by seed (points)",
             "per seed", "trim rate (switch)", "replicas identical"]
    return table(heads, rows, md=True).splitlines(), out


# ---------------------------------------------------------------- plots

def series_key(r):
    return f"{r.get('scheme')} {r.get('head_bits')}-bit" + (" phase=all" if r.get("phase") == "all" else "")


def baseline_style(r):
    return {"c": "k", "lw": 1, "ls": "--" if r["mode"] == "socket" else ":", "label": r["mode"]}


def plot(runs, out, plt):
    """The PNGs the runs allow, into OUT; returns their names."""
    made = []
    train = [r for r in runs if r.get("kind") == "train" and r["_epochs"]]
    base = [r for r in train if r.get("mode") in ("socket", "lossless", "cpu")]
    rnd = [r for r in train if r.get("mode") == "random"]
    title_v = versions_line(runs)[len("Versions: "):]
    curve = lambda ep, k: ([e["epoch"] for e in ep], [e[k] for e in ep])  # noqa: E731
    if rnd:
        keys = sorted({series_key(r) for r in rnd})
        series = {k: sorted((r for r in rnd if series_key(r) == k), key=lambda r: r.get("trim_p") or 0) for k in keys}
        fig, axes = panels(plt, len(keys), cols=3, width=5, height=3.6, sharey=True)
        for ax, key in zip(axes, keys):
            for r in series[key]:
                ax.plot(*curve(r["_epochs"], "val_acc"), marker=".", label=f"p={r.get('trim_p'):g}")
            for r in base:
                ax.plot(*curve(r["_epochs"], "val_acc"), **baseline_style(r))
            finish(ax, f"random trimming, {key}", "epoch", "val accuracy", legend_size=7)
        fig.suptitle(f"DDP {rnd[0].get('task')}, {rnd[0].get('ranks')} ranks: accuracy per epoch\n{title_v}",
                     fontsize=9)
        made.append(save(plt, fig, out / "accuracy_vs_epoch.png").name)

        fig, (a1, a2) = panels(plt, 2, cols=2)
        for key, pts in series.items():
            a1.plot([r["trim_p"] for r in pts], [r.get("val_acc") for r in pts], marker="o", label=key)
            a2.plot([r["trim_p"] for r in pts], [r.get("time_to_target_s") for r in pts], marker="o", label=key)
        for r in base:
            a1.axhline(r.get("val_acc") or 0, **baseline_style(r))
            if r.get("time_to_target_s"):
                a2.axhline(r["time_to_target_s"], **baseline_style(r))
        tgt = rnd[0].get("target_acc")
        if not any(r.get("time_to_target_s") for r in rnd + base):
            a2.text(0.5, 0.5, f"no run reached val acc {tgt}", transform=a2.transAxes, ha="center")
        finish(a1, None, "trim probability p", "final val accuracy", legend_size=7)
        finish(a2, None, "trim probability p", f"wall time to val acc {tgt} (s; missing = never)", legend_size=7)
        fig.suptitle(title_v, fontsize=8)
        made.append(save(plt, fig, out / "accuracy_vs_trim.png").name)

    lat = [r for r in train if r.get("mode") in ("trim", "drop", "lossless") and r.get("iter_p50_ms")]
    if any(r["mode"] in ("trim", "drop") for r in lat):
        fig, (a1, a2) = panels(plt, 2, cols=2)
        x = range(len(lat))
        a1.bar([i - 0.2 for i in x], [r["iter_p50_ms"] for r in lat], width=0.4, label="p50")
        a1.bar([i + 0.2 for i in x], [r["iter_p99_ms"] for r in lat], width=0.4, label="p99")
        a1.set_xticks(list(x), [r["label"] for r in lat], rotation=20, fontsize=7)
        for r in lat:
            ep = [e for e in r["_epochs"] if e.get("iter_p99_ms") is not None]
            line, = a2.plot(*curve(ep, "iter_p99_ms"), marker="o", label=f"{r['label']} p99")
            a2.plot(*curve(ep, "iter_p50_ms"), ls="--", c=line.get_color(), label=f"{r['label']} p50")
        finish(a1, None, None, "iteration time (ms), first step excluded")
        finish(a2, None, "epoch", "iteration time (ms)", legend_size=7)
        fig.suptitle(f"trimming vs tail-drop switch with cross traffic\n{title_v}", fontsize=9)
        made.append(save(plt, fig, out / "iteration_time.png").name)

    bench = [r for r in runs if r.get("kind") == "bench" and r.get("bench")]
    if bench:
        fig, (ax,) = panels(plt, 1, width=6.5)
        for r in bench:
            ax.plot([b["bytes"] / (1 << 20) for b in r["bench"]], [b["busbw_GBps"] for b in r["bench"]],
                    marker="o", label=r["label"])
        ax.set_xscale("log", base=2)
        finish(ax, f"torch all_reduce fp32, {bench[0].get('ranks')} ranks\n{title_v}", "message size (MiB)",
               "bus bandwidth (GB/s)")
        ax.title.set_fontsize(8)
        made.append(save(plt, fig, out / "allreduce_busbw.png").name)
    return made


SHORT_KEYS = ("label", "mode", "scheme", "head_bits", "phase", "trim_p", "status", "val_acc", "time_to_target_s",
              "iter_p50_ms", "iter_p99_ms", "params_identical", "peak_busbw_GBps")


def main(argv):
    p = argparse.ArgumentParser(prog="python3 -m bench ddp-report", description=__doc__)
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
        print(f"ddp-report: no runs (run.json) under {a.dir}", file=sys.stderr)
        return 1
    seeds, by_config = seed_table(runs)
    for lines in (train_table(runs), bench_table(runs), seeds):
        if lines:
            print("\n".join(lines) + "\n")
    print(versions_line(runs))
    plt = None if a.no_plots else pyplot()
    made = []
    if plt:
        out = Path(a.out or a.dir)
        out.mkdir(parents=True, exist_ok=True)
        made = plot(runs, out, plt)
        for m in made:
            print(f"plot: {out / m}", file=sys.stderr)
    failed = [r["label"] for r in runs if r.get("status") != "ok"]
    if a.summary_line:
        short = [{k: r[k] for k in SHORT_KEYS if r.get(k) is not None} for r in runs]
        for x, r in zip(short, runs):
            if (r.get("switch") or {}).get("trim_rate") is not None:
                x["switch_trim_rate"] = r["switch"]["trim_rate"]
        print(json.dumps({"root": str(Path(a.dir).resolve()), "runs": len(runs), "failed": failed, "plots": made,
                          "results": short, **({"by_config": by_config} if by_config else {})}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
