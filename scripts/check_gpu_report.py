#!/usr/bin/env python3
"""The verdicts of scripts/check-gpu.sh: a table, busbw per size, and ONE JSON line (last).

  check_gpu_report.py OUT [--elapsed-s S]    judge every step from what check-gpu.sh left in OUT
  check_gpu_report.py --best-socket DIR --top N
                                             the N best Socket configs under DIR (DIR/<TxS>/socket/
                                             summary.json, by geometric-mean busbw), one per line
  check_gpu_report.py --state OUT            for check-gpu.sh --continue: "ran STEP/PART" and
                                             "complete STEP" lines, then "invocation N" (the last)

OUT holds steps.jsonl (per invocation its plan; per part its runs (rc, seconds, limit) and not_run
records (the reason); a step's "complete"), preflight.json (the latest invocation's,
preflight_<N>.json invocation N's), the run directories of scripts/run_ddp.sh (summary.json,
rank<R>.jsonl, rank<R>.log, rank<R>.exit) and of scripts/congestion_bench.sh, and the logs.

Each step is pass, fail, "not run" (planned, never started or not finished: the reason) or "not
planned" (no invocation asked for it yet: check-gpu.sh --continue does). Per part the latest run
wins; a not_run record after it (the grid's runs a budget left) leaves the part unfinished, but
never hides that run's failure: fail wins over not run, and the step keeps both (its why, and
not_run_parts). A part that ran out of its limit, or was running when check-gpu.sh was stopped,
fails the step; every RotateCuda test skipped fails the kernels. Goals (speed and accuracy
targets) are reported apart: met, missed or unknown. Exit status: 2 the latest preflight failed;
1 a step failed; 4 a planned step was not run; 3 a goal was missed; else 0. The JSON line's
"gpu_steps_run" counts the steps that ran in an invocation that checked the GPU; when it is 0
(only check-gpu.sh --no-gpu ran: a CPU smoke run of the flow, not a result) its result is "pass
(no GPU step ran)", never "pass" (the exit status is the same). Standard library only.
"""
import argparse
import json
import math
import re
import sys
from pathlib import Path

import plot_congestion
from jsonio import load_json, read_jsonl

STEPS = [  # (name, what it checks): the table's order; the first invocation runs preflight..rank_killed
    ("preflight", "GPU, torch + NCCL, the carried build, netns for the congestion steps"),
    ("ddp_lossless", "DDP plugin vs Socket: same parameter sha256, iteration p50"),
    ("allreduce_2r", "lossless busbw plugin vs Socket default, 2 ranks"),
    ("congestion_c60", "widemlp at 60 % cross load, Socket vs trim, one bottleneck"),
    ("kernels", "the hook's GPU rotation: bit-exact to the host twin, speed vs a copy"),
    ("hook_overhead", "char-LM iteration p50 with the comm hook vs without"),
    ("hook_accuracy", "char-LM under random trim, seed 1: Socket, per-hop rht, the hook"),
    ("rank_killed", "a rank SIGKILLed: the survivor fails by itself, no hang"),
    ("allreduce_4r", "lossless busbw plugin vs Socket default, 4 ranks"),
    ("ddp_random_trim", "DDP, 4 ranks, random trimming: replicas identical"),
    ("socket_sweep_2r", "Socket tuned NTHREADS x NSOCKS_PERTHREAD, 2 ranks"),
    ("socket_sweep_4r", "the 2 best Socket configs, 4 ranks"),
    ("hook_accuracy_more", "char-LM under random trim, seeds 2 and 3"),
    ("kernels_ncu", "ncu --set full on the rotation kernels"),
    ("codec_threads_2r", "plugin busbw at NCCL_TRIM_CODEC_THREADS values, 2 ranks"),
    ("harness_scaling", "trim-harness rht/none and sendrecv over codec threads, CPU per GB"),
    ("cpu_uncongested", "widemlp on CPU tensors, trim backend vs Gloo, 3 alternated rounds"),
    ("congestion_grid", "the congestion head-to-head: congestion_bench.sh's preset"),
]
AR_GOAL = 1.0     # plugin busbw >= this x Socket at every size
DDP_GOAL = 1.05   # plugin iteration p50 <= this x Socket
KERNEL_GOAL, KERNEL_AIM = 0.5, 0.85  # fp32 rotation throughput / device-to-device copy
HOOK_GOAL = 1.05  # iteration p50 with the hook <= this x without
HOOK_AIM_POINTS = 0.3  # hook's final accuracy within this many points of Socket's
HARNESS_GOAL = 0.95
CPU_GOAL = 1.05   # uncongested widemlp on CPU tensors: trim backend iteration p50 <= this x Gloo
# rank_killed: the survivor must end within this many seconds of the kill. check-gpu.sh sets
# NCCL_TRIM_TIMEOUT_MS=10000 and PyTorch's collective timeout to 25 s, beyond this bound.
KILL_BOUND_S = 20
TIMED_OUT = (124, 137)
STOPPED = 143  # check-gpu.sh was stopped during the part
GOALS = {  # key: the goal's words; the order of the "goals" list
    "ar2": f"allreduce 2 ranks: plugin >= {AR_GOAL}x Socket default at every size",
    "ar2_best": f"allreduce 2 ranks: plugin >= {AR_GOAL}x Socket best (tuned) at every size",
    "ar4": f"allreduce 4 ranks: plugin >= {AR_GOAL}x Socket default at every size",
    "ar4_best": f"allreduce 4 ranks: plugin >= {AR_GOAL}x Socket best (tuned) at every size",
    "ddp": f"DDP iteration p50: plugin <= {DDP_GOAL}x Socket",
    "congestion": "congestion at 60 % cross load (the task with most gradient): trim vs Socket time to target "
                  "<= 0.5x, p99 <= 0.5x, accuracy >= Socket's - 0.3 points",
    "kernel": f"GPU rotation fp32 >= {KERNEL_GOAL}x a device copy (aim {KERNEL_AIM})",
    "hook": f"char-LM iteration p50 with the hook <= {HOOK_GOAL}x without",
    "hook_acc": f"char-LM accuracy under trim: hook >= per-hop rht (aim: within {HOOK_AIM_POINTS} points of Socket)",
    "harness": f"trim-harness allreduce rht / none >= {HARNESS_GOAL} (best codec threads)",
    "cpu": f"uncongested widemlp on CPU tensors: trim backend iteration p50 <= {CPU_GOAL}x Gloo (paired median)",
}
# The plugin's INFO line when NCCL initialised the hook's communicator through it.
HOOK_SEEN = "comm hook's (traffic class"

# The survivor's log, most specific first: our plugin's own words, then NCCL's, then PyTorch's
# collective timeout (which means nothing below noticed the dead peer).
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
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def r3(x):
    return None if x is None else round(x, 3)


def text(path):
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


# ---------------------------------------------------------------- readers

def bench(path):
    """One allreduce run's summary (run_ddp.sh --bench): ok, why, sizes -> busbw."""
    s = load_json(Path(path) / "summary.json")
    if s is None:
        return {"ok": False, "why": f"no {path}/summary.json", "busbw": {}}
    busbw = {e["bytes"]: e["busbw_GBps"] for e in s.get("bench", [])}
    why = None
    if s.get("status") != "ok":
        why = f"status {s.get('status')}"
    elif not busbw:
        why = "no sizes measured"
    elif not s.get("all_exact"):
        why = "sums not exact at " + ",".join(mib(e["bytes"]) for e in s["bench"] if e.get("max_err") != 0)
    return {"ok": why is None, "why": why, "busbw": busbw}


def sweep_dir_configs(root, mode):
    """{config: bench} for root/<config>/<mode>/summary.json."""
    return {d.parent.name: bench(d) for d in sorted(Path(root).glob(f"*/{mode}"))}


def best_socket(configs):
    """The config with the highest geometric-mean busbw over the sizes all ok configs share."""
    ok = {k: v for k, v in configs.items() if v["ok"]}
    if not ok:
        return None, {}
    common = set.intersection(*(set(v["busbw"]) for v in ok.values()))
    gm = {k: geomean([v["busbw"][b] for b in sorted(common)]) for k, v in ok.items()}
    gm = {k: g for k, g in gm.items() if g}
    return (max(gm, key=gm.get) if gm else None), gm


def gtest(log):
    """gtest's verdict from its output: (ok, why, counts)."""
    ran = len(re.findall(r"^\[ RUN      \] ", log, re.M))
    passed = len(re.findall(r"^\[       OK \] ", log, re.M))
    skipped = len(re.findall(r"^\[  SKIPPED \] \S+ \(\d+ ms\)", log, re.M))
    failed = len(re.findall(r"^\[  FAILED  \] \S+ \(\d+ ms\)", log, re.M))
    counts = {"tests": ran, "passed": passed, "skipped": skipped, "failed": failed}
    if ran == 0:
        return False, "no test ran (the filter matched nothing?)", counts
    if failed:
        return False, f"{failed} of {ran} failed", counts
    if skipped:
        m = re.search(r"Skipped\n(.+)", log)
        why = f" ({m.group(1).strip()})" if m else ""
        return False, (f"every test skipped{why}: nothing was checked on the GPU" if skipped == ran
                       else f"{skipped} of {ran} skipped{why}"), counts
    return passed == ran, None if passed == ran else f"{ran - passed} of {ran} without a result", counts


# ---------------------------------------------------------------- the report

class Report:
    def __init__(self, out):
        self.out = Path(out)
        self.parts, self.invocations, self.planned, self.complete = {}, [], set(), set()
        for r in read_jsonl(self.out / "steps.jsonl"):
            if "plan" in r:
                self.invocations.append(r)
                self.planned.update(r["plan"])
            elif r.get("complete"):
                self.complete.add(r["step"])
            elif "step" in r:
                parts = self.parts.setdefault(r["step"], {})
                key, prev = r.get("part", ""), parts.get(r.get("part", ""))
                if "not_run" in r and prev is not None and "rc" in prev:
                    # A part that ran, then not run (the grid's runs the budget left): it stays a run
                    # (its rc decides a failure) and is not finished (not_run).
                    parts[key] = dict(prev, not_run=r["not_run"])
                else:
                    parts[key] = r  # a run replaces what came before; so does a first not_run
        self.pre = load_json(self.out / "preflight.json") or {}
        self.steps, self.tables = {}, []
        self.goals = {k: {"goal": g, "state": "unknown", "detail": "not measured"} for k, g in GOALS.items()}

    # -- helpers
    def base(self, name):
        """A step's time and parts; its result already set when the parts decide it alone."""
        parts = self.parts.get(name, {})
        d = {"result": None}
        if not parts:
            if name in self.planned:
                return {"result": "not run", "why": "no record: the check was stopped before it"}
            return {"result": "not planned", "why": "not run yet: scripts/check-gpu.sh --continue"}
        ran = {p: r for p, r in parts.items() if "rc" in r}
        missing = {p or name: r["not_run"] for p, r in parts.items() if "not_run" in r}
        if ran:
            d["seconds"] = sum(r.get("seconds", 0) for r in ran.values())
            d["limit_s"] = sum(r.get("limit", 0) for r in ran.values())
        if missing:
            d["not_run_parts"] = missing
        if not ran:
            return dict(d, result="not run", why="; ".join(sorted(set(missing.values()))))
        out = [f"{p or name} after its {r.get('limit')} s limit" for p, r in ran.items() if r.get("rc") in TIMED_OUT]
        if out:
            return self.fail(d, "timed out: " + ", ".join(out))
        stopped = [p or name for p, r in ran.items() if r.get("rc") == STOPPED]
        if stopped:
            return self.fail(d, "check-gpu.sh was stopped during " + ", ".join(stopped))
        if name != "rank_killed":  # (there the launcher's exit is the killed rank's)
            bad = {r.get("log") or p or name: r["rc"] for p, r in ran.items() if r.get("rc")}
            if bad:
                d["exit_codes"] = bad
        return d

    def goal(self, key, met, detail):
        self.goals[key].update(state="unknown" if met is None else ("met" if met else "missed"), detail=detail)

    @staticmethod
    def not_run_why(d):
        return f"{len(d['not_run_parts'])} part(s) not run: " + "; ".join(sorted(set(d["not_run_parts"].values())))

    @classmethod
    def fail(cls, d, why):
        """fail, with why; the parts also not run (a failed grid's runs the budget left) stay in it."""
        d.update(result="fail", why=why + (f"; also {cls.not_run_why(d)}" if d.get("not_run_parts") else ""))
        return d

    @classmethod
    def done(cls, d):
        """pass, unless a part exited non-zero (fail) or never ran (the step is not complete)."""
        if d.get("exit_codes"):
            cls.fail(d, "exit " + ", ".join(f"{rc} ({log})" for log, rc in d["exit_codes"].items()))
        elif d.get("not_run_parts"):
            d.update(result="not run", why=cls.not_run_why(d))
        else:
            d["result"] = "pass"
        return d

    def hook_seen(self, run_dir):
        return HOOK_SEEN in text(Path(run_dir) / "rank0.log")

    # -- steps
    def preflight(self):
        d = self.base("preflight")
        if d["result"] == "not planned":
            return {"result": "fail", "why": "check-gpu.sh left no preflight record"}
        p = self.pre
        d.update({k: p.get(k) for k in ("gpu", "driver", "torch", "nccl", "cores", "commit", "plugin_sha256",
                                        "import_s", "cuda_init_s", "netns_blocker") if p.get(k) is not None})
        if p.get("ok") and self.parts["preflight"][""].get("rc") == 0:
            d["result"] = "pass"
        else:
            self.fail(d, "; ".join(p.get("why") or ["see preflight.log"]))
        return d

    def allreduce(self, ranks):
        name, key = f"allreduce_{ranks}r", f"ar{ranks}"
        d = self.base(name)
        if d["result"]:
            return d
        root = self.out / f"ar{ranks}"
        plug, sock = bench(root / "lossless"), bench(root / "socket")
        sweep = sweep_dir_configs(self.out / f"sweep{ranks}", "socket")
        cands = dict(sweep, default=sock)
        best, gms = best_socket(cands)
        sizes = sorted(b for b in set(plug["busbw"]) & set(sock["busbw"]) if sock["busbw"][b] > 0)
        codec = sweep_dir_configs(self.out / "codec2", "lossless") if ranks == 2 else {}
        d["sizes"] = [mib(b) for b in sizes]
        d["busbw_GBps"] = {"plugin": [r3(plug["busbw"].get(b)) for b in sizes],
                           "socket_default": [r3(sock["busbw"].get(b)) for b in sizes]}
        vs_def = [plug["busbw"][b] / sock["busbw"][b] for b in sizes]
        d["plugin_over_socket_default"] = [r3(x) for x in vs_def]
        bb = cands[best]["busbw"] if best else {}
        vs_best = [plug["busbw"][b] / bb[b] if bb.get(b) else None for b in sizes]
        if best:
            d["socket_best"] = best
            d["busbw_GBps"]["socket_best"] = [r3(bb.get(b)) for b in sizes]
            d["plugin_over_socket_best"] = [r3(x) for x in vs_best]
        d["socket_geomean_GBps"] = {k: r3(v) for k, v in sorted(gms.items(), key=lambda kv: -kv[1])}
        self.tables.append((ranks, sizes, plug, sock, best, cands.get(best) if best else None, codec))
        if not plug["ok"]:
            self.fail(d, f"plugin: {plug['why']}")
        elif not sock["ok"]:
            self.fail(d, f"Socket: {sock['why']}")
        elif set(plug["busbw"]) != set(sock["busbw"]):
            self.fail(d, "plugin and Socket measured different sizes")
        else:
            self.done(d)
            d["exact"] = True
        if vs_def and d["result"] != "fail":
            worst = min(zip(vs_def, sizes))
            self.goal(key, worst[0] >= AR_GOAL, f"worst {worst[0]:.2f}x at {mib(worst[1])}")
            n_sweep = sum(1 for v in sweep.values() if v["ok"])
            vb = [(x, b) for x, b in zip(vs_best, sizes) if x is not None]
            if n_sweep and vb:
                wb = min(vb)
                self.goal(f"{key}_best", wb[0] >= AR_GOAL,
                          f"worst {wb[0]:.2f}x at {mib(wb[1])} vs {best}; best of default + {n_sweep} tuned")
            else:
                self.goals[f"{key}_best"]["detail"] = "no tuned Socket config ran yet (socket_sweep)"
        return d

    def sweep(self, name, root, mode):
        d = self.base(name)
        if d["result"]:
            return d
        ran = [p for p, r in self.parts[name].items() if "rc" in r]
        cfgs = {c: v for c, v in sweep_dir_configs(self.out / root, mode).items() if c in ran}
        bad = {c: (cfgs[c]["why"] if c in cfgs else "no results") for c in ran if c not in cfgs or not cfgs[c]["ok"]}
        gm = {c: r3(geomean(list(v["busbw"].values()))) for c, v in cfgs.items() if v["ok"]}
        d["geomean_busbw_GBps"] = gm
        if gm:
            d["best"] = max(gm, key=gm.get)
        if name == "codec_threads_2r":  # per size too
            sizes = sorted(set().union(*(v["busbw"] for v in cfgs.values())))
            d["sizes"] = [mib(b) for b in sizes]
            d["busbw_GBps"] = {c: [r3(v["busbw"].get(b)) for b in sizes] for c, v in cfgs.items() if v["ok"]}
        if bad:
            return self.fail(d, "; ".join(f"{c}: {w}" for c, w in bad.items()))
        return self.done(d)

    def ddp_lossless(self):
        d = self.base("ddp_lossless")
        if d["result"]:
            return d
        runs = {}
        for m in ("lossless", "socket"):
            s = load_json(self.out / f"ddp_{m}" / "summary.json") or {}
            fin = next((e for e in reversed(read_jsonl(self.out / f"ddp_{m}" / "rank0.jsonl"))
                        if e.get("event") == "final"), {})
            runs[m] = (s, fin.get("param_sha256") or [])
        (ps, ph), (ss, sh) = runs["lossless"], runs["socket"]
        d["param_sha256"] = {"plugin": ph[0] if ph else None, "socket": sh[0] if sh else None}
        d["iter_p50_ms"] = {"plugin": r3(ps.get("iter_p50_ms")), "socket": r3(ss.get("iter_p50_ms"))}
        d["iter_p99_ms"] = {"plugin": r3(ps.get("iter_p99_ms")), "socket": r3(ss.get("iter_p99_ms"))}
        d["val_acc"] = {"plugin": r3(ps.get("val_acc")), "socket": r3(ss.get("val_acc"))}
        d["steps"] = ps.get("steps")
        ratio = None
        if ps.get("iter_p50_ms") and ss.get("iter_p50_ms"):
            ratio = ps["iter_p50_ms"] / ss["iter_p50_ms"]
            d["p50_plugin_over_socket"] = r3(ratio)
        if ps.get("status") != "ok":
            return self.fail(d, f"plugin run: {ps.get('status', 'no summary.json')}")
        if ss.get("status") != "ok":
            return self.fail(d, f"Socket run: {ss.get('status', 'no summary.json')}")
        if not ph or not sh:
            return self.fail(d, "no final parameter hashes")
        if len(set(ph)) != 1 or len(set(sh)) != 1:
            return self.fail(d, "replicas differ within a run")
        if ph[0] != sh[0]:
            return self.fail(d, "plugin's final parameters differ from Socket's")
        d["hash_equal"] = True
        if ratio is not None:
            self.goal("ddp", ratio <= DDP_GOAL, f"{ratio:.3f}x ({ps['iter_p50_ms']:.2f} vs {ss['iter_p50_ms']:.2f} ms)")
        return self.done(d)

    def ddp_random(self):
        d = self.base("ddp_random_trim")
        if d["result"]:
            return d
        s = load_json(self.out / "ddp_random" / "summary.json") or {}
        sw, pl = s.get("switch") or {}, s.get("plugin") or {}
        d.update({"ranks": s.get("ranks"), "trim_p": s.get("trim_p"), "replicas_identical": s.get("params_identical"),
                  "switch_trimmed": sw.get("forwarded_trimmed"), "switch_trim_rate": r3(sw.get("trim_rate")),
                  "trimmed_accepted": pl.get("trimmed_accepted"), "val_acc": r3(s.get("val_acc"))})
        if s.get("status") != "ok":
            return self.fail(d, f"run: {s.get('status', 'no summary.json')}")
        if not s.get("params_identical"):
            return self.fail(d, "replicas differ: " + str(s.get("param_sha256")))
        if (sw.get("forwarded_trimmed") or 0) + (pl.get("trimmed_accepted") or 0) == 0:
            return self.fail(d, "nothing was trimmed (switch and plugin counters 0): the check proves nothing")
        return self.done(d)

    def rank_killed(self):
        d = self.base("rank_killed")
        if d["result"]:
            return d
        run = self.out / "ddp_kill"
        die = next((e for e in read_jsonl(run / "rank1.jsonl") if e.get("event") == "die"), None)
        e0, e1 = load_json(run / "rank0.exit"), load_json(run / "rank1.exit")
        log = text(run / "rank0.log")
        cause, line = None, None
        for kind, rx in KILL_PATTERNS:
            m = rx.search(log)
            if m:
                cause, line = kind, m.group(0).strip()[:240]
                break
        d.update({"bound_s": KILL_BOUND_S, "died_at_step": die.get("step") if die else None,
                  "killed_status": e1.get("status") if e1 else None,
                  "survivor_status": e0.get("status") if e0 else None, "cause": cause, "message": line})
        if die is None:
            return self.fail(d, "rank 1 never reached --die-after-iters (see ddp_kill/rank1.log)")
        if e1 is None or e1.get("status") != 137:
            return self.fail(d, f"rank 1 did not end by SIGKILL (status {e1 and e1.get('status')})")
        if e0 is None:
            return self.fail(d, "rank 0 never ended by itself: killed by run_ddp.sh's watchdog (a hang)")
        dt = e0["time"] - die["time"]
        d["seconds_to_error"] = round(dt, 2)
        if e0.get("status") == 0:
            return self.fail(d, "rank 0 exited 0: it never noticed the lost rank")
        if dt > KILL_BOUND_S:
            return self.fail(d, f"rank 0 failed {dt:.1f} s after the kill (bound {KILL_BOUND_S} s)")
        if cause in (None, "timeout"):
            return self.fail(d, "rank 0 failed without the plugin's or NCCL's error" +
                             (" (only PyTorch's collective timeout)" if cause else ""))
        return self.done(d)

    def harness_scaling(self):
        d = self.base("harness_scaling")
        if d["result"]:
            return d
        rows = [r for r in read_jsonl(self.out / "harness_scaling.jsonl") if r.get("bench") == "codec_summary"]
        if not rows:
            return self.fail(d, "no codec_summary line (see harness_scaling.log)")
        keys = ("rht_over_none", "allreduce_rht_busbw_gbps", "sendrecv_gbps", "sendrecv_rht_gbps", "cpu_s_per_gb")
        d["threads"] = {str(r["threads"]): {k: r.get(k) for k in keys} for r in rows}
        best = max(rows, key=lambda r: r.get("rht_over_none") or 0)
        self.goal("harness", (best.get("rht_over_none") or 0) >= HARNESS_GOAL,
                  f"{best.get('rht_over_none')} at {best['threads']} threads")
        if any(r.get("rc") for r in self.parts["harness_scaling"].values()):
            return self.fail(d, "bench_codec.py failed (see harness_scaling.log)")
        return self.done(d)

    def cpu_uncongested(self):
        """alternate_rounds.sh's summary: trim's paired median step and CPU over Gloo's."""
        d = self.base("cpu_uncongested")
        if d["result"]:
            return d
        summary = load_json(self.out / "cpu_uncongested" / "summary.json") or {}
        trim = summary.get("trim") or {}
        if trim.get("step_paired_ratio") is None:
            return self.fail(d, "no round with both Gloo and trim (see cpu_uncongested.log)")
        d["rounds"] = trim["ok_rounds"]
        d["step_ratio"], d["cpu_ratio"] = trim["step_paired_ratio"], trim["cpu_paired_ratio"]
        d["step_p50_ms_median"] = {k: (summary.get(k) or {}).get("step_p50_ms_median") for k in ("trim", "gloo")}
        self.goal("cpu", d["step_ratio"] <= CPU_GOAL,
                  f"{d['step_ratio']}x over {d['rounds']} rounds (CPU {d['cpu_ratio']}x)")
        if any(r.get("rc") for r in self.parts["cpu_uncongested"].values()):
            return self.fail(d, "alternate_rounds.sh failed (see cpu_uncongested.log)")
        return self.done(d)

    def congestion(self, name, root):
        """Its runs (a grid a budget stopped keeps those that ran) and plot_congestion.py's goal."""
        d = self.base(name)
        if d["result"] == "not planned":
            return d
        runs = plot_congestion.load(self.out / root)
        keep = ("status", "iter_p50_ms", "iter_p99_ms", "val_acc", "time_to_target_s", "steps", "trim_rate")
        if runs:
            d["runs"] = {r.get("label"): {k: r3(r.get(k)) if isinstance(r.get(k), float) else r.get(k) for k in keep}
                         for r in runs}
            goal = plot_congestion.judge(runs, "trim")
            d["goal"] = {k: goal.get(k) for k in ("state", "detail", "parts", "baseline")}
            if goal["state"] != "unknown" or self.goals["congestion"]["state"] == "unknown":
                self.goal("congestion", None if goal["state"] == "unknown" else goal["state"] == "met",
                          f"{name}: {goal.get('detail')}")
        if d["result"]:
            return d
        bad = [k for k, v in d.get("runs", {}).items() if v["status"] != "ok"]
        if not runs:
            return self.fail(d, f"no run left a summary (see {name}.log)")
        if bad:
            return self.fail(d, "failed: " + ", ".join(f"{k} ({d['runs'][k]['status']})" for k in bad))
        if any(r.get("rc") for r in self.parts[name].values() if "rc" in r):
            return self.fail(d, f"congestion_bench.sh failed (see {name}.log)")
        return self.done(d)

    def kernels(self):
        d = self.base("kernels")
        if d["result"]:
            return d
        parts = self.parts["kernels"]
        if "tests" in parts and "rc" in parts["tests"]:
            ok, why, d["tests"] = gtest(text(self.out / "kernels_tests.log"))
            if not ok or parts["tests"]["rc"] != 0:
                return self.fail(d, f"RotateCuda tests: {why or 'exit ' + str(parts['tests']['rc'])} (kernels_tests.log)")
        rows = [r for r in read_jsonl(self.out / "kernels_bench.log") if r.get("bench") == "cuda"]
        d["ratios"] = {f"{r.get('dtype')} {r.get('op')}": r3(r.get("ratio")) for r in rows if "ratio" in r}
        d["copy_gbps"] = r3(next((r.get("copy_gbps") for r in rows if r.get("copy_gbps")), None))
        if "bench" in parts and "rc" in parts["bench"]:
            if any(r.get("skipped") for r in rows):
                return self.fail(d, "trim-bench cuda skipped: " + str(next(r.get("reason") for r in rows if r.get("skipped"))))
            if not rows or parts["bench"]["rc"] != 0:
                return self.fail(d, "no trim-bench cuda result (see kernels_bench.log)")
            fp32 = [r["ratio"] for r in rows if r.get("dtype") in ("fp32", "f32") and r.get("ratio")]
            if fp32:
                self.goal("kernel", min(fp32) >= KERNEL_GOAL, "fp32 forward/inverse " + ", ".join(f"{x:.2f}" for x in fp32))
        return self.done(d)

    def kernels_ncu(self):
        d = self.base("kernels_ncu")
        if d["result"]:
            return d
        log = text(self.out / "kernels_ncu.log")
        d["kernels_profiled"] = len(re.findall(r"^\s*rotate_tiles\S*\s*\(", log, re.M))
        if self.parts["kernels_ncu"][""].get("rc"):
            return self.fail(d, f"ncu exit {self.parts['kernels_ncu'][''].get('rc')} (see kernels_ncu.log)")
        return self.done(d)

    def hook_overhead(self):
        d = self.base("hook_overhead")
        if d["result"]:
            return d
        plain = load_json(self.out / "hook_plain" / "summary.json") or {}
        hook = load_json(self.out / "hook_hook" / "summary.json") or {}
        d["iter_p50_ms"] = {"plain": r3(plain.get("iter_p50_ms")), "hook": r3(hook.get("iter_p50_ms"))}
        d["iter_p99_ms"] = {"plain": r3(plain.get("iter_p99_ms")), "hook": r3(hook.get("iter_p99_ms"))}
        for what, s in (("without the hook", plain), ("with the hook", hook)):
            if s.get("status") != "ok":
                return self.fail(d, f"run {what}: {s.get('status', 'no summary.json')}")
        if not self.hook_seen(self.out / "hook_hook"):
            return self.fail(d, "the plugin never saw the hook's communicator (no '" + HOOK_SEEN + "' in rank0.log)")
        ratio = hook["iter_p50_ms"] / plain["iter_p50_ms"] if plain.get("iter_p50_ms") and hook.get("iter_p50_ms") else None
        if ratio is not None:
            d["p50_hook_over_plain"] = r3(ratio)
            self.goal("hook", ratio <= HOOK_GOAL, f"{ratio:.3f}x")
        return self.done(d)

    def hook_accuracy(self, name, seeds):
        d = self.base(name)
        if d["result"]:
            return d
        bad, acc = [], {}
        for s in seeds:
            for t in ("socket", "rht", "hook"):
                run = self.out / "hookacc" / f"{t}_s{s}"
                if "rc" not in self.parts[name].get(f"s{s}", {}):
                    continue
                r = load_json(run / "summary.json") or {}
                if r.get("status") != "ok" or r.get("val_acc") is None:
                    bad.append(f"{run.name} ({r.get('status', 'no summary.json')})")
                elif not r.get("params_identical", True):
                    bad.append(f"{run.name} (replicas differ)")
                elif t == "hook" and not self.hook_seen(run):
                    bad.append(f"{run.name} (the plugin never saw the hook's communicator)")
                else:
                    acc.setdefault(t, []).append(r3(r["val_acc"]))
        d["val_acc"] = acc
        if bad:
            return self.fail(d, "; ".join(bad))
        return self.done(d)

    def hook_accuracy_goal(self):
        """Over every seed that finished for all three transports."""
        acc = {}
        for f in sorted((self.out / "hookacc").glob("*_s*/summary.json")):
            s = load_json(f) or {}
            t, seed = f.parent.name.rsplit("_s", 1)
            if s.get("status") == "ok" and s.get("val_acc") is not None:
                acc.setdefault(seed, {})[t] = s["val_acc"]
        full = {k: v for k, v in acc.items() if len(v) == 3}
        if not full:
            return
        mean = {t: sum(v[t] for v in full.values()) / len(full) for t in ("socket", "rht", "hook")}
        gap = 100 * (mean["socket"] - mean["hook"])
        self.goal("hook_acc", mean["hook"] >= mean["rht"] - 1e-9,
                  f"seeds {','.join(sorted(full))}: hook {100 * mean['hook']:.2f}%, per-hop rht {100 * mean['rht']:.2f}%, "
                  f"Socket {100 * mean['socket']:.2f}% (hook {gap:.2f} points below Socket; aim <= {HOOK_AIM_POINTS})")

    # -- all
    def judge(self):
        pre = self.preflight()
        self.steps["preflight"] = pre
        fns = {"allreduce_2r": lambda: self.allreduce(2), "allreduce_4r": lambda: self.allreduce(4),
               "socket_sweep_2r": lambda: self.sweep("socket_sweep_2r", "sweep2", "socket"),
               "socket_sweep_4r": lambda: self.sweep("socket_sweep_4r", "sweep4", "socket"),
               "codec_threads_2r": lambda: self.sweep("codec_threads_2r", "codec2", "lossless"),
               "harness_scaling": self.harness_scaling, "cpu_uncongested": self.cpu_uncongested,
               "ddp_lossless": self.ddp_lossless,
               "ddp_random_trim": self.ddp_random, "rank_killed": self.rank_killed,
               "congestion_c60": lambda: self.congestion("congestion_c60", "congestion_c60"),
               "congestion_grid": lambda: self.congestion("congestion_grid", "congestion"),
               "kernels": self.kernels, "kernels_ncu": self.kernels_ncu, "hook_overhead": self.hook_overhead,
               "hook_accuracy": lambda: self.hook_accuracy("hook_accuracy", [1]),
               "hook_accuracy_more": lambda: self.hook_accuracy("hook_accuracy_more", [2, 3])}
        # The grid's verdict on the goal wins over the one point's: judge it last.
        for name in sorted(fns, key=lambda n: n == "congestion_grid"):
            self.steps[name] = fns[name]()
        self.hook_accuracy_goal()

    def exit_code(self):
        if self.steps["preflight"]["result"] != "pass":
            return 2
        results = [s["result"] for s in self.steps.values()]
        if "fail" in results:
            return 1
        if "not run" in results:
            return 4
        return 3 if any(g["state"] == "missed" for g in self.goals.values()) else 0

    def gpu_steps(self):
        """(the steps that ran in an invocation that checked the GPU, those that ran in a --no-gpu one):
        by the runs their verdicts rest on (preflight aside)."""
        no_gpu = {i.get("invocation"): bool(i.get("no_gpu")) for i in self.invocations}
        gpu, cpu = [], []
        for name, _ in STEPS[1:]:
            ran = [r for r in self.parts.get(name, {}).values() if "rc" in r]
            if any(not no_gpu.get(r.get("invocation"), False) for r in ran):
                gpu.append(name)
            if any(no_gpu.get(r.get("invocation"), False) for r in ran):
                cpu.append(name)
        return gpu, cpu

    def versions(self):
        v = {k: self.pre.get(k) for k in ("gpu", "driver", "torch", "torch_cuda", "nccl", "commit", "plugin_sha256", "cores")}
        commits = {}
        for f in sorted(self.out.glob("preflight_[0-9]*.json")):
            p = load_json(f) or {}
            commits.setdefault(f"{p.get('commit')} {p.get('plugin_sha256')}", []).append(p.get("invocation"))
        if len(commits) > 1:
            v["mixed_builds"] = {k: sorted(i for i in invs if i) for k, invs in commits.items()}
        return v

    def print(self, elapsed):
        rc = self.exit_code()
        print(f"{'step':19} {'result':11} {'time':>6} {'limit':>6}  details")
        for name, what in STEPS:
            s = self.steps[name]
            t = f"{s['seconds']}s" if s.get("limit_s") else "-"
            lim = f"{s['limit_s']}s" if s.get("limit_s") else "-"
            print(f"{name:19} {s['result']:11} {t:>6} {lim:>6}  {self.detail(name, s) or what}")
        for ranks, sizes, plug, sock, best, bestrun, codec in self.tables:
            if not sizes:
                continue
            print(f"\nallreduce busbw GB/s, {ranks} ranks (Ring/Simple, 2 channels); Socket best = {best or '-'} "
                  "(NTHREADSxNSOCKS_PERTHREAD)")
            cols = [("plugin", plug["busbw"]), ("sock-def", sock["busbw"])]
            if bestrun and best != "default":
                cols.append((f"sock-{best}", bestrun["busbw"]))
            cols += [(f"ct={c}", v["busbw"]) for c, v in sorted(codec.items()) if v["busbw"]]
            print(f"{'size':>6} " + " ".join(f"{n:>10}" for n, _ in cols) + f" {'÷def':>6} {'÷best':>6}")
            bb = bestrun["busbw"] if bestrun else sock["busbw"]
            for b in sizes:
                vals = " ".join(f"{v[b]:10.3f}" if b in v else f"{'-':>10}" for _, v in cols)
                rd = plug["busbw"][b] / sock["busbw"][b] if sock["busbw"].get(b) else 0
                rb = plug["busbw"][b] / bb[b] if bb.get(b) else 0
                print(f"{mib(b):>6} {vals} {rd:6.2f} {rb:6.2f}")
        print("\ngoals:")
        for g in self.goals.values():
            print(f"  {g['state']:7} {g['goal']}: {g['detail']}")
        names = [n for n, _ in STEPS]
        by = {r: [n for n in names if self.steps[n]["result"] == r] for r in ("fail", "not run", "not planned")}
        left = by["not run"] + by["not planned"]
        verdict = {0: "pass", 1: "fail", 2: "fail (preflight)", 3: "pass (goal missed)", 4: "incomplete"}[rc]
        result = {0: "pass", 3: "pass", 4: "incomplete"}.get(rc, "fail")
        gpu_steps, no_gpu_steps = self.gpu_steps()
        if result == "pass" and not gpu_steps:  # only --no-gpu ran: the flow on the CPU, not a result
            result = "pass (no GPU step ran)"
            verdict += " (no GPU step ran: check-gpu.sh --no-gpu, a CPU smoke run of the flow, not a result)"
        print(f"\ncheck-gpu: {verdict}" + (f"; failed: {', '.join(by['fail'])}" if by["fail"] else "") +
              (f"; not run: {', '.join(by['not run'])}" if by["not run"] else "") +
              (f"; left for scripts/check-gpu.sh --continue: {', '.join(left)}" if left else "; every step ran"))
        versions = self.versions()
        if versions.get("mixed_builds"):
            print(f"check-gpu: WARNING: the invocations ran different builds: {versions['mixed_builds']}")
        if gpu_steps and no_gpu_steps:
            print(f"check-gpu: WARNING: these steps ran without a GPU (--no-gpu): {', '.join(no_gpu_steps)}")
        res = {"check": "check-gpu", "result": result, "exit": rc,
               "gpu_steps_run": len(gpu_steps), "no_gpu_steps": no_gpu_steps,
               "failed": by["fail"], "not_run": by["not run"], "next": left,
               "goals_met": all(g["state"] == "met" for g in self.goals.values()),
               "elapsed_s": elapsed, "versions": versions,
               "invocations": [{k: i.get(k) for k in ("invocation", "plan", "budget_s", "continue", "no_gpu")}
                               for i in self.invocations],
               "steps": self.steps, "goals": list(self.goals.values())}
        print(json.dumps(res, separators=(",", ":")))
        return rc

    def detail(self, name, s):
        out = self.detail_text(name, s) if s["result"] not in ("not run", "fail", "not planned") else s.get("why", "")
        if s["result"] == "not run" and s.get("runs"):
            out += " (" + self.detail_text(name, s) + ")"
        return out

    @staticmethod
    def detail_text(name, s):
        if name == "preflight":
            return (f"{s.get('gpu') or 'no GPU'}, torch {s.get('torch')}, NCCL {s.get('nccl')}, {s.get('cores')} cores, "
                    f"commit {s.get('commit')}" + (f"; congestion steps: {s['netns_blocker']}" if s.get("netns_blocker") else ""))
        if name.startswith("allreduce"):
            r = s.get("plugin_over_socket_default") or []
            return f"plugin/Socket-default {min(r):.2f}..{max(r):.2f}" if r else ""
        if name in ("socket_sweep_2r", "socket_sweep_4r", "codec_threads_2r"):
            return "geomean GB/s " + " ".join(f"{k}:{v}" for k, v in s.get("geomean_busbw_GBps", {}).items())
        if name == "ddp_lossless":
            return (f"sha256 equal {s['param_sha256']['plugin'][:12]}, p50 {s['iter_p50_ms']['plugin']} vs "
                    f"{s['iter_p50_ms']['socket']} ms ({s.get('p50_plugin_over_socket')}x)")
        if name == "ddp_random_trim":
            return f"{s.get('ranks')} ranks identical, switch trim rate {s.get('switch_trim_rate')}, val acc {s.get('val_acc')}"
        if name == "rank_killed":
            return f"rank 0 failed {s.get('seconds_to_error')} s after the kill ({s.get('cause')}): {s.get('message')}"
        if name == "harness_scaling":
            return " ".join(f"{t}thr: rht/none {v['rht_over_none']}" for t, v in s.get("threads", {}).items())
        if name == "cpu_uncongested":
            return f"trim / Gloo: step {s.get('step_ratio')}x, CPU {s.get('cpu_ratio')}x over {s.get('rounds')} rounds"
        if name.startswith("congestion"):
            return " ".join(f"{k}: p50 {v['iter_p50_ms']} ms" for k, v in s.get("runs", {}).items()) + \
                f"; goal {s.get('goal', {}).get('state')}"
        if name == "kernels":
            return f"{s.get('tests', {}).get('passed')} tests passed; ratio to copy " + \
                " ".join(f"{k}:{v}" for k, v in s.get("ratios", {}).items())
        if name == "kernels_ncu":
            return f"{s.get('kernels_profiled')} kernel launches profiled (kernels_ncu.log)"
        if name == "hook_overhead":
            p = s.get("iter_p50_ms", {})
            return f"p50 {p.get('hook')} vs {p.get('plain')} ms ({s.get('p50_hook_over_plain')}x)"
        if name.startswith("hook_accuracy"):
            return "val acc " + " ".join(f"{k}:{v}" for k, v in s.get("val_acc", {}).items())
        return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?")
    ap.add_argument("--elapsed-s", type=int, default=None)
    ap.add_argument("--best-socket", metavar="DIR")
    ap.add_argument("--top", type=int, default=1)
    ap.add_argument("--state", metavar="OUT")
    a = ap.parse_args()
    if a.state:
        r = Report(a.state)
        # "ran": the part's latest record is a run (a not_run after it: --continue runs it again,
        # the grid resuming where the budget stopped it)
        print("\n".join([f"ran {s}/{p}" for s, ps in r.parts.items() for p, x in ps.items()
                         if "rc" in x and "not_run" not in x] +
                        [f"complete {s}" for s in sorted(r.complete)] +
                        [f"invocation {max((i['invocation'] for i in r.invocations), default=0)}"]))
        return 0
    if a.best_socket:
        _, gm = best_socket(sweep_dir_configs(a.best_socket, "socket"))
        for k in sorted(gm, key=gm.get, reverse=True)[:a.top]:
            print(k)
        return 0
    if not a.out:
        ap.error("OUT is needed")
    r = Report(a.out)
    r.judge()
    return r.print(a.elapsed_s)


if __name__ == "__main__":
    sys.exit(main())
