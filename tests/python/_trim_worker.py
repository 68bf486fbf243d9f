"""What each rank of test_backend.py runs (not a test itself): one process per rank, with the "trim"
backend as the default group and a gloo group beside it as the reference. Each scenario saves what
it saw to rank<R>.pt; the parent asserts on all ranks' files."""

import hashlib
import os
import signal
import threading
import time
import warnings

warnings.simplefilter("ignore")  # torch without numpy warns at import

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import nccl_trim  # noqa: E402,F401 - registers "trim"
from nccl_trim import plugin  # noqa: E402
from _support import fsdp_train  # noqa: E402

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
          torch.int64, torch.bool)
OPS = (dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX)
HOLD_S = float(os.environ.get("TRIM_TEST_HOLD_S", "60"))  # the longest a rank waits for a signal: only a failure reaches it


def wait_key(store, key, seconds) -> bool:
    """Waits until `key` is in the store; False if it is not there within `seconds`."""
    import datetime
    try:
        store.wait([key], datetime.timedelta(seconds=seconds))
        return True
    except Exception:  # noqa: BLE001 - torch raises DistStoreError (a RuntimeError) on timeout
        return False


class InFlight:
    """Stands in for a trim group's communicator (TrimBackend._comm) and tells when each
    all_reduce has entered the library (entered[i]: it runs, on the worker or the caller's thread,
    blocked on a peer that has not joined) and when it has returned (left[i])."""

    def __init__(self, comm, calls):
        self._comm = comm
        self.entered = [threading.Event() for _ in range(calls)]
        self.left = [threading.Event() for _ in range(calls)]
        self._next = 0

    def all_reduce(self, *args):
        i, self._next = self._next, self._next + 1
        self.entered[i].set()
        try:
            return self._comm.all_reduce(*args)
        finally:
            self.left[i].set()

    def running(self, i) -> bool:
        return self.entered[i].is_set() and not self.left[i].is_set()

    def __getattr__(self, name):  # abort, close, ...: the communicator's own
        return getattr(self._comm, name)


def params_hash(model) -> str:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def inputs(dtype, n, rank, salt):
    g = torch.Generator().manual_seed(1009 * salt + rank)
    if dtype == torch.bool:
        return torch.rand(n, generator=g) < 0.5
    if dtype.is_floating_point:
        return (torch.randn(n, generator=g) * 3).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, (n,), generator=g, dtype=torch.int64).to(dtype)


def reference(parts, op, world):
    """The reduction of every rank's input as the engine computes it for 2 ranks (any order of two
    operands gives the same bits); AVG as NCCL's: floats premultiplied by 1/n, integers divided
    after (truncating)."""
    dtype = parts[0].dtype
    if dtype == torch.bool:
        stack = torch.stack(parts)
        return stack.any(0) if op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX) else stack.all(0)

    def widen(x):
        return x.float() if dtype in (torch.float16, torch.bfloat16) else x

    xs = [widen(p) for p in parts]
    if op == dist.ReduceOp.AVG and dtype.is_floating_point:
        xs = [widen((x * (1.0 / world)).to(dtype)) for x in xs]
    acc = xs[-1]
    for x in reversed(xs[:-1]):
        if op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            acc = (x + acc).to(dtype)
        elif op == dist.ReduceOp.PRODUCT:
            acc = (x * acc).to(dtype)
        elif op == dist.ReduceOp.MIN:
            acc = torch.minimum(x, acc).to(dtype)
        else:
            acc = torch.maximum(x, acc).to(dtype)
        acc = widen(acc)
    acc = acc.to(dtype)
    if op == dist.ReduceOp.AVG and not dtype.is_floating_point:
        acc = torch.div(acc, world, rounding_mode="trunc").to(dtype)
    return acc


def gathered(t, group):
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, t, group=group)
    return parts


def model(seed, width=64):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, width), torch.nn.Tanh(), torch.nn.Linear(width, width),
                               torch.nn.Tanh(), torch.nn.Linear(width, 4))


def train(ddp, steps, rank, seed=0, lr=0.05, batches=0):
    """SGD on y = sin(2 x[:4]) + x[4:8] / 2; fresh batches, or `batches` fixed ones cycled (a loss
    that can fall far: the test of training under trimming needs a clear signal)."""
    opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed * 100 + rank)
    fixed = [torch.randn(16, 32, generator=g) for _ in range(batches)]
    losses = []
    for step in range(steps):
        x = fixed[step % batches] if batches else torch.randn(16, 32, generator=g)
        y = torch.sin(x[:, :4] * 2.0) + 0.5 * x[:, 4:8]
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


class TwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x, use_b=True):
        return self.b(self.a(x)) if use_b else self.a(x)


DDP_FEATURES = ("gradient_as_bucket_view", "static_graph", "find_unused_parameters", "no_sync", "join")


def ddp_feature(name, rank, group):
    """A few SGD steps of TwoLayers under one DDP feature; the final parameters' hash."""
    from torch.distributed.algorithms.join import Join
    torch.manual_seed(0)
    kwargs = {name: True} if name in DDP_FEATURES[:3] else {}
    m = DDP(TwoLayers(), process_group=group, **kwargs)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    if name == "no_sync":
        with m.no_sync():  # accumulated locally, reduced with the next backward
            m(torch.randn(4, 8, generator=g)).sum().backward()
        m(torch.randn(4, 8, generator=g)).sum().backward()
        opt.step()
    elif name == "join":
        with Join([m]):  # uneven inputs: rank 1 runs two steps more
            for _ in range(3 + 2 * rank):
                opt.zero_grad()
                m(torch.randn(4, 8, generator=g)).sum().backward()
                opt.step()
    else:
        for i in range(4):
            opt.zero_grad()
            use_b = name != "find_unused_parameters" or i % 2 == 0  # b unused every other step
            m(torch.randn(4, 8, generator=g), use_b=use_b).sum().backward()
            opt.step()
    return params_hash(m.module)


# ---- scenarios


def compare(rank, world, gloo):
    out = {}
    # DDP through trim and through gloo: the same model, data and steps.
    runs = {}
    for name, group in (("trim", None), ("gloo", gloo)):
        m = model(0)
        ddp = DDP(m, process_group=group, bucket_cap_mb=0.01)
        train(ddp, 5, rank)
        runs[name] = params_hash(m)
    out["ddp"] = runs

    # DDP's options and context managers, each through both backends.
    out["ddp_features"] = {name: {b: ddp_feature(name, rank, group) for b, group in (("trim", None), ("gloo", gloo))}
                           for name in DDP_FEATURES}

    # FSDP1 (FULL_SHARD: all_gather_into_tensor and reduce_scatter_tensor) likewise.
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    fsdp = {}
    for name, group in (("trim", None), ("gloo", gloo)):
        torch.manual_seed(3)
        f = FSDP(torch.nn.Sequential(torch.nn.Linear(32, 301), torch.nn.Tanh(), torch.nn.Linear(301, 7)),
                 process_group=group, device_id=torch.device("cpu"), use_orig_params=True)
        fsdp[name] = hashlib.sha256(b"".join(p.numpy().tobytes() for p in fsdp_train(f, rank))).hexdigest()
    out["fsdp"] = fsdp

    # Every dtype and op against the reduction of every rank's input (gathered through gloo).
    mismatches = []
    for dtype in DTYPES:
        for op in OPS:
            if dtype == torch.bool and op == dist.ReduceOp.AVG:
                continue
            x = inputs(dtype, 1001, rank, DTYPES.index(dtype) * 10 + OPS.index(op))
            got = x.clone()
            dist.all_reduce(got, op=op)
            want = reference(gathered(x, gloo), op, world)
            if not torch.equal(got, want):
                mismatches.append(f"{dtype} {op}")
    out["all_reduce_mismatches"] = mismatches

    # The other collectives, against gloo's answers to the same calls.
    x = inputs(torch.float32, 777, rank, 77)
    same = {}
    b_trim, b_gloo = x.clone(), x.clone()
    dist.broadcast(b_trim, src=1)
    dist.broadcast(b_gloo, src=1, group=gloo)
    same["broadcast"] = torch.equal(b_trim, b_gloo)
    same["all_gather"] = all(torch.equal(a, b) for a, b in zip(gathered(x, None), gathered(x, gloo)))
    into = torch.empty(world * 777)
    dist.all_gather_into_tensor(into, x)
    same["all_gather_into_tensor"] = torch.equal(into, torch.cat(gathered(x, gloo)))
    big = inputs(torch.float32, 500 * world, rank, 78)
    rs_trim, rs_gloo = torch.empty(500), torch.empty(500)
    dist.reduce_scatter_tensor(rs_trim, big)
    dist.reduce_scatter_tensor(rs_gloo, big, group=gloo)
    same["reduce_scatter_tensor"] = torch.equal(rs_trim, rs_gloo)
    chunks = list(big.chunk(world))
    dist.reduce_scatter(rs_trim, chunks)
    same["reduce_scatter"] = torch.equal(rs_trim, rs_gloo)
    nc = inputs(torch.float32, 60, rank, 79).view(6, 10).t()  # non-contiguous
    nc_g = nc.clone()
    dist.all_reduce(nc)
    dist.all_reduce(nc_g, group=gloo)
    same["non_contiguous"] = torch.equal(nc, nc_g) and not nc.is_contiguous()
    empty = torch.empty(0)
    dist.all_reduce(empty)
    dist.barrier()
    out["same_as_gloo"] = same

    # Async: rank 1 is held back (a store key) until rank 0's async call has returned and rank 0
    # has looked at its Work; so that call cannot have completed by then, and had it blocked until
    # the collective ran, rank 1 would never be released (it gives up after HOLD_S and joins anyway).
    store = dist.distributed_c10d._get_default_store()
    t = torch.ones(1 << 16)
    released = None
    if rank == 1:
        released = wait_key(store, "test/async_go", HOLD_S)
    work = dist.all_reduce(t, async_op=True)
    # The future's state, not work.is_completed(): the Work torch hands out wraps the backend's and
    # says False whatever happened.
    completed_at_return = work.get_future().done()
    if rank == 0:
        store.set("test/async_go", "1")
    chained = work.get_future().then(lambda f: f.value()[0].sum().item())
    work.wait()
    out["async"] = {"released": released, "completed_at_return": completed_at_return, "then": chained.wait(),
                    "value_ok": bool(torch.all(t == world))}

    # Bad calls are refused before anything is sent; the group stays usable.
    refusals = {}
    for name, call in (("reduce_band", lambda: dist.reduce(torch.ones(3, dtype=torch.int32), dst=0,
                                                           op=dist.ReduceOp.BAND)),
                       ("int16", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16))),
                       ("float8", lambda: dist.all_reduce(torch.ones(3).to(torch.float8_e5m2))),
                       ("band", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist.ReduceOp.BAND)),
                       ("bad_splits", lambda: dist.all_to_all_single(torch.empty(4), torch.ones(4), [1, 1], [3, 3])),
                       ("uneven_all_gather", lambda: dist.all_gather([torch.empty(3), torch.empty(4)],
                                                                     torch.ones(3 + rank)))):
        try:
            call()
            refusals[name] = None
        except Exception as e:  # noqa: BLE001 - the test asserts on the type and text
            refusals[name] = (type(e).__name__, isinstance(e, nccl_trim.UnsupportedError), str(e))
    after = torch.ones(5)
    dist.all_reduce(after)
    out["refusals"] = refusals
    out["usable_after_refusals"] = bool(torch.all(after == world))

    # The comm hook on a trim model: its group is a trim group tagged with the hook's class, which
    # the plugin counts, and its buckets go out as "rotated".
    loaded = plugin.loaded_plugin()
    before = (loaded.hook_comms(), loaded.rotated_messages(), loaded.hook_send_conns(), loaded.undeclared_conns())
    m = model(0, width=512)  # 280k parameters: ring slices above NCCL_TRIM_MIN_BYTES
    hooked = DDP(m)
    state = nccl_trim.register(hooked)
    train(hooked, 3, rank)
    plain = model(0, width=512)
    train(DDP(plain), 3, rank)
    diff = max((a - b).abs().max().item() for a, b in zip(m.parameters(), plain.parameters()))
    scale = max(p.abs().max().item() for p in plain.parameters())
    out["hook"] = {"backend": state.hook_group._get_backend(torch.device("cpu")).name(),
                   "traffic_class": state.hook_group._get_backend(torch.device("cpu")).trim_options.traffic_class,
                   "plugin_class": loaded.traffic_class(), "hook_comms": loaded.hook_comms() - before[0],
                   "rotated_messages": loaded.rotated_messages() - before[1],
                   "rotated_conns": loaded.hook_send_conns() - before[2],
                   "undeclared_conns": loaded.undeclared_conns() - before[3], "rel_diff": diff / scale,
                   "hash": params_hash(m)}

    # Last (it fails the group): rank 1 passes 1024 elements where rank 0 passes 1000.
    t0 = time.monotonic()
    try:
        dist.all_reduce(torch.ones(1000 + 24 * rank))
        out["mismatch"] = None
    except Exception as e:  # noqa: BLE001
        out["mismatch"] = {"type": type(e).__name__, "dist_error": isinstance(e, dist.DistBackendError),
                           "trim_error": isinstance(e, nccl_trim.CollectiveError), "text": str(e),
                           "seconds": time.monotonic() - t0}
    try:
        dist.all_reduce(torch.ones(3))
        out["after_failure"] = None
    except Exception as e:  # noqa: BLE001
        out["after_failure"] = str(e)
    return out


def ring4(rank, world, gloo):
    """4 ranks: float sums against the ring's own summation order, replicas bit-identical."""
    out = {}
    x = inputs(torch.float32, 2_500_003, rank, 5)  # 10 MB: 2 loops of 4 x 2 MiB, then an uneven one
    got = x.clone()
    dist.all_reduce(got)
    out["all_reduce"] = got
    out["inputs_all_reduce"] = gathered(x, gloo)
    y = inputs(torch.bfloat16, 300_007, rank, 6)
    got_bf = y.clone()
    dist.all_reduce(got_bf)
    out["bf16"] = got_bf
    out["inputs_bf16"] = gathered(y, gloo)
    z = inputs(torch.float32, 4 * 70_001, rank, 7)
    rs = torch.empty(70_001)
    dist.reduce_scatter_tensor(rs, z)
    out["reduce_scatter"] = rs
    out["inputs_reduce_scatter"] = gathered(z, gloo)
    runs = {}
    for name, group in (("trim", None), ("gloo", gloo)):
        m = model(1)
        train(DDP(m, process_group=group, bucket_cap_mb=0.01), 5, rank, seed=1)
        runs[name] = [p.detach().clone() for p in m.parameters()]
        runs[name + "_hash"] = params_hash(m)
    out["ddp"] = runs
    return out


def tagged_all_reduce(rank, gloo):
    """An all_reduce of spiky data (not rotated: its energy is far from even) on a trim group
    tagged with the hook's traffic class, under trimming: its NMSE against the exact sum, and what
    the plugin counted for the group."""
    from nccl_trim.backend import Options
    g = torch.Generator().manual_seed(500 + rank)
    x = torch.randn(1 << 18, generator=g)  # 1 MiB of fp32: ring slices above NCCL_TRIM_MIN_BYTES
    x[::4096] *= 300.0
    exact = x.clone()
    dist.all_reduce(exact, group=gloo)
    loaded = plugin.loaded_plugin()
    before = (loaded.undeclared_conns(), loaded.hook_send_conns(), loaded.rotated_messages())
    unrotated = loaded.stats()["quiet_messages"]
    group = dist.new_group(backend="trim", pg_options=Options(traffic_class=plugin.hook_traffic_class()))
    # A connection that has seen no trim for NCCL_TRIM_QUIET_MS goes quiet (exact, or with
    # NCCL_TRIM_QUIET_LAYOUT=unrotated sign rows, which on this spiky data lose most of their
    # spikes when trimmed: NMSE 0.06-0.39 measured when new connections started quiet). A new one
    # is encoded; one all_reduce first all the same, so that the one measured runs on warm
    # connections whose trims have been reported.
    warm = x.clone()
    dist.all_reduce(warm, group=group)
    got = x.clone()
    dist.all_reduce(got, group=group)
    dist.destroy_process_group(group)  # folds its connections' counters into stats()
    after = (loaded.undeclared_conns(), loaded.hook_send_conns(), loaded.rotated_messages())
    nmse = ((got.double() - exact.double()).pow(2).sum() / exact.double().pow(2).sum()).item()
    return {"nmse": nmse, "undeclared_conns": after[0] - before[0], "rotated_conns": after[1] - before[1],
            "rotated_messages": after[2] - before[2],
            "quiet_messages": loaded.stats()["quiet_messages"] - unrotated}


def trimmed(rank, world, gloo):
    """Random trimming at the receivers (NCCL_TRIM_TEST_TRIM, set by the parent): training goes on,
    replicas stay identical, and the plugin did trim. Then a group tagged with the hook's class
    that no hook declared (per-hop rht: accurate), and one declared (sent as rotated: what trusting
    a tag would cost on data that is not rotated)."""
    m = model(2, width=512)  # 280k parameters: ring slices above NCCL_TRIM_MIN_BYTES, so trimmable
    losses = train(DDP(m), 40, rank, seed=2, lr=0.1, batches=4)
    h = params_hash(m)
    undeclared = tagged_all_reduce(rank, gloo)
    plugin.loaded_plugin().declare(plugin.hook_traffic_class(), 15)  # what register() does
    declared = tagged_all_reduce(rank, gloo)
    dist.destroy_process_group()  # the plugin folds a connection's counters in when it closes
    return {"losses": losses, "hash": h, "stats": plugin.loaded_plugin().stats(), "undeclared": undeclared,
            "declared": declared}


def killed(rank, world, gloo):
    """Rank world-1 dies (SIGKILL) in the middle of training; the others must fail clearly."""
    m = model(3, width=256)
    ddp = DDP(m)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    for step in range(1000):
        if rank == world - 1 and step == 3:
            with open(os.environ["TRIM_TEST_KILL_FILE"], "w") as f:
                f.write(repr(time.monotonic()))
            os.kill(os.getpid(), signal.SIGKILL)
        x = torch.randn(16, 32, generator=g)
        try:
            opt.zero_grad()
            ddp(x).pow(2).mean().backward()
            opt.step()
        except Exception as e:  # noqa: BLE001 - DDP's backward raises what the bucket's future failed with
            return {"step": step, "type": type(e).__name__, "text": str(e), "at": time.monotonic()}
    return {"step": None}


def aborted(rank, world, gloo):
    """Rank 0 blocks in an all_reduce that rank 1 never joins; another thread aborts the group.
    Then an async all_reduce queued behind a blocked one is failed by shutdown, not left hanging."""
    out = {}
    if rank == 0:
        backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
        threading.Timer(0.5, backend.abort).start()
        t0 = time.monotonic()
        try:
            dist.all_reduce(torch.ones(1000))
            out["blocked"] = None
        except Exception as e:  # noqa: BLE001
            out["blocked"] = {"seconds": time.monotonic() - t0, "text": str(e)}
        try:
            dist.all_reduce(torch.ones(3))
            out["after"] = None
        except Exception as e:  # noqa: BLE001
            out["after"] = str(e)
    dist.barrier(group=gloo)  # rank 1 waits here for rank 0's abort

    # A new trim group: rank 0 queues two async all_reduces; rank 1 joins none, and rank 0 shuts the
    # group down with abort: both Works must complete with an error, none may hang.
    # w1 is known to run (its all_reduce entered the communicator on the worker thread; rank 1 joins no
    # collective of g2) before w2 is submitted; w2's submit must return while w1 still runs. Had it
    # waited for w1, only the watchdog's abort (after HOLD_S) would end the wait, and w1 would no
    # longer be running when it returned.
    g2 = dist.new_group(backend="trim")
    if rank == 0:
        b2 = g2._get_backend(torch.device("cpu"))
        probe = b2._comm = InFlight(b2._comm, 2)
        watchdog = threading.Timer(HOLD_S, b2.abort)
        watchdog.start()
        w1 = dist.all_reduce(torch.ones(1000), group=g2, async_op=True)
        out["first_running"] = probe.entered[0].wait(HOLD_S) and probe.running(0)
        try:
            w2 = dist.all_reduce(torch.ones(1000), group=g2, async_op=True)
            second_submit_error = None
        except Exception as e:  # noqa: BLE001 - the watchdog's abort came first
            w2, second_submit_error = None, str(e)
        out["first_running_after_second_submit"] = probe.running(0)
        out["second_completed_at_submit"] = w2 is not None and w2.get_future().done()
        watchdog.cancel()
        b2.abort()
        results = []
        for w in (w1, w2):
            try:
                if w is None:
                    raise RuntimeError(second_submit_error)
                w.wait()
                results.append(None)
            except Exception as e:  # noqa: BLE001
                results.append(str(e))
        out["queued"] = results
    dist.barrier(group=gloo)
    return out


def mixed(rank, world, gloo):
    """"cpu:trim,cuda:nccl" on a GPU machine: CPU tensors through the trim backend, CUDA tensors
    through NCCL, both through the one plugin object in this process (NCCL_NET_PLUGIN names the same
    file the trim backend loads). Ranks share the GPU, each with its own NCCL_HOSTID."""
    pg = dist.distributed_c10d._get_default_group()
    cpu, gpu = torch.ones(1000), torch.ones(1000, device="cuda")
    dist.all_reduce(cpu)
    dist.all_reduce(gpu)
    torch.cuda.synchronize()
    return {"cpu_backend": pg._get_backend(torch.device("cpu")).name(),
            "cuda_backend": pg._get_backend(torch.device("cuda")).name(),
            "cpu_ok": bool(torch.all(cpu == world)), "cuda_ok": bool(torch.all(gpu.cpu() == world))}


SCENARIOS = {"compare": compare, "ring4": ring4, "trimmed": trimmed, "killed": killed, "aborted": aborted,
             "mixed": mixed}


def main(rank, world, scenario, rdzv, out_dir, extra_env):
    os.environ.update(extra_env)
    os.environ.setdefault("NCCL_TRIM_IFNAME", "lo")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    # Each rank's own fault-injection stream, as trim-harness gives them.
    os.environ["NCCL_TRIM_TEST_SEED"] = str(1000 + rank)
    torch.set_num_threads(1)
    backend = "trim"
    if scenario == "mixed":
        os.environ["NCCL_HOSTID"] = f"trim-test-host-{rank}"  # every rank its own node: NET only
        torch.cuda.set_device(0)
        backend = "cpu:trim,cuda:nccl"
    dist.init_process_group(backend, init_method=f"file://{rdzv}", rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    result = SCENARIOS[scenario](rank, world, gloo)
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    if dist.is_initialized() and scenario != "killed":
        dist.destroy_process_group()


# ---- destroy and re-init on a store that outlives the groups (test_backend.BackendReinitTest)


class WatchedStore(dist.Store):
    """A rank's view of the shared TCPStore: records every read of a trim backend's key (and
    whether it was already there), and, once armed, tells the other rank (key test/first_read)
    whether the first such read found a value waiting or had to wait for one."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.reads = []
        self.armed = False

    def get(self, key):
        if "nccl_trim/" not in key:
            return self.inner.get(key)
        there = self.inner.check([key])
        self.reads.append((key, there))
        if not self.armed:
            return self.inner.get(key)
        self.armed = False
        if there:  # read it first: nobody may write the key before this read is done
            value = self.inner.get(key)
            self.inner.set("test/first_read", "found")
            return value
        self.inner.set("test/first_read", "waited")
        return self.inner.get(key)

    def set(self, key, value):
        self.inner.set(key, value)

    def add(self, key, amount):
        return self.inner.add(key, amount)

    def check(self, keys):
        return self.inner.check(keys)

    def wait(self, keys, timeout=None):
        return self.inner.wait(keys) if timeout is None else self.inner.wait(keys, timeout)

    def compare_set(self, key, expected, desired):
        return self.inner.compare_set(key, expected, desired)

    def delete_key(self, key):
        return self.inner.delete_key(key)

    def num_keys(self):
        return self.inner.num_keys()

    def set_timeout(self, timeout):
        return self.inner.set_timeout(timeout)


REINIT_TIMEOUT_S = 10.0  # the groups' timeout (connect): a group that connects to a dead one fails in time


def reinit_main(rank, world, port, out_dir):
    """Two trim default groups, one after the other, on the same TCPStore (its server in the
    parent): init, all_reduce, destroy, then again. In the second, rank 1 starts first and rank 0
    only once rank 1 has made its first read of the new group's keys; so whatever rank 1 finds
    there then was left by the first group (the keys of a dead communicator, whose listeners are
    closed). Saves, per generation, whether its all_reduce summed right (or the error) and the trim
    keys read."""
    import datetime
    os.environ.setdefault("NCCL_TRIM_IFNAME", "lo")
    torch.set_num_threads(1)
    client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=HOLD_S))
    store = WatchedStore(client)
    out = {"generations": [], "first_read": None}
    for gen in range(2):
        if gen == 1:
            if rank == 1:
                store.armed = True
            else:
                out["first_read"] = client.get("test/first_read").decode() if wait_key(
                    client, "test/first_read", HOLD_S) else None
        start = len(store.reads)
        result = {"ok": False, "error": None}
        try:
            dist.init_process_group("trim", store=store, rank=rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=REINIT_TIMEOUT_S))
            t = torch.full((1000,), float(rank + 1))
            dist.all_reduce(t)
            result["ok"] = bool(torch.all(t == world * (world + 1) / 2))
        except Exception as e:  # noqa: BLE001 - the test asserts on it
            result["error"] = f"{type(e).__name__}: {e}"
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
        result["reads"] = store.reads[start:]
        out["generations"].append(result)
    torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
