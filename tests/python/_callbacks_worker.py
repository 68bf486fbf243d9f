"""What each rank of test_backend_callbacks.py runs (not a test itself): one process per rank, the
"trim" backend as the default group (or gloo, for the reference runs), a scenario that saves what
it saw to rank<R>.pt for the parent to assert on."""

import datetime
import hashlib
import os
import threading
import time
import warnings

warnings.simplefilter("ignore")  # torch without numpy warns at import

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from _spawn import error_of  # noqa: E402,F401 - the scenarios report errors with it
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import nccl_trim  # noqa: E402,F401 - registers "trim"

HOLD_S = 60.0  # the longest a rank waits for its peer's signal: only a failure reaches it
GROUP_TIMEOUT_S = 2.0  # the timeout of the groups made to time out


def wait_key(store, key, seconds=HOLD_S) -> bool:
    try:
        store.wait([key], datetime.timedelta(seconds=seconds))
        return True
    except Exception:  # noqa: BLE001 - torch raises DistStoreError on timeout
        return False


# ---- item 1: a callback that issues a collective and waits for it


def callbacks(rank, world, backend):
    out = {}
    other = dist.new_group(backend=backend)
    for name, group in (("same_group", None), ("other_group", other)):
        t = torch.full((1000,), float(rank + 1))
        t2 = torch.full((1000,), float(10 * (rank + 1)))
        work = dist.all_reduce(t, async_op=True)
        fut = work.get_future().then(lambda f, g=group, x=t2: dist.all_reduce(x, group=g, async_op=True)
                                     .get_future().wait()[0].sum().item())
        out[name] = {"then": fut.wait(), "t": t.sum().item(), "t2": t2.sum().item()}
    # Two levels: a callback's collective has a callback that waits for a third (a blocking call).
    # Not on gloo: its two worker threads run callbacks, and here both wait (a deadlock).
    if backend == "gloo":
        dist.barrier()
        dist.destroy_process_group(other)
        return out
    a, b, c = torch.ones(10), torch.ones(10) * 2, torch.ones(10) * 3

    def inner(_f):
        dist.all_reduce(c)  # a blocking call from a callback
        return c.sum().item()

    def outer(_f):
        return dist.all_reduce(b, async_op=True).get_future().then(inner).wait()

    out["nested"] = dist.all_reduce(a, async_op=True).get_future().then(outer).wait()
    dist.barrier()
    dist.destroy_process_group(other)
    return out


def model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 4))


def powersgd_train(rank, steps=6):
    """DDP with torch's own PowerSGD hook (rank 1, from step 2: both the uncompressed and the
    compressed paths run); the final parameters' hash."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
    m = model(1)
    ddp = DDP(m)
    state = powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
    ddp.register_comm_hook(state, powerSGD.powerSGD_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)
    for _ in range(steps):
        x = torch.randn(8, 16, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), torch.sin(x[:, :4])).backward()
        opt.step()
    h = hashlib.sha256()
    for p in m.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return {"hash": h.hexdigest(), "iter": state.iter}


def powersgd(rank, world, backend):
    return powersgd_train(rank)


# ---- item 2: Gloo's Work semantics


def semantics(rank, world, backend):
    out = {}
    store = dist.distributed_c10d._get_default_store()
    # The future is complete, and the callbacks it had run, before wait() returns. Rank 1 joins
    # only once rank 0 has attached its callback: rank 0's is attached before the collective can
    # complete (rank 1's may not be: its own call completes it at once).
    for via in ("dist", "backend"):
        t = torch.ones(1000)
        seen = {}
        if rank == 1:
            seen["released"] = wait_key(store, f"test/{backend}/{via}/attached")
        if via == "dist":
            work = dist.all_reduce(t, async_op=True)
        else:  # the backend's own Work (what dist.* wraps): its is_completed() is Gloo's
            pg = dist.distributed_c10d._get_default_group()
            opts = dist.AllreduceOptions()
            work = pg._get_backend(torch.device("cpu")).allreduce([t], opts)
        fut = work.get_future()

        def slow(f, seen=seen, work=work):
            seen["future_done_in_callback"] = f.done()
            seen["completed_in_callback"] = work.is_completed() if via == "backend" else None
            time.sleep(0.3)
            seen["callback_ended"] = True
            return f.value()

        seen["done_at_attach"] = fut.done()
        chained = fut.then(slow)
        if rank == 0:
            store.set(f"test/{backend}/{via}/attached", "1")
        work.wait()
        seen["callback_ended_at_wait"] = seen.get("callback_ended", False)
        seen["future_done_at_wait"] = fut.done()
        seen["completed_at_wait"] = work.is_completed() if via == "backend" else None
        seen["value_ok"] = bool(torch.all(t == world))
        chained.wait()
        out[via] = seen

    # wait(timeout): rank 1 joins only once rank 0's wait has timed out; the Work then completes.
    w = None
    if rank == 1:
        out["released"] = wait_key(store, f"test/{backend}/timed_out")
    t = torch.full((1000,), float(rank + 1))
    w = dist.all_reduce(t, async_op=True)
    if rank == 0:
        out["wait_timeout"] = error_of(lambda: w.wait(timeout=datetime.timedelta(seconds=0.5)))
        store.set(f"test/{backend}/timed_out", "1")
    w.wait()
    out["after_timeout_ok"] = bool(torch.all(t == world * (world + 1) / 2)) and w.get_future().done()

    # A failed collective: the error on wait(), on the future, on a chained future.
    if backend == "trim":
        bad = dist.new_group(backend="trim")
        x = torch.ones(1000 + 24 * rank)
        w = dist.all_reduce(x, group=bad, async_op=True)
        chained = w.get_future().then(lambda f: f.value())
        out["error_wait"] = error_of(w.wait)
        out["error_future"] = error_of(w.get_future().wait)
        out["error_chained"] = error_of(chained.wait)
        out["error_future_done"] = w.get_future().done()
        blocking = error_of(lambda: dist.all_reduce(torch.ones(3), group=bad))
        out["error_after"] = blocking
        dist.barrier()
        dist.destroy_process_group(bad)
    dist.barrier()
    return out


def timeouts(rank, world, backend):
    """A group made with timeout=GROUP_TIMEOUT_S, a collective rank 1 never joins: rank 0's fails
    after the group's timeout (torch's own test: no earlier, and with one of ' Timed out ',
    ' closed ', ' timeout ' in the text). Then a barrier's own timeout= (shorter) on a group with a
    long one."""
    out = {}
    store = dist.distributed_c10d._get_default_store()
    for name, call in (("all_reduce", lambda g: dist.all_reduce(torch.ones(100), group=g)),
                       ("barrier", lambda g: dist.barrier(group=g)),
                       ("async_wait", lambda g: dist.all_reduce(torch.ones(100), group=g, async_op=True).wait())):
        g = dist.new_group(backend=backend, timeout=datetime.timedelta(seconds=GROUP_TIMEOUT_S))
        if rank == 0:
            out[name] = error_of(lambda: call(g))
            store.set(f"test/{backend}/{name}", "1")
        else:
            wait_key(store, f"test/{backend}/{name}")
        dist.barrier()
    g = dist.new_group(backend=backend, timeout=datetime.timedelta(seconds=300))
    if rank == 0:
        out["barrier_arg"] = error_of(lambda: dist.barrier(group=g, timeout=datetime.timedelta(seconds=1)))
        store.set(f"test/{backend}/barrier_arg", "1")
    else:
        wait_key(store, f"test/{backend}/barrier_arg")
    dist.barrier()
    return out


def init_timeout(rank, world, backend):
    """The default group's timeout (init_process_group(timeout=GROUP_TIMEOUT_S), set by the
    parent): rank 0's all_reduce that rank 1 never joins fails after it."""
    out = {}
    store = dist.distributed_c10d._get_default_store()
    if rank == 0:
        out["all_reduce"] = error_of(lambda: dist.all_reduce(torch.ones(100)))
        store.set(f"test/{backend}/init_timeout", "1")
    else:
        wait_key(store, f"test/{backend}/init_timeout")
    return out


SCENARIOS = {"callbacks": callbacks, "powersgd": powersgd, "semantics": semantics, "timeouts": timeouts,
             "init_timeout": init_timeout}
