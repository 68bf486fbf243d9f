"""Worker bootstrap of nccl_trim.run:

    python -m nccl_trim._boot [--seed=N] [--row-log2=R] [--optional-plugin] [--module] [--] TARGET ARGS...

Installs the RHT hook on every DistributedDataParallel built in this process (DDP.__init__ is
patched to call nccl_trim.register after construction), then runs TARGET (a script, or a module
with --module) as __main__ with sys.argv and sys.path[0] as `python TARGET ARGS` would have them.
A script that registers its own DDP comm hook fails with a clear error: DDP takes one hook per
model, and ours is already there (launch with --no-hook to keep the script's).
"""

import functools
import os
import runpy
import sys
from typing import Callable, Dict, List, Tuple

_FLAGS = {"--optional-plugin": "optional_plugin", "--module": "module"}
_VALUES = {"--seed": "seed", "--row-log2": "row_log2"}


def parse(argv: List[str]) -> Tuple[Dict[str, object], str, List[str]]:
    """(options, target, target's args). Options are the leading --name[=value] tokens, up to `--`
    or the first other token; everything after belongs to the target."""
    opts: Dict[str, object] = {"module": False, "optional_plugin": False}
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
    """Patch DDP so every new model gets the RHT hook; returns the function that undoes it."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    # Absolute imports: torchrun --run-path runs this file by path, outside the package.
    from nccl_trim.errors import HookConflictError
    from nccl_trim.hook import register, rht_hook

    init, add_hook, add_builtin = DDP.__init__, DDP.register_comm_hook, DDP._register_builtin_comm_hook

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        register(self, **register_kwargs)

    def refuse(self, what: str) -> None:
        if getattr(self, "_nccl_trim_state", None) is not None:
            raise HookConflictError(
                f"the script registers its own DDP comm hook ({what}), but nccl_trim.run already installed "
                "the RHT hook on this model (DDP takes one per model): launch with --no-hook to use the "
                "script's hook (the plugin still carries the traffic), or drop the script's hook")

    @functools.wraps(add_hook)
    def register_comm_hook(self, state, hook):
        if hook is not rht_hook:
            refuse(self, getattr(hook, "__qualname__", repr(hook)))
        return add_hook(self, state, hook)

    @functools.wraps(add_builtin)
    def _register_builtin_comm_hook(self, comm_hook_type):
        refuse(self, str(comm_hook_type))
        return add_builtin(self, comm_hook_type)

    DDP.__init__, DDP.register_comm_hook = __init__, register_comm_hook
    DDP._register_builtin_comm_hook = _register_builtin_comm_hook

    def uninstall() -> None:
        DDP.__init__, DDP.register_comm_hook, DDP._register_builtin_comm_hook = init, add_hook, add_builtin

    return uninstall


def main(argv=None) -> None:
    opts, target, args = parse(sys.argv[1:] if argv is None else argv)
    kwargs = {"require_plugin": False if opts["optional_plugin"] else None}
    if "seed" in opts:
        kwargs["seed"] = opts["seed"]
    if "row_log2" in opts:
        kwargs["row_log2"] = opts["row_log2"]
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
