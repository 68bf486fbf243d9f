#!/usr/bin/env python3
"""The verdicts of scripts/check-gpu.sh: a table, busbw per size, and ONE JSON line (last).

  check_gpu_report.py OUT [--elapsed-s S]    judge every step from what check-gpu.sh left in OUT
  check_gpu_report.py --best-socket DIR --top N
                                             the N best Socket configs under DIR (DIR/<TxS>/socket/
                                             summary.json, by geometric-mean busbw), one per line

OUT holds steps.jsonl (one line per part: step, part, rc, seconds, limit, dir, log; or skip with
the reason), preflight.json, and the run directories of scripts/run_ddp.sh (summary.json,
rank<R>.jsonl, rank<R>.log, rank<R>.exit) and scripts/congestion_bench.sh. Each step is pass,
fail or skip (with the reason); goals (speed targets) are reported apart from pass/fail.
Exit status: 2 preflight failed; 1 a step failed; 3 all passed but a goal was missed; else 0
(goals not measured do not count as missed). A part that ran out of a limit the time budget had
cut (clipped) is a skipped part ("cut short"), not a failure.
Standard library only.
"""
import argparse
import json
import math
import re
import sys
from pathlib import Path

from jsonio import load_json, read_jsonl

STEPS = [  # (name, what it checks): the table's order
    ("preflight", "GPU, torch + NCCL, the carried build"),
    ("allreduce_2r", "1: busbw plugin vs Socket default, 2 ranks"),
    ("allreduce_4r", "1: busbw plugin vs Socket default, 4 ranks"),
    ("socket_sweep_2r", "1: Socket NTHREADS x NSOCKS_PERTHREAD, 2 ranks"),
    ("socket_sweep_4r", "1: the best Socket configs, 4 ranks"),
    ("codec_threads_2r", "1: plugin at NCCL_TRIM_CODEC_THREADS values, 2 ranks"),
    ("harness_scaling", "1: trim-harness rht/none and sendrecv over codec threads, CPU per GB"),
    ("ddp_lossless", "2: DDP plugin vs Socket: same parameter sha256"),
    ("ddp_random_trim", "3: DDP, random trimming: replicas identical"),
    ("rank_killed", "4: a rank SIGKILLed: the survivor fails, no hang"),
    ("congestion_quick", "5: Socket vs trim through one netns bottleneck"),
    ("kernels", "6: the hook's GPU rotation: bit-identical to the host twin, ratio to a copy"),
    ("hook_overhead", "7: char-LM iteration p50 with the comm hook vs without"),
    ("hook_accuracy", "8: char-LM under random trim: Socket, per-hop rht, the hook"),
]
AR_GOAL = 1.0     # plugin busbw >= this x Socket at every size
DDP_GOAL = 1.05   # plugin iteration p50 <= this x Socket
KERNEL_GOAL, KERNEL_AIM = 0.5, 0.85  # fp32 rotation throughput / device-to-device copy
HOOK_GOAL = 1.05  # iteration p50 with the hook <= this x without
HOOK_AIM_POINTS = 0.3  # hook's final accuracy within this many points of Socket's
HOOK_ACC_GOAL = f"char-LM accuracy under trim: hook >= per-hop rht (aim: within {HOOK_AIM_POINTS} points of Socket)"
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
        bad = [mib(e["bytes"]) for e in s["bench"] if e.get("max_err") != 0]
        why = "sums not exact at " + ",".join(bad)
    return {"ok": why is None, "why": why, "busbw": busbw, "network": s.get("network"), "plugin": s.get("plugin")}


def sweep_dir_configs(root, mode):
    """{config: bench} for root/<config>/<mode>/summary.json."""
    out = {}
    for d in sorted(Path(root).glob(f"*/{mode}")):
        out[d.parent.name] = bench(d)
    return out


def best_socket(configs):
    """The config with the highest geometric-mean busbw over the sizes all ok configs share."""
    ok = {k: v for k, v in configs.items() if v["ok"]}
    if not ok:
        return None, {}
    common = set.intersection(*(set(v["busbw"]) for v in ok.values()))
    gm = {k: geomean([v["busbw"][b] for b in sorted(common)]) for k, v in ok.items()}
    gm = {k: g for k, g in gm.items() if g}
    return (max(gm, key=gm.get) if gm else None), gm


# ---------------------------------------------------------------- the report

class Report:
    def __init__(self, out):
        self.out = Path(out)
        self.parts = {}
        for r in read_jsonl(self.out / "steps.jsonl"):
            self.parts.setdefault(r["step"], []).append(r)
        self.pre = load_json(self.out / "preflight.json") or {}
        self.settings = self.pre.get("settings", {})
        self.steps = {}
        self.goals = []
        self.tables = []

    # -- helpers
    def base(self, name):
        """Time, limits and skip reasons of a step's parts; None when it has none."""
        parts = self.parts.get(name)
        if not parts:
            return None
        for p in parts:  # the budget cut its limit and it ran out: cut short, not failed
            if "skip" not in p and p.get("clipped") and p.get("rc") in (124, 137):
                p["skip"] = f"cut short by the time budget (limit {p.get('limit')} s)"
        ran = [p for p in parts if "skip" not in p]
        d = {"result": None, "seconds": sum(p.get("seconds", 0) for p in ran),
             "limit_s": sum(p.get("limit", 0) for p in ran)}
        skips = {p.get("part") or name: p["skip"] for p in parts if "skip" in p}
        if not ran:
            return {"result": "skip", "why": "; ".join(sorted(set(skips.values())))}
        if skips:
            d["skipped_parts"] = skips
        timed_out = [p.get("part") or name for p in ran if p.get("rc") in (124, 137)]
        if timed_out:
            d["timed_out"] = timed_out
        return d

    def goal(self, name, met, detail):
        self.goals.append({"goal": name, "state": "unknown" if met is None else ("met" if met else "missed"),
                           "detail": detail})

    def fail(self, d, why):
        d["result"] = "fail"
        d["why"] = why
        return d

    # -- steps
    def preflight(self):
        d = self.base("preflight")
        if d is None:
            return {"result": "fail", "why": "check-gpu.sh left no preflight record"}
        p = self.pre
        d.update({k: p.get(k) for k in ("gpu", "torch", "nccl", "cores", "commit", "plugin_sha256") if p.get(k)})
        if p.get("ok"):
            d["result"] = "pass"
        else:
            self.fail(d, "; ".join(p.get("why") or ["see preflight.log"]))
        return d

    def allreduce(self, ranks):
        name = f"allreduce_{ranks}r"
        d = self.base(name)
        if d is None or d["result"] == "skip":
            self.goal(f"allreduce {ranks} ranks: plugin >= {AR_GOAL}x Socket default at every size", None, "not run")
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
        vs_best = None
        if best and best != "default":
            bb = cands[best]["busbw"]
            d["socket_best"] = best
            d["busbw_GBps"]["socket_best"] = [r3(bb.get(b)) for b in sizes]
            vs_best = [plug["busbw"][b] / bb[b] if bb.get(b) else None for b in sizes]
            d["plugin_over_socket_best"] = [r3(x) for x in vs_best]
        elif best == "default":
            d["socket_best"] = "default"
            vs_best = vs_def
            d["plugin_over_socket_best"] = d["plugin_over_socket_default"]
        d["socket_geomean_GBps"] = {k: r3(v) for k, v in sorted(gms.items(), key=lambda kv: -kv[1])}
        d["plugin_geomean_GBps"] = r3(geomean([plug["busbw"][b] for b in sizes]))
        self.tables.append((ranks, sizes, plug, sock, best, cands.get(best) if best else None, codec))
        if not plug["ok"]:
            self.fail(d, f"plugin: {plug['why']}")
        elif not sock["ok"]:
            self.fail(d, f"Socket: {sock['why']}")
        elif set(plug["busbw"]) != set(sock["busbw"]):
            self.fail(d, "plugin and Socket measured different sizes")
        else:
            d["result"] = "pass"
            d["exact"] = True
        ok_sizes = bool(vs_def) and d["result"] == "pass"
        worst = min(zip(vs_def, sizes)) if vs_def else None
        self.goal(f"allreduce {ranks} ranks: plugin >= {AR_GOAL}x Socket default at every size",
                  (min(vs_def) >= AR_GOAL) if ok_sizes else None,
                  f"worst {worst[0]:.2f}x at {mib(worst[1])}" if worst else "no numbers")
        n_sweep = sum(1 for v in sweep.values() if v["ok"])
        if vs_best is not None and n_sweep and ok_sizes:
            vb = [x for x in vs_best if x is not None]
            wb = min(zip(vs_best, sizes), key=lambda t: t[0] if t[0] is not None else 9e9)
            self.goal(f"allreduce {ranks} ranks: plugin >= {AR_GOAL}x Socket best ({best}) at every size",
                      min(vb) >= AR_GOAL if vb else None,
                      f"worst {wb[0]:.2f}x at {mib(wb[1])}; best of default + {n_sweep} tuned" if vb else "")
        else:
            self.goal(f"allreduce {ranks} ranks: plugin >= {AR_GOAL}x Socket best at every size", None,
                      "no tuned Socket config finished" if ok_sizes else "no numbers")
        return d

    def sweep(self, name, root, mode):
        d = self.base(name)
        if d is None or d["result"] == "skip":
            return d
        cfgs = sweep_dir_configs(self.out / root, mode)
        ran = [p.get("part") for p in self.parts[name] if "skip" not in p]
        cfgs = {c: v for c, v in cfgs.items() if c in ran}  # not the leftovers of a part cut short
        bad = {c: (cfgs[c]["why"] if c in cfgs else "no results") for c in ran if c not in cfgs or not cfgs[c]["ok"]}
        gm = {c: r3(geomean(list(v["busbw"].values()))) for c, v in cfgs.items() if v["ok"]}
        d["geomean_busbw_GBps"] = gm
        if gm:
            d["best"] = max(gm, key=gm.get)
        if name == "codec_threads_2r":  # per size too (the sizes of allreduce_2r)
            sizes = sorted(set().union(*(v["busbw"] for v in cfgs.values())))
            d["sizes"] = [mib(b) for b in sizes]
            d["busbw_GBps"] = {c: [r3(v["busbw"].get(b)) for b in sizes] for c, v in cfgs.items() if v["ok"]}
        if bad:
            return self.fail(d, "; ".join(f"{c}: {w}" for c, w in bad.items()))
        d["result"] = "pass"
        return d

    def ddp_lossless(self):
        d = self.base("ddp_lossless")
        if d is None or d["result"] == "skip":
            self.goal(f"DDP iteration p50: plugin <= {DDP_GOAL}x Socket", None, "not run")
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
            self.fail(d, f"plugin run: {ps.get('status', 'no summary.json')}")
        elif ss.get("status") != "ok":
            self.fail(d, f"Socket run: {ss.get('status', 'no summary.json')}")
        elif not ph or not sh:
            self.fail(d, "no final parameter hashes")
        elif len(set(ph)) != 1 or len(set(sh)) != 1:
            self.fail(d, "replicas differ within a run")
        elif ph[0] != sh[0]:
            self.fail(d, "plugin's final parameters differ from Socket's")
        else:
            d["result"] = "pass"
            d["hash_equal"] = True
        self.goal(f"DDP iteration p50: plugin <= {DDP_GOAL}x Socket",
                  ratio <= DDP_GOAL if ratio is not None and d["result"] == "pass" else None,
                  f"{ratio:.3f}x ({ps['iter_p50_ms']:.2f} vs {ss['iter_p50_ms']:.2f} ms)" if ratio else "no numbers")
        return d

    def ddp_random(self):
        d = self.base("ddp_random_trim")
        if d is None or d["result"] == "skip":
            return d
        s = load_json(self.out / "ddp_random" / "summary.json") or {}
        sw, pl = s.get("switch") or {}, s.get("plugin") or {}
        d.update({"ranks": s.get("ranks"), "trim_p": s.get("trim_p"),
                  "replicas_identical": s.get("params_identical"),
                  "switch_trimmed": sw.get("forwarded_trimmed"), "switch_trim_rate": r3(sw.get("trim_rate")),
                  "trimmed_accepted": pl.get("trimmed_accepted"), "trimmed_nacked": pl.get("trimmed_nacked"),
                  "val_acc": r3(s.get("val_acc")), "loss_decreased": s.get("loss_decreased"),
                  "iter_p50_ms": r3(s.get("iter_p50_ms"))})
        trimmed = (sw.get("forwarded_trimmed") or 0) + (pl.get("trimmed_accepted") or 0)
        if s.get("status") != "ok":
            return self.fail(d, f"run: {s.get('status', 'no summary.json')}")
        if not s.get("params_identical"):
            return self.fail(d, "replicas differ: " + str(s.get("param_sha256")))
        if trimmed == 0:
            return self.fail(d, "nothing was trimmed (switch and plugin counters 0): the check proves nothing")
        d["result"] = "pass"
        return d

    def rank_killed(self):
        d = self.base("rank_killed")
        if d is None or d["result"] == "skip":
            return d
        run = self.out / "ddp_kill"
        bound = self.settings.get("kill_bound_s", 60)
        die = next((e for e in read_jsonl(run / "rank1.jsonl") if e.get("event") == "die"), None)
        e0, e1 = load_json(run / "rank0.exit"), load_json(run / "rank1.exit")
        try:
            log = (run / "rank0.log").read_text(errors="replace")
        except OSError:
            log = ""
        cause, line = None, None
        for kind, rx in KILL_PATTERNS:
            m = rx.search(log)
            if m:
                cause, line = kind, m.group(0).strip()[:240]
                break
        d.update({"bound_s": bound, "died_at_step": die.get("step") if die else None,
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
        if dt > bound:
            return self.fail(d, f"rank 0 failed {dt:.1f} s after the kill (bound {bound} s)")
        if cause in (None, "timeout"):
            return self.fail(d, "rank 0 failed without the plugin's or NCCL's error" +
                             (" (only PyTorch's collective timeout)" if cause else ""))
        d["result"] = "pass"
        return d

    def harness_scaling(self):
        d = self.base("harness_scaling")
        if d is None or d["result"] == "skip":
            return d
        rows = [r for r in read_jsonl(self.out / "harness_scaling.jsonl") if r.get("bench") == "codec_summary"]
        if not rows:
            return self.fail(d, "no codec_summary line (see harness_scaling.log)")
        d["threads"] = {str(r["threads"]): {"rht_over_none": r.get("rht_over_none"),
                                           "allreduce_rht_busbw_gbps": r.get("allreduce_rht_busbw_gbps"),
                                           "sendrecv_gbps": r.get("sendrecv_gbps"),
                                           "sendrecv_rht_gbps": r.get("sendrecv_rht_gbps"),
                                           "cpu_s_per_gb": r.get("cpu_s_per_gb")} for r in rows}
        best = max(rows, key=lambda r: r.get("rht_over_none") or 0)
        self.goal("trim-harness allreduce rht / none >= 0.95 (best codec threads)", (best.get("rht_over_none") or 0) >= 0.95,
                  f"{best.get('rht_over_none')} at {best['threads']} threads")
        parts = [p for p in self.parts.get("harness_scaling", []) if "skip" not in p]
        if any(p.get("rc") not in (0, None) for p in parts):
            return self.fail(d, "bench_codec.py failed (see harness_scaling.log)")
        d["result"] = "pass"
        return d

    def congestion(self):
        d = self.base("congestion_quick")
        if d is None or d["result"] == "skip":
            return d
        runs = {}
        for sj in sorted((self.out / "congestion").glob("*/summary.json")):
            s = load_json(sj) or {}
            runs[sj.parent.name] = {"status": s.get("status"), "iter_p50_ms": r3(s.get("iter_p50_ms")),
                                    "iter_p99_ms": r3(s.get("iter_p99_ms")), "val_acc": r3(s.get("val_acc")),
                                    "time_to_target_s": r3(s.get("time_to_target_s")), "steps": s.get("steps")}
        d["runs"] = runs
        bad = [k for k, v in runs.items() if v["status"] != "ok"]
        if len(runs) < 2:
            return self.fail(d, f"{len(runs)} of 2 runs left a summary (see congestion.log)")
        if bad:
            return self.fail(d, "failed: " + ", ".join(f"{k} ({runs[k]['status']})" for k in bad))
        d["result"] = "pass"
        return d

    def kernels(self):
        d = self.base("kernels")
        if d is None or d["result"] == "skip":
            self.goal(f"GPU rotation fp32 >= {KERNEL_GOAL}x a device copy (aim {KERNEL_AIM})", None, "not run")
            return d
        rows = [r for r in read_jsonl(self.out / "kernels_bench.log") if r.get("bench") == "cuda"]
        d["ratios"] = {f"{r.get('dtype')} {r.get('op')}": r3(r.get("ratio")) for r in rows if "ratio" in r}
        d["copy_gbps"] = r3(next((r.get("copy_gbps") for r in rows if r.get("copy_gbps")), None))
        fp32 = [r["ratio"] for r in rows if r.get("dtype") in ("fp32", "f32") and r.get("ratio")]
        self.goal(f"GPU rotation fp32 >= {KERNEL_GOAL}x a device copy (aim {KERNEL_AIM})",
                  min(fp32) >= KERNEL_GOAL if fp32 else None,
                  f"forward/inverse {', '.join(f'{x:.2f}' for x in fp32)}" if fp32 else "no numbers")
        tests = next((p for p in self.parts.get("kernels", []) if p.get("part") == "tests" and "skip" not in p), None)
        if tests is not None and tests.get("rc") != 0:
            return self.fail(d, "the GPU kernels' tests failed (see kernels_tests.log)")
        if any(r.get("skipped") for r in rows):
            return self.fail(d, "trim-bench cuda skipped: " + str(next(r.get("reason") for r in rows if r.get("skipped"))))
        if not rows:
            return self.fail(d, "no trim-bench cuda line (see kernels_bench.log)")
        d["result"] = "pass"
        return d

    def hook_seen(self, run_dir):
        log = Path(run_dir) / "rank0.log"
        try:
            return HOOK_SEEN in log.read_text(errors="replace")
        except OSError:
            return False

    def hook_overhead(self):
        d = self.base("hook_overhead")
        if d is None or d["result"] == "skip":
            self.goal(f"char-LM iteration p50 with the hook <= {HOOK_GOAL}x without", None, "not run")
            return d
        plain = load_json(self.out / "hook_plain" / "summary.json") or {}
        hook = load_json(self.out / "hook_hook" / "summary.json") or {}
        d["iter_p50_ms"] = {"plain": r3(plain.get("iter_p50_ms")), "hook": r3(hook.get("iter_p50_ms"))}
        d["iter_p99_ms"] = {"plain": r3(plain.get("iter_p99_ms")), "hook": r3(hook.get("iter_p99_ms"))}
        ratio = None
        if plain.get("iter_p50_ms") and hook.get("iter_p50_ms"):
            ratio = hook["iter_p50_ms"] / plain["iter_p50_ms"]
            d["p50_hook_over_plain"] = r3(ratio)
        self.goal(f"char-LM iteration p50 with the hook <= {HOOK_GOAL}x without",
                  ratio <= HOOK_GOAL if ratio is not None else None, f"{ratio:.3f}x" if ratio else "no numbers")
        for name, s in (("without the hook", plain), ("with the hook", hook)):
            if s.get("status") != "ok":
                return self.fail(d, f"run {name}: {s.get('status', 'no summary.json')}")
        if not self.hook_seen(self.out / "hook_hook"):
            return self.fail(d, "the plugin never saw the hook's communicator (no '" + HOOK_SEEN + "' in rank0.log)")
        d["result"] = "pass"
        return d

    def hook_accuracy(self):
        d = self.base("hook_accuracy")
        goal = HOOK_ACC_GOAL
        if d is None or d["result"] == "skip":
            self.goal(goal, None, "not run")
            return d
        acc = {"socket": [], "rht": [], "hook": []}
        bad = []
        for sj in sorted((self.out / "hookacc").glob("*/summary.json")):
            s = load_json(sj) or {}
            t = sj.parent.name.rsplit("_s", 1)[0]
            if s.get("status") != "ok" or s.get("val_acc") is None:
                bad.append(f"{sj.parent.name} ({s.get('status')})")
                continue
            if not s.get("params_identical", True):
                bad.append(f"{sj.parent.name} (replicas differ)")
            if t == "hook" and not self.hook_seen(sj.parent):
                bad.append(f"{sj.parent.name} (the plugin never saw the hook's communicator)")
            acc.setdefault(t, []).append(s["val_acc"])
        mean = {t: (sum(v) / len(v) if v else None) for t, v in acc.items()}
        d["val_acc"] = {t: [r3(x) for x in v] for t, v in acc.items()}
        d["val_acc_mean"] = {t: r3(m) for t, m in mean.items()}
        if mean["hook"] is not None and mean["rht"] is not None and mean["socket"] is not None:
            gap = 100 * (mean["socket"] - mean["hook"])
            d["hook_points_below_socket"] = r3(gap)
            d["rht_points_below_socket"] = r3(100 * (mean["socket"] - mean["rht"]))
            self.goal(goal, mean["hook"] >= mean["rht"] - 1e-9,
                      f"hook {100 * mean['hook']:.2f}%, per-hop rht {100 * mean['rht']:.2f}%, Socket "
                      f"{100 * mean['socket']:.2f}% (hook {gap:.2f} points below Socket; aim <= {HOOK_AIM_POINTS})")
        else:
            self.goal(goal, None, "not every transport finished")
        if bad:
            return self.fail(d, "; ".join(bad))
        d["result"] = "pass"
        return d

    # -- all
    def judge(self):
        pre = self.preflight()
        self.steps["preflight"] = pre
        if pre["result"] != "pass":
            for r in (2, 4):
                for what in ("default", "best"):
                    self.goal(f"allreduce {r} ranks: plugin >= {AR_GOAL}x Socket {what} at every size", None, "not run")
            self.goal(f"DDP iteration p50: plugin <= {DDP_GOAL}x Socket", None, "not run")
            self.goal(f"GPU rotation fp32 >= {KERNEL_GOAL}x a device copy (aim {KERNEL_AIM})", None, "not run")
            self.goal(f"char-LM iteration p50 with the hook <= {HOOK_GOAL}x without", None, "not run")
            self.goal(HOOK_ACC_GOAL, None, "not run")
        for name, _ in STEPS[1:]:
            if pre["result"] != "pass":
                self.steps[name] = {"result": "skip", "why": "preflight failed"}
                continue
            fn = {"allreduce_2r": lambda: self.allreduce(2), "allreduce_4r": lambda: self.allreduce(4),
                  "socket_sweep_2r": lambda: self.sweep("socket_sweep_2r", "sweep2", "socket"),
                  "socket_sweep_4r": lambda: self.sweep("socket_sweep_4r", "sweep4", "socket"),
                  "codec_threads_2r": lambda: self.sweep("codec_threads_2r", "codec2", "lossless"),
                  "harness_scaling": self.harness_scaling,
                  "ddp_lossless": self.ddp_lossless, "ddp_random_trim": self.ddp_random,
                  "rank_killed": self.rank_killed, "congestion_quick": self.congestion,
                  "kernels": self.kernels, "hook_overhead": self.hook_overhead,
                  "hook_accuracy": self.hook_accuracy}[name]
            self.steps[name] = fn() or {"result": "skip", "why": "not run (no record in steps.jsonl)"}

    def exit_code(self):
        if self.steps["preflight"]["result"] != "pass":
            return 2
        if any(s["result"] == "fail" for s in self.steps.values()):
            return 1
        if any(g["state"] == "missed" for g in self.goals):
            return 3
        return 0

    def print(self, elapsed):
        rc = self.exit_code()
        print(f"{'step':18} {'result':6} {'time':>6} {'limit':>6}  details")
        for name, what in STEPS:
            s = self.steps[name]
            t = f"{s['seconds']}s" if s.get("limit_s") else "-"
            lim = f"{s['limit_s']}s" if s.get("limit_s") else "-"
            print(f"{name:18} {s['result']:6} {t:>6} {lim:>6}  {self.detail(name, s) or what}")
        for ranks, sizes, plug, sock, best, bestrun, codec in self.tables:
            if not sizes:
                continue
            ch = self.settings.get("channels", "?")
            print(f"\nallreduce busbw GB/s, {ranks} ranks (Ring/Simple, channels {ch}); "
                  f"Socket best = {best or '-'} (NTHREADSxNSOCKS_PERTHREAD)")
            cols = [("plugin", plug["busbw"]), ("sock-def", sock["busbw"])]
            if bestrun and best != "default":
                cols.append((f"sock-{best}", bestrun["busbw"]))
            cods = [(f"ct={c}", v["busbw"]) for c, v in sorted(codec.items()) if v["busbw"]]
            print(f"{'size':>6} " + " ".join(f"{n:>10}" for n, _ in cols + cods) + f" {'÷def':>6} {'÷best':>6}")
            bb = bestrun["busbw"] if bestrun else sock["busbw"]
            for b in sizes:
                vals = " ".join(f"{v[b]:10.3f}" if b in v else f"{'-':>10}" for _, v in cols + cods)
                rd = plug["busbw"][b] / sock["busbw"][b] if sock["busbw"].get(b) else None
                rb = plug["busbw"][b] / bb[b] if bb.get(b) else None
                print(f"{mib(b):>6} {vals} {rd or 0:6.2f} {rb or 0:6.2f}")
        print("\ngoals:")
        for g in self.goals:
            print(f"  {g['state']:7} {g['goal']}: {g['detail']}")
        skipped = [n for n, _ in STEPS if self.steps[n]["result"] == "skip"]
        verdict = {0: "pass", 1: "fail", 2: "fail (preflight)", 3: "pass (goal missed)"}[rc]
        if rc in (0, 3) and skipped:
            verdict += f"; {len(skipped)} step(s) skipped: {', '.join(skipped)}"
        print(f"\ncheck-gpu: {verdict}")
        res = {"check": "check-gpu", "result": "fail" if rc in (1, 2) else "pass", "exit": rc,
               "skipped": skipped,
               "goals_met": all(g["state"] == "met" for g in self.goals) if self.goals else False,
               "elapsed_s": elapsed, "budget_s": self.settings.get("budget_s"),
               "versions": {k: self.pre.get(k) for k in ("gpu", "torch", "torch_cuda", "nccl", "commit",
                                                         "plugin_sha256", "cores")},
               "steps": self.steps, "goals": self.goals}
        print(json.dumps(res, separators=(",", ":")))
        return rc

    def detail(self, name, s):
        text = self.detail_text(name, s)
        sk = s.get("skipped_parts")
        if sk and s["result"] != "skip":
            text += f" [{len(sk)} part(s) skipped: {'; '.join(sorted(set(sk.values())))}]"
        if s.get("timed_out"):
            text += f" [timed out: {', '.join(s['timed_out'])}]"
        return text

    def detail_text(self, name, s):
        if s["result"] in ("skip", "fail") and s.get("why"):
            return s["why"]
        if name == "preflight":
            return f"{s.get('gpu')}, torch {s.get('torch')}, NCCL {s.get('nccl')}, {s.get('cores')} cores"
        if name.startswith("allreduce"):
            r = s.get("plugin_over_socket_default") or []
            b = s.get("plugin_over_socket_best") or []
            return (f"plugin/Socket-default {min(r):.2f}..{max(r):.2f}" if r else "") + \
                   (f", /best({s.get('socket_best')}) {min(x for x in b if x):.2f}..{max(x for x in b if x):.2f}"
                    if any(b) else "")
        if name in ("socket_sweep_2r", "socket_sweep_4r", "codec_threads_2r"):
            return "geomean GB/s " + " ".join(f"{k}:{v}" for k, v in s.get("geomean_busbw_GBps", {}).items())
        if name == "ddp_lossless":
            return (f"sha256 equal {s['param_sha256']['plugin'][:12]}, p50 {s['iter_p50_ms']['plugin']} vs "
                    f"{s['iter_p50_ms']['socket']} ms ({s.get('p50_plugin_over_socket')}x)")
        if name == "ddp_random_trim":
            return (f"{s.get('ranks')} ranks identical, switch trim rate {s.get('switch_trim_rate')}, "
                    f"val acc {s.get('val_acc')}")
        if name == "rank_killed":
            return f"rank 0 failed {s.get('seconds_to_error')} s after the kill ({s.get('cause')}): {s.get('message')}"
        if name == "harness_scaling":
            return " ".join(f"{t}thr: rht/none {v['rht_over_none']}" for t, v in s.get("threads", {}).items())
        if name == "congestion_quick":
            return " ".join(f"{k}: p50 {v['iter_p50_ms']} ms" for k, v in s.get("runs", {}).items())
        if name == "kernels":
            return "ratio to copy " + " ".join(f"{k}:{v}" for k, v in s.get("ratios", {}).items())
        if name == "hook_overhead":
            p = s.get("iter_p50_ms", {})
            return f"p50 {p.get('hook')} vs {p.get('plain')} ms ({s.get('p50_hook_over_plain')}x)"
        if name == "hook_accuracy":
            return "mean val acc " + " ".join(f"{k}:{v}" for k, v in s.get("val_acc_mean", {}).items())
        return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?")
    ap.add_argument("--elapsed-s", type=int, default=None)
    ap.add_argument("--best-socket", metavar="DIR")
    ap.add_argument("--top", type=int, default=1)
    a = ap.parse_args()
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
