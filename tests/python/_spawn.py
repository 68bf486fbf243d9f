"""Runs a scenario on N ranks of a backend, one spawned process per rank, for the backend tests
that compare trim with gloo (test_backend_callbacks.py, test_backend_ops.py).

A worker module (_callbacks_worker, _ops_worker) has SCENARIOS: name -> f(rank, world, backend)
returning what that rank saw; worker_main() runs one in a rank and saves it to rank<R>.pt.
"""

import datetime
import importlib
import os
import shutil
import sys
import tempfile
import time

from _support import rank_context, require_torch

DEADLINE_S = 90  # per scenario, all ranks: spawn, import torch, init, the scenario (~10 s alone)


def error_of(call):
    """(type name, text, seconds) of what call() raised; None if it returned (a worker's
    scenarios report errors with it)."""
    import torch.distributed as dist
    t0 = time.monotonic()
    try:
        call()
    except Exception as e:  # noqa: BLE001 - the test asserts on it
        return {"type": type(e).__name__, "text": str(e), "seconds": time.monotonic() - t0,
                "dist_error": isinstance(e, dist.DistError)}
    return None


def worker_main(module, rank, world, scenario, backend, rdzv, out_dir, timeout_s=None):
    """One rank: the group (the default one, on `backend`), the scenario, its result saved."""
    import torch
    import torch.distributed as dist

    import nccl_trim  # noqa: F401 - registers "trim"
    os.environ.setdefault("NCCL_TRIM_IFNAME", "lo")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    kwargs = {} if timeout_s is None else {"timeout": datetime.timedelta(seconds=timeout_s)}
    dist.init_process_group(backend, init_method=f"file://{rdzv}", rank=rank, world_size=world, **kwargs)
    # A scenario that ends its process itself saves its result there first.
    os.environ["TRIM_SPAWN_RESULT"] = os.path.join(out_dir, f"rank{rank}.pt")
    result = importlib.import_module(module).SCENARIOS[scenario](rank, world, backend)
    torch.save(result, os.environ["TRIM_SPAWN_RESULT"])
    if dist.is_initialized():  # a scenario may end its group itself
        dist.destroy_process_group()


class Run:
    """`scenario` of worker `module` on `world` ranks of `backend`, started; result() waits for
    it. A rank still running DEADLINE_S after the start is killed and fails the test (a
    deadlock). Ranks listed in `may_die` may end without a result (a scenario that kills one)."""

    def __init__(self, module, scenario, backend, world=2, timeout_s=None, may_die=()):
        require_torch()
        self.scenario, self.backend, self.world, self.may_die = scenario, backend, world, set(may_die)
        self.tmp = tempfile.mkdtemp(prefix="trim-spawn-")
        self.t0 = time.monotonic()
        ctx = rank_context()
        self.procs = [ctx.Process(target=worker_main,
                                  args=(module, r, world, scenario, backend, os.path.join(self.tmp, "rdzv"), self.tmp,
                                        timeout_s))
                      for r in range(world)]
        for p in self.procs:
            p.start()

    def result(self):
        """(the ranks' results (None for a rank in may_die without one), the wall time)."""
        torch = require_torch()
        try:
            deadline = self.t0 + DEADLINE_S
            for p in self.procs:
                p.join(timeout=max(0.0, deadline - time.monotonic()))
            hung = [r for r, p in enumerate(self.procs) if p.is_alive()]
            self.kill()
            if hung:
                raise AssertionError(f"{self.scenario} on {self.backend}: ranks {hung} still running after "
                                     f"{DEADLINE_S} s (a deadlock)")
            codes = [p.exitcode for p in self.procs]
            bad = [r for r, c in enumerate(codes) if c != 0 and r not in self.may_die]
            if bad:
                raise AssertionError(f"{self.scenario} on {self.backend}: exit codes {codes}")
            out = []
            for r in range(self.world):
                path = os.path.join(self.tmp, f"rank{r}.pt")
                out.append(torch.load(path, weights_only=False) if os.path.exists(path) or r not in self.may_die
                           else None)
            return out, time.monotonic() - self.t0
        finally:
            self.kill()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def kill(self):
        for p in self.procs:
            if p.is_alive():
                p.kill()
        for p in self.procs:
            p.join()


def run_both(module, scenario, **kwargs):
    """(trim's ranks, gloo's ranks), both backends run at the same time (the scenarios wait on
    peers and timeouts far more than they compute, so this halves the suite's time without
    crowding either); the times are printed."""
    runs = {backend: Run(module, scenario, backend, **kwargs) for backend in ("trim", "gloo")}
    got = {}
    try:
        for backend, run in runs.items():
            got[backend], seconds = run.result()
            print(f"\n    ({scenario} on {backend}: {seconds:.1f} s)", file=sys.stderr, end="")
    finally:
        for run in runs.values():
            run.kill()
    return got["trim"], got["gloo"]
