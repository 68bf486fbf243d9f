"""python -m nccl_trim.run end to end: torchrun with 2 gloo workers on CPU running a tiny DDP
script unchanged; the bootstrap installs the RHT hook on its model, the workers see the plugin's
settings and the script's own arguments. With --trim-cpu the same gloo script's groups are trim
groups, the hook's too, and the plugin carries them."""

import json
import subprocess
import sys
import unittest

from _support import ROOT, TESTS, free_env, lib_dir, require_libs, require_torch


class LauncherEndToEndTest(unittest.TestCase):
    def test_two_workers_run_the_script_with_the_hook(self):
        lines = self.launch(["--trim-scheme", "sd"], GLOO_SOCKET_IFNAME="lo")
        plugin = str((lib_dir() / "libnccl-net-trim.so").resolve())
        for l in lines:
            self.assertTrue(l["hook"], f"rank {l['rank']}: no hook installed")
            self.assertEqual(l["steps"], 3)
            self.assertEqual(l["argv"], ["--lr", "0.1", "--no-hook"])  # after the script: the script's
            self.assertEqual((l["name"], l["path0"]), ("__main__", str(TESTS)))
            self.assertEqual((l["NCCL_NET_PLUGIN"], l["NCCL_NET"], l["NCCL_TRIM_SCHEME"]), (plugin, "Trim", "sd"))
            self.assertEqual((l["backend"], l["hook_backend"]), ("gloo", "gloo"))
        self.assertEqual(lines[0]["params_sha256"], lines[1]["params_sha256"], "replicas differ")

    def test_trim_cpu_runs_the_gloo_script_through_the_plugin(self):
        lines = self.launch(["--trim-cpu"], NCCL_TRIM_IFNAME="lo")
        for l in lines:
            # The script asked for gloo; its default group and the hook's are trim groups.
            self.assertEqual((l["backend"], l["hook_backend"]), ("trim", "trim"), l)
            self.assertTrue(l["hook"])
        self.assertEqual(lines[0]["params_sha256"], lines[1]["params_sha256"], "replicas differ")

    def launch(self, ours, **env):
        """The launcher with our options `ours` on 2 workers of ddp_tiny_script.py, in a clean
        environment plus `env`: the JSON line each worker printed."""
        require_libs()
        require_torch()
        env = free_env(PYTHONPATH=str(ROOT / "python"), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", **env)
        cmd = [sys.executable, "-m", "nccl_trim.run", "--standalone", "--nproc-per-node", "2", *ours,
               str(TESTS / "ddp_tiny_script.py"), "--lr", "0.1", "--no-hook"]
        run = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=180)
        self.assertEqual(run.returncode, 0, f"exit {run.returncode}\n{run.stdout}\n{run.stderr[-6000:]}")
        self.assertIn("RHT hook on", run.stderr)
        lines = [json.loads(l) for l in run.stdout.splitlines() if l.startswith("{")]
        self.assertEqual(sorted(l["rank"] for l in lines), [0, 1], run.stdout)
        return lines


if __name__ == "__main__":
    unittest.main()
