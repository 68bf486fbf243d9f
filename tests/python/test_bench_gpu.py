"""python -m bench gpu (scripts/check-gpu.sh) and its report, without a GPU (stdlib only).

The dry runs (the first invocation's steps in order with limits summing to <= 480 s; --continue's
rest and what its budget leaves; the grid and --plan), the check on a machine without a GPU (exit 2
in seconds, the reasons, the commit from BUILD_INFO, the bundle), --continue appending to an earlier
bundle, and the report's verdicts on made-up results folders. The congestion bench is a stand-in
here (its own tests check its dry run); it prints what it was called with.
"""

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest
import unittest.mock
from pathlib import Path

from _support import ROOT

from bench import gpu, gpu_report

PART1 = "ddp_lossless allreduce_2r congestion_c60 kernels hook_overhead hook_accuracy rank_killed".split()
PART2 = ("allreduce_4r ddp_random_trim socket_sweep_2r socket_sweep_4r hook_accuracy_more kernels_ncu "
         "codec_threads_2r harness_scaling cpu_uncongested congestion_grid").split()
HAS_GPU = shutil.which("nvidia-smi") is not None
FAKE_CONG = """import sys
print("# congestion --dry-run: %s plan, rate 2.5 Gbit/s" % ("custom" if "--plan" in sys.argv else "default"))
print("# plan: 28 runs, estimated 548 s (~9.1 min)")
print("# args: " + " ".join(sys.argv[1:]))
"""


def run_check(*args, env=None):
    """python -m bench gpu ARGS as the device runs it (through scripts/check-gpu.sh): (exit, stdout, stderr)."""
    p = subprocess.run([str(ROOT / "scripts/check-gpu.sh"), *args], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, **(env or {})))
    return p.returncode, p.stdout, p.stderr


def make_results(out, variant="good"):
    """OUT as the check leaves it after both invocations (VARIANT: good | hang | timeout | exit | skipped |
    budget | killed | grid | part1)."""
    out, sizes, steps, inv = Path(out), [1 << 20, 16 << 20, 128 << 20], [{"invocation": 1, "plan": PART1}], [1]
    if variant != "part1":
        steps.append({"invocation": 2, "plan": PART2, "budget_s": 560})

    def w(p, obj):
        (out / p).parent.mkdir(parents=True, exist_ok=True)
        (out / p).write_text(obj if isinstance(obj, str) else json.dumps(obj))

    def bench(p, bw):
        w(p + "/summary.json", {"status": "ok", "all_exact": True, "bench": [{"bytes": b, "busbw_GBps": bw, "max_err": 0}
                                                                           for b in sizes]})

    def rec(step, part, rc=0, **kw):
        steps.append({"invocation": inv[0], "step": step, "part": part, "rc": rc, "seconds": 10, "limit": 60, **kw})

    def hookacc(step, seed, accs):
        for t, acc in zip(("socket", "rht", "hook"), accs):
            w(f"hookacc/{t}_s{seed}/summary.json", {"status": "ok", "val_acc": acc, "params_identical": True})
        w(f"hookacc/hook_s{seed}/rank0.log", seen)
        rec(step, f"s{seed}")

    w("preflight.json", {"ok": True, "why": [], "gpu": "NVIDIA H200", "torch": "2.11.0", "nccl": "2.28.9", "cores": 16,
                         "commit": "abc", "plugin_sha256": "f00"})
    w("preflight_1.json", {"ok": True, "invocation": 1, "commit": "abc", "plugin_sha256": "f00"})
    rec("preflight", "")
    h = "ab" * 32
    for m, p50 in (("lossless", 5.1), ("socket", 5.0)):
        w(f"ddp_{m}/summary.json", {"status": "ok", "iter_p50_ms": p50, "params_identical": True})
        w(f"ddp_{m}/rank0.jsonl", json.dumps({"event": "final", "param_sha256": [h, h]}) + "\n")
        rec("ddp_lossless", m)
    bench("ar2/lossless", 1.9), bench("ar2/socket", 1.8), rec("allreduce_2r", "")
    steps.append({"invocation": 1, "step": "congestion_c60", "part": "", "not_run": "iproute2 missing: no ip"})
    if variant == "skipped":  # what a build without nvcc prints on the GPU machine
        w("kernels_tests.log", "".join(f"[ RUN      ] RotateCuda.{t}\ntests/rotate_cuda_test.cc:32: Skipped\nbuilt without "
                                       f"nvcc: \n\n[  SKIPPED ] RotateCuda.{t} (0 ms)\n" for t in "AB"))
    else:
        w("kernels_tests.log", "".join(f"[ RUN      ] RotateCuda.{t}\n[       OK ] RotateCuda.{t} (5 ms)\n" for t in "ABC"))
    w("kernels_bench.log", "".join(json.dumps({"bench": "cuda", "dtype": d, "op": o, "ratio": r, "copy_gbps": 2900.0}) + "\n"
                                   for d, o, r in (("fp32", "forward", 0.7), ("fp32", "inverse", 0.6), ("bf16", "forward", 0.4))))
    rec("kernels", "tests"), rec("kernels", "bench")
    seen = "NCCL INFO NET/Trim: comm 0x1 is the nccl_trim comm hook's (traffic class 116): ...\n"
    for x, p50 in (("plain", 40.0), ("hook", 41.0)):
        w(f"hook_{x}/summary.json", {"status": "ok", "iter_p50_ms": p50})
        rec("hook_overhead", x, {"timeout": 124 if x == "hook" else 0, "exit": 1 if x == "plain" else 0}.get(variant, 0))
    w("hook_hook/rank0.log", seen)
    hookacc("hook_accuracy", 1, (0.60, 0.585, 0.59))
    w("ddp_kill/rank1.jsonl", json.dumps({"event": "die", "step": 15, "time": 1000.0}) + "\n")
    w("ddp_kill/rank1.exit", {"rank": 1, "status": 137, "time": 1000.1})
    if variant != "hang":
        w("ddp_kill/rank0.exit", {"rank": 0, "status": 134, "time": 1002.5})
    w("ddp_kill/rank0.log", "NCCL WARN NET/Trim: peer x closed the control connection without saying goodbye\n")
    rec("rank_killed", "", 143, killed="check-gpu was stopped") if variant == "killed" else rec("rank_killed", "", 1)
    if variant != "part1":
        inv[0] = 2
        w("preflight_2.json", {"ok": True, "invocation": 2, "commit": "abc", "plugin_sha256": "f00"})
        rec("preflight", "")
        bench("ar4/lossless", 1.5), bench("ar4/socket", 1.4), rec("allreduce_4r", "")
        for c, bw in (("1x1", 1.7), ("2x1", 2.0)):
            bench(f"sweep2/{c}/socket", bw), rec("socket_sweep_2r", c)
        bench("sweep4/2x1/socket", 1.3), rec("socket_sweep_4r", "2x1")
        hookacc("hook_accuracy_more", 2, (0.61, 0.58, 0.60))
        if variant == "budget":  # the budget ended before seed 3: not run, never a pass
            steps.append({"invocation": 2, "step": "hook_accuracy_more", "part": "s3", "not_run": "time budget: 40 s left"})
        else:
            hookacc("hook_accuracy_more", 3, (0.59, 0.575, 0.58))
        w("cpu_uncongested/summary.json", {"rounds": 3, "baseline": "gloo",  # trim 1.08x Gloo's step, CPU 1.07x
                                           "gloo": {"ok_rounds": 3, "step_p50_ms_median": 50.0},
                                           "trim": {"ok_rounds": 3, "step_p50_ms_median": 54.0, "step_paired_ratio": 1.08,
                                                    "cpu_paired_ratio": 1.07}})
        rec("cpu_uncongested", "")
        for s in ("ddp_random_trim", "kernels_ncu", "codec_threads_2r", "harness_scaling", "congestion_grid"):
            if variant == "grid" and s == "congestion_grid":  # the part, then the runs it left
                rec(s, "", 124, dir="congestion", log="congestion_grid.log")
                steps.append({"invocation": 2, "step": s, "part": "", "not_run": "3 run(s) left for lack of time"})
            elif variant != "budget" or s != "congestion_grid":
                steps.append({"invocation": 2, "step": s, "part": "", "not_run": "time budget: 12 s left"})
    by = {}
    for r in steps:  # a step is complete when every part of it ran
        if "step" in r:
            by.setdefault(r["step"], {})[r["part"]] = "rc" in r
    steps += [{"step": k, "part": "", "complete": 1} for k, v in by.items() if all(v.values()) and k != "preflight"]
    w("steps.jsonl", "".join(json.dumps(s) + "\n" for s in steps))
    return out


def verdict(out):
    """The report on OUT: (exit, the JSON line, the text)."""
    rc, text = gpu_report.Report(out).render(1)
    return rc, json.loads(text.splitlines()[-1]), text


class Case(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tmp = Path(tmp.name)


class DryRunTest(Case):
    def setUp(self):
        super().setUp()
        fake = self.tmp / "fake_congestion.py"
        fake.write_text(FAKE_CONG)
        tools = dict(gpu.TOOLS, congestion=[sys.executable, str(fake)])
        patch = unittest.mock.patch.dict(gpu.TOOLS, tools)
        patch.start()
        self.addCleanup(patch.stop)

    def dry(self, *args):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            rc = gpu.main(["--dry-run", "--build", str(self.tmp / "nobuild"), "--out", str(self.tmp / "out"), *args])
        self.assertEqual(rc, 0)
        self.assertFalse((self.tmp / "out").exists(), "--dry-run made OUT")
        text = out.getvalue()
        steps = [(m[1], int(m[2]), int(m[3])) for m in re.finditer(r"(?m)^= (\w+): limit (\d+)s, estimate (\d+)s$", text)]
        return text, steps

    def test_first_invocation(self):
        text, steps = self.dry()
        self.assertEqual([s for s, _, _ in steps], PART1)
        for name, limit, est in steps:
            self.assertTrue(0 < est <= limit, name)
        total = int(re.search(r"(?m)^# total: limits (\d+) s .*of --budget-s 480; estimated \d+ s$", text)[1])
        self.assertEqual(total, gpu.PREFLIGHT_LIMIT_S + sum(l for _, l, _ in steps) + gpu.RESERVE_S)
        self.assertLessEqual(total, 480)
        self.assertNotIn("beyond", text)
        for words in ("--die-after-iters 15", "NCCL_ALGO=Ring NCCL_PROTO=Simple", "--sizes 1M,16M,128M",
                      "--gtest_filter=RotateCuda", "--plan widemlp:c60 --transports socket,trim --rate-gbps 2.5 ",
                      "# congestion --dry-run: custom plan, rate 2.5 Gbit/s"):
            self.assertIn(words, text)
        self.assertNotIn("NCCL_NET_GDR", text)

    def test_continue_the_rest_and_what_the_budget_leaves(self):
        text, steps = self.dry("--continue", "--plan", "widemlp:c60,digits:c60")
        self.assertEqual([s for s, _, _ in steps], PART1 + PART2)
        self.assertIn("# check-gpu --dry-run: invocation 1 (continue)", text)
        self.assertRegex(text, r"(?m)^\[allreduce_2r\] limit 45s, estimate 25s, log allreduce_2r.log$")
        self.assertRegex(text, r"(?m)^\[socket_sweep_2r 4x1\] limit 30s, estimate 13s: beyond --budget-s 560 ")
        self.assertRegex(text, r"(?m)^\[congestion_grid\] not run: time budget")
        self.assertLessEqual(int(re.search(r"(?m)^# total: limits (\d+) s", text)[1]), 560)

    def test_grid_alone_and_plan_at_the_presets_rate(self):
        text, steps = self.dry("--continue", "--only", "congestion_grid")
        self.assertEqual(steps, [("congestion_grid", 525, 548)])  # 560 - preflight 25 - reports 10
        self.assertIn("# congestion --dry-run: default plan", text)
        self.assertNotIn("--rate-gbps", text)  # the preset calibrates its own
        self.assertIn("--budget-s 485", text)  # 40 s for the last run's tear-down
        text, _ = self.dry("--continue", "--only", "congestion_grid", "--plan", "widemlp:c60,digits:c60")
        self.assertIn("--plan widemlp:c60,digits:c60 --rate-gbps 2.5", text)

    def test_no_gpu_runs_the_congestion_steps_on_cpu(self):
        text, steps = self.dry("--no-gpu", "--only", "congestion_c60,congestion_grid", "--", "--max-steps", "25")
        self.assertEqual([s for s, _, _ in steps], ["congestion_c60", "congestion_grid"])
        self.assertIn("--cpu --plan widemlp:c60 --transports gloo,trim --rate-gbps 0.5 --timeout-s 40", text)
        self.assertIn("--max-steps 25", text)

    def test_bad_arguments_exit_2_naming_them(self):
        for args, words in ((["--only", "bogus"], "bogus"), (["--budget-s", "0"], "--budget-s"),
                            (["--budget-s", "soon"], "soon"), (["--frobnicate"], "--frobnicate")):
            err = io.StringIO()
            with self.subTest(args), contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as e:
                gpu.main(args)
            self.assertEqual(e.exception.code, 2)
            self.assertIn(words, err.getvalue())


@unittest.skipIf(HAS_GPU, "this machine has a GPU: run scripts/check-gpu.sh itself")
class NoGpuTest(Case):
    def setUp(self):
        super().setUp()
        self.build = self.tmp / "fakebuild"  # as pack-gpu.sh leaves it, but the plugin changed after packing
        (self.build / "lib").mkdir(parents=True)
        (self.build / "lib/libnccl-net-trim.so").write_text("not a plugin\n")
        (self.build / "BUILD_INFO").write_text("commit feedc0ffee12\nplugin_sha256 0123456789abcdef\n")
        # PYTHON whose torch check fails at once: these tests are about the flow (the real check
        # imports torch, seconds; the --no-gpu smoke run of the lead's checks covers it)
        python = self.tmp / "python3"
        python.write_text('#!/bin/sh\ncase "$*" in *--probe*) exit 1 ;; esac\nexec python3 "$@"\n')
        python.chmod(0o755)
        self.env = {"PYTHON": str(python)}

    def test_exit_2_in_seconds_with_the_reasons_and_the_bundle(self):
        t0 = time.monotonic()
        rc, text, err = run_check("--build", str(self.build), "--out", str(self.tmp / "cg"), "--bundle", str(self.tmp / "b"),
                                  env=self.env)
        self.assertEqual(rc, 2, text + err)
        self.assertLess(time.monotonic() - t0, 60)
        self.assertIn("cannot run here", err)
        self.assertIn("- no GPU", err)
        d = json.loads(text.strip().splitlines()[-1])
        self.assertEqual(d, json.loads((self.tmp / "b/check-gpu.json").read_text()))
        self.assertEqual((d["exit"], d["result"]), (2, "fail"))
        self.assertEqual(d["versions"]["commit"], "feedc0ffee12")  # BUILD_INFO's, not this checkout's
        why = d["steps"]["preflight"]["why"]
        for words in ("no GPU", "repack", "trim-switch", "torch check failed"):
            self.assertIn(words, why)
        self.assertEqual({(d["steps"][s]["result"], d["steps"][s]["why"]) for s in PART1}, {("not run", "preflight failed")})
        self.assertTrue(all(d["steps"][s]["result"] == "not planned" for s in PART2))
        self.assertEqual(len(d["steps"]), 18)
        self.assertTrue(all(g["state"] == "unknown" for g in d["goals"]))
        self.assertTrue((self.tmp / "b/check-gpu-logs.tgz").stat().st_size > 0)

    def test_continue_appends_to_an_earlier_bundle(self):
        make_results(self.tmp / "res", "part1")
        (self.tmp / "b1").mkdir()
        with tarfile.open(self.tmp / "b1/check-gpu-logs.tgz", "w:gz") as t:
            t.add(self.tmp / "res", "res")
        common = ["--continue", "--from", str(self.tmp / "b1"), "--build", str(self.build), "--out", str(self.tmp / "cg2")]
        rc, text, _ = run_check(*common, "--dry-run")  # reads what the bundle says is done, makes nothing
        self.assertEqual(rc, 0, text)
        self.assertIn("# check-gpu --dry-run: invocation 2 (continue)", text)
        self.assertIn("# plan: " + " ".join(["congestion_c60"] + PART2) + "\n", text)
        self.assertFalse((self.tmp / "cg2").exists())
        for n in (2, 3):  # from the first invocation's bundle, then in place
            rc, text, _ = run_check(*common, "--bundle", str(self.tmp / "b2"), env=self.env)
            self.assertEqual(rc, 2, text)
            d = json.loads(text.strip().splitlines()[-1])
            self.assertEqual([i["invocation"] for i in d["invocations"]], list(range(1, n + 1)))
            self.assertEqual((d["invocations"][1]["plan"], d["invocations"][1]["continue"]), (["congestion_c60"] + PART2, 1))
            s = d["steps"]
            self.assertTrue(s["ddp_lossless"]["result"] == "pass" and s["ddp_lossless"]["hash_equal"])  # kept
            self.assertEqual((s["allreduce_4r"]["result"], s["allreduce_4r"]["why"]), ("not run", "preflight failed"))
            self.assertEqual((d["exit"], s["preflight"]["result"]), (2, "fail"))
        with tarfile.open(self.tmp / "b2/check-gpu-logs.tgz") as t:
            self.assertIn("cg2/ddp_lossless/summary.json", t.getnames())
        self.assertEqual((self.tmp / "cg2/steps.jsonl").read_text().count('"plan"'), 3)


class ReportTest(Case):
    def results(self, variant):
        return make_results(self.tmp / variant, variant)

    def test_first_invocation_with_a_step_it_could_not_run(self):
        rc, d, text = verdict(self.results("part1"))
        s = d["steps"]
        self.assertEqual((rc, d["result"], d["not_run"]), (4, "incomplete", ["congestion_c60"]), text)
        self.assertTrue(s["ddp_lossless"]["hash_equal"])
        self.assertEqual(s["allreduce_2r"]["plugin_over_socket_default"], [1.056] * 3)
        self.assertEqual((s["rank_killed"]["cause"], s["rank_killed"]["seconds_to_error"]), ("plugin", 2.5))
        self.assertTrue(s["congestion_c60"]["why"].startswith("iproute2 missing"))
        self.assertEqual((s["kernels"]["tests"]["passed"], s["kernels"]["ratios"]["fp32 forward"]), (3, 0.7))
        self.assertEqual(s["hook_overhead"]["p50_hook_over_plain"], 1.025)
        self.assertEqual(s["allreduce_4r"]["result"], "not planned")
        self.assertEqual(d["next"][0], "congestion_c60")
        self.assertIn("allreduce_4r", d["next"])
        self.assertEqual([i["invocation"] for i in d["invocations"]], [1])

    def test_both_invocations_goals_missed_and_steps_left(self):
        rc, d, text = verdict(self.results("good"))
        s, goals = d["steps"], d["goals"]
        self.assertEqual(rc, 4, text)
        self.assertEqual((s["allreduce_2r"]["socket_best"], s["allreduce_2r"]["plugin_over_socket_best"][0]), ("2x1", 0.95))
        self.assertEqual(s["allreduce_4r"]["socket_best"], "default")
        self.assertEqual(s["hook_accuracy_more"]["result"], "pass")
        self.assertEqual([g["state"] for g in goals],
                         ["met", "missed", "met", "met", "met", "unknown", "met", "met", "met", "unknown", "missed"])
        self.assertEqual((s["cpu_uncongested"]["result"], s["cpu_uncongested"]["step_ratio"],
                          s["cpu_uncongested"]["cpu_ratio"]), ("pass", 1.08, 1.07))
        self.assertTrue(goals[10]["detail"].startswith("1.08x over 3 rounds"))
        self.assertIn("seeds 1,2,3", goals[8]["detail"])
        self.assertEqual(s["harness_scaling"]["result"], "not run")
        self.assertEqual((len(d["invocations"]), d["next"][0]), (2, "congestion_c60"))
        self.assertRegex(text, r"(?m)^allreduce busbw GB/s, 2 ranks .*Socket best = 2x1")

    def test_failures(self):
        cases = {  # variant: (the step, words of its why)
            "hang": ("rank_killed", "hang"),  # a survivor that never ended
            "timeout": ("hook_overhead", "timed out: hook after its 60 s limit"),  # whatever it left
            "exit": ("hook_overhead", "exit 1 (plain)"),  # whatever its summary says
            "killed": ("rank_killed", "stopped during rank_killed"),  # the check stopped during it
            "skipped": ("kernels", "every test skipped (built without nvcc:"),  # every RotateCuda test skipped
        }
        for variant, (step, words) in cases.items():
            with self.subTest(variant):
                rc, d, text = verdict(self.results(variant))
                self.assertEqual((rc, d["result"], d["failed"]), (1, "fail", [step]), text)
                self.assertIn(words, d["steps"][step]["why"])
                self.assertRegex(text, rf"(?m)^{step} +fail ")

    def test_parts_the_budget_left_are_not_run(self):
        rc, d, text = verdict(self.results("budget"))
        s = d["steps"]
        self.assertEqual(rc, 4, text)
        self.assertEqual(s["hook_accuracy_more"]["result"], "not run")
        self.assertIn("1 part(s) not run: time budget", s["hook_accuracy_more"]["why"])
        self.assertEqual(s["congestion_grid"]["result"], "not run")
        self.assertIn("stopped before it", s["congestion_grid"]["why"])

    def test_grid_that_timed_out_with_runs_left_is_a_failure(self):
        rc, d, text = verdict(self.results("grid"))
        g = d["steps"]["congestion_grid"]
        self.assertEqual((rc, g["result"], d["failed"]), (1, "fail", ["congestion_grid"]), text)
        self.assertTrue(g["why"].startswith("timed out: congestion_grid after its 60 s limit"))
        self.assertIn("3 run(s) left for lack of time", g["why"])
        self.assertGreater(d["gpu_steps_run"], 0)

    def test_best_socket_by_geometric_mean(self):
        _, gm = gpu_report.best_socket(gpu_report.configs(self.results("good") / "sweep2", "socket"))
        self.assertEqual(sorted(gm, key=gm.get, reverse=True), ["2x1", "1x1"])


LEFT = "2 run(s) left for lack of time: --continue resumes it"


class GridTest(Case):
    """A grid's run, then the runs the budget left: a failed run stays a failure (exit 1, not 4);
    --no-gpu runs never end with "result": "pass"."""

    def out(self, rc, statuses, left=False, complete=False, no_gpu=0):
        out = self.tmp / f"out{len(list(self.tmp.iterdir()))}"
        steps = [{"invocation": 1, "plan": ["congestion_grid"], "budget_s": 480, "continue": 0, "no_gpu": no_gpu},
                 {"invocation": 1, "step": "preflight", "part": "", "rc": 0, "seconds": 5, "limit": 25},
                 {"invocation": 1, "step": "congestion_grid", "part": "", "rc": rc, "seconds": 300, "limit": 400,
                  "dir": "congestion", "log": "congestion_grid.log"}]
        steps += [{"invocation": 1, "step": "congestion_grid", "part": "", "not_run": LEFT}] * left
        steps += [{"step": "congestion_grid", "part": "", "complete": 1}] * complete
        for t, status in statuses.items():  # STATUS, or (STATUS, more summary fields)
            status, more = status if isinstance(status, tuple) else (status, {})
            f = out / f"congestion/digits_c60_{t}/summary.json"
            f.parent.mkdir(parents=True)
            f.write_text(json.dumps({"label": f"digits_c60_{t}", "task": "digits", "transport": t, "cross_pct": 60.0,
                                     "loss_pct": 0.0, "status": status, "iter_p50_ms": 20.0, "iter_p99_ms": 40.0,
                                     "val_acc": 0.95, "time_to_target_s": 10.0, "steps": 100, **more}))
        pre = {"ok": True, "why": [], "invocation": 1, "gpu": None if no_gpu else "NVIDIA H200", "commit": "abc"}
        (out / "preflight.json").write_text(json.dumps(pre))
        (out / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
        return out, steps

    def test_failed_grid_with_runs_left_is_a_failure(self):
        for what, (rc, statuses, words) in {
            "timed out": (124, {"gloo": "ok", "trim": "ok"}, "timed out"),
            "killed at its limit": (137, {"gloo": "ok"}, "timed out"),
            "a run failed": (0, {"gloo": "ok", "trim": "failed (exit 1)"}, "trim (failed (exit 1))"),
            "the bench failed": (1, {"gloo": "ok", "trim": "ok"}, "the congestion bench failed"),
            "the check stopped": (143, {"gloo": "ok"}, "stopped during"),
        }.items():
            with self.subTest(what):
                exit_code, d, text = verdict(self.out(rc, statuses, left=True)[0])
                g = d["steps"]["congestion_grid"]
                self.assertEqual((exit_code, d["result"], d["exit"], g["result"]), (1, "fail", 1, "fail"), text)
                self.assertEqual((d["failed"], d["not_run"]), (["congestion_grid"], []))
                self.assertIn(words, g["why"])
                self.assertIn(LEFT, g["why"])  # both facts stay
                self.assertEqual(g["not_run_parts"], {"congestion_grid": LEFT})

    def test_a_baseline_stopped_by_its_limit_is_a_result(self):
        went = {"progress": {"steps": 5, "train_s": 18.0}, "time_to_target_s": None}
        exit_code, d, text = verdict(self.out(0, {"gloo": ("failed (124)", went), "trim": "ok"}, complete=True)[0])
        self.assertEqual(d["steps"]["congestion_grid"]["result"], "pass", text)
        self.assertIn("stopped by its limit", text)
        goal = next(g for g in d["goals"] if g["goal"].startswith("congestion at 60 %"))
        self.assertIn("congestion_grid, against gloo: ", goal["detail"])  # the baseline the runs had
        for statuses in ({"gloo": "ok", "trim": ("failed (124)", went)},  # ours stopped by its limit
                         {"gloo": ("failed (124)", {"progress": None}), "trim": "ok"}):  # a baseline that never trained
            exit_code, d, text = verdict(self.out(0, statuses, complete=True)[0])
            g = d["steps"]["congestion_grid"]
            self.assertEqual((exit_code, g["result"]), (1, "fail"), text)
            self.assertIn("(failed (124))", g["why"])

    def test_failed_grid_without_runs_left(self):
        exit_code, d, _ = verdict(self.out(124, {"gloo": "ok"}, complete=True)[0])
        self.assertEqual((exit_code, d["steps"]["congestion_grid"]["result"]), (1, "fail"))
        self.assertNotIn("not_run_parts", d["steps"]["congestion_grid"])

    def test_grid_that_passed_with_runs_left_is_not_run(self):
        exit_code, d, _ = verdict(self.out(0, {"gloo": "ok", "trim": "ok"}, left=True)[0])
        g = d["steps"]["congestion_grid"]
        self.assertEqual((exit_code, d["result"], g["result"]), (4, "incomplete", "not run"))
        self.assertIn(LEFT, g["why"])
        self.assertEqual(set(g["runs"]), {"digits_c60_gloo", "digits_c60_trim"})  # the runs that ran stay

    def test_resumed_grid_replaces_the_earlier_run(self):
        out, steps = self.out(124, {"gloo": "ok", "trim": "ok"}, left=True)
        steps += [{"invocation": 2, "plan": ["congestion_grid"], "budget_s": 560, "continue": 1, "no_gpu": 0},
                  {"invocation": 2, "step": "preflight", "part": "", "rc": 0, "seconds": 5, "limit": 25},
                  {"invocation": 2, "step": "congestion_grid", "part": "", "rc": 0, "seconds": 100, "limit": 400},
                  {"step": "congestion_grid", "part": "", "complete": 1}]
        (out / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
        exit_code, d, _ = verdict(out)
        self.assertIn(exit_code, (0, 3))
        self.assertEqual(d["steps"]["congestion_grid"]["result"], "pass")

    def test_continue_resumes_a_grid_with_runs_left(self):
        for rc in (0, 124):  # --continue runs a part again unless its latest record is a finished run
            ran, _, last = gpu_report.state(self.out(rc, {"gloo": "ok"}, left=True)[1])
            self.assertEqual((ran, last), ({("preflight", "")}, 1))
        ran, complete, _ = gpu_report.state(self.out(124, {"gloo": "ok"}, complete=True)[1])
        self.assertIn(("congestion_grid", ""), ran)
        self.assertEqual(complete, {"congestion_grid"})

    def test_no_gpu_run_is_never_a_pass(self):
        exit_code, d, text = verdict(self.out(0, {"gloo": "ok", "trim": "ok"}, complete=True, no_gpu=1)[0])
        self.assertEqual(d["steps"]["congestion_grid"]["result"], "pass", text)  # the flow itself worked
        self.assertIn(exit_code, (0, 3))
        self.assertEqual((d["result"], d["gpu_steps_run"], d["no_gpu_steps"]),
                         ("pass (no GPU step ran)", 0, ["congestion_grid"]))
        self.assertRegex(text, r"(?m)^check-gpu: pass .*no GPU step ran")
        exit_code, d, _ = verdict(self.out(1, {"gloo": "ok"}, complete=True, no_gpu=1)[0])
        self.assertEqual((exit_code, d["result"]), (1, "fail"))
        exit_code, d, _ = verdict(self.out(0, {"gloo": "ok", "trim": "ok"}, complete=True)[0])  # the same with a GPU
        self.assertEqual((d["result"], d["gpu_steps_run"], d["no_gpu_steps"]), ("pass", 1, []))


if __name__ == "__main__":
    unittest.main()
