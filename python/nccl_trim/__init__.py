"""nccl_trim: run PyTorch training through the nccl-trim NCCL net plugin.

    import nccl_trim
    nccl_trim.apply_env(scheme="rht")          # before init_process_group
    dist.init_process_group("nccl")
    model = DDP(model, device_ids=[local_rank])
    nccl_trim.register(model)                   # the RHT comm hook

or, with no change to the script: ``python -m nccl_trim.run --nproc-per-node 8 train.py``.

On CPU, the torch.distributed backend "trim" carries a job's collectives through the same plugin:
``dist.init_process_group("trim")`` (or ``"cpu:trim,cuda:nccl"``); ``python -m nccl_trim.run
--trim-cpu`` makes a gloo script use it unchanged.

The design is in this package's README.md. Importing nccl_trim does not import torch: it registers
the "trim" backend once torch is imported (at once if it already is); only register() and the hooks
(nccl_trim.hook) and the backend (nccl_trim.backend) need torch.
"""

from ._autoregister import register_backend_with_torch
from .environment import NET_NAME, apply_env, env
from .errors import (CollectiveError, HookConflictError, HookOverrideWarning, LibraryError, NcclTooOldError,
                     PluginError, RowMismatchError, TrimError, UnsupportedError)
from .libs import coll_library_path, lib_dir, plugin_path, rht_library_path

__version__ = "0.1.0"

__all__ = [
    "CollectiveError", "HookConflictError", "HookOverrideWarning", "LibraryError", "NET_NAME", "NcclTooOldError", "PluginError", "RhtState",
    "RowMismatchError", "TrimError", "UnsupportedError", "apply_env", "coll_library_path", "env", "fsdp_rht_hook", "lib_dir",
    "plugin_path", "register", "rht_hook", "rht_library_path",
]

register_backend_with_torch()

_TORCH_NAMES = ("register", "rht_hook", "fsdp_rht_hook", "RhtState")


def __getattr__(name):
    # The torch-dependent names come from nccl_trim.hook on first use (PEP 562), so that
    # `import nccl_trim` works, and env() can be used, where torch is absent.
    if name in _TORCH_NAMES:
        from . import hook
        return getattr(hook, name)
    raise AttributeError(f"module 'nccl_trim' has no attribute {name!r}")
