"""The exceptions of nccl_trim: one base class, so callers can catch everything of ours at once.

Each error names what was found, what was expected and how to fix it: they are read by people
whose training job just failed to start, usually far from this package's source.
"""


class TrimError(RuntimeError):
    """Base class of every error nccl_trim raises."""


class LibraryError(TrimError):
    """libnccl-net-trim.so or libtrim-rht.so is missing, unloadable, of another ABI, or cannot do
    what was asked of it (e.g. rotate on the GPU when it was built without nvcc)."""


class PluginError(TrimError):
    """NCCL is not carrying the hook's communicator through the nccl-trim plugin: the plugin was
    not loaded, another network was chosen, or the plugin does not recognise the hook's tag."""


class RowMismatchError(TrimError):
    """The hook rotates rows of another length than the plugin encodes (register()'s row_log2 vs
    NCCL_TRIM_ROW_ELEMS): the plugin would scale its sign heads over rows the rotation did not
    spread, and estimate trimmed values badly. Raised by register() whatever require_plugin says."""


class NcclTooOldError(PluginError):
    """The NCCL (or torch) in this process cannot tag a communicator with a traffic class: net
    API v10 (NCCL <= 2.27) calls the plugin's init once per process, not per communicator."""


class HookConflictError(TrimError):
    """A model already has a communication hook (one per model), so the RHT hook cannot be added."""


class HookOverrideWarning(UserWarning):
    """Under python -m nccl_trim.run, the script registered its own DDP comm hook on a model that
    had the launcher's RHT hook: the script's hook runs, ours is skipped on that model."""


class UnsupportedError(TrimError):
    """The trim torch.distributed backend was asked for something it does not carry: a dtype or
    reduction NCCL has no type for, a non-CPU or sparse tensor, or arguments that cannot be right
    (a bad root, split sizes that do not add up, uneven all_gather sizes)."""


class CollectiveError(TrimError):
    """A collective of the trim backend failed: a peer died or closed, the ranks called different
    collectives (or sizes, dtypes, ops), the timeout passed, or the group was aborted. The process
    group is unusable afterwards (every later call fails with the first error), as NCCL's is after
    an error. `code` is libtrim-coll's status (nccl_trim.coll.E*)."""

    def __init__(self, message: str, code: int = 0):
        super().__init__(message)
        self.code = code
