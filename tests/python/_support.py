"""Shared helpers of the nccl_trim tests (stdlib only).

scripts/run_python_tests.sh sets PYTHONPATH to the package sources and NCCL_TRIM_LIB_DIR to a
build's lib/. Tests that need torch call require_torch(), which skips with the reason when
`import torch` fails, so the suite passes (with skips) on a machine without torch.
"""

import importlib
import os
import sys
import unittest
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = Path(__file__).resolve().parent


def lib_dir() -> Path:
    return Path(os.environ.get("NCCL_TRIM_LIB_DIR", ROOT / "build" / "lib"))


def require_libs() -> None:
    """Skip unless the build's libraries exist (run `make python-libs` first). Under
    scripts/run_python_tests.sh (`make test`: TRIM_REQUIRE_LIBS=1, after the build) a missing
    library fails instead: no test may skip silently there."""
    for name in ("libnccl-net-trim.so", "libtrim-rht.so", "libtrim-coll.so"):
        if not (lib_dir() / name).is_file():
            if os.environ.get("TRIM_REQUIRE_LIBS") == "1":
                raise AssertionError(f"TRIM_REQUIRE_LIBS=1 but {lib_dir() / name} is not built")
            raise unittest.SkipTest(f"{lib_dir() / name} is not built (make python-libs)")


def require_torch():
    """The torch module, or SkipTest saying why it cannot be imported. Under `make test`
    (TRIM_REQUIRE_TORCH=1: setup installed torch) a missing torch fails instead: no PyTorch test
    may skip silently there."""
    try:
        with warnings.catch_warnings():
            # A torch without numpy warns at import; irrelevant here.
            warnings.simplefilter("ignore")
            import torch
    except Exception as e:  # ImportError, or a broken install (OSError from its libraries)
        if os.environ.get("TRIM_REQUIRE_TORCH") == "1":
            raise AssertionError(f"TRIM_REQUIRE_TORCH=1 but torch cannot be imported ({type(e).__name__}: {e}); "
                                 "scripts/setup.sh installs it") from e
        raise unittest.SkipTest(f"needs torch, which cannot be imported here ({type(e).__name__}: {e})")
    return torch


def free_env(**extra) -> dict:
    """os.environ with a clean NCCL configuration (what a user without any NCCL_* settings has)."""
    env = {k: v for k, v in os.environ.items() if not (k.startswith("NCCL_NET") or k.startswith("NCCL_TRIM_"))}
    env["NCCL_TRIM_LIB_DIR"] = str(lib_dir())
    env.update(extra)
    return env


# What every rank imports first, loaded once per test process in the forkserver (rank_context).
RANK_PRELOAD = ("torch", "torch.distributed", "torch.nn.parallel")


def rank_context(preload=RANK_PRELOAD):
    """torch.multiprocessing's "forkserver" context, whose server has imported `preload`: the ranks
    the tests start. Each rank is a new process, as under "spawn" (the worker's module and ours are
    imported in it, its target and arguments pickled to it), but forked from a server that imported
    torch once instead of importing it itself: ~3 s of CPU per rank, and make test starts about 70.
    A rank sees the environment the test process had when its first rank started (the server's):
    the tests pass a rank what it needs in its arguments, never by changing os.environ."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(preload))  # no effect once the server runs: the first call's list
    return ctx


def spawn_ranks(cls, worker_main, world: int, weights_only: bool = True) -> None:
    """Runs worker_main(rank, world, rendezvous file, out dir) on `world` spawned ranks, each of
    which saves rank<R>.pt into the out dir; sets cls.torch, cls.tmp (cleaned up by the caller's
    tearDownClass), cls.seconds and cls.ranks (the loaded results)."""
    import tempfile
    import time

    torch = require_torch()
    import torch.multiprocessing as mp

    cls.torch = torch
    cls.tmp = tempfile.TemporaryDirectory()
    t0 = time.monotonic()
    rank_context()
    mp.start_processes(worker_main, args=(world, os.path.join(cls.tmp.name, "rdzv"), cls.tmp.name), nprocs=world,
                       start_method="forkserver")
    cls.seconds = time.monotonic() - t0
    cls.ranks = [torch.load(os.path.join(cls.tmp.name, f"rank{r}.pt"), weights_only=weights_only)
                 for r in range(world)]


class SpawnedRanks(unittest.TestCase):
    """Runs WORKER's main (a module here) once on WORLD spawned ranks for all the class's tests
    (spawn_ranks), and reports how long that took."""

    WORKER = ""
    WORLD = 2
    WEIGHTS_ONLY = True
    RANKS = "ranks"  # how the report names them

    @classmethod
    def setUpClass(cls):
        require_libs()
        require_torch()
        spawn_ranks(cls, importlib.import_module(cls.WORKER).main, cls.WORLD, weights_only=cls.WEIGHTS_ONLY)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()
        # The time is reported, not a test: nothing about it can fail.
        print(f"\n    ({cls.WORLD} {cls.RANKS}, spawn to results: {cls.seconds:.1f} s)", file=sys.stderr)


def fsdp_train(model, rank):
    """Three SGD steps (lr 0.1) of an FSDP model on inputs seeded by the rank: clones of its full
    parameters after them."""
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(200 + rank)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(4, 32, generator=g)).pow(2).mean().backward()
        opt.step()
    with FSDP.summon_full_params(model):
        return [p.detach().clone() for p in model.parameters()]


class OneRankGloo(unittest.TestCase):
    """A one-rank gloo default group in this process for the class's tests (torch needed)."""

    @classmethod
    def setUpClass(cls):
        import tempfile

        import torch.distributed as dist

        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        cls.tmp = tempfile.TemporaryDirectory()
        dist.init_process_group("gloo", init_method=f"file://{cls.tmp.name}/rdzv", rank=0, world_size=1)

    @classmethod
    def tearDownClass(cls):
        import torch.distributed as dist

        dist.destroy_process_group()
        cls.tmp.cleanup()
