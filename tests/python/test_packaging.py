"""The package as pip builds it: setup.py's build step runs `make python-libs` and ships the three
libraries in nccl_trim/lib/, and the built package imports and finds them there; pip's install
declares the "trim" torch.distributed backend's entry point.

These tests never compile: they run only when the checkout's build/ is up to date (`make -q
python-libs`), and then check that the build step left the libraries untouched (no rebuild)."""

import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

from _support import ROOT, free_env, lib_dir

LIBS = ("libnccl-net-trim.so", "libtrim-rht.so", "libtrim-coll.so")
PROBE = ("import nccl_trim, os; from nccl_trim import rht, coll; "
         "print(nccl_trim.__file__); print(nccl_trim.plugin_path()); print(nccl_trim.rht_library_path()); "
         "print(nccl_trim.coll_library_path()); print(rht.load().bucket_seed(1, 2, 3)); print(coll.load().path)")


def _require_setuptools():
    """setuptools >= 61 (pyproject.toml's [project] table); pip brings its own when it isolates."""
    if importlib.util.find_spec("setuptools") is None:
        raise unittest.SkipTest("setuptools is not installed for this Python")
    import setuptools
    version = tuple(int(p) for p in setuptools.__version__.split(".")[:2])
    if version < (61, 0):
        raise unittest.SkipTest(f"setuptools {setuptools.__version__} is older than 61 (no [project] support)")
    return setuptools, version


def _require_fresh_build():
    if lib_dir().resolve() != (ROOT / "build" / "lib").resolve():
        raise unittest.SkipTest(f"the package builds into {ROOT / 'build'}, these tests use {lib_dir()}")
    if subprocess.run(["make", "-q", "-C", str(ROOT), "python-libs"], capture_output=True).returncode != 0:
        raise unittest.SkipTest("build/ is not up to date (make python-libs): the package build would compile")


def _mtimes():
    return {name: os.stat(ROOT / "build" / "lib" / name).st_mtime_ns for name in LIBS}


class PackagingTest(unittest.TestCase):
    def setUp(self):
        _require_setuptools()
        _require_fresh_build()
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def check_installed(self, where):
        """`where` holds an importable nccl_trim whose lib/ has the libraries, found without help."""
        for name in LIBS:
            self.assertTrue(os.path.isfile(os.path.join(where, "nccl_trim", "lib", name)), f"no {name} in {where}")
        env = {k: v for k, v in free_env().items() if k not in ("NCCL_TRIM_LIB_DIR", "PYTHONPATH")}
        env["PYTHONPATH"] = where
        out = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=self.tmp.name, capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        package, plugin, rot, engine, seed, loaded = out.stdout.split("\n")[:6]
        int(seed)  # libtrim-rht loaded and answered
        self.assertTrue(package.startswith(where), package)
        self.assertEqual(plugin, os.path.join(os.path.realpath(where), "nccl_trim", "lib", LIBS[0]))
        self.assertEqual(rot, os.path.join(os.path.realpath(where), "nccl_trim", "lib", LIBS[1]))
        self.assertEqual(engine, os.path.join(os.path.realpath(where), "nccl_trim", "lib", LIBS[2]))
        self.assertEqual(loaded, engine)  # libtrim-coll loaded, its ABI checked

    def test_build_step_ships_the_libraries_without_rebuilding(self):
        before = _mtimes()
        out = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", self.tmp.name],
                             cwd=ROOT, env=free_env(), capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("make -C", out.stdout)
        self.assertEqual(_mtimes(), before, "the build step rebuilt libraries that were up to date")
        self.check_installed(self.tmp.name)

    def test_pip_install_without_isolation(self):
        setuptools, version = _require_setuptools()
        if version < (70, 1) and importlib.util.find_spec("wheel") is None:
            self.skipTest(f"setuptools {setuptools.__version__} needs the `wheel` package to build a wheel "
                          "without build isolation, and it is not installed")
        target = os.path.join(self.tmp.name, "site")
        before = _mtimes()
        out = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                              "--no-index", "--target", target, str(ROOT)],
                             env=free_env(PIP_DISABLE_PIP_VERSION_CHECK="1"), capture_output=True, text=True,
                             timeout=600)
        self.assertEqual(out.returncode, 0, out.stdout[-3000:] + out.stderr[-3000:])
        self.assertEqual(_mtimes(), before, "pip rebuilt libraries that were up to date")
        self.check_installed(target)
        # torch.distributed finds the backend through this entry point (Backend._ensure_backend_registered).
        points = [os.path.join(target, d, "entry_points.txt") for d in os.listdir(target) if d.endswith(".dist-info")]
        self.assertEqual(len(points), 1, os.listdir(target))
        with open(points[0]) as f:
            text = f.read()
        self.assertIn("[torch.distributed.backends]", text)
        self.assertIn("trim = nccl_trim.backend:register", text)


if __name__ == "__main__":
    unittest.main()
