"""ctypes binding of libtrim-coll.so (coll/trim_coll.h): ring collectives over the nccl-trim plugin,
driven as NCCL's proxy drives it. No torch here: callers pass raw pointers, so the binding and its
errors are testable without torch. The torch.distributed backend (nccl_trim.backend) sits on it.

Every call releases the GIL for its whole duration (ctypes does), so a collective running on a
backend's worker thread leaves the training loop running.
"""

import ctypes
import functools
import os
import threading
from typing import Optional

from .errors import CollectiveError, PluginError, UnsupportedError
from .libs import coll_library_path, load_cdll, plugin_path

ABI_VERSION = 1
HANDLE_BYTES = 128

# enum trim_coll_status
OK, EINVAL, EPLUGIN, EREMOTE, ETIMEOUT, EMISMATCH, EABORTED, EFAILED = 0, -1, -2, -3, -4, -5, -6, -7
STATUS_NAMES = {EINVAL: "invalid argument", EPLUGIN: "plugin error", EREMOTE: "peer or network failure",
                ETIMEOUT: "timed out", EMISMATCH: "ranks disagree", EABORTED: "aborted",
                EFAILED: "communicator failed earlier"}
# enum trim_coll_dtype
INT8, UINT8, INT32, UINT32, INT64, UINT64, FLOAT16, FLOAT32, FLOAT64, BFLOAT16 = range(10)
# enum trim_coll_op
SUM, PROD, MAX, MIN, AVG = range(5)

_i, _i64, _u64, _p = ctypes.c_int, ctypes.c_int64, ctypes.c_uint64, ctypes.c_void_p


class _Config(ctypes.Structure):
    _fields_ = [("abi_version", _i), ("plugin_path", ctypes.c_char_p), ("rank", _i), ("nranks", _i),
                ("comm_id", _u64), ("traffic_class", _i), ("net_api", _i), ("profiler", _i), ("check_ops", _i),
                ("log_level", _i), ("name", ctypes.c_char_p)]


_SIGNATURES = {
    "trim_coll_last_error": ([], ctypes.c_char_p),
    "trim_coll_create": ([ctypes.POINTER(_Config), ctypes.POINTER(_p), ctypes.c_char_p], _i),
    "trim_coll_connect": ([_p, ctypes.c_char_p, _i64], _i),
    "trim_coll_all_reduce": ([_p, _p, _u64, _i, _i, _i64], _i),
    "trim_coll_broadcast": ([_p, _p, _u64, _i, _i64], _i),
    "trim_coll_all_gather": ([_p, _p, _p, _u64, _i64], _i),
    "trim_coll_reduce_scatter": ([_p, _p, _p, _u64, _i, _i, _i64], _i),
    "trim_coll_barrier": ([_p, _i64], _i),
    "trim_coll_abort": ([_p], _i),
    "trim_coll_destroy": ([_p], _i),
    "trim_coll_stats_json": ([_p, ctypes.c_char_p, ctypes.c_size_t], _i),
}


def nccl_log_level(environ=None) -> int:
    """NCCL_DEBUG as the plugin's log level: WARN (2) unless it says otherwise, so a dead peer's
    story reaches stderr; INFO (3) and TRACE (5) as under NCCL; VERSION/NONE silence it."""
    environ = os.environ if environ is None else environ
    return {"NONE": 0, "VERSION": 0, "WARN": 2, "INFO": 3, "ABORT": 2, "TRACE": 5}.get(
        environ.get("NCCL_DEBUG", "").strip().upper(), 2)


class CollLibrary:
    """One loaded libtrim-coll.so. Calls that fail raise with the library's own reason."""

    def __init__(self, path: str):
        self._lib = load_cdll(path, "libtrim-coll", _SIGNATURES, "trim_coll_abi_version", ABI_VERSION)
        self.path = path

    def last_error(self) -> str:
        return (self._lib.trim_coll_last_error() or b"").decode("utf-8", "replace")

    def error(self, rc: int, what: Optional[str] = None) -> Exception:
        """The exception for status `rc` (of call `what`, when the library's text does not say)."""
        text = self.last_error() if what is None else f"{what}: {self.last_error()}"
        if rc == EINVAL:
            return UnsupportedError(text)
        if rc == EPLUGIN:
            return PluginError(text)
        return CollectiveError(text, code=rc)


class Communicator:
    """One ring communicator: create (listen), then connect to rank+1's handle, then collectives
    one at a time (any one thread), abort from any thread, close once."""

    def __init__(self, lib: CollLibrary, *, rank: int, nranks: int, comm_id: int, traffic_class: int = -1,
                 plugin: Optional[str] = None, net_api: int = 0, profiler: bool = True, check_ops: bool = True,
                 log_level: Optional[int] = None, name: str = ""):
        self._lib, self._c = lib, lib._lib
        self.rank, self.nranks, self.name = rank, nranks, name
        self._plugin_path = (plugin or plugin_path()).encode()
        self._name = name.encode()
        cfg = _Config(ABI_VERSION, self._plugin_path, rank, nranks, comm_id & (2**64 - 1), traffic_class, net_api,
                      int(profiler), int(check_ops), nccl_log_level() if log_level is None else log_level, self._name)
        comm = _p()
        handle = ctypes.create_string_buffer(HANDLE_BYTES)
        rc = self._c.trim_coll_create(ctypes.byref(cfg), ctypes.byref(comm), handle)
        if rc != OK:
            raise lib.error(rc, f"{name}: setting up the communicator")
        self._comm = comm
        self._handle_lock = threading.Lock()  # abort (any thread) never meets a freed communicator
        self.handle = handle.raw

    def _check(self, rc: int, what: Optional[str] = None) -> None:
        if rc != OK:
            raise self._lib.error(rc, what)

    def connect(self, next_handle: bytes, timeout_ms: int) -> None:
        if len(next_handle) != HANDLE_BYTES:
            raise UnsupportedError(f"{self.name}: rank {(self.rank + 1) % self.nranks}'s handle has "
                                   f"{len(next_handle)} bytes, not {HANDLE_BYTES}")
        self._check(self._c.trim_coll_connect(self._comm, next_handle, timeout_ms), f"{self.name}: connect")

    def all_reduce(self, ptr: int, count: int, dtype: int, op: int, timeout_ms: int) -> None:
        self._check(self._c.trim_coll_all_reduce(self._comm, ptr, count, dtype, op, timeout_ms))

    def broadcast(self, ptr: int, nbytes: int, root: int, timeout_ms: int) -> None:
        self._check(self._c.trim_coll_broadcast(self._comm, ptr, nbytes, root, timeout_ms))

    def all_gather(self, src: int, dst: int, bytes_per_rank: int, timeout_ms: int) -> None:
        self._check(self._c.trim_coll_all_gather(self._comm, src, dst, bytes_per_rank, timeout_ms))

    def reduce_scatter(self, src: int, dst: int, count_per_rank: int, dtype: int, op: int, timeout_ms: int) -> None:
        self._check(self._c.trim_coll_reduce_scatter(self._comm, src, dst, count_per_rank, dtype, op, timeout_ms))

    def barrier(self, timeout_ms: int) -> None:
        self._check(self._c.trim_coll_barrier(self._comm, timeout_ms))

    def abort(self) -> None:
        """Any thread: the running collective and every later one fail at once."""
        with self._handle_lock:
            if self._comm:
                self._c.trim_coll_abort(self._comm)

    def close(self) -> None:
        """Closes the connections and frees the communicator, after the last collective returned;
        later calls fail. Idempotent."""
        with self._handle_lock:
            comm, self._comm = self._comm, None
        if comm:
            self._check(self._c.trim_coll_destroy(comm), f"{self.name}: close")

    def stats(self) -> str:
        """The plugin's counters (JSON text)."""
        buf = ctypes.create_string_buffer(1 << 16)
        n = self._c.trim_coll_stats_json(self._comm, buf, len(buf))
        if n < 0:
            raise self._lib.error(n, "stats")
        return buf.value.decode()


@functools.lru_cache(maxsize=None)
def load(path: Optional[str] = None) -> CollLibrary:
    """libtrim-coll.so from the package (or NCCL_TRIM_LIB_DIR), loaded once per path."""
    return CollLibrary(path or coll_library_path())
