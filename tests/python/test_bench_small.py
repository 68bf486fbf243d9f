"""The small benches (bench.codec, transport, fabric, sim, scenarios, trim_model): argument errors,
the configurations each plans, their summary arithmetic on made-up runs, and quick real runs with
build/bin's binaries (skipped with the reason when the build is missing)."""

import json
import os
import py_compile
import stat
import tempfile
from pathlib import Path
import unittest
from types import SimpleNamespace

from _bench import call
from bench import REPO, build_dir, codec, fabric, scenarios, sim, transport

BIN = build_dir() / "bin"


def needs(*names):
    missing = [n for n in names if not (BIN / n).is_file()]
    return unittest.skipIf(missing, f"{BIN}/{missing[0] if missing else ''} is not built (make -j)")


class ArgumentTest(unittest.TestCase):
    def test_bad_values_exit_2_naming_the_value(self):
        cases = [(codec.main, ["--threads", "0,x"], "'0,x'"), (codec.main, ["encoding", "--bytes", "64Q"], "'64Q'"),
                 (codec.main, ["--rounds", "0"], "'0'"), (transport.main, ["--iters", "-1"], "'-1'"),
                 (fabric.main, ["--size", "big"], "'big'"), (fabric.main, ["rx-cut", "--bytes", "2X"], "'2X'"),
                 (sim.main, ["htsim", "/x", "--hosts", "20"], "--hosts 20"), (sim.main, ["curve", "--rto-us", "1,a"], "'1,a'"),
                 (sim.main, ["nosuch"], "nosuch"), (sim.main, ["scale", "--sizes", "16,1"], "--sizes 16,1"), (scenarios.main, ["incast", "nosuch"], "nosuch"),
                 (scenarios.main, ["incast", "--trim-exact", "2"], "'2'")]
        for main, argv, named in cases:
            with self.subTest(argv=argv):
                rc, _, err = call(main, argv)
                self.assertEqual(rc, 2)
                self.assertIn(named, err)

    def test_a_missing_build_is_exit_1_with_the_path(self):
        for main, argv in [(codec.main, ["--build", "/nonexistent"]), (sim.main, ["incast", "--build", "/nonexistent"]),
                           (scenarios.main, ["buffer", "--build", "/nonexistent"]),
                           (transport.main, ["--build", "/nonexistent"]), (fabric.main, ["--build", "/nonexistent"]),
                           (fabric.main, ["rx-cut", "--build", "/nonexistent"])]:
            rc, _, err = call(main, argv)
            self.assertEqual(rc, 1)
            self.assertIn("/nonexistent", err)

    def test_defaults(self):
        self.assertEqual(vars(codec.parse([])[1]), {"bytes": "64M", "iters": 10, "rounds": 2, "ranks": 2, "build": "build",
                         "threads": [0, 1, 2, 4], "iperf_seconds": 3, "out": ""})
        enc, a = codec.parse(["encoding"])
        self.assertTrue(enc)
        self.assertEqual((a.bytes, a.iters, a.rounds, a.ranks, a.scheme), ("64M", 5, 3, 2, "rht"))
        a = sim.parse(["curve"])
        self.assertEqual((a.hosts, a.rto_us, a.seeds), (256, [100, 500, 1000, 2500, 10000], [1, 2, 3]))
        a = sim.parse(["scale"])
        self.assertEqual((a.sizes, a.bytes, a.iters, a.seeds), ([16, 64, 256, 1024], "8M", 10, [1]))
        a = sim.parse(["htsim", "/d"])
        self.assertEqual((a.hosts, a.bytes, a.queue_pkts), (64, "16M", 10))

    def test_the_trim_model_compiles(self):  # it imports torch at once; test_trim_model_sim runs it
        with tempfile.TemporaryDirectory() as d:
            py_compile.compile(str(REPO / "bench/trim_model.py"), cfile=f"{d}/t.pyc", doraise=True)


class PlanTest(unittest.TestCase):
    def test_fabric_configurations(self):
        plan = fabric.fabric_plan(256)
        self.assertEqual(list(plan), ["native", "native-256", "fabric-256", "fabric-256-sized"])
        self.assertEqual(plan["native-256"][0], ["--trim-exact", 1, "--trim-bytes", 238])
        self.assertEqual(plan["fabric-256-sized"], (["--fabric", 1, "--trim-size", 256], {"NCCL_TRIM_FABRIC_TRIM_BYTES": 256}))
        self.assertEqual(plan["fabric-256"][1], {})

    def test_rx_cut_commands(self):
        a = SimpleNamespace(build="build", p=0.2, size=256, rate_gbps=2, bytes="2M", iters=20)
        cmd, knob = fabric.rx_cut_command(a, "udp-keep-packet")
        self.assertEqual(knob, "packet")
        self.assertTrue(cmd[0].endswith("scripts/netns_bottleneck.sh"))
        sw = [cmd[i + 1] for i, x in enumerate(cmd[:cmd.index("--")]) if x == "--switch-arg"]
        self.assertEqual(sw, ["--mode", "random", "--random-p", "0.2", "--fabric", "1", "--trim-size", "256",
                              "--rewrite-udp-length", "keep"])
        h = cmd[cmd.index("--") + 1:]
        self.assertTrue(h[0].endswith("bin/trim-harness"))
        self.assertIn("{netns}", h)
        self.assertEqual(h[h.index("--bytes") + 1], "2M")
        self.assertEqual(fabric.rx_cut_command(a, "fixed")[1], "off")
        self.assertNotIn("keep", fabric.rx_cut_command(a, "fixed")[0])

    def test_live_scenarios(self):
        want = {"incast": (8, 100, 10), "allreduce_bursts": (6, 60, 10), "oversub": (6, 40, 8), "trim_size": (7, 40, 10),
                "buffer": (6, 40, 10)}
        for name, (n, iters, quick) in want.items():
            for q, it in ((False, iters), (True, quick)):
                title, cases = scenarios.scenario(name, q)
                self.assertEqual(len(cases), n, name)
                self.assertIn(f"{it} iterations", title)
                for label, env, sw, h in cases:
                    self.assertEqual(h[h.index("--iters") + 1], it, label)
                    self.assertIn("--mode", sw)
        _, cases = scenarios.scenario("buffer", False)
        sw = cases[2][2]
        self.assertEqual(len(sw), 2 * len(set(sw[::2])))  # every option once
        sw = dict(zip(sw[::2], sw[1::2]))
        self.assertEqual((cases[2][0], sw["--buffer-bytes"], sw["--buffer-packets"]), ("buffer 1bdp trim", 50000, 0))
        _, cases = scenarios.scenario("trim_size", True)
        self.assertEqual([c[0] for c in cases][:2] + [cases[-1][0]], ["trim size plane0", "trim size 64", "drop (baseline)"])
        _, cases = scenarios.scenario("incast", True)
        self.assertEqual(cases[0][1], {"NCCL_TRIM_PHASE": "all"})
        self.assertIn("incast:2:0.04:all", cases[0][2])

    def test_sim_tables(self):
        want = {"incast": 8, "allreduce_bursts": 6, "oversub": 12, "trim_size": 7, "buffer": 6}
        for name, n in want.items():
            rows = sim.table(name, 64)
            self.assertEqual(len(rows), n, name)
        self.assertEqual(sim.table("oversub", 64)[2][0], "oversub 1:1 spray trim")
        self.assertIn(32, sim.table("incast", 64)[0][1])  # the incast's fixed 32-host leaf


class SummaryTest(unittest.TestCase):
    def test_fabric_and_rx_cut_summaries(self):
        rows = [{"label": "native", "round": r, "p50_ms": p, "p99_ms": 2 * p, "nmse": 0.1, "trim_rate": 0.05,
                 "retransmits": 10 * r, "verify": "ok", "replicas_identical": True} for r, p in ((1, 30.0), (2, 10.0), (3, 20.0))]
        rows.append({"label": "fabric-256", "round": 1, "error": "RuntimeError: trim-switch exited"})
        s = fabric.fabric_summary(rows)
        self.assertEqual(s[0]["p50_ms_median"], 20.0)
        self.assertEqual(s[0]["p99_ms_all"], [60.0, 20.0, 40.0])
        self.assertEqual((s[0]["runs"], s[0]["retransmits_median"], s[0]["verify"]), (3, 20, ["ok"]))
        self.assertEqual(s[1], {"summary": "fabric-256", "error": "no run completed"})
        rx = [{**r, "cuts": 5, "dup_packets": 1, "resent_not_dup": r["retransmits"] - 1, "cut_received": 3,
               "plugin_cpu_s": 0.5} for r in rows[:3]]
        s = fabric.rx_cut_summary(rx)[0]
        self.assertEqual((s["resent_not_dup_median"], s["retransmits_all"], s["cuts_median"]), (19, [10, 20, 30], 5))

    def test_an_rx_cut_row_with_nothing_trimmable_counts_no_cut(self):
        harness = {"bench": "harness", "p50_ms": 1.0, "p99_ms": 1.5, "plugin_cpu_s": 0.1, "nmse": 0, "retransmits": 0,
                   "dup_packets": 0, "trimmed_accepted": 0, "cut_received": 0, "cut_rejected": 0,
                   "replicas_identical": True, "verify": "exact"}
        # A 64 KiB message is under NCCL_TRIM_MIN_BYTES: the switch's final line names no DSCP 18.
        quiet = fabric.rx_cut_row("fixed", [harness, {"event": "final", "fabric": 1}])
        self.assertEqual((quiet["cuts"], quiet["resent_not_dup"]), (0, 0))
        cut = fabric.rx_cut_row("fixed", [harness, {"event": "final", "dscp_18_trimmed": 194}])
        self.assertEqual(cut["cuts"], 194)
        self.assertIsNone(fabric.rx_cut_row("fixed", [harness])["cuts"])  # no switch line: unknown
        failed = fabric.rx_cut_row("fixed", [{"event": "final"}])
        self.assertEqual((failed["verify"], failed["p50_ms"]), ("fail", None))
        s = fabric.rx_cut_summary([{**quiet, "label": "fixed"}, {**failed, "label": "fixed"}])[0]
        self.assertEqual((s["runs"], s["cuts_median"]), (1, 0))

    def test_codec_and_encoding_summaries(self):
        rows = [{"kind": "iperf3", "threads": None, "gbps": 10.0, "cpu_s_per_gb": 0.2, "error": ""}]
        for t, scale in ((0, 1.0), (2, 0.5)):
            rows += [{"kind": k, "threads": t, "gbps": g * scale, "cpu_s_per_gb": 1.0, "error": "", "verify": "exact"}
                     for k, g in (("allreduce_none", 8.0), ("allreduce_rht", 6.0), ("sendrecv", 12.0), ("sendrecv_rht", 5.0))]
        rows.append({"kind": "allreduce_rht", "threads": 0, "gbps": 0.1, "error": "deadline", "verify": "fail"})
        s0, s2 = codec.codec_summary(rows, [0, 2], "64M", 2)
        self.assertEqual((s0["rht_over_none"], s0["sendrecv_over_iperf3"], s0["iperf3_cpu_s_per_gb"]), (0.75, 1.2, 0.2))
        self.assertEqual((s2["allreduce_none_busbw_gbps"], s2["sendrecv_rht_over_iperf3"]), (4.0, 0.25))
        enc = [{"label": s, "round": r, "scheme": s, "busbw_gbps": g, "verify": "exact", "ranks": 2, "bytes": 1 << 26,
                "error": ""} for r in (1, 2, 3) for s, g in (("none", 10.0 + r), ("rht", 9.0 + r))]
        s = codec.encoding_summary(enc, "rht")
        self.assertEqual((s["ratio"], s["rounds"], s["failed_runs"], s["verify"]), (0.917, 3, 0, ["exact"]))

    def test_curve_points(self):
        runs = [{"rto_us": rto, "seed": seed, "mode": m, "jct_p99_ms": p} for rto, seed, m, p in
                [(100, 1, "trim", 8.0), (100, 1, "drop", 10.0), (100, 2, "trim", 6.0), (100, 2, "drop", 12.0),
                 (100, 3, "trim", 9.0), (500, 1, "trim", 5.0)]]
        self.assertEqual(sim.curve_points(runs), [{"rto_us": 100, "seeds": 2, "ratio_median": 0.65, "ratio_min": 0.5,
                         "ratio_max": 0.8, "trim_p99_ms_median": 7.0, "drop_p99_ms_median": 11.0}])

    def test_scale_rows_and_table(self):
        def run(variant, hosts, seed, p50, p99, hung=False):
            return {"variant": variant, "hosts": hosts, "seed": seed, "jct_p50_ms": p50, "jct_p99_ms": p99, "hung": hung}
        runs = []
        for hosts, seed, trim, tcp in ((16, 1, 4.0, 10.0), (16, 2, 6.0, 12.0), (64, 1, 5.0, 25.0)):
            runs += [run("trim", hosts, seed, trim, trim + 1), run("drop", hosts, seed, 50.0, 60.0),
                     run("tcp_1ms", hosts, seed, tcp, 2 * tcp), run("tcp_200ms", hosts, seed, 2000.0, 3000.0, hosts == 64)]
        runs.append(run("trim", 256, 1, 1.0, 1.0))  # a size without its baselines: left out
        rows = sim.scale_rows(runs)
        self.assertEqual([r["hosts"] for r in rows], [16, 64])
        r16, r64 = rows
        # 16 hosts: medians over two seeds, trim 5/6 ms against tcp 11/22 ms
        self.assertEqual((r16["seeds"], r16["trim_p50_ms"], r16["trim_p99_ms"], r16["tcp_1ms_p99_ms"]), (2, 5.0, 6.0, 22.0))
        self.assertEqual((r16["trim_over_tcp_1ms_p50"], r16["trim_over_tcp_1ms_p99"], r16["hung"]), (0.455, 0.273, False))
        self.assertEqual((r64["trim_over_tcp_1ms_p99"], r64["tcp_200ms_p50_ms"], r64["hung"]), (0.12, 2000.0, True))
        self.assertTrue(sim.falls([0.273, 0.12]))
        self.assertFalse(sim.falls([0.273, 0.3, 0.12]))
        self.assertFalse(sim.falls([0.2]))
        lines = sim.scale_table(rows).splitlines()
        self.assertEqual(lines[0].split()[:3], ["hosts", "trim", "p50/p99"])
        self.assertEqual(lines[1].split(), ["16", "5.00/6.00", "50.00/60.00", "11.00/22.00", "2000.00/3000.00", "0.455", "0.273"])
        self.assertEqual(sim.scale_args(64, "tcp_200ms", 3, SimpleNamespace(bytes="8M", iters=10))[-6:],
                         ["--mode", "drop", "--transport", "tcp", "--rto-us", 200000])

    def test_live_pairs(self):
        def r(label, p50, p99, retx):
            return {"label": label, "p50_ms": p50, "p99_ms": p99, "retransmits": retx}
        rows = [r("k=2 trim", 5.0, 8.0, 1), r("k=2 drop", 10.0, 0.0, 9), r("size 64", 4.0, 6.0, 2),
                r("drop (baseline)", 8.0, 12.0, 7), r("lonely trim", 1.0, 1.0, 0)]
        self.assertEqual(scenarios.pairs(rows), [
            {"case": "k=2", "p50_ratio": 0.5, "p99_ratio": None, "retx_trim": 1, "retx_drop": 9},
            {"case": "size 64 vs drop (baseline)", "p50_ratio": 0.5, "p99_ratio": 0.5, "retx_trim": 2, "retx_drop": 7}])

    def test_htsim_row(self):
        t = {"hosts": 64, "jct_p50_ms": 2.0, "trimmed": 7}
        txt = "Connections: 3\nflow finished at 1000.0\nflow finished at 3000.0\nNew: 10 Rtx: 2 Bounced: 4\n"
        r = sim.htsim_row("incast", t, txt)
        self.assertEqual((r["htsim_ndp_ms"], r["ratio_htsim_over_trimsim"], r["htsim_flows"], r["htsim_flows_finished"],
                          r["htsim_bounced"], r["trimsim_exact_cut"]), (3.0, 1.5, 3, 2, 4, 0))
        r = sim.htsim_row("x", t, "crashed")
        self.assertEqual((r["htsim_ndp_ms"], r["ratio_htsim_over_trimsim"], r["htsim_rtx"], r["htsim_flows"]),
                         (None, None, None, 0))


class RealRunTest(unittest.TestCase):
    @needs("trim-sim")
    def test_sim_table_and_a_tiny_curve(self):
        rc, out, _ = call(sim.main, ["incast"])
        self.assertEqual(rc, 0)
        self.assertEqual(len(out.splitlines()), 9)
        self.assertTrue(out.splitlines()[1].startswith("incast k=2 trim "))
        with tempfile.TemporaryDirectory() as d:
            rc, out, _ = call(sim.main, ["curve", "--hosts", "16", "--rto-us", "1000", "--seeds", "1", "--out", d])
            self.assertEqual(rc, 0)
            self.assertEqual(sorted(os.listdir(d)), ["drop_rto1000_seed1.json", "trim_rto1000_seed1.json"])
            last = out.splitlines()[-1]
            self.assertIn('"bench":"sim_recovery_curve","hosts":16', last)
            self.assertIn('"rto_us":1000,"seeds":1', last)

    @needs("trim-sim")
    def test_a_tiny_scale_sweep(self):
        with tempfile.TemporaryDirectory() as d:
            rc, out, _ = call(sim.main, ["scale", "--sizes", "8,16", "--bytes", "1M", "--iters", "2", "--out", d])
            self.assertEqual(rc, 0, out)
            self.assertEqual(len(list(Path(d).glob("*.json"))), 8)  # 2 sizes x 4 transports
            last = json.loads(out.splitlines()[-1])
            self.assertEqual(([r["hosts"] for r in last["rows"]], last["bench"]), ([8, 16], "sim_scale"))
            tcp = json.loads(Path(d, "tcp_1ms_n16_b1M_i2_seed1.json").read_text())
            self.assertEqual((tcp["transport"], tcp["rto_us"], tcp["mode"], tcp["conservation_ok"]), ("tcp", 1000, "drop", True))

    @needs("trim-sim")
    def test_htsim_against_a_stand_in(self):
        with tempfile.TemporaryDirectory() as d:
            ndp = f"{d}/htsim_ndp"
            with open(ndp, "w") as f:  # prints what the real one does for one finished flow
                f.write("#!/bin/sh\necho 'Connections: 1'\necho 'flow finished at 500.0'\necho 'New: 1 Rtx: 0 Bounced: 2'\n")
            os.chmod(ndp, stat.S_IRWXU)
            rc, out, _ = call(sim.main, ["htsim", d, "--hosts", "32", "--bytes", "64K", "--out", f"{d}/out"])
            self.assertEqual(rc, 0)
            self.assertIn("Nodes 32\n", Path(f"{d}/out/leafspine.topo").read_text())
            self.assertEqual(len(Path(f"{d}/out/results.jsonl").read_text().splitlines()), 4)
            self.assertIn('"bench":"htsim_crosscheck"', out.splitlines()[-1])
            self.assertRegex(out, r"permutation_spray +[0-9.]+ +0\.500 ")

    @needs("trim-harness")
    def test_a_tiny_encoding_bench(self):
        rc, out, _ = call(codec.main, ["encoding", "--bytes", "256K", "--iters", "1", "--rounds", "1"])
        self.assertEqual(rc, 0)
        lines = out.splitlines()
        self.assertEqual(len(lines), 4)  # two runs, the summary, the ratio
        self.assertRegex(lines[-1], r"^ratio: [0-9]+\.[0-9]{3}$")
        self.assertIn('"bench": "encoding"', lines[-2])

    @needs("trim-switch", "trim-harness")
    def test_one_run_through_the_switch(self):
        title, cases = scenarios.scenario("incast", True)
        label, env, sw, h = cases[0]
        h = [x if x != 10 else 2 for x in h]  # 2 iterations
        with tempfile.TemporaryDirectory() as d:
            hj, s, rc, wall_s = scenarios.through_switch("build", ["--trim-exact", 1, *sw], h, env, d, "t")
            self.assertEqual(rc, 0)
            self.assertEqual(s.get("event"), "final")
            row = scenarios.row(label, hj, s, wall_s)
            self.assertEqual(row["sw_dropped"], 0)  # trim mode: none of ours dropped
            self.assertRegex(scenarios.line(row), r"^incast k=2 trim +[0-9.]+ ")
            self.assertEqual(sorted(os.listdir(d)), ["t.harness.json", "t.harness.log", "t.switch.jsonl"])


if __name__ == "__main__":
    unittest.main()
