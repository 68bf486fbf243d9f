"""The rotation and the hook in one process (torch on CPU, the host twin): round-trip bounds per
dtype and size, register()'s checks and errors, and the bootstrap's DDP patch. The checks that
need NCCL run against fakes of the loaded plugin.

Round-trip bounds (forward then inverse, x of RMS rms, eps = torch.finfo(dtype).eps):
  float32:         max |x' - x| <= 1e-5 * rms   (seen: <= 9.6 eps * rms = 1.1e-6 * rms; 15 butterfly
                   stages in rows of 2^15)
  bfloat16/fp16:   |x'_i - x_i| <= 2 eps * (|x_i| + rms)  (seen: <= 1.04 eps): the result is
                   rounded to the dtype twice, once rotated (that error spreads over the row as noise
                   of ~eps/(2 sqrt 3) * rms) and once on the way out (<= eps/2 * |x_i|).
"""

import logging
import os
import unittest
from unittest import mock

from _support import OneRankGloo, require_libs, require_torch

SIZES = (1, 3, 1000, 32768, 32769, 100003)
FP32_BOUND = 1e-5
HALF_BOUND_EPS = 2.0


def setUpModule():
    require_libs()
    global torch, dist, DDP, nccl_trim, hook, rht, _boot
    torch = require_torch()
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import nccl_trim
    from nccl_trim import _boot, hook, rht


class RoundTripTest(unittest.TestCase):
    def round_trip(self, x, row_log2=15, seed=99):
        lib = rht.load()
        code = {torch.float32: rht.F32, torch.bfloat16: rht.BF16, torch.float16: rht.F16}[x.dtype]
        y = x.clone()
        lib.forward_host(y.data_ptr(), y.numel(), code, row_log2, 0, seed)
        rotated = y.clone()
        lib.inverse_host(y.data_ptr(), y.numel(), code, row_log2, 0, seed)
        return rotated, y

    def test_round_trip_within_bounds(self):
        g = torch.Generator().manual_seed(5)
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            for n in SIZES:
                for shape in ("normal", "heavy-tailed"):
                    x = torch.randn(n, generator=g, dtype=torch.float64)
                    if shape == "heavy-tailed":
                        x *= 10 * torch.rand(n, generator=g, dtype=torch.float64).pow(4)
                    x = x.to(dtype)
                    with self.subTest(dtype=dtype, n=n, shape=shape):
                        rotated, back = self.round_trip(x)
                        xd, err = x.double(), (back.double() - x.double()).abs()
                        rms = xd.pow(2).mean().sqrt().item()
                        if dtype == torch.float32:
                            self.assertLessEqual(err.max().item(), FP32_BOUND * rms)
                            # orthogonal: the norm is kept
                            self.assertAlmostEqual(rotated.double().norm().item() / xd.norm().item(), 1.0, delta=1e-5)
                        else:
                            eps = torch.finfo(dtype).eps
                            worst = (err / (xd.abs() + rms)).max().item() / eps
                            self.assertLessEqual(worst, HALF_BOUND_EPS, f"{worst:.2f} eps")

    def test_every_row_size(self):
        x = torch.randn(3000, generator=torch.Generator().manual_seed(1))
        for row_log2 in (0, 1, 8, 12, 15):
            with self.subTest(row_log2=row_log2):
                rotated, back = self.round_trip(x, row_log2=row_log2)
                self.assertLessEqual((back - x).abs().max().item(), FP32_BOUND * x.pow(2).mean().sqrt().item())
                if row_log2 > 0:
                    self.assertFalse(torch.equal(rotated, x))

    def test_seeds_change_the_rotation(self):
        x = torch.randn(4096, generator=torch.Generator().manual_seed(2))
        self.assertFalse(torch.equal(self.round_trip(x, seed=1)[0], self.round_trip(x, seed=2)[0]))
        self.assertTrue(torch.equal(self.round_trip(x, seed=1)[0], self.round_trip(x, seed=1)[0]))


class OneRankTest(OneRankGloo):
    """register() on a one-rank gloo group in this process."""

    def model(self, dtype=None):
        torch.manual_seed(0)
        return DDP(torch.nn.Linear(5, 3).to(dtype or torch.float32))

    def step(self, model):
        model.zero_grad()
        model(torch.ones(2, 5, dtype=next(model.parameters()).dtype)).sum().backward()
        return [p.grad.clone() for p in model.parameters()]

    def test_hook_gives_the_plain_gradients(self):
        plain, hooked = self.model(), self.model()
        state = nccl_trim.register(hooked)
        self.assertIs(hooked._nccl_trim_state, state)
        for _ in range(2):
            for a, b in zip(self.step(plain), self.step(hooked)):
                self.assertLessEqual((a - b).abs().max().item(), 1e-5 * a.abs().max().item())
        self.assertEqual(state.step, 2)

    def test_unsupported_dtype_goes_through_untouched_and_is_logged_once(self):
        plain, hooked = self.model(torch.float64), self.model(torch.float64)
        nccl_trim.register(hooked)
        with self.assertLogs("nccl_trim", logging.WARNING) as logs:
            for _ in range(3):
                for a, b in zip(self.step(plain), self.step(hooked)):
                    self.assertTrue(torch.equal(a, b))
        self.assertEqual(len(logs.records), 1)
        self.assertIn("torch.float64 gradients are not rotated", logs.output[0])

    def test_register_refuses_what_it_cannot_do(self):
        with self.assertRaisesRegex(TypeError, "DistributedDataParallel or FullyShardedDataParallel"):
            nccl_trim.register(torch.nn.Linear(2, 2))
        with self.assertRaisesRegex(ValueError, "row_log2=16"):
            nccl_trim.register(self.model(), row_log2=16)
        with self.assertRaisesRegex(nccl_trim.PluginError, "uses gloo"):
            nccl_trim.register(self.model(), require_plugin=True)
        model = self.model()
        nccl_trim.register(model)
        with self.assertRaisesRegex(nccl_trim.HookConflictError, "already has a communication hook"):
            nccl_trim.register(model)
        builtin = self.model()
        builtin._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)
        with self.assertRaisesRegex(nccl_trim.HookConflictError, "already has a communication hook"):
            nccl_trim.register(builtin)

    def test_on_a_trim_group_the_hook_declares_and_refuses_other_rows(self):
        # A one-rank trim group in this process: register() declares the class to the plugin the
        # trim backend loaded (before it makes the tagged group); rows other than the plugin's
        # are an error even with require_plugin=False (it would not be a missing plugin, but
        # silent inaccuracy).
        from nccl_trim import backend, plugin
        backend.register()
        group = dist.new_group([0], backend="trim")
        model = DDP(torch.nn.Linear(5, 3), process_group=group)
        with self.assertRaisesRegex(nccl_trim.RowMismatchError, r"2\^12 .*NCCL_TRIM_ROW_ELEMS is 32768"):
            nccl_trim.register(model, row_log2=12, require_plugin=False)
        comms = plugin.loaded_plugin().hook_comms()
        state = nccl_trim.register(model)
        self.assertEqual(state.hook_group._get_backend(torch.device("cpu")).trim_options.traffic_class, 116)
        self.assertEqual(plugin.loaded_plugin().hook_comms(), comms + 1)
        self.step(model)
        self.assertEqual(state.step, 1)

    def test_error_feedback_keeps_one_rotation_per_bucket_on_trim_groups_only(self):
        # NCCL_TRIM_ERROR_FEEDBACK=1: the plugin adds a bucket's residual, in its step's rotated
        # domain, to the next step's bucket, so both must share the rotation; only the trim
        # backend's collectives feed back (under NCCL and gloo the rotation keeps changing).
        from nccl_trim import backend
        backend.register()
        group = dist.new_group([0], backend="trim")
        with mock.patch.dict(os.environ, {"NCCL_TRIM_ERROR_FEEDBACK": "1"}):
            fed_model, plain_model = DDP(torch.nn.Linear(5, 3), process_group=group), self.model()
            fed, plain = nccl_trim.register(fed_model), nccl_trim.register(plain_model)
        self.assertTrue(fed.fixed_rotation)
        self.assertFalse(plain.fixed_rotation)
        for state, model, steps in ((fed, fed_model, [0, 0, 0]), (plain, plain_model, [0, 1, 2])):
            real = state.lib.bucket_seed
            with mock.patch.object(state.lib, "bucket_seed", side_effect=real) as seed:
                for _ in range(3):
                    self.step(model)
            self.assertEqual([c.args[2] for c in seed.call_args_list], steps)
        dist.destroy_process_group(fed.hook_group)  # the next test makes its own tagged group

    def test_register_takes_a_restored_state_and_checks_it(self):
        import pickle
        first = self.model()
        state = nccl_trim.register(first, seed=5)
        self.step(first)
        restored = pickle.loads(pickle.dumps(state))
        self.assertFalse(restored.bound)
        with self.assertRaisesRegex(ValueError, "differs from the restored state's job seed 5"):
            nccl_trim.register(self.model(), seed=6, state=restored)
        with self.assertRaisesRegex(ValueError, "row_log2=12 differs"):
            nccl_trim.register(self.model(), row_log2=12, state=restored)
        with self.assertRaisesRegex(TypeError, "must be an RhtState"):
            nccl_trim.register(self.model(), state={"step": 1})
        with self.assertRaisesRegex(nccl_trim.TrimError, r"register\(model, state=state\)"):
            hook.fsdp_rht_hook(restored, torch.ones(3))
        again = self.model()
        self.assertIs(nccl_trim.register(again, state=restored), restored)
        self.step(again)
        self.assertEqual((restored.step, restored.job_seed), (2, 5))

    def test_bootstrap_installs_the_hook_and_lets_the_scripts_own_win(self):
        import warnings

        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        uninstall = _boot.install()
        try:
            model = self.model()
            self.assertIsInstance(model._nccl_trim_state, hook.RhtState)
            self.assertEqual([h for h, _ in model._comm_hooks], [hook.rht_hook])
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                model.register_comm_hook(None, default_hooks.allreduce_hook)
            texts = [str(w.message) for w in caught if issubclass(w.category, nccl_trim.HookOverrideWarning)]
            self.assertEqual(len(texts), 1, [str(w.message) for w in caught])
            # Names both hooks, says how to keep ours and how to silence it.
            self.assertRegex(texts[0], r"allreduce_hook.*rht_hook.*drop the script's register_comm_hook.*--no-hook")
            self.assertIsNone(model._nccl_trim_state)
            self.assertEqual(model._comm_hooks, [(default_hooks.allreduce_hook, None)])
            self.step(model)  # the script's hook runs (a one-rank group: the gradient is its own)
            with self.assertRaisesRegex(RuntimeError, "only be called once"):  # torch's own rule, from here on
                model.register_comm_hook(None, default_hooks.allreduce_hook)
            builtin = self.model()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                builtin._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)
            self.assertTrue(any("ALLREDUCE" in str(w.message) for w in caught), [str(w.message) for w in caught])
            self.assertIsNone(builtin._nccl_trim_state)
            self.step(builtin)
        finally:
            uninstall()
        model = self.model()
        self.assertFalse(hasattr(model, "_nccl_trim_state"))
        model.register_comm_hook(None, default_hooks.allreduce_hook)  # a plain DDP again


class NcclChecksTest(unittest.TestCase):
    """The NCCL-side checks of register(), against fakes (no GPU here)."""

    def test_nccl_without_per_communicator_init_is_too_old(self):
        with mock.patch.object(torch.cuda.nccl, "version", return_value=(2, 27, 7)):
            with self.assertRaisesRegex(nccl_trim.NcclTooOldError, r"NCCL 2\.27\.7.*>= 2\.28"):
                hook._check_nccl()

    def test_plugin_that_tags_another_class(self):
        fake = mock.Mock(traffic_class=mock.Mock(return_value=117), hook_comms=mock.Mock(return_value=1))
        with mock.patch.object(hook, "loaded_plugin", return_value=fake):
            with self.assertRaisesRegex(nccl_trim.PluginError, "class 117 .* tagged 116"):
                hook._verify_plugin(116, 0)

    def test_plugin_that_never_saw_the_hook_communicator(self):
        fake = mock.Mock(traffic_class=mock.Mock(return_value=116), hook_comms=mock.Mock(return_value=3))
        fake.name = "libnccl-net-trim.so"
        with mock.patch.object(hook, "loaded_plugin", return_value=fake):
            with self.assertRaisesRegex(nccl_trim.PluginError, "chose another network"):
                hook._verify_plugin(116, 3)
            hook._verify_plugin(116, 2)  # grew: fine
            hook._verify_plugin(116, None)  # a cached group: checked when it was made

    def test_a_library_without_gpu_kernels_is_refused_for_cuda_models(self):
        lib = rht.load()
        if lib.cuda_available()[0]:
            self.skipTest("this libtrim-rht has working GPU functions")
        with self.assertRaisesRegex(nccl_trim.LibraryError, "cannot rotate on the GPU"):
            hook._require_gpu_rotation(lib)


if __name__ == "__main__":
    unittest.main()
