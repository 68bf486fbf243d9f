#!/usr/bin/env python3
"""Results of scripts/congestion_bench.sh: one bottleneck, four transports, and the verdict on
the goal (issue 20 on a GPU machine against NCCL Socket, issue 25 on CPU against Gloo).

  plot_congestion.py --augment RUNDIR   add the bottleneck's view to RUNDIR/summary.json (written
                                        by plot_ddp.py --summarize): the switch's per-class
                                        counters, trim rates, TCP and plugin retransmissions, the
                                        run's compute time, steps to target, accuracy resolution
  plot_congestion.py DIR [--no-plots] [--meta FILE]
                                        every run under DIR: markdown tables (the runs; every
                                        point against the baseline; the goal), DIR/congestion.png,
                                        DIR/time_to_target.png and DIR/time_to_accuracy.png
                                        (matplotlib, if installed) and,
                                        last, one JSON line (FILE's JSON object, e.g. the GPU
                                        session's versions, goes into it as "meta")

The baseline is what users run without the plugin: NCCL Socket (transport socket) on a GPU
machine, Gloo (transport gloo, congestion_bench.sh --cpu) on CPU. "Socket" below stands for it.

Per run: time to the target accuracy (s, wall clock of training with its evaluations) and the
steps it took, iteration time p50/p99 (ms), final val accuracy and loss, trim rate (switch: our
data packets it cut / our data packets it forwarded; plugin: trimmed packets it accepted / data
packets it sent), retransmissions (ours: the plugin's retransmitted packets; TCP's: RetransSegs
of the ranks' namespaces, for every transport: Socket's data and the plugin's control
connections), replicas identical, parameters equal to Socket's at the same point (exact
transports must end equal: the runs are --deterministic).

The goal (issue 20), at 60 % cross load without loss, on the task with the most gradient bytes:
trim's time to target / Socket's <= 0.5, trim's iteration p99 / Socket's <= 0.5, and trim's final
accuracy no more than 0.3 points below Socket's. Each part is met, missed or unknown (a run
missing, failed, or the two runs ended at different steps); the goal is met when all three are,
missed when one is. Where Socket never reached the target, its run's length bounds its time.
Every other point is compared too, with where Socket wins and a first reading of why (more
steps to the target = accuracy; slower steps with drop slow too = the plugin's transport; slower
steps with drop fast = trimming itself).
Reads only the standard library unless plotting.
"""
import argparse
import json
import sys
from pathlib import Path

from jsonio import load_json, read_jsonl

TRANSPORTS = ["socket", "gloo", "drop", "trim", "trim16", "hook"]
BASELINES = ("socket", "gloo")
TRIMMING = ("trim", "trim16", "hook")  # the transports the goal is judged for
GOAL_CROSS, GOAL_TTT, GOAL_P99, GOAL_ACC_POINTS = 60.0, 0.5, 0.5, 0.3


def augment(d):
    d = Path(d)
    s = load_json(d / "summary.json") or {"label": d.name, "status": "failed (no summary)"}
    run = json.loads((d / "run.json").read_text())
    s["transport"] = run.get("transport")
    s.update(run.get("bottleneck") or {})
    s["estimate_s"], s["limit_s"] = run.get("estimate_s"), run.get("limit_s")
    finals = [e for e in read_jsonl(d / "switch.jsonl") if e.get("event") == "final"]
    w = finals[-1] if finals else {}
    keys = ["trim_forwarded", "trim_trimmed", "trim_dropped", "trim_lost", "trimctl_dropped", "tcp_forwarded",
            "tcp_dropped", "tcp_lost", "lost", "cross", "max_queue", "bad", "no_route"]
    s["bottleneck_switch"] = {k: w.get(k) for k in keys} if w else None
    fwd = w.get("trim_forwarded") or 0
    s["trim_rate"] = (w.get("trim_trimmed") or 0) / fwd if fwd else None
    tcp = sum(e.get("tcp_retrans_segs", 0) for r in sorted(d.glob("rank*.tcp")) for e in read_jsonl(r))
    s["tcp_retrans_segs"] = s["retx_tcp"] = tcp
    plugin = s.get("plugin") or {}
    s["retx_plugin"] = plugin.get("retransmitted")
    s["plugin_trimmed"] = plugin.get("trimmed_accepted")
    sent = plugin.get("sent_packets") or 0
    s["plugin_trim_rate"] = (plugin.get("trimmed_accepted") or 0) / sent if sent else None
    s["retransmissions"] = tcp if s["transport"] in BASELINES else plugin.get("retransmitted")
    rank0 = read_jsonl(d / "rank0.jsonl")
    cfg = next((e for e in rank0 if e.get("event") == "config"), {})
    fin = next((e for e in reversed(rank0) if e.get("event") == "final"), {})
    s["grad_bytes"] = cfg.get("grad_bytes")
    s["val_count"] = (cfg.get("data") or {}).get("val")
    s["compute_ms"] = fin.get("compute_ms")
    s["steps_to_target"] = fin.get("steps_to_target")
    s["stopped_by_time_limit"] = fin.get("stopped_by_time_limit")
    s["run_wall_s"] = fin.get("wall_s")
    # What a launch costs besides training (start-up, namespaces, the final gathers, tear-down):
    # the estimate's --startup-s, measured.
    s["overhead_s"] = round(s["wall_s"] - s["run_wall_s"], 1) if s.get("wall_s") and s["run_wall_s"] else None
    s["param_sha256_full"] = (fin.get("param_sha256") or [None])[0]
    # Validation accuracy over the training wall clock (epoch ends and --eval-every evaluations),
    # for the time-to-accuracy plot.
    # A run stopped by its limit before its final line: how far it got (its last evaluation).
    # (an epoch line's steps are that epoch's; an eval line's are the run's so far)
    last = next((e for e in reversed(rank0) if e.get("event") in ("epoch", "eval") and e.get("steps")), None)
    done = (last["steps"] if last.get("event") == "eval" else
            sum(e.get("steps") or 0 for e in rank0 if e.get("event") == "epoch")) if last else 0
    tgt = next((e for e in rank0 if e.get("event") == "target"), None)
    if not fin and tgt:  # stopped by its limit after reaching the target: that time is known
        s["time_to_target_s"], s["steps_to_target"] = tgt.get("wall_s"), tgt.get("step")
    p99s = [e["iter_p99_ms"] for e in rank0 if e.get("event") == "epoch" and e.get("iter_p99_ms")]
    s["progress"] = ({"steps": done, "train_s": last.get("train_s"), "val_acc": last.get("val_acc"),
                      "iter_p50_ms": last.get("iter_p50_ms"),
                      # a lower bound of the run's p99: the slowest epoch's
                      "iter_p99_ms_at_least": max(p99s) if p99s else None} if last and not fin else None)
    s["curve"] = sorted((e["train_s"], e["val_acc"]) for e in rank0
                        if e.get("event") in ("epoch", "eval") and e.get("train_s") is not None
                        and e.get("val_acc") is not None)
    p50 = s.get("iter_p50_ms")
    s["comm_share"] = 1 - s["compute_ms"] / p50 if s["compute_ms"] and p50 else None
    (d / "summary.json").write_text(json.dumps(s) + "\n")


def fmt(v, spec=".3f"):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    return format(v, spec) if isinstance(v, float) else str(v)


def point_name(r):
    c, l = r.get("cross_pct") or 0, r.get("loss_pct") or 0
    return f"loss {l:g} %" if l else f"cross {c:g} %"


def load(root):
    runs = []
    for f in sorted(Path(root).glob("*/summary.json")):
        if f.parent.name == "calibration_run":
            continue
        try:
            runs.append(json.loads(f.read_text()))
        except json.JSONDecodeError:
            pass
    order = {t: i for i, t in enumerate(TRANSPORTS)}
    runs.sort(key=lambda r: (r.get("task") or "", r.get("loss_pct") or 0, r.get("cross_pct") or 0,
                             order.get(r.get("transport"), 9)))
    return runs


def table(runs):
    head = ["task", "transport", "cross %", "loss %", "to target s", "steps to target", "p50 ms", "p99 ms",
            "final acc", "val loss", "trim rate (switch)", "plugin trimmed", "retx (ours)", "TCP retx", "identical",
            "= baseline", "status"]
    sock = {(r.get("task"), r.get("cross_pct"), r.get("loss_pct")): r.get("param_sha256_full")
            for r in runs if r.get("transport") in BASELINES}
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in runs:
        ref = sock.get((r.get("task"), r.get("cross_pct"), r.get("loss_pct")))
        same = None if not ref or not r.get("param_sha256_full") else r["param_sha256_full"] == ref
        status = fmt(r.get("status")) + (" (time limit)" if r.get("stopped_by_time_limit") else "")
        lines.append("| " + " | ".join([
            fmt(r.get("task")), fmt(r.get("transport")), fmt(r.get("cross_pct"), "g"), fmt(r.get("loss_pct"), "g"),
            fmt(r.get("time_to_target_s"), ".2f"), fmt(r.get("steps_to_target")),
            fmt(r.get("iter_p50_ms"), ".1f"), fmt(r.get("iter_p99_ms"), ".1f"), fmt(r.get("val_acc"), ".4f"),
            fmt(r.get("val_loss"), ".4f"), fmt(r.get("trim_rate"), ".4f"), fmt(r.get("plugin_trimmed")),
            fmt(r.get("retx_plugin")), fmt(r.get("retx_tcp")), fmt(r.get("params_identical")),
            "-" if r.get("transport") in BASELINES else fmt(same), status]) + " |")
    return "\n".join(lines)


def ok(r):
    return bool(r) and r.get("status") == "ok"


def ratio(a, b):
    return round(a / b, 3) if a is not None and b else None


def base_ttt(s):
    """The baseline's time to target: (seconds, True) when it reached the target, else (a lower
    bound, False): its whole run when it ended, its training until its limit stopped it when it did
    not; (None, False) when neither is known. Also the words for a bound."""
    if s.get("time_to_target_s") is not None:
        return s["time_to_target_s"], True, None
    base = s.get("transport") or "baseline"
    if ok(s) and s.get("run_wall_s"):
        return s["run_wall_s"], False, (f"{base} did not reach {s.get('target_acc')} in its {s.get('steps')} steps "
                                        f"({s['run_wall_s']:.0f} s)")
    pr = s.get("progress") or {}
    if pr.get("train_s"):
        return pr["train_s"], False, f"{base} {s.get('status')} at step {pr.get('steps')} after {pr['train_s']:.0f} s"
    return None, False, None


def ttt_part(t, s, tr):
    """The goal's time-to-target part: trim run t against baseline run s."""
    tt = t.get("time_to_target_s")
    ts, exact, why = base_ttt(s)
    if tt is not None and exact:
        r = tt / ts
        return {"ratio": round(r, 3), "state": "met" if r <= GOAL_TTT else "missed", "trim_s": tt, "base_s": ts}
    if tt is None and exact:
        return {"ratio": None, "state": "missed", "trim_s": None, "base_s": ts,
                "why": f"{tr} did not reach {t.get('target_acc')} in {t.get('steps')} steps"}
    if tt is not None and ts:
        bound = tt / ts
        return {"ratio_below": round(bound, 3), "state": "met" if bound <= GOAL_TTT else "unknown",
                "trim_s": tt, "base_s": None, "why": why}
    return {"state": "unknown", "why": "neither run reached the target"}


def compare(t, s, drop=None):
    """Transport run t against the baseline run s (Socket or Gloo) of the same point; drop (same
    point) helps say why."""
    c = {"transport": t.get("transport"), "status": t.get("status"), "baseline": s.get("transport")}
    base = s.get("transport") or "baseline"
    if ok(t) and not ok(s) and (s.get("progress") or {}).get("train_s") and t.get("time_to_target_s") is not None:
        # The baseline was stopped by its limit before the end: it had not reached the target
        # by then (or its target line would be there), so its time to target is longer.
        pr = s["progress"]
        ts, exact, _ = base_ttt(s)
        c["ttt_ratio" if exact else "ttt_ratio_below"] = round(t["time_to_target_s"] / ts, 3)
        c["note"] = (f"{base} {s.get('status')}: step {pr['steps']} after {pr['train_s']:.0f} s of training "
                     f"(val acc {pr.get('val_acc') or 0:.3f}, last epoch's p50 {pr.get('iter_p50_ms') or 0:.0f} ms); "
                     f"{t.get('transport')} reached the target in {t['time_to_target_s']:.0f} s")
        return c
    if not ok(t) or not ok(s):
        c["note"] = f"{base} run missing or failed" if not ok(s) else f"run {t.get('status')}"
        return c
    c["ttt_ratio"] = ratio(t.get("time_to_target_s"), s.get("time_to_target_s"))
    c["steps_ratio"] = ratio(t.get("steps_to_target"), s.get("steps_to_target"))
    c["p50_ratio"] = ratio(t.get("iter_p50_ms"), s.get("iter_p50_ms"))
    c["p99_ratio"] = ratio(t.get("iter_p99_ms"), s.get("iter_p99_ms"))
    if t.get("val_acc") is not None and s.get("val_acc") is not None:
        c["acc_diff_points"] = round(100 * (t["val_acc"] - s["val_acc"]), 3)
    c["same_steps"] = t.get("steps") == s.get("steps")
    c["params_equal_baseline"] = (t.get("param_sha256_full") == s.get("param_sha256_full")
                                  if t.get("param_sha256_full") and s.get("param_sha256_full") else None)
    wins = []  # where the baseline is better
    if t.get("time_to_target_s") is None and s.get("time_to_target_s") is not None:
        wins.append("time to target (not reached)")
    elif c["ttt_ratio"] is not None and c["ttt_ratio"] > 1:
        wins.append(f"time to target ({c['ttt_ratio']:g}x)")
    if c["p99_ratio"] is not None and c["p99_ratio"] > 1:
        wins.append(f"p99 ({c['p99_ratio']:g}x)")
    if c.get("acc_diff_points") is not None and c["acc_diff_points"] < -GOAL_ACC_POINTS:
        wins.append(f"accuracy ({c['acc_diff_points']:+.2f} points)")
    c["baseline_wins"] = wins
    why = []
    if wins and c["steps_ratio"] is not None and c["steps_ratio"] >= 1.15:
        why.append(f"needed {c['steps_ratio']:g}x the steps to the target (accuracy)")
    if wins and c["p50_ratio"] is not None and c["p50_ratio"] > 1:
        dr = ratio((drop or {}).get("iter_p50_ms"), s.get("iter_p50_ms")) if ok(drop) else None
        if t.get("transport") == "drop":
            why.append(f"steps {c['p50_ratio']:g}x {base}'s: the plugin's transport (no trimming here)")
        elif dr is not None and dr > 1:
            why.append(f"steps {c['p50_ratio']:g}x {base}'s, drop's {dr:g}x too: the plugin's transport, not trimming")
        elif dr is not None:
            why.append(f"steps {c['p50_ratio']:g}x {base}'s while drop's are {dr:g}x: trimming itself "
                       f"(retransmissions {t.get('retx_plugin')} vs drop's {(drop or {}).get('retx_plugin')})")
        else:
            why.append(f"steps {c['p50_ratio']:g}x {base}'s (no drop run to tell transport from trimming)")
    c["why"] = "; ".join(why) or None
    return c


def comparisons(runs):
    by = {}
    for r in runs:
        by.setdefault((r.get("task"), r.get("cross_pct") or 0.0, r.get("loss_pct") or 0.0), {})[r.get("transport")] = r
    out = []
    for (task, c, l), rs in sorted(by.items(), key=lambda kv: (kv[0][0] or "", kv[0][2], kv[0][1])):
        s = rs.get("socket") or rs.get("gloo")
        for tr in TRANSPORTS:
            if tr in rs and tr not in BASELINES:
                out.append({"task": task, "cross_pct": c, "loss_pct": l, **compare(rs[tr], s or {}, rs.get("drop"))})
    return out


def big_task(runs):
    sized = [(r.get("grad_bytes") or 0, r.get("task")) for r in runs if r.get("task")]
    if not sized:
        return None
    best = max(sized)
    return best[1] if best[0] else ("widemlp" if any(t == "widemlp" for _, t in sized) else sized[0][1])


def judge(runs, tr="trim"):
    """The goal for trimming transport tr at 60 % cross, no loss, on the task with the most
    gradient bytes, against the baseline (Socket or Gloo) of the same point."""
    task = big_task(runs)
    at = {r.get("transport"): r for r in runs if r.get("task") == task and (r.get("cross_pct") or 0) == GOAL_CROSS
          and not r.get("loss_pct")}
    base = "socket" if "socket" in at else "gloo"
    B = base.capitalize()
    g = {"goal": f"{tr} vs {B} at {GOAL_CROSS:g} % cross load: time to target <= {GOAL_TTT}x, "
                 f"iteration p99 <= {GOAL_P99}x, final accuracy >= {B}'s - {GOAL_ACC_POINTS} points",
         "transport": tr, "baseline": base, "task": task, "state": "unknown", "parts": {}}
    s, t = at.get(base), at.get(tr)
    if not task or not s or not t:
        g["detail"] = f"no {base if not s else tr} run of {task} at {GOAL_CROSS:g} % cross"
        return g
    pr = s.get("progress") or {}
    if ok(t) and not ok(s) and pr.get("train_s") and t.get("time_to_target_s") is not None:
        # The baseline was stopped by its limit before reaching the target: its time to target
        # is longer than its training so far, its p99 at least its slowest epoch's.
        parts = g["parts"]
        parts["time_to_target"] = ttt_part(t, s, tr)
        lo = pr.get("iter_p99_ms_at_least")
        r = ratio(t.get("iter_p99_ms"), lo)
        parts["p99"] = ({"ratio_below": r, "state": "met" if r <= GOAL_P99 else "unknown", "trim_ms": t.get("iter_p99_ms"),
                         "base_ms_at_least": lo} if r is not None else {"state": "unknown", "why": "no p99 of the baseline"})
        parts["accuracy"] = {"state": "unknown", "why": f"{base} did not finish"}
        g["state"] = "unknown"
        g["detail"] = ", ".join(f"{k} {v['state']}" for k, v in parts.items())
        return g
    if not ok(s) or not ok(t):
        g["detail"] = "; ".join(f"{n} run {r.get('status')}" for n, r in ((base, s), (tr, t)) if not ok(r))
        return g
    parts = g["parts"]
    parts["time_to_target"] = ttt_part(t, s, tr)
    # p99
    r = ratio(t.get("iter_p99_ms"), s.get("iter_p99_ms"))
    parts["p99"] = {"ratio": r, "state": "unknown" if r is None else ("met" if r <= GOAL_P99 else "missed"),
                    "trim_ms": t.get("iter_p99_ms"), "base_ms": s.get("iter_p99_ms")}
    # accuracy, only between runs of the same length
    n_val = s.get("val_count")
    res = round(100 / n_val, 3) if n_val else None
    if t.get("steps") != s.get("steps"):
        parts["accuracy"] = {"state": "unknown", "why": f"different lengths: {tr} {t.get('steps')} steps, "
                                                         f"{base} {s.get('steps')} (a time limit stopped one)"}
    elif t.get("val_acc") is None or s.get("val_acc") is None:
        parts["accuracy"] = {"state": "unknown", "why": "no final accuracy"}
    else:
        dp = 100 * (t["val_acc"] - s["val_acc"])
        parts["accuracy"] = {"diff_points": round(dp, 3), "state": "met" if dp >= -GOAL_ACC_POINTS else "missed",
                             "trim": t["val_acc"], "base": s["val_acc"], "resolution_points": res,
                             "val_loss_trim": t.get("val_loss"), "val_loss_base": s.get("val_loss")}
        if res and res > GOAL_ACC_POINTS / 2:
            parts["accuracy"]["note"] = (f"one val sample is {res:g} points: {GOAL_ACC_POINTS} points is "
                                         f"{GOAL_ACC_POINTS / res:.1f} samples, so one seed decides little")
    states = [p["state"] for p in parts.values()]
    g["state"] = "missed" if "missed" in states else ("met" if all(x == "met" for x in states) else "unknown")
    g["detail"] = ", ".join(f"{k} {v['state']}" for k, v in parts.items())
    return g


def judge_md(goals, comps):
    lines = []
    for g in goals:
        lines += [f"## Goal ({g['task']}, {g['transport']}): {g['state'].upper()}", "", g["goal"] + ".", ""]
        for k, p in g["parts"].items():
            val = p.get("ratio", p.get("ratio_below", p.get("diff_points")))
            unit = " points" if k == "accuracy" else "x"
            shown = "-" if val is None else (f"< {val:g}" if "ratio_below" in p else f"{val:g}")
            extra = "; ".join(str(p[x]) for x in ("why", "note") if p.get(x))
            lines.append(f"- {k}: {shown}{unit if val is not None else ''} -> {p['state']}" + (f" ({extra})" if extra else ""))
        if not g["parts"]:
            lines.append(f"- {g.get('detail')}")
        lines.append("")
    base = next((c["baseline"] for c in comps if c.get("baseline")), "baseline")
    lines += [f"## Every point against {base}", "",
              f"| task | point | transport | to target | steps | p50 | p99 | acc diff (points) | = {base} params | {base} wins | why |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in comps:
        lines.append("| " + " | ".join([
            fmt(c["task"]), point_name(c), c["transport"],
            f"< {c['ttt_ratio_below']:g}" if c.get("ttt_ratio_below") is not None else fmt(c.get("ttt_ratio"), "g"),
            fmt(c.get("steps_ratio"), "g"),
            fmt(c.get("p50_ratio"), "g"), fmt(c.get("p99_ratio"), "g"), fmt(c.get("acc_diff_points"), "+.2f"),
            fmt(c.get("params_equal_baseline")),
            ", ".join(c.get("baseline_wins") or []) or ("-" if "baseline_wins" in c else c.get("note", "-")),
            c.get("why") or "-"]) + " |")
    wins = [f"{c['task']} {point_name(c)} vs {c['transport']}: {', '.join(c['baseline_wins'])}"
            for c in comps if c.get("baseline_wins") and c["transport"] in TRIMMING]
    lines += ["", f"{base} wins against trimming at: " + ("; ".join(wins) if wins else "no point measured")]
    return "\n".join(lines)


def plot(runs, out, plt):
    tasks = sorted({r.get("task") for r in runs if r.get("task")})
    if not tasks:
        return None
    fig, axes = plt.subplots(len(tasks), 3, figsize=(15, 4 * len(tasks)), squeeze=False)
    for i, task in enumerate(tasks):
        for tr in TRANSPORTS:
            rs = [r for r in runs if r.get("task") == task and r.get("transport") == tr]
            cross = sorted(((r["cross_pct"], r) for r in rs if not r.get("loss_pct")), key=lambda x: x[0])
            loss = sorted(((r["loss_pct"], r) for r in rs if r.get("loss_pct") and not r.get("cross_pct")), key=lambda x: x[0])
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
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
    fig.tight_layout()
    path = Path(out) / "congestion.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_ttt(runs, out, plt):
    """Time to target accuracy per transport over cross load, one panel per task; a run that
    never reached the target is an x at its whole run's length (a lower bound)."""
    tasks = sorted({r.get("task") for r in runs if r.get("task")})
    if not tasks:
        return None
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4.2), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for tr in TRANSPORTS:
            rs = sorted((r for r in runs if r.get("task") == task and r.get("transport") == tr
                         and not r.get("loss_pct") and ok(r)), key=lambda r: r.get("cross_pct") or 0)
            got = [(r.get("cross_pct") or 0, r["time_to_target_s"]) for r in rs if r.get("time_to_target_s") is not None]
            miss = [(r.get("cross_pct") or 0, r.get("run_wall_s")) for r in rs
                    if r.get("time_to_target_s") is None and r.get("run_wall_s")]
            if got:
                line, = ax.plot([c for c, _ in got], [t for _, t in got], "o-", label=tr)
                color = line.get_color()
            else:
                color = None
            if miss:
                ax.plot([c for c, _ in miss], [t for _, t in miss], "x", color=color, markersize=9,
                        label=f"{tr}: not reached (run length)")
        target = next((r.get("target_acc") for r in runs if r.get("task") == task and r.get("target_acc")), None)
        ax.set(title=f"{task}: time to {target} val accuracy", xlabel="cross load (% of port rate)",
               ylabel="s (training wall clock)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(out) / "time_to_target.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_tta(runs, out, plt):
    """Validation accuracy over training wall clock, one panel per (task, point), a line per
    transport, the target dashed: where the lines cross it is each run's time to target."""
    panels = sorted({(r.get("task"), r.get("cross_pct") or 0, r.get("loss_pct") or 0) for r in runs
                     if r.get("curve")}, key=lambda k: (k[0] or "", k[2], k[1]))
    if not panels:
        return None
    cols = min(3, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 4 * rows), squeeze=False)
    order = {t: i for i, t in enumerate(TRANSPORTS)}
    for ax, (task, c, l) in zip([a for row in axes for a in row], panels):
        rs = sorted((r for r in runs if (r.get("task"), r.get("cross_pct") or 0, r.get("loss_pct") or 0) == (task, c, l)
                     and r.get("curve")), key=lambda r: order.get(r.get("transport"), 9))
        for r in rs:
            xs, ys = zip(*r["curve"])
            ax.plot(xs, ys, ".-", label=f"{r.get('transport')}" + ("" if ok(r) else f" ({r.get('status')})"))
        target = next((r.get("target_acc") for r in rs if r.get("target_acc")), None)
        if target:
            ax.axhline(target, color="grey", linestyle="--", linewidth=0.8)
        point = point_name({"cross_pct": c, "loss_pct": l})
        ax.set(title=f"{task}, {point}", xlabel="training wall clock (s)", ylabel="val accuracy",
               ylim=(max(0.0, (target or 0.5) - 0.45), 1.0))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    for ax in [a for row in axes for a in row][len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    path = Path(out) / "time_to_accuracy.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", nargs="?")
    p.add_argument("--augment", metavar="RUNDIR")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--meta", metavar="FILE", help="a JSON object to put into the JSON line as meta")
    a = p.parse_args()
    if a.augment:
        augment(a.augment)
        return 0
    if not a.dir:
        p.error("DIR or --augment RUNDIR")
    root = Path(a.dir)
    runs = load(root)
    comps = comparisons(runs)
    present = {r.get("transport") for r in runs}
    goals = [judge(runs, tr) for tr in TRIMMING if tr in present] or [judge(runs)]
    goal = goals[0]
    bench = load_json(root / "bench.json")
    cal = load_json(root / "calibration.json")
    skipped = read_jsonl(root / "skipped.jsonl")
    print(table(runs))
    print()
    if cal:
        print(f"Calibration ({cal.get('run')}): compute {fmt(cal.get('compute_ms'), '.2f')} ms, iteration p50 "
              f"{fmt(cal.get('iter_p50_ms'), '.2f')} ms, communication share {fmt(cal.get('comm_share'), '.2f')}, "
              f"port goodput {fmt(cal.get('goodput_gbps'), '.2f')} Gbit/s: {cal.get('decision')}")
        print()
    over = sorted(r["overhead_s"] for r in runs if r.get("overhead_s") is not None)
    if over:
        est = (bench or {}).get("startup_s")
        print(f"Start-up and tear-down per run (wall clock outside training): median {over[len(over) // 2]:g} s, "
              f"{over[0]:g}-{over[-1]:g} s over {len(over)} runs (the estimate assumed {fmt(est, 'g')} s)")
        print()
    if skipped:
        print("Skipped: " + "; ".join(f"{s.get('label')} ({s.get('why')})" for s in skipped))
        print()
    print(judge_md(goals, comps))
    pngs = []
    if not a.no_plots:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            pngs = [str(x) for x in (plot(runs, root, plt), plot_ttt(runs, root, plt), plot_tta(runs, root, plt)) if x]
            for x in pngs:
                print(f"plot: {x}", file=sys.stderr)
        except ImportError:
            print("plot: skipped (no matplotlib)", file=sys.stderr)
    keep = ["label", "task", "transport", "cross_pct", "loss_pct", "status", "iter_p50_ms", "iter_p99_ms",
            "iter_max_ms", "time_to_target_s", "steps_to_target", "steps", "val_acc", "val_loss", "trim_rate",
            "plugin_trim_rate", "plugin_trimmed", "retx_plugin", "retx_tcp", "retransmissions", "params_identical",
            "compute_ms", "comm_share", "grad_bytes", "stopped_by_time_limit", "wall_s", "overhead_s", "estimate_s"]
    versions = next((r.get("versions") for r in runs if r.get("versions")), None)
    meta = load_json(a.meta) if a.meta else None
    print(json.dumps({"bench": "congestion", "goal": goal, "goals": goals, "settings": bench, "calibration": cal,
                      "skipped": skipped, "versions": versions, "meta": meta, "plots": pngs,
                      "runs": [{k: r.get(k) for k in keep} for r in runs], "comparisons": comps}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
