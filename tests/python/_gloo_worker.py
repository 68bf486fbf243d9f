"""The body of the multi-rank tests (test_hook_gloo.py): one process per rank over gloo on CPU,
spawned once; each rank saves what it saw to rank<R>.pt and the parent asserts on all of them."""

import os
import warnings

warnings.simplefilter("ignore")  # torch without numpy warns at import

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import nccl_trim  # noqa: E402
from nccl_trim import hook  # noqa: E402
from _support import fsdp_train  # noqa: E402

SIZES = (1, 3, 1000, 32769, 100003)
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
STEPS = 4
SAME_DATA_STEPS = 3


class FakeBucket:
    """What rht_hook uses of a GradBucket, for buffers of any size and dtype."""

    def __init__(self, buffer, index, last):
        self._buffer, self._index, self._last = buffer, index, last

    def buffer(self):
        return self._buffer

    def index(self):
        return self._index

    def is_last(self):
        return self._last


class WireRecorder:
    """Copies of what the hook hands to all_reduce on its group: the rotated buckets."""

    def __init__(self):
        self.sent, self.group = [], None
        self._all_reduce = dist.all_reduce

    def __enter__(self):
        def all_reduce(tensor, *args, **kwargs):
            if self.group is not None and kwargs.get("group") is self.group:
                self.sent.append(tensor.detach().clone())
            return self._all_reduce(tensor, *args, **kwargs)
        dist.all_reduce = all_reduce
        return self

    def __exit__(self, *exc):
        dist.all_reduce = self._all_reduce


BUCKET_MB = 0.01


def _model(seed):
    """59k parameters of odd sizes. DDP's first iteration puts them in one bucket; from the second
    on, buckets of BUCKET_MB (3 here), so bucket indices and is_last() matter."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(37, 301), torch.nn.Tanh(), torch.nn.Linear(301, 129),
                               torch.nn.Tanh(), torch.nn.Linear(129, 65), torch.nn.Tanh(), torch.nn.Linear(65, 3))


def _train(model, data, steps=STEPS):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in data[:steps]:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _batches(seed, n=STEPS):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 37, generator=g), torch.randn(8, 3, generator=g)) for _ in range(n)]


def hook_vs_plain(state, rank):
    """rht_hook on buffers of odd sizes against a plain allreduce of the same inputs."""
    out = {}
    for dtype in DTYPES:
        for i, n in enumerate(SIZES):
            g = torch.Generator().manual_seed(1000 * rank + i)
            x = torch.randn(n, generator=g).to(dtype)
            plain = x.clone()
            dist.all_reduce(plain.div_(state.world_size))
            mean = hook.rht_hook(state, FakeBucket(x.clone(), i, i == len(SIZES) - 1)).wait()
            out[(str(dtype), n)] = (x, plain, mean)
    return out


def same_signs(state):
    """Equal inputs on every rank: what goes on the wire must be equal too (same rotation).
    Returns (input / world size, what was sent) per size."""
    inputs = []
    with WireRecorder() as rec:
        rec.group = state.hook_group
        for i, n in enumerate(SIZES):
            x = torch.randn(n, generator=torch.Generator().manual_seed(i))
            inputs.append(x / state.world_size)
            hook.rht_hook(state, FakeBucket(x, i, i == len(SIZES) - 1)).wait()
    return list(zip(inputs, rec.sent))


def seed_mismatch(rank):
    """Ranks that pass different seeds to register() must be stopped, on every rank."""
    try:
        nccl_trim.register(DDP(torch.nn.Linear(3, 1)), seed=rank)
    except nccl_trim.TrimError as e:
        return str(e)
    return None


def ddp_runs(rank):
    """The same model and data with the hook and without: parameters after STEPS steps, and the
    rotated buckets of a run whose ranks all see the same data."""
    plain = DDP(_model(0), bucket_cap_mb=BUCKET_MB)
    plain_params = _train(plain, _batches(100 + rank))
    hooked = DDP(_model(0), bucket_cap_mb=BUCKET_MB)
    state = nccl_trim.register(hooked)
    hooked_params = _train(hooked, _batches(100 + rank))
    same = DDP(_model(1), bucket_cap_mb=BUCKET_MB)
    with WireRecorder() as rec:
        rec.group = nccl_trim.register(same).hook_group
        _train(same, _batches(7), steps=SAME_DATA_STEPS)
    return {"plain": plain_params, "hooked": hooked_params, "steps": state.step, "wire_same_data": rec.sent}


def fsdp_runs(rank):
    """FSDP1 (FULL_SHARD; 231 elements, so 2 or 3 ranks get padded shards) with and without the hook."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    def build():
        torch.manual_seed(3)
        return FSDP(torch.nn.Linear(32, 7), device_id=torch.device("cpu"), use_orig_params=True)

    plain = fsdp_train(build(), rank)
    hooked_model = build()
    state = nccl_trim.register(hooked_model)
    return {"plain": plain, "hooked": fsdp_train(hooked_model, rank), "calls": state.step}


def main(rank, world, rdzv, out):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=rank, world_size=world)
    try:
        state = hook.RhtState(dist.group.WORLD, dist.group.WORLD, hook.DEFAULT_JOB_SEED, 15, nccl_trim.rht.load())
        result = {"hook_vs_plain": hook_vs_plain(state, rank), "same_signs": same_signs(state),
                  "ddp": ddp_runs(rank), "fsdp": fsdp_runs(rank),
                  "seed_mismatch": seed_mismatch(rank)}
        torch.save(result, os.path.join(out, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()
