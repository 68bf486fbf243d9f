"""Registers the "trim" torch.distributed backend as soon as torch is imported, without importing
torch here: `import nccl_trim` stays cheap and works where torch is absent, and a script that
imports nccl_trim (before or after torch) can call init_process_group("trim"). An installed package
needs none of this (pip's entry point in the torch.distributed.backends group names
nccl_trim.backend:register, which torch consults for an unknown backend); a checkout on PYTHONPATH
does.
"""

import importlib.abc
import importlib.util
import sys
import warnings


def _register() -> None:
    try:
        from .backend import register
        register()
    except Exception as e:  # noqa: BLE001 - a torch we cannot register with must not break `import torch`
        warnings.warn(f"nccl_trim: could not register the 'trim' torch.distributed backend: {e}", stacklevel=2)


class _AfterTorch(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when `torch` is about to be imported, it asks the other finders for its
    spec and has the loader register the backend once torch's module has run (torch imports
    torch.distributed itself)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            _register()

        spec.loader.exec_module = exec_then_register
        return spec


def register_backend_with_torch() -> None:
    if "torch.distributed" in sys.modules:
        _register()
    elif "torch" not in sys.modules and not any(isinstance(f, _AfterTorch) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterTorch())
