"""nccl-trim's experiments, one module each, run as `python -m bench <command>` from the checkout.

Shared pieces live once: `jsonio` (JSON lines in and out), `rounds` (alternated rounds, paired
medians and their intervals), `report` (formatting and tables), `plot` (matplotlib figures),
`proc` (processes, the switch, CPU accounting). Bash stays only for plumbing (namespaces and the
TUN bottleneck, set-up, packing the GPU machine's binaries)."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"


def build_dir(path="build"):
    """The build directory as an absolute path (relative ones are taken from the checkout)."""
    p = Path(path)
    return p if p.is_absolute() else (REPO / p)
