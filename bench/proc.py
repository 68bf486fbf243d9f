"""Processes for the benches: CPU seconds of a command and its children, trim-switch started in
UDP mode with its port, process groups killed on the way out."""

import atexit
import json
import os
import resource
import signal
import subprocess
import time

_groups = []


def _kill_all():
    for p in _groups:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass


atexit.register(_kill_all)


def spawn(cmd, **kw):
    """Popen in a session of its own, killed (with everything it started) when this process exits."""
    p = subprocess.Popen(cmd, start_new_session=True, **kw)
    _groups.append(p)
    return p


def stop(p, timeout_s=5):
    """SIGTERM to the process group, SIGKILL after TIMEOUT_S; returns the exit status."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
            return p.wait(timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            os.killpg(p.pid, signal.SIGKILL)
    return p.wait()


def cpu_run(cmd, timeout_s=None, **kw):
    """Run CMD (list) to its end; returns (returncode, cpu_s, wall_s, stdout) where cpu_s is user +
    system time of it and every process it waited for (the ranks), as /usr/bin/time counts it.
    returncode 124 when TIMEOUT_S ran out (the group is killed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = spawn(cmd, stdout=kw.pop("stdout", subprocess.PIPE), text=True, **kw)
    try:
        out, _ = p.communicate(timeout=timeout_s)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        stop(p, 1)
        out, rc = "", 124
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return rc, round(cpu, 3), round(time.monotonic() - t0, 3), out or ""


def start_switch(binary, args, log, timeout_s=5.0):
    """trim-switch in UDP mode (stdout to the file LOG); returns (process, port) once its first line
    says {"event":"listening","port":N}. Raises RuntimeError when it exits or is silent first."""
    with open(log, "w") as fh:  # the child keeps its own copy
        p = spawn([str(binary), *map(str, args)], stdout=fh)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(log) as f:
                first = json.loads(f.readline())
            if first.get("event") == "listening":
                return p, int(first["port"])
        except (OSError, ValueError):
            pass
        if p.poll() is not None:
            raise RuntimeError(f"trim-switch exited ({p.returncode}) before listening; see {log}")
        time.sleep(0.01)
    stop(p)
    raise RuntimeError(f"trim-switch said nothing within {timeout_s} s; see {log}")
