"""The RHT communication hook: rotate each gradient bucket before NCCL sums it, undo it after.

Why: the plugin sends every value as a 1-bit sign head plus an exact tail, and a congested switch
may cut the tails. A sign is a good estimate only of a rotated vector (energy spread evenly), and
the plugin makes no CUDA call (a CUDA call on NCCL's proxy thread can deadlock behind the
application's own), so the rotation runs here, on the application's current stream. The rotation
R is linear, so sum_i R g_i = R sum_i g_i: the ranks rotate alike (same seed), NCCL sums rotated
buckets, and each rank applies R^-1 to the sum. The plugin recognises the hook's communicator by
its NCCL traffic class, which the hook declares to it (with its row length) before it creates the
group, and packs that data as already rotated (wire scheme "rotated"); a class nobody declared is
rotated per hop like any other traffic, so a tag alone never costs accuracy.

This module needs torch; the rest of the package does not.
"""

import atexit
import logging
import os
import threading
import time
from typing import Dict, Optional, Tuple

import torch
import torch.distributed as dist

from . import precondition, rht
from .errors import HookConflictError, LibraryError, NcclTooOldError, PluginError, TrimError
from .plugin import hook_traffic_class, loaded_plugin

log = logging.getLogger("nccl_trim")

# The job seed when none is given: any constant works, it only has to be the same on every rank
# (register() checks that it is).
DEFAULT_JOB_SEED = 0x7472696D686F6F6B
# FSDP1 calls have no bucket index; they take this one and count calls instead of steps.
_FSDP_BUCKET = 0xFFFFFFFF
_DTYPES = {torch.float32: rht.F32, torch.bfloat16: rht.BF16, torch.float16: rht.F16}
_MIN_NCCL = (2, 28)  # net API v11: the plugin's init runs per communicator and sees trafficClass


_STATE_VERSION = 1


class RhtState:
    """What the hook needs between calls, like PowerSGD's state.

    process_group: the model's own group, for buckets the hook cannot rotate (sent plainly, so
    the plugin never mistakes them for rotated data); hook_group: the communicator tagged with the
    hook's traffic class (the same group under gloo); step: DDP steps (advanced on the last
    bucket), or FSDP1 hook calls.

    Checkpoints: a state pickles (torch.save, pickle) as its job seed, row length and step; the
    process groups and the library are not saved. A restored state is bound to no group until it
    is given back to register(model, state=state), which checks that every rank restored the same
    seed and step and then continues from that step. torch.load(weights_only=True) accepts it
    (nccl_trim.hook adds it to torch's safe globals).
    """

    __slots__ = ("process_group", "hook_group", "world_size", "rank", "job_seed", "row_log2", "step", "lib",
                 "_untouched", "fixed_rotation", "preconditioner")

    def __init__(self, process_group, hook_group, job_seed: int, row_log2: int, lib: rht.RhtLibrary):
        self.job_seed = job_seed
        self.row_log2 = row_log2
        self.step = 0
        self._untouched = set()
        self.fixed_rotation = False
        self.preconditioner: Optional[precondition.Preconditioner] = None
        self._bind(process_group, hook_group, lib)

    def _bind(self, process_group, hook_group, lib: rht.RhtLibrary) -> None:
        self.process_group = process_group
        self.hook_group = hook_group
        self.world_size = dist.get_world_size(hook_group)
        self.rank = dist.get_rank(hook_group)
        self.lib = lib

    def __getstate__(self) -> dict:
        return {"version": _STATE_VERSION, "job_seed": self.job_seed, "row_log2": self.row_log2, "step": self.step,
                "world_size": self.world_size, "rank": self.rank}

    def __setstate__(self, saved: dict) -> None:
        if saved.get("version") != _STATE_VERSION:
            raise TrimError(f"nccl_trim: an RhtState saved by another version of nccl_trim (state version "
                            f"{saved.get('version')}, this one reads {_STATE_VERSION})")
        self.job_seed, self.row_log2, self.step = int(saved["job_seed"]), int(saved["row_log2"]), int(saved["step"])
        # As saved, for the record; register() sets them from the groups it binds.
        self.world_size, self.rank = int(saved["world_size"]), int(saved["rank"])
        self.process_group = self.hook_group = self.lib = None
        self._untouched = set()
        self.fixed_rotation = False
        self.preconditioner = None

    @property
    def bound(self) -> bool:
        """False for a state restored from a checkpoint and not yet given to register()."""
        return self.hook_group is not None

    def check_bound(self) -> None:
        if self.hook_group is None:
            raise TrimError("nccl_trim: this RhtState was restored from a checkpoint and belongs to no process group "
                            "yet: pass it to nccl_trim.register(model, state=state) instead of register_comm_hook")

    def note_untouched(self, dtype: torch.dtype) -> None:
        """Say once per dtype that such buckets go through a plain allreduce."""
        if dtype not in self._untouched:
            self._untouched.add(dtype)
            log.warning("nccl_trim: %s gradients are not rotated (only float32, bfloat16, float16 are): "
                        "they go through a plain allreduce on the model's process group", dtype)


def _rotate(state: RhtState, tensor: torch.Tensor, seed: int, forward: bool, segment_elems: int = 0) -> None:
    """Rotate `tensor` in place: on its device's current stream (the call returns without waiting;
    the stream orders the allreduce and every later use after it), or with the host twin on CPU."""
    if not tensor.is_contiguous():
        raise TrimError("nccl_trim: the RHT hook rotates contiguous buffers only")
    n = tensor.numel()
    if n == 0:
        return
    code = _DTYPES[tensor.dtype]
    if tensor.is_cuda:
        with torch.cuda.device(tensor.device):
            if torch.cuda.is_current_stream_capturing():
                raise TrimError(
                    "nccl_trim: the RHT hook cannot run under CUDA graph capture: each bucket's seed is "
                    "computed on the host per step and would be frozen into the graph, so ranks and steps "
                    "would reuse one rotation; run the captured region without the hook")
            stream = torch.cuda.current_stream(tensor.device).cuda_stream
            fn = state.lib.forward_cuda if forward else state.lib.inverse_cuda
            fn(tensor.data_ptr(), n, code, state.row_log2, segment_elems, seed, stream)
    else:
        fn = state.lib.forward_host if forward else state.lib.inverse_host
        fn(tensor.data_ptr(), n, code, state.row_log2, segment_elems, seed)


def _plain_allreduce(group, tensor: torch.Tensor) -> torch.futures.Future:
    return dist.all_reduce(tensor, group=group, async_op=True).get_future().then(lambda f: f.value()[0])


def rht_hook(state: RhtState, bucket: dist.GradBucket):
    """DDP comm hook: the mean of the bucket over the ranks, with the bucket rotated on the wire.

    Divides by the world size first (as allreduce_hook does, so fp16 sums cannot overflow), rotates
    the bucket's buffer in place, starts an async allreduce on the hook's group and undoes the
    rotation in the future's callback, whose value is the buffer itself (so the tensor stays
    referenced, and recorded on the callback's stream, until the inverse has run).
    """
    state.check_bound()
    buf = bucket.buffer()
    step = state.step
    if bucket.is_last():
        state.step += 1
    buf.div_(state.world_size)
    if buf.dtype not in _DTYPES:
        state.note_untouched(buf.dtype)
        return _plain_allreduce(state.process_group, buf)
    # Under error feedback the plugin adds a bucket's residual, left in the rotated domain of its
    # previous step, to the next one: both steps must share the rotation.
    seed = state.lib.bucket_seed(state.job_seed, bucket.index(), 0 if state.fixed_rotation else step)
    scales = _bucket_scales(state, bucket, buf)
    if scales is not None:
        precondition.apply(buf, scales, forward=True)
    _rotate(state, buf, seed, forward=True)
    fut = dist.all_reduce(buf, group=state.hook_group, async_op=True).get_future()

    def unrotate(done):
        # Runs with a stream of the callback pool current: _rotate asks for it again.
        summed = done.value()[0]
        _rotate(state, summed, seed, forward=False)
        if scales is not None:
            precondition.apply(summed, scales, forward=False)
        return summed

    return fut.then(unrotate)


def _bucket_scales(state: RhtState, bucket: dist.GradBucket, buf: torch.Tensor):
    """The bucket's flat divisors (precondition.py), or None when nothing scales it: no optimizer
    bound, a dtype left alone, or a buffer that is not the parameters' gradients back to back
    (then nothing is scaled on any rank: the layout is the same on all)."""
    pre = state.preconditioner
    if pre is None or pre.optimizer is None:
        return None
    params = bucket.parameters()
    if sum(p.numel() for p in params) != buf.numel():
        return None
    return pre.scales(params, buf.dtype)


def _chunk_seed(state: RhtState, call_seed: int, chunk: int) -> int:
    """Each rank's chunk of an FSDP reduce-scatter is rotated on its own, with its own seed, so the
    owner can undo its chunk alone (the C ABI numbers segments from the pointer it is given)."""
    return state.lib.bucket_seed(call_seed, chunk, 0)


def fsdp_rht_hook(state: RhtState, grad: torch.Tensor, output: Optional[torch.Tensor] = None) -> None:
    """FSDP1 comm hook (FullyShardedDataParallel.register_comm_hook), synchronous like FSDP's own.

    Sharded strategies pass `output`: the rotation is block-diagonal on the per-rank chunks of the
    padded gradient, so the reduce-scatter hands each rank the rotated sum of its own chunk, which
    it un-rotates into `output`. NO_SHARD passes only `grad`, reduced in place. Calls are counted
    (every rank issues FSDP's reductions in the same order), and the count seeds the rotation.
    """
    state.check_bound()
    call = state.step
    state.step += 1
    grad.div_(state.world_size)
    if grad.dtype not in _DTYPES:
        state.note_untouched(grad.dtype)
        if output is None:
            dist.all_reduce(grad, group=state.process_group)
        else:
            dist.reduce_scatter_tensor(output, grad, group=state.process_group)
        return
    seed = state.lib.bucket_seed(state.job_seed, _FSDP_BUCKET, 0 if state.fixed_rotation else call)
    if output is None:
        _rotate(state, grad, seed, forward=True)
        dist.all_reduce(grad, group=state.hook_group)
        _rotate(state, grad, seed, forward=False)
        return
    chunk = output.numel()
    if grad.numel() != chunk * state.world_size:
        raise TrimError(f"nccl_trim: FSDP passed a gradient of {grad.numel()} elements for shards of {chunk} "
                        f"on {state.world_size} ranks")
    flat = grad.view(-1)
    for c in range(state.world_size):
        _rotate(state, flat[c * chunk:(c + 1) * chunk], _chunk_seed(state, seed, c), forward=True)
    dist.reduce_scatter_tensor(output, grad, group=state.hook_group)
    _rotate(state, output, _chunk_seed(state, seed, state.rank), forward=False)


# ---- registration

# The hook's communicators, one per (ranks, traffic class): NCCL communicators are expensive, and
# every model of a job can share one.
_HOOK_GROUPS: Dict[Tuple[Tuple[int, ...], int, str], object] = {}
_GROUPS_LOCK = threading.Lock()


def _model_kind(model) -> str:
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return "ddp"
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except ImportError:  # pragma: no cover - FSDP ships with every torch that has DDP hooks
        FullyShardedDataParallel = ()
    if FullyShardedDataParallel and isinstance(model, FullyShardedDataParallel):
        return "fsdp"
    raise TypeError(f"nccl_trim.register takes a DistributedDataParallel or FullyShardedDataParallel (FSDP1) "
                    f"model, not {type(model).__name__} (FSDP2's fully_shard is not supported)")


def _check_no_hook(model, kind: str) -> None:
    if kind == "ddp" and getattr(model, "_comm_hooks", None):
        names = ", ".join(getattr(h, "__qualname__", repr(h)) for h, _ in model._comm_hooks)
        raise HookConflictError(f"this DDP model already has a communication hook ({names}); DDP takes one per "
                                "model, so the RHT hook cannot be added")
    if kind == "fsdp" and getattr(model, "_comm_hook", None) is not None:
        raise HookConflictError("this FSDP model already has a communication hook; FSDP takes one per model")


def _group_backend(group, device: torch.device) -> str:
    """The backend that carries `device`'s tensors in `group`: "nccl", "trim", "gloo", ... (a group
    made with "cpu:trim,cuda:nccl" has one per device type)."""
    try:
        return str(group._get_backend(device).name()).lower()
    except Exception:  # noqa: BLE001 - older torch, or a wrapper: the group's backend string
        return str(dist.get_backend(group)).lower()


def _model_device(model) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def _check_nccl() -> None:
    version = tuple(torch.cuda.nccl.version())
    if version < _MIN_NCCL:
        raise NcclTooOldError(
            f"NCCL {'.'.join(map(str, version))} (in torch {torch.__version__}) speaks net API v10 or older, which "
            "initialises the plugin once per process: it cannot tell the hook's communicator apart. The hook "
            "needs NCCL >= 2.28 (torch >= 2.11)")
    if not hasattr(dist.ProcessGroupNCCL.Options().config, "traffic_class"):
        raise NcclTooOldError(f"torch {torch.__version__} cannot set a communicator's traffic class "
                              "(ProcessGroupNCCL.Options().config.traffic_class): the hook needs torch >= 2.11")


_DRAIN_SECONDS = 0.1
_drain_registered = False


def _drain_callbacks_at_exit() -> None:
    """Hand the GIL, before the interpreter finalizes, to gloo's worker threads that still hold a
    Python callback of the hook's futures. A worker thread completes the future (which frees the
    training loop) and only then drops the callback, which needs the GIL; if the interpreter is
    already finalizing, that thread is ended mid-C++ and the process aborts ("terminate called
    without an active exception", exit -6) after a successful run. Seen with 2 gloo ranks on a
    loaded 2-core machine; it is a race in torch (any Python comm hook under gloo), not ours to fix.
    NCCL completes its futures on the calling thread, so it is not affected."""
    time.sleep(_DRAIN_SECONDS)


def _drain_at_exit_once() -> None:
    global _drain_registered
    if not _drain_registered:
        _drain_registered = True
        atexit.register(_drain_callbacks_at_exit)


def _require_gpu_rotation(lib: rht.RhtLibrary) -> None:
    """The GPU functions must work on the current device (this also loads their module now, on
    the application's thread, rather than inside the first backward)."""
    ok, why = lib.cuda_available()
    if not ok:
        raise LibraryError(f"{lib.path} cannot rotate on the GPU ({why}): the hook on CUDA models needs "
                           "libtrim-rht built with nvcc (make python-libs where nvcc is found)")


def _hook_comms_now() -> int:
    try:
        return loaded_plugin().hook_comms()
    except PluginError:
        return 0


def _forget_destroyed_groups() -> None:
    """Drops the cached hook groups torch no longer knows: destroyed one by one
    (destroy_process_group(group)), or all at once with the default group (a new
    init_process_group follows). Such a group's communicator is shut down; it must never carry
    another bucket, and the cache must not keep it alive. Called under _GROUPS_LOCK."""
    live = dist.distributed_c10d._world.pg_map
    for key in [k for k, g in _HOOK_GROUPS.items() if g not in live]:
        del _HOOK_GROUPS[key]


def _tagged_group(base, traffic_class: int, backend: str = "nccl") -> Tuple[object, bool]:
    """The hook's group over the ranks of `base`, on `backend` ("nccl", or "trim" for CPU models),
    tagged with `traffic_class`; True when it was made now. NCCL: split_share=0, since a
    communicator that shares its parent's resources gets no init of its own, so the plugin would
    never see the tag. trim: the backend's own Options carry the class to the plugin's init."""
    ranks = tuple(dist.get_process_group_ranks(base))
    key = (ranks, traffic_class, backend)
    with _GROUPS_LOCK:
        _forget_destroyed_groups()
        cached = _HOOK_GROUPS.get(key)
        if cached is not None:
            return cached, False
        if backend == "trim":
            from .backend import Options
            opts = Options(traffic_class=traffic_class)
        else:
            opts = dist.ProcessGroupNCCL.Options()
            opts.config.traffic_class = traffic_class
            opts.config.split_share = 0
        # use_local_synchronization: only the group's members call this (a data-parallel group of a
        # larger job), so other ranks need not take part.
        group = dist.new_group(list(ranks), backend=backend, pg_options=opts, use_local_synchronization=True,
                               group_desc="nccl_trim_hook")
        _HOOK_GROUPS[key] = group
        return group, True


def _agree_on_seed(seed: int, group, device: torch.device, step: int = 0) -> None:
    """One tiny allreduce on `group`: it makes NCCL create (and the plugin init) its communicator
    if it has none yet, and proves that every rank rotates with the same job seed and starts from
    the same step (max == min of each 32-bit half)."""
    words = [seed >> 32, seed & 0xFFFFFFFF, (step >> 32) & 0xFFFFFFFF, step & 0xFFFFFFFF]
    t = torch.tensor([v for w in words for v in (w, -w)], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    got = t.tolist()
    same = [got[2 * i] == -got[2 * i + 1] for i in range(len(words))]
    if not all(same[:2]):
        raise TrimError("nccl_trim: the ranks passed different seeds to register(): the rotations would not "
                        "cancel and the gradients would be garbage; pass the same seed everywhere (or none)")
    if not all(same[2:]):
        raise TrimError("nccl_trim: the ranks restored RhtStates of different steps (register(state=...)): their "
                        "rotations would differ and the gradients would be garbage; restore the same checkpoint on "
                        "every rank")


def _declare(traffic_class: int, row_log2: int) -> None:
    """Tells the plugin NCCL loaded (the trim backend's, on CPU) that the hook's class carries data
    rotated in rows of 2**row_log2: before the hook's group exists, so its first connection already
    sends as "rotated". RowMismatchError names both row lengths; PluginError when no plugin is
    loaded or it tags another class."""
    loaded_plugin().declare(traffic_class, row_log2)


def _verify_plugin(traffic_class: int, comms_before: Optional[int]) -> None:
    """Through the plugin NCCL loaded: it tags the same class as we do and counted the hook's
    communicator (comms_before None: the group existed already and was checked then)."""
    plugin = loaded_plugin()
    theirs = plugin.traffic_class()
    if theirs != traffic_class:
        raise PluginError(f"the plugin treats traffic class {theirs} as the hook's, but the hook's communicator "
                          f"is tagged {traffic_class}: NCCL_TRIM_HOOK_TRAFFIC_CLASS changed after NCCL loaded the "
                          "plugin; set it once, before init_process_group, the same in every process")
    if comms_before is not None and plugin.hook_comms() <= comms_before:
        raise PluginError(
            f"NCCL created the hook's communicator (traffic class {traffic_class}) without the plugin "
            f"{plugin.name} seeing it: NCCL chose another network for it. Set NCCL_NET=Trim "
            "(nccl_trim.env() does) and check NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET for the net it picked")


def _error_feedback(backend: str) -> bool:
    """Whether the plugin feeds trims back (NCCL_TRIM_ERROR_FEEDBACK=1, which only the trim
    backend's collectives honour: under NCCL the plugin ignores it). The plugin validates the value."""
    return backend == "trim" and os.environ.get("NCCL_TRIM_ERROR_FEEDBACK", "0").strip() == "1"


def _preconditioner(model, kind: str, optimizer, fixed_rotation: bool) -> Optional[precondition.Preconditioner]:
    mode = precondition.mode_from_env()
    if optimizer is not None and kind != "ddp":
        raise ValueError("nccl_trim: register(optimizer=...) scales DDP buckets; FSDP shards the optimizer state")
    # Error feedback keeps a residual in one fixed scaled domain: scales that move would break it.
    if kind != "ddp" or fixed_rotation or (mode == "off" and optimizer is None):
        return None
    pre = precondition.Preconditioner([p for p in model.parameters() if p.requires_grad])
    if optimizer is not None:
        pre.bind(optimizer)
    else:
        precondition.watch(pre)
    return pre


def register(model, *, process_group=None, seed: Optional[int] = None, row_log2: Optional[int] = None,
             require_plugin: Optional[bool] = None, state: Optional[RhtState] = None,
             optimizer=None) -> RhtState:
    """Install the RHT hook on a DDP (or FSDP1) model; returns its state.

    NCCL backend (and the CPU backend "trim"): declares the hook's traffic class
    (NCCL_TRIM_HOOK_TRAFFIC_CLASS, default 116) and row length to the loaded plugin, then makes
    (once per set of ranks) the hook's process group tagged with that class, so the plugin packs
    its traffic as pre-rotated, and checks that NCCL really carries that communicator through the
    plugin. With require_plugin (the default there) every failed check raises; with
    require_plugin=False it is logged and the hook runs anyway (correct, just not trimmable, or
    rotated per hop). Other backends (gloo on CPU): the model's group and the host twin;
    require_plugin defaults to False there.

    seed: the job seed (default a constant), the same on every rank (checked). row_log2: rows of
    2**row_log2 elements (0..15, default 15); 2**row_log2 must be the plugin's NCCL_TRIM_ROW_ELEMS
    (RowMismatchError otherwise, whatever require_plugin says). state: an RhtState restored from a
    checkpoint: the hook goes on from its seed, rows and step (checked equal on every rank), and
    that object is bound and returned.

    optimizer: DDP only, an optimizer over every parameter of the model that keeps Adam's second
    moments (exp_avg_sq): each bucket is divided by their roots (powers of two) before the rotation
    and multiplied back after the sum, so a trim's error lands in proportion to each coordinate's
    scale (precondition.py). Without it, NCCL_TRIM_HOOK_PRECONDITION=auto (the default) binds the
    first such optimizer after its first step; off never scales.
    """
    kind = _model_kind(model)
    _check_no_hook(model, kind)
    step = 0
    if state is not None:
        if not isinstance(state, RhtState):
            raise TypeError(f"state must be an RhtState (from register() or a checkpoint), not {type(state).__name__}")
        if seed is not None and int(seed) & (2**64 - 1) != state.job_seed:
            raise ValueError(f"seed={seed} differs from the restored state's job seed {state.job_seed}")
        if row_log2 is not None and row_log2 != state.row_log2:
            raise ValueError(f"row_log2={row_log2} differs from the restored state's {state.row_log2}")
        seed, row_log2, step = state.job_seed, state.row_log2, state.step
    row_log2 = rht.DEFAULT_ROW_LOG2 if row_log2 is None else row_log2
    if not 0 <= row_log2 <= rht.MAX_ROW_LOG2:
        raise ValueError(f"row_log2={row_log2} is out of range (0..{rht.MAX_ROW_LOG2})")
    job_seed = (DEFAULT_JOB_SEED if seed is None else int(seed)) & (2**64 - 1)
    base = process_group if process_group is not None else model.process_group
    device = _model_device(model)
    lib = rht.load()
    if device.type == "cuda":
        with torch.cuda.device(device):
            _require_gpu_rotation(lib)

    backend = _group_backend(base, device)
    if backend not in ("nccl", "trim"):
        if require_plugin:
            raise PluginError(f"require_plugin=True, but the model's process group uses {backend}: the plugin "
                              "carries NCCL traffic and the trim backend's only")
        _agree_on_seed(job_seed, base, device, step)
        hook_group = base
        _drain_at_exit_once()
    else:
        required = True if require_plugin is None else require_plugin
        hook_group = base
        # First on the model's group: NCCL then has created its communicator, so the plugin is
        # loaded before the declaration (FSDP1 runs no collective at construction), and every
        # rank is known to rotate alike before anything is tagged.
        _agree_on_seed(job_seed, base, device, step)
        try:
            if backend == "nccl":
                _check_nccl()
            traffic_class = hook_traffic_class()
            before = _hook_comms_now()
            _declare(traffic_class, row_log2)  # before the group: by default no class is trusted
            hook_group, made = _tagged_group(base, traffic_class, backend)
            if made:  # NCCL creates a communicator at its first collective
                _agree_on_seed(job_seed, hook_group, device, step)
            _verify_plugin(traffic_class, before if made else None)
        except PluginError as e:
            if required:
                raise
            log.warning("nccl_trim: %s; the hook runs anyway (require_plugin=False)", e)

    if state is None:
        state = RhtState(base, hook_group, job_seed, row_log2, lib)
    else:
        state._bind(base, hook_group, lib)
    state.fixed_rotation = _error_feedback(backend)
    state.preconditioner = _preconditioner(model, kind, optimizer, state.fixed_rotation)
    try:
        model.register_comm_hook(state, rht_hook if kind == "ddp" else fsdp_rht_hook)
    except RuntimeError as e:  # a built-in hook (C++), invisible to _check_no_hook
        if "only be called once" not in str(e):
            raise
        raise HookConflictError(f"this model already has a communication hook ({e}); one per model") from e
    model._nccl_trim_state = state
    log.info("nccl_trim: RHT hook on %s (%s, %d ranks, rows of 2^%d)", type(model).__name__, backend,
             state.world_size, row_log2)
    return state


# A checkpoint holding an RhtState loads with torch.load's default weights_only=True: the state
# pickles as plain integers (RhtState.__getstate__), nothing that could run code.
torch.serialization.add_safe_globals([RhtState])
