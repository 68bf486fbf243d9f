"""The NCCL environment that makes NCCL use the plugin.

NCCL reads these variables when it creates its first communicator, so they must be in the
environment before ``init_process_group`` (or before the workers start: ``nccl_trim.run`` puts
them in the launcher's environment, which torchrun's workers inherit).
"""

import os
import re
from typing import Dict, Mapping, MutableMapping, Optional

from .libs import plugin_path

# NCCL's `name` of our net: with NCCL_NET set, NCCL uses only this network and fails loudly
# instead of falling back to IB/Socket when the plugin's init fails.
NET_NAME = "Trim"
_KEY = re.compile(r"^[a-z][a-z0-9_]*$")


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


def env(*, override: bool = False, environ: Optional[Mapping[str, str]] = None, **trim: object) -> Dict[str, str]:
    """The NCCL_* settings that run NCCL through the plugin, as a dict.

    NCCL_NET_PLUGIN (the plugin's absolute path), NCCL_NET=Trim, and one NCCL_TRIM_<KEY> per keyword
    argument: ``env(scheme="rht", head_bits=16)`` adds NCCL_TRIM_SCHEME=rht, NCCL_TRIM_HEAD_BITS=16
    (docs/CONFIG.md lists the knobs; the plugin validates the values at init). A variable already in
    `environ` (default: os.environ) keeps its value unless `override` is true, so a user's own
    setting wins over a script's default; the dict always holds the values that will be in force.
    """
    environ = os.environ if environ is None else environ
    wanted = {"NCCL_NET_PLUGIN": plugin_path(), "NCCL_NET": NET_NAME}
    for key, value in trim.items():
        if not _KEY.match(key):
            raise ValueError(f"nccl_trim.env: {key!r} is not a knob name (lower case, e.g. scheme='rht' "
                             "for NCCL_TRIM_SCHEME)")
        wanted[f"NCCL_TRIM_{key.upper()}"] = _value(value)
    if override:
        return wanted
    return {k: environ.get(k, v) for k, v in wanted.items()}


def apply_env(*, override: bool = False, environ: Optional[MutableMapping[str, str]] = None,
              **trim: object) -> Dict[str, str]:
    """Put env(...) into `environ` (default os.environ) and return it. Call it before
    init_process_group; afterwards NCCL has already read its environment."""
    environ = os.environ if environ is None else environ
    settings = env(override=override, environ=environ, **trim)
    environ.update(settings)
    return settings
