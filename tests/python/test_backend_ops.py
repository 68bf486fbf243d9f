"""The trim backend's operations beyond the ring's five (issue 37, item 3), against gloo: one
process per rank (_ops_worker.py), 3 ranks on loopback, the same scenario on "trim" and "gloo".

What is asserted, and why it must hold:
- send/recv (both ranks sending first, tags taken out of order, from any source with the source
  rank returned), batch_isend_irecv, gather, scatter, all_to_all_single (even and uneven
  splits), all_to_all, all_gather_coalesced and monitored_barrier end with bytes identical to
  gloo's on every rank: point-to-point is exact. all_reduce_coalesced is bit-identical to one
  all_reduce of the same values laid end to end (a float sum of 3 ranks is gloo's own order). reduce gathers to the root and reduces in rank order: bit-identical to
  that reduction done locally, and to gloo's for MAX and MIN (a SUM or PRODUCT of 3 floats may
  round differently in gloo's order).
- Bad input ends in a clear error on the rank that meets it, never a hang (each run has a
  deadline): a receive no send matches fails after the group's timeout in gloo's words and the
  message that did come is still delivered; split sizes that disagree fail with both sizes named
  and the group goes on working; a peer that dies while a receive waits fails that receive long
  before the timeout.
"""

import functools
import unittest

from _spawn import Run, run_both
from _support import require_libs, require_torch

_run_both = functools.partial(run_both, "_ops_worker")


class OpsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_libs()
        require_torch()
        cls.trim, cls.gloo = _run_both("ops", world=3)

    def test_point_to_point_matches_gloo(self):
        for r in range(3):
            for key in ("ring", "batch", "tags", "any_source"):
                self.assertEqual(self.trim[r].get(key), self.gloo[r].get(key), f"rank {r}: {key}")
            self.assertTrue(self.trim[r]["isend_completed"], "an isend's Work is_completed() after wait()")
        self.assertEqual(self.trim[0]["any_source"], [(1, [0, 1, 2, 3, 4, 5, 6]), (2, [0, 2, 4, 6, 8, 10, 12])])
        self.assertEqual(self.trim[1]["tags"], ([1.0] * 5, [2.0] * 5))

    def test_collectives_on_point_to_point_match_gloo(self):
        keys = ("gather", "scatter", "a2a", "a2a_uneven", "a2a_list", "all_gather_coalesced", "monitored_barrier")
        for r in range(3):
            for key in keys:
                self.assertEqual(self.trim[r][key], self.gloo[r][key], f"rank {r}: {key}")
            # 3 ranks' float sums: gloo's order is its own; the coalesced form is one all_reduce.
            got = self.trim[r]["all_reduce_coalesced"]
            self.assertEqual(got["got"], got["one_all_reduce"], f"rank {r}: all_reduce_coalesced")
        self.assertEqual(self.trim[0]["monitored_barrier"], "passed")

    def test_reduce_is_the_rank_order_reduction_and_matches_gloo_where_order_cannot_matter(self):
        for op in ("SUM", "PRODUCT", "MAX", "MIN"):
            got = self.trim[2][f"reduce_{op}"]
            self.assertEqual(got["got"], got["rank_order"], f"reduce {op} at the root")
        for op in ("MAX", "MIN"):  # one result in any order; SUM and PRODUCT of 3 floats may round otherwise
            self.assertEqual(self.trim[2][f"reduce_{op}"]["got"], self.gloo[2][f"reduce_{op}"]["got"], op)


class BadInputTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_libs()
        require_torch()
        from _ops_worker import SHORT_S
        cls.short_s = SHORT_S
        cls.res, cls.seconds = Run("_ops_worker", "bad_input", "trim", may_die=(0,)).result()

    def test_a_receive_nothing_matches_times_out_and_the_rest_is_delivered(self):
        err = self.res[0]["no_match"]
        self.assertIsNotNone(err)
        self.assertIn("Timed out", err["text"])
        self.assertIn("tag 6", err["text"])
        self.assertTrue(err["dist_error"], err)
        self.assertGreaterEqual(err["seconds"], self.short_s - 0.1)
        self.assertLess(err["seconds"], self.short_s + 5)
        self.assertEqual(self.res[0]["after_no_match"], [1.0] * 4)

    def test_mismatched_splits_fail_with_both_sizes(self):
        err = self.res[0]["mismatched_splits"]
        self.assertIsNotNone(err, "rank 0 took 8 bytes where it expected 4")
        self.assertIn("sent 8 bytes where this rank expects 4", err["text"])
        self.assertEqual(self.res[0]["all_reduce_after"], [3.0] * 3)
        self.assertEqual(self.res[1]["all_reduce_after"], [3.0] * 3)

    def test_a_dead_peer_fails_the_receive_waiting_for_it(self):
        err = self.res[1]["peer_died"]
        self.assertIsNotNone(err, "the receive from a dead rank returned")
        self.assertIn("rank 0", err["text"])
        self.assertLess(err["seconds"], 30, "noticed long before the 60 s timeout")



class Fsdp2Test(unittest.TestCase):
    """FSDP2 (fully_shard) on CPU through trim: 4 Adam steps, final parameters bit-identical to
    gloo's (issue 37, item 5)."""

    def test_fully_shard_trains_bit_identical_to_gloo(self):
        require_libs()
        require_torch()
        trim, gloo = _run_both("fsdp2", world=2)
        for r in range(2):
            self.assertEqual(len(trim[r]["params"]), 6)
            self.assertEqual(trim[r]["params"], gloo[r]["params"], f"rank {r}")
            self.assertEqual(trim[r]["losses"], gloo[r]["losses"], f"rank {r}")
        self.assertEqual(trim[0]["params"], trim[1]["params"], "replicas differ")


if __name__ == "__main__":
    unittest.main()
