"""python -m nccl_trim.run --trim-cpu over a script that registers its own DDP comm hook (torch's
PowerSGD, issue 37 item 6): the script's hook wins, with a HookOverrideWarning that names both
hooks and says how to keep ours, and the job trains through the trim backend to parameters
bit-identical to the same script under plain torchrun on gloo (2 ranks: a sum of two values has
one result). PowerSGD's callbacks issue collectives and wait for them: under trim, that needs the
backend's completions off its worker (test_backend_callbacks.py). Each launch has a deadline."""

import json
import subprocess
import sys
import time
import unittest

from _support import ROOT, TESTS, free_env, require_libs, require_torch

DEADLINE_S = 150
GLOO_EXIT_ABORT = "terminate called without an active exception"
REFERENCE = "torch.distributed.run"  # plain torchrun on gloo: none of our code


class LauncherPowerSgdTest(unittest.TestCase):
    def launch(self, launcher, ours):
        env = free_env(PYTHONPATH=str(ROOT / "python"), NCCL_TRIM_IFNAME="lo", GLOO_SOCKET_IFNAME="lo",
                       OMP_NUM_THREADS="1")
        cmd = [sys.executable, "-m", launcher, "--standalone", "--nproc-per-node", "2", *ours,
               str(TESTS / "ddp_powersgd_script.py")]
        t0 = time.monotonic()
        try:
            run = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=DEADLINE_S)
        except subprocess.TimeoutExpired as e:
            tail = (e.stderr or b"")[-3000:]
            self.fail(f"{launcher} {ours}: still running after {DEADLINE_S} s (a deadlock?)\n{tail}")
        print(f"\n    ({launcher} {' '.join(ours)}: {time.monotonic() - t0:.1f} s)", file=sys.stderr, end="")
        lines = sorted((json.loads(l) for l in run.stdout.splitlines() if l.startswith("{")), key=lambda l: l["rank"])
        if run.returncode != 0 and launcher == REFERENCE and GLOO_EXIT_ABORT in run.stderr and len(lines) == 2:
            # The reference, plain gloo with none of our code loaded, printed both ranks' results and
            # then hit torch's own abort at exit (rare, on a loaded machine; pytorch#190489): its
            # results stand. Our launch gets no such pass.
            print(" (plain gloo aborted at exit after its results: torch's gloo teardown)", file=sys.stderr, end="")
        else:
            self.assertEqual(run.returncode, 0, f"exit {run.returncode}\n{run.stdout}\n{run.stderr[-6000:]}")
        self.assertEqual([l["rank"] for l in lines], [0, 1], run.stdout)
        return lines

    def test_powersgd_runs_under_the_launcher_and_matches_plain_gloo(self):
        require_libs()
        require_torch()
        ours = self.launch("nccl_trim.run", ["--trim-cpu"])
        plain = self.launch(REFERENCE, [])
        for r in range(2):
            o, p = ours[r], plain[r]
            self.assertEqual((o["backend"], p["backend"]), ("trim", "gloo"), o)
            self.assertFalse(o["rht_state"], f"rank {r}: the RHT hook is still on the model")
            override = [w for w in o["warnings"] if w.startswith("HookOverrideWarning")]
            self.assertEqual(len(override), 1, o["warnings"])
            self.assertRegex(override[0], r"powerSGD_hook.*rht_hook.*drop the script's register_comm_hook.*--no-hook")
            self.assertEqual(p["warnings"], [])
            self.assertEqual(o["iter"], p["iter"])
            self.assertGreater(o["iter"], 2, "PowerSGD never left its uncompressed warm-up")
            self.assertEqual(o["params_sha256"], p["params_sha256"], f"rank {r}: differs from plain gloo")
        self.assertEqual(ours[0]["params_sha256"], ours[1]["params_sha256"], "replicas differ")


if __name__ == "__main__":
    unittest.main()
