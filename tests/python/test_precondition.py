"""The hook's Adam-aware scaling (nccl_trim/precondition.py): the divisors, their exact round
trip, when an optimizer is bound, and the property it is for: a 1-bit trim's error lands in
proportion to each tensor's scale instead of spreading evenly over the row.
"""

import os
import unittest
from unittest import mock

from _support import OneRankGloo, require_libs, require_torch


def setUpModule():
    require_libs()
    global torch, DDP, nccl_trim, precondition, rht
    torch = require_torch()
    from torch.nn.parallel import DistributedDataParallel as DDP

    import nccl_trim
    from nccl_trim import precondition, rht


def one_bit_trim(x, lib, seed, packet=2048):
    """What a trimmed `rotated` row decodes to: rotate, replace every other packet of the rotated
    row by its signs times the row's mean magnitude (NCCL_TRIM_HEAD_SCALE=mse), rotate back."""
    y = x.clone()
    lib.forward_host(y.data_ptr(), y.numel(), rht.F32, 15, 0, seed)
    scale = y.abs().mean()
    for start in range(0, y.numel(), 2 * packet):
        seg = y[start:start + packet]
        seg.copy_(torch.where(seg >= 0, scale, -scale))
    lib.inverse_host(y.data_ptr(), y.numel(), rht.F32, 15, 0, seed)
    return y


class ScalesTest(unittest.TestCase):
    def test_divisors_are_powers_of_two_near_the_root_of_v_and_within_the_spread(self):
        g = torch.Generator().manual_seed(1)
        v = torch.rand(1001, generator=g).pow(6) * 1e-6  # many coordinates far below the mean
        v[:7] = 0.0
        d = precondition.scale_of(v)
        self.assertTrue(torch.equal(d, torch.exp2(torch.log2(d).round())), "every divisor is a power of two")
        m = v.mean().sqrt()
        s = precondition.SPREAD
        # Rounding to a power of two moves a value by at most a factor sqrt(2).
        self.assertTrue(bool((d >= m / s / 2**0.5).all()) and bool((d <= m * s * 2**0.5).all()))
        inside = (v.sqrt() > m / s) & (v.sqrt() < m * s)
        ratio = d[inside] / v.sqrt()[inside]
        self.assertTrue(bool((ratio >= 2**-0.5).all()) and bool((ratio <= 2**0.5).all()))
        self.assertTrue(torch.equal(precondition.scale_of(torch.zeros(5)), torch.ones(5)))

    def test_scaling_and_unscaling_give_the_exact_bits_back(self):
        g = torch.Generator().manual_seed(2)
        numels = [12, 5, 4]
        vs = [torch.rand(n, generator=g) * 1e-4 for n in numels]
        vs[1] = None  # no history: left alone
        d = precondition.divisors(vs, numels)
        self.assertTrue(torch.equal(d[12:17], torch.ones(5)))
        for dtype in (torch.float32, torch.bfloat16):
            buf = (torch.randn(21, generator=g) * 1e-3).to(dtype)
            before = buf.clone()
            precondition.apply(buf, d, forward=True)
            self.assertFalse(torch.equal(buf, before))
            precondition.apply(buf, d, forward=False)
            self.assertTrue(torch.equal(buf, before), dtype)

    def test_each_tensor_is_clamped_around_its_own_mean(self):
        # Two tensors 10^6 apart in one bucket: each keeps its own divisors (the same as alone).
        g = torch.Generator().manual_seed(4)
        a, b = torch.rand(300, generator=g), torch.rand(77, generator=g) * 1e-12
        d = precondition.divisors([a, b], [300, 77])
        self.assertTrue(torch.equal(d[:300], precondition.scale_of(a)))
        self.assertTrue(torch.equal(d[300:], precondition.scale_of(b)))

    def test_a_trims_error_follows_each_tensors_scale(self):
        # Two tensors in one row, gradients 1000x apart (a LayerNorm beside a big matrix). Without
        # scaling the small one receives its even share of the big one's error: relative error
        # ~sqrt(0.36/2) * 1000. Scaled by sqrt(v) (here v = g^2, clamped per tensor), each tensor's
        # relative error is the row's, ~0.4. The computation is deterministic (fixed seeds): it
        # gives 361 and 0.43 for the small tensor, 0.41 and 0.43 for the big one.
        lib = rht.load()
        g = torch.Generator().manual_seed(3)
        big, small = torch.randn(30000, generator=g), torch.randn(2768, generator=g) * 1e-3
        x = torch.cat([big, small])
        plain = one_bit_trim(x, lib, seed=7)
        d = precondition.divisors([big.pow(2), small.pow(2)], [big.numel(), small.numel()])
        y = x.clone()
        precondition.apply(y, d, forward=True)
        y = one_bit_trim(y, lib, seed=7)
        precondition.apply(y, d, forward=False)

        def rel(est):
            return ((est[30000:] - small).norm() / small.norm()).item()

        self.assertGreater(rel(plain), 50.0)
        self.assertLess(rel(y), 1.0)
        # The big tensor pays nothing for it.
        big_plain = ((plain[:30000] - big).norm() / big.norm()).item()
        big_scaled = ((y[:30000] - big).norm() / big.norm()).item()
        self.assertLess(big_scaled, 1.2 * big_plain)


class ModeTest(unittest.TestCase):
    def test_env_values(self):
        self.assertEqual(precondition.mode_from_env({}), "auto")
        self.assertEqual(precondition.mode_from_env({"NCCL_TRIM_HOOK_PRECONDITION": "off"}), "off")
        self.assertEqual(precondition.mode_from_env({"NCCL_TRIM_PHASE": "all"}), "off")
        with self.assertRaisesRegex(ValueError, "NCCL_TRIM_HOOK_PRECONDITION='adam' .* auto\\|off"):
            precondition.mode_from_env({"NCCL_TRIM_HOOK_PRECONDITION": "adam"})


class BindingTest(OneRankGloo):
    """register() on a one-rank gloo group: which optimizer scales the buckets, and from when."""

    def model(self):
        torch.manual_seed(0)
        return DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)))

    def train(self, model, opt, steps=3):
        grads = []
        for i in range(steps):
            opt.zero_grad()
            model(torch.randn(4, 8, generator=torch.Generator().manual_seed(i))).pow(2).mean().backward()
            grads.append([p.grad.clone() for p in model.parameters()])
            opt.step()
        return grads

    def test_auto_binds_an_adam_over_the_whole_model_after_its_first_step(self):
        m = self.model()
        state = nccl_trim.register(m)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        self.assertIsNone(state.preconditioner.optimizer)
        self.train(m, opt, steps=1)
        self.assertIs(state.preconditioner.optimizer, opt)

    def test_scaled_hook_gives_the_plain_gradients(self):
        plain, hooked = self.model(), self.model()
        state = nccl_trim.register(hooked)
        opt = torch.optim.Adam(hooked.parameters(), lr=1e-3)  # held: the binding is a weak reference
        a = self.train(plain, torch.optim.Adam(plain.parameters(), lr=1e-3), steps=4)
        b = self.train(hooked, opt, steps=4)
        self.assertIs(state.preconditioner.optimizer, opt)  # steps 2-4 were scaled
        # The bucket's layout was built once (its host-to-device copy must not recur every step).
        self.assertEqual(len(state.preconditioner._layouts), 1)
        for ga, gb in zip(a[-1], b[-1]):
            self.assertLessEqual((ga - gb).abs().max().item(), 1e-5 * ga.abs().max().item())

    def test_sgd_a_partial_optimizer_and_off_bind_nothing(self):
        m = self.model()
        state = nccl_trim.register(m)
        first = list(m.parameters())[:2]
        self.train(m, torch.optim.Adam(first, lr=1e-3), steps=1)  # covers part of the model
        self.assertIsNone(state.preconditioner.optimizer)
        self.assertFalse(state.preconditioner.settled)
        self.train(m, torch.optim.SGD(m.parameters(), lr=1e-3), steps=1)
        self.assertIsNone(state.preconditioner.optimizer)
        self.assertTrue(state.preconditioner.settled)
        with mock.patch.dict(os.environ, {"NCCL_TRIM_HOOK_PRECONDITION": "off"}):
            self.assertIsNone(nccl_trim.register(self.model()).preconditioner)

    def test_explicit_optimizer_is_checked(self):
        m = self.model()
        with self.assertRaisesRegex(ValueError, "does not hold every parameter"):
            nccl_trim.register(m, optimizer=torch.optim.Adam(list(m.parameters())[:1]))
        m = self.model()
        opt = torch.optim.Adam(m.parameters())
        self.assertIs(nccl_trim.register(m, optimizer=opt).preconditioner.optimizer, opt)


if __name__ == "__main__":
    unittest.main()
