"""nccl-trim's experiments, one module each, run as `python -m bench <command>` from the checkout.

Shared pieces live once: `jsonio` (JSON lines in and out), `rounds` (alternated rounds, paired
medians and their intervals), `report` (formatting and tables), `plot` (matplotlib figures),
`proc` (processes, the switch, CPU accounting). Bash stays only for plumbing (namespaces and the
TUN bottleneck, set-up, packing the GPU machine's binaries)."""

import hashlib
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"


def build_dir(path="build"):
    """The build directory as an absolute path (relative ones are taken from the checkout)."""
    p = Path(path)
    return p if p.is_absolute() else (REPO / p)


def build_info(build):
    """(BUILD/BUILD_INFO's fields (scripts/pack-gpu.sh writes commit, plugin_sha256), the plugin's sha256[:16])."""
    f, so = Path(build) / "BUILD_INFO", Path(build) / "lib/libnccl-net-trim.so"
    info = dict(re.findall(r"^(\w+) (\S+)", f.read_text(), re.M)) if f.is_file() else {}
    return info, hashlib.sha256(so.read_bytes()).hexdigest()[:16] if so.is_file() else None
