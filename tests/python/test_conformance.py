"""A subset of PyTorch's own distributed suite on the trim backend (issue 37, item 4): one test
per operation family (tests/conformance/subset.txt), 2 ranks, through tests/conformance/
dist_suite.py as `make conformance` runs the whole suite. Each must pass: a skip would mean it
checked nothing here."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

from _support import ROOT, require_libs, require_torch

SUBSET = ROOT / "tests" / "conformance" / "subset.txt"


class ConformanceSubsetTest(unittest.TestCase):
    def test_the_subset_passes_on_trim(self):
        require_libs()
        require_torch()
        try:
            import expecttest  # noqa: F401 - torch's test utilities import it
        except ImportError as e:
            if os.environ.get("TRIM_REQUIRE_TORCH") == "1":
                raise AssertionError("expecttest is missing; scripts/setup.sh installs it") from e
            raise unittest.SkipTest("needs expecttest (pip install expecttest)")
        names = [line.split("#")[0].strip() for line in SUBSET.read_text().splitlines()]
        names = [n for n in names if n]
        with tempfile.TemporaryDirectory(prefix="trim-conformance-") as tmp:
            out = os.path.join(tmp, "trim.jsonl")
            proc = subprocess.run([sys.executable, str(ROOT / "tests" / "conformance" / "dist_suite.py"), "--backend",
                                   "trim", "--world", "2", "--only-file", str(SUBSET), "--out", out],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600,
                                  env={k: v for k, v in os.environ.items() if k != "TEMP_DIR"})
            with open(out) as f:
                rows = {r["test"]: r for r in map(json.loads, f)}
        self.assertEqual(sorted(rows), sorted(names), proc.stdout[-3000:])
        for name in names:  # a failure shows the ranks' own output (the suite's tail is only its assertion)
            self.assertEqual(rows[name]["outcome"], "pass", f"{name}: {rows[name]['why']}\n{proc.stdout[-6000:]}")
        self.assertEqual(proc.returncode, 0, proc.stdout[-3000:])


if __name__ == "__main__":
    unittest.main()
