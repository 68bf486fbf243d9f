"""The command line of ``python -m nccl_trim.run``: torchrun's parser plus our options.

Ours are added to torchrun's own parser (torch.distributed.run.get_args_parser), so argparse sorts
everything out as torchrun would: our options go anywhere before the training script, and whatever
follows the script is the script's, even when it looks like ours. Every option of ours starts with
--trim- (or is --no-hook), names torchrun does not use. No torch here: any parser of torchrun's
shape works, which is how the tests check this without torch.
"""

import argparse
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from .rht import MAX_ROW_LOG2

BOOT_MODULE = "nccl_trim._boot"
# (flag, dest): the options this module adds, to find and strip them from the namespace.
_OURS = {
    "--no-hook": "trim_no_hook",
    "--trim-scheme": "trim_scheme",
    "--trim-env": "trim_env",
    "--trim-override-env": "trim_override_env",
    "--trim-seed": "trim_seed",
    "--trim-row-log2": "trim_row_log2",
    "--trim-optional-plugin": "trim_optional_plugin",
    "--trim-cpu": "trim_cpu",
}


@dataclass
class LaunchOptions:
    hook: bool = True
    trim_env: Dict[str, str] = field(default_factory=dict)  # env() keywords: {"scheme": "rht"}
    override_env: bool = False
    seed: Optional[int] = None
    row_log2: Optional[int] = None
    optional_plugin: bool = False
    cpu: bool = False  # gloo -> trim in every worker

    def boot_args(self) -> List[str]:
        """The bootstrap's options that carry register()'s arguments to every worker."""
        args = []
        if self.cpu:
            args.append("--trim-cpu")
        if not self.hook:
            args.append("--no-hook")
        if self.seed is not None:
            args.append(f"--seed={self.seed}")
        if self.row_log2 is not None:
            args.append(f"--row-log2={self.row_log2}")
        if self.optional_plugin:
            args.append("--optional-plugin")
        return args


def _knob(text: str) -> tuple:
    key, sep, value = text.partition("=")
    key = key.strip().lower()
    if key.startswith("nccl_trim_"):
        key = key[len("nccl_trim_"):]
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KNOB=VALUE (e.g. head_bits=16 for NCCL_TRIM_HEAD_BITS)")
    return key, value


def _row_log2(text: str) -> int:
    value = int(text)
    if not 0 <= value <= MAX_ROW_LOG2:
        raise argparse.ArgumentTypeError(f"{value} is out of range (0..{MAX_ROW_LOG2})")
    return value


def add_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add our options to torchrun's parser. argparse raises if a name clashes with torchrun's."""
    g = parser.add_argument_group("nccl_trim", "The nccl-trim plugin and its RHT comm hook. The plugin's NCCL_* "
                                  "settings (nccl_trim.env()) go into every worker's environment.")
    g.add_argument("--no-hook", dest="trim_no_hook", action="store_true",
                   help="Run the script as it is: NCCL uses the plugin, but no RHT hook is installed.")
    g.add_argument("--trim-scheme", dest="trim_scheme", metavar="SCHEME",
                   help="NCCL_TRIM_SCHEME for the plugin (none|sign|sq|sd|rht).")
    g.add_argument("--trim-env", dest="trim_env", metavar="KNOB=VALUE", type=_knob, action="append", default=[],
                   help="Any other NCCL_TRIM_<KNOB>=VALUE (docs/CONFIG.md), e.g. head_bits=16; repeatable.")
    g.add_argument("--trim-override-env", dest="trim_override_env", action="store_true",
                   help="Let these settings replace NCCL_* values already in the environment (default: yours win).")
    g.add_argument("--trim-seed", dest="trim_seed", metavar="N", type=lambda s: int(s, 0),
                   help="The hook's job seed (default: a constant; it must be the same on every node).")
    g.add_argument("--trim-row-log2", dest="trim_row_log2", metavar="R", type=_row_log2,
                   help=f"The hook rotates rows of 2^R elements (0..{MAX_ROW_LOG2}, default 15).")
    g.add_argument("--trim-optional-plugin", dest="trim_optional_plugin", action="store_true",
                   help="Warn instead of failing when NCCL does not carry the hook's communicator through "
                        "the plugin.")
    g.add_argument("--trim-cpu", dest="trim_cpu", action="store_true",
                   help="Carry the script's CPU collectives through the plugin too: every gloo process group "
                        "it creates (init_process_group('gloo'), 'cpu:gloo,cuda:nccl', new_group(backend='gloo'), "
                        "or no backend named) uses the torch.distributed backend 'trim' instead.")
    return parser


def take_options(args: argparse.Namespace) -> LaunchOptions:
    """Our options out of a parsed namespace (removed from it, so torchrun sees only its own)."""
    values = {dest: getattr(args, dest) for dest in _OURS.values()}
    for dest in _OURS.values():
        delattr(args, dest)
    trim_env = dict(values["trim_env"])
    if values["trim_scheme"] is not None:
        trim_env["scheme"] = values["trim_scheme"]
    return LaunchOptions(hook=not values["trim_no_hook"], trim_env=trim_env,
                         override_env=values["trim_override_env"], seed=values["trim_seed"],
                         row_log2=values["trim_row_log2"], optional_plugin=values["trim_optional_plugin"],
                         cpu=values["trim_cpu"])


def wrap_worker(args: argparse.Namespace, opts: LaunchOptions, boot_file: str) -> None:
    """Make torchrun start every worker through the bootstrap, which installs the hook (and, with
    --trim-cpu, the gloo -> trim switch) and then runs the user's script (or module) as __main__
    with the user's arguments. boot_file: _boot.py's path,
    for --run-path (torchrun then runs the "script" with runpy in its own worker)."""
    if not opts.hook and not opts.cpu:
        return
    if args.no_python:
        raise SystemExit("nccl_trim.run: --no-python runs no Python, so neither the hook nor --trim-cpu can be "
                         "installed; add --no-hook (without --trim-cpu) to launch it with the plugin's environment only")
    target = [*opts.boot_args(), *(["--module"] if args.module else []), "--", args.training_script]
    args.training_script_args = target + list(args.training_script_args)
    if args.run_path:
        args.training_script = boot_file
    else:
        args.training_script = BOOT_MODULE
        args.module = True


def boot_file() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_boot.py")
