"""make demo: DDP training (widemlp, 2 ranks, CPU) through ONE congested bottleneck: Gloo with TCP
tuned as datacenters run it (1 ms minimum RTO), Gloo on Linux's defaults (200 ms), and the plugin
trimming (`congestion --cpu`), side by side; then the codec table and its NMSE plot. The last line
is BUILD/demo/summary.json: trimming's tta/p50/p99 ratios to tuned Gloo (*_vs_gloo_tuned, first),
to default Gloo (*_vs_gloo) and, with DEMO_DROP=1 (a fourth run), to our own tail drop
(tta_ratio_vs_drop); *_is_upper_bound where a baseline never reached the target or was stopped by
its limit (its run bounds its time); acc_delta_points; replicas_identical. Without root,
/dev/net/tun, ip or torch the headline is skipped (the reason is printed) and the switch demo runs
instead (DEMO_SWITCH=1: as well): a 4-rank AllReduce through trim-switch's UDP mode, trimming vs
tail drop.

Environment (defaults sized for a 2-core VM): headline DEMO_RATE_GBPS [0.5] DEMO_BUFFER_BYTES
[131072] DEMO_CROSS [60] DEMO_CROSS_PERIOD_MS [10] DEMO_TRIM [hook|trim] DEMO_STEPS [40]
DEMO_LIMIT_S [100] DEMO_DROP [0]; switch demo DEMO_RATE_GBPS [1] DEMO_BUFFER_PACKETS [8] DEMO_MTU
[4096] DEMO_PROP_US [200] DEMO_CROSS [incast:8:0.04:all] DEMO_TRIM_EXACT [1] DEMO_BYTES [1M]
DEMO_ITERS [60] DEMO_RANKS [4] DEMO_SEED [7] (docs/RESULTS.md explains them)."""

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys

from . import build_dir
from .congestion_report import base_ttt, load, stalled
from .jsonio import read_jsonl, write_json
from .plot import finish, panels, pyplot, save
from .report import fmt, ratio
from .scenarios import row, through_switch

ROWS = [("time to 0.95 val accuracy (s)", "time_to_target_s", ".1f"), ("steps to 0.95", "steps_to_target", "d"),
        ("iteration p50 (ms)", "iter_p50_ms", ".0f"), ("iteration p99 (ms)", "iter_p99_ms", ".0f"),
        ("step bound (ms)", "bound_ms", ".0f"), ("efficiency (bound / p50)", "efficiency", ".2f"),
        ("final val accuracy", "val_acc", ".4f"), ("steps run", "steps", "d"),
        ("trimmed share (switch)", "trim_rate", ".3f"), ("retransmissions (plugin)", "retx_plugin", "d"),
        ("TCP retransmitted segments", "retx_tcp", "d"), ("replicas identical", "params_identical", ""),
        ("status", "status", "")]
# The baselines the demo runs, strongest first (TCP with a datacenter's 1 ms minimum RTO), and the
# names its table and JSON give them.
BASELINES = [("gloo-tuned", "Gloo (1 ms RTO)", "gloo_tuned"), ("gloo", "Gloo (TCP)", "gloo")]
SWITCH_ROWS = [("iteration p50 (ms)", "p50_ms", ".1f"), ("iteration p99 (ms)", "p99_ms", ".1f"),
               ("goodput (Gbit/s)", "gbps", ".3f"), ("bus bandwidth (Gbit/s)", "busbw_gbps", ".3f"),
               ("trim rate (receivers)", "trim_rate", ".4f"), ("switch: ours cut / dropped", "cut_dropped", ""),
               ("retransmissions", "retransmits", "d"), ("NMSE of the result", "nmse", ".3g"),
               ("replicas identical", "replicas_identical", ""), ("verify", "verify", "")]


def env(name, default):
    return os.environ.get(f"DEMO_{name}", default)


def side(rows, width):
    """Label, then right-aligned columns of 18."""
    return "\n".join(f"  {row[0]:<{width}}" + "".join(f"{c:>18}" for c in row[1:]) for row in rows)


def note(name, b):
    """Where a baseline run did not reach the target: how far it got."""
    pr = b.get("progress") or {}
    if not b.get("time_to_target_s") and b.get("run_wall_s"):
        return f"\n  ({name} did not reach 0.95 in its {b.get('steps')} steps, {b['run_wall_s']:.0f} s of training)"
    if pr.get("train_s"):
        return (f"\n  ({name} was stopped by the {b.get('limit_s')} s limit at step {pr.get('steps')}, after "
                f"{pr['train_s']:.0f} s of training, val accuracy {pr.get('val_acc') or 0:.3f}; its slowest epoch's p99 "
                f"{pr.get('iter_p99_ms_at_least') or 0:.0f} ms)")
    return ""


def headline(runs, tr):
    """The runs' summaries (congestion_report.augment's, by transport) -> (table text, summary dict)."""
    def get(key):
        return runs.get(key) or {}
    t, drop, g, gt, tt = get(tr), get("drop"), get("gloo"), get("gloo-tuned"), get(tr).get("time_to_target_s")
    cols = [(name, get(key)) for key, name, _ in BASELINES if key in runs or key == "gloo"]
    cols += [("our drop", drop)] if drop else []
    cols.append(({"hook": "trim (hook)", "trim": "trim (per hop)"}[tr], t))
    text = side([("", *(n for n, _ in cols))] + [(label, *(fmt(r.get(k), spec) for _, r in cols)) for label, k, spec in ROWS], 32)
    text += "".join(note(name, get(key)) for key, name, _ in BASELINES)
    summary = {"demo": "headline", "task": t.get("task") or g.get("task"), "trim_transport": tr,
               "cross_pct": t.get("cross_pct"), "rate_gbps": t.get("rate_gbps"), "buffer_bytes": t.get("buffer_bytes")}
    # The strongest baseline first; Gloo on Linux's defaults keeps its earlier keys. *_is_upper_bound: the baseline
    # never reached the target, or its limit stopped it (its run so far bounds its time and p99).
    for key, _, slug in BASELINES:
        b, sfx = get(key), "" if slug == "gloo" else "_" + slug
        pr, (tb, exact, _) = b.get("progress") or {}, base_ttt(b)
        p50_b = b.get("iter_p50_ms") or pr.get("iter_p50_ms")
        p99_b = b.get("iter_p99_ms") or pr.get("iter_p99_ms_at_least")
        same = t.get("val_acc") is not None and b.get("val_acc") is not None and t.get("steps") == b.get("steps")
        summary.update({f"tta_ratio_vs_{slug}": ratio(tt, tb),
                        f"tta{sfx}_is_upper_bound": tt is not None and not exact and bool(tb),
                        f"p50_ratio_vs_{slug}": ratio(t.get("iter_p50_ms"), p50_b),
                        f"p99_ratio_vs_{slug}": ratio(t.get("iter_p99_ms"), p99_b),
                        f"p99{sfx}_is_upper_bound": not b.get("iter_p99_ms") and bool(p99_b),
                        "acc_delta_points" + sfx: round(100 * (t["val_acc"] - b["val_acc"]), 3) if same else None})
    summary["tta_ratio_vs_drop"] = ratio(tt, drop.get("time_to_target_s"))
    # every rank of every run that finished; a run stopped by its limit has no final parameters
    finished = [r for r in (g, gt, drop) if r.get("status") == "ok"]
    summary["replicas_identical"] = bool(t.get("params_identical") and all(r.get("params_identical") for r in finished))
    summary.update({"gloo_finished": g.get("status") == "ok", "gloo_tuned_finished": gt.get("status") == "ok",
                    "trim_rate": t.get("trim_rate")})
    keep = ("status", "time_to_target_s", "iter_p50_ms", "iter_p99_ms", "val_acc", "steps", "efficiency")
    summary.update({slug: {k: get(key).get(k) for k in (*keep, "retx_tcp")} for key, _, slug in BASELINES})
    summary["trim"] = {k: t.get(k) for k in (*keep, "retx_plugin")}
    if drop:
        summary["drop"] = {k: drop.get(k) for k in (*keep, "retx_plugin")}
    return text, summary


def no_netns_reason():
    find = importlib.util.find_spec
    for bad, why in ((os.geteuid() != 0, "not root (network namespaces and TUN devices need it)"),
                     (not os.path.exists("/dev/net/tun"), "no /dev/net/tun"), (not shutil.which("ip"), "no ip (iproute2)"),
                     (not (find("torch") and find("sklearn")),
                      f"no torch or scikit-learn in {sys.executable} (make demo installs them)")):
        if bad:
            return why
    return None


def run_headline(build, out, tr):
    cross, period, rate, buf, limit = (env("CROSS", "60"), int(env("CROSS_PERIOD_MS", "10")), env("RATE_GBPS", "0.5"),
                                       env("BUFFER_BYTES", "131072"), env("LIMIT_S", "100"))
    print(f"== headline: DDP training (widemlp, 2 ranks, CPU) through one bottleneck: {rate} Gbit/s, {int(buf) // 1024} KiB "
          f"buffer, cross traffic {cross} % " + (f"in line-rate bursts ({period} ms period)" if period else "constant") +
          f"\n   Gloo on Linux's TCP and with a 1 ms minimum RTO vs the plugin trimming ({tr}); about 3 minutes", flush=True)
    root = out / "headline"
    root.mkdir(parents=True, exist_ok=True)
    transports = ["gloo-tuned", "gloo"] + ["drop"] * (env("DROP", "0") == "1") + [tr]
    with open(root / "report.md", "w") as rep, open(out / "headline.log", "w") as log:
        rc = subprocess.run([sys.executable, "-m", "bench", "congestion", "--cpu", "--plan", f"widemlp:c{cross}",
                             "--transports", ",".join(transports), "--rate-gbps", rate, "--buffer-bytes", buf,
                             "--cross-period-ms", str(period), "--max-steps", env("STEPS", "40"), "--timeout-s", limit,
                             "--build", build, "--out", root], stdout=rep, stderr=log).returncode
    runs = {s.get("transport"): s for s in load(root)}
    if any(map(stalled, runs.values())):
        print(f"   (a run was stopped by its {limit} s limit, as Gloo often is at this congestion: the table says how far it got)")
    if rc:
        log = (out / "headline.log").read_text(errors="replace")
        print(f"demo: a training run failed (exit {rc}); the bench's log:\n" + "\n".join(log.splitlines()[-15:]), file=sys.stderr)
    text, summary = headline(runs, tr)
    write_json(out / "summary.json", summary)
    print(f"{text}\nreport: {root / 'report.md'} (every number, the goal's verdict)")
    if (root / "time_to_accuracy.png").exists():
        print(f"plot: {root / 'time_to_accuracy.png'}")


def trim_rates(lines):
    """Per stats interval: (t_s, forwarded, of which trimmed, trim rate), from the switch's running totals."""
    prev, rows = (0, 0), []
    for d in lines:
        if d.get("event") == "interval":
            fwd, trm = d["forwarded"] - prev[0], d["forwarded_trimmed"] - prev[1]
            prev = (d["forwarded"], d["forwarded_trimmed"])
            rows += [(d["t_ms"] / 1000, fwd, trm, trm / fwd)] if fwd > 0 else []
    return rows


def switch_demo(build, out):
    """A 4-rank AllReduce through trim-switch on loopback (bench.scenarios.through_switch), a trimming
    switch vs a tail-drop one, same seed and cross traffic: a table, summary.json, switch_demo.png."""
    sw = ["--rate-gbps", env("RATE_GBPS", "1"), "--buffer-packets", env("BUFFER_PACKETS", "8"), "--buffer-bytes", 0,
          "--prop-delay-us", env("PROP_US", "200"), "--cross", env("CROSS", "incast:8:0.04:all"), "--seed", env("SEED", "7"),
          "--stats-interval-ms", 100]
    print(f"== switch demo: {env('RANKS', '4')}-rank AllReduce of {env('BYTES', '1M')} through trim-switch ({sw[1]} Gbit/s, "
          f"{sw[3]}-packet buffer, {sw[7]} us, cross {sw[9]})\n   our plugin with trimming vs our plugin with tail drop, on "
          "loopback (not NCCL Socket: the Socket\n   head-to-head through one bottleneck is in docs/RESULTS.md, \"On a GPU machine\")",
          flush=True)
    res, rates = {}, {}
    for m in ("trim", "drop"):
        h, fin, rc, _ = through_switch(build, ["--mode", m, *sw, "--trim-exact", env("TRIM_EXACT", "1") if m == "trim" else 0],
                                       ["--mode", "allreduce", "--ranks", env("RANKS", "4"), "--bytes", env("BYTES", "1M"),
                                        "--iters", env("ITERS", "60"), "--warmup", 1, "--seed", env("SEED", "7"),
                                        "--deadline-s", 60, "--csv", out / f"iters_{m}.csv"], {}, out, m, env("MTU", "4096"))
        if rc:
            raise SystemExit(f"demo: trim-harness ({m}) failed (exit {rc}): {json.dumps(h)}; see {out}/{m}.harness.log")
        sw_row = row(m, h, fin, 0)  # real packets (ours) the switch cut / dropped, without the cross traffic's
        res[m] = {**h, "cut_dropped": f"{sw_row['sw_trimmed']}/{sw_row['sw_dropped']}"}
        rates[m] = trim_rates(read_jsonl(out / f"{m}.switch.jsonl"))
        (out / f"trimrate_{m}.dat").write_text("# t_s forwarded trimmed trim_rate\n" + "".join(
            f"{t:.2f} {f} {x} {r:.4f}\n" for t, f, x, r in rates[m]))
    t, d = res["trim"], res["drop"]
    print(side([("", "plugin, trim", "plugin, drop")] + [(n, fmt(t[k], f), fmt(d[k], f)) for n, k, f in SWITCH_ROWS], 28))
    summary = {**{f"{m}_{k}": round(res[m][k], 3) for m in res for k in ("p50_ms", "p99_ms")},
               "p99_ratio": ratio(t["p99_ms"], d["p99_ms"], 4), "p50_ratio": ratio(t["p50_ms"], d["p50_ms"], 4),
               **{f"{m}_gbps": res[m]["gbps"] for m in res}, "trim_rate": t["trim_rate"],
               **{f"{m}_retransmits": res[m]["retransmits"] for m in res}, "nmse": t["nmse"],
               "replicas_identical": bool(t["replicas_identical"] and d["replicas_identical"])}
    write_json(out / "summary.json", summary)
    if plt := pyplot():
        fig, (a1, a2) = panels(plt, 2, cols=2, width=5.5, height=4.4)
        for m in res:
            iters = [x.split(",") for x in (out / f"iters_{m}.csv").read_text().splitlines()[1:]]
            a1.plot([int(x[0]) for x in iters], [float(x[1]) for x in iters], ".-", label=m)
            a2.plot([x[0] for x in rates[m]], [x[3] for x in rates[m]], ".-", label=m)
        finish(a1, "iteration time", "iteration", "ms (slowest rank)")
        finish(a2, "trimmed share of forwarded packets (per 100 ms)", "time since the switch started (s)", "trim rate")
        fig.suptitle("4-rank AllReduce through trim-switch: trimming vs tail drop")
        print(f"plot: {save(plt, fig, out / 'switch_demo.png')}")
    return summary


def codec_plot(out, plt):
    """codec_nmse.png from trim-demo's codec_nmse.dat: NMSE after trimming per encoding, one
    worker and the 8-worker average."""
    head, *rows = [x.split() for x in (out / "codec_nmse.dat").read_text().splitlines() if x.strip()]
    cols = {name: [float(r[i]) for r in rows] for i, name in enumerate(head[1:])}  # head[0] is the '#'
    names = {"sign": "sign", "sq": "sq", "sd": "sd", "rht": "rht (1-bit heads)", "rht2": "rht (2-bit heads)",
             "rht16": "rht (16-bit heads)", "drop": "drop (no trim, before resend)"}
    fig, axes = panels(plt, 2, cols=2, width=5.5, height=4.4)
    for ax, part, title in zip(axes, ("one", "avg"), ("one worker's gradient", "average of 8 workers (allreduce)")):
        for enc, label in names.items():
            style = {"color": "gray", "linestyle": "--"} if enc == "drop" else {"marker": ".", "linewidth": 2 if enc == "rht" else 1}
            ax.plot(cols["fraction"], [v if v > 0 else float("nan") for v in cols[f"{enc}_{part}"]], label=label, **style)
        finish(ax, title, "fraction of packets trimmed", "NMSE", yscale="log", ylim=(1e-7, 20))
    fig.suptitle("nccl-trim codec: error after packet trimming")
    return save(plt, fig, out / "codec_nmse.png")


def main(argv):
    ap = argparse.ArgumentParser(prog="python3 -m bench demo", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", nargs="?", default="build", help="the build folder [build]")
    build = build_dir(ap.parse_args(argv).build)
    out, tr = build / "demo", env("TRIM", "hook")
    if tr not in ("hook", "trim"):
        print(f"demo: DEMO_TRIM={tr}: expected hook or trim", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").unlink(missing_ok=True)
    why = no_netns_reason()
    if why:
        print(f"== headline skipped: {why}\n   (it trains through network namespaces: run make demo as root on Linux with iproute2)")
    else:
        run_headline(build, out, tr)
    if why or env("SWITCH", "0") == "1":
        s = switch_demo(build, out)
        if why:
            nulls = dict.fromkeys(f"{k}_ratio_vs_{b}" for b in ("gloo_tuned", "gloo") for k in ("tta", "p50", "p99"))
            write_json(out / "summary.json", {"demo": "switch", "headline_skipped": why, **nulls, "tta_ratio_vs_drop": None,
                                              "acc_delta_points": None, "replicas_identical": s.get("replicas_identical"),
                                              "switch": s})
    print("== codec demo", flush=True)
    subprocess.run([build / "bin/trim-demo", "--out", out], check=True)
    if plt := pyplot():
        print(f"plot: {codec_plot(out, plt)}")
    print((out / "summary.json").read_text(), end="")
    return 0
