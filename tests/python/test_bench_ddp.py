"""bench ddp (the launcher), ddp-report, alternate, backend and the two workloads: argument errors,
the dry runs' rank environments and sweep plans, report arithmetic on made-up run folders, and,
where torch and scikit-learn are installed, real 2-rank gloo runs on the CPU."""

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from bench import REPO, alternate, backend, ddp, ddp_report
from _bench import call

WORKLOADS = REPO / "bench" / "workloads"
HAVE_TORCH = all(importlib.util.find_spec(m) for m in ("torch", "sklearn"))


def dry(*argv):
    rc, out, err = call(ddp.main, ["--dry-run", "--out", "/nonexistent/dry", *argv])
    assert rc == 0, err
    return out


def script(path, *argv, env=None):
    return subprocess.run([sys.executable, str(path), *argv], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **(env or {})})


class Arguments(unittest.TestCase):
    def test_bad_values_exit_2_naming_them(self):
        for argv, word in ((["--mode", "fast"], "fast"), (["--task", "mnist"], "mnist"), (["--sweep", "x"], "x"),
                           (["--head-bits", "4"], "4"), (["--ranks", "0"], "0"), (["--modes", "lossless,tcp"], "tcp"),
                           (["--sweep", "trimacc"], "--cpu"), (["--cpu", "--mode", "socket"], "socket"),
                           (["--cpu", "--sweep", "accuracy"], "trimacc")):
            rc, _, err = call(ddp.main, argv + ["--dry-run"])
            self.assertEqual(rc, 2, argv)
            self.assertIn(word, err, argv)

    def test_help_names_the_options_tests_and_docs_use(self):
        _, out, _ = call(ddp.main, ["--help"])
        for w in ("--wait-all", "--no-plots", "--hook", "--resume", "--sweep", "--switch-arg"):
            self.assertIn(w, out)
        self.assertNotIn("--gdr-level", out)
        _, out, _ = call(alternate.main, ["--help"])
        for w in ("--rounds", "--steps", "LABEL=ARGS"):
            self.assertIn(w, out)

    def test_alternate_bad_arguments(self):
        for argv, word in ((["--bogus", "gloo="], "--bogus"), (["--rounds", "3"], "LABEL=ARGS"),
                           (["--rounds", "0", "gloo="], "0"), (["gloo"], "gloo")):
            rc, _, err = call(alternate.main, argv)
            self.assertEqual(rc, 2, argv)
            self.assertIn(word, err, argv)

    def test_backend_bad_arguments(self):
        rc, _, err = call(backend.main, ["--backends", "gloo,nccl"])
        self.assertEqual((rc, "nccl" in err), (2, True))
        self.assertEqual([backend.parse_size(s) for s in ("4K", "1M", "16MiB", "300")], [4096, 1 << 20, 16 << 20, 300])

    def test_backend_netns_bad_arguments(self):
        for argv, word in ((["--netns-mtu", "1500,x", "--ranks", "2"], "'1500,x'"),
                           (["--netns-mtu", "100", "--ranks", "2"], "'100'"),
                           (["--netns-mtu", "1500", "--ranks", "2", "--backends", "gloo,trim-lo"], "trim-lo"),
                           (["--netns-mtu", "9000"], "--ranks '2,4'"), (["--rounds", "0"], "'0'")):
            rc, _, err = call(backend.main, argv)
            self.assertEqual(rc, 2, argv)
            self.assertIn(word, err, argv)
        self.assertEqual(backend.parse_mtus(""), [])
        self.assertEqual(backend.parse_mtus("1500,9000"), [1500, 9000])

    def test_backend_netns_command_places_each_rank_on_the_veth(self):
        cmd = backend.netns_command(9000, "trim", [16 << 20, 64 << 20], "/tmp/x/rank")
        self.assertEqual(cmd[1:6], ["--veth", "--mtu", "9000", "--ranks", "2"])
        rank = cmd[cmd.index("--") + 1:]
        self.assertEqual(rank[1:4], ["-m", "bench", "backend"])
        self.assertEqual(rank[rank.index("--rank") + 1], "{rank}")
        self.assertEqual(rank[rank.index("--master") + 1], "{addr0}")
        self.assertEqual(rank[rank.index("--sizes") + 1], f"{16 << 20},{64 << 20}")
        self.assertNotIn("NCCL_TRIM", " ".join(cmd))  # the plugin picks the veth by itself
        # The script fills the placeholders per rank without setting anything up (no root needed).
        p = subprocess.run([*cmd[:1], "--print-only", *cmd[1:]], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("veth trimveth", p.stderr)
        self.assertIn("mtu 9000", p.stderr)
        self.assertRegex(p.stderr, r"\[rank 1\] TRIM_BN_RANK=1 ip netns exec \S+ .* --rank 1 --master 198\.18\.0\.1 ")
        p = subprocess.run([*cmd[:1], "--print-only", *cmd[1:4], "--ranks", "3", "--", "true"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--ranks 3", p.stderr)

    def test_backend_netns_cpu_per_byte_and_goals(self):
        self.assertEqual(backend.bus_bytes(2, 1000), 1000)
        self.assertEqual(backend.bus_bytes(4, 1000), 1500)
        self.assertAlmostEqual(backend.cpu_s_per_gb(0.01, 2, 20_000_000), 0.5)

        def row(b, busbw, cpu):
            return {"backend": b, "busbw_gbs": busbw, "cpu_s_per_gb": cpu}
        rows = [row("gloo", 2.0, 1.0), row("gloo", 3.0, 1.2), row("gloo", 1.0, 0.8),
                row("trim", 4.0, 1.2), row("trim", 5.0, 1.5), row("trim", 3.0, 1.1)]
        s = backend.netns_summary(1500, 16 << 20, rows)
        self.assertEqual((s["gloo_busbw_gbs"], s["gloo_cpu_s_per_gb"], s["trim_busbw_gbs"], s["trim_cpu_s_per_gb"]),
                         (2.0, 1.0, 4.0, 1.2))  # medians of the rounds
        self.assertEqual((s["trim_cpu_vs_gloo"], s["trim_busbw_vs_gloo"], s["cpu_goal"]), (1.2, 2.0, 1.3))
        self.assertTrue(s["trim_meets_cpu_goal"])
        s = backend.netns_summary(9000, 16 << 20, rows)
        self.assertEqual(s["cpu_goal"], 1.0)
        self.assertFalse(s["trim_meets_cpu_goal"])
        self.assertNotIn("cpu_goal", backend.netns_summary(4000, 1, rows))

    def test_backend_switches_per_call_and_per_mib(self):
        # 2 ranks, 4 MiB: each rank moves 4 MiB a call; 30 calls, 600 voluntary, 90 involuntary.
        s = backend.switches(600, 90, 30, 2, 4 << 20)
        self.assertEqual((s["vcsw_per_call"], s["ivcsw_per_call"], s["vcsw_per_mib"]), (20.0, 3.0, 5.0))
        self.assertEqual(backend.switches(600, 90, 30, 4, 4 << 20)["vcsw_per_mib"], round(20 / 6, 2))
        self.assertIsNone(backend.switches(1, 0, 1, 2, 0)["vcsw_per_mib"])

    def test_backend_result_row(self):
        r = {"bytes": 4_000_000, "median_s": 0.004, "calls": 9, "cpu_s_per_call": 0.002,
             "vcsw_per_call": 5.0, "replicas_identical": True}
        row = backend.result_row(r, 4, 1, "trim", mtu=1500)
        self.assertEqual((row["mtu"], row["ranks"], row["round"], row["algbw_gbs"], row["busbw_gbs"]),
                         (1500, 4, 1, 1.0, 1.5))  # 4 MB in 4 ms; busbw 2(n-1)/n of it
        self.assertEqual(row["vcsw_per_call"], 5.0)
        self.assertNotIn("ivcsw_per_call", row)  # only what the rank reported
        self.assertNotIn("mtu", backend.result_row(r, 2, 0, "gloo"))

    def test_backend_headline_variants_pin_nothing(self):
        # as users run it: only the extra *-lo rows choose an interface
        pinned = {v for v, (_, env) in backend.VARIANTS.items() if "NCCL_TRIM_IFNAME" in env or "GLOO_SOCKET_IFNAME" in env}
        self.assertEqual(pinned, {"gloo-lo", "trim-lo"})
        self.assertNotIn("IFNAME", Path(backend.__file__).read_text().split("def main", 1)[1])

    def test_workload_help(self):
        out = script(WORKLOADS / "ddp_train.py", "--help").stdout
        for w in ("--deterministic", "--die-after-iters", "--die-rank", "widemlp", "--describe", "--measure-compute",
                  "--eval-every", "--time-limit-s"):
            self.assertIn(w, out)
        self.assertIn("--target-ms", script(WORKLOADS / "allreduce_bench.py", "--help").stdout)

    def test_describe_without_torch(self):
        def describe(task):
            return json.loads(script(WORKLOADS / "ddp_train.py", "--task", task, "--describe", env={"WORLD_SIZE": "2"}).stdout)
        d = describe("widemlp")
        self.assertTrue(d["grad_bytes"] >= 10e6 and d["grad_bytes"] == 4 * d["params"])
        self.assertEqual((d["steps"], d["steps_per_epoch"]), (60, 5))
        d = describe("digits")
        self.assertEqual((d["params"], d["steps_per_epoch"]), (283786, 22))


SO = r"NCCL_NET_PLUGIN=/[^ ]*/lib/libnccl-net-trim\.so "


class DryRuns(unittest.TestCase):
    def has(self, text, *patterns):
        for p in patterns:
            if p.startswith("!"):
                self.assertIsNone(re.search(p[1:], text, re.M), f"unexpected {p[1:]}\n{text}")
            else:
                self.assertRegex(text, re.compile(p, re.M))

    def mode(self, m, *flags):
        return dry("--mode", m, "--ranks", "3", *flags)

    def test_each_mode_promises_its_rank_environment(self):
        self.has(self.mode("lossless"), SO, "NCCL_NET=Trim ", "NCCL_HOSTID=ddp-rank2 ", "env -u NCCL_TRIM_SWITCH ",
                 "!NCCL_NET_GDR", "!NCCL_TRIM_SWITCH=", "!# switch:", r"!nccl_trim\._boot", "!NCCL_TRIM_LIB_DIR")
        self.has(self.mode("random"), SO, r"NCCL_TRIM_SWITCH=127\.0\.0\.1:", r"# switch: .*--mode random .*--random-p 0\.1")
        self.has(self.mode("trim"), SO, r"NCCL_TRIM_SWITCH=127\.0\.0\.1:", "# switch: .*--mode trim .*--cross incast")
        self.has(self.mode("drop"), SO, "# switch: .*--mode drop .*--cross ")
        self.has(self.mode("socket"), "NCCL_NET=Socket ", "NCCL_NET_PLUGIN=none ", "!libnccl-net-trim", "!# switch:")
        self.has(self.mode("random", "--hook"), SO, r"-m nccl_trim\._boot /[^ ]*/ddp_train\.py", "PYTHONPATH=/[^ ]*/python",
                 "NCCL_TRIM_LIB_DIR=/[^ ]*/lib ", r"^# run random_rht_hb1_p0\.1_hook_digits ")
        self.assertEqual(len(re.findall("^# rank ", self.mode("lossless"), re.M)), 3)

    def test_cpu_modes(self):
        self.has(dry("--cpu"), "^# rank 0: .*--device cpu --backend gloo", "!NCCL_NET_PLUGIN", "!env -u")
        self.has(dry("--cpu", "--mode", "lossless"), "^# rank 0: .*NCCL_NET_PLUGIN=.*--device cpu --backend trim")
        self.has(dry("--cpu", "--mode", "lossless", "--hook"), r"^# rank 0: .*-m nccl_trim._boot --trim-cpu .*--backend gloo")

    def test_switch_and_workload_options_pass_through(self):
        out = dry("--mode", "trim", "--cross", "a:1", "--cross", "b:2", "--switch-arg=--x", "--rate-gbps", "5",
                  "--epochs", "3", "--", "--model", "mlp")
        self.has(out, "--rate-gbps 5 .*--trim-exact 0 --cross a:1 --cross b:2 --x$", "--epochs 3 .*jsonl --model mlp$")

    def test_accuracy_sweep_26_runs_with_their_own_settings(self):
        out = dry("--sweep", "accuracy")
        runs = re.split(r"^(?=# run )", out, flags=re.M)[1:]
        self.assertEqual(len(runs), 26)
        run = {r.split()[2]: r for r in runs}
        self.has(run["random_sd_hb1_p0.75"], "--random-p 0.75", "NCCL_TRIM_SCHEME=sd ")
        self.has(run["random_rht_hb16_p0.5"], "NCCL_TRIM_HEAD_BITS=16 ")
        self.has(run["random_rht_hb1_p0.5_phaseall"], "NCCL_TRIM_PHASE=all ")
        self.has(run["socket"], "--target-acc 0.95", "!# switch")

    def test_trimacc_sweep(self):
        out = dry("--cpu", "--sweep", "trimacc", "--task", "charlm")
        runs = {r.split()[2]: r for r in re.split(r"^(?=# run )", out, flags=re.M)[1:]}
        self.assertEqual(len(runs), 57)  # 3 seeds x (gloo + 2 p x 9 configurations)
        rank = lambda label, r: next(ln for ln in runs[label].splitlines() if ln.startswith(f"# rank {r}"))  # noqa: E731
        self.has(rank("hook2mse_p0.5_s1", 0), "NCCL_TRIM_HEAD_BITS=2 .*NCCL_TRIM_HEAD_SCALE=mse .*_boot --trim-cpu")
        self.has(rank("hookmsenopc_p0.5_s1", 0), "NCCL_TRIM_HEAD_SCALE=mse NCCL_TRIM_HOOK_PRECONDITION=off .*_boot --trim-cpu")
        self.has(runs["hookmse_p0.5_s1"], "!HOOK_PRECONDITION", "!ERROR_FEEDBACK")
        self.has(rank("hookef_p0.5_s1", 0), "NCCL_TRIM_ERROR_FEEDBACK=1 .*_boot --trim-cpu")
        self.has(rank("rhtef_p0.75_s0", 1), "NCCL_TRIM_ERROR_FEEDBACK=1 .*--backend trim", "--random-p|NCCL_TRIM_SWITCH")
        self.has(rank("hook16_p0.75_s2", 1), "NCCL_TRIM_HEAD_BITS=16 .*_boot --trim-cpu")
        self.has(runs["hook_p0.5_s0"], "!HEAD_SCALE")
        self.has(rank("hook_p0.5_s2", 1), "_boot --trim-cpu .*--seed 2 --device cpu --backend gloo")
        self.has(rank("rht16_p0.5_s0", 1), "NCCL_TRIM_HEAD_BITS=16 .*--backend trim")
        self.has(runs["gloo_s1"], "--backend gloo", "!NCCL_NET_PLUGIN", "!# switch")

    def test_bench_and_other_sweeps(self):
        self.assertEqual(re.findall("^# run (\\S+)", dry("--bench", "allreduce"), re.M), ["lossless", "socket"])
        self.has(dry("--sweep", "bench", "--ranks", "4"), r"allreduce_bench\.py --label socket", "WORLD_SIZE=4 ")
        self.assertEqual(re.findall("^# run (\\S+)", dry("--sweep", "latency"), re.M), ["lossless_rht", "trim_rht", "drop_rht"])
        out = dry("--sweep", "charlm")
        self.assertEqual(len(re.findall("^# run ", out, re.M)), 4)
        self.has(out, "--task charlm", "!--task digits")


def made_up_run(root, label, mode="random", kind="train", final=True, status=None, p=0.5, acc=0.9, log=""):
    d = Path(root) / label
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"kind": kind, "label": label, "mode": mode, "ranks": 2, "task": "digits",
                                            "scheme": "rht", "head_bits": 1, "phase": "reduce_scatter",
                                            "trim_p": p if mode == "random" else None, "versions": {"gpu_smi": "X"}}))
    ev = [{"event": "config", "backend": "nccl", "versions": {"torch": "2.x", "hostname": "h"}},
          {"event": "epoch", "epoch": 0, "val_acc": 0.1}, {"event": "epoch", "epoch": 1, "val_acc": acc + 0.01}]
    if kind == "bench":
        ev += [{"event": "size", "bytes": b, "time_us": 10.0, "busbw_GBps": bw, "max_err": 0.0}
               for b, bw in ((1 << 20, 1.0 if mode == "socket" else 2.0), (16 << 20, 4.0))]
    if final:
        ev.append({"event": "final", "epochs": 1, "steps": 10, "val_acc": acc, "params_identical": True,
                   "param_sha256": ["a" * 64, "a" * 64], "params_vs_rank0": [{"rel_l2_diff": 0.0}]})
    (d / "rank0.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ev) + '{"cut')
    (d / "rank0.log").write_text(log)
    if mode == "random":
        (d / "switch.jsonl").write_text(json.dumps({"event": "final", "forwarded": 200, "forwarded_trimmed": 50}) + "\n")
    return ddp_report.summarize(d, status, 3.0)


class Report(unittest.TestCase):
    def test_summary_status_counters_switch_and_network(self):
        log = ("NCCL INFO Using network Trim\nNET/Trim: closed send connection: sent 10 pkts, retransmitted 2, "
               "timeouts 0, trimmed accepted 3, trimmed NACKed 1\nNET/Trim: closed recv connection: sent 5 pkts\n")
        with tempfile.TemporaryDirectory() as t:
            s = made_up_run(t, "random_rht_hb1_p0.5", log=log)
            self.assertEqual(s["status"], "ok")
            self.assertEqual(s["switch"]["trim_rate"], 0.25)
            self.assertEqual((s["plugin"]["sent_packets"], s["plugin"]["retransmitted"], s["plugin"]["connections_closed"]),
                             (15, 2, 2))
            self.assertEqual((s["best_val_acc"], s["param_sha256"]), (0.91, ["a" * 16] * 2))
            self.assertEqual(json.loads((Path(t) / "random_rht_hb1_p0.5" / "summary.json").read_text()), s)
            self.assertEqual(made_up_run(t, "killed", final=False, status=137)["status"], "failed (137)")
            s = made_up_run(t, "wrongnet", mode="socket", log="Using network Trim\n")
            self.assertEqual(s["status"], "failed (network Trim, not Socket)")

    def test_tables_and_summary_line(self):
        with tempfile.TemporaryDirectory() as t:
            for sd, (g, h) in enumerate(((0.90, 0.88), (0.92, 0.93))):
                made_up_run(t, f"gloo_s{sd}", mode="cpu", acc=g)
                made_up_run(t, f"hook_p0.5_s{sd}", acc=h)
            made_up_run(t, "lossless", mode="lossless", kind="bench")
            made_up_run(t, "socket", mode="socket", kind="bench")
            rc, out, _ = call(ddp_report.main, [t, "--no-plots", "--summary-line"])
            self.assertEqual(rc, 0)
            self.assertIn("| hook_p0.5 | 2 | 0.9050 | 0.8800-0.9300 | -0.50 | s0 -2.00, s1 +1.00 | 0.250 | yes |", out)
            self.assertIn("| hook_p0.5_s0 | random | rht | 1 | reduce_scatter | 0.5 | ok | - | 0.8800 | 0.8900 |", out)
            self.assertIn("| 1 MiB | 1.000 | 2.000 | 2.00 |", out)
            line = json.loads(out.splitlines()[-1])
            self.assertEqual((line["runs"], line["failed"]), (6, []))
            self.assertAlmostEqual(line["by_config"]["hook_p0.5"]["diff_points"], -0.5)
            made_up_run(t, "broken", final=False, status=1)
            self.assertEqual(call(ddp_report.main, [t, "--no-plots"])[0], 1)
            rc, out, _ = call(ddp_report.main, ["--summarize", f"{t}/broken", "--status", "124", "--wall-s", "9"])
            self.assertEqual((rc, json.loads(out)["status"], json.loads(out)["wall_s"]), (0, "failed (124)", 9.0))


class Alternate(unittest.TestCase):
    def test_summary_keys_check_gpu_reads(self):
        runs = {("gloo", 1): 50.0, ("trim", 1): 55.0, ("gloo", 2): 40.0, ("trim", 2): 42.0}
        with tempfile.TemporaryDirectory() as t, mock.patch.object(alternate.proc, "cpu_run", lambda cmd, **kw: (0, 10.0, 1.0, "")):
            for label, r in runs:  # what each run leaves behind
                (Path(t) / f"{label}_{r}").mkdir()
                (Path(t) / f"{label}_{r}" / "summary.json").write_text(json.dumps({"iter_p50_ms": runs[(label, r)]}))
            rc, out, _ = call(alternate.main, ["--rounds", "2", "--out", t, "gloo=", "trim=--mode lossless"])
            s = json.loads(out.splitlines()[-1])
            self.assertEqual(rc, 0)
            self.assertEqual(s["baseline"], "gloo")
            self.assertEqual((s["gloo"]["step_paired_ratio"], s["trim"]["ok_rounds"], s["trim"]["cpu_paired_ratio"]), (1.0, 2, 1.0))
            self.assertAlmostEqual(s["trim"]["step_paired_ratio"], (1.1 + 1.05) / 2, places=3)
            self.assertEqual(s["trim"]["step_p50_ms_median"], 48.5)
            self.assertEqual(json.loads((Path(t) / "summary.json").read_text()), s)


@unittest.skipUnless(HAVE_TORCH, "torch or scikit-learn not installed")
class Smoke(unittest.TestCase):
    """Real 2-rank gloo runs on the CPU through the launcher."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.t = Path(cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def launch(self, name, *argv):
        d = self.t / name
        rc, out, err = call(ddp.main, ["--cpu", "--ranks", "2", "--out", str(d), *argv])
        return rc, d, out, err

    def test_digits_train_and_eval_every_change_no_bit(self):
        rc, d, out, err = self.launch("train", "--task", "digits", "--epochs", "2", "--max-steps", "30")
        self.assertEqual(rc, 0, err)
        s = json.loads(out.splitlines()[-1])
        self.assertEqual(s["status"], "ok")
        self.assertTrue(s["params_identical"] and len(s["param_sha256"]) == 2 and len(set(s["param_sha256"])) == 1)
        self.assertTrue(s["loss_decreased"] and s["val_loss"] < s["initial_val_loss"])
        rc, d2, _, err = self.launch("train2", "--task", "digits", "--epochs", "2", "--max-steps", "30", "--",
                                     "--eval-every", "7", "--measure-compute", "2", "--target-acc", "0.5")
        self.assertEqual(rc, 0, err)
        self.assertEqual(json.loads((d2 / "summary.json").read_text())["param_sha256"], s["param_sha256"])
        ev = [json.loads(ln) for ln in (d2 / "rank0.jsonl").read_text().splitlines()]
        self.assertEqual([e["steps"] for e in ev if e["event"] == "eval"], [7, 14, 21, 28])
        self.assertTrue(any(e["event"] == "compute" and e["steps"] == 2 for e in ev))

    def test_allreduce_sums_exact(self):
        rc, d, _, err = self.launch("bench", "--bench", "allreduce", "--", "--min-bytes", "64K", "--max-bytes", "1M",
                                    "--warmup", "1", "--iters", "3", "--target-ms", "20")
        self.assertEqual(rc, 0, err)
        s = json.loads((d / "cpu" / "summary.json").read_text())
        self.assertTrue(s["all_exact"] and len(s["bench"]) == 5 and s["peak_busbw_GBps"] > 0, s)

    def test_rank_killed_rank0_fails_by_itself(self):
        rc, d, _, _ = self.launch("kill", "--task", "digits", "--epochs", "5", "--wait-all", "--timeout-s", "90", "--",
                                  "--die-after-iters", "5", "--timeout-s", "20")
        die = [json.loads(ln) for ln in (d / "rank1.jsonl").read_text().splitlines() if '"die"' in ln]
        e0, e1 = (json.loads((d / f"rank{r}.exit").read_text()) for r in (0, 1))
        self.assertEqual((rc != 0, die[0]["step"], e1["status"]), (True, 5, 137))
        self.assertNotEqual(e0["status"], 0)
        self.assertLess(e0["time"] - die[0]["time"], 60)

    def test_describe_counts_the_models_build_model_makes(self):
        import torch
        import torch.nn as nn
        spec = importlib.util.spec_from_file_location("ddp_train", WORKLOADS / "ddp_train.py")
        D = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(D)
        for argv in (["--task", "digits"], ["--task", "digits", "--model", "mlp"], ["--task", "widemlp"],
                     ["--task", "charlm"], ["--task", "charlm", "--d-model", "64", "--layers", "2", "--seq-len", "32"]):
            a = D.parse_args(argv)
            self.assertEqual(sum(p.numel() for p in D.build_model(a, nn, torch).parameters()), D.describe(a, 2)["params"])


if __name__ == "__main__":
    unittest.main()
