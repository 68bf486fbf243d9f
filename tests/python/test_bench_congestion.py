"""bench.congestion, bench.congestion_report and bench.demo without a GPU or root: the presets'
dry runs (through netns_bottleneck.sh --print-only), the goal's verdicts and the demo's summary
on made-up runs. CHECK_NETNS_SMOKE=1 adds two real CPU runs through the netns bottleneck (root)."""

import io
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stderr
from pathlib import Path
from unittest import mock

from _bench import call
from bench import REPO, congestion, congestion_report, demo


def dry_plan(text):
    """The dry run's runs: label, estimate, limit, the switch's arguments (without its per-process
    namespace names) and each rank's command; and the plan's total."""
    runs, total = [], None
    for line in text.splitlines():
        if m := re.match(r"# run (\S+) -> \S+ \(estimate (\d+) s, limit (\d+) s\)", line):
            runs.append({"label": m[1], "estimate": int(m[2]), "limit": int(m[3]), "ranks": []})
        elif m := re.match(r"#   \+ \S+/trim-switch (.*)", line):
            runs[-1]["switch"] = re.sub(r"--tun-netns \S+ ", "", m[1]).split()
        elif m := re.match(r"#   \+ \[rank (\d+)\] .*? (env .*)", line):
            runs[-1]["ranks"].append(m[2])
        elif m := re.match(r"# plan: (\d+) runs .* estimated (\d+) s", line):
            total = int(m[2])
    return runs, total


class DryRunTest(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp())

    def dry(self, *args):
        rc, out, err = call(congestion.main, ["--dry-run", "--build", str(self.tmp / "nobuild"), "--out", str(self.tmp / "cb"), *args])
        self.assertEqual(rc, 0, err)
        self.assertFalse((self.tmp / "cb").exists(), "--dry-run made its output folder")
        return out

    def parse(self, *args):
        with redirect_stderr(io.StringIO()):
            return congestion.parse(["--dry-run", "--build", str(self.tmp / "nobuild"), *args])

    def refused(self, args, *words):
        rc, _, err = call(congestion.main, ["--dry-run", *args])
        self.assertEqual(rc, 2, args)
        for w in words:
            self.assertIn(w, err)

    def test_the_tasks_sizes(self):
        sizes = self.parse("--plan", "widemlp:c0,digits:c0").sizes
        w = sizes["widemlp"]
        self.assertGreaterEqual(w["grad_bytes"], 10e6)
        self.assertEqual((w["grad_bytes"], w["steps"], w["steps_per_epoch"]), (4 * w["params"], 60, 5))
        self.assertEqual((sizes["digits"]["params"], sizes["digits"]["steps_per_epoch"], sizes["digits"]["steps"]), (283786, 22, 160))

    def test_default_preset_one_switch_setting_per_point(self):
        out = self.dry()
        runs, total = dry_plan(out)
        self.assertEqual(len(runs), 28)
        self.assertEqual(total, 548)  # the estimate docs/GPU-MACHINE.md quotes
        self.assertEqual([r["label"] for r in runs if "_socket_" in r["label"]],
                         ["widemlp_socket_c0_l0", "widemlp_socket_c60_l0", "widemlp_socket_c90_l0", "widemlp_socket_c0_l1",
                          "digits_socket_c60_l0", "widemlp_socket_c30_l0", "widemlp_socket_c0_l0.1"])
        points = {}
        for r in runs:
            task, tr, c, l = r["label"].split("_")
            sw, rank0 = r["switch"], r["ranks"][0]
            self.assertEqual(sw[sw.index("--mode") + 1], "drop" if tr in ("socket", "drop") else "trim", r["label"])
            points.setdefault((task, c, l), {})[tr] = sw[:sw.index("--mode")] + sw[sw.index("--mode") + 2:]
            self.assertEqual(len(r["ranks"]), 2)
            for k in (0, 1):
                self.assertIn(f"NCCL_HOSTID=ddp-rank{k} ", r["ranks"][k])
            self.assertEqual("NCCL_NET=Socket NCCL_NET_PLUGIN=none" in rank0, tr == "socket", r["label"])
            self.assertEqual("libnccl-net-trim.so NCCL_NET=Trim" in rank0, tr != "socket", r["label"])
            self.assertEqual("NCCL_TRIM_HEAD_BITS=16" in rank0, tr == "trim16", r["label"])
            self.assertIn(f"--time-limit-s {r['limit'] - 15}", rank0)
            self.assertIn("--deterministic", rank0)
            self.assertIn("--task widemlp --seed 0 --deterministic --target-acc 0.95 --measure-compute 10 " if task == "widemlp"
                          else "--task digits --seed 0 --deterministic --target-acc 0.95 --max-steps 160 --eval-every 10 ", rank0)
        for pt, trs in points.items():
            self.assertEqual(sorted(trs), ["drop", "socket", "trim", "trim16"], pt)
            sw = next(iter(trs.values()))
            self.assertTrue(all(v == sw for v in trs.values()), pt)
            self.assertEqual(("--cross" in sw, "--loss-p" in sw), (pt[1] != "c0", pt[2] != "l0"), pt)
            self.assertEqual((sw[sw.index("--rate-gbps") + 1], sw[sw.index("--seed") + 1]), ("2.5", "7"))
        self.assertIn("# calibration: the first run (widemlp socket c0)", out)
        self.assertIn("# task widemlp: grad_bytes 11581480 (11.6 MB), 60 steps", out)

    def test_quick_preset_is_smaller(self):
        a = self.parse("--quick")
        labels = [r["label"] for r in a.runs]
        self.assertEqual(len(labels), 16)
        self.assertIn("widemlp_trim_c60_l0", labels)
        self.assertIn("digits_socket_c60_l0", labels)
        self.assertLessEqual(congestion.plan_total(a), 302)
        self.assertTrue(a.calibrate)

    def test_as_check_gpu_calls_it_for_the_goals_point(self):
        runs, _ = dry_plan(self.dry("--plan", "widemlp:c60", "--transports", "socket,trim", "--rate-gbps", "2.5", "--timeout-s", "40"))
        self.assertEqual([r["label"] for r in runs], ["widemlp_socket_c60_l0", "widemlp_trim_c60_l0"])
        sw = " ".join(runs[1]["switch"])
        self.assertIn("--rate-gbps 2.5 --buffer-bytes 131072", sw)
        self.assertIn("--cross onoff:2.5:6:4:all", sw)
        self.assertEqual(runs[1]["limit"], 40)
        self.assertFalse(self.parse("--plan", "widemlp:c60").calibrate)

    def test_cpu_preset_against_gloo(self):
        a = self.parse("--cpu")
        self.assertEqual((len(a.runs), a.rate_gbps, a.calibrate), (28, 0.5, False))
        by = {r["label"]: r for r in a.runs}

        def rank0(label):
            bn, rank = congestion.commands(a, by[label], self.tmp, 100)
            return bn, " ".join(rank)
        bn, gloo = rank0("widemlp_gloo_c60_l0")
        self.assertEqual(bn[bn.index("--mode") + 1], "drop")
        self.assertRegex(gloo, r"GLOO_SOCKET_IFNAME=trimbn .*--device cpu --backend gloo")
        self.assertNotIn("NCCL_NET_PLUGIN", gloo)
        self.assertRegex(rank0("widemlp_hook_c0_l0")[1], r"-m nccl_trim._boot --trim-cpu .*--device cpu --backend gloo")
        self.assertRegex(rank0("widemlp_trim_c0_l0")[1], r"NCCL_TRIM_LIB_DIR=.*--device cpu --backend trim")
        runs, _ = dry_plan(self.dry("--cpu", "--plan", "widemlp:c60"))
        self.assertIn("--rate-gbps 0.5 --buffer-bytes 131072", " ".join(runs[0]["switch"]))
        self.assertIn("--cross onoff:0.5:6:4:all", " ".join(runs[0]["switch"]))

    def test_high_priority_cross_is_another_tenant(self):
        runs, _ = dry_plan(self.dry("--cpu", "--plan", "widemlp:p60", "--transports", "gloo-tuned,hook2"))
        self.assertEqual([r["label"] for r in runs], ["widemlp_gloo-tuned_p60_l0", "widemlp_hook2_p60_l0"])
        sw = " ".join(runs[1]["switch"])
        self.assertIn("--cross onoff:0.5:6:4:all:prio=high", sw)
        self.assertIn("NCCL_TRIM_HEAD_BITS=2", runs[1]["ranks"][0])
        self.assertIn("-m nccl_trim._boot --trim-cpu", runs[1]["ranks"][0])
        self.assertNotIn("prio", " ".join(dry_plan(self.dry("--cpu", "--plan", "widemlp:c60"))[0][0]["switch"]))
        with self.assertRaises(SystemExit):  # one plan compares by cross load: not both kinds
            self.parse("--cpu", "--plan", "widemlp:c60,widemlp:p60")

    def test_more_ranks_keep_the_global_batch_and_the_ring_bytes(self):
        two, four = self.parse("--cpu", "--plan", "widemlp:c60"), self.parse("--cpu", "--plan", "widemlp:c60", "--ranks", "4")
        self.assertNotIn("--batch-size", congestion.task_args(two, "widemlp"))
        args = congestion.task_args(four, "widemlp")
        self.assertEqual(args[args.index("--batch-size") + 1], "64")
        self.assertEqual(two.sizes["widemlp"]["steps"], four.sizes["widemlp"]["steps"])
        # each port carries 2(N-1)/N of the gradient: 1.5x at 4 ranks what it carries at 2
        r2, r4 = two.runs[0], four.runs[0]
        self.assertGreater(congestion.estimate_s(four, r4), 1.3 * congestion.estimate_s(two, r2) - 10)
        args = congestion.task_args(self.parse("--cpu", "--plan", "widemlp:c0", "--train-seed", "3"), "widemlp")
        self.assertEqual(args[args.index("--seed") + 1], "3")

    def test_tasks_cross_loss_make_the_plan(self):
        a = self.parse("--tasks", "digits", "--cross", "0,60", "--loss", "0,2", "--transports", "socket,trim")
        self.assertEqual(a.plan, ["digits:c0", "digits:c60", "digits:l2"])
        self.assertEqual(len(a.runs), 6)

    def test_the_dry_run_is_the_same_under_every_hash_seed(self):
        outs = {re.sub(r"tbn\d+r", "tbnPIDr", subprocess.run(  # (namespace names carry the bottleneck's PID)
            [sys.executable, "-m", "bench", "congestion", "--dry-run", "--build", str(self.tmp / "nb"),
             "--out", str(self.tmp / "cb")], cwd=REPO, capture_output=True, text=True,
            env=dict(os.environ, PYTHONHASHSEED=str(seed))).stdout) for seed in range(4)}
        self.assertEqual(len(outs), 1)
        tasks = [x.split(":")[0] for x in outs.pop().splitlines() if x.startswith("# task ")]
        self.assertEqual(tasks, ["# task widemlp", "# task digits"])  # the default preset's order

    def test_budget_says_when_the_plan_does_not_fit(self):
        out = self.dry("--plan", "widemlp:c0", "--budget-s", "20")
        self.assertIn("over --budget-s 20: the last points would be skipped", out)
        self.assertIn("fits --budget-s 9999", self.dry("--plan", "widemlp:c0", "--budget-s", "9999"))

    def test_calibration_lowers_the_rate_when_compute_dominates(self):
        a = self.parse("--out", str(self.tmp / "cal"))
        a.out.mkdir()
        run = {"label": "widemlp_socket_c0_l0", "task": "widemlp", "status": "ok", "grad_bytes": 11581480}
        with redirect_stderr(io.StringIO()):
            self.assertEqual(congestion.calibrate(a, {**run, "compute_ms": 20.0, "iter_p50_ms": 100.0}), 2.5)  # 80 % comm
            self.assertEqual(a.compute_ms["widemlp"], 20.0)
            # 30 % communication: 2.5 x 30 / (1.5 x 70) = 0.714 -> 0.71 Gbit/s
            self.assertEqual(congestion.calibrate(a, {**run, "compute_ms": 70.0, "iter_p50_ms": 100.0}), 0.71)
            cal = json.loads((a.out / "calibration.json").read_text())
            self.assertEqual((cal["new_rate_gbps"], round(cal["comm_share"], 2)), (0.71, 0.3))
            self.assertIn("rate 2.5 -> 0.71 Gbit/s", cal["decision"])
            self.assertEqual(congestion.calibrate(a, {**run, "compute_ms": 99.0, "iter_p50_ms": 100.0}), 0.625)  # a quarter at most
            self.assertEqual(congestion.calibrate(a, {**run, "status": "failed (124)"}), 2.5)
        self.assertIn("not measured", json.loads((a.out / "calibration.json").read_text())["decision"])
        self.assertEqual(sum(congestion.estimate_s(a, r) for r in a.runs), congestion.plan_total(a))

    def test_a_baseline_stopped_by_its_limit_is_a_result_ours_is_a_failure(self):
        went = {"status": "failed (124)", "progress": {"steps": 5, "train_s": 18.0}}
        self.assertTrue(congestion_report.stalled({"transport": "gloo", **went}))
        self.assertTrue(congestion_report.stalled({"transport": "socket", **went, "status": "failed (137)"}))
        self.assertFalse(congestion_report.stalled({"transport": "trim", **went}))  # ours must finish
        self.assertFalse(congestion_report.stalled({"transport": "gloo", **went, "progress": None}))  # never trained
        self.assertFalse(congestion_report.stalled({"transport": "gloo", **went, "status": "failed (1)"}))
        a = self.parse("--cpu", "--plan", "widemlp:c60", "--transports", "gloo,trim", "--out", str(self.tmp / "sw"))
        a.dry_run = False
        for gloo, trim, rc, said in (("failed (124)", "ok", 0, "1 baseline runs stopped by their limit, 0 failed"),
                                     ("ok", "failed (124)", 1, "0 baseline runs stopped by their limit, 1 failed")):
            runs = iter([{"transport": "gloo", **went, "status": gloo}, {"transport": "trim", **went, "status": trim}])

            def run_one(a, r, est, limit):
                s = next(runs)
                return s, 0 if s["status"] == "ok" else 124
            with self.subTest(gloo=gloo), mock.patch.object(congestion, "run_one", run_one), \
                    mock.patch.object(congestion.report, "main"), redirect_stderr(io.StringIO()) as err:
                self.assertEqual(congestion.sweep(a), rc)
            self.assertIn(said, err.getvalue())
        # --resume keeps a stalled baseline (it would stall again) and runs our stopped one again
        for t, status in (("gloo", "failed (124)"), ("trim", "failed (124)")):
            (a.out / f"widemlp_{t}_c60_l0").mkdir(parents=True, exist_ok=True)
            (a.out / f"widemlp_{t}_c60_l0" / "summary.json").write_text(json.dumps({"transport": t, **went}))
        a.resume, ran = True, []

        def run_again(a, r, est, limit):
            ran.append(r["transport"])
            return {"status": "ok"}, 0
        with mock.patch.object(congestion, "run_one", run_again), mock.patch.object(congestion.report, "main"), \
                redirect_stderr(io.StringIO()):
            self.assertEqual(congestion.sweep(a), 0)
        self.assertEqual(ran, ["trim"])

    def test_bad_options_exit_2_naming_the_value(self):
        self.refused(["--cpu", "--transports", "socket,trim"], "'socket'", "gloo")
        self.refused(["--transports", "gloo,trim"], "'gloo'", "--cpu")
        self.refused(["--transports", "socket,tcp"], "'tcp'", "trim16")
        self.refused(["--plan", "widemlp:x5"], "'widemlp:x5'")
        self.refused(["--plan", "resnet:c60"], "'resnet:c60'")
        self.refused(["--quick", "--plan", "widemlp:c60"], "--quick")
        self.refused(["--cpu", "--quick"], "--quick")
        self.refused(["--plan", "widemlp:c60", "--calibrate"], "--calibrate")
        self.refused(["--ranks", "two"], "two")


def make_runs(out, variant):
    """summary.json files as a sweep leaves them. VARIANT: met | missed | unknown | socket_slow |
    gloo (met, on CPU: Gloo the baseline, the hook instead of 16-bit heads) | gloo_tuned (the same
    with a gloo-tuned run at each widemlp point, 0.7x Gloo's time to target)."""
    def run(task, tr, c, l, ttt, steps_tt, p50, p99, acc, sha, steps=60, gb=11581480, status="ok", wall=None):
        if variant in ("gloo", "gloo_tuned"):
            tr = {"socket": "gloo", "trim16": "hook"}.get(tr, tr)
        d = out / f"{task}_{tr}_c{c}_l{l}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "summary.json").write_text(json.dumps({
            "label": d.name, "task": task, "transport": tr, "cross_pct": float(c), "loss_pct": float(l), "status": status,
            "time_to_target_s": ttt, "steps_to_target": steps_tt, "iter_p50_ms": p50, "iter_p99_ms": p99, "val_acc": acc,
            "val_loss": 0.1, "steps": steps, "target_acc": 0.95, "grad_bytes": gb, "val_count": 359,
            "param_sha256_full": sha, "params_identical": True, "run_wall_s": wall or (p50 * steps / 1e3 + 1 if p50 else None),
            "retx_plugin": None if tr in ("socket", "gloo") else 10, "retx_tcp": 5, "trim_rate": 0.2 if "trim" in tr else None,
            "versions": {"gpu": "made-up"}}))
    s_acc, t_acc = 348 / 359, 347 / 359  # one val image apart
    for c, f in ((0, 1), (60, 2.5)):
        run("widemlp", "socket", c, 0, 4.0 * f, 40, 60 * f, 90 * f, s_acc, "e" * 64)
        run("widemlp", "drop", c, 0, 4.2 * f, 40, 63 * f, 95 * f, s_acc, "e" * 64)
        run("widemlp", "trim16", c, 0, 3.0 * f, 40, 45 * f, 60 * f, t_acc, "b" * 64)
        if variant == "gloo_tuned":
            run("widemlp", "gloo-tuned", c, 0, 2.8 * f, 40, 45 * f, 70 * f, s_acc, "e" * 64)
    trim60 = {"met": (4.0, 40, 50.0, 80.0, t_acc), "missed": (6.0, 40, 70.0, 80.0, t_acc), "unknown": None,
              "socket_slow": (4.0, 40, 50.0, 80.0, s_acc), "gloo": (4.0, 40, 50.0, 80.0, t_acc),
              "gloo_tuned": (4.0, 40, 50.0, 80.0, t_acc)}[variant]
    run("widemlp", "trim", 0, 0, 4.0, 40, 55.0, 80.0, s_acc, "a" * 64)
    if trim60:
        run("widemlp", "trim", 60, 0, *trim60, "c" * 64)
    else:
        run("widemlp", "trim", 60, 0, None, None, None, None, None, None, status="failed (124)")
    if variant == "socket_slow":  # Socket never reached the target in its 60 steps (a 12 s run)
        run("widemlp", "socket", 60, 0, None, None, 200.0, 400.0, s_acc, "e" * 64, wall=12.0)
    # digits: Socket wins on steps (the trimmed run needed more of them), drop is fast
    run("digits", "socket", 60, 0, 2.0, 100, 18.0, 30.0, 0.96, "d" * 64, steps=160, gb=1135144)
    run("digits", "drop", 60, 0, 1.9, 100, 17.0, 29.0, 0.96, "d" * 64, steps=160, gb=1135144)
    run("digits", "trim", 60, 0, 3.0, 150, 17.0, 29.0, 0.955, "f" * 64, steps=160, gb=1135144)


class VerdictTest(unittest.TestCase):
    def report(self, variant):
        with tempfile.TemporaryDirectory() as tmp:
            make_runs(Path(tmp), variant)
            rc, out, err = call(congestion_report.main, [tmp, "--no-plots"])
        self.assertEqual(rc, 0, err)
        return out, json.loads(out.splitlines()[-1])

    def test_met_on_the_task_with_most_gradient(self):
        out, d = self.report("met")
        g = d["goal"]
        self.assertEqual((g["state"], g["task"], g["baseline"]), ("met", "widemlp", "socket"))
        self.assertEqual(g["parts"]["time_to_target"]["ratio"], 0.4)
        self.assertEqual(g["parts"]["p99"]["ratio"], 0.356)
        self.assertEqual(g["parts"]["accuracy"]["diff_points"], -0.279)
        self.assertEqual(g["parts"]["accuracy"]["resolution_points"], 0.279)
        self.assertIn("## Goal (widemlp, trim): MET", out)
        self.assertIn("| widemlp | trim | 60 | 0 | 4.00 | 40 | 50.0 | 80.0 |", out)

    def test_missed_with_where_socket_wins_and_why(self):
        out, d = self.report("missed")
        self.assertEqual((d["goal"]["state"], d["goal"]["parts"]["time_to_target"]["state"]), ("missed", "missed"))
        digits = next(c for c in d["comparisons"] if c["task"] == "digits" and c["transport"] == "trim")
        self.assertTrue(digits["baseline_wins"])
        self.assertIn("1.5x the steps", digits["why"])
        drop = next(c for c in d["comparisons"] if c["task"] == "widemlp" and c["transport"] == "drop" and c["cross_pct"] == 60)
        self.assertIs(drop["params_equal_baseline"], True)
        self.assertIn("socket wins against trimming at: digits cross 60 % vs trim", out)

    def test_unknown_when_the_trim_run_failed(self):
        _, d = self.report("unknown")
        self.assertEqual(d["goal"]["state"], "unknown")
        self.assertIn("trim run failed (124)", d["goal"]["detail"])

    def test_a_baseline_that_never_reached_the_target_bounds_the_ratio(self):
        _, d = self.report("socket_slow")
        self.assertEqual(d["goal"]["parts"]["time_to_target"]["ratio_below"], 0.333)
        self.assertEqual(d["goal"]["state"], "met")

    def test_cpu_runs_against_gloo_judge_every_trimming_transport(self):
        _, d = self.report("gloo")
        self.assertEqual((d["goal"]["baseline"], d["goal"]["state"]), ("gloo", "met"))
        self.assertEqual([g["transport"] for g in d["goals"]], ["trim", "hook"])
        self.assertEqual((d["goals"][1]["state"], d["goals"][1]["parts"]["time_to_target"]["ratio"]), ("missed", 0.75))
        pairs = {(c["task"], c["transport"], c.get("baseline")) for c in d["comparisons"] if c["cross_pct"] == 60}
        self.assertEqual(pairs, {("widemlp", t, "gloo") for t in ("drop", "trim", "hook")} |
                         {("widemlp", t, "drop") for t in ("trim", "hook")} |
                         {("digits", "drop", "gloo"), ("digits", "trim", "gloo"), ("digits", "trim", "drop")})

    def test_the_tuned_baseline_is_judged_first(self):
        out, d = self.report("gloo_tuned")
        g = d["goals"]
        self.assertEqual([(x["transport"], x["baseline"]) for x in g],
                         [("trim", "gloo-tuned"), ("hook", "gloo-tuned"), ("trim", "gloo"), ("hook", "gloo")])
        # trim at 60 %: 4.0 s against tuned Gloo's 7.0 (0.571x, over the 0.5 goal), Gloo's 10.0 (0.4x)
        self.assertEqual((g[0]["state"], g[0]["parts"]["time_to_target"]["ratio"]), ("missed", 0.571))
        self.assertEqual((g[2]["state"], g[2]["parts"]["time_to_target"]["ratio"]), ("met", 0.4))
        vs_drop = next(c for c in d["comparisons"] if (c["task"], c["cross_pct"], c["transport"], c.get("baseline")) ==
                       ("widemlp", 60.0, "trim", "drop"))
        self.assertEqual(vs_drop["ttt_ratio"], 0.381)  # 4.0 s against drop's 10.5
        wins = next(x for x in out.splitlines() if x.startswith("gloo-tuned wins against trimming at: "))
        self.assertIn("widemlp cross 60 % vs hook: time to target (1.071x)", wins)
        self.assertNotIn("widemlp cross 60 % vs trim", wins)

    def test_augment_a_run_stopped_by_its_limit(self):
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            (d / "summary.json").write_text(json.dumps({"label": "x", "status": "failed (124)", "wall_s": 100, "plugin": None}))
            (d / "run.json").write_text(json.dumps({"transport": "gloo", "limit_s": 100, "bottleneck": {"cross_pct": 60.0}}))
            (d / "bottleneck.out").write_text('{"event":"bottleneck_ready"}\n{"event":"tcp","rank":0,"tcp_retrans_segs":7}\n'
                                              '{"event":"tcp","rank":1,"tcp_retrans_segs":5}\n'
                                              '{"event":"final","trim_forwarded":0}\n')
            (d / "switch.jsonl").write_text('{"event":"final","trim_forwarded":200,"trim_trimmed":50}\n')
            lines = [{"event": "config", "grad_bytes": 8, "data": {"val": 359}},
                     {"event": "epoch", "steps": 5, "train_s": 10.0, "val_acc": 0.5, "iter_p99_ms": 900},
                     {"event": "epoch", "steps": 5, "train_s": 20.0, "val_acc": 0.8, "iter_p50_ms": 300, "iter_p99_ms": 1200}]
            (d / "rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
            s = congestion_report.augment(d)
            self.assertEqual(json.loads((d / "summary.json").read_text())["progress"], s["progress"])
        self.assertEqual((s["retx_tcp"], s["retransmissions"], s["trim_rate"], s["cross_pct"]), (12, 12, 0.25, 60.0))
        self.assertEqual(s["progress"], {"steps": 10, "train_s": 20.0, "val_acc": 0.8, "iter_p50_ms": 300,
                                         "iter_p99_ms_at_least": 1200})
        self.assertEqual(s["curve"], [(10.0, 0.5), (20.0, 0.8)])
        self.assertEqual(congestion_report.base_ttt(s)[:2], (20.0, False))


def summary(transport, **kw):
    s = {"transport": transport, "task": "widemlp", "status": "ok", "cross_pct": 60.0, "rate_gbps": 0.5, "buffer_bytes": 131072,
         "time_to_target_s": 30.0, "iter_p50_ms": 800.0, "iter_p99_ms": 1600.0, "val_acc": 0.96, "steps": 40,
         "params_identical": True, "run_wall_s": 40.0, "trim_rate": 0.1 if transport != "gloo" else None}
    return {**s, **kw}


class BoundTest(unittest.TestCase):
    def test_the_step_bound_is_compute_plus_bytes_through_the_free_rate(self):
        s = {"rate_gbps": 0.5, "cross_pct": 60.0, "grad_bytes": 11581480, "compute_ms": 30.0}
        # 11.58 MB at 40 % of 0.5 Gbit/s is 463.3 ms; a 4-rank ring pushes 1.5x that per rank
        self.assertEqual(congestion_report.step_bound_ms(s, 2), 493.3)
        self.assertEqual(congestion_report.step_bound_ms(s, 4), 724.9)
        self.assertEqual(congestion_report.step_bound_ms({**s, "cross_pct": 0.0}, 2), 215.3)
        self.assertIsNone(congestion_report.step_bound_ms({**s, "compute_ms": None}, 2))


class DemoSummaryTest(unittest.TestCase):
    def test_both_finished(self):
        runs = {"gloo": summary("gloo", time_to_target_s=40.0, iter_p99_ms=3200.0, val_acc=0.955),
                "gloo-tuned": summary("gloo-tuned", time_to_target_s=37.5, iter_p99_ms=2000.0), "hook": summary("hook")}
        text, s = demo.headline(runs, "hook")
        self.assertEqual((s["tta_ratio_vs_gloo"], s["p50_ratio_vs_gloo"], s["p99_ratio_vs_gloo"]), (0.75, 1.0, 0.5))
        self.assertEqual((s["tta_is_upper_bound"], s["p99_is_upper_bound"], s["acc_delta_points"]), (False, False, 0.5))
        self.assertEqual((s["tta_ratio_vs_gloo_tuned"], s["p99_ratio_vs_gloo_tuned"], s["acc_delta_points_gloo_tuned"]),
                         (0.8, 0.8, 0.0))
        self.assertIsNone(s["tta_ratio_vs_drop"])  # no drop run
        # the strongest baseline's keys come first in the JSON line
        keys = list(s)
        self.assertLess(keys.index("tta_ratio_vs_gloo_tuned"), keys.index("tta_ratio_vs_gloo"))
        self.assertTrue(s["replicas_identical"] and s["gloo_finished"] and s["gloo_tuned_finished"])
        self.assertEqual((s["trim_transport"], s["task"], s["rate_gbps"], s["trim"]["steps"]), ("hook", "widemlp", 0.5, 40))
        self.assertIn("  time to 0.95 val accuracy (s)                 37.5              40.0              30.0", text)
        self.assertTrue(text.splitlines()[0].endswith("   Gloo (1 ms RTO)        Gloo (TCP)       trim (hook)"))

    def test_with_our_drop(self):
        runs = {"gloo": summary("gloo"), "gloo-tuned": summary("gloo-tuned"), "drop": summary("drop", time_to_target_s=40.0),
                "trim": summary("trim")}
        text, s = demo.headline(runs, "trim")
        self.assertEqual(s["tta_ratio_vs_drop"], 0.75)
        self.assertIn("our drop", text.splitlines()[0])

    def test_gloo_never_reached_the_target(self):
        runs = {"gloo": summary("gloo", time_to_target_s=None, run_wall_s=60.0), "trim": summary("trim")}
        text, s = demo.headline(runs, "trim")
        self.assertEqual((s["tta_ratio_vs_gloo"], s["tta_is_upper_bound"]), (0.5, True))
        self.assertIn("(Gloo (TCP) did not reach 0.95 in its 40 steps, 60 s of training)", text)

    def test_gloo_stopped_by_its_limit(self):
        gloo = summary("gloo", status="failed (124)", time_to_target_s=None, iter_p50_ms=None, iter_p99_ms=None, val_acc=None,
                       steps=None, params_identical=None, run_wall_s=None, limit_s=100,
                       progress={"steps": 20, "train_s": 75.0, "val_acc": 0.9, "iter_p50_ms": 1000.0, "iter_p99_ms_at_least": 4000.0})
        text, s = demo.headline({"gloo": gloo, "gloo-tuned": summary("gloo-tuned"), "hook": summary("hook")}, "hook")
        self.assertEqual((s["tta_ratio_vs_gloo"], s["tta_is_upper_bound"]), (0.4, True))
        self.assertEqual((s["p50_ratio_vs_gloo"], s["p99_ratio_vs_gloo"], s["p99_is_upper_bound"]), (0.8, 0.4, True))
        self.assertEqual((s["tta_ratio_vs_gloo_tuned"], s["tta_gloo_tuned_is_upper_bound"]), (1.0, False))
        self.assertIsNone(s["acc_delta_points"])
        self.assertTrue(s["replicas_identical"])
        self.assertFalse(s["gloo_finished"])
        self.assertIn("(Gloo (TCP) was stopped by the 100 s limit at step 20, after 75 s of training", text)

    def test_missing_runs_give_nulls_not_errors(self):
        _, s = demo.headline({}, "hook")
        self.assertEqual((s["tta_ratio_vs_gloo"], s["tta_ratio_vs_gloo_tuned"], s["replicas_identical"], s["gloo_finished"]),
                         (None, None, False, False))

    def test_switch_trim_rates_per_interval(self):
        lines = [{"event": "listening"}, {"event": "interval", "t_ms": 100, "forwarded": 10, "forwarded_trimmed": 1},
                 {"event": "interval", "t_ms": 200, "forwarded": 10, "forwarded_trimmed": 1},
                 {"event": "interval", "t_ms": 300, "forwarded": 30, "forwarded_trimmed": 6}]
        self.assertEqual(demo.trim_rates(lines), [(0.1, 10, 1, 0.1), (0.3, 20, 5, 0.25)])

    def test_bad_trim_transport(self):
        os.environ["DEMO_TRIM"] = "socket"
        try:
            rc, _, err = call(demo.main, ["/nonexistent"])
        finally:
            del os.environ["DEMO_TRIM"]
        self.assertEqual(rc, 2)
        self.assertIn("DEMO_TRIM=socket", err)

    def test_help_and_bad_arguments_start_nothing(self):
        with tempfile.TemporaryDirectory() as tmp:
            cwd = os.getcwd()
            os.chdir(tmp)
            try:
                rc, out, _ = call(demo.main, ["--help"])
                self.assertEqual((rc, "DEMO_RATE_GBPS" in out), (0, True))
                rc, _, err = call(demo.main, ["build", "extra"])
                self.assertEqual(rc, 2)
                self.assertIn("unrecognized arguments: extra", err)
                self.assertEqual(os.listdir(tmp), [])  # no folder named --help, no demo started
            finally:
                os.chdir(cwd)


@unittest.skipUnless(os.environ.get("CHECK_NETNS_SMOKE") == "1",
                     "netns smoke: CHECK_NETNS_SMOKE=1 runs 2 CPU runs through the netns bottleneck (root, ip, torch; ~1 min)")
class NetnsSmokeTest(unittest.TestCase):
    def test_gloo_and_trim_through_the_bottleneck(self):
        with tempfile.TemporaryDirectory() as tmp:
            p = subprocess.run([sys.executable, "-m", "bench", "congestion", "--cpu", "--plan", "digits:c60", "--transports",
                                "gloo,trim", "--budget-s", "240", "--out", tmp, "--", "--max-steps", "25"],
                               cwd=REPO, capture_output=True, text=True, timeout=400)
            self.assertEqual(p.returncode, 0, p.stderr[-3000:])
            d = json.loads(p.stdout.splitlines()[-1])
            bench = json.loads((Path(tmp) / "bench.json").read_text())
        self.assertEqual((bench["rate_gbps"], bench["plan"]), (0.5, ["digits:c60"]))
        self.assertEqual([(r["transport"], r["status"]) for r in d["runs"]], [("gloo", "ok"), ("trim", "ok")])
        self.assertTrue(all(isinstance(r["retx_tcp"], int) for r in d["runs"]))
        self.assertIsNotNone(d["runs"][1]["trim_rate"])


if __name__ == "__main__":
    unittest.main()
