"""Where the package's native libraries are.

`pip install .` builds them with the repository's Makefile and installs them as package data in
``nccl_trim/lib/``. ``NCCL_TRIM_LIB_DIR`` points elsewhere instead (a checkout's ``build/lib``),
so tests and developers can use a fresh ``make`` without reinstalling.
"""

import ctypes
import os
from pathlib import Path
from typing import Mapping, Sequence, Tuple

from .errors import LibraryError

LIB_DIR_ENV = "NCCL_TRIM_LIB_DIR"
PLUGIN_NAME = "libnccl-net-trim.so"
RHT_NAME = "libtrim-rht.so"
COLL_NAME = "libtrim-coll.so"


def lib_dir() -> Path:
    """The directory the libraries are taken from: $NCCL_TRIM_LIB_DIR, else the package's lib/."""
    override = os.environ.get(LIB_DIR_ENV)
    if override:
        return Path(override).expanduser().resolve()
    return Path(__file__).resolve().parent / "lib"


def _library(name: str) -> str:
    directory = lib_dir()
    path = directory / name
    if path.is_file():
        return str(path)
    if os.environ.get(LIB_DIR_ENV):
        how = f"{LIB_DIR_ENV}={os.environ[LIB_DIR_ENV]} has no {name}: run `make python-libs` in the " \
              f"repository, or unset {LIB_DIR_ENV} to use the installed package's copy"
    else:
        how = "the package was not installed with its libraries: `pip install .` from the repository " \
              f"builds them, or set {LIB_DIR_ENV} to a build's lib/ directory (after `make python-libs`)"
    raise LibraryError(f"{name} not found in {directory}: {how}")


def plugin_path() -> str:
    """Absolute path of the NCCL net plugin (the value for NCCL_NET_PLUGIN)."""
    return _library(PLUGIN_NAME)


def rht_library_path() -> str:
    """Absolute path of libtrim-rht.so, the comm hook's rotation (cuda/trim_rht.h)."""
    return _library(RHT_NAME)


def coll_library_path() -> str:
    """Absolute path of libtrim-coll.so, the collective engine of the "trim" torch.distributed
    backend (coll/trim_coll.h)."""
    return _library(COLL_NAME)


def load_cdll(path: str, what: str, signatures: Mapping[str, Tuple[Sequence, object]], abi_symbol: str,
              abi: int) -> ctypes.CDLL:
    """`path` loaded with ctypes, each function of `signatures` ({name: (argtypes, restype)}) typed,
    and its ABI version (`abi_symbol()`) checked against `abi`; a LibraryError that names the path
    and says how to fix it otherwise. `what` names the library ("libtrim-rht")."""
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise LibraryError(f"cannot load {path}: {e}") from e
    try:
        for name, (args, res) in signatures.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = list(args), res
        getattr(lib, abi_symbol).restype = ctypes.c_int
    except AttributeError as e:
        raise LibraryError(f"{path} is not {what} (missing symbol: {e})") from e
    theirs = getattr(lib, abi_symbol)()
    if theirs != abi:
        raise LibraryError(f"{path} has ABI version {theirs}, this package speaks {abi}: rebuild it from the same "
                           "checkout (`make python-libs`) or reinstall")
    return lib
