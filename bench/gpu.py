"""python -m bench gpu [options] [-- extra congestion options]: the GPU machine's one command
(docs/GPU-MACHINE.md; scripts/check-gpu.sh runs it). Preflight, then bounded steps in order, each
part under its own limit and started only when that whole limit fits what is left of --budget-s
(never cut short; what does not fit is "not run" and --continue runs it). After every step: the
report (python -m bench gpu-report: a table, one JSON line) and the bundle. Exit: 0 every planned step
passed, 3 the same but a goal missed, 4 nothing failed but a planned step was not run, 1 a step
failed, 2 preflight failed (no GPU, torch or build: said why, in seconds)."""

import argparse
import contextlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from bench import REPO, build_dir, build_info, gpu_report
from bench.jsonio import load_json, parse_jsonl, read_jsonl, write_json
from bench.proc import spawn, stop

PY = os.environ.get("PYTHON", "python3")
# The experiments the steps run, by command prefix (a test puts a stand-in in their place).
TOOLS = {c: [PY, "-m", "bench", c] for c in ("ddp", "congestion", "congestion-report", "alternate", "codec")}
# What is measured must not depend on the caller's environment: these are unset first.
UNSET = re.compile(r"NCCL_TRIM_.*|NCCL_SOCKET_NTHREADS|NCCL_NSOCKS_PERTHREAD|NCCL_ALGO|NCCL_PROTO|NCCL_M(IN|AX)_NCHANNELS"
                   r"|NCCL_NET_GDR_(LEVEL|READ)|NCCL_BUFFSIZE|NCCL_NET|NCCL_NET_PLUGIN")
PREFLIGHT_LIMIT_S, PREFLIGHT_EST_S = 25, 10
RESERVE_S = 10  # for the reports and bundles written after every step (about 1 s each)
BUNDLE_MAX_BYTES = 15 << 20  # the device tool brings back files of at most 16 MiB


def ar(part, modes, ranks, limit, est, run, env=""):
    """An allreduce part: busbw at 1/16/128 MiB, one launch per mode, Ring/Simple on 2 channels."""
    t = (limit - 10) // len(modes.split(","))
    return (part, limit, est, run, f"env NCCL_ALGO=Ring NCCL_PROTO=Simple NCCL_MIN_NCHANNELS=2 NCCL_MAX_NCHANNELS=2 "
            f"{env} {{ddp}} --bench allreduce --modes {modes} --ranks {ranks} --timeout-s {t} --out {{o}}/{run} "
            "-- --sizes 1M,16M,128M --warmup 2 --iters 5 --target-ms 100 --timeout-s 20")


def sockets(c):
    return f"NCCL_SOCKET_NTHREADS={c.split('x')[0]} NCCL_NSOCKS_PERTHREAD={c.split('x')[1]}"


def hookacc(seed):
    """char-LM under random trimming p 0.5 for Socket, per-hop rht and the hook, the three at once."""
    return (f"s{seed}", 80, 55, "hookacc", [
        f"{{ddp}} {args} --ranks 2 --task charlm --epochs 3 --seed {seed} --timeout-s 70 --out {{o}}/hookacc/{t}_s{seed}"
        for t, args in (("socket", "--mode socket"), ("rht", "--mode random --trim-p 0.5"),
                        ("hook", "--mode random --trim-p 0.5 --hook"))])


RHT = "lib/libtrim-rht.so"
# step -> (in the first invocation, prerequisites (build files, "netns", "ncu"), parts: (part, limit_s,
# estimate_s, run folder, command, or commands run at once)). {ddp} {cong} {codec} {alternate} {extra}:
# command prefixes; {o} out, {b} build, {base} the congestion baseline, {rate} its preset's Gbit/s.
STEPS = {
    "ddp_lossless": (True, (), [
        (m, 30, 15, f"ddp_{m}", f"{{ddp}} --mode {m} --ranks 2 --task digits --epochs 4 --timeout-s 22 "
                                f"--out {{o}}/ddp_{m} -- --deterministic") for m in ("lossless", "socket")]),
    "allreduce_2r": (True, (), [ar("", "lossless,socket", 2, 45, 25, "ar2")]),
    "congestion_c60": (True, ("netns",), [
        ("", 95, 45, "congestion_c60", "{cong} --plan widemlp:c60 --transports {base},trim --rate-gbps {rate} "
                                       "--timeout-s 40 --out {o}/congestion_c60 {extra}")]),
    "kernels": (True, ("bin/trim-tests", "bin/trim-bench"), [
        ("tests", 20, 5, "kernels", "{b}/bin/trim-tests --gtest_filter=RotateCuda*"),
        ("bench", 30, 10, "kernels", "{b}/bin/trim-bench cuda --json")]),
    "hook_overhead": (True, (RHT,), [
        (h, 35, 20, f"hook_{h}", f"{{ddp}} --mode lossless {'--hook' * (h == 'hook')} --ranks 2 --task charlm "
                                 f"--max-steps 40 --timeout-s 27 --out {{o}}/hook_{h}") for h in ("plain", "hook")]),
    "hook_accuracy": (True, (RHT,), [hookacc(1)]),
    # The plugin declares a silent peer dead after 10 s; PyTorch's collective timeout (25 s) lies
    # beyond the report's bound (20 s), so a survivor only it ends is a failure.
    "rank_killed": (True, (), [
        ("", 45, 20, "ddp_kill", "env NCCL_TRIM_TIMEOUT_MS=10000 {ddp} --mode lossless --ranks 2 --wait-all "
                                 "--timeout-s 38 --task digits --epochs 50 --out {o}/ddp_kill -- --die-after-iters 15 "
                                 "--die-rank 1 --timeout-s 25")]),
    "allreduce_4r": (False, (), [ar("", "lossless,socket", 4, 60, 30, "ar4")]),
    "ddp_random_trim": (False, (), [
        ("", 50, 20, "ddp_random", "{ddp} --mode random --trim-p 0.5 --ranks 4 --task digits --epochs 3 "
                                   "--timeout-s 42 --out {o}/ddp_random")]),
    "socket_sweep_2r": (False, (), [  # NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD
        ar(c, "socket", 2, 30, 13, f"sweep2/{c}", sockets(c)) for c in ("4x1", "2x1", "4x2", "2x2", "1x2", "1x1")]),
    "socket_sweep_4r": (False, (), None),  # the 2 best 2-rank configs at 4 ranks: Check.step
    "hook_accuracy_more": (False, (RHT,), [hookacc(2), hookacc(3)]),
    "kernels_ncu": (False, ("bin/trim-bench", "ncu"), [  # what bounds the rotation: its first 6 launches
        ("", 150, 60, "kernels", "ncu --set full -k regex:rotate_tiles -c 6 {b}/bin/trim-bench cuda --quick --reps 1")]),
    "codec_threads_2r": (False, (), [  # TeE: T codec threads, E progress engines
        ar(c, "lossless", 2, 30, 13, f"codec2/{c}", f"NCCL_TRIM_CODEC_THREADS={c.split('e')[0]} "
                                                   f"NCCL_TRIM_ENGINES={(c.split('e') + ['1'])[1]}")
        for c in ("0", "2", "4", "4e2")]),
    "harness_scaling": (False, (), [  # no GPU: trim-harness over codec threads, CPU per GB
        ("", 120, 50, "harness_scaling", "{codec} --build {b} --threads 0,2,4,8 --rounds 1 --bytes 64M --iters 5 "
                                         "--out {o}/harness_scaling.jsonl")]),
    "cpu_uncongested": (False, ("lib/libtrim-coll.so",), [  # no GPU: the trim backend vs Gloo on CPU tensors
        ("", 200, 110, "cpu_uncongested", "{alternate} --rounds 3 --out {o}/cpu_uncongested gloo= "
                                          "'trim=--build {b} --mode lossless'")]),
    "congestion_grid": (False, ("netns",), None),  # the congestion preset in what the budget leaves: Check.grid
}


class Check:
    def __init__(self, a, extra):
        self.a, self.dry, self.cont, self.no_gpu = a, a.dry_run, a.cont, a.no_gpu
        self.budget_s = a.budget_s if a.budget_s is not None else (560 if a.cont else 480)
        self.build = build_dir(a.build or (".gpu/build" if (REPO / ".gpu/build/lib/libnccl-net-trim.so").is_file()
                                           else "build"))
        self.out, self.src = build_dir(a.out), build_dir(a.from_)
        self.bundle = build_dir(a.bundle) if a.bundle else None
        self.only = set(filter(None, (a.only or "").split(",")))
        self.ctx = {"ddp": TOOLS["ddp"] + ["--build", str(self.build), "--no-plots"],
                    "cong": TOOLS["congestion"] + ["--build", str(self.build)] + ["--cpu"] * a.no_gpu,
                    "codec": TOOLS["codec"], "alternate": TOOLS["alternate"], "extra": extra,
                    "o": str(self.out), "b": str(self.build), "base": "gloo" if a.no_gpu else "socket",
                    "rate": "0.5" if a.no_gpu else "2.5"}
        self.extra, self.steps_file = extra, self.out / "steps.jsonl"
        self.unset = sorted(v for v in os.environ if UNSET.fullmatch(v))
        for v in self.unset:
            del os.environ[v]
        self.ip_note, self.netns = self.iproute2(build_dir(a.iproute2))
        self.current, self.missed, self.dry_limit, self.dry_est = None, False, PREFLIGHT_LIMIT_S, PREFLIGHT_EST_S

    def iproute2(self, carried):
        """(where ip comes from, why the congestion steps cannot run here or None): ip (the carried
        copy of scripts/fetch-iproute2.sh when the machine has none), root, /dev/net/tun."""
        ip = shutil.which("ip")
        if not ip and os.access(carried / "bin/ip", os.X_OK):
            os.environ["PATH"] = f"{carried}/bin:{os.environ['PATH']}"
            ip, note = shutil.which("ip"), f"ip from {carried} (fetch-iproute2.sh)"
        else:
            note = ip and f"ip at {ip}"
        if not ip:
            return note, (f"iproute2 missing: no ip on PATH and no {carried}/bin/ip; run scripts/pack-gpu.sh --iproute2 "
                          "on the build machine and carry .gpu (docs/GPU-MACHINE.md)")
        v = subprocess.run([ip, "-V"], capture_output=True, text=True)
        if v.returncode:
            return note, f"iproute2 broken: '{ip} -V' fails: {(v.stdout + v.stderr).strip()[:200]}"
        if os.geteuid() != 0:
            return note, "not root: network namespaces and TUN devices need root"
        return note, None if Path("/dev/net/tun").is_char_device() else "no /dev/net/tun"

    def expand(self, template):
        """A command template as argv: {key} alone is a prefix (a list), else formatted in place."""
        argv = []
        for tok in shlex.split(template):
            v = self.ctx.get(tok[1:-1]) if tok[:1] == "{" and tok[-1:] == "}" else None
            argv += v if isinstance(v, list) else [tok.format(**self.ctx)]
        return argv

    def record(self, step=None, part=None, **kw):
        """A line of steps.jsonl: a part's (STEP, PART), else the invocation's own (its plan)."""
        with open(self.steps_file, "a") as f:
            f.write(json.dumps({"invocation": self.inv, **({"step": step, "part": part} if step else {}), **kw}) + "\n")

    def not_run(self, step, part, why, quiet=False):
        self.missed = True
        name = f"{step}{' ' + part if part else ''}"
        if self.dry:
            print(f"[{name}] not run: {why}")
            return
        self.record(step, part, not_run=why)
        if not quiet:
            say(f"{name}: not run: {why}")

    def part(self, step, part, limit, est, run, cmds):
        """The commands CMDS at once under LIMIT (TERM at LIMIT - 5 s, KILL at LIMIT), their output
        in OUT/STEP[_PART].log, the part's record in steps.jsonl; RUN: its results folder."""
        name, log = f"{step}{' ' + part if part else ''}", f"{step}{'_' + part if part else ''}.log"
        if self.dry:
            if limit > self.left():
                print(f"[{name}] limit {limit}s, estimate {est}s: beyond --budget-s {self.budget_s} (--continue again)")
                self.missed = True
                return
            print(f"[{name}] limit {limit}s, estimate {est}s, log {log}\n  " + "\n  ".join(map(shlex.join, cmds)))
            self.dry_limit, self.dry_est = self.dry_limit + limit, self.dry_est + est
            return
        if (step, part) in self.ran and step not in self.only:
            return say(f"{name}: ran before, kept")
        if limit > (left := self.left()):
            return self.not_run(step, part, f"time budget: {left} s left of --budget-s {self.budget_s}, its limit is {limit} s")
        say(f"{name} (limit {limit} s, estimate {est} s, log {log})")
        t0, rc, procs = time.monotonic(), 0, []
        self.current = (step, part, run, log, t0, limit, procs)
        with open(self.out / log, "w") as fh:
            try:
                for i, cmd in enumerate(cmds):
                    time.sleep(0.5 * (i > 0))  # (staggered, as the ranks' ports are picked)
                    procs.append(spawn(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO))
                for p in procs:
                    r = p.wait(max(0.0, t0 + limit - 5 - time.monotonic()))
                    rc = rc or r
            except subprocess.TimeoutExpired:
                rc = 124
                for p in procs:
                    stop(p, 5)
                print(f"check-gpu: timed out: its limit is {limit} s (a failure)", file=fh)
            except OSError as e:
                rc = 127
                print(f"check-gpu: cannot run {cmds}: {e}", file=fh)
        self.current = None
        self.reap(self.out / run)
        self.record(step, part, rc=rc, seconds=round(time.monotonic() - t0), limit=limit, estimate=est, dir=run, log=log)
        say(f"{name}: exit {rc} after {time.monotonic() - t0:.0f} s")

    def left(self):
        """Seconds of --budget-s left for the steps: by the limits so far in a dry run, else by the clock."""
        return int(self.budget_s - (self.dry_limit if self.dry else time.monotonic() - self.t0)) - RESERVE_S

    def reap(self, path):
        """End what a part left running: the processes whose command line names PATH (TERM first,
        so that netns_bottleneck.sh takes down its switch and namespaces; KILL what is left 8 s later)."""
        def named():
            return [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
                    if pid != os.getpid() and str(path) in gpu_report.text(f"/proc/{pid}/cmdline").replace("\0", " ")]
        end = time.monotonic() + 8
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if pids := named():
                say(f"ending {len(pids)} leftover process(es) of {path} ({sig.name})")
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
            while named() and time.monotonic() < end:
                time.sleep(0.2)

    def on_signal(self, *_):
        """Killed (the device tool's timeout, Ctrl-C): the part in progress is a failure; the bundle stays."""
        if self.current:
            step, part, run, log, t0, limit, procs = self.current
            for p in procs:
                stop(p, 5)
            self.reap(self.out / run)
            self.record(step, part, rc=gpu_report.STOPPED, seconds=round(time.monotonic() - t0), limit=limit, dir=run,
                        log=log, killed="check-gpu was stopped")
        self.publish()
        sys.exit(gpu_report.STOPPED)

    def cong_dry(self, argv):
        """The congestion bench's --dry-run: its settings and plan lines, and its estimate (s)."""
        try:
            p = subprocess.run(argv + ["--dry-run"], capture_output=True, text=True, timeout=120, cwd=REPO)
            lines = (p.stdout + p.stderr).splitlines()
        except (OSError, subprocess.TimeoutExpired):
            lines = []
        est = next((int(m.group(1)) for x in lines if (m := re.match(r"# plan: .* estimated (\d+) s", x))), 0)
        return ["  " + x for x in lines if re.match(r"# (\S+ --dry-run|plan:)", x)], est

    def grid(self):
        """The congestion preset (or --plan) within what the budget leaves, resumed where one stopped it."""
        d = self.out / "congestion"
        argv = self.ctx["cong"] + ["--out", str(d)] + self.extra + (["--plan", self.a.plan] if self.a.plan else [])
        if rate := (load_json(d / "calibration.json") or {}).get("new_rate_gbps"):
            argv += ["--rate-gbps", str(rate), "--no-calibrate"]  # resumed: the rate calibrated first
        elif self.a.plan:  # the preset's rate, stated: the grid must match the first invocation's points
            argv += ["--rate-gbps", self.ctx["rate"]]
        if d.is_dir() and not self.dry:
            argv.append("--resume")
            (d / "skipped.jsonl").unlink(missing_ok=True)
        lines, est = self.cong_dry(argv)
        lim = min(590, self.left() - (not self.dry))  # (1 s for the clock running on until part() looks)
        if lim < 150:
            return self.not_run("congestion_grid", "", f"time budget: {lim} s left, it needs at least 150 s")
        if self.dry:
            print("\n".join(lines))
        self.part("congestion_grid", "", lim, est, "congestion", [argv + ["--budget-s", str(lim - 40)]])
        left = read_jsonl(d / "skipped.jsonl")
        if left and not self.dry:  # after the part's run: a failed run stays a failure
            self.not_run("congestion_grid", "", f"{len(left)} run(s) left for lack of time: --continue resumes it")

    def step(self, step):
        blocked = next(filter(None, map(self.blocker, STEPS[step][1])), None)
        if blocked and not self.dry:
            return self.not_run(step, "", blocked)
        if blocked:
            print(f"  # here: not run ({blocked})")
        if step == "congestion_grid":
            return self.grid()
        parts = STEPS[step][2]
        if step == "socket_sweep_4r":  # the 2 best 2-rank Socket configs (geometric-mean busbw)
            _, gm = gpu_report.best_socket(gpu_report.configs(self.out / "sweep2", "socket"))
            top = ["TxS", "TxS"] if self.dry else sorted(gm, key=gm.get, reverse=True)[:2]
            if not top:
                self.not_run(step, "", "no 2-rank Socket config finished")
            parts = [ar(c, "socket", 4, 35, 17, f"sweep4/{c}", sockets(c)) for c in top]
        for part, limit, est, run, cmds in parts:
            argvs = [self.expand(c) for c in ([cmds] if isinstance(cmds, str) else cmds)]
            if self.dry and step == "congestion_c60":
                print("\n".join(self.cong_dry(argvs[0])[0]))
            self.part(step, part, limit, est, run, argvs)

    def blocker(self, need):
        if need == "netns":
            return self.netns
        if need == "ncu":
            return None if shutil.which("ncu") else "ncu not found"
        if not (self.build / need).exists():
            return f"no {self.build}/{need} (make, or scripts/pack-gpu.sh carries it)"

    def state(self):
        """What earlier invocations did (--continue): their steps.jsonl in OUT, else in the bundle of --from."""
        tgz = self.src / "check-gpu-logs.tgz"
        if not self.cont:
            if not self.dry and self.out.is_dir() and any(self.out.iterdir()) and not self.steps_file.exists():
                die(f"--out {self.out} holds something else than an earlier check: not wiping it")
            if not self.dry:
                shutil.rmtree(self.out, ignore_errors=True)
            return set(), set(), 0
        if not self.steps_file.exists() and tgz.is_file():
            if self.dry:  # (reads the bundle, makes nothing)
                with tarfile.open(tgz) as t:
                    m = next((m for m in t if m.name.endswith("/steps.jsonl")), None)
                    return gpu_report.state(parse_jsonl(t.extractfile(m).read().decode()) if m else [])
            self.out.mkdir(parents=True, exist_ok=True)
            if subprocess.run(["tar", "-xzf", str(tgz), "--strip-components=1", "-C", str(self.out)]).returncode:
                die(f"cannot unpack {tgz} into {self.out}")
            say(f"continuing from {tgz}")
        return gpu_report.state(read_jsonl(self.steps_file))

    def plan(self):
        """--only's steps, else the invocation's (the first's, or with --continue all) not yet complete."""
        return [s for s, (first, _, _) in STEPS.items() if (s in self.only if self.only else (first or self.cont)
                and s not in self.complete) and (not self.no_gpu or s.startswith("congestion_"))]

    def preflight(self):
        """Every reason not to go on (a line each); preflight.json says what was found."""
        t0, why, gpu, driver = time.monotonic(), [], None, None
        why += filter(None, map(self.blocker, ("lib/libnccl-net-trim.so", "bin/trim-switch")))
        if self.no_gpu:
            say("--no-gpu: GPU and CUDA not checked (a CPU smoke run of the congestion steps, not a result)")
        elif not shutil.which("nvidia-smi"):
            why.append("no GPU: nvidia-smi not found")
        else:
            try:
                p = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                   capture_output=True, text=True, timeout=20)
                smi, ok = (p.stdout + p.stderr).strip(), p.returncode == 0
            except subprocess.TimeoutExpired:
                smi, ok = "timed out after 20 s", False
            (self.out / "nvidia-smi.txt").write_text(smi + "\n")
            if not ok or not smi or re.search("fail|error|no devices", smi, re.I):
                why.append(f"no GPU: nvidia-smi: {smi.splitlines()[0] if smi else 'no output'}")
            else:
                gpu, _, driver = (x.strip() for x in smi.splitlines()[0].partition(","))
        if not self.netns:
            p = subprocess.run(["ip", "netns", "add", f"ckgpu{os.getpid()}"], capture_output=True, text=True)
            if p.returncode:
                self.netns = f"cannot make a network namespace: {p.stderr.strip()[:200]}"
            else:
                subprocess.run(["ip", "netns", "del", f"ckgpu{os.getpid()}"], capture_output=True)
        info, so = build_info(self.build)
        if info.get("plugin_sha256") and info["plugin_sha256"] != so:
            why.append(f"{self.build}/BUILD_INFO names plugin sha256 {info['plugin_sha256']}, the plugin there is {so}: "
                       "repack (scripts/pack-gpu.sh)")
        # torch, CUDA (a first tensor: the context, and warm caches for the steps), NCCL, scikit-learn
        try:
            p = subprocess.run([PY, "-m", "bench", "gpu", "--probe"] + ["--no-gpu"] * self.no_gpu, cwd=REPO,
                               capture_output=True, text=True, timeout=20)
            (self.out / "preflight.log").write_text(p.stderr)
            found = parse_jsonl(p.stdout)[-1]
        except (subprocess.TimeoutExpired, IndexError):
            found = {"why": ["torch check failed or did not finish in 20 s (see preflight.log)"]}
        why += found.pop("why")
        pre = {"ok": not why, "why": why, "invocation": self.inv, "gpu": gpu or found.pop("gpu", None), "driver": driver,
               **found, "commit": info.get("commit") or f"unknown (no {self.build}/BUILD_INFO: scripts/pack-gpu.sh writes it)",
               "plugin_sha256": so, "build": str(self.build), "cores": os.cpu_count(), "ip": self.ip_note,
               "netns_blocker": self.netns, "unset_env": self.unset, "no_gpu": self.no_gpu}
        for f in ("preflight.json", f"preflight_{self.inv}.json"):
            write_json(self.out / f, pre)
        self.record("preflight", "", rc=int(bool(why)), seconds=round(time.monotonic() - t0), limit=PREFLIGHT_LIMIT_S,
                    estimate=PREFLIGHT_EST_S, log="preflight.log")
        return pre

    def publish(self, step=None):
        """The report and the bundle as they stand (the congestion tables and plots again after a
        congestion step); returns the report's exit status."""
        try:
            rc, report = gpu_report.Report(self.out).render(round(time.monotonic() - self.t0))
        except Exception as e:  # a report that cannot be made must not end the check
            rc, report = 1, f"check-gpu: the report failed: {type(e).__name__}: {e}\n"
        (self.out / "report.txt").write_text(report)
        if not self.bundle:
            return rc
        self.bundle.mkdir(parents=True, exist_ok=True)
        (self.bundle / "check-gpu.json").write_text(report.splitlines()[-1] + "\n")
        (self.bundle / "check-gpu.txt").write_text(report)
        # the grid's tables and plots, else the one point's; again after a congestion step
        cong = next((c for c in ("congestion", "congestion_c60") if (self.out / c / "bench.json").is_file()), None)
        if cong and ((step or "").startswith("congestion_") or not (self.bundle / "congestion.md").exists()):
            argv = TOOLS["congestion-report"] + [str(self.out / cong), "--meta", str(self.out / "preflight.json")]
            p = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
            (self.bundle / "congestion.md").write_text("".join(p.stdout.splitlines(True)[:-1]))
            for png in ("congestion.png", "time_to_target.png"):
                if (self.out / cong / png).is_file():
                    shutil.copy(self.out / cong / png, self.bundle)
        tgz = self.bundle / "check-gpu-logs.tgz"  # without the NCCL rank logs, then the switch's stats, if too big
        for ex in ([], ["--exclude=rank*.log"], ["--exclude=rank*.log", "--exclude=switch.jsonl"]):
            subprocess.run(["tar", "-czf", str(tgz), *ex, "-C", str(self.out.parent), self.out.name], capture_output=True)
            if tgz.is_file() and tgz.stat().st_size <= BUNDLE_MAX_BYTES:
                break
        return rc

    def run(self):
        self.ran, self.complete, last = self.state()
        self.inv, planned = last + 1, self.plan()
        if self.dry:
            return self.dry_run(planned)
        self.t0 = time.monotonic()
        self.out.mkdir(parents=True, exist_ok=True)
        self.steps_file.touch()
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)
        self.record(plan=planned, budget_s=self.budget_s, **{"continue": int(self.cont)}, no_gpu=int(self.no_gpu),
                    time=time.time())
        pre = self.preflight()
        if not pre["ok"]:
            say(f"cannot run here ({time.monotonic() - self.t0:.0f} s):\n" + "".join(f"  - {w}\n" for w in pre["why"]) +
                     "  This check needs the GPU machine, torch with CUDA, and the plugin built here and carried\n"
                     "  (scripts/pack-gpu.sh): see docs/GPU-MACHINE.md.")
            for s in planned:
                self.not_run(s, "", "preflight failed", quiet=True)
        else:
            say(f"preflight ok: {pre['gpu'] or 'no GPU'}, commit {pre['commit']}, {self.ip_note or 'no ip'}")
            for s in planned:
                self.missed = False
                self.step(s)
                if not self.missed:
                    self.record(s, "", complete=1)
                self.publish(s)
        rc = self.publish()
        sys.stdout.write((self.out / "report.txt").read_text())
        return 2 if not pre["ok"] else rc

    def dry_run(self, planned):
        info, _ = build_info(self.build)
        print(f"# check-gpu --dry-run: invocation {self.inv} ({'continue' if self.cont else 'fresh'}), build {self.build}, "
              f"out {self.out}, budget {self.budget_s} s (nothing is run)\n# plan: {' '.join(planned) or '(nothing left)'}\n"
              f"[preflight] limit {PREFLIGHT_LIMIT_S}s, estimate {PREFLIGHT_EST_S}s: the build ({self.build}/lib/"
              f"libnccl-net-trim.so, bin/trim-switch, BUILD_INFO: commit {info.get('commit', 'none here')}); nvidia-smi; "
              f"{PY}: torch, CUDA, NCCL, sklearn; ip ({self.ip_note or 'none here'}), root, /dev/net/tun, a netns\n"
              f"  # the congestion steps here: {self.netns or 'would run'}")
        for s in planned:
            l0, e0 = self.dry_limit, self.dry_est
            self.step(s)
            print(f"= {s}: limit {self.dry_limit - l0}s, estimate {self.dry_est - e0}s")
        print(f"# total: limits {self.dry_limit + RESERVE_S} s (preflight, steps, {RESERVE_S} s for the reports) of "
              f"--budget-s {self.budget_s}; estimated {self.dry_est + RESERVE_S} s\n"
              "# after every step: python3 -m bench gpu-report OUT (table + one JSON line), and the bundle")
        return 0


def say(msg):
    print(f"check-gpu: {msg}", file=sys.stderr, flush=True)


def die(msg):
    say(msg)
    raise SystemExit(2)


def probe(no_gpu):
    """torch, CUDA (a first tensor), NCCL, scikit-learn: one JSON line with "why" (reasons not to go on)."""
    d, why, t = {"python": platform.python_version()}, [], time.time()
    try:
        import torch
        d.update(torch=torch.__version__, torch_cuda=torch.version.cuda, import_s=round(time.time() - t, 2))
        if torch.cuda.is_available():
            t = time.time()
            torch.zeros(1, device="cuda").sum().item()
            v = torch.cuda.nccl.version()
            d.update(cuda_init_s=round(time.time() - t, 2), gpu=torch.cuda.get_device_name(0),
                     nccl=".".join(map(str, v)) if isinstance(v, tuple) else str(v))
        elif not no_gpu:
            why.append(f"torch {torch.__version__} sees no GPU (torch.cuda.is_available() is False)")
    except Exception as e:  # no torch, or a broken one
        why.append(f"torch: {type(e).__name__}: {e}")
    try:
        import sklearn
        d["sklearn"] = sklearn.__version__
    except Exception:
        d["sklearn"] = None
    print(json.dumps(dict(d, why=why)))
    return 0


def main(argv):
    argv, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    ap = argparse.ArgumentParser(prog="python -m bench gpu", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="steps, first invocation: " + " ".join(s for s, v in STEPS.items() if v[0]) +
                                 "; then (--continue): " + " ".join(s for s, v in STEPS.items() if not v[0]))
    ap.add_argument("--continue", dest="cont", action="store_true",
                    help="run what earlier invocations left (their results: --out, else the bundle in --from), appending")
    ap.add_argument("--budget-s", type=int, help="wall clock of this invocation [480; --continue 560]")
    ap.add_argument("--bundle", metavar="DIR", help="after every step: check-gpu.json, check-gpu.txt, "
                    "check-gpu-logs.tgz (< 15 MiB), and once a congestion step ran congestion.md and its plots")
    ap.add_argument("--from", dest="from_", default=".gpu/check-gpu", metavar="DIR",
                    help="--continue: an earlier bundle to continue from when --out holds no results [%(default)s]")
    ap.add_argument("--out", default="build/check-gpu", metavar="DIR",
                    help="results and logs, wiped first unless --continue [%(default)s]")
    ap.add_argument("--build", metavar="DIR", help="bin/ and lib/ [.gpu/build when it holds the plugin, else build]")
    ap.add_argument("--only", metavar="LIST", help="only these steps (with --continue: again even if they ran)")
    ap.add_argument("--plan", metavar="LIST", help="congestion_grid: the congestion bench's --plan, at the preset's rate")
    ap.add_argument("--iproute2", default=".gpu/iproute2", metavar="DIR",
                    help="scripts/fetch-iproute2.sh's folder, used when `ip` is missing [%(default)s]")
    ap.add_argument("--dry-run", action="store_true", help="print each step's parts, limits and estimates; run nothing")
    ap.add_argument("--no-gpu", action="store_true", help="test only: the congestion steps on CPU tensors (Gloo the "
                    "baseline), a smoke run of the flow; its result is never \"pass\"")
    ap.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)  # preflight's torch check, in a child
    a = ap.parse_args(argv)
    if a.probe:
        return probe(a.no_gpu)
    if a.budget_s is not None and a.budget_s <= 0:
        ap.error(f"--budget-s {a.budget_s}: a positive number of seconds")
    if bad := [s for s in (a.only or "").split(",") if s and s not in STEPS]:
        ap.error(f"--only: no step {', '.join(bad)} (steps: {' '.join(STEPS)})")
    return Check(a, extra).run()
