"""scripts/check_gpu_report.py's verdicts on made-up results (issue 38, item 2; stdlib only).

check-gpu.sh records the congestion grid's run (`part congestion_grid`), then, when the budget left
runs of it, a `not_run` record of the same part. A run that failed or timed out must stay a
failure (exit 1), not read as "not run" (exit 4); and a check-gpu.sh --no-gpu run (the flow on CPU
tensors) must never end with "result": "pass". Each case is an OUT folder as check-gpu.sh leaves
it, judged by the script run as a subprocess. CHECK_GPU_REPORT names another copy of the script
(to see these tests fail on an older one).
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from _support import ROOT

SCRIPT = Path(os.environ.get("CHECK_GPU_REPORT", ROOT / "scripts" / "check_gpu_report.py"))
LEFT = "2 run(s) left for lack of time: --continue resumes it"


def run_summary(transport, status="ok"):
    """One congestion_bench.sh run's summary.json (the fields the report and its goal read)."""
    return {"label": f"digits_c60_{transport}", "task": "digits", "transport": transport, "cross_pct": 60.0,
            "loss_pct": 0.0, "status": status, "iter_p50_ms": 20.0, "iter_p99_ms": 40.0, "val_acc": 0.95,
            "time_to_target_s": 10.0, "steps": 100}


class Out:
    """An OUT folder: steps.jsonl, preflight.json, the grid's run folders."""

    def __init__(self, root, no_gpu=0):
        self.root, self.no_gpu = Path(root), no_gpu
        self.steps = [{"invocation": 1, "plan": ["congestion_grid"], "budget_s": 480, "continue": 0,
                       "no_gpu": no_gpu, "time": 1.0},
                      {"invocation": 1, "step": "preflight", "part": "", "rc": 0, "seconds": 5, "limit": 25}]
        self.write("preflight.json", {"ok": True, "why": [], "invocation": 1, "gpu": None if no_gpu else "NVIDIA H200",
                                      "commit": "abc", "plugin_sha256": "f00", "cores": 16, "no_gpu": bool(no_gpu)})
        self.write("preflight_1.json", {"ok": True, "invocation": 1, "commit": "abc", "plugin_sha256": "f00"})

    def write(self, path, obj):
        f = self.root / path
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(obj))

    def grid(self, rc, statuses, left=None, complete=False):
        """The grid's part (exit rc), its runs (transport -> status), then the runs the budget left."""
        for t, status in statuses.items():
            self.write(f"congestion/digits_c60_{t}/summary.json", run_summary(t, status))
        self.steps.append({"invocation": 1, "step": "congestion_grid", "part": "", "rc": rc, "seconds": 300,
                           "limit": 400, "estimate": 250, "dir": "congestion", "log": "congestion_grid.log"})
        if left:
            self.steps.append({"invocation": 1, "step": "congestion_grid", "part": "", "not_run": left})
        if complete:
            self.steps.append({"step": "congestion_grid", "part": "", "complete": 1})
        return self

    def judge(self, *args):
        (self.root / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in self.steps))
        p = subprocess.run([sys.executable, str(SCRIPT), *args, str(self.root)], capture_output=True, text=True,
                           timeout=60, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
        return p.returncode, p.stdout, p.stderr


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.n = 0

    def out(self, **kw):
        self.n += 1
        return Out(Path(self.tmp.name) / f"out{self.n}", **kw)

    def verdict(self, out):
        rc, stdout, stderr = out.judge("--elapsed-s", "1")
        self.assertTrue(stdout.strip(), stderr)
        return rc, json.loads(stdout.strip().splitlines()[-1]), stdout

    # -- a failed grid is a failure, whatever the budget left of it
    def test_failed_grid_with_runs_left_is_a_failure(self):
        cases = {  # what failed: (the part's exit, the runs' statuses, words of the why)
            "timed out": (124, {"gloo": "ok", "trim": "ok"}, "timed out"),
            "killed at its limit": (137, {"gloo": "ok"}, "timed out"),
            "a run failed": (0, {"gloo": "ok", "trim": "failed (exit 1)"}, "trim (failed (exit 1))"),
            "congestion_bench.sh failed": (1, {"gloo": "ok", "trim": "ok"}, "congestion_bench.sh failed"),
            "check-gpu.sh stopped": (143, {"gloo": "ok"}, "stopped during"),
        }
        for what, (rc, statuses, words) in cases.items():
            with self.subTest(what):
                exit_code, d, text = self.verdict(self.out().grid(rc, statuses, left=LEFT))
                g = d["steps"]["congestion_grid"]
                self.assertEqual(exit_code, 1, text)
                self.assertEqual(d["result"], "fail")
                self.assertEqual(d["exit"], 1)
                self.assertEqual(g["result"], "fail", g)
                self.assertEqual(d["failed"], ["congestion_grid"])
                self.assertNotIn("congestion_grid", d["not_run"])
                # both facts stay: why it failed, and the runs the budget left
                self.assertIn(words, g["why"])
                self.assertIn(LEFT, g["why"])
                self.assertEqual(g["not_run_parts"], {"congestion_grid": LEFT})
                self.assertRegex(text, r"(?m)^congestion_grid +fail ")

    def test_failed_grid_without_runs_left_is_a_failure(self):
        exit_code, d, text = self.verdict(self.out().grid(124, {"gloo": "ok"}, complete=True))
        self.assertEqual((exit_code, d["steps"]["congestion_grid"]["result"]), (1, "fail"), text)
        self.assertNotIn("not_run_parts", d["steps"]["congestion_grid"])

    def test_grid_that_passed_with_runs_left_is_not_run(self):
        # nothing failed: the runs the budget left make it incomplete (exit 4), never a pass
        exit_code, d, text = self.verdict(self.out().grid(0, {"gloo": "ok", "trim": "ok"}, left=LEFT))
        g = d["steps"]["congestion_grid"]
        self.assertEqual(exit_code, 4, text)
        self.assertEqual((d["result"], g["result"]), ("incomplete", "not run"))
        self.assertIn(LEFT, g["why"])
        self.assertEqual(set(g["runs"]), {"digits_c60_gloo", "digits_c60_trim"})  # the runs that ran stay

    def test_resumed_grid_replaces_the_earlier_run(self):
        # --continue resumed it (a later invocation), every run done: the latest run decides
        out = self.out().grid(124, {"gloo": "ok", "trim": "ok"}, left=LEFT)
        out.steps.append({"invocation": 2, "plan": ["congestion_grid"], "budget_s": 560, "continue": 1, "no_gpu": 0})
        out.steps.append({"invocation": 2, "step": "preflight", "part": "", "rc": 0, "seconds": 5, "limit": 25})
        out.steps.append({"invocation": 2, "step": "congestion_grid", "part": "", "rc": 0, "seconds": 100,
                          "limit": 400, "dir": "congestion", "log": "congestion_grid.log"})
        out.steps.append({"step": "congestion_grid", "part": "", "complete": 1})
        exit_code, d, text = self.verdict(out)
        self.assertIn(exit_code, (0, 3), text)
        self.assertEqual(d["steps"]["congestion_grid"]["result"], "pass")

    def test_state_resumes_a_grid_with_runs_left(self):
        # check-gpu.sh --continue runs a part again unless --state says "ran STEP/PART"
        for rc in (0, 124):
            with self.subTest(rc=rc):
                rc_state, stdout, stderr = self.out().grid(rc, {"gloo": "ok"}, left=LEFT).judge("--state")
                self.assertEqual(rc_state, 0, stderr)
                self.assertIn("ran preflight/", stdout.splitlines())
                self.assertNotIn("ran congestion_grid/", stdout.splitlines())
        _, stdout, _ = self.out().grid(124, {"gloo": "ok"}, complete=True).judge("--state")
        self.assertIn("ran congestion_grid/", stdout.splitlines())

    # -- --no-gpu: no GPU step ran, so never "pass"
    def test_no_gpu_run_is_not_a_pass(self):
        exit_code, d, text = self.verdict(self.out(no_gpu=1).grid(0, {"gloo": "ok", "trim": "ok"}, complete=True))
        self.assertEqual(d["steps"]["congestion_grid"]["result"], "pass", text)  # the flow itself worked
        self.assertIn(exit_code, (0, 3), text)
        self.assertNotEqual(d["result"], "pass")
        self.assertEqual(d["result"], "pass (no GPU step ran)")
        self.assertEqual(d["gpu_steps_run"], 0)
        self.assertEqual(d["no_gpu_steps"], ["congestion_grid"])
        self.assertRegex(text, r"(?m)^check-gpu: pass .*no GPU step ran")  # the table's verdict line too

    def test_no_gpu_run_that_failed_is_a_failure(self):
        exit_code, d, text = self.verdict(self.out(no_gpu=1).grid(1, {"gloo": "ok"}, complete=True))
        self.assertEqual((exit_code, d["result"]), (1, "fail"), text)

    def test_gpu_run_is_a_pass(self):
        # the same results from an invocation that checked the GPU: a pass, one GPU step
        exit_code, d, text = self.verdict(self.out(no_gpu=0).grid(0, {"gloo": "ok", "trim": "ok"}, complete=True))
        self.assertIn(exit_code, (0, 3), text)
        self.assertEqual(d["result"], "pass")
        self.assertEqual((d["gpu_steps_run"], d["no_gpu_steps"]), (1, []))


if __name__ == "__main__":
    unittest.main()
