"""The RHT hook across ranks: 2 gloo ranks on CPU (torch.multiprocessing.spawn, once for the
class; _gloo_worker.py is what each rank runs), the rotation by the host twin.

Bounds, with eps the dtype's machine epsilon (torch.finfo(dtype).eps) and rms the RMS of the
per-rank inputs after the division by the world size:
  float32:         max |hook - plain| <= 1e-5 * rms        (seen: <= 12 eps * rms = 1.4e-6 * rms)
  bfloat16/fp16:   |hook_i - plain_i| <= 4 eps * (|plain_i| + rms) per element  (seen: <= 2.3 eps)
The hook sums rotated values and rotates back, so it rounds differently from a plain allreduce:
each rounding of a rotated value spreads, through the orthogonal inverse, over a row as noise of
about eps * rms, and the rows of 2^15 add 15 butterfly stages of fp32 rounding.
DDP and FSDP1 runs (4 and 3 SGD steps): max |p_hook - p_plain| <= 1e-5 * max |p| per parameter
(seen: ~1e-7), and the hook's replicas are bitwise identical on all ranks.
"""

import unittest

from _support import SpawnedRanks

SAME_DATA_STEPS = 3  # _gloo_worker.SAME_DATA_STEPS (not imported: it needs torch)

WORLD = 2  # each rank's torch import and first DDP cost ~6 s of CPU on this 2-core machine
FP32_BOUND = 1e-5
HALF_BOUND_EPS = 4.0
PARAM_BOUND = 1e-5


class HookAcrossRanksTest(SpawnedRanks):
    WORKER, WORLD, RANKS = "_gloo_worker", WORLD, "gloo ranks"

    def assert_all_ranks_equal(self, get, what):
        first = get(self.ranks[0])
        for r, rank in enumerate(self.ranks[1:], 1):
            for i, (a, b) in enumerate(zip(first, get(rank))):
                self.assertTrue(self.torch.equal(a, b), f"{what} [{i}] differs between rank 0 and rank {r}")

    def test_ranks_draw_the_same_signs(self):
        # Equal inputs everywhere: the rotated buffers handed to all_reduce must be bitwise equal.
        self.assert_all_ranks_equal(lambda r: [sent for _, sent in r["same_signs"]], "rotated buffer")
        for x, sent in self.ranks[0]["same_signs"]:
            if x.numel() >= 3:
                self.assertFalse(self.torch.equal(x, sent), f"{x.numel()} elements went out unrotated")
        # Through DDP: every bucket of a few steps, with the same data on every rank.
        wire = self.ranks[0]["ddp"]["wire_same_data"]
        self.assertGreater(len(wire), SAME_DATA_STEPS, "expected several buckets in a step")
        self.assert_all_ranks_equal(lambda r: r["ddp"]["wire_same_data"], "DDP bucket on the wire")

    def test_hook_allreduce_equals_plain_allreduce_on_odd_sizes(self):
        torch = self.torch
        for (dtype, n), (_, plain, mean) in self.ranks[0]["hook_vs_plain"].items():
            with self.subTest(dtype=dtype, n=n):
                inputs = [rank["hook_vs_plain"][(dtype, n)][0].double() / WORLD for rank in self.ranks]
                rms = max(x.pow(2).mean().sqrt().item() for x in inputs)
                err = (mean.double() - plain.double()).abs()
                if dtype == "torch.float32":
                    self.assertLessEqual(err.max().item(), FP32_BOUND * rms)
                else:
                    eps = torch.finfo(mean.dtype).eps
                    worst = (err / (plain.double().abs() + rms)).max().item() / eps
                    self.assertLessEqual(worst, HALF_BOUND_EPS, f"{worst:.2f} eps")
                self.assertEqual((mean.dtype, mean.numel()), (plain.dtype, n))
        self.assert_all_ranks_equal(lambda r: [m for _, _, m in r["hook_vs_plain"].values()], "hook result")

    def assert_params_close(self, run):
        for r, rank in enumerate(self.ranks):
            for i, (p, q) in enumerate(zip(rank[run]["plain"], rank[run]["hooked"])):
                bound = PARAM_BOUND * p.abs().max().item()
                self.assertLessEqual((p - q).abs().max().item(), bound, f"{run} rank {r} parameter {i}")

    def test_ddp_with_the_hook_trains_like_plain_ddp(self):
        self.assert_params_close("ddp")
        self.assertEqual(self.ranks[0]["ddp"]["steps"], 4)

    def test_ddp_replicas_stay_identical(self):
        self.assert_all_ranks_equal(lambda r: r["ddp"]["hooked"], "DDP parameter")

    def test_fsdp1_reduce_scatter_hook_trains_like_plain_fsdp(self):
        self.assert_params_close("fsdp")
        self.assert_all_ranks_equal(lambda r: r["fsdp"]["hooked"], "FSDP parameter")
        self.assertEqual(self.ranks[0]["fsdp"]["calls"], 3)

    def test_different_seeds_are_refused_on_every_rank(self):
        for r, rank in enumerate(self.ranks):
            self.assertIsNotNone(rank["seed_mismatch"], f"rank {r} accepted a seed of its own")
            self.assertIn("different seeds", rank["seed_mismatch"])


if __name__ == "__main__":
    unittest.main()
