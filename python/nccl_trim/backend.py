"""The torch.distributed backend "trim": CPU collectives through the nccl-trim plugin.

    import nccl_trim                        # registers "trim" (so does pip's entry point)
    dist.init_process_group("trim")         # or "cpu:trim,cuda:nccl"

Each process group opens one ring communicator of libtrim-coll (nccl_trim.coll), which drives the
same libnccl-net-trim.so that NCCL loads, through its ncclNet ABI and the profiler event chain,
exactly as NCCL's proxy does; so the plugin trims what it would trim under NCCL: float32, bfloat16
and float16 SUM/AVG in the reduce-scatter half of an all_reduce (and every step of a
reduce_scatter), never integers, broadcasts, all_gathers or the allgather half. Handles travel
through torch's Store: ranks on different machines work as under gloo.

Operations run on one worker thread per group, in the order they were issued (every rank must
issue the same collectives in the same order, as with NCCL), so an async all_reduce returns at once
and DDP overlaps its buckets with the backward pass. A blocking call with nothing queued runs on the
caller's thread instead (no handoff). The worker never runs a future's callbacks: it hands each
finished Work to the group's completion threads (_Completions), which complete the futures in the
order the collectives finished, so a callback that issues a collective and waits for it (torch's
PowerSGD hook), on this group or another, cannot stop the collective it waits for. A failed
collective fails the group for good, with a clear error, on every rank (a dead peer is noticed
within NCCL_TRIM_TIMEOUT_MS, at once when its process is gone); every later call raises it.
"""

import atexit
import collections
import datetime
import functools
import os
import queue
import threading
import weakref
from typing import Callable, List, Optional

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend as _C10dBackend
from torch._C._distributed_c10d import Work as _C10dWork

from . import coll
from .errors import CollectiveError, TrimError, UnsupportedError

NAME = "trim"
# The store keys of a group (torch hands each group's backend its own PrefixStore, "<group name>/cpu/").
# Rank 0 publishes the communicator's id, each rank its handle, under the group's generation: a
# store can outlive its groups (init_process_group(store=...), an elastic agent's TCPStore) and
# torch gives a group made after destroy_process_group() the same name again, so unscoped keys
# would hand a new group the id and handles of a dead one (and connect it to closed listeners).
# The generation is counted in the store itself, per group rank and size (store.add is atomic):
# the number of times this rank of such a group has made its trim backend on this store. Every
# rank makes one per init, so all ranks agree on it without another message, whichever comes
# first, and a restarted process continues its rank's count. (A rank that died before it made
# its backend leaves its count behind the others': after such a failure, re-initialise on a new
# store or prefix, as torchelastic does for each round.)
_GENERATION_KEY = "nccl_trim/generation/{size}/{rank}"
_ID_KEY = "nccl_trim/{size}/{generation}/comm_id"
_HANDLE_KEY = "nccl_trim/{size}/{generation}/handle/{rank}"
_SUPPORTED = "all_reduce, broadcast, all_gather (and all_gather_into_tensor), reduce_scatter (and " \
             "reduce_scatter_tensor) and barrier"

_DTYPES = {
    torch.float32: coll.FLOAT32, torch.float64: coll.FLOAT64, torch.float16: coll.FLOAT16,
    torch.bfloat16: coll.BFLOAT16, torch.int8: coll.INT8, torch.uint8: coll.UINT8, torch.int32: coll.INT32,
    torch.int64: coll.INT64, torch.uint32: coll.UINT32, torch.uint64: coll.UINT64, torch.bool: coll.UINT8,
}
_OPS = ((dist.ReduceOp.SUM, coll.SUM), (dist.ReduceOp.AVG, coll.AVG), (dist.ReduceOp.PRODUCT, coll.PROD),
        (dist.ReduceOp.MIN, coll.MIN), (dist.ReduceOp.MAX, coll.MAX))


class TrimBackendError(CollectiveError, dist.DistBackendError):
    """A collective of the trim backend failed (see CollectiveError); also a DistBackendError, what
    torch's own backends raise for the same failures."""


class Options:
    """pg_options of a "trim" group: dist.new_group(ranks, backend="trim", pg_options=Options(...)).

    traffic_class: NCCL's per-communicator traffic class, given to the plugin's init (net API v11);
    the comm hook's group carries NCCL_TRIM_HOOK_TRAFFIC_CLASS, and register() declares that class
    to the plugin before it makes the group (nccl_trim.plugin.LoadedPlugin.declare), so the plugin
    packs its already rotated buckets as such; a group of that class nobody declared is rotated
    per hop like any other. -1: unset. check_ops: each collective first tells the next rank what
    it is (one exact 48-byte message), so ranks that disagree on a collective, size, dtype or op
    fail with an error naming both instead of hanging or summing garbage. net_api: 8..12 (0: the
    newest); profiler: load the plugin's profiler as NCCL does (without it nothing is trimmed)."""

    def __init__(self, traffic_class: int = -1, check_ops: bool = True, net_api: int = 0, profiler: bool = True):
        if not -1 <= traffic_class <= 255:
            raise ValueError(f"traffic_class={traffic_class}: -1 (unset) or 0..255")
        self.traffic_class, self.check_ops, self.net_api, self.profiler = traffic_class, check_ops, net_api, profiler

    def __repr__(self):
        return (f"nccl_trim.backend.Options(traffic_class={self.traffic_class}, check_ops={self.check_ops}, "
                f"net_api={self.net_api}, profiler={self.profiler})")


def _deliver(done: torch.futures.Future):
    error, value = done.value()
    if error is not None:
        raise error
    return value


class _Work(_C10dWork):
    """A collective handed to the worker: wait() blocks until it ran (and raises its error),
    get_future() completes with the output tensors when it did.

    Gloo's order: the future completes first (its callbacks run), then the Work (is_completed(),
    wait()); so once wait() returns or is_completed() says True, the future is complete too.
    (torch wraps the Work a Python backend returns in a C++ holder whose is_completed() is the
    base class's, always False in torch 2.15: through dist.*, the future's done() is the state;
    this class's own is_completed() is Gloo's.)"""

    def __init__(self, outputs: List[torch.Tensor]):
        super().__init__()
        self._outputs = outputs
        # A Python future's set_exception only stores the exception as its value, which C++
        # readers of the future (DDP's reducer) take for a result and crash on. So the raw future
        # completes with (error, value) and the one handed out is chained with a callback that
        # raises the error: torch turns that into a real C++ error of the chained future.
        self._raw = torch.futures.Future()
        self._future = self._raw.then(_deliver)
        self._done = threading.Event()
        self._error: Optional[BaseException] = None
        self._completing: Optional[int] = None  # the thread running the future's callbacks

    def _finish(self, error: Optional[BaseException]) -> None:
        """Completes the future (its callbacks run here: on a completion thread, or on the
        caller's thread for an inline call, whose future has none yet), then the Work."""
        self._error = error
        self._completing = threading.get_ident()
        try:
            self._raw.set_result((error, None if error is not None else self._outputs))
        finally:
            self._completing = None
            self._done.set()

    def wait(self, timeout: datetime.timedelta = datetime.timedelta(0)) -> bool:
        seconds = timeout.total_seconds() if timeout else 0
        # A callback of this Work's own future that waits for it: the future is complete (its
        # callbacks are what runs), so waiting for them to end would never end.
        if self._completing != threading.get_ident() and not self._done.wait(seconds if seconds > 0 else None):
            raise TrimBackendError(f"trim: Work.wait timed out after {seconds:g} s; the collective is still running",
                                   code=coll.ETIMEOUT)
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self) -> bool:
        return self._done.is_set()

    def is_success(self) -> bool:
        return self._done.is_set() and self._error is None

    def exception(self):
        return self._error

    def result(self) -> List[torch.Tensor]:
        self.wait()
        return self._outputs

    def get_future(self) -> torch.futures.Future:
        return self._future


class _Completions:
    """Completes a group's finished Works off its worker thread, in the order the worker
    finished them: each Work's future completes, and its callbacks run, on one of these threads.

    A callback may issue a collective and wait for it (torch's PowerSGD hook does, on its own
    group or another): the worker runs that collective, since it never runs callbacks, and the
    collective's own completion is taken by another of these threads, since the one that takes
    a Work first hands that role on (to a free thread, or a new one when every thread is inside
    a callback) whenever more Works are waiting. So no callback can hold up the worker, or any
    later Work's completion; callbacks start in completion order and run one after another
    unless one is still running when the next Work finishes (as on gloo's worker threads). One
    thread stays for the group; others end when idle for IDLE_S."""

    IDLE_S = 5.0

    def __init__(self, name: str):
        self._name = name
        self._cv = threading.Condition(threading.Lock())
        self._items: "collections.deque" = collections.deque()
        self._threads = 0  # alive
        self._busy = 0  # inside a completion
        self._stopped = False

    def put(self, finish: Callable[[], None]) -> None:
        with self._cv:
            self._items.append(finish)
            if self._threads > self._busy:
                self._cv.notify()  # a free thread takes it (one waiting, or about to look)
                return
            self._threads += 1
        self._start()

    def stop(self) -> None:
        """Threads end once every Work put so far is complete."""
        with self._cv:
            self._stopped = True
            self._cv.notify_all()

    def _start(self) -> None:
        threading.Thread(target=self._loop, name=f"nccl_trim {self._name} completion", daemon=True).start()

    def _loop(self) -> None:
        cv = self._cv
        with cv:
            while True:
                while not self._items:
                    if self._stopped or (not cv.wait(self.IDLE_S) and not self._items
                                         and self._threads - self._busy > 1):
                        self._threads -= 1
                        return
                finish = self._items.popleft()
                self._busy += 1
                spawn = bool(self._items) and self._threads == self._busy
                if spawn:  # the rest must not wait for this one's callbacks
                    self._threads += 1
                cv.release()
                try:
                    if spawn:
                        self._start()
                    finish()
                except BaseException:  # noqa: BLE001 - _finish raises nothing of its own; never lose the thread
                    pass
                finally:
                    cv.acquire()
                    self._busy -= 1  # free again: it looks for the next at once


_STOP = object()
_LIVE = weakref.WeakSet()


def _timeout_ms(opts, default: datetime.timedelta) -> int:
    t = getattr(opts, "timeout", None)
    if t is None or t.total_seconds() <= 0:  # unset: torch's sentinel is -1 ms
        t = default
    return max(1, int(t.total_seconds() * 1000))


def _cpu_tensor(t: torch.Tensor, what: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise UnsupportedError(f"trim: {what} takes tensors, not {type(t).__name__}")
    if t.device.type != "cpu":
        raise UnsupportedError(f"trim: {what} got a {t.device.type} tensor; the trim backend carries CPU tensors "
                               "(use 'cpu:trim,cuda:nccl' to send CUDA tensors through NCCL and the same plugin)")
    if t.is_sparse:
        raise UnsupportedError(f"trim: {what} got a sparse tensor; the trim backend carries dense tensors")


def _dtype(t: torch.Tensor, what: str) -> int:
    code = _DTYPES.get(t.dtype)
    if code is None:
        raise UnsupportedError(f"trim: {what} of {t.dtype} is not supported: NCCL has no such type (supported: "
                               + ", ".join(str(d).replace("torch.", "") for d in _DTYPES) + ")")
    return code


def _op(reduce_op, t: torch.Tensor, what: str) -> int:
    for theirs, ours in _OPS:
        if reduce_op == theirs:
            if t.dtype == torch.bool:
                # bool travels as uint8, as under NCCL: SUM is logical OR, PRODUCT logical AND.
                if ours == coll.AVG:
                    raise UnsupportedError(f"trim: {what} with ReduceOp.AVG of torch.bool has no meaning")
                return {coll.SUM: coll.MAX, coll.PROD: coll.MIN}.get(ours, ours)
            return ours
    name = next((n for n in ("BAND", "BOR", "BXOR", "PREMUL_SUM") if reduce_op == getattr(dist.ReduceOp, n, None)),
                str(reduce_op))
    raise UnsupportedError(f"trim: {what} with ReduceOp.{name} is not supported (SUM, AVG, PRODUCT, MIN, MAX)")


def _one(tensors, what: str) -> torch.Tensor:
    if len(tensors) != 1:
        raise UnsupportedError(f"trim: {what} takes one tensor per process, got {len(tensors)}")
    _cpu_tensor(tensors[0], what)
    return tensors[0]


class _Contiguous:
    """A contiguous view of `t`, or a copy written back after the collective."""

    def __init__(self, t: torch.Tensor):
        self.t = t
        self.c = t if t.is_contiguous() else t.contiguous()

    def write_back(self) -> None:
        if self.c is not self.t:
            self.t.copy_(self.c)


class TrimBackend(_C10dBackend):
    """One process group's side of the trim backend (created by torch through register())."""

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta, options: Optional[Options] = None,
                 group_name: str = ""):
        super().__init__(rank, size)
        options = options or Options()
        self._rank, self._size, self._timeout = rank, size, timeout
        self._name = f"trim pg {group_name or '?'} rank {rank}/{size}"
        self.trim_options = options
        lib = coll.load()
        generation = store.add(_GENERATION_KEY.format(size=size, rank=rank), 1)
        self._generation = generation
        keys = {"size": size, "generation": generation}
        # One id per communicator, the same on every rank (NCCL's commId), from rank 0.
        if rank == 0:
            store.set(_ID_KEY.format(**keys), os.urandom(8).hex())
        comm_id = int(store.get(_ID_KEY.format(**keys)).decode(), 16)
        self._comm = coll.Communicator(lib, rank=rank, nranks=size, comm_id=comm_id,
                                       traffic_class=options.traffic_class, net_api=options.net_api,
                                       profiler=options.profiler, check_ops=options.check_ops, name=self._name)
        try:
            store.set(_HANDLE_KEY.format(rank=rank, **keys), self._comm.handle)
            nxt = store.get(_HANDLE_KEY.format(rank=(rank + 1) % size, **keys)) if size > 1 else None
            self._comm.connect(nxt if nxt is not None else bytes(coll.HANDLE_BYTES), _timeout_ms(None, timeout))
        except BaseException:
            self._comm.close()
            raise
        self._queue: "queue.SimpleQueue" = queue.SimpleQueue()
        # _run is held while a collective runs (the worker's or an inline one) and by close; no
        # future's callbacks run under it (they run on _completions' threads; an inline call's
        # future has none while it runs). _state guards the two fields below and is never held
        # for long, so an async call never waits for a running collective.
        self._run = threading.RLock()
        self._state = threading.Lock()
        self._pending = 0  # queued and not yet finished
        self._closed = False
        self._completions = _Completions(self._name)
        self._worker = threading.Thread(target=self._serve, name=f"nccl_trim {self._name}", daemon=True)
        self._worker.start()
        _LIVE.add(self)

    # ---- torch's Backend interface

    def getBackendName(self) -> str:  # noqa: N802 (torch's name)
        return NAME

    def allreduce(self, tensors, opts=None):
        t = _one(tensors, "all_reduce")
        dtype, op = _dtype(t, "all_reduce"), _op(opts.reduceOp, t, "all_reduce")
        c = _Contiguous(t)

        def run(ms):
            self._comm.all_reduce(c.c.data_ptr(), c.c.numel(), dtype, op, ms)
            c.write_back()
        return self._submit(run, [t], opts)

    def broadcast(self, tensors, opts=None):
        t = _one(tensors, "broadcast")
        if not 0 <= opts.rootRank < self._size or opts.rootTensor != 0:
            raise UnsupportedError(f"trim: broadcast from rank {opts.rootRank} (tensor {opts.rootTensor}) in a group "
                                   f"of {self._size}")
        _dtype(t, "broadcast")
        c = _Contiguous(t)
        root = opts.rootRank

        def run(ms):
            self._comm.broadcast(c.c.data_ptr(), c.c.numel() * c.c.element_size(), root, ms)
            c.write_back()
        return self._submit(run, [t], opts)

    def allgather(self, output_tensors, input_tensors, opts=None):
        t = _one(input_tensors, "all_gather")
        _dtype(t, "all_gather")
        outs = self._per_rank(output_tensors, t, "all_gather", "output")
        src = t.contiguous()
        flat = torch.empty(self._size * t.numel(), dtype=t.dtype)

        def run(ms):
            self._comm.all_gather(src.data_ptr(), flat.data_ptr(), src.numel() * src.element_size(), ms)
            for o, part in zip(outs, flat.view(self._size, -1)):
                o.copy_(part.view_as(o))
        return self._submit(run, outs, opts)

    def _allgather_base(self, output, input, opts=None):  # noqa: A002 (torch's name)
        _cpu_tensor(input, "all_gather_into_tensor")
        _cpu_tensor(output, "all_gather_into_tensor")
        _dtype(input, "all_gather_into_tensor")
        if output.numel() != input.numel() * self._size or output.dtype != input.dtype:
            raise UnsupportedError(f"trim: all_gather_into_tensor needs an output of {self._size} x {input.numel()} "
                                   f"{input.dtype}, got {output.numel()} {output.dtype}")
        src, dst = input.contiguous(), _Contiguous(output)

        def run(ms):
            self._comm.all_gather(src.data_ptr(), dst.c.data_ptr(), src.numel() * src.element_size(), ms)
            dst.write_back()
        return self._submit(run, [output], opts)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        out = _one(output_tensors, "reduce_scatter")
        ins = self._per_rank(input_tensors, out, "reduce_scatter", "input")
        dtype, op = _dtype(out, "reduce_scatter"), _op(opts.reduceOp, out, "reduce_scatter")
        src = torch.cat([i.reshape(-1) for i in ins])
        dst = _Contiguous(out)

        def run(ms):
            self._comm.reduce_scatter(src.data_ptr(), dst.c.data_ptr(), out.numel(), dtype, op, ms)
            dst.write_back()
        return self._submit(run, [out], opts)

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002 (torch's name)
        _cpu_tensor(input, "reduce_scatter_tensor")
        _cpu_tensor(output, "reduce_scatter_tensor")
        if input.numel() != output.numel() * self._size or output.dtype != input.dtype:
            raise UnsupportedError(f"trim: reduce_scatter_tensor needs an input of {self._size} x {output.numel()} "
                                   f"{output.dtype}, got {input.numel()} {input.dtype}")
        dtype, op = _dtype(output, "reduce_scatter_tensor"), _op(opts.reduceOp, output, "reduce_scatter_tensor")
        src, dst = input.contiguous(), _Contiguous(output)

        def run(ms):
            self._comm.reduce_scatter(src.data_ptr(), dst.c.data_ptr(), output.numel(), dtype, op, ms)
            dst.write_back()
        return self._submit(run, [output], opts)

    # torch >= 2.15 calls these names for all_gather_into_tensor and reduce_scatter_tensor.
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base

    def barrier(self, opts=None):
        return self._submit(self._comm.barrier, [], opts, blocking=True)

    def shutdown(self) -> None:
        self._close(abort=False)

    def abort(self) -> None:
        self._close(abort=True)

    # Everything else, with the same clear error (torch's own would name no alternative).
    def _unsupported(self, name):
        raise UnsupportedError(f"trim: {name} is not supported by the trim backend, which carries {_SUPPORTED}; "
                               "run it on a gloo group (dist.new_group(backend='gloo'))")

    def reduce(self, *args, **kwargs):
        self._unsupported("reduce")

    def gather(self, *args, **kwargs):
        self._unsupported("gather")

    def scatter(self, *args, **kwargs):
        self._unsupported("scatter")

    def alltoall(self, *args, **kwargs):
        self._unsupported("all_to_all")

    def alltoall_base(self, *args, **kwargs):
        self._unsupported("all_to_all_single")

    def all_to_all_single(self, *args, **kwargs):
        self._unsupported("all_to_all_single")

    def gather_single(self, *args, **kwargs):
        self._unsupported("gather")

    def all_gather_single_coalesced(self, *args, **kwargs):
        self._unsupported("all_gather_into_tensor_coalesced")

    def reduce_scatter_single_coalesced(self, *args, **kwargs):
        self._unsupported("reduce_scatter_tensor_coalesced")

    def send(self, *args, **kwargs):
        self._unsupported("send")

    def recv(self, *args, **kwargs):
        self._unsupported("recv")

    def recv_anysource(self, *args, **kwargs):
        self._unsupported("recv from any source")

    def allreduce_coalesced(self, *args, **kwargs):
        self._unsupported("all_reduce_coalesced")

    def allgather_coalesced(self, *args, **kwargs):
        self._unsupported("all_gather_coalesced")

    def monitored_barrier(self, *args, **kwargs):
        self._unsupported("monitored_barrier")

    def _per_rank(self, lists, like: torch.Tensor, what: str, role: str) -> List[torch.Tensor]:
        """The one list of a tensor per rank that all_gather (outputs) and reduce_scatter (inputs)
        take, each CPU and of `like`'s size and dtype."""
        if len(lists) != 1 or len(lists[0]) != self._size:
            raise UnsupportedError(f"trim: {what} needs one list of {self._size} {role} tensors")
        for x in lists[0]:
            _cpu_tensor(x, what)
            if x.numel() != like.numel() or x.dtype != like.dtype:
                raise UnsupportedError(f"trim: {what} {role}s must all be {like.numel()} x {like.dtype}; got "
                                       f"{x.numel()} x {x.dtype} (uneven sizes are not supported)")
        return lists[0]

    # ---- the worker

    def _shut_down_error(self) -> TrimBackendError:
        return TrimBackendError(f"{self._name}: the process group was shut down", code=coll.EFAILED)

    def _submit(self, run: Callable[[int], None], outputs, opts, blocking: bool = False) -> _Work:
        work = _Work(outputs)
        ms = _timeout_ms(opts, self._timeout)
        # A blocking call waits anyway: with nothing queued it runs here, without the handoff.
        inline = blocking or (opts is not None and not getattr(opts, "asyncOp", True))
        if inline and self._run.acquire(blocking=False):
            try:
                with self._state:
                    if self._closed:
                        raise self._shut_down_error()
                    idle = self._pending == 0
                if idle:
                    self._execute(work, run, ms)
                    return work
            finally:
                self._run.release()
        with self._state:
            if self._closed:
                raise self._shut_down_error()
            self._pending += 1
            self._queue.put((work, run, ms))
        return work

    @staticmethod
    def _run_one(run, ms: int) -> Optional[BaseException]:
        """Runs one collective; its error (None: it succeeded)."""
        try:
            run(ms)
        except CollectiveError as e:
            text = str(e)
            if e.code == coll.ETIMEOUT:  # in gloo's words, which torch's tests look for
                text += f": Timed out waiting {ms} ms (the call's timeout, else its group's)"
            return TrimBackendError(text, code=e.code)
        except BaseException as e:  # noqa: BLE001 - handed to the waiter, never lost on this thread
            return e
        return None

    def _execute(self, work: _Work, run, ms: int) -> None:
        """An inline call: runs and completes on the caller's thread (its future has no callbacks
        yet: the Work is returned only after this)."""
        work._finish(self._run_one(run, ms))

    def _serve(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                self._completions.stop()
                return
            work, run, ms = item
            with self._run:
                error = self._run_one(run, ms)
            with self._state:
                self._pending -= 1
            # Never here: a callback may wait for a collective that only this thread can run.
            self._completions.put(functools.partial(work._finish, error))

    def _close(self, abort: bool) -> None:
        """Shut down: with `abort`, the running collective fails at once; queued ones run first
        otherwise (STOP is queued after them). The communicator is closed only once no collective
        runs, the worker's or an inline one."""
        if abort:
            self._comm.abort()  # before the lock, which a running inline collective holds
        with self._state:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)  # after every queued collective: _submit queues under _state
        if threading.current_thread() is not self._worker:
            self._worker.join()
        with self._run:
            self._comm.close()
        _LIVE.discard(self)


def _create(dist_opts, pg_options) -> TrimBackend:
    if pg_options is not None and not isinstance(pg_options, Options):
        raise TypeError(f"pg_options of a trim group must be nccl_trim.backend.Options, not {type(pg_options).__name__}")
    return TrimBackend(dist_opts.store, dist_opts.group_rank, dist_opts.group_size, dist_opts.timeout, pg_options,
                       str(dist_opts.group_id))


def register() -> None:
    """Registers "trim" with torch.distributed (CPU tensors); idempotent. Importing nccl_trim calls
    it once torch is imported, and pip's torch.distributed.backends entry point names it."""
    if NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(NAME, _create, extended_api=True, devices=["cpu"])


@atexit.register
def _close_all() -> None:
    """Closes the groups still open at exit (a script without destroy_process_group): their
    worker threads end and peers see a goodbye, not a vanished process. A collective still
    running then is aborted: nothing will wait for it, and a silent peer must not hold the exit."""
    for backend in list(_LIVE):
        try:
            backend._close(abort=True)
        except TrimError:
            pass
