"""Builds the nccl_trim package: the Python sources from python/, plus the NCCL plugin and
libtrim-rht.so built by the repository's Makefile (`make python-libs`) and installed as package
data in nccl_trim/lib/. The metadata is in pyproject.toml.

make builds into the checkout's build/ like any other make run, so an up-to-date build/ is reused
and nothing is compiled twice; setuptools' own scratch space goes to build/python/ (its default,
build/lib/, is where make puts the libraries).
"""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
LIBS = ("libnccl-net-trim.so", "libtrim-rht.so", "libtrim-coll.so")


def make_libs() -> Path:
    """Run `make -j<cores> python-libs` in the checkout; return the directory of the libraries."""
    if not (ROOT / "Makefile").is_file():
        raise RuntimeError(f"no Makefile in {ROOT}: nccl_trim installs from a checkout of the repository")
    jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cmd = ["make", "-C", str(ROOT), f"-j{jobs}", "python-libs"]
    print("nccl_trim: " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    return ROOT / "build" / "lib"


class BuildPyWithLibs(build_py):
    """build_py, then the native libraries into nccl_trim/lib/ (in the source tree for editable
    installs, where the package is imported from python/)."""

    def run(self):
        super().run()
        built = make_libs()
        if getattr(self, "editable_mode", False):
            dest = ROOT / "python" / "nccl_trim" / "lib"
        else:
            dest = Path(self.build_lib) / "nccl_trim" / "lib"
        dest.mkdir(parents=True, exist_ok=True)
        for name in LIBS:
            shutil.copy2(built / name, dest / name)


class BinaryDistribution(Distribution):
    """The wheel holds native code, so it is tagged for this platform."""

    def has_ext_modules(self):
        return True


cmdclass = {"build_py": BuildPyWithLibs}
try:  # the libraries do not use Python's ABI: tag the wheel py3-none-<platform>
    try:
        from setuptools.command.bdist_wheel import bdist_wheel
    except ImportError:
        from wheel.bdist_wheel import bdist_wheel

    class BdistWheelAnyPython(bdist_wheel):
        def get_tag(self):
            return ("py3", "none", super().get_tag()[2])

    cmdclass["bdist_wheel"] = BdistWheelAnyPython
except ImportError:
    pass

setup(
    cmdclass=cmdclass,
    distclass=BinaryDistribution,
    options={"build": {"build_base": str(ROOT / "build" / "python")}},
)
