"""PyTorch's own distributed test suite against the trim backend: conformance with gloo.

    python tests/conformance/dist_suite.py --backend trim --world 2 [--only NAME ...] [--out F]

Builds the class torch's test/distributed/test_distributed_spawn.py builds from the wheel's
torch.testing._internal.distributed.distributed_test (DistributedTest._DistTestBase on
TestDistBackend, one process per rank, spawned: forked from a forkserver that has imported torch),
with BACKEND=gloo so that gloo's feature gates apply, and with --backend trim every gloo group
routed to "trim" as `python -m nccl_trim.run --trim-cpu` routes them (in the spawned ranks too:
they re-import this file). --backend gloo runs the same tests on gloo itself: the reference.

Prints one JSON line per test ({"test", "outcome": pass|fail|skip, "seconds", "why"}) and a summary
line; --out writes them to a file as well. Exit status 0 unless a test failed. Needs expecttest
(PyPI), which torch's test utilities import.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import unittest
import warnings

warnings.simplefilter("ignore")

_ARGS = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
_ARGS.add_argument("--backend", choices=("trim", "gloo"), default=os.environ.get("TRIM_SUITE_BACKEND", "trim"))
_ARGS.add_argument("--world", type=int, default=int(os.environ.get("WORLD_SIZE", "2")))
_ARGS.add_argument("--only", nargs="*", default=[], help="test names (exact) to run")
_ARGS.add_argument("--only-file", help="a file of test names, one per line (# comments)")
_ARGS.add_argument("--out", help="also write the JSON lines here")


def _setup_env(backend: str, world: int) -> None:
    # Read by distributed_test at import: set before it, here and (inherited) in every rank.
    os.environ["BACKEND"] = "gloo"
    os.environ["WORLD_SIZE"] = str(world)
    os.environ["TRIM_SUITE_BACKEND"] = backend
    if "TEMP_DIR" not in os.environ:
        tmp = tempfile.mkdtemp(prefix="trim-dist-suite-")
        for sub in ("barrier", "test_dir"):
            os.makedirs(os.path.join(tmp, sub), exist_ok=True)
        os.environ["TEMP_DIR"] = tmp
        os.environ["TRIM_SUITE_OWN_TEMP"] = "1"


if __name__ == "__main__":
    _OPTS = _ARGS.parse_args()
    _setup_env(_OPTS.backend, _OPTS.world)

if os.environ.get("TRIM_SUITE_BACKEND") == "trim":
    from nccl_trim._boot import install_cpu  # noqa: E402
    install_cpu()

import torch  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402

_SUITE_MODULE = "torch.testing._internal.distributed.distributed_test"


class _Rank(torch.multiprocessing.get_context("forkserver").Process):
    """A rank forked from the forkserver, in the environment a spawned one would have: the test
    process's when the rank starts (each test sets its own TEMP_DIR and INIT_METHOD), not the
    server's. distributed_test reads INIT_METHOD at import, which here was the server's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._environ = dict(os.environ)

    def run(self):
        os.environ.clear()
        os.environ.update(self._environ)
        sys.modules[_SUITE_MODULE].INIT_METHOD = os.getenv("INIT_METHOD", "env://")
        super().run()


class TestDistBackendWithSpawnGLOO(TestDistBackend, DistributedTest._DistTestBase):
    """torch's spawn test class, as test_distributed_spawn.py makes it for gloo."""

    def setUp(self):
        super().setUp()
        # torch's _spawn_processes, with the ranks forked from a forkserver that has imported torch
        # and this suite once: each rank is still a new process importing this file (as
        # __mp_main__, which routes gloo to trim in it), without its own ~6 s of imports first.
        try:  # as torch's does: "spawn" stays the default start method, in the ranks too
            torch.multiprocessing.set_start_method("spawn")
        except RuntimeError:
            pass
        torch.multiprocessing.get_context("forkserver").set_forkserver_preload(
            ["torch", "torch.distributed", _SUITE_MODULE])
        self._start_processes(_Rank)
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


class _Result(unittest.TextTestResult):
    def __init__(self, *args, sink=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.sink, self.rows, self._t0 = sink, [], 0.0

    def startTest(self, test):  # noqa: N802
        self._t0 = time.monotonic()
        super().startTest(test)

    def _row(self, test, outcome, why=""):
        row = {"test": test._testMethodName, "outcome": outcome, "seconds": round(time.monotonic() - self._t0, 2),
               "why": why[-600:]}
        self.rows.append(row)
        line = json.dumps(row)
        print(line, flush=True)
        if self.sink:
            self.sink.write(line + "\n")
            self.sink.flush()

    def addSuccess(self, test):  # noqa: N802
        super().addSuccess(test)
        self._row(test, "pass")

    def addFailure(self, test, err):  # noqa: N802
        super().addFailure(test, err)
        self._row(test, "fail", self._exc_info_to_string(err, test))

    def addError(self, test, err):  # noqa: N802
        super().addError(test, err)
        self._row(test, "fail", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):  # noqa: N802
        super().addSkip(test, reason)
        self._row(test, "skip", str(reason))

    def addExpectedFailure(self, test, err):  # noqa: N802
        super().addExpectedFailure(test, err)
        self._row(test, "pass", "expected failure")

    def addUnexpectedSuccess(self, test):  # noqa: N802
        super().addUnexpectedSuccess(test)
        self._row(test, "fail", "unexpected success")


def _selected(names, only):
    if not only:
        return names
    return [n for n in names if n in set(only)]


def main() -> int:
    opts = _OPTS
    only = list(opts.only)
    if opts.only_file:
        with open(opts.only_file) as f:
            only += [line.split("#")[0].strip() for line in f if line.split("#")[0].strip()]
    names = _selected(unittest.TestLoader().getTestCaseNames(TestDistBackendWithSpawnGLOO), only)
    suite = unittest.TestSuite(TestDistBackendWithSpawnGLOO(n) for n in names)
    sink = open(opts.out, "w") if opts.out else None
    t0 = time.monotonic()
    try:
        runner = unittest.TextTestRunner(stream=open(os.devnull, "w"), verbosity=0,
                                         resultclass=lambda *a, **k: _Result(*a, sink=sink, **k))
        result = runner.run(suite)
    finally:
        if sink:
            sink.close()
        if os.environ.get("TRIM_SUITE_OWN_TEMP") == "1":
            shutil.rmtree(os.environ["TEMP_DIR"], ignore_errors=True)
    counts = {k: sum(r["outcome"] == k for r in result.rows) for k in ("pass", "fail", "skip")}
    print(json.dumps({"summary": True, "backend": opts.backend, "world": opts.world, "torch": torch.__version__,
                      "tests": len(result.rows), **counts, "seconds": round(time.monotonic() - t0, 1)}), flush=True)
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
