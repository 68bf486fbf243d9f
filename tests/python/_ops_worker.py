"""What each rank of test_backend_ops.py runs (not a test itself): the operations beyond the
ring's five (send/recv, gather, scatter, all_to_all, reduce, the coalesced forms,
monitored_barrier) on the default group, trim or gloo, and their bad-input cases."""

import datetime
import hashlib
import os
import time
import warnings

warnings.simplefilter("ignore")  # torch without numpy warns at import

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from _spawn import error_of  # noqa: E402,F401 - the scenarios report errors with it

HOLD_S = 60.0  # the longest a rank waits for its peer's signal: only a failure reaches it
SHORT_S = 2.0  # the timeout of the group made to time out


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


def data(rank: int, n: int, salt: int = 0, dtype=torch.float32) -> torch.Tensor:
    """Random values, different per rank and salt, the same on every backend."""
    g = torch.Generator().manual_seed(1000 * rank + salt)
    return torch.randn(n, generator=g).to(dtype)


def ops(rank, world, backend):
    """Every operation once, with random data: what each rank ends with, as digests."""
    out = {}
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    # Both ranks send first (an eager or buffered send must not wait for the peer's receive).
    x = data(rank, 1000, 1)
    r = torch.empty(1000)
    sent = dist.isend(x, nxt, tag=3)
    got = dist.irecv(r, prv, tag=3)
    sent.wait()
    got.wait()
    out["isend_completed"] = sent.is_completed() if backend == "trim" else True
    out["ring"] = digest(r)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, data(rank, 333, 2, torch.float64), nxt),
                                   dist.P2POp(dist.irecv, r64 := torch.empty(333, dtype=torch.float64), prv)])
    for q in reqs:
        q.wait()
    out["batch"] = digest(r64)
    # Tags: two messages taken in the other order.
    if rank == 0:
        for q in [dist.isend(torch.full((5,), 1.0), 1, tag=1), dist.isend(torch.full((5,), 2.0), 1, tag=2)]:
            q.wait()
    elif rank == 1:
        a, b = torch.empty(5), torch.empty(5)
        dist.recv(b, 0, tag=2)
        dist.recv(a, 0, tag=1)
        out["tags"] = (a.tolist(), b.tolist())
    # From any source: rank 0 takes one message from every other rank, in whatever order.
    if rank == 0:
        srcs = []
        for _ in range(world - 1):
            t = torch.empty(7, dtype=torch.int64)
            src = dist.recv(t)
            srcs.append((src, t.tolist()))
        out["any_source"] = sorted(srcs)
    else:
        dist.send(torch.arange(7) * rank, 0)
    g = [torch.empty(100) for _ in range(world)] if rank == 1 else None
    dist.gather(data(rank, 100, 4), g, dst=1)
    out["gather"] = [digest(t) for t in g] if g else None
    s = torch.empty(50, dtype=torch.bfloat16)
    dist.scatter(s, [data(r, 50, 5, torch.bfloat16) for r in range(world)] if rank == 0 else None, src=0)
    out["scatter"] = digest(s)
    o = torch.empty(world * 6)
    dist.all_to_all_single(o, data(rank, world * 6, 6))
    out["a2a"] = digest(o)
    # Uneven: rank r sends r+1 rows of 3 to every rank (rows of 3: split sizes count dim 0).
    ins = [r + 1 for r in range(world)]
    outs = [rank + 1] * world
    o = torch.empty(sum(outs), 3)
    dist.all_to_all_single(o, data(rank, sum(ins) * 3, 7).view(-1, 3), outs, ins)
    out["a2a_uneven"] = digest(o)
    ol = [torch.empty(2, dtype=torch.int32) for r in range(world)]
    dist.all_to_all(ol, [torch.arange(2, dtype=torch.int32) + 10 * r + 100 * rank for r in range(world)])
    out["a2a_list"] = [t.tolist() for t in ol]
    local = {"SUM": torch.add, "PRODUCT": torch.mul, "MAX": torch.maximum, "MIN": torch.minimum}
    for name, f in local.items():
        t = data(rank, 64, 8)
        dist.reduce(t, dst=world - 1, op=getattr(dist.ReduceOp, name))
        if rank == world - 1:
            ref = data(0, 64, 8)
            for r in range(1, world):  # the root's own reduction in rank order
                ref = f(ref, data(r, 64, 8))
            out[f"reduce_{name}"] = {"got": digest(t), "rank_order": digest(ref)}
    ts = [data(rank, 10, 9), data(rank, 3, 10)]
    dist.all_reduce_coalesced(ts)
    flat = torch.cat([data(rank, 10, 9), data(rank, 3, 10)])
    dist.all_reduce(flat)  # the same values as one tensor: the same sums, bit for bit
    out["all_reduce_coalesced"] = {"got": [digest(t) for t in ts], "one_all_reduce": [digest(flat[:10]),
                                                                                       digest(flat[10:])]}
    ol = [[torch.empty(4), torch.empty(2, 2)] for _ in range(world)]
    dist.all_gather_coalesced(ol, [data(rank, 4, 11), data(rank, 4, 12).view(2, 2)])
    out["all_gather_coalesced"] = [[digest(t) for t in lst] for lst in ol]
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=HOLD_S))
    out["monitored_barrier"] = "passed"
    return out


def bad_input(rank, world, backend):
    """Each bad case ends in an error on the rank that meets it, within its timeout, and the
    group goes on working."""
    out = {}
    store = dist.distributed_c10d._get_default_store()
    short = dist.new_group(timeout=datetime.timedelta(seconds=SHORT_S))
    # A receive no send ever matches: a tag rank 1 never uses.
    if rank == 1:
        dist.send(torch.ones(4), 0, group=short, tag=5)
    else:
        out["no_match"] = error_of(lambda: dist.recv(torch.empty(4), 1, group=short, tag=6))
        t = torch.empty(4)
        dist.recv(t, 1, group=short, tag=5)  # the message that did come is still there
        out["after_no_match"] = t.tolist()
    # all_to_all_single whose split sizes disagree: rank 1 sends 2 rows where rank 0 expects 1.
    o = torch.empty(2 if rank == 0 else 3)
    outs, ins = ([1, 1], [1, 1]) if rank == 0 else ([1, 2], [2, 1])
    out["mismatched_splits"] = error_of(lambda: dist.all_to_all_single(o, torch.ones(2 if rank == 0 else 3), outs, ins,
                                                                       group=short))
    store.set(f"splits_done/{rank}", "1")
    store.wait([f"splits_done/{1 - rank}"], datetime.timedelta(seconds=HOLD_S))
    # The group is still usable: a ring all_reduce.
    t = torch.full((3,), float(rank + 1))
    dist.all_reduce(t)
    out["all_reduce_after"] = t.tolist()
    # A peer that dies while this rank waits for its message.
    big = dist.new_group(timeout=datetime.timedelta(seconds=HOLD_S))
    if rank == 0:
        dist.send(torch.ones(1), 1, group=big)  # the connection is open
        store.wait(["posted"], datetime.timedelta(seconds=HOLD_S))
        time.sleep(0.2)
        torch.save(out, os.environ["TRIM_SPAWN_RESULT"])
        os._exit(0)  # gone, mid-transfer as far as rank 1 knows
    else:
        dist.recv(torch.empty(1), 0, group=big)
        work = dist.irecv(torch.empty(1000), 0, group=big)
        store.set("posted", "1")
        out["peer_died"] = error_of(work.wait)
        # Nothing to tear down with a dead peer: end the groups without a goodbye.
        dist.distributed_c10d._abort_process_group() if hasattr(dist.distributed_c10d, "_abort_process_group") \
            else None
    return out


SCENARIOS = {"ops": ops, "bad_input": bad_input}


def fsdp2(rank, world, backend):
    """A few Adam steps of a small MLP sharded by FSDP2 (fully_shard) on a CPU mesh: its
    all_gather_into_tensor and reduce_scatter_tensor run on this backend. The full parameters
    at the end, as digests (2 ranks: a sum or mean of two values has one result)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(33, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 5))
    mesh = init_device_mesh("cpu", (world,))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(4):
        x, y = torch.randn(16, 33, generator=g), torch.randint(0, 5, (16,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    params = {name: digest(p.full_tensor()) for name, p in model.named_parameters()}
    return {"params": params, "losses": losses}


SCENARIOS["fsdp2"] = fsdp2
