"""The congestion head-to-head (issues 20, 25): DDP training (bench/workloads/ddp_train.py) through
ONE emulated bottleneck that TCP and the plugin's UDP cross alike (scripts/netns_bottleneck.sh: a
namespace per rank, trim-switch routing between them). Every run of a point (TASK:cN, N % cross
load in line-rate bursts sharing training's queue; TASK:pN, the same bursts as another tenant's
strict-priority class, so training gets what it leaves and is trimmed hard; or TASK:lN, N % random
loss) gets the same port, cross traffic, loss and
seed; only the transport changes (TRANSPORTS). The plan's order is the priority: --budget-s skips
a point's transports together. Estimate per run: startup + steps x (compute + comm) x 1.05, comm =
grad_bytes x 8 / (rate x 0.7) / (1 - cross) x (1 + 0.5 x loss%). --calibrate (GPU presets): when
communication is under half of the first run's iteration, the rate becomes rate x comm / (1.5 x
compute) and that run is redone. Output: DIR/<task>_<transport>_c<C>_l<L>/ (run.json,
rank<R>.{jsonl,out,log}, switch.jsonl, bottleneck.out, summary.json), DIR/bench.json,
skipped.jsonl, calibration.json, then congestion-report's tables. Exit 1 when a run failed (a baseline
stopped by its limit after it trained is a result: the report bounds its time)."""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from . import REPO, SCRIPTS, build_dir, ddp
from . import congestion_report as report
from .jsonio import load_json, write_json
from .workloads import ddp_train

PRESETS = {  # name -> plan; --cpu has its own port rate (0.5 Gbit/s) and no calibration
    "default": "widemlp:c0,widemlp:c60,widemlp:c90,widemlp:l1,digits:c60,widemlp:c30,widemlp:l0.1",
    "quick": "widemlp:c0,widemlp:c60,widemlp:l1,digits:c60",
    "cpu": "widemlp:c0,widemlp:c60,widemlp:c30,widemlp:c90,widemlp:l1,widemlp:l0.1,digits:c60",
}
# transport -> its switch mode, the device it needs, its mode (bench ddp's, for its rank environment
# and run.json): `plugin` is the head bits of the plugin's rht; `hook` adds the launcher's bootstrap
# (the RHT comm hook).
# -tuned: TCP as a datacenter operator runs it, a 1 ms minimum RTO (Linux's default is 200 ms).
TRANSPORTS = {
    "socket": {"switch": "drop", "device": "cuda"},
    "socket-tuned": {"switch": "drop", "device": "cuda", "mode": "socket", "tcp_rto_min_us": 1000},
    "gloo": {"switch": "drop", "device": "cpu"},
    "gloo-tuned": {"switch": "drop", "device": "cpu", "mode": "gloo", "tcp_rto_min_us": 1000},
    "drop": {"switch": "drop", "plugin": 1},
    "trim": {"switch": "trim", "plugin": 1},
    "trim16": {"switch": "trim", "plugin": 16, "mode": "trim"},
    "hook": {"switch": "trim", "plugin": 1, "mode": "trim", "hook": True},
    "hook2": {"switch": "trim", "plugin": 2, "mode": "trim", "hook": True},
}
TARGET = {"digits": 0.95, "widemlp": 0.95, "charlm": 0.45}
COMPUTE_MS = {"digits": 8, "widemlp": 5, "charlm": 15}  # assumed until measured
TASK_ARGS = {"digits": ["--eval-every", "10"], "widemlp": ["--measure-compute", "10"], "charlm": []}
TRAIN = REPO / "bench" / "workloads" / "ddp_train.py"
ITEM = re.compile(r"^(digits|widemlp|charlm):([clp])(\d+(?:\.\d+)?)$")


def parse(argv):
    argv, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(prog="python -m bench congestion", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="presets: " + "; ".join(f"{k}: {v}" for k, v in PRESETS.items()))
    p.add_argument("--quick", action="store_true", help="the short GPU preset")
    p.add_argument("--cpu", action="store_true", help="CPU tensors: gloo the baseline, the plugin through the trim backend")
    p.add_argument("--plan", help="TASK:POINT,... in run order, e.g. widemlp:c60,digits:l1 (pN: high-priority cross)")
    p.add_argument("--tasks", help="instead of a plan, with --cross/--loss [widemlp,digits]")
    p.add_argument("--cross", help="cross loads, %% [0,60,90,30]")
    p.add_argument("--loss", help="random losses, %% [1,0.1]")
    p.add_argument("--transports", help="in this order within every point [socket,drop,trim,trim16; --cpu gloo,drop,trim,hook]")
    p.add_argument("--rate-gbps", type=float, help="[2.5; --cpu 0.5]")
    p.add_argument("--prop-delay-us", type=float, default=20)
    for opt, default in (("--ranks", 2), ("--buffer-bytes", 131072), ("--cross-period-ms", 10), ("--seed", 7), ("--train-seed", 0),
                         ("--epochs", None), ("--max-steps", None), ("--budget-s", 0), ("--timeout-s", 1800)):
        p.add_argument(opt, type=int, default=default, metavar="N", help=f"[{default}]" if default is not None else None)
    p.add_argument("--calibrate", action=argparse.BooleanOptionalAction, help="[on in the GPU presets]")
    p.add_argument("--startup-s", type=float, default=10, help="the estimate's start-up cost per run")
    p.add_argument("--out", help="[BUILD/congestion]")
    p.add_argument("--build", default="build")
    p.add_argument("--resume", action="store_true", help="keep runs whose summary.json says ok (or a baseline's stall)")
    p.add_argument("--dry-run", action="store_true", help="print the runs' commands and estimates; run nothing")
    a = p.parse_args(argv)
    a.extra, a.build = extra, build_dir(a.build)
    a.out = Path(a.out).resolve() if a.out else a.build / "congestion"
    custom = a.plan or a.tasks or a.cross or a.loss
    if a.quick and (custom or a.cpu):
        p.error("--quick is a GPU preset: not with --cpu, --plan, --tasks, --cross or --loss")
    a.preset = None if custom else "cpu" if a.cpu else "quick" if a.quick else "default"
    if not a.plan and custom:  # every task at every cross load (no loss), then every loss (no cross load)
        a.plan = ",".join(it for t in (a.tasks or "widemlp,digits").split(",") for it in
                          [f"{t}:c{c}" for c in (a.cross or "0,60,90,30").split(",")] +
                          [f"{t}:l{x}" for x in (a.loss or "1,0.1").split(",") if x != "0"])
    a.plan = (a.plan or PRESETS[a.preset]).split(",")
    a.calibrate = a.preset in ("default", "quick") if a.calibrate is None else a.calibrate
    a.rate_gbps = a.rate_gbps or (0.5 if a.cpu else 2.5)
    a.base, device = ("gloo", "cpu") if a.cpu else ("socket", "cuda")
    a.transports = (a.transports or ("gloo,drop,trim,hook" if a.cpu else "socket,drop,trim,trim16")).split(",")
    for t in a.transports:
        if t not in TRANSPORTS:
            p.error(f"--transports: unknown transport '{t}' (one of {', '.join(TRANSPORTS)})")
        if TRANSPORTS[t].get("device", device) != device:
            p.error(f"--transports: '{t}' needs {'--cpu' if t.startswith('gloo') else 'CUDA tensors (the CPU baseline is gloo)'}")
    points = [ITEM.match(it) for it in a.plan]
    for it, m in zip(a.plan, points):
        if not m:
            p.error(f"--plan: item '{it}': expected TASK:cN or TASK:lN (tasks {', '.join(TARGET)})")
    if a.calibrate and not (a.plan[0].endswith(":c0") and a.transports[0] == a.base):
        p.error(f"--calibrate: the plan must start with a cross-0 point and the transports with {a.base} (it is that run)")
    if not a.dry_run and not (a.build / ddp.PLUGIN).exists():
        p.error(f"no {a.build / ddp.PLUGIN}: run 'make -j2 all' first (or pass --build)")
    a.compute_ms = dict(COMPUTE_MS)
    if {m[2] for m in points} >= {"c", "p"}:
        p.error("--plan: cN and pN points in one plan (the report compares by cross load): give pN its own --out")
    a.runs = []
    for m in points:
        cross, loss = float(m[3]) * (m[2] in "cp"), float(m[3]) * (m[2] == "l")
        a.runs += [{"task": m[1], "transport": tr, "cross": cross, "loss": loss, "prio": m[2] == "p",
                    "label": f"{m[1]}_{tr}_{'p' if m[2] == 'p' else 'c'}{cross:g}_l{loss:g}"} for tr in a.transports]
    a.sizes = {t: ddp_train.describe(ddp_train.parse_args(task_args(a, t)), a.ranks)
               for t in dict.fromkeys(m[1] for m in points)}  # the plan's order: the dry run prints them
    return a


def task_args(a, task):
    """ddp_train.py's arguments for TASK (before the caller's extra ones)."""
    args = ["--task", task, "--seed", str(a.train_seed), "--deterministic", "--target-acc", str(TARGET[task])]
    args += ["--epochs", str(a.epochs)] if a.epochs else []
    args += ["--max-steps", str(a.max_steps)] if a.max_steps else []
    args += ["--max-steps", "160"] if task == "digits" and not (a.epochs or a.max_steps) else []
    # widemlp's defaults (128 a rank, 12 epochs) are tuned at 2 ranks: at N ranks the same global
    # batch of 256 keeps the optimizer's trajectory, so every rank count runs the same ~60 steps
    # (at 4 ranks 128 a rank stopped at 24 steps, short of the target).
    if task == "widemlp" and a.ranks != 2 and "--batch-size" not in a.extra:
        args += ["--batch-size", str(max(1, 256 // a.ranks))]
    csv = os.environ.get("DDP_DIGITS_CSV") if task != "charlm" else None
    return args + TASK_ARGS[task] + (["--digits-csv", csv] if csv else []) + a.extra


def estimate_s(a, r):
    size = a.sizes[r["task"]]
    ring_bytes = size["grad_bytes"] * 2 * (a.ranks - 1) / a.ranks  # what each rank's port carries
    comm_ms = ring_bytes * 8 / (a.rate_gbps * 1e9 * 0.7) * 1000 / (1 - r["cross"] / 100) * (1 + 0.5 * r["loss"])
    return int(a.startup_s + size["steps"] * (a.compute_ms[r["task"]] + comm_ms) / 1000 * 1.05 + 0.999)


def limit_s(a, est, left):
    return min(max(3 * est, 60), a.timeout_s, left if a.budget_s else a.timeout_s)


def commands(a, r, run_dir, limit):
    """(netns_bottleneck.sh with its options, the rank command) of run R ({rank} and {addr0} filled
    in by netns_bottleneck.sh)."""
    t = TRANSPORTS[r["transport"]]
    env, launch, backend = ddp.rank_env(t.get("mode", r["transport"]), "{rank}", a.ranks, ("{addr0}", 29500), a.build,
                                        a.cpu, t.get("hook", False), head_bits=t.get("plugin"), ifname="trimbn")
    # Training stops by itself 15 s before the run's limit, so a slow run still ends with numbers.
    rank = (["env", *(f"{k}={v}" for k, v in env), "timeout", str(limit),
             os.environ.get("TRAIN_PYTHON", sys.executable), *launch, str(TRAIN), *task_args(a, r["task"]),
             *backend, "--time-limit-s", str(max(limit - 15, 5)), "--json-out", f"{run_dir}/rank{{rank}}.jsonl"])
    bn = [str(SCRIPTS / "netns_bottleneck.sh"), "--build", str(a.build), "--ranks", str(a.ranks),
          "--rate-gbps", f"{a.rate_gbps:g}", "--buffer-bytes", str(a.buffer_bytes), "--prop-delay-us", f"{a.prop_delay_us:g}",
          "--cross", f"{r['cross']:g}", "--cross-period-ms", str(a.cross_period_ms), "--loss", f"{r['loss']:g}",
          "--mode", t["switch"], "--seed", str(a.seed), "--per-rank", *(["--cross-prio", "high"] if r["prio"] else []),
          *(["--tcp-rto-min-us", str(t["tcp_rto_min_us"])] if "tcp_rto_min_us" in t else []),
          "--switch-arg", "--stats-interval-ms", "--switch-arg", "1000"]
    return bn, rank


def plan_total(a):
    return sum(estimate_s(a, r) for r in a.runs)


def dry_run(a):
    print(f"# congestion --dry-run: {a.preset or 'custom'} plan, {len(a.runs)} runs, rate {a.rate_gbps:g} Gbit/s, buffer "
          f"{a.buffer_bytes} B, propagation {a.prop_delay_us:g} us, seed {a.seed}, {a.ranks} ranks (nothing is run)")
    for t, d in a.sizes.items():
        print(f"# task {t}: grad_bytes {d['grad_bytes']} ({d['grad_bytes'] / 1e6:.1f} MB), {d['steps']} steps, "
              f"target {TARGET[t]}, compute {a.compute_ms[t]} ms a step (assumed)")
    if a.calibrate:
        r = a.runs[0]
        print(f"# calibration: the first run ({r['task']} {r['transport']} c0) measures compute; rate stays "
              f"{a.rate_gbps:g} Gbit/s while communication >= 50 % of its iteration, else it is lowered and that run redone")
    for r in a.runs:
        est = estimate_s(a, r)
        lim = limit_s(a, est, a.budget_s)
        bn, rank = commands(a, r, a.out / r["label"], lim)
        print(f"# run {r['label']} -> {a.out / r['label']} (estimate {est} s, limit {lim} s)", flush=True)
        lines = subprocess.run([*bn, "--print-only", "--", *rank], capture_output=True, text=True).stderr
        print("".join(f"#   {x}\n" for x in lines.splitlines()), end="")
    total = plan_total(a)
    fits = "" if not a.budget_s else (f", fits --budget-s {a.budget_s}" if total <= a.budget_s else
                                      f", over --budget-s {a.budget_s}: the last points would be skipped")
    print(f"# plan: {len(a.runs)} runs in {len(a.plan)} point(s), estimated {total} s ({total / 60:.1f} min){fits}; "
          f"startup {a.startup_s:g} s a run, trim assumed no faster than socket")
    return 0


def point(r):
    return {"task": r["task"], "transport": r["transport"], "cross_pct": r["cross"], "loss_pct": r["loss"]}


def write_bench_json(a):
    write_json(a.out / "bench.json", {
        "preset": a.preset, "plan": a.plan, "transports": a.transports, "device": "cpu" if a.cpu else "cuda",
        "cross_period_ms": float(a.cross_period_ms), "ranks": a.ranks, "rate_gbps": a.rate_gbps,
        "buffer_bytes": a.buffer_bytes, "prop_delay_us": float(a.prop_delay_us), "seed": a.seed, "budget_s": a.budget_s,
        "startup_s": float(a.startup_s), "calibrate": a.calibrate, "estimate_s": plan_total(a),
        "runs": [point(r) for r in a.runs]})


def kept(run_dir):
    """--resume keeps a run that finished, and a stalled baseline: run again, it would stall again."""
    s = load_json(run_dir / "summary.json") or {}
    return s.get("status") == "ok" or report.stalled(s)


def run_one(a, r, est, limit):
    """One run through the bottleneck; its summary (ddp_report's, augmented)."""
    from .ddp_report import summarize
    d, t = a.out / r["label"], TRANSPORTS[r["transport"]]
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    scheme = ("rotated" if t.get("hook") else "rht") if "plugin" in t else None
    write_json(d / "run.json", {
        "kind": "train", "label": r["label"], "mode": t.get("mode", r["transport"]), "ranks": a.ranks, "task": r["task"],
        "transport": r["transport"], "scheme": scheme, "head_bits": t.get("plugin"),
        "phase": "reduce_scatter" if scheme else None, "trim_p": None, "estimate_s": est, "limit_s": limit,
        "train_seed": a.train_seed,
        "bottleneck": {"cross_pct": r["cross"], "cross_prio": "high" if r["prio"] else "shared",
                       "cross_period_ms": float(a.cross_period_ms), "loss_pct": r["loss"],
                       "rate_gbps": a.rate_gbps, "buffer_bytes": a.buffer_bytes, "seed": a.seed,
                       "prop_delay_us": float(a.prop_delay_us), "tcp_rto_min_us": t.get("tcp_rto_min_us")}})
    print(f"congestion: {r['label']} -> {d} (estimate {est} s, limit {limit} s)", file=sys.stderr, flush=True)
    bn, rank = commands(a, r, d, limit)
    t0 = time.monotonic()
    with open(d / "bottleneck.out", "w") as out, open(d / "bottleneck.err", "w") as err:
        # The bottleneck gets the limit too (plus its own set-up and tear-down), as a backstop.
        rc = subprocess.run(["timeout", "--kill-after=10", str(limit + 20), *bn, "--log", str(d / "switch.jsonl"),
                             "--rank-output", str(d / "rank"), "--", *rank], stdout=out, stderr=err).returncode
    summarize(d, status=rc, wall_s=round(time.monotonic() - t0))
    return report.augment(d), rc


def calibrate(a, s):
    """The first run's communication share; returns the new rate (the same when it stays)."""
    c, p50, gb, rate = s.get("compute_ms"), s.get("iter_p50_ms"), s.get("grad_bytes"), a.rate_gbps
    d = {"run": s.get("label"), "status": s.get("status"), "rate_gbps": rate, "compute_ms": c, "iter_p50_ms": p50,
         "grad_bytes": gb, "decision": "not measured (the run failed or logged no compute time): rate stays"}
    new = rate
    if s.get("status") == "ok" and c and p50:
        comm = max(p50 - c, 1e-3)
        d.update(comm_ms=comm, comm_share=comm / p50, goodput_gbps=gb * 8 / (comm / 1e3) / 1e9 if gb else None,
                 decision=f"communication {comm / p50:.0%} of the iteration >= 50 %: rate stays {rate:g} Gbit/s")
        a.compute_ms[s.get("task") or "widemlp"] = c
        if comm / p50 < 0.5:  # 2 significant digits; never below a quarter in one step (a compute time
            # near the whole iteration says more about the measurement than about the network)
            new = max(float(f"{rate * comm / (1.5 * c):.2g}"), rate / 4)
            d["decision"] = f"communication {comm / p50:.0%} of the iteration < 50 %: rate {rate:g} -> {new:g} Gbit/s"
    d["new_rate_gbps"] = new
    write_json(a.out / "calibration.json", d)
    print(f"congestion: calibration: {d['decision']}", file=sys.stderr)
    return new


def sweep(a):
    a.out.mkdir(parents=True, exist_ok=True)
    if not a.resume:  # a fresh sweep starts from an empty results folder (its own earlier runs only)
        for d in a.out.glob("*/run.json"):
            shutil.rmtree(d.parent)
        for f in ("bench.json", "skipped.jsonl", "calibration.json"):
            (a.out / f).unlink(missing_ok=True)
    write_bench_json(a)
    print(f"congestion: {a.preset or 'custom'} plan, {len(a.runs)} runs, rate {a.rate_gbps:g} Gbit/s, estimated "
          f"{plan_total(a)} s (budget {a.budget_s} s)", file=sys.stderr)
    n_ok = n_lim = n_fail = n_skip = i = 0
    start, prev, point_fits, n_tr = time.monotonic(), None, True, len(a.transports)
    while i < len(a.runs):
        r = a.runs[i]
        i += 1
        est = estimate_s(a, r)
        left = int(a.budget_s - (time.monotonic() - start)) if a.budget_s else a.timeout_s
        if (r["task"], r["cross"], r["loss"]) != prev:  # a point starts only when all its transports fit
            prev, point_fits = (r["task"], r["cross"], r["loss"]), not (a.budget_s and est * n_tr > left)
        why = (f"the point needs ~{est * n_tr} s" if not point_fits else
               f"the run needs ~{est} s" if a.budget_s and left < est else None)
        if why:
            n_skip, why = n_skip + 1, f"time budget: {left} s left of --budget-s {a.budget_s}, {why}"
            with open(a.out / "skipped.jsonl", "a") as f:
                f.write(json.dumps({"label": r["label"], **point(r), "why": why}) + "\n")
            print(f"congestion: {r['label']}: skipped: {why}", file=sys.stderr)
            continue
        if a.resume and kept(a.out / r["label"]):
            print(f"congestion: {r['label']}: done before, skipped (--resume)", file=sys.stderr)
            continue
        s, rc = run_one(a, r, est, limit_s(a, est, left))
        limited = bool(rc) and report.stalled(s)
        n_ok, n_lim, n_fail = n_ok + (rc == 0), n_lim + limited, n_fail + (rc != 0 and not limited)
        if rc:
            print(f"congestion: {r['label']} " + ("stopped by its limit after it trained: a baseline's stall, its time "
                                                  "bounded in the report" if limited else "failed") + f" ({rc})",
                  file=sys.stderr)
        if a.calibrate and i == 1:
            a.calibrate = False
            new = calibrate(a, s)
            if new != a.rate_gbps:  # redo the first run (and all the others) at the new rate
                a.rate_gbps, i, n_ok, n_lim, n_fail, prev = new, 0, 0, 0, 0, None
                shutil.rmtree(a.out / "calibration_run", ignore_errors=True)
                (a.out / r["label"]).rename(a.out / "calibration_run")
                write_bench_json(a)
    print(f"congestion: {n_ok} runs ok, {n_lim} baseline runs stopped by their limit, {n_fail} failed, {n_skip} skipped, "
          f"{time.monotonic() - start:.0f} s", file=sys.stderr)
    sys.stdout.flush()
    report.main([str(a.out)])
    return 1 if n_fail else 0


def main(argv):
    a = parse(argv)
    return dry_run(a) if a.dry_run else sweep(a)
