"""What each rank of test_launcher_ddp.py runs (not a test itself): DDP as python -m nccl_trim.run
patches it (nccl_trim._boot.install), against plain DDP, in the ways users build and use it; an
RhtState through a checkpoint; process groups destroyed and made again. Each rank saves what it saw
to rank<R>.pt; the parent asserts on all ranks' files."""

import hashlib
import os
import pickle
import warnings

warnings.simplefilter("ignore")  # torch without numpy warns at import

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import _ddp_library  # noqa: E402 - imported before the patch, as a library would be
import nccl_trim  # noqa: E402
from nccl_trim import _boot, hook, plugin  # noqa: E402

FEATURES = ("gradient_as_bucket_view", "static_graph", "find_unused_parameters", "no_sync", "join")


class TwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(40, 300), torch.nn.Linear(300, 40)

    def forward(self, x, use_b=True):
        return self.b(torch.tanh(self.a(x))) if use_b else self.a(x)[:, :40]


def params(m):
    return [p.detach().clone() for p in m.parameters()]


def params_hash(m) -> str:
    h = hashlib.sha256()
    for p in m.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def train(m, xs):
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for x in xs:
        opt.zero_grad()
        m(x).sum().backward()
        opt.step()


def batches(seed, n):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(4, 40, generator=g) for _ in range(n)]


def feature_run(name, rank):
    """A few SGD steps of TwoLayers under one DDP feature (buckets of 0.05 MB: several per step):
    the final parameters, and the hook's step count (None without the hook)."""
    from torch.distributed.algorithms.join import Join
    torch.manual_seed(0)
    kwargs = {name: True} if name in FEATURES[:3] else {}
    m = DDP(TwoLayers(), bucket_cap_mb=0.05, **kwargs)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    xs = iter(batches(rank, 16))
    if name == "no_sync":
        for _ in range(2):
            opt.zero_grad()
            with m.no_sync():  # accumulated locally, reduced with the next backward
                m(next(xs)).sum().backward()
            m(next(xs)).sum().backward()
            opt.step()
    elif name == "join":
        with Join([m]):  # uneven inputs: rank 1 runs two steps more
            for _ in range(3 + 2 * rank):
                opt.zero_grad()
                m(next(xs)).sum().backward()
                opt.step()
    else:
        for i in range(4):
            opt.zero_grad()
            use_b = name != "find_unused_parameters" or i % 2 == 0  # b unused every other step
            m(next(xs), use_b=use_b).sum().backward()
            opt.step()
    state = getattr(m, "_nccl_trim_state", None)
    return {"params": params(m), "step": None if state is None else state.step}


def library_runs(rank):
    """DDPs made by a library that imported the class before the patch: by its name, and its subclass."""
    out = {}
    for name, make in (("by_name", _ddp_library.build), ("subclass", _ddp_library.LibraryDDP)):
        torch.manual_seed(1)
        m = make(TwoLayers())
        train(m, batches(10 + rank, 2))
        state = getattr(m, "_nccl_trim_state", None)
        out[name] = {"hooked": isinstance(state, hook.RhtState), "step": None if state is None else state.step,
                     "library_ready": getattr(m, "library_ready", None), "hash": params_hash(m)}
    return out


def checkpoint_runs(rank, out_dir):
    """The hook (register(), no patch) for 2 steps; a checkpoint of the model, optimizer and
    RhtState (torch.save, loaded with torch's default weights_only=True); everything built anew,
    register(state=...) and 2 more steps: against 4 steps without a break. Then pickle, and a
    restore whose step differs between the ranks."""
    xs = batches(20 + rank, 4)
    torch.manual_seed(2)
    whole = DDP(TwoLayers())
    nccl_trim.register(whole, seed=77)
    train(whole, xs)

    torch.manual_seed(2)
    first = DDP(TwoLayers())
    saved = nccl_trim.register(first, seed=77)
    opt = torch.optim.SGD(first.parameters(), lr=0.1)
    for x in xs[:2]:
        opt.zero_grad()
        first(x).sum().backward()
        opt.step()
    path = os.path.join(out_dir, f"ckpt{rank}.pt")
    torch.save({"model": first.module.state_dict(), "opt": opt.state_dict(), "hook": saved}, path)
    ckpt = torch.load(path)
    restored = ckpt["hook"]
    out = {"restored": (restored.bound, restored.job_seed, restored.row_log2, restored.step)}
    try:
        hook.rht_hook(restored, None)
        out["unbound_use"] = None
    except nccl_trim.TrimError as e:
        out["unbound_use"] = str(e)
    module = TwoLayers()
    module.load_state_dict(ckpt["model"])
    resumed = DDP(module)
    state = nccl_trim.register(resumed, state=restored)
    opt = torch.optim.SGD(resumed.parameters(), lr=0.1)
    opt.load_state_dict(ckpt["opt"])
    for x in xs[2:]:
        opt.zero_grad()
        resumed(x).sum().backward()
        opt.step()
    out.update(whole=params(whole), resumed=params(resumed), same_object=state is restored, step=state.step,
               resumed_hash=params_hash(resumed))
    pickled = pickle.loads(pickle.dumps(state))
    out["pickled"] = (pickled.bound, pickled.job_seed, pickled.row_log2, pickled.step)
    pickled.step += rank  # rank 1 restores a later step than rank 0
    try:
        nccl_trim.register(DDP(TwoLayers()), state=pickled)
        out["step_mismatch"] = None
    except nccl_trim.TrimError as e:
        out["step_mismatch"] = str(e)
    return out


def recreate_runs(rank, world, rdzv):
    """The trim backend (whose hook groups are cached: under gloo the hook uses the model's own
    group): a model, destroy_process_group(), a new init and a model; then the hook group alone
    destroyed, and two more models."""
    out = {}
    groups = []
    loaded = None
    for n in range(2):
        dist.init_process_group("trim", init_method=f"file://{rdzv}-trim{n}", rank=rank, world_size=world)
        loaded = plugin.loaded_plugin()
        comms = loaded.hook_comms()
        torch.manual_seed(3)
        m = DDP(TwoLayers())
        train(m, batches(30 + rank, 2))
        st = m._nccl_trim_state
        groups.append(st.hook_group)
        out[f"round{n}"] = {"new_comms": loaded.hook_comms() - comms, "step": st.step, "hash": params_hash(m),
                            "live": st.hook_group in dist.distributed_c10d._world.pg_map}
        if n == 0:
            dist.destroy_process_group()
    out["fresh_after_reinit"] = groups[1] is not groups[0]
    out["destroyed_forgotten"] = all(g is not groups[0] for g in hook._HOOK_GROUPS.values())
    dist.destroy_process_group(groups[1])
    comms = loaded.hook_comms()
    made = []
    for _ in range(2):
        torch.manual_seed(4)
        m = DDP(TwoLayers())
        train(m, batches(40 + rank, 1))
        made.append((m._nccl_trim_state.hook_group, params_hash(m)))
    out["after_hook_group_destroyed"] = {"new_group": made[0][0] is not groups[1], "new_comms": loaded.hook_comms() - comms,
                                         "live_reused": made[1][0] is made[0][0], "hash": made[1][1]}
    dist.destroy_process_group()
    return out


def main(rank, world, rdzv, out_dir):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_TRIM_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rdzv}-gloo", rank=rank, world_size=world)
    result = {"plain": {name: feature_run(name, rank) for name in FEATURES},
              "checkpoint": checkpoint_runs(rank, out_dir)}
    uninstall = _boot.install()  # what python -m nccl_trim.run does in every worker
    try:
        result["hooked"] = {name: feature_run(name, rank) for name in FEATURES}
        result["library"] = library_runs(rank)
        dist.destroy_process_group()
        result["recreate"] = recreate_runs(rank, world, rdzv)
    finally:
        uninstall()
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
