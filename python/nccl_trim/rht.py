"""ctypes binding of libtrim-rht.so (cuda/trim_rht.h): the Randomized Hadamard Transform the comm
hook applies to gradient buckets. No torch here: callers pass raw pointers, so the binding and its
errors are testable on machines without torch.

The rotation is cut into rows of 2**row_log2 elements (15 by default, the plugin's row size) and
segments (FSDP's per-rank chunks); see cuda/trim_rht.h for the exact geometry and sign streams.
"""

import ctypes
import functools
from typing import Optional, Tuple

from .errors import TrimError
from .libs import load_cdll, rht_library_path

ABI_VERSION = 1
MAX_ROW_LOG2 = 15
DEFAULT_ROW_LOG2 = 15
# Element types (enum trim_rht_dtype).
F32, BF16, F16 = 1, 2, 3

_u64, _u32, _int, _ptr = ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int, ctypes.c_void_p
_HOST_ARGS = [_ptr, _u64, _int, _u32, _u64, _u64]
_SIGNATURES = {
    "trim_rht_last_error": ([], ctypes.c_char_p),
    "trim_rht_bucket_seed": ([_u64, _u32, _u64], _u64),
    "trim_rht_forward_host": (_HOST_ARGS, _int),
    "trim_rht_inverse_host": (_HOST_ARGS, _int),
    "trim_rht_forward_cuda": (_HOST_ARGS + [_ptr], _int),
    "trim_rht_inverse_cuda": (_HOST_ARGS + [_ptr], _int),
    "trim_rht_cuda_available": ([], _int),
}


class RhtError(TrimError):
    """A libtrim-rht call failed; the message carries the library's own reason."""


class RhtLibrary:
    """One loaded libtrim-rht.so. Every call raises RhtError (with trim_rht_last_error's text)
    instead of returning -1, so a failed rotation can never be mistaken for a done one."""

    def __init__(self, path: str):
        self._lib = load_cdll(path, "libtrim-rht", _SIGNATURES, "trim_rht_abi_version", ABI_VERSION)
        self.path = path

    def last_error(self) -> str:
        return (self._lib.trim_rht_last_error() or b"").decode(errors="replace")

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RhtError(f"{what} failed: {self.last_error()}")

    def bucket_seed(self, job_seed: int, bucket: int, step: int) -> int:
        """The seed of one bucket at one step: what every rank passes for that allreduce."""
        return self._lib.trim_rht_bucket_seed(job_seed & (2**64 - 1), bucket & (2**32 - 1), step & (2**64 - 1))

    def forward_host(self, ptr: int, n: int, dtype: int, row_log2: int, segment_elems: int, seed: int) -> None:
        self._check(self._lib.trim_rht_forward_host(ptr, n, dtype, row_log2, segment_elems, seed),
                    "trim_rht_forward_host")

    def inverse_host(self, ptr: int, n: int, dtype: int, row_log2: int, segment_elems: int, seed: int) -> None:
        self._check(self._lib.trim_rht_inverse_host(ptr, n, dtype, row_log2, segment_elems, seed),
                    "trim_rht_inverse_host")

    def forward_cuda(self, ptr: int, n: int, dtype: int, row_log2: int, segment_elems: int, seed: int,
                     stream: int) -> None:
        """Enqueue the forward rotation on `stream` (a cudaStream_t as int) of the current device."""
        self._check(self._lib.trim_rht_forward_cuda(ptr, n, dtype, row_log2, segment_elems, seed, stream),
                    "trim_rht_forward_cuda")

    def inverse_cuda(self, ptr: int, n: int, dtype: int, row_log2: int, segment_elems: int, seed: int,
                     stream: int) -> None:
        self._check(self._lib.trim_rht_inverse_cuda(ptr, n, dtype, row_log2, segment_elems, seed, stream),
                    "trim_rht_inverse_cuda")

    def cuda_available(self) -> Tuple[bool, str]:
        """(True, "") when the GPU functions can run on the current device, else (False, why).
        Loads the kernels' module, so call it at set-up, not on NCCL's or a callback's path."""
        if self._lib.trim_rht_cuda_available():
            return True, ""
        return False, self.last_error()


@functools.lru_cache(maxsize=None)
def _load(path: str) -> RhtLibrary:
    return RhtLibrary(path)


def load(path: Optional[str] = None) -> RhtLibrary:
    """The library at `path` (default: rht_library_path()), loaded once per path."""
    return _load(path or rht_library_path())
