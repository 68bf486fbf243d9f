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

send/recv and the collectives built on them (gather, scatter, all_to_all, reduce,
monitored_barrier) travel on point-to-point connections opened per peer on first use
(nccl_trim.p2p, nccl_trim._ops), exact.
"""

import atexit
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

from . import coll, p2p
from ._ops import MoreOps, install_p2p_works
from ._work import (TrimBackendError, _Completions, _Contiguous, _cpu_tensor, _dtype, _one, _op, _timeout_ms,
                    _Work)
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


_STOP = object()
_LIVE = weakref.WeakSet()


class TrimBackend(MoreOps, _C10dBackend):
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
        # send/recv and the collectives built on them: connections per peer, opened on first use.
        self._p2p = p2p.P2P(store, rank, size, generation, comm_id, _timeout_ms(None, timeout), options, self._name)
        self._p2p_seq = 0  # the tag of the next collective carried by p2p (issued in the same order everywhere)
        self._seq_count = 0  # collectives issued: torch's sequence number of the group (its debug checks)
        self._worker = threading.Thread(target=self._serve, name=f"nccl_trim {self._name}", daemon=True)
        self._worker.start()
        _LIVE.add(self)

    # ---- torch's Backend interface

    def getBackendName(self) -> str:  # noqa: N802 (torch's name)
        return NAME

    def allreduce(self, tensors, opts=None):
        if len(tensors) == 1 and isinstance(tensors[0], torch.Tensor) and tensors[0].is_sparse:
            return self._sparse_all_reduce(tensors[0], opts)
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
        self._seq_count += 1  # the caller's thread: collectives are issued one at a time, in order
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
        if abort:
            self._p2p.close(self._shut_down_error())  # a collective waiting on p2p fails now
        if threading.current_thread() is not self._worker:
            self._worker.join()
        self._p2p.close(self._shut_down_error(), graceful=not abort)
        self._completions.join()
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
    install_p2p_works(TrimBackend)
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
