"""What the trim backend's operations share: its Work (gloo's completion order), the threads that
complete Works off the group's worker, and the argument checks every operation makes."""

import collections
import datetime
import threading
from typing import Callable, List, Optional

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Work as _C10dWork

from . import coll
from .errors import CollectiveError, UnsupportedError

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

    def join(self) -> None:
        """After stop(): waits until every thread has ended (but the caller's own, when a callback
        shuts the group down). A thread still inside torch when the interpreter exits is killed
        by it mid-call, which aborts the process ("terminate called without an active
        exception"), so a group's shutdown waits for them."""
        with self._cv:
            mine = 1 if threading.current_thread().name == self._thread_name else 0
            while self._threads > mine:
                self._cv.wait()

    @property
    def _thread_name(self) -> str:
        return f"nccl_trim {self._name} completion"

    def _start(self) -> None:
        threading.Thread(target=self._loop, name=self._thread_name, daemon=True).start()

    def _loop(self) -> None:
        cv = self._cv
        with cv:
            while True:
                while not self._items:
                    if self._stopped or (not cv.wait(self.IDLE_S) and not self._items
                                         and self._threads - self._busy > 1):
                        self._threads -= 1
                        cv.notify_all()  # join() waits for the count
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
