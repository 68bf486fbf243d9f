"""Results of `python -m bench congestion`: tables, plots and the goal's verdict.

The baseline is what users run without the plugin: NCCL Socket on a GPU machine, Gloo on CPU.
The goal (issue 20), at 60 % cross load without loss, on the task with the most gradient bytes:
trimming's time to target and iteration p99 at most 0.5x the baseline's, its final accuracy at
most 0.3 points below. Each part is met, missed or unknown; where the baseline never reached the
target, its run's length bounds its time (a ratio_below)."""

import argparse
import json
import sys
from pathlib import Path

from .ddp_report import events
from .jsonio import emit, load_json, read_jsonl, write_json
from .plot import finish, panels, pyplot, save
from .report import fmt, ratio, table

TRANSPORTS = ["socket", "socket-tuned", "gloo", "gloo-tuned", "drop", "trim", "trim16", "hook"]  # the report's order
BASELINES = ("socket", "socket-tuned", "gloo", "gloo-tuned")
STRONGEST = ("socket-tuned", "gloo-tuned", "socket", "gloo")  # the baseline a goal is judged against first
LIMITED = ("failed (124)", "failed (137)")  # a run's status when its limit stopped it (timeout's TERM, then KILL)
TRIMMING = ("trim", "trim16", "hook")  # the transports the goal is judged for
GOAL_CROSS, GOAL_TTT, GOAL_P99, GOAL_ACC_POINTS = 60.0, 0.5, 0.5, 0.3
SWITCH_KEYS = ["trim_forwarded", "trim_trimmed", "trim_dropped", "trim_lost", "trimctl_dropped", "tcp_forwarded",
               "tcp_dropped", "tcp_lost", "lost", "cross", "max_queue", "bad", "no_route"]
COLUMNS = [("task", "task", ""), ("transport", "transport", ""), ("cross %", "cross_pct", "g"),
           ("loss %", "loss_pct", "g"), ("to target s", "time_to_target_s", ".2f"),
           ("steps to target", "steps_to_target", "d"), ("p50 ms", "iter_p50_ms", ".1f"),
           ("p99 ms", "iter_p99_ms", ".1f"), ("bound ms", "bound_ms", ".1f"), ("efficiency", "efficiency", ".3f"),
           ("final acc", "val_acc", ".4f"), ("val loss", "val_loss", ".4f"), ("trim rate (switch)", "trim_rate", ".4f"),
           ("plugin trimmed", "plugin_trimmed", "d"), ("retx (ours)", "retx_plugin", "d"),
           ("TCP retx", "retx_tcp", "d"), ("identical", "params_identical", "")]
KEEP = ["label", "task", "transport", "cross_pct", "loss_pct", "status", "iter_p50_ms", "iter_p99_ms", "iter_max_ms",
        "bound_ms", "efficiency", "time_to_target_s", "steps_to_target", "steps", "val_acc", "val_loss", "trim_rate",
        "plugin_trim_rate", "plugin_trimmed", "retx_plugin", "retx_tcp", "retransmissions", "params_identical",
        "compute_ms", "comm_share", "grad_bytes", "stopped_by_time_limit", "wall_s", "overhead_s", "estimate_s"]


def share(d, part, whole):
    return (d.get(part) or 0) / d[whole] if d.get(whole) else None


def augment(d):
    """Add the bottleneck's view to RUNDIR/summary.json (ddp_report.summarize's): the switch's
    counters, trim rates, retransmissions, compute time, how far a run stopped by its limit got."""
    d = Path(d)
    s = load_json(d / "summary.json") or {"label": d.name, "status": "failed (no summary)"}
    run = json.loads((d / "run.json").read_text())
    s.update(transport=run.get("transport"), estimate_s=run.get("estimate_s"), limit_s=run.get("limit_s"),
             **(run.get("bottleneck") or {}))
    w = (events(d / "switch.jsonl", "final") or [{}])[-1]
    s["bottleneck_switch"] = {k: w.get(k) for k in SWITCH_KEYS} if w else None
    s["trim_rate"] = share(w, "trim_trimmed", "trim_forwarded")
    tcp = events(d / "bottleneck.out", "tcp")
    s["tcp_retrans_segs"] = s["retx_tcp"] = sum(e.get("tcp_retrans_segs", 0) for e in tcp)
    plugin = s.get("plugin") or {}
    s["retx_plugin"], s["plugin_trimmed"] = plugin.get("retransmitted"), plugin.get("trimmed_accepted")
    s["plugin_trim_rate"] = share(plugin, "trimmed_accepted", "sent_packets")
    s["retransmissions"] = s["retx_tcp"] if s["transport"] in BASELINES else s["retx_plugin"]
    rank0 = read_jsonl(d / "rank0.jsonl")
    cfg, fin = (events(rank0, "config") or [{}])[0], (events(rank0, "final") or [{}])[-1]
    epochs = events(rank0, "epoch")
    s.update(grad_bytes=cfg.get("grad_bytes"), val_count=(cfg.get("data") or {}).get("val"),
             compute_ms=fin.get("compute_ms"), steps_to_target=fin.get("steps_to_target"),
             stopped_by_time_limit=fin.get("stopped_by_time_limit"), run_wall_s=fin.get("wall_s"))
    # What a launch costs besides training: the estimate's --startup-s, measured.
    s["overhead_s"] = round(s["wall_s"] - s["run_wall_s"], 1) if s.get("wall_s") and s["run_wall_s"] else None
    s["param_sha256_full"] = (fin.get("param_sha256") or [None])[0]
    # A run stopped by its limit before its final line: how far it got (an epoch line's steps
    # are that epoch's, an eval line's the run's so far); a target line gives its time.
    last = next((e for e in reversed(rank0) if e.get("event") in ("epoch", "eval") and e.get("steps")), None)
    tgt = (events(rank0, "target") or [None])[0]
    if not fin and tgt:
        s["time_to_target_s"], s["steps_to_target"] = tgt.get("wall_s"), tgt.get("step")
    p99s = [e["iter_p99_ms"] for e in epochs if e.get("iter_p99_ms")]
    s["progress"] = None if not last or fin else {
        "steps": last["steps"] if last["event"] == "eval" else sum(e.get("steps") or 0 for e in epochs),
        "train_s": last.get("train_s"), "val_acc": last.get("val_acc"), "iter_p50_ms": last.get("iter_p50_ms"),
        "iter_p99_ms_at_least": max(p99s, default=None)}
    s["curve"] = sorted((e["train_s"], e["val_acc"]) for e in rank0 if e.get("event") in ("epoch", "eval")
                        and e.get("train_s") is not None and e.get("val_acc") is not None)
    p50 = s.get("iter_p50_ms")
    s["comm_share"] = 1 - s["compute_ms"] / p50 if s["compute_ms"] and p50 else None
    s["bound_ms"] = step_bound_ms(s, run.get("ranks") or 2)
    s["efficiency"] = round(s["bound_ms"] / p50, 3) if s["bound_ms"] and p50 else None
    write_json(d / "summary.json", s)
    return s


def step_bound_ms(s, ranks):
    """What no transport can beat at this point: the step's compute plus the bytes each rank must
    push through its port (a ring allreduce: 2(N-1)/N of the gradient) at the rate the cross
    traffic leaves. None where the compute time was not measured."""
    rate, grad = s.get("rate_gbps"), s.get("grad_bytes")
    if not (rate and grad and s.get("compute_ms") is not None):
        return None
    free_bps = rate * 1e9 * (1 - (s.get("cross_pct") or 0) / 100)
    return round(s["compute_ms"] + 2 * (ranks - 1) / ranks * grad * 8 / free_bps * 1e3, 1)


def point(r):
    return (r.get("task"), r.get("cross_pct") or 0.0, r.get("loss_pct") or 0.0)


def point_name(r):
    prio = "high-priority " if r.get("cross_prio") == "high" else ""
    return f"loss {r['loss_pct']:g} %" if r.get("loss_pct") else f"{prio}cross {r.get('cross_pct') or 0:g} %"


def point_order(pt):
    return (pt[0] or "", pt[2], pt[1])


def load(root):
    """Every run's summary under ROOT (not the calibration's), by task, point and transport."""
    runs = [s for f in sorted(Path(root).glob("*/summary.json")) if f.parent.name != "calibration_run"
            for s in [load_json(f)] if s]
    order = {t: i for i, t in enumerate(TRANSPORTS)}
    return sorted(runs, key=lambda r: (*point_order(point(r)), order.get(r.get("transport"), 9)))


def runs_table(runs):
    """Every run; `= baseline`: its parameters equal the baseline's of the same point."""
    base_sha = {point(r): r.get("param_sha256_full") for r in runs if r.get("transport") in BASELINES}
    rows = [[fmt(r.get(k), spec) for _, k, spec in COLUMNS] +
            ["-" if r.get("transport") in BASELINES else fmt(r.get("param_sha256_full") == ref if ref and r.get("param_sha256_full") else None)
             for ref in [base_sha.get(point(r))]] +
            [fmt(r.get("status")) + (" (time limit)" if r.get("stopped_by_time_limit") else "")] for r in runs]
    return table([c[0] for c in COLUMNS] + ["= baseline", "status"], rows, md=True)


def ok(r):
    return bool(r) and r.get("status") == "ok"


def base_ttt(s):
    """The baseline's time to target: (seconds, True, None) when it reached it, else (a lower
    bound, False, why): its whole run when it ended, its training until its limit when it did not;
    (None, False, None) when neither is known."""
    if s.get("time_to_target_s") is not None:
        return s["time_to_target_s"], True, None
    base, pr = s.get("transport") or "baseline", s.get("progress") or {}
    if ok(s) and s.get("run_wall_s"):
        return s["run_wall_s"], False, f"{base} did not reach {s.get('target_acc')} in its {s.get('steps')} steps ({s['run_wall_s']:.0f} s)"
    if pr.get("train_s"):
        return pr["train_s"], False, f"{base} {s.get('status')} at step {pr.get('steps')} after {pr['train_s']:.0f} s"
    return None, False, None


def ratio_part(r, goal, below=False, **kw):
    """A ratio part of the goal: met at most GOAL, else missed (unknown where R only bounds it from above)."""
    state = "unknown" if r is None else "met" if r <= goal else "unknown" if below else "missed"
    return {"ratio_below" if below else "ratio": r, "state": state, **kw}


def ttt_part(t, s, tr):
    """The goal's time-to-target part: trimming run T against baseline run S."""
    tt, (ts, exact, why) = t.get("time_to_target_s"), base_ttt(s)
    if exact and tt is None:
        return {"ratio": None, "state": "missed", "trim_s": None, "base_s": ts,
                "why": f"{tr} did not reach {t.get('target_acc')} in {t.get('steps')} steps"}
    if tt is not None and (exact or ts):
        return ratio_part(round(tt / ts, 3), GOAL_TTT, not exact, trim_s=tt, base_s=ts if exact else None,
                          **({} if exact else {"why": why}))
    return {"state": "unknown", "why": "neither run reached the target"}


def stopped_base(t, s):
    """The baseline was stopped by its limit before its end while T reached the target."""
    return ok(t) and not ok(s) and (s.get("progress") or {}).get("train_s") and t.get("time_to_target_s") is not None


def stalled(s):
    """A baseline stopped by its limit after it trained: TCP's stall, measured (the report bounds its time
    by how far it got), a result; one of ours stopped so, or a run that never trained, failed."""
    return (s.get("transport") in BASELINES and s.get("status") in LIMITED
            and bool((s.get("progress") or {}).get("steps")))


def compare(t, s, drop=None):
    """Run T against the baseline run S of the same point; DROP (same point) helps say why."""
    tr, base = t.get("transport"), s.get("transport") or "baseline"
    c = {"transport": tr, "status": t.get("status"), "baseline": s.get("transport")}
    if stopped_base(t, s):
        pr, (ts, exact, _) = s["progress"], base_ttt(s)
        c["ttt_ratio" if exact else "ttt_ratio_below"] = round(t["time_to_target_s"] / ts, 3)
        c["note"] = (f"{base} {s.get('status')}: step {pr['steps']} after {pr['train_s']:.0f} s of training (val acc "
                     f"{pr.get('val_acc') or 0:.3f}, last epoch's p50 {pr.get('iter_p50_ms') or 0:.0f} ms); "
                     f"{tr} reached the target in {t['time_to_target_s']:.0f} s")
        return c
    if not ok(t) or not ok(s):
        c["note"] = f"{base} run missing or failed" if not ok(s) else f"run {t.get('status')}"
        return c
    for k, key in (("ttt", "time_to_target_s"), ("steps", "steps_to_target"), ("p50", "iter_p50_ms"), ("p99", "iter_p99_ms")):
        c[k + "_ratio"] = ratio(t.get(key), s.get(key))
    if t.get("val_acc") is not None and s.get("val_acc") is not None:
        c["acc_diff_points"] = round(100 * (t["val_acc"] - s["val_acc"]), 3)
    c["same_steps"] = t.get("steps") == s.get("steps")
    a, b = t.get("param_sha256_full"), s.get("param_sha256_full")
    c["params_equal_baseline"] = a == b if a and b else None
    unreached = t.get("time_to_target_s") is None and s.get("time_to_target_s") is not None
    acc = c.get("acc_diff_points", 0)
    c["baseline_wins"] = wins = [w for w, yes in (  # where the baseline is better
        ("time to target (not reached)", unreached),
        (f"time to target ({fmt(c['ttt_ratio'], 'g')}x)", not unreached and (c["ttt_ratio"] or 0) > 1),
        (f"p99 ({fmt(c['p99_ratio'], 'g')}x)", (c["p99_ratio"] or 0) > 1),
        (f"accuracy ({acc:+.2f} points)", acc < -GOAL_ACC_POINTS)) if yes]
    slow = wins and (c["steps_ratio"] or 0) >= 1.15
    why = [f"needed {c['steps_ratio']:g}x the steps to the target (accuracy)"] if slow else []
    if wins and (c["p50_ratio"] or 0) > 1:
        steps, dr = f"steps {c['p50_ratio']:g}x {base}'s", ratio((drop or {}).get("iter_p50_ms"), s.get("iter_p50_ms")) if ok(drop) else None
        why.append(f"{steps}: the plugin's transport (no trimming here)" if tr == "drop" else
                   f"{steps} (no drop run to tell transport from trimming)" if dr is None else
                   f"{steps}, drop's {dr:g}x too: the plugin's transport, not trimming" if dr > 1 else
                   f"{steps} while drop's are {dr:g}x: trimming itself "
                   f"(retransmissions {t.get('retx_plugin')} vs drop's {drop.get('retx_plugin')})")
    c["why"] = "; ".join(why) or None
    return c


def by_point(runs):
    return {pt: {r.get("transport"): r for r in runs if point(r) == pt} for pt in dict.fromkeys(map(point, runs))}


def comparisons(runs):
    """Every transport of a point against every baseline there (the strongest first), and each
    trimming transport against our own drop, which isolates what trimming itself adds."""
    out = []
    for (task, c, l), rs in sorted(by_point(runs).items(), key=lambda kv: point_order(kv[0])):
        ours = [tr for tr in TRANSPORTS if tr in rs and tr not in BASELINES]
        pairs = [(tr, b) for b in STRONGEST if b in rs for tr in ours] or [(tr, None) for tr in ours]
        pairs += [(tr, "drop") for tr in TRIMMING if tr in rs and "drop" in rs]
        out += [{"task": task, "cross_pct": c, "loss_pct": l, **compare(rs[tr], rs.get(b) or {}, rs.get("drop"))}
                for tr, b in pairs]
    return out


def judge(runs, tr="trim", base=None):
    """The goal for trimming transport TR at 60 % cross, no loss, on the task with the most gradient
    bytes (widemlp where no run says), against BASE there (default: the strongest baseline there)."""
    task = max(((r.get("grad_bytes") or 0, r["task"] == "widemlp", r["task"]) for r in runs if r.get("task")),
               default=[None])[-1]
    at = by_point(runs).get((task, GOAL_CROSS, 0.0), {})
    base = base or next((b for b in STRONGEST if b in at), "gloo")
    B = base.capitalize()
    g = {"goal": f"{tr} vs {B} at {GOAL_CROSS:g} % cross load: time to target <= {GOAL_TTT}x, "
                 f"iteration p99 <= {GOAL_P99}x, final accuracy >= {B}'s - {GOAL_ACC_POINTS} points",
         "transport": tr, "baseline": base, "task": task, "state": "unknown", "parts": {}}
    s, t = at.get(base), at.get(tr)
    if not task or not s or not t:
        g["detail"] = f"no {base if not s else tr} run of {task} at {GOAL_CROSS:g} % cross"
        return g
    stopped = stopped_base(t, s)  # its time to target > its training so far, its p99 >= its slowest epoch's
    if not stopped and not (ok(s) and ok(t)):
        g["detail"] = "; ".join(f"{n} run {r.get('status')}" for n, r in ((base, s), (tr, t)) if not ok(r))
        return g
    p99, p99_base = t.get("iter_p99_ms"), s["progress"].get("iter_p99_ms_at_least") if stopped else s.get("iter_p99_ms")
    r = ratio(p99, p99_base)
    g["parts"] = parts = {"time_to_target": ttt_part(t, s, tr), "p99": (
        ratio_part(r, GOAL_P99, trim_ms=p99, base_ms=p99_base) if not stopped else
        ratio_part(r, GOAL_P99, True, trim_ms=p99, base_ms_at_least=p99_base) if r is not None else
        {"state": "unknown", "why": "no p99 of the baseline"}),
        "accuracy": {"state": "unknown", "why": f"{base} did not finish"} if stopped else accuracy_part(t, s, tr, base)}
    states = [p["state"] for p in parts.values()]
    g["state"] = "missed" if "missed" in states else ("met" if all(x == "met" for x in states) else "unknown")
    g["detail"] = ", ".join(f"{k} {v['state']}" for k, v in parts.items())
    return g


def accuracy_part(t, s, tr, base):
    """Final accuracies, only between runs of the same length; one val sample's worth in points."""
    res = round(100 / s["val_count"], 3) if s.get("val_count") else None
    if t.get("steps") != s.get("steps"):
        return {"state": "unknown", "why": f"different lengths: {tr} {t.get('steps')} steps, "
                                            f"{base} {s.get('steps')} (a time limit stopped one)"}
    if t.get("val_acc") is None or s.get("val_acc") is None:
        return {"state": "unknown", "why": "no final accuracy"}
    dp = 100 * (t["val_acc"] - s["val_acc"])
    p = {"diff_points": round(dp, 3), "state": "met" if dp >= -GOAL_ACC_POINTS else "missed", "trim": t["val_acc"],
         "base": s["val_acc"], "resolution_points": res, "val_loss_trim": t.get("val_loss"), "val_loss_base": s.get("val_loss")}
    if res and res > GOAL_ACC_POINTS / 2:
        p["note"] = (f"one val sample is {res:g} points: {GOAL_ACC_POINTS} points is "
                     f"{GOAL_ACC_POINTS / res:.1f} samples, so one seed decides little")
    return p


def judge_md(goals, comps):
    lines = []
    for g in goals:
        lines += [f"## Goal ({g['task']}, {g['transport']}): {g['state'].upper()}", "", g["goal"] + ".", ""]
        for k, p in g["parts"].items():
            val = p.get("ratio", p.get("ratio_below", p.get("diff_points")))
            shown = "-" if val is None else ("< " if "ratio_below" in p else "") + f"{val:g}" + (" points" if k == "accuracy" else "x")
            extra = "; ".join(str(p[x]) for x in ("why", "note") if p.get(x))
            lines.append(f"- {k}: {shown} -> {p['state']}" + (f" ({extra})" if extra else ""))
        lines += ([] if g["parts"] else [f"- {g.get('detail')}"]) + [""]
    rows = [[fmt(c["task"]), point_name(c), c["transport"], fmt(c.get("baseline")),
             f"< {c['ttt_ratio_below']:g}" if c.get("ttt_ratio_below") is not None else fmt(c.get("ttt_ratio"), "g"),
             *(fmt(c.get(k + "_ratio"), "g") for k in ("steps", "p50", "p99")), fmt(c.get("acc_diff_points"), "+.2f"),
             fmt(c.get("params_equal_baseline")),
             ", ".join(c.get("baseline_wins") or []) or ("-" if "baseline_wins" in c else c.get("note", "-")),
             c.get("why") or "-"] for c in comps]
    lines += ["## Every point against its baselines (the strongest first) and our own drop", "",
              table(["task", "point", "transport", "against", "to target", "steps", "p50", "p99", "acc diff (points)",
                     "same params", "it wins", "why"], rows, md=True), ""]
    for base in dict.fromkeys(c["baseline"] for c in comps if c.get("baseline")):
        wins = [f"{c['task']} {point_name(c)} vs {c['transport']}: {', '.join(c['baseline_wins'])}"
                for c in comps if c.get("baseline") == base and c.get("baseline_wins") and c["transport"] in TRIMMING]
        lines.append(f"{base} wins against trimming at: " + ("; ".join(wins) or "no point measured"))
    return "\n".join(lines)


def plot(runs, out, plt):
    """congestion.png (iteration times over cross load and loss, time to target per task),
    time_to_target.png (a run that never reached it: an x at its length) and time_to_accuracy.png
    (val accuracy over training time per point, the target dashed)."""
    tasks, paths = sorted({r["task"] for r in runs if r.get("task")}), []
    if not tasks:
        return paths
    fig, axes = panels(plt, 3 * len(tasks), cols=3, width=5, height=4)
    fig2, axes2 = panels(plt, len(tasks), cols=len(tasks), width=6, height=4.2)
    for i, task in enumerate(tasks):
        ax = axes[3 * i: 3 * i + 3]
        for tr in TRANSPORTS:
            rs = [r for r in runs if r.get("task") == task and r.get("transport") == tr]
            cross = sorted((r for r in rs if not r.get("loss_pct")), key=lambda r: r.get("cross_pct") or 0)
            loss = sorted((r for r in rs if r.get("loss_pct") and not r.get("cross_pct")), key=lambda r: r["loss_pct"])
            xs = [r.get("cross_pct") or 0 for r in cross]
            if cross:
                ax[0].plot(xs, [r.get("iter_p99_ms") for r in cross], "o-", label=f"{tr} p99")
                ax[0].plot(xs, [r.get("iter_p50_ms") for r in cross], "x--", label=f"{tr} p50")
                for x, r in zip(xs, cross):  # each transport's efficiency (bound / p50) at each point
                    if r.get("efficiency"):
                        ax[0].annotate(f"{r['efficiency']:.2f}", (x, r["iter_p50_ms"]), fontsize=6, alpha=0.7)
                ax[2].plot(xs, [r.get("time_to_target_s") for r in cross], "o-", label=tr)
            if loss:
                ax[1].plot([r["loss_pct"] for r in loss], [r.get("iter_p99_ms") for r in loss], "o-", label=f"{tr} p99")
            done = [(x, r) for x, r in zip(xs, cross) if ok(r)]
            got = [(x, r["time_to_target_s"]) for x, r in done if r.get("time_to_target_s") is not None]
            miss = [(x, r["run_wall_s"]) for x, r in done if r.get("time_to_target_s") is None and r.get("run_wall_s")]
            color = axes2[i].plot(*zip(*got), "o-", label=tr)[0].get_color() if got else None
            if miss:
                axes2[i].plot(*zip(*miss), "x", color=color, markersize=9, label=f"{tr}: not reached (run length)")
        bound = sorted({(r.get("cross_pct") or 0, r["bound_ms"]) for r in runs if r.get("task") == task
                        and not r.get("loss_pct") and r.get("bound_ms")})
        if bound:
            ax[0].plot(*zip(*dict(bound).items()), ":", color="k", marker="_", markersize=16,
                       label="bound (compute + bytes / free rate)")
        finish(ax[0], f"{task}: iteration time vs cross load (numbers: bound / p50)", "cross load (% of port rate)", "ms", 7)
        finish(ax[1], f"{task}: iteration p99 vs random loss", "loss (%)", "ms", 7, xscale="log")
        finish(ax[2], f"{task}: time to target accuracy", "cross load (%)", "s", 7)
        target = next((r["target_acc"] for r in runs if r.get("task") == task and r.get("target_acc")), None)
        finish(axes2[i], f"{task}: time to {target} val accuracy", "cross load (% of port rate)", "s (training wall clock)")
    paths += [save(plt, fig, Path(out) / "congestion.png"), save(plt, fig2, Path(out) / "time_to_target.png")]
    pts = sorted({point(r) for r in runs if r.get("curve")}, key=point_order)
    if pts:
        fig, axes = panels(plt, len(pts))
        for ax, pt in zip(axes, pts):
            rs = [r for tr in TRANSPORTS for r in runs if r.get("transport") == tr and point(r) == pt and r.get("curve")]
            for r in rs:
                ax.plot(*zip(*r["curve"]), ".-", label=r["transport"] + ("" if ok(r) else f" ({r.get('status')})"))
            target = next((r["target_acc"] for r in rs if r.get("target_acc")), None)
            if target:
                ax.axhline(target, color="grey", linestyle="--", linewidth=0.8)
            finish(ax, f"{pt[0]}, {point_name({'cross_pct': pt[1], 'loss_pct': pt[2]})}", "training wall clock (s)",
                   "val accuracy", ylim=(max(0.0, (target or 0.5) - 0.45), 1.0))
        paths.append(save(plt, fig, Path(out) / "time_to_accuracy.png"))
    return paths


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench congestion-report", description=__doc__)
    p.add_argument("dir", nargs="?", help="a congestion results folder: markdown tables, PNGs, one JSON line last")
    p.add_argument("--augment", metavar="RUNDIR", help="add the bottleneck's view to RUNDIR/summary.json")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--meta", metavar="FILE", help="a JSON object to put into the JSON line as meta")
    a = p.parse_args(argv)
    if a.augment:
        augment(a.augment)
        return 0
    if not a.dir:
        p.error("DIR or --augment RUNDIR")
    root, runs = Path(a.dir), load(a.dir)
    comps, present = comparisons(runs), {r.get("transport") for r in runs}
    # the strongest baseline's goals first: goals[0] is the headline verdict
    goals = [judge(runs, tr, b) for b in STRONGEST if b in present for tr in TRIMMING if tr in present]
    goals = goals or [judge(runs, tr) for tr in TRIMMING if tr in present] or [judge(runs)]
    bench, cal, skipped = load_json(root / "bench.json"), load_json(root / "calibration.json"), read_jsonl(root / "skipped.jsonl")
    over = sorted(r["overhead_s"] for r in runs if r.get("overhead_s") is not None)
    print("\n\n".join([runs_table(runs)] + [x for x in (
        cal and (f"Calibration ({cal.get('run')}): compute {fmt(cal.get('compute_ms'), '.2f')} ms, iteration p50 "
                 f"{fmt(cal.get('iter_p50_ms'), '.2f')} ms, communication share {fmt(cal.get('comm_share'), '.2f')}, "
                 f"port goodput {fmt(cal.get('goodput_gbps'), '.2f')} Gbit/s: {cal.get('decision')}"),
        over and (f"Start-up and tear-down per run (wall clock outside training): median {over[len(over) // 2]:g} s, "
                  f"{over[0]:g}-{over[-1]:g} s over {len(over)} runs (the estimate assumed {fmt((bench or {}).get('startup_s'), 'g')} s)"),
        skipped and "Skipped: " + "; ".join(f"{s.get('label')} ({s.get('why')})" for s in skipped)) if x]) + "\n")
    print(judge_md(goals, comps))
    plt = None if a.no_plots else pyplot()
    pngs = [str(x) for x in plot(runs, root, plt)] if plt else []
    if not a.no_plots:  # (PNGs only come with plots)
        print("\n".join(f"plot: {x}" for x in pngs) or "plot: skipped (no matplotlib)", file=sys.stderr)
    emit({"bench": "congestion", "goal": goals[0], "goals": goals, "settings": bench, "calibration": cal,
          "skipped": skipped, "versions": next((r["versions"] for r in runs if r.get("versions")), None),
          "meta": load_json(a.meta) if a.meta else None, "plots": pngs,
          "runs": [{k: r.get(k) for k in KEEP} for r in runs], "comparisons": comps})
    return 0
