"""The bench package's shared pieces: alternated rounds and their statistics, tables, JSON lines,
the switch start-up, CPU accounting. No torch, no root."""

import io
import sys
import tempfile
import unittest
import unittest.mock
from contextlib import redirect_stdout
from pathlib import Path

from bench import __main__ as cli
from bench import jsonio, proc, report, rounds


class RoundsTest(unittest.TestCase):
    def test_interval_is_the_binomial_order_statistic(self):
        # n = 10: P(median outside [x2, x9]) = 2 * (1 + 10) / 1024, so 0.9785 >= 0.95; [x3, x8]
        # covers only 0.891.
        self.assertEqual(rounds.median_interval(range(10, 0, -1)), (5.5, 2, 9, 0.9785))
        # too few values for 95 %: [min, max], and what that covers is said
        self.assertEqual(rounds.median_interval([3, 1, 2]), (2, 1, 3, 0.75))
        self.assertEqual(rounds.median_interval([None]), (None, None, None, 0.0))

    def test_alternate_runs_every_label_every_round_and_keeps_failures(self):
        calls = []

        def run(label, r):
            calls.append((label, r))
            if (label, r) == ("b", 2):
                raise RuntimeError("no result")
            return {"ms": 10.0 * r if label == "a" else 5.0 * r}

        with tempfile.TemporaryDirectory() as d, redirect_stdout(io.StringIO()) as out:
            rows = rounds.alternate(["a", "b"], 3, run, out=Path(d) / "rows.jsonl")
            kept = jsonio.read_jsonl(Path(d) / "rows.jsonl")
        self.assertEqual(calls, [("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3), ("b", 3)])
        self.assertEqual(kept, rows)
        self.assertEqual(len(out.getvalue().splitlines()), 6)
        self.assertEqual(rows[3], {"label": "b", "round": 2, "error": "RuntimeError: no result"})
        s = rounds.summarize(rows, ["ms"])
        self.assertEqual((s["baseline"], s["rounds"], s["a"]["ok_rounds"], s["b"]["ok_rounds"]), ("a", 3, 3, 2))
        self.assertEqual(s["b"]["ms_ratio"]["median"], 0.5)  # paired with a's round 1 and 3 only
        self.assertNotIn("ms_ratio", s["a"])

    def test_paired_ratio_cancels_drift_that_unpaired_medians_keep(self):
        # the machine slows down round by round; b is always 0.9x a in its own round
        rows = [{"label": lb, "round": r, "t": (1.0 if lb == "a" else 0.9) * 2 ** r}
                for r in range(1, 8) for lb in ("a", "b")]
        s = rounds.summarize(rows, ["t"])
        self.assertEqual((s["b"]["t_ratio"]["low"], s["b"]["t_ratio"]["high"]), (0.9, 0.9))


class ReportTest(unittest.TestCase):
    def test_fmt_and_ratio(self):
        self.assertEqual([report.fmt(None), report.fmt(True), report.fmt(False), report.fmt(1.23456, ".2f"),
                          report.fmt("x")], ["-", "yes", "NO", "1.23", "x"])
        self.assertEqual((report.ratio(1, 4), report.ratio(None, 4), report.ratio(1, 0)), (0.25, None, None))

    def test_tables(self):
        self.assertEqual(report.table(["x", "y"], [["a", "1.0"], ["bbb", "22"]]), "x      y\na    1.0\nbbb   22")
        self.assertEqual(report.table(["x", "y"], [["a", 1]], md=True), "| x | y |\n|---|---|\n| a | 1 |")


class JsonioTest(unittest.TestCase):
    def test_cut_and_foreign_lines_are_skipped(self):
        text = 'log line\n{"a": 1}\n{"b": \n  {"c": [2]}\n'
        self.assertEqual(jsonio.parse_jsonl(text), [{"a": 1}, {"c": [2]}])
        self.assertEqual(jsonio.read_jsonl("/nonexistent/x.jsonl"), [])
        self.assertIsNone(jsonio.load_json("/nonexistent/x.json"))


class ProcTest(unittest.TestCase):
    def test_cpu_run_counts_the_children_and_times_out(self):
        burn = [sys.executable, "-c", "import subprocess, sys; subprocess.run([sys.executable, '-c', "
                "'import time\\nt=time.process_time()\\nwhile time.process_time()-t<0.3: pass'])"]
        rc, cpu_s, wall_s, _ = proc.cpu_run(burn)
        self.assertEqual(rc, 0)
        self.assertGreaterEqual(cpu_s, 0.3)  # the grandchild's CPU too
        rc, _, wall_s, _ = proc.cpu_run([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.5)
        self.assertEqual(rc, 124)
        self.assertLess(wall_s, 10)

    def test_start_switch_reads_the_port_or_says_why(self):
        with tempfile.TemporaryDirectory() as d:
            fake = Path(d) / "sw"
            fake.write_text('#!/bin/sh\necho \'{"event":"listening","port":4242}\'\nexec sleep 30\n')
            fake.chmod(0o755)
            p, port = proc.start_switch(fake, [], Path(d) / "log")
            self.assertEqual(port, 4242)
            proc.stop(p)
            self.assertIsNotNone(p.poll())
            dead = Path(d) / "dead"
            dead.write_text("#!/bin/sh\nexit 3\n")
            dead.chmod(0o755)
            with self.assertRaisesRegex(RuntimeError, r"exited \(3\)"):
                proc.start_switch(dead, [], Path(d) / "log2")


class CliTest(unittest.TestCase):
    def test_commands_list_and_unknown_command(self):
        with redirect_stdout(io.StringIO()) as out:
            self.assertEqual(cli.main([]), 0)
        self.assertIn("demo", out.getvalue())
        with redirect_stdout(io.StringIO()), unittest.mock.patch("sys.stderr", io.StringIO()) as err:
            self.assertEqual(cli.main(["nope"]), 2)
        self.assertIn("unknown command 'nope'", err.getvalue())

    def test_every_command_names_a_module_with_main(self):
        # (read, not imported: some import torch)
        root = Path(cli.__file__).parent.parent
        missing = [name for name, (mod, _) in cli.COMMANDS.items()
                   if "\ndef main(" not in _text(root / (mod.replace(".", "/") + ".py"))]
        self.assertEqual(missing, [])


def _text(path):
    try:
        return path.read_text()
    except OSError:
        return ""


if __name__ == "__main__":
    unittest.main()
