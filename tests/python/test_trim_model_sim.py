"""The offline trim model (bench/trim_model.py): its rotation is orthonormal, and each way it
decodes a trimmed row has the error a Gaussian row must give (the model's conclusions in
docs/RESULTS.md rest on these). Rows of 2^15 Gaussian values: each error fraction below is an
average over >= 2^17 elements, its standard error < 0.003, and every bound is >= 5 of those away.
"""

import importlib
import math
import unittest

from _support import require_torch


def setUpModule():
    global torch, sim
    torch = require_torch()
    sim = importlib.import_module("bench.trim_model")  # after require_torch: it imports torch


def gaussian_rows(n_rows, seed):
    return torch.randn(n_rows * (1 << 15), generator=torch.Generator().manual_seed(seed))


def error_fraction(head, x):
    """||estimate - x||^2 / ||x||^2 over whole rows, every element trimmed."""
    est = torch.cat([sim.estimate(x[r:r + sim.ROW], head) for r in range(0, x.numel(), sim.ROW)])
    return ((est - x).pow(2).sum() / x.pow(2).sum()).item()


class RotationTest(unittest.TestCase):
    def test_round_trip_and_norm_on_an_odd_size(self):
        # 40001 = one row of 2^15, then blocks of 4096, 2048, 1024, 64 and 1
        x = torch.randn(40001, generator=torch.Generator().manual_seed(3))
        y = sim.rotate(x, 77)
        self.assertAlmostEqual(y.norm().item() / x.norm().item(), 1.0, delta=1e-5)  # nothing padded or lost
        back = sim.rotate(y, 77, inverse=True)
        self.assertLess((back - x).abs().max().item(), 1e-5)
        self.assertGreater((sim.rotate(x, 78) - y).abs().max().item(), 0.1)  # the seed matters


class EstimateTest(unittest.TestCase):
    def test_each_head_has_its_gaussian_error(self):
        x = gaussian_rows(4, seed=11)
        expected = {
            "exact": 0.0,
            "1": 1 - 2 / math.pi,          # 0.363: sign x mean|x|
            "1u": math.pi / 2 - 1,         # 0.571: sign x ||x||^2/||x||_1
            "2": 0.1175,                   # the 4-level Lloyd-Max quantizer
            "shrink": (1 - 2 / math.pi) ** 2,  # 0.132: x x 2/pi
        }
        for head, want in expected.items():
            with self.subTest(head=head):
                self.assertAlmostEqual(error_fraction(head, x), want, delta=0.015)

    def test_side_info_helps_with_a_correlated_own_chunk_and_costs_nothing_without(self):
        gen = torch.Generator().manual_seed(5)
        sent = torch.randn(1 << 15, generator=gen)
        mask = torch.ones(sent.numel(), dtype=torch.bool)
        plain = sim.estimate(sent, "1")
        correlated = sent + 0.3 * torch.randn(sent.numel(), generator=gen)  # rho ~ 0.96
        independent = torch.randn(sent.numel(), generator=gen)
        err = lambda est: (est - sent).pow(2).mean().item()
        self.assertLess(err(sim.side_info_estimate(plain, mask, correlated, "1")), 0.35 * err(plain))
        self.assertLess(err(sim.side_info_estimate(plain, mask, independent, "1")), 1.05 * err(plain))

    def test_trim_rate_zero_keeps_the_message_and_one_trims_every_element(self):
        x = gaussian_rows(2, seed=9)
        gen = torch.Generator().manual_seed(1)
        self.assertTrue(torch.equal(sim.trim_message(x, x, 0.0, "1", 2200, gen), x))
        all_trimmed = sim.trim_message(x, x, 1.0, "1", 2200, gen)
        self.assertEqual(all_trimmed[:sim.ROW].abs().unique().numel(), 1)  # +-mean|row| only


if __name__ == "__main__":
    unittest.main()
