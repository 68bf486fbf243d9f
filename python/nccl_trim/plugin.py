"""A view of the plugin NCCL loaded into this process, through the hook exports of
libnccl-net-trim.so (nccl_trim_hook_*).

NCCL dlopens the plugin RTLD_NOW | RTLD_LOCAL; dlopen with RTLD_NOLOAD of the same file returns
that very object (same globals) and fails when NCCL did not load it. So the counters read here are
NCCL's own: they prove that NCCL carries the hook's communicator through the plugin, not merely that
the file exists; and a declaration made here (declare()) is made in the plugin NCCL uses. Nothing
here loads the plugin (the trim backend's libtrim-coll loads the same file, so the same holds for
trim groups).
"""

import ctypes
import json
import os
from typing import Iterator, Mapping, Optional

from .errors import LibraryError, PluginError, RowMismatchError
from .libs import plugin_path

# 2: nccl_trim_hook_declare; the plugin sends no class as rotated without it.
HOOK_ABI = 2
# The class the plugin treats as the hook's unless NCCL_TRIM_HOOK_TRAFFIC_CLASS says otherwise:
# both sides read the same variable.
TRAFFIC_CLASS_ENV = "NCCL_TRIM_HOOK_TRAFFIC_CLASS"
DEFAULT_TRAFFIC_CLASS = 116

_COUNTERS = ("nccl_trim_hook_comms", "nccl_trim_hook_send_conns", "nccl_trim_hook_undeclared_conns",
             "nccl_trim_rotated_messages")
_ERROR_BYTES = 1024


def hook_traffic_class(environ: Optional[Mapping[str, str]] = None) -> int:
    """The traffic class that tags the hook's communicator: $NCCL_TRIM_HOOK_TRAFFIC_CLASS or 116."""
    environ = os.environ if environ is None else environ
    text = environ.get(TRAFFIC_CLASS_ENV, "").strip()
    if not text:
        return DEFAULT_TRAFFIC_CLASS
    try:
        value = int(text, 0)
    except ValueError:
        raise PluginError(f"{TRAFFIC_CLASS_ENV}={text!r} is not an integer") from None
    if not 0 <= value <= 255:
        raise PluginError(f"{TRAFFIC_CLASS_ENV}={value} is out of range (0..255, an IP traffic class)")
    return value


def _candidates(environ: Mapping[str, str]) -> Iterator[str]:
    """The names under which NCCL may have loaded the plugin, as NCCL 2.28 resolves
    NCCL_NET_PLUGIN (src/plugin/plugin_open.cc): the value as given, then libnccl-net-<value>.so;
    unset, libnccl-net.so. Our own copy last (RTLD_NOLOAD matches a file by identity)."""
    value = environ.get("NCCL_NET_PLUGIN", "")
    if value and value.lower() != "none":
        yield value
        if "/" not in value:
            yield f"libnccl-net-{value}.so"
    elif not value:
        yield "libnccl-net.so"
    try:
        yield plugin_path()
    except LibraryError:
        pass


class LoadedPlugin:
    """The plugin object NCCL loaded, with its hook exports typed."""

    def __init__(self, lib: ctypes.CDLL, name: str):
        self._lib = lib
        self.name = name
        try:
            lib.nccl_trim_hook_abi.restype = ctypes.c_int
        except AttributeError as e:
            raise PluginError(
                f"the NCCL net plugin loaded from {name} has no hook exports ({e}): it is not "
                "nccl-trim's plugin, or one built before the PyTorch hook existed; rebuild or reinstall") from e
        abi = lib.nccl_trim_hook_abi()
        if abi != HOOK_ABI:
            raise PluginError(f"the plugin loaded from {name} has hook ABI {abi}, this package speaks {HOOK_ABI}: "
                              "install the package and the plugin from the same checkout")
        try:
            lib.nccl_trim_hook_traffic_class.restype = ctypes.c_int
            lib.nccl_trim_hook_declare.restype = ctypes.c_int
            lib.nccl_trim_hook_declare.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
            for counter in _COUNTERS:
                getattr(lib, counter).restype = ctypes.c_uint64
        except AttributeError as e:
            raise PluginError(f"the plugin loaded from {name} says hook ABI {abi} but lacks one of its exports ({e}): "
                              "a broken build; rebuild or reinstall") from e

    def traffic_class(self) -> int:
        """The class the plugin treats as the hook's (its NCCL_TRIM_HOOK_TRAFFIC_CLASS)."""
        return self._lib.nccl_trim_hook_traffic_class()

    def declare(self, traffic_class: int, row_log2: int) -> None:
        """Tells the plugin that data of `traffic_class` arrives rotated, in rows of 2**row_log2
        elements: only then do that class's connections send as scheme "rotated" (no transform).
        The hook does it before it creates its group; by default the plugin trusts no class and
        rotates such data per hop. RowMismatchError when 2**row_log2 is not the plugin's
        NCCL_TRIM_ROW_ELEMS, PluginError when the class is not its NCCL_TRIM_HOOK_TRAFFIC_CLASS
        (or its environment is invalid); both name the two values."""
        buf = ctypes.create_string_buffer(_ERROR_BYTES)
        rc = self._lib.nccl_trim_hook_declare(traffic_class, row_log2, buf, len(buf))
        if rc == 0:
            return
        text = buf.value.decode("utf-8", "replace")
        if rc == -2:
            raise RowMismatchError(f"nccl_trim: {text}")
        raise PluginError(f"nccl_trim: the plugin {self.name} refused the hook's declaration: {text}")

    def hook_comms(self) -> int:
        """NCCL communicators initialised with the hook's traffic class so far."""
        return self._lib.nccl_trim_hook_comms()

    def hook_send_conns(self) -> int:
        """Send connections that pack pre-rotated data (wire scheme "rotated")."""
        return self._lib.nccl_trim_hook_send_conns()

    def undeclared_conns(self) -> int:
        """Send connections of the hook's traffic class sent as per-hop rht, since no hook declared
        the class (a tag alone is not trusted)."""
        return self._lib.nccl_trim_hook_undeclared_conns()

    def rotated_messages(self) -> int:
        """Messages sent with scheme "rotated"."""
        return self._lib.nccl_trim_rotated_messages()

    def stats(self) -> dict:
        """The plugin's process-wide counters (ncclTrimStatsJson): packets, trims, retransmissions...
        A connection's counters are folded in when it closes (after destroy_process_group for the
        trim backend, after NCCL's communicator is destroyed)."""
        fn = self._lib.ncclTrimStatsJson
        fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_char_p, ctypes.c_int]
        buf = ctypes.create_string_buffer(1 << 16)
        n = fn(buf, len(buf))
        if n < 0 or n >= len(buf):
            raise PluginError(f"ncclTrimStatsJson of {self.name} returned {n}")
        return json.loads(buf.value.decode())


def loaded_plugin(environ: Optional[Mapping[str, str]] = None) -> LoadedPlugin:
    """The nccl-trim plugin NCCL loaded into this process; PluginError when there is none."""
    environ = os.environ if environ is None else environ
    tried = []
    mode = os.RTLD_NOLOAD | os.RTLD_NOW | os.RTLD_LOCAL
    for name in _candidates(environ):
        try:
            return LoadedPlugin(ctypes.CDLL(name, mode=mode), name)
        except OSError:
            tried.append(name)
    raise PluginError(
        "NCCL has not loaded the nccl-trim plugin into this process (looked for "
        f"{', '.join(tried) or 'nothing: NCCL_NET_PLUGIN=none'}). NCCL_NET_PLUGIN="
        f"{environ.get('NCCL_NET_PLUGIN', '(unset)')}, NCCL_NET={environ.get('NCCL_NET', '(unset)')}. "
        "Set the variables of nccl_trim.env() before init_process_group (nccl_trim.apply_env(), or "
        "launch with python -m nccl_trim.run), and make sure a collective ran on the NCCL backend.")
