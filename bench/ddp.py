"""N DDP ranks (bench/workloads/ddp_train.py, or allreduce_bench.py with --bench allreduce) on one
machine over the plugin (NCCL_NET=Trim), NCCL's Socket, or gloo/the trim backend (--cpu),
optionally through trim-switch. Each rank gets its own NCCL_HOSTID, so NCCL routes all traffic
through the network transport. Arguments after `--` go to the workload. Modes, sweeps and the run
folder's files: bench/README.md."""

import argparse
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from . import REPO, build_dir, build_info, proc
from .jsonio import load_json, write_json

PYTHON = os.environ.get("PYTHON", "python3")
WORKLOADS = REPO / "bench" / "workloads"
PLUGIN = Path("lib") / "libnccl-net-trim.so"  # in the build folder
MODES = ("lossless", "random", "trim", "drop", "socket")
SWEEPS = ("accuracy", "latency", "charlm", "trimacc", "bench")
# Named in each plugin rank's environment when set (inherited anyway; named so that the dry run and
# run.json show them).
NAMED_ENV = ("NCCL_TRIM_HEAD_SCALE", "NCCL_TRIM_ERROR_FEEDBACK", "NCCL_TRIM_HOOK_PRECONDITION")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python3 -m bench ddp", description=__doc__)
    a = p.add_argument
    a("--mode", choices=MODES, help="transport [lossless]; random/trim/drop go through trim-switch")
    a("--modes", default="lossless,socket", help="--bench allreduce: one run per mode")
    a("--cpu", action="store_true", help="CPU tensors: alone gloo, with a plugin mode the trim backend")
    a("--bench", choices=["allreduce"], help="the all_reduce bench instead of training")
    a("--sweep", choices=SWEEPS, help="a series of runs under --out (bench = --bench allreduce)")
    a("--ranks", type=int, default=2)
    a("--task", choices=["digits", "charlm", "widemlp"], default="digits")
    for name in ("--epochs", "--batch-size", "--lr", "--target-acc", "--max-steps"):
        a(name, help="passed to ddp_train.py")
    a("--seed", default="0")
    a("--seeds", default="0,1,2", help="the trimacc sweep's seeds")
    a("--scheme", choices=["none", "sign", "sq", "sd", "rht"], default="rht")
    a("--schemes", default="sign,sq,sd,rht", help="the accuracy sweep's schemes")
    a("--head-bits", choices=["1", "2", "16"], default="1")
    a("--phase", choices=["reduce_scatter", "all"], default="reduce_scatter")
    a("--trim-p", default="0.1", help="random mode's trim probability")
    a("--trim-ps", help="sweep probabilities [accuracy 0,0.01,0.1,0.5,0.75; trimacc 0.5,0.75]")
    a("--hook", action="store_true", help="plugin modes: ranks under python -m nccl_trim._boot (the comm hook)")
    a("--rate-gbps", help="switch port rate [random 100, trim/drop 2]")
    a("--buffer-packets", help="switch queue in packets [random 0 = unbounded, trim/drop 8]")
    a("--buffer-bytes", default="0")
    a("--prop-delay-us", help="[random 1, trim/drop 200]")
    a("--cross", action="append", default=[], help="cross traffic, repeatable [trim/drop: incast:8:0.1:all]")
    a("--trim-exact", default="0", help="trim mode: cut exact packets to a header instead of dropping")
    a("--switch-seed", default="7")
    a("--switch-arg", action="append", default=[], help="appended to trim-switch's command line")
    a("--out", help="run dir (one run) or results root [build/ddp/<label>|bench|sweep_<name>]")
    a("--label", help="run name (default from mode, scheme, head bits, p)")
    a("--timeout-s", type=float, default=600, help="kill a run that takes longer")
    a("--wait-all", action="store_true", help="when a rank fails, wait for the others to end by themselves")
    a("--build", default="build", help="where lib/libnccl-net-trim.so and bin/trim-switch are")
    a("--no-plots", action="store_true", help="tables only at the end of a bench or sweep")
    a("--dry-run", action="store_true", help="print the switch and rank commands with their environment")
    a("--resume", action="store_true", help="skip runs whose summary.json says ok")
    cut = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:cut])
    args.extra = argv[cut + 1:]
    if args.ranks < 1:
        p.error(f"--ranks must be a positive integer, not {args.ranks}")
    if args.sweep == "trimacc" and not args.cpu:
        p.error("--sweep trimacc runs on CPU tensors: add --cpu")
    if args.sweep and args.sweep not in ("trimacc", "bench") and args.cpu:
        p.error(f"--sweep {args.sweep} runs GPU experiments; on CPU: --sweep trimacc, single runs or --bench")
    if args.cpu and args.mode == "socket":
        p.error("--cpu: socket needs CUDA tensors (--cpu alone runs gloo)")
    if bad := [m for m in args.modes.split(",") if m not in MODES]:
        p.error(f"--modes: unknown mode '{bad[0]}' ({'|'.join(MODES)})")
    if args.sweep == "bench":
        args.bench, args.sweep = "allreduce", None
    args.build = build_dir(args.build)
    return args


# ---------------------------------------------------------------- what to run

def default_label(a, mode):
    if mode in ("cpu", "socket"):
        return f"{mode}_{a.task}"
    p = f"_p{a.trim_p}" if mode == "random" else ""
    return f"{mode}_{a.scheme}_hb{a.head_bits}{p}{'_hook' * a.hook}_{a.task}"


def plan(a):
    """The runs of this invocation, in order: label, mode and plugin settings (the flags' unless given)."""
    def R(label, mode, kind="train", p=None, **kw):
        return {"kind": kind, "label": label, "mode": mode, "scheme": a.scheme, "head_bits": a.head_bits,
                "phase": a.phase, "p": a.trim_p if p is None else p, "hook": a.hook, "seed": a.seed,
                "task": a.task, "env": {}, **kw}
    if a.bench:
        return [R("cpu", "cpu", kind="bench")] if a.cpu else [R(m, m, kind="bench") for m in a.modes.split(",")]
    if not a.sweep:
        mode = "cpu" if a.cpu and not a.mode else (a.mode or "lossless")
        return [R(a.label or default_label(a, mode), mode)]
    rs = dict(scheme="rht", head_bits="1", phase="reduce_scatter")
    ps = (a.trim_ps or ("0.5,0.75" if a.sweep == "trimacc" else "0,0.01,0.1,0.5,0.75")).split(",")
    if a.sweep == "accuracy":
        if a.task != "digits":
            print(f"bench ddp: accuracy sweep on task {a.task}", file=sys.stderr)
        a.target_acc = a.target_acc or "0.95"
        return ([R("socket", "socket"), R("lossless_rht", "lossless", **rs, p="0")]
                + [R(f"random_{s}_hb1_p{p}", "random", **dict(rs, scheme=s), p=p)
                   for s in a.schemes.split(",") for p in ps]
                + [R(f"random_rht_hb16_p{p}", "random", **dict(rs, head_bits="16"), p=p)
                   for p in ("0.1", "0.5", "0.75")]
                + [R("random_rht_hb1_p0.5_phaseall", "random", **dict(rs, phase="all"), p="0.5")])
    if a.sweep == "latency":
        return [R(f"{m}_{a.scheme}", m) for m in ("lossless", "trim", "drop")]
    if a.sweep == "charlm":
        return [R(lb, m, task="charlm", **rs, p=p) for lb, m, p in (
            ("socket", "socket", None), ("lossless_rht", "lossless", "0"),
            ("random_rht_hb1_p0.1", "random", "0.1"), ("random_rht_hb1_p0.5", "random", "0.5"))]
    # trimacc: name, head bits, hook, extra environment; each at every p, over every seed
    mse, ef = {"NCCL_TRIM_HEAD_SCALE": "mse"}, {"NCCL_TRIM_ERROR_FEEDBACK": "1"}
    variants = (("rht", "1", False, {}), ("hook", "1", True, {}), ("rht16", "16", False, {}),
                ("hook16", "16", True, {}),
                ("hookmse", "1", True, mse), ("hookmsenopc", "1", True, {**mse, "NCCL_TRIM_HOOK_PRECONDITION": "off"}),
                ("hook2mse", "2", True, mse), ("rhtef", "1", False, ef), ("hookef", "1", True, ef))
    runs = []
    for sd in a.seeds.split(","):
        runs.append(R(f"gloo_s{sd}", "cpu", seed=sd))
        runs += [R(f"{name}_p{p}_s{sd}", "random", **dict(rs, head_bits=hb), p=p, hook=hook, env=env, seed=sd)
                 for p in ps for name, hb, hook, env in variants]
    return runs


def switch_cmd(a, run):
    """trim-switch's command line for a random/trim/drop run, else None."""
    m = run["mode"]
    if m not in ("random", "trim", "drop"):
        return None
    # random: only the coin trims (a fast port with an unbounded queue never overflows)
    rate, bp, prop = ("100", "0", "1") if m == "random" else ("2", "8", "200")
    cmd = [str(a.build / "bin" / "trim-switch"), "--mode", m, "--rate-gbps", a.rate_gbps or rate,
           "--buffer-packets", a.buffer_packets or bp, "--buffer-bytes", a.buffer_bytes,
           "--prop-delay-us", a.prop_delay_us or prop, "--seed", a.switch_seed, "--stats-interval-ms", "1000"]
    cmd += {"random": ["--random-p", run["p"]], "trim": ["--trim-exact", a.trim_exact]}.get(m, [])
    cross = a.cross or ([] if m == "random" else ["incast:8:0.1:all"])
    return cmd + [w for c in cross for w in ("--cross", c)] + a.switch_arg


def workload(a, run):
    """(script, args): the workload and its own arguments."""
    if run["kind"] == "bench":
        return WORKLOADS / "allreduce_bench.py", ["--label", run["mode"]]
    args = ["--task", run["task"], "--seed", run["seed"]]
    for flag in ("epochs", "batch_size", "lr", "target_acc", "max_steps"):
        if getattr(a, flag):
            args += ["--" + flag.replace("_", "-"), getattr(a, flag)]
    if os.environ.get("DDP_DIGITS_CSV") and run["task"] != "charlm":
        args += ["--digits-csv", os.environ["DDP_DIGITS_CSV"]]
    return WORKLOADS / "ddp_train.py", args


def rank_env(mode, rank, ranks, master, build, cpu=False, hook=False, scheme="rht", head_bits=1,
             phase="reduce_scatter", ifname=None, env=None):
    """One rank of any DDP bench (this launcher's, `bench congestion`'s): (pairs, launch, backend),
    its environment variables in order, the Python arguments before the workload script (the
    hook's bootstrap) and the workload's --device/--backend. MODE: cpu or gloo (Gloo alone, no
    NCCL), socket (NCCL's own), else the plugin's; MASTER: (address, port); IFNAME: every
    transport's interface (default: each variable's in ENV, else lo); ENV: default os.environ."""
    env = os.environ if env is None else env
    nic = lambda var: ifname or env.get(var, "lo")  # noqa: E731
    e = [("RANK", rank), ("WORLD_SIZE", ranks), ("LOCAL_RANK", rank), ("LOCAL_WORLD_SIZE", ranks),
         ("MASTER_ADDR", master[0]), ("MASTER_PORT", master[1]), ("PYTHONUNBUFFERED", 1),
         ("GLOO_SOCKET_IFNAME", nic("GLOO_SOCKET_IFNAME"))] + [("CUDA_VISIBLE_DEVICES", "")] * cpu
    if mode in ("cpu", "gloo"):
        return e, [], ["--device", "cpu", "--backend", "gloo"]
    # One host id per rank: NCCL sees N nodes, so every byte goes through the network transport.
    e += [("NCCL_HOSTID", f"ddp-rank{rank}"), ("NCCL_SOCKET_IFNAME", nic("NCCL_SOCKET_IFNAME")),
          ("NCCL_DEBUG", env.get("NCCL_DEBUG", "INFO")),
          ("NCCL_DEBUG_SUBSYS", env.get("NCCL_DEBUG_SUBSYS", "INIT,NET"))]
    if mode == "socket":
        return e + [("NCCL_NET", "Socket"), ("NCCL_NET_PLUGIN", "none")], [], []
    e += [("NCCL_NET_PLUGIN", build / PLUGIN), ("NCCL_NET", "Trim"),
          ("NCCL_TRIM_IFNAME", nic("NCCL_TRIM_IFNAME")), ("NCCL_TRIM_SCHEME", scheme),
          ("NCCL_TRIM_HEAD_BITS", head_bits), ("NCCL_TRIM_PHASE", phase)]
    e += [(k, env[k]) for k in NAMED_ENV if env.get(k)]
    if cpu or hook:  # the CPU backend and the hook take the plugin from this build, not an installed copy
        pypath = ":".join(filter(None, [str(REPO / "python"), env.get("PYTHONPATH")]))
        e += [("PYTHONPATH", pypath), ("NCCL_TRIM_LIB_DIR", build / "lib")]
    launch = ["-m", "nccl_trim._boot", *(["--trim-cpu"] * cpu)] if hook else []
    # The hook's bootstrap turns gloo groups into trim ones.
    return e, launch, ["--device", "cpu", "--backend", "gloo" if hook else "trim"] if cpu else []


def rank_cmd(a, run, r, port, sw_port, out_dir):
    """Rank R of RUN: (unset, pairs, argv), what its env(1) removes and sets and its Python arguments."""
    m = run["mode"]
    pairs, launch, backend = rank_env(m, r, a.ranks, ("127.0.0.1", port), a.build, a.cpu, run["hook"], run["scheme"],
                                      run["head_bits"], run["phase"], env={**os.environ, **run["env"]})
    pairs += [("NCCL_TRIM_SWITCH", f"127.0.0.1:{sw_port}")] if m in ("random", "trim", "drop") else []
    script, args = workload(a, run)
    argv = [*launch, str(script), *args, *backend, "--json-out", f"{out_dir}/rank{{rank}}.jsonl", *a.extra]
    # Set from our flags or not at all: a NCCL_TRIM_SWITCH left in the caller's environment must
    # not send a lossless or socket run through a switch.
    return [] if m == "cpu" else ["NCCL_TRIM_SWITCH"], pairs, argv


# ---------------------------------------------------------------- running

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def collect_versions(a):
    """What only the machine knows (GPU, driver, plugin build, commit); rank 0 logs torch's side."""
    def out(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            return None
    smi = ["nvidia-smi", "--format=csv,noheader", "--query-gpu"]
    (info, so), dirty = build_info(a.build), None
    if commit := info.get("commit"):  # a packed build (pack-gpu.sh) names its commit: the tree need not be it
        dirty, commit = commit.endswith("-dirty"), commit.removesuffix("-dirty")
    elif commit := out(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"]):
        dirty = bool(out(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"]))
    return {"gpu_smi": out(smi + ["name"]), "driver": out(smi + ["driver_version"]), "plugin_sha256": so,
            "git_commit": commit, "git_dirty": dirty, "kernel": platform.release()}


def wait_ranks(a, label, ranks, out_dir):
    """Wait for the ranks; the first to fail (unless --wait-all) or --timeout-s ends the run. Each
    rank that ended gets rank<R>.exit. Returns the run's status (124: timed out)."""
    rc, running, deadline = 0, dict(enumerate(ranks)), time.monotonic() + a.timeout_s
    while running and (rc == 0 or a.wait_all):
        if time.monotonic() > deadline:
            print(f"bench ddp: {label}: timed out after {a.timeout_s:g}s", file=sys.stderr)
            rc = 124
            break
        for r, p in [(r, p) for r, p in running.items() if p.poll() is not None]:
            del running[r]
            st = p.returncode if p.returncode >= 0 else 128 - p.returncode  # 128+N for signal N
            write_json(out_dir / f"rank{r}.exit", {"rank": r, "status": st, "time": time.time()})
            if st:
                print(f"bench ddp: {label}: rank {r} (pid {p.pid}) failed with status {st}", file=sys.stderr)
                rc = rc or st
        time.sleep(0.02)
    for p in running.values():
        proc.stop(p, 0)
    return rc


def done_before(run_dir):
    """--resume: the run's summary says ok."""
    return (load_json(run_dir / "summary.json") or {}).get("status") == "ok"


def run_one(a, run, out_dir, versions):
    """One run into OUT_DIR (or its dry-run lines); returns its status."""
    from .ddp_report import summarize
    label, m, sw = run["label"], run["mode"], switch_cmd(a, run)
    port = free_port()
    if a.dry_run:
        print(f"# run {label} -> {out_dir}")
        if sw:
            print(f"# switch: {' '.join(sw)}")
        for r in range(a.ranks):
            unset, env, argv = rank_cmd(a, run, r, port, "<port>", out_dir)
            words = [w for u in unset for w in ("-u", u)] + [f"{k}={v}" for k, v in env]
            print(f"# rank {r}: env {' '.join(words)} setsid {PYTHON} {' '.join(argv)}")
        return 0
    plugin = m not in ("cpu", "socket")
    for f in ([a.build / PLUGIN] if plugin else []) + ([Path(sw[0])] if sw else []):
        if not f.exists():
            print(f"bench ddp: no {f}: run 'make -j' first (or pass --build)", file=sys.stderr)
            return 1
    out_dir.mkdir(parents=True, exist_ok=True)
    for pat in ("rank*.jsonl", "rank*.log", "rank*.out", "rank*.exit", "switch.*", "summary.json"):
        for f in out_dir.glob(pat):
            f.unlink()
    argv = rank_cmd(a, run, 0, port, None, out_dir)[2]
    script = argv.index(str(workload(a, run)[0]))  # after the hook's bootstrap, if any
    write_json(out_dir / "run.json", {
        "kind": run["kind"], "label": label, "mode": m, "ranks": a.ranks,
        "task": run["task"] if run["kind"] == "train" else None, "scheme": run["scheme"] if plugin else None,
        "head_bits": int(run["head_bits"]) if plugin else None, "phase": run["phase"] if plugin else None,
        "trim_p": float(run["p"]) if m == "random" else None, "switch_cmd": " ".join(sw) if sw else None,
        "script_args": " ".join(argv[script + 1:]), "hook": script > 0, "versions": versions})
    print(f"bench ddp: {label} ({run['kind']}, mode {m}, {a.ranks} ranks) -> {out_dir}", file=sys.stderr)
    t0, switch, rc = time.monotonic(), None, 0
    try:
        if sw:
            switch, sw_port = proc.start_switch(sw[0], sw[1:], out_dir / "switch.jsonl")
        ranks = []
        for r in range(a.ranks):
            unset, pairs, argv = rank_cmd(a, run, r, port, sw_port if sw else None, out_dir)
            env = {k: v for k, v in {**os.environ, **run["env"]}.items() if k not in unset}
            env.update((k, str(v)) for k, v in pairs)
            with open(out_dir / f"rank{r}.out", "w") as o, open(out_dir / f"rank{r}.log", "w") as e:
                ranks.append(proc.spawn([PYTHON, *argv], env=env, stdout=o, stderr=e))
        rc = wait_ranks(a, label, ranks, out_dir)
    except RuntimeError as e:  # the switch did not start
        print(f"bench ddp: {e}", file=sys.stderr)
        rc = 1
    if rc:
        for f in sorted(out_dir.glob("rank*.log")):
            print(f"--- tail of {f}", *f.read_text(errors="replace").splitlines()[-5:], sep="\n", file=sys.stderr)
    if switch:
        proc.stop(switch)  # SIGTERM: it writes its "final" stats line
    try:
        summarize(out_dir, rc, round(time.monotonic() - t0, 1))
    except (OSError, ValueError, KeyError) as e:
        print(f"bench ddp: {label}: no summary: {e}", file=sys.stderr)
        rc = rc or 1
    return rc


def main(argv):
    a = parse_args(argv)
    # SIGTERM as Ctrl-C: exit through proc's atexit, which kills the switch's and ranks' groups.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    runs = plan(a)
    single = not (a.sweep or a.bench)
    default = runs[0]["label"] if single else (f"sweep_{a.sweep}" if a.sweep else "bench")
    root = Path(a.out or REPO / "build" / "ddp" / default).resolve()
    versions = None
    if not a.dry_run:
        root.mkdir(parents=True, exist_ok=True)
        versions = collect_versions(a)
        write_json(root / "versions.json", versions)
    failures = 0
    for run in runs:
        d = root if single else root / run["label"]
        if a.resume and done_before(d):
            print(f"bench ddp: {run['label']}: done before (--resume), skipped", file=sys.stderr)
            continue
        failures += run_one(a, run, d, versions) != 0
        if not (a.dry_run or single) and (d / "summary.json").exists():  # progress on stderr
            print((d / "summary.json").read_text().strip(), file=sys.stderr)
    if a.dry_run:
        return 0
    if single:
        print((root / "summary.json").read_text().strip() if (root / "summary.json").exists() else "{}")
    else:
        from . import ddp_report  # (exits 1 when a run failed too: those are already counted)
        rc = ddp_report.main([str(root), "--summary-line"] + (["--no-plots"] if a.no_plots else []))
        failures = failures or rc
    if failures:
        print(f"bench ddp: {failures} run(s) failed", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
