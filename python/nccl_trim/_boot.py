"""Worker bootstrap of nccl_trim.run:

    python -m nccl_trim._boot [--seed=N] [--row-log2=R] [--optional-plugin] [--trim-cpu] [--no-hook]
                              [--module] [--] TARGET ARGS...

Installs the RHT hook on every DistributedDataParallel built in this process (DDP.__init__ is
patched to call nccl_trim.register after construction; not with --no-hook), then runs TARGET (a
script, or a module with --module) as __main__ with sys.argv and sys.path[0] as `python TARGET ARGS`
would have them. A script that registers its own DDP comm hook (torch's PowerSGD, say) gets it: ours
goes in through a switch, and the script's hook takes its place on that model, with a
HookOverrideWarning naming both (DDP takes one hook per model; --no-hook silences it).

--trim-cpu: every process group the script asks of gloo (by name, in a device map such as
"cpu:gloo,cuda:nccl", or by naming no backend) is made with the "trim" backend instead, so its CPU
collectives go through the plugin; nothing else about the script changes.
"""

import functools
import os
import runpy
import sys
from typing import Callable, Dict, List, Tuple

_FLAGS = {"--optional-plugin": "optional_plugin", "--module": "module", "--trim-cpu": "cpu",
          "--no-hook": "no_hook"}
_VALUES = {"--seed": "seed", "--row-log2": "row_log2"}


def parse(argv: List[str]) -> Tuple[Dict[str, object], str, List[str]]:
    """(options, target, target's args). Options are the leading --name[=value] tokens, up to `--`
    or the first other token; everything after belongs to the target."""
    opts: Dict[str, object] = {"module": False, "optional_plugin": False, "cpu": False, "no_hook": False}
    i = 0
    while i < len(argv) and argv[i].startswith("--"):
        token = argv[i]
        i += 1
        if token == "--":
            break
        name, sep, value = token.partition("=")
        if name in _FLAGS and not sep:
            opts[_FLAGS[name]] = True
        elif name in _VALUES and sep:
            opts[_VALUES[name]] = int(value, 0)
        else:
            raise SystemExit(f"nccl_trim._boot: unknown option {token!r} (options: "
                             f"{', '.join(list(_FLAGS) + [v + '=N' for v in _VALUES])})")
    if i >= len(argv):
        raise SystemExit("nccl_trim._boot: no script or module to run")
    return opts, argv[i], argv[i + 1:]


def install(**register_kwargs) -> Callable[[], None]:
    """Patch DDP so every new model gets the RHT hook; returns the function that undoes it.

    The class itself is patched (its __init__), not a module's name for it: a library that
    imported DistributedDataParallel before this ran, and its subclasses, get the hook too
    (tests/python/test_launcher_ddp.py)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    # Absolute imports: torchrun --run-path runs this file by path, outside the package.
    import warnings

    from nccl_trim.errors import HookOverrideWarning
    from nccl_trim.hook import register, rht_hook

    init, add_hook, add_builtin = DDP.__init__, DDP.register_comm_hook, DDP._register_builtin_comm_hook

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        register(self, **register_kwargs)

    def take_over(self, state, hook, what: str) -> bool:
        """The script's own hook replaces ours on this model (True), if ours is what it has."""
        switch = getattr(self, "_nccl_trim_switch", None)
        if switch is None or switch[1] is not rht_hook:
            return False
        warnings.warn(
            f"nccl_trim.run: the script registers its own DDP comm hook ({what}) on a model that had the "
            "launcher's RHT hook (nccl_trim.hook.rht_hook); DDP takes one hook per model, so the script's runs "
            "and the RHT hook is skipped for this model (the plugin still carries its traffic). To keep the RHT "
            "hook, drop the script's register_comm_hook call; launch with --no-hook to silence this.",
            HookOverrideWarning, stacklevel=3)
        switch[:] = [state, hook]
        self._comm_hooks = [(hook, state)]  # what DDP's compiled-autograd path calls
        if self.logger is not None:
            self.logger._set_comm_hook_name(what)
        self._nccl_trim_state = None
        return True

    @functools.wraps(add_hook)
    def register_comm_hook(self, state, hook):
        if hook is rht_hook and getattr(self, "_nccl_trim_switch", None) is None:
            # Ours (register() above), through a switch: DDP's reducer takes one hook, for good.
            switch = [state, hook]

            @functools.wraps(rht_hook)
            def nccl_trim_switch(_state, bucket):
                return switch[1](switch[0], bucket)

            add_hook(self, state, nccl_trim_switch)
            self._comm_hooks[-1] = (hook, state)
            self._nccl_trim_switch = switch
            return None
        if hook is not rht_hook:
            self._check_comm_hook(hook)
            if take_over(self, state, hook, getattr(hook, "__qualname__", repr(hook))):
                return None
        return add_hook(self, state, hook)

    @functools.wraps(add_builtin)
    def _register_builtin_comm_hook(self, comm_hook_type):
        # A built-in (C++) hook cannot go through the switch: its Python twin does.
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        twin = {dist.BuiltinCommHookType.ALLREDUCE: default_hooks.allreduce_hook,
                dist.BuiltinCommHookType.FP16_COMPRESS: default_hooks.fp16_compress_hook}.get(comm_hook_type)
        if twin is not None and take_over(self, self.process_group, twin,
                                          f"{comm_hook_type}, run as its Python twin {twin.__qualname__}"):
            return None
        return add_builtin(self, comm_hook_type)

    DDP.__init__, DDP.register_comm_hook = __init__, register_comm_hook
    DDP._register_builtin_comm_hook = _register_builtin_comm_hook

    def uninstall() -> None:
        DDP.__init__, DDP.register_comm_hook, DDP._register_builtin_comm_hook = init, add_hook, add_builtin

    return uninstall


def cpu_backend(backend, cuda_available: bool) -> str:
    """The backend string a --trim-cpu worker uses for what the script asked: gloo becomes trim,
    wherever it appears ("gloo", "cpu:gloo,cuda:nccl"); no backend means torch's default, with trim
    for the CPU."""
    if backend is None:
        return "cpu:trim,cuda:nccl" if cuda_available else "trim"
    text = str(backend)
    parts = []
    for item in text.split(","):
        device, sep, name = item.strip().rpartition(":")
        name = "trim" if name.strip().lower() == "gloo" else name.strip()
        parts.append(f"{device}{sep}{name}")
    return ",".join(parts)


def install_cpu() -> Callable[[], None]:
    """Make init_process_group and new_group use "trim" where the script asks for gloo; returns
    the function that undoes it."""
    import torch
    import torch.distributed as dist

    from nccl_trim.backend import register as register_trim

    register_trim()
    init, new_group = dist.init_process_group, dist.new_group
    cuda = torch.cuda.is_available()

    @functools.wraps(init)
    def init_process_group(backend=None, *args, **kwargs):
        return init(cpu_backend(backend, cuda), *args, **kwargs)

    @functools.wraps(new_group)
    def new_group_(ranks=None, timeout=None, backend=None, *args, **kwargs):
        # No backend: the default group's, which is trim already.
        return new_group(ranks, timeout, None if backend is None else cpu_backend(backend, cuda), *args, **kwargs)

    # Both names: scripts reach them as torch.distributed.X and torch.distributed.distributed_c10d.X.
    c10d = dist.distributed_c10d
    dist.init_process_group = c10d.init_process_group = init_process_group
    dist.new_group = c10d.new_group = new_group_

    def uninstall() -> None:
        dist.init_process_group = c10d.init_process_group = init
        dist.new_group = c10d.new_group = new_group

    return uninstall


def main(argv=None) -> None:
    opts, target, args = parse(sys.argv[1:] if argv is None else argv)
    kwargs = {"require_plugin": False if opts["optional_plugin"] else None}
    if "seed" in opts:
        kwargs["seed"] = opts["seed"]
    if "row_log2" in opts:
        kwargs["row_log2"] = opts["row_log2"]
    if opts["cpu"]:
        install_cpu()
    if not opts["no_hook"]:
        install(**kwargs)
    if opts["module"]:
        sys.argv = [target, *args]  # run_module puts the module's file in argv[0]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [target, *args]
        sys.path[0] = os.path.dirname(os.path.abspath(target))
        runpy.run_path(target, run_name="__main__")


if __name__ == "__main__":
    main()
