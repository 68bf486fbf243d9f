"""The verdicts of a GPU check (python -m bench gpu-report OUT [--elapsed-s S]): a table, busbw per
size, ONE JSON line (last). OUT is what `python -m bench gpu` leaves: steps.jsonl (per invocation its
plan; per part its runs and not_run records; a step's "complete"), preflight[_N].json, the run folders.

Honesty: per part the latest run wins; a not_run after it (the grid's runs a budget left) leaves it
unfinished but never hides its failure. A part that timed out or was running when the check was
stopped fails its step; every RotateCuda test skipped fails the kernels; a planned step never
started is "not run", never a pass. Exit: 2 preflight failed, 1 a step failed, 4 a planned step not
run, 3 a goal missed, else 0; with only --no-gpu runs the result is "pass (no GPU step ran)"."""

import argparse
import json
import math
import re
import sys
from pathlib import Path

from bench import congestion_report as cong
from bench.ddp_report import events
from bench.jsonio import load_json, read_jsonl
from bench.report import fmt, ratio, table


# The table's order (the first invocation runs preflight..rank_killed): name -> (what it checks, the
# Report method that judges it, the method's arguments after the step's JSON and name).
STEPS = {
    "preflight": ("GPU, torch + NCCL, the carried build, netns for the congestion steps", "preflight"),
    "ddp_lossless": ("DDP plugin vs Socket: same parameter sha256, iteration p50", "ddp_lossless"),
    "allreduce_2r": ("lossless busbw plugin vs Socket default, 2 ranks", "allreduce", 2),
    "congestion_c60": ("widemlp at 60 % cross load, Socket vs trim, one bottleneck", "congestion", "congestion_c60"),
    "kernels": ("the hook's GPU rotation: bit-exact to the host twin, speed vs a copy", "kernels"),
    "hook_overhead": ("char-LM iteration p50 with the comm hook vs without", "hook_overhead"),
    "hook_accuracy": ("char-LM under random trim, seed 1: Socket, per-hop rht, the hook", "hook_accuracy"),
    "rank_killed": ("a rank SIGKILLed: the survivor fails by itself, no hang", "rank_killed"),
    "allreduce_4r": ("lossless busbw plugin vs Socket default, 4 ranks", "allreduce", 4),
    "ddp_random_trim": ("DDP, 4 ranks, random trimming: replicas identical", "ddp_random"),
    "socket_sweep_2r": ("Socket tuned NTHREADS x NSOCKS_PERTHREAD, 2 ranks", "sweep", "sweep2", "socket"),
    "socket_sweep_4r": ("the 2 best Socket configs, 4 ranks", "sweep", "sweep4", "socket"),
    "hook_accuracy_more": ("char-LM under random trim, seeds 2 and 3", "hook_accuracy"),
    "kernels_ncu": ("ncu --set full on the rotation kernels", "kernels_ncu"),
    "codec_threads_2r": ("plugin busbw at NCCL_TRIM_CODEC_THREADS values, 2 ranks", "sweep", "codec2", "lossless"),
    "harness_scaling": ("trim-harness rht/none and sendrecv over codec threads, CPU per GB", "harness_scaling"),
    "cpu_uncongested": ("widemlp on CPU tensors, trim backend vs Gloo, 3 alternated rounds", "cpu_uncongested"),
    "congestion_grid": ("the congestion head-to-head: the congestion bench's preset", "congestion", "congestion"),
}
AR_GOAL, DDP_GOAL, HOOK_GOAL, HARNESS_GOAL, CPU_GOAL = 1.0, 1.05, 1.05, 0.95, 1.05
KERNEL_GOAL, KERNEL_AIM = 0.5, 0.85  # fp32 rotation throughput / device-to-device copy
HOOK_AIM_POINTS = 0.3  # hook's final accuracy within this many points of Socket's
# rank_killed: the survivor must end within this of the kill (the plugin declares a silent peer dead
# after 10 s; PyTorch's collective timeout, 25 s, lies beyond it).
KILL_BOUND_S = 20
TIMED_OUT, STOPPED = (124, 137), 143
GOALS = {  # key: the goal's words; the order of the "goals" list
    **{f"ar{n}{key}": f"allreduce {n} ranks: plugin >= {AR_GOAL}x Socket {words} at every size"
       for n in (2, 4) for key, words in (("", "default"), ("_best", "best (tuned)"))},
    "ddp": f"DDP iteration p50: plugin <= {DDP_GOAL}x Socket",
    "congestion": "congestion at 60 % cross load (the task with most gradient): trim vs Socket time to target "
                  "<= 0.5x, p99 <= 0.5x, accuracy >= Socket's - 0.3 points",
    "kernel": f"GPU rotation fp32 >= {KERNEL_GOAL}x a device copy (aim {KERNEL_AIM})",
    "hook": f"char-LM iteration p50 with the hook <= {HOOK_GOAL}x without",
    "hook_acc": f"char-LM accuracy under trim: hook >= per-hop rht (aim: within {HOOK_AIM_POINTS} points of Socket)",
    "harness": f"trim-harness allreduce rht / none >= {HARNESS_GOAL} (best codec threads)",
    "cpu": f"uncongested widemlp on CPU tensors: trim backend iteration p50 <= {CPU_GOAL}x Gloo (paired median)",
}
HOOK_SEEN = "comm hook's (traffic class"  # the plugin's INFO line for the hook's communicator
# The survivor's log, most specific first: the plugin's words, NCCL's, then PyTorch's timeout alone.
KILL_PATTERNS = [
    ("plugin", re.compile(r".*(declared dead|closed the control connection|peer \S+ closed the connection"
                          r"|receiving peer closed the connection).*")),
    ("nccl", re.compile(r".*(ncclRemoteError|ncclSystemError|NCCL error|remote process exited"
                        r"|NCCL communicator was aborted|ncclInternalError).*")),
    ("timeout", re.compile(r".*(Watchdog caught collective operation timeout|timed out|Timeout).*")),
]


def mib(b):
    return f"{b >> 20}M" if b >= 1 << 20 else f"{b >> 10}K"


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def r3(x):
    return None if x is None else round(x, 3)


def text(path):
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def bench(path):
    """One allreduce run's summary (the ddp launcher's --bench): ok, why, bytes -> busbw."""
    s = load_json(Path(path) / "summary.json")
    if s is None:
        return {"ok": False, "why": f"no {path}/summary.json", "busbw": {}}
    busbw = {e["bytes"]: e["busbw_GBps"] for e in s.get("bench", [])}
    why = (f"status {s.get('status')}" if s.get("status") != "ok" else "no sizes measured" if not busbw else
           None if s.get("all_exact") else
           "sums not exact at " + ",".join(mib(e["bytes"]) for e in s["bench"] if e.get("max_err") != 0))
    return {"ok": why is None, "why": why, "busbw": busbw}


def configs(root, mode):
    """{config: bench} for root/<config>/<mode>/summary.json."""
    return {d.parent.name: bench(d) for d in sorted(Path(root).glob(f"*/{mode}"))}


def best_socket(cfgs):
    """(the best config, {config: geometric-mean busbw over the sizes every ok config measured})."""
    ok = {k: v for k, v in cfgs.items() if v["ok"]}
    if not ok:
        return None, {}
    common = sorted(set.intersection(*(set(v["busbw"]) for v in ok.values())))
    gm = {k: g for k, v in ok.items() if (g := geomean([v["busbw"][b] for b in common]))}
    return (max(gm, key=gm.get) if gm else None), gm


def gtest(log):
    """gtest's verdict from its output: (ok, why, counts)."""
    n = {k: len(re.findall(rx, log, re.M)) for k, rx in (
        ("tests", r"^\[ RUN      \] "), ("passed", r"^\[       OK \] "),
        ("skipped", r"^\[  SKIPPED \] \S+ \(\d+ ms\)"), ("failed", r"^\[  FAILED  \] \S+ \(\d+ ms\)"))}
    ran, skipped, m = n["tests"], n["skipped"], re.search(r"Skipped\n(.+)", log)
    note = f" ({m.group(1).strip()})" if m else ""
    if ran == 0:
        why = "no test ran (the filter matched nothing?)"
    elif n["failed"]:
        why = f"{n['failed']} of {ran} failed"
    elif skipped:
        why = (f"every test skipped{note}: nothing was checked on the GPU" if skipped == ran
               else f"{skipped} of {ran} skipped{note}")
    else:
        why = None if n["passed"] == ran else f"{ran - n['passed']} of {ran} without a result"
    return why is None, why, n


def parse_steps(records):
    """steps.jsonl's records -> (parts {step: {part: latest record}}, invocations, complete steps)."""
    parts, invocations, complete = {}, [], set()
    for r in records:
        if "plan" in r:
            invocations.append(r)
        elif r.get("complete"):
            complete.add(r["step"])
        elif "step" in r:
            ps, key = parts.setdefault(r["step"], {}), r.get("part", "")
            prev = ps.get(key)
            # a run, then not_run (the grid's runs the budget left): still a run (its rc decides a
            # failure), and unfinished; anything else replaces what came before
            ps[key] = dict(prev, not_run=r["not_run"]) if "not_run" in r and prev and "rc" in prev else r
    return parts, invocations, complete


def state(records):
    """For --continue: ({(step, part) whose latest record is a finished run}, complete steps, last invocation)."""
    parts, invocations, complete = parse_steps(records)
    ran = {(s, p) for s, ps in parts.items() for p, x in ps.items() if "rc" in x and "not_run" not in x}
    return ran, complete, max((i["invocation"] for i in invocations), default=0)


class Report:
    def __init__(self, out):
        self.out = Path(out)
        self.parts, self.invocations, self.complete = parse_steps(read_jsonl(self.out / "steps.jsonl"))
        self.planned = {s for i in self.invocations for s in i["plan"]}
        self.pre = load_json(self.out / "preflight.json") or {}
        self.steps, self.tables = {}, []
        self.goals = {k: {"goal": g, "state": "unknown", "detail": "not measured"} for k, g in GOALS.items()}

    def base(self, name):
        """A step's time and parts; its result already set when the parts decide it alone."""
        parts = self.parts.get(name, {})
        if not parts:
            return ({"result": "not run", "why": "no record: the check was stopped before it"} if name in self.planned
                    else {"result": "not planned", "why": "not run yet: python3 -m bench gpu --continue"})
        ran = {p: r for p, r in parts.items() if "rc" in r}
        d = {"result": None, "seconds": sum(r.get("seconds", 0) for r in ran.values()),
             "limit_s": sum(r.get("limit", 0) for r in ran.values())} if ran else {"result": None}
        if missing := {p or name: r["not_run"] for p, r in parts.items() if "not_run" in r}:
            d["not_run_parts"] = missing
        if not ran:
            return dict(d, result="not run", why="; ".join(sorted(set(missing.values()))))
        if out := [f"{p or name} after its {r.get('limit')} s limit" for p, r in ran.items() if r.get("rc") in TIMED_OUT]:
            return self.settle(d, "timed out: " + ", ".join(out))
        if stopped := [p or name for p, r in ran.items() if r.get("rc") == STOPPED]:
            return self.settle(d, "check-gpu was stopped during " + ", ".join(stopped))
        bad = {r.get("log") or p or name: r["rc"] for p, r in ran.items() if r.get("rc")}
        if bad and name != "rank_killed":  # (there the launcher's exit is the killed rank's)
            d["exit_codes"] = bad
        return d

    def goal(self, key, met, detail):
        self.goals[key].update(state="unknown" if met is None else ("met" if met else "missed"), detail=detail)

    @staticmethod
    def settle(d, why=None):
        """fail with WHY or a part's non-zero exit, the parts also not run (a failed grid's runs the budget left)
        kept in it; else not run when a part never ran (the step is not complete); else pass."""
        why = why or d.get("exit_codes") and "exit " + ", ".join(f"{rc} ({log})" for log, rc in d["exit_codes"].items())
        left = d.get("not_run_parts") and (f"{len(d['not_run_parts'])} part(s) not run: " +
                                           "; ".join(sorted(set(d["not_run_parts"].values()))))
        if why:
            return dict(d, result="fail", why=why + (f"; also {left}" if left else ""))
        return dict(d, result="not run", why=left) if left else dict(d, result="pass")

    def summary(self, run):
        return load_json(self.out / run / "summary.json") or {}

    def hook_seen(self, run):
        return HOOK_SEEN in text(self.out / run / "rank0.log")

    # The steps' checks (STEPS names them): each gets the step's JSON D and its name, adds its numbers
    # to D and returns why the step failed, or None.
    def preflight(self, d, name):
        d.update({k: self.pre[k] for k in ("gpu", "driver", "torch", "nccl", "cores", "commit", "plugin_sha256",
                                           "import_s", "cuda_init_s", "netns_blocker") if self.pre.get(k) is not None})
        if not self.pre.get("ok") or self.parts["preflight"][""].get("rc") != 0:
            return "; ".join(self.pre.get("why") or ["see preflight.log"])

    def allreduce(self, d, name, ranks):
        key, sweep = f"ar{ranks}", configs(self.out / f"sweep{ranks}", "socket")
        plug, sock = bench(self.out / key / "lossless"), bench(self.out / key / "socket")
        cands = dict(sweep, default=sock)
        best, gms = best_socket(cands)
        pb, sb, bb = plug["busbw"], sock["busbw"], cands[best]["busbw"] if best else {}
        sizes = sorted(b for b in set(pb) & set(sb) if sb[b] > 0)
        vs_def, vs_best = [pb[b] / sb[b] for b in sizes], [pb[b] / bb[b] if bb.get(b) else None for b in sizes]
        d.update(sizes=[mib(b) for b in sizes], busbw_GBps={"plugin": [r3(pb[b]) for b in sizes],
                                                             "socket_default": [r3(sb[b]) for b in sizes]})
        d["plugin_over_socket_default"] = [r3(x) for x in vs_def]
        if best:
            d.update(socket_best=best, plugin_over_socket_best=[r3(x) for x in vs_best])
            d["busbw_GBps"]["socket_best"] = [r3(bb.get(b)) for b in sizes]
        d["socket_geomean_GBps"] = {k: r3(v) for k, v in sorted(gms.items(), key=lambda kv: -kv[1])}
        if sizes:  # the busbw table, shown after the steps' (bb: the best Socket config's, if any)
            codec = configs(self.out / "codec2", "lossless") if ranks == 2 else {}
            cols = ([("plugin", pb), ("sock-def", sb)] + ([(f"sock-{best}", bb)] if best and best != "default" else [])
                    + [(f"ct={c}", v["busbw"]) for c, v in sorted(codec.items()) if v["busbw"]])
            rows = [[mib(b)] + [fmt(v.get(b)) for _, v in cols] +
                    [fmt(ratio(pb[b], x), ".2f") for x in (sb[b], (bb or sb).get(b))] for b in sizes]
            self.tables.append(f"\nallreduce busbw GB/s, {ranks} ranks (Ring/Simple, 2 channels); Socket best = "
                               f"{best or '-'} (NTHREADSxNSOCKS_PERTHREAD)\n" +
                               table(["size"] + [n for n, _ in cols] + ["÷def", "÷best"], rows))
        why = (f"plugin: {plug['why']}" if not plug["ok"] else f"Socket: {sock['why']}" if not sock["ok"] else
               "plugin and Socket measured different sizes" if set(pb) != set(sb) else None)
        if why is None:
            d["exact"] = True
        if why or d.get("exit_codes") or not vs_def:
            return why
        x, b = min(zip(vs_def, sizes))
        self.goal(key, x >= AR_GOAL, f"worst {x:.2f}x at {mib(b)}")
        n_sweep = sum(1 for v in sweep.values() if v["ok"])
        if n_sweep and (vb := [(x, b) for x, b in zip(vs_best, sizes) if x is not None]):
            x, b = min(vb)
            self.goal(f"{key}_best", x >= AR_GOAL, f"worst {x:.2f}x at {mib(b)} vs {best}; best of default "
                                                   f"+ {n_sweep} tuned")
        else:
            self.goals[f"{key}_best"]["detail"] = "no tuned Socket config ran yet (socket_sweep)"

    def sweep(self, d, name, root, mode):
        ran = [p for p, r in self.parts[name].items() if "rc" in r]
        cfgs = {c: v for c, v in configs(self.out / root, mode).items() if c in ran}
        bad = {c: (cfgs[c]["why"] if c in cfgs else "no results") for c in ran if c not in cfgs or not cfgs[c]["ok"]}
        gm = d["geomean_busbw_GBps"] = {c: r3(geomean(list(v["busbw"].values()))) for c, v in cfgs.items() if v["ok"]}
        if gm:
            d["best"] = max(gm, key=gm.get)
        if name == "codec_threads_2r":  # per size too
            sizes = sorted(set().union(*(v["busbw"] for v in cfgs.values())))
            d["sizes"] = [mib(b) for b in sizes]
            d["busbw_GBps"] = {c: [r3(v["busbw"].get(b)) for b in sizes] for c, v in cfgs.items() if v["ok"]}
        return "; ".join(f"{c}: {w}" for c, w in bad.items()) or None

    def ddp_lossless(self, d, name):
        ps, ss = self.summary("ddp_lossless"), self.summary("ddp_socket")
        ph, sh = ((events(self.out / f"ddp_{m}" / "rank0.jsonl", "final") or [{}])[-1].get("param_sha256") or []
                  for m in ("lossless", "socket"))
        d["param_sha256"] = {"plugin": ph[0] if ph else None, "socket": sh[0] if sh else None}
        for k in ("iter_p50_ms", "iter_p99_ms", "val_acc"):
            d[k] = {"plugin": r3(ps.get(k)), "socket": r3(ss.get(k))}
        d["steps"] = ps.get("steps")
        p50 = ps["iter_p50_ms"] / ss["iter_p50_ms"] if ps.get("iter_p50_ms") and ss.get("iter_p50_ms") else None
        if p50 is not None:
            d["p50_plugin_over_socket"] = r3(p50)
        why = (f"plugin run: {ps.get('status', 'no summary.json')}" if ps.get("status") != "ok" else
               f"Socket run: {ss.get('status', 'no summary.json')}" if ss.get("status") != "ok" else
               "no final parameter hashes" if not ph or not sh else
               "replicas differ within a run" if len(set(ph)) != 1 or len(set(sh)) != 1 else
               "plugin's final parameters differ from Socket's" if ph[0] != sh[0] else None)
        if why is None:
            d["hash_equal"] = True
            if p50 is not None:
                self.goal("ddp", p50 <= DDP_GOAL, f"{p50:.3f}x ({ps['iter_p50_ms']:.2f} vs {ss['iter_p50_ms']:.2f} ms)")
        return why

    def ddp_random(self, d, name):
        s = self.summary("ddp_random")
        sw, pl = s.get("switch") or {}, s.get("plugin") or {}
        d.update({"ranks": s.get("ranks"), "trim_p": s.get("trim_p"), "replicas_identical": s.get("params_identical"),
                  "switch_trimmed": sw.get("forwarded_trimmed"), "switch_trim_rate": r3(sw.get("trim_rate")),
                  "trimmed_accepted": pl.get("trimmed_accepted"), "val_acc": r3(s.get("val_acc"))})
        return (f"run: {s.get('status', 'no summary.json')}" if s.get("status") != "ok" else
                "replicas differ: " + str(s.get("param_sha256")) if not s.get("params_identical") else
                "nothing was trimmed (switch and plugin counters 0): the check proves nothing"
                if (sw.get("forwarded_trimmed") or 0) + (pl.get("trimmed_accepted") or 0) == 0 else None)

    def rank_killed(self, d, name):
        run = self.out / "ddp_kill"
        die, log = (events(run / "rank1.jsonl", "die") or [None])[0], text(run / "rank0.log")
        e0, e1 = load_json(run / "rank0.exit"), load_json(run / "rank1.exit")
        cause, line = next(((kind, m.group(0).strip()[:240]) for kind, rx in KILL_PATTERNS if (m := rx.search(log))),
                           (None, None))
        d.update(bound_s=KILL_BOUND_S, died_at_step=die.get("step") if die else None,
                 killed_status=e1.get("status") if e1 else None, survivor_status=e0.get("status") if e0 else None,
                 cause=cause, message=line)
        if die is None:
            return "rank 1 never reached --die-after-iters (see ddp_kill/rank1.log)"
        if e1 is None or e1.get("status") != 137:
            return f"rank 1 did not end by SIGKILL (status {e1 and e1.get('status')})"
        if e0 is None:
            return "rank 0 never ended by itself: killed by the launcher's watchdog (a hang)"
        dt = d["seconds_to_error"] = round(e0["time"] - die["time"], 2)
        return ("rank 0 exited 0: it never noticed the lost rank" if e0.get("status") == 0 else
                f"rank 0 failed {dt:.1f} s after the kill (bound {KILL_BOUND_S} s)" if dt > KILL_BOUND_S else
                "rank 0 failed without the plugin's or NCCL's error" + " (only PyTorch's collective timeout)" * bool(cause)
                if cause in (None, "timeout") else None)

    def harness_scaling(self, d, name):
        rows = [r for r in read_jsonl(self.out / "harness_scaling.jsonl") if r.get("bench") == "codec_summary"]
        if not rows:
            return "no codec_summary line (see harness_scaling.log)"
        keys = ("rht_over_none", "allreduce_rht_busbw_gbps", "sendrecv_gbps", "sendrecv_rht_gbps", "cpu_s_per_gb")
        d["threads"] = {str(r["threads"]): {k: r.get(k) for k in keys} for r in rows}
        best = max(rows, key=lambda r: r.get("rht_over_none") or 0)
        self.goal("harness", (best.get("rht_over_none") or 0) >= HARNESS_GOAL,
                  f"{best.get('rht_over_none')} at {best['threads']} threads")

    def cpu_uncongested(self, d, name):
        summary = self.summary("cpu_uncongested")
        trim = summary.get("trim") or {}
        if trim.get("step_paired_ratio") is None:
            return "no round with both Gloo and trim (see cpu_uncongested.log)"
        d.update(rounds=trim["ok_rounds"], step_ratio=trim["step_paired_ratio"], cpu_ratio=trim["cpu_paired_ratio"],
                 step_p50_ms_median={k: (summary.get(k) or {}).get("step_p50_ms_median") for k in ("trim", "gloo")})
        self.goal("cpu", d["step_ratio"] <= CPU_GOAL, f"{d['step_ratio']}x over {d['rounds']} rounds (CPU {d['cpu_ratio']}x)")

    def congestion(self, d, name, root):
        """Its runs (also of a grid a budget stopped: D's result is already set) and the congestion report's goal."""
        keep = ("status", "iter_p50_ms", "iter_p99_ms", "val_acc", "time_to_target_s", "steps", "trim_rate")
        if runs := cong.load(self.out / root):
            d["runs"] = {r.get("label"): {k: r3(r.get(k)) if isinstance(r.get(k), float) else r.get(k) for k in keep}
                         for r in runs}
            goal = cong.judge(runs, "trim")
            d["goal"] = {k: goal.get(k) for k in ("state", "detail", "parts", "baseline")}
            if goal["state"] != "unknown" or self.goals["congestion"]["state"] == "unknown":
                self.goal("congestion", None if goal["state"] == "unknown" else goal["state"] == "met",
                          f"{name}, against {goal.get('baseline')}: {goal.get('detail')}")
        bad = [r.get("label") for r in runs or [] if r.get("status") != "ok" and not cong.stalled(r)]
        return (f"no run left a summary (see {name}.log)" if not runs else
                "failed: " + ", ".join(f"{k} ({d['runs'][k]['status']})" for k in bad) if bad else
                f"the congestion bench failed (see {name}.log)" if d.get("exit_codes") else None)

    def kernels(self, d, name):
        parts = self.parts[name]
        if "rc" in parts.get("tests", {}):
            ok, why, d["tests"] = gtest(text(self.out / "kernels_tests.log"))
            if not ok or parts["tests"]["rc"] != 0:
                return f"RotateCuda tests: {why or 'exit ' + str(parts['tests']['rc'])} (kernels_tests.log)"
        rows = [r for r in read_jsonl(self.out / "kernels_bench.log") if r.get("bench") == "cuda"]
        d["ratios"] = {f"{r.get('dtype')} {r.get('op')}": r3(r.get("ratio")) for r in rows if "ratio" in r}
        d["copy_gbps"] = r3(next((r.get("copy_gbps") for r in rows if r.get("copy_gbps")), None))
        if "rc" not in parts.get("bench", {}):
            return None
        if skipped := [r for r in rows if r.get("skipped")]:
            return f"trim-bench cuda skipped: {skipped[0].get('reason')}"
        if not rows or parts["bench"]["rc"] != 0:
            return "no trim-bench cuda result (see kernels_bench.log)"
        if fp32 := [r["ratio"] for r in rows if r.get("dtype") in ("fp32", "f32") and r.get("ratio")]:
            self.goal("kernel", min(fp32) >= KERNEL_GOAL, "fp32 forward/inverse " + ", ".join(f"{x:.2f}" for x in fp32))

    def kernels_ncu(self, d, name):
        d["kernels_profiled"] = len(re.findall(r"^\s*rotate_tiles\S*\s*\(", text(self.out / "kernels_ncu.log"), re.M))

    def hook_overhead(self, d, name):
        plain, hook = self.summary("hook_plain"), self.summary("hook_hook")
        for k in ("iter_p50_ms", "iter_p99_ms"):
            d[k] = {"plain": r3(plain.get(k)), "hook": r3(hook.get(k))}
        if bad := [f"run {w}: {s.get('status', 'no summary.json')}" for w, s in (("without the hook", plain),
                                                                                ("with the hook", hook)) if s.get("status") != "ok"]:
            return bad[0]
        if not self.hook_seen("hook_hook"):
            return "the plugin never saw the hook's communicator (no '" + HOOK_SEEN + "' in rank0.log)"
        if plain.get("iter_p50_ms") and hook.get("iter_p50_ms"):
            p50 = d["p50_hook_over_plain"] = r3(hook["iter_p50_ms"] / plain["iter_p50_ms"])
            self.goal("hook", p50 <= HOOK_GOAL, f"{p50:.3f}x")

    def hook_accuracy(self, d, name):
        bad, acc = [], d.setdefault("val_acc", {})
        for s in sorted(p[1:] for p, r in self.parts[name].items() if "rc" in r):  # parts s<seed>
            for t in ("socket", "rht", "hook"):
                r = self.summary(run := f"hookacc/{t}_s{s}")
                why = (r.get("status", "no summary.json") if r.get("status") != "ok" or r.get("val_acc") is None else
                       "replicas differ" if not r.get("params_identical", True) else
                       "the plugin never saw the hook's communicator" if t == "hook" and not self.hook_seen(run) else None)
                if why:
                    bad.append(f"{t}_s{s} ({why})")
                else:
                    acc.setdefault(t, []).append(r3(r["val_acc"]))
        return "; ".join(bad) or None

    def hook_accuracy_goal(self):
        """Over every seed that finished for all three transports."""
        acc = {}
        for f in sorted((self.out / "hookacc").glob("*_s*/summary.json")):
            s, (t, seed) = load_json(f) or {}, f.parent.name.rsplit("_s", 1)
            if s.get("status") == "ok" and s.get("val_acc") is not None:
                acc.setdefault(seed, {})[t] = s["val_acc"]
        if full := {k: v for k, v in acc.items() if len(v) == 3}:
            mean = {t: 100 * sum(v[t] for v in full.values()) / len(full) for t in ("socket", "rht", "hook")}
            self.goal("hook_acc", mean["hook"] >= mean["rht"] - 1e-7,
                      f"seeds {','.join(sorted(full))}: hook {mean['hook']:.2f}%, per-hop rht {mean['rht']:.2f}%, Socket "
                      f"{mean['socket']:.2f}% (hook {mean['socket'] - mean['hook']:.2f} points below Socket; aim <= "
                      f"{HOOK_AIM_POINTS})")

    def judge(self):
        for name in sorted(STEPS, key=lambda n: n == "congestion_grid"):  # the grid's goal wins over the one point's
            d, (_, check, *args) = self.base(name), STEPS[name]
            if name == "preflight" and d["result"] == "not planned":
                d = {"result": "fail", "why": "the check left no preflight record"}
            elif d["result"] is None or name.startswith("congestion_") and d["result"] != "not planned":
                why = getattr(self, check)(d, name, *args)
                if d["result"] is None:
                    d = self.settle(d, why)
            self.steps[name] = d
        self.steps = {n: self.steps[n] for n in STEPS}
        self.hook_accuracy_goal()

    def gpu_steps(self):
        """(steps that ran in an invocation that checked the GPU, those that ran in a --no-gpu one)."""
        no_gpu = {i.get("invocation"): bool(i.get("no_gpu")) for i in self.invocations}
        kinds = {n: {no_gpu.get(r.get("invocation"), False) for r in self.parts.get(n, {}).values() if "rc" in r}
                 for n in list(STEPS)[1:]}
        return [n for n, k in kinds.items() if False in k], [n for n, k in kinds.items() if True in k]

    def versions(self):
        v = {k: self.pre.get(k) for k in ("gpu", "driver", "torch", "torch_cuda", "nccl", "commit", "plugin_sha256", "cores")}
        builds = {}
        for p in (load_json(f) or {} for f in sorted(self.out.glob("preflight_[0-9]*.json"))):
            builds.setdefault(f"{p.get('commit')} {p.get('plugin_sha256')}", []).append(p.get("invocation"))
        if len(builds) > 1:
            v["mixed_builds"] = {k: sorted(i for i in invs if i) for k, invs in builds.items()}
        return v

    def render(self, elapsed_s=None):
        """(exit status, the report's text: the table, busbw per size, goals, verdict, the JSON line)."""
        self.judge()
        by = {r: [n for n in STEPS if self.steps[n]["result"] == r] for r in ("fail", "not run", "not planned")}
        rc = (2 if self.steps["preflight"]["result"] != "pass" else 1 if by["fail"] else 4 if by["not run"] else
              3 if any(g["state"] == "missed" for g in self.goals.values()) else 0)
        lines = [f"{'step':19} {'result':11} {'time':>6} {'limit':>6}  details"]
        for name, (what, *_) in STEPS.items():
            s = self.steps[name]
            t, lim = (f"{s['seconds']}s", f"{s['limit_s']}s") if s.get("limit_s") else ("-", "-")
            lines.append(f"{name:19} {s['result']:11} {t:>6} {lim:>6}  {detail(name, s) or what}")
        lines += self.tables
        lines += ["\ngoals:"] + [f"  {g['state']:7} {g['goal']}: {g['detail']}" for g in self.goals.values()]
        left = by["not run"] + by["not planned"]
        verdict = {0: "pass", 1: "fail", 2: "fail (preflight)", 3: "pass (goal missed)", 4: "incomplete"}[rc]
        result = {0: "pass", 3: "pass", 4: "incomplete"}.get(rc, "fail")
        gpu_steps, no_gpu_steps = self.gpu_steps()
        if result == "pass" and not gpu_steps:  # only --no-gpu ran: the flow on the CPU, not a result
            result = "pass (no GPU step ran)"
            verdict += " (no GPU step ran: --no-gpu, a CPU smoke run of the flow, not a result)"
        lines.append(f"\ncheck-gpu: {verdict}" + "".join(f"; {w}: {', '.join(by[k])}" for k, w in (
            ("fail", "failed"), ("not run", "not run")) if by[k]) +
            (f"; left for --continue: {', '.join(left)}" if left else "; every step ran"))
        versions = self.versions()
        if versions.get("mixed_builds"):
            lines.append(f"check-gpu: WARNING: the invocations ran different builds: {versions['mixed_builds']}")
        if gpu_steps and no_gpu_steps:
            lines.append(f"check-gpu: WARNING: these steps ran without a GPU (--no-gpu): {', '.join(no_gpu_steps)}")
        lines.append(json.dumps({
            "check": "check-gpu", "result": result, "exit": rc, "gpu_steps_run": len(gpu_steps),
            "no_gpu_steps": no_gpu_steps, "failed": by["fail"], "not_run": by["not run"], "next": left,
            "goals_met": all(g["state"] == "met" for g in self.goals.values()), "elapsed_s": elapsed_s,
            "versions": versions, "steps": self.steps, "goals": list(self.goals.values()),
            "invocations": [{k: i.get(k) for k in ("invocation", "plan", "budget_s", "continue", "no_gpu")}
                            for i in self.invocations]}, separators=(",", ":")))
        return rc, "\n".join(lines) + "\n"


DETAILS = {  # by check (STEPS): the key numbers of a step that ran (s: the step's JSON, g: s.get)
    "preflight": lambda s, g: f"{g('gpu') or 'no GPU'}, torch {g('torch')}, NCCL {g('nccl')}, {g('cores')} cores, commit "
                              f"{g('commit')}" + (f"; congestion steps: {g('netns_blocker')}" if g("netns_blocker") else ""),
    "allreduce": lambda s, g: (f"plugin/Socket-default {min(r):.2f}..{max(r):.2f}"
                               if (r := g("plugin_over_socket_default")) else ""),
    "sweep": lambda s, g: "geomean GB/s " + " ".join(f"{k}:{v}" for k, v in g("geomean_busbw_GBps", {}).items()),
    "ddp_lossless": lambda s, g: f"sha256 equal {s['param_sha256']['plugin'][:12]}, p50 {s['iter_p50_ms']['plugin']} vs "
                                 f"{s['iter_p50_ms']['socket']} ms ({g('p50_plugin_over_socket')}x)",
    "ddp_random": lambda s, g: f"{g('ranks')} ranks identical, switch trim rate {g('switch_trim_rate')}, val acc "
                               f"{g('val_acc')}",
    "rank_killed": lambda s, g: f"rank 0 failed {g('seconds_to_error')} s after the kill ({g('cause')}): {g('message')}",
    "harness_scaling": lambda s, g: " ".join(f"{t}thr: rht/none {v['rht_over_none']}" for t, v in g("threads", {}).items()),
    "cpu_uncongested": lambda s, g: f"trim / Gloo: step {g('step_ratio')}x, CPU {g('cpu_ratio')}x over {g('rounds')} rounds",
    "congestion": lambda s, g: " ".join(f"{k}: " + (f"p50 {v['iter_p50_ms']} ms" if v["status"] == "ok" else
                                                "stopped by its limit" if v["status"] in cong.LIMITED else v["status"])
                                        for k, v in g("runs", {}).items()) +
                               f"; goal {g('goal', {}).get('state')}",
    "kernels_ncu": lambda s, g: f"{g('kernels_profiled')} kernel launches profiled (kernels_ncu.log)",
    "kernels": lambda s, g: f"{g('tests', {}).get('passed')} tests passed; ratio to copy " +
                            " ".join(f"{k}:{v}" for k, v in g("ratios", {}).items()),
    "hook_overhead": lambda s, g: f"p50 {g('iter_p50_ms', {}).get('hook')} vs {g('iter_p50_ms', {}).get('plain')} ms "
                                  f"({g('p50_hook_over_plain')}x)",
    "hook_accuracy": lambda s, g: "val acc " + " ".join(f"{k}:{v}" for k, v in g("val_acc", {}).items()),
}


def detail(name, s):
    """The key numbers of a pass, else the reason (and the numbers of the runs that ran)."""
    nums = DETAILS[STEPS[name][1]]
    if s["result"] == "pass":
        return nums(s, s.get)
    return s.get("why", "") + (f" ({nums(s, s.get)})" if s["result"] == "not run" and s.get("runs") else "")


def main(argv):
    ap = argparse.ArgumentParser(prog="python -m bench gpu-report", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="the check's results folder (--out of python -m bench gpu)")
    ap.add_argument("--elapsed-s", type=int, default=None, help="the check's wall clock, for the JSON line")
    a = ap.parse_args(argv)
    rc, report = Report(a.out).render(a.elapsed_s)
    sys.stdout.write(report)
    return rc
