"""The trim backend's Works and futures as gloo's (issue 37, items 1 and 2): one process per rank
(_callbacks_worker.py), 2 ranks on loopback, the same scenario run once on "trim" and once on
"gloo" where gloo is the reference.

What is asserted, and why it must hold:
- A future's callback that issues a collective and waits for it (`.then(lambda f:
  dist.all_reduce(x, async_op=True).get_future().wait())`), on the same group or another, two
  levels deep with a blocking call inside (where gloo, whose two worker threads run callbacks,
  deadlocks): each completes with the right sums. The group's worker
  never runs callbacks, so the collective a callback waits for is never queued behind it.
- torch's PowerSGD DDP hook (it does exactly that, twice per bucket): the final parameters are
  bit-identical to the same run on gloo (2 ranks: a sum of two values has one result).
- Gloo's Work order: the future completes, and the callbacks it had run, before wait() returns
  (through dist.* and on the backend's own Work, whose is_completed() says False inside the
  callbacks and True after: gloo's finishWorkGloo marks the future, then the Work).
- wait(timeout) raises while the peer has not joined and the Work still completes later, as on
  gloo; a failed collective's error surfaces on wait(), on its future and on a chained one.
- The timeout of init_process_group / new_group bounds each collective as gloo's does: a
  collective the peer never joins fails no earlier than the timeout (torch's own barrier-timeout
  test allows 0.1 s early) and soon after it, with a text torch's test accepts; a barrier's own
  timeout= wins over the group's.
Every scenario runs under a deadline: a deadlock fails the test instead of hanging it.
"""

import functools
import unittest

from _spawn import run_both
from _support import require_libs, require_torch

TIMEOUT_RE = r" (Timed out|closed|timeout) "  # torch's distributed_test._test_barrier_timeout
LATE_BOUND_S = 5.0  # a timed-out collective fails within this after the group's timeout


class Reported(unittest.TestCase):
    run_both = staticmethod(functools.partial(run_both, "_callbacks_worker"))


class CallbackTest(Reported):
    @classmethod
    def setUpClass(cls):
        require_libs()
        require_torch()

    def test_a_callback_that_waits_for_a_collective_completes(self):
        trim, gloo = self.run_both("callbacks")
        for backend, ranks in (("trim", trim), ("gloo", gloo)):
            for r, res in enumerate(ranks):
                for name in ("same_group", "other_group"):
                    self.assertEqual(res[name], {"then": 30000.0, "t": 3000.0, "t2": 30000.0},
                                     f"{backend} rank {r}: {name}")
        for r, res in enumerate(trim):  # gloo deadlocks here (both its threads in callbacks)
            self.assertEqual(res["nested"], 60.0, f"rank {r}")

    def test_powersgd_through_ddp_is_bit_identical_to_gloo(self):
        trim, gloo = self.run_both("powersgd")
        for r in range(2):
            self.assertEqual(trim[r]["iter"], gloo[r]["iter"])
            self.assertGreater(trim[r]["iter"], 2, "PowerSGD never left its warm-up (uncompressed) steps")
            self.assertEqual(trim[r]["hash"], gloo[r]["hash"], f"rank {r}: PowerSGD through trim differs from gloo")
        self.assertEqual(trim[0]["hash"], trim[1]["hash"], "replicas differ")


class WorkSemanticsTest(Reported):
    @classmethod
    def setUpClass(cls):
        require_libs()
        require_torch()
        cls.trim, cls.gloo = cls.run_both("semantics")

    def test_the_future_and_its_callbacks_are_done_before_wait_returns(self):
        for backend, ranks in (("trim", self.trim), ("gloo", self.gloo)):
            for r, res in enumerate(ranks):
                for via in ("dist", "backend") if backend == "trim" else ("dist",):
                    seen = res[via]
                    what = f"{backend} rank {r} via {via}: {seen}"
                    self.assertTrue(seen["future_done_in_callback"], what)
                    self.assertTrue(seen["future_done_at_wait"], what)
                    self.assertTrue(seen["value_ok"], what)
                    if r == 1:  # its callback may have been attached to a complete future (and run at once)
                        self.assertTrue(seen["released"], what)
                        continue
                    self.assertFalse(seen["done_at_attach"], what)
                    self.assertTrue(seen["callback_ended_at_wait"], what)
                    if via == "backend":
                        self.assertFalse(seen["completed_in_callback"], what)
                        self.assertTrue(seen["completed_at_wait"], what)

    def test_wait_with_a_timeout_raises_and_the_work_completes_later(self):
        for backend, ranks in (("trim", self.trim), ("gloo", self.gloo)):
            self.assertTrue(ranks[1]["released"], f"{backend}: rank 1 was never released")
            e = ranks[0]["wait_timeout"]
            self.assertIsNotNone(e, f"{backend}: wait(timeout) returned without the peer")
            self.assertGreaterEqual(e["seconds"], 0.45, f"{backend}: {e}")
            self.assertLess(e["seconds"], 3.0, f"{backend}: {e}")
            self.assertRegex(e["text"], r"(?i)timed out", f"{backend}: {e}")
            for r, res in enumerate(ranks):
                self.assertTrue(res["after_timeout_ok"], f"{backend} rank {r}")

    def test_a_failed_collective_raises_on_wait_and_on_its_futures(self):
        for r, res in enumerate(self.trim):
            for key in ("error_wait", "error_future", "error_chained", "error_after"):
                e = res[key]
                self.assertIsNotNone(e, f"rank {r}: {key} raised nothing")
                self.assertIn("trim pg", e["text"], f"rank {r}: {key}: {e}")
            self.assertTrue(res["error_wait"]["dist_error"], res["error_wait"])
            self.assertRegex(res["error_wait"]["text"], "1000 float32|1024 float32|failed earlier|closed")
            self.assertTrue(res["error_future_done"], f"rank {r}")


class TimeoutTest(Reported):
    @classmethod
    def setUpClass(cls):
        require_libs()
        require_torch()

    def assert_timed_out(self, e, seconds, what):
        self.assertIsNotNone(e, f"{what}: returned without the peer")
        self.assertTrue(e["dist_error"] or e["type"] == "RuntimeError", f"{what}: {e}")
        self.assertRegex(e["text"], TIMEOUT_RE, f"{what}: {e}")
        self.assertGreaterEqual(e["seconds"], seconds - 0.1, f"{what}: failed before its timeout: {e}")
        self.assertLess(e["seconds"], seconds + LATE_BOUND_S, f"{what}: {e}")

    def test_a_groups_timeout_bounds_each_collective_as_on_gloo(self):
        from _callbacks_worker import GROUP_TIMEOUT_S
        trim, gloo = self.run_both("timeouts")
        for backend, ranks in (("trim", trim), ("gloo", gloo)):
            for name in ("all_reduce", "barrier", "async_wait"):
                self.assert_timed_out(ranks[0][name], GROUP_TIMEOUT_S, f"{backend} {name}")
            self.assert_timed_out(ranks[0]["barrier_arg"], 1.0, f"{backend} barrier(timeout=1 s)")

    def test_init_process_groups_timeout_bounds_each_collective_as_on_gloo(self):
        from _callbacks_worker import GROUP_TIMEOUT_S
        trim, gloo = self.run_both("init_timeout", timeout_s=GROUP_TIMEOUT_S)
        for backend, ranks in (("trim", trim), ("gloo", gloo)):
            self.assert_timed_out(ranks[0]["all_reduce"], GROUP_TIMEOUT_S, f"{backend} default group")


if __name__ == "__main__":
    unittest.main()
