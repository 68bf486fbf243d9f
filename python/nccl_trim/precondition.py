"""Adam-aware scaling of the hook's buckets (NCCL_TRIM_HOOK_PRECONDITION).

Why: a trimmed packet turns its share of a rotated bucket into 1-bit estimates, and the inverse
rotation spreads that error evenly over the 2^15 coordinates of the row. Adam divides each
coordinate's step by the root of its own second moment, so a coordinate whose gradient is small
(a LayerNorm bias, a rarely used row) turns an even share of a large neighbour's error into a full
step in a random direction. Dividing each coordinate by sqrt(v), Adam's own estimate of its
scale, before the rotation (and multiplying after the sum) makes the error land in proportion to
each coordinate's scale, which is the error Adam's update would see anyway.

The scaling is linear and the same on every rank: v comes from the optimizer, whose state is
identical on replicas that apply identical (bit-identical, exact allgather) sums. Each scale is a
power of two, so x / d * d gives x back exactly: with no trim the hook's result is unchanged but
for the rotation's own rounding.

Each divisor stays within SPREAD of its tensor's root mean v. Unbounded per-coordinate divisors
are unstable: a coordinate's trim error is proportional to its own divisor, that error feeds its
v, and v sets the divisor; measured on char-LM at a 50 % trim rate, the loss went to NaN at step
77. Per tensor the loop's gain is the row's error fraction (~0.1), which keeps it stable; SPREAD 4
keeps most of the per-coordinate benefit (docs/RESULTS.md: SPREAD 1, 2, 4, 8, 16 measured).

This module needs torch; the rest of the package does not.
"""

import logging
import os
import weakref
from typing import Dict, Optional, Sequence, Tuple

import torch

log = logging.getLogger("nccl_trim")

ENV = "NCCL_TRIM_HOOK_PRECONDITION"
MODES = ("auto", "off")
SPREAD = 4.0  # how far a coordinate's divisor may stray from its tensor's mean
_DTYPES = (torch.float32, torch.bfloat16)  # fp16's range is too narrow for g / sqrt(v) spikes


def mode_from_env(environ=None) -> str:
    """NCCL_TRIM_HOOK_PRECONDITION (auto|off, default auto), validated like the plugin's params.
    auto is off under NCCL_TRIM_PHASE=all: the ranks' sums (and so their optimizers) differ there,
    and the scaling must be the same on every rank."""
    env = os.environ if environ is None else environ
    value = env.get(ENV, "auto").strip().lower() or "auto"
    if value not in MODES:
        raise ValueError(f"{ENV}={env.get(ENV)!r} is not allowed: one of {'|'.join(MODES)}")
    if value == "auto" and env.get("NCCL_TRIM_PHASE", "").strip().lower() == "all":
        return "off"
    return value


def layout(numels: Sequence[int], device) -> Tuple[torch.Tensor, torch.Tensor]:
    """Each coordinate's tensor index, and each tensor's size, on `device`. Made once per bucket
    and kept (Preconditioner): building them copies host data to the device, which from pageable
    memory waits for the stream, and the hook must not wait for the backward pass."""
    counts = torch.tensor(list(numels), device="cpu")
    which = torch.repeat_interleave(torch.arange(len(numels)), counts)
    return which.to(device), counts.to(device)


def divisors(vs: Sequence[Optional[torch.Tensor]], numels: Sequence[int], device=None,
             where: Optional[Tuple[torch.Tensor, torch.Tensor]] = None) -> torch.Tensor:
    """One flat divisor per coordinate of tensors of `numels` elements, from their exp_avg_sq `vs`
    (None: no history yet, divisor 1): sqrt(v) kept within [1/SPREAD, SPREAD] x the tensor's root
    mean v, rounded to a power of two; 1 for a tensor whose v is all zero. A fixed number of
    kernels per bucket, however many tensors it holds (a GPU bucket may hold hundreds)."""
    dev = device if device is not None else next((v.device for v in vs if v is not None), torch.device("cpu"))
    flat = torch.cat([v.detach().reshape(-1).float() if v is not None else torch.zeros(n, device=dev)
                      for v, n in zip(vs, numels)])
    which, counts = where if where is not None else layout(numels, dev)
    mean = torch.zeros(len(numels), device=dev).index_add_(0, which, flat).div_(counts).sqrt_()[which]
    d = torch.minimum(torch.maximum(flat.sqrt(), mean / SPREAD), mean * SPREAD)
    d = torch.where(mean > 0, d, torch.ones_like(d))
    return torch.exp2(torch.round(torch.log2(d)))


def scale_of(v: torch.Tensor) -> torch.Tensor:
    """divisors() of one tensor, in its shape."""
    return divisors([v], [v.numel()]).view(v.shape)


def apply(buf: torch.Tensor, d: torch.Tensor, forward: bool) -> None:
    """Divide (forward) or multiply back the flat bucket `buf` by the divisors `d`, in place."""
    flat = buf.view(-1)
    if forward:
        flat.div_(d)
    else:
        flat.mul_(d)
        if d.is_cuda:  # made on the hook's stream, read on the callback's: keep it until then
            d.record_stream(torch.cuda.current_stream(d.device))


def _sharded(optimizer) -> bool:
    """ZeRO keeps each rank's shard of the state: its second moments differ between ranks."""
    return type(optimizer).__name__ == "ZeroRedundancyOptimizer"


class Preconditioner:
    """The optimizer whose second moments scale one model's buckets, once one is bound.

    bind(): an explicit optimizer (register(optimizer=...)). Otherwise, with mode auto, the first
    optimizer that steps over every parameter of the model and keeps exp_avg_sq (Adam, AdamW, ...)
    is bound after its step, on every rank at the same step. A sharded optimizer (ZeRO), or several
    optimizers sharing the model, are never bound: their state differs between ranks or covers
    part of the model.
    """

    def __init__(self, model_params: Sequence[torch.Tensor]):
        self._ids = {id(p) for p in model_params}
        self._opt = None  # weakref.ref to the bound optimizer
        self._layouts: Dict[tuple, Tuple[torch.Tensor, torch.Tensor]] = {}  # per bucket shape and device
        self.settled = False  # bound, or an optimizer without second moments was found

    @property
    def optimizer(self):
        return self._opt() if self._opt is not None else None

    def covers(self, optimizer) -> bool:
        ids = {id(p) for g in optimizer.param_groups for p in g["params"]}
        return self._ids <= ids

    def bind(self, optimizer) -> None:
        if _sharded(optimizer):
            raise ValueError("nccl_trim: a ZeroRedundancyOptimizer keeps each rank's shard of the state: the "
                             "hook's scaling must be the same on every rank (pass no optimizer)")
        if not self.covers(optimizer):
            raise ValueError(f"nccl_trim: the {type(optimizer).__name__} passed to register() does not hold every "
                             "parameter of the model: the hook scales whole buckets by its second moments")
        self._opt = weakref.ref(optimizer)
        self.settled = True

    def offer(self, optimizer) -> None:
        """Auto mode, after `optimizer` stepped: bind it if it covers the model and keeps exp_avg_sq."""
        if self.settled or _sharded(optimizer) or not self.covers(optimizer):
            return
        if any("exp_avg_sq" in s for s in optimizer.state.values()):
            self.bind(optimizer)
            log.info("nccl_trim: the hook scales gradients by %s's second moments (%s=auto)",
                     type(optimizer).__name__, ENV)
        else:
            self.settled = True  # SGD and the like: nothing to scale by, and nothing else will step

    def scales(self, params: Sequence[torch.Tensor], dtype: torch.dtype) -> Optional[torch.Tensor]:
        """Flat divisors for a bucket of `params` (divisors()), or None when nothing scales it."""
        opt = self.optimizer
        if opt is None or dtype not in _DTYPES:
            return None
        vs = []
        for p in params:
            v = opt.state.get(p, {}).get("exp_avg_sq")
            vs.append(v if isinstance(v, torch.Tensor) and v.shape == p.shape else None)
        if all(v is None for v in vs):
            return None
        numels = tuple(p.numel() for p in params)
        dev = params[0].device
        key = (str(dev), numels)
        if key not in self._layouts:
            self._layouts[key] = layout(numels, dev)
        return divisors(vs, numels, dev, self._layouts[key])


_waiting: "weakref.WeakSet" = weakref.WeakSet()
_handle = None


def _after_step(optimizer, args, kwargs) -> None:
    for pre in list(_waiting):
        pre.offer(optimizer)
        if pre.settled:
            _waiting.discard(pre)


def watch(pre: Preconditioner) -> None:
    """Offer every optimizer's step to `pre` until it is settled (torch's global post-step hook)."""
    global _handle
    _waiting.add(pre)
    if _handle is None:
        from torch.optim.optimizer import register_optimizer_step_post_hook
        _handle = register_optimizer_step_post_hook(_after_step)
