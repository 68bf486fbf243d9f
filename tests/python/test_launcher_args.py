"""python -m nccl_trim.run's command line: our options beside torchrun's, what the workers run,
and the bootstrap's own parsing. The pure parts run without torch on a parser of torchrun's shape;
one test checks against torch's real parser."""

import argparse
import unittest

from _support import require_torch

from nccl_trim import _boot, launch_args


def torchrun_like() -> argparse.ArgumentParser:
    """The shape of torch.distributed.run.get_args_parser(): options, then the script, then
    REMAINDER for the script's arguments."""
    p = argparse.ArgumentParser()
    p.add_argument("--nproc-per-node", "--nproc_per_node", default="1")
    p.add_argument("--standalone", action="store_true")
    p.add_argument("-m", "--module", action="store_true")
    p.add_argument("--no-python", "--no_python", action="store_true")
    p.add_argument("--run-path", "--run_path", action="store_true")
    p.add_argument("training_script")
    p.add_argument("training_script_args", nargs=argparse.REMAINDER)
    return p


def parse(argv):
    args = launch_args.add_options(torchrun_like()).parse_args(argv)
    return args, launch_args.take_options(args)


class LauncherArgsTest(unittest.TestCase):
    def test_our_options_mix_with_torchruns_before_the_script(self):
        args, opts = parse(["--trim-scheme", "sd", "--nproc-per-node", "2", "--trim-env", "head_bits=16",
                            "--trim-env", "NCCL_TRIM_MTU=1500", "--trim-seed", "0x10", "--trim-row-log2", "12",
                            "train.py", "--lr", "0.1"])
        self.assertEqual(args.nproc_per_node, "2")
        self.assertEqual((args.training_script, args.training_script_args), ("train.py", ["--lr", "0.1"]))
        self.assertEqual(opts.trim_env, {"scheme": "sd", "head_bits": "16", "mtu": "1500"})
        self.assertEqual((opts.hook, opts.seed, opts.row_log2, opts.override_env), (True, 16, 12, False))
        self.assertFalse([k for k in vars(args) if k.startswith("trim_")], "our options left in torchrun's namespace")

    def test_options_after_the_script_belong_to_the_script(self):
        args, opts = parse(["train.py", "--no-hook", "--trim-scheme", "x"])
        self.assertEqual(args.training_script_args, ["--no-hook", "--trim-scheme", "x"])
        self.assertTrue(opts.hook)
        self.assertEqual(opts.trim_env, {})

    def test_bad_values_are_refused_by_the_parser(self):
        for argv in (["--trim-env", "head_bits", "t.py"], ["--trim-row-log2", "16", "t.py"]):
            with self.assertRaises(SystemExit), self._quiet():
                parse(argv)

    def test_workers_start_through_the_bootstrap(self):
        args, opts = parse(["--trim-seed", "5", "--trim-optional-plugin", "train.py", "a", "--b"])
        launch_args.wrap_worker(args, opts, "/pkg/_boot.py")
        self.assertTrue(args.module)
        self.assertEqual(args.training_script, "nccl_trim._boot")
        self.assertEqual(args.training_script_args, ["--seed=5", "--optional-plugin", "--", "train.py", "a", "--b"])

    def test_a_module_target_and_run_path(self):
        args, opts = parse(["-m", "pkg.train", "x"])
        launch_args.wrap_worker(args, opts, "/pkg/_boot.py")
        self.assertEqual((args.training_script, args.training_script_args),
                         ("nccl_trim._boot", ["--module", "--", "pkg.train", "x"]))
        args, opts = parse(["--run-path", "train.py"])
        launch_args.wrap_worker(args, opts, "/pkg/_boot.py")
        self.assertEqual((args.training_script, args.module), ("/pkg/_boot.py", False))

    def test_no_hook_leaves_the_command_alone_and_no_python_needs_it(self):
        args, opts = parse(["--no-hook", "--no-python", "./run.sh"])
        launch_args.wrap_worker(args, opts, "/pkg/_boot.py")
        self.assertEqual((args.training_script, args.training_script_args, args.module), ("./run.sh", [], False))
        args, opts = parse(["--no-python", "./run.sh"])
        with self.assertRaisesRegex(SystemExit, "--no-hook"):
            launch_args.wrap_worker(args, opts, "/pkg/_boot.py")

    def test_trim_cpu_goes_through_the_bootstrap_with_or_without_the_hook(self):
        args, opts = parse(["--trim-cpu", "train.py", "a"])
        self.assertTrue(opts.cpu and opts.hook)
        launch_args.wrap_worker(args, opts, "/pkg/_boot.py")
        self.assertEqual(args.training_script_args, ["--trim-cpu", "--", "train.py", "a"])
        args, opts = parse(["--trim-cpu", "--no-hook", "train.py"])
        launch_args.wrap_worker(args, opts, "/pkg/_boot.py")
        self.assertEqual((args.training_script, args.training_script_args),
                         ("nccl_trim._boot", ["--trim-cpu", "--no-hook", "--", "train.py"]))
        args, opts = parse(["--trim-cpu", "--no-hook", "--no-python", "./run.sh"])
        with self.assertRaisesRegex(SystemExit, "--trim-cpu"):
            launch_args.wrap_worker(args, opts, "/pkg/_boot.py")

    def test_no_clash_with_torchruns_real_parser(self):
        require_torch()
        from torch.distributed.run import get_args_parser
        theirs = {s for a in get_args_parser()._actions for s in a.option_strings}
        self.assertFalse({s for s in theirs if s.startswith("--trim") or s == "--no-hook"})
        parser = launch_args.add_options(get_args_parser())  # argparse raises on a clash
        args = parser.parse_args(["--nproc-per-node", "2", "--no-hook", "train.py", "--trim-seed", "1"])
        opts = launch_args.take_options(args)
        self.assertFalse(opts.hook)
        self.assertEqual(args.training_script_args, ["--trim-seed", "1"])

    @staticmethod
    def _quiet():
        import contextlib
        import io
        return contextlib.redirect_stderr(io.StringIO())


class BootArgsTest(unittest.TestCase):
    def test_options_then_target(self):
        opts, target, args = _boot.parse(["--seed=7", "--row-log2=10", "--module", "--", "pkg.m", "--seed=1"])
        self.assertEqual((opts["seed"], opts["row_log2"], opts["module"]), (7, 10, True))
        self.assertEqual((target, args), ("pkg.m", ["--seed=1"]))

    def test_trim_cpu_maps_gloo_to_trim_everywhere_it_is_named(self):
        cases = {None: ("trim", "cpu:trim,cuda:nccl"), "gloo": ("trim", "trim"), "GLOO": ("trim", "trim"),
                 "cpu:gloo,cuda:nccl": ("cpu:trim,cuda:nccl", "cpu:trim,cuda:nccl"), "nccl": ("nccl", "nccl"),
                 "cuda:nccl,cpu:gloo": ("cuda:nccl,cpu:trim", "cuda:nccl,cpu:trim"), "mpi": ("mpi", "mpi")}
        for asked, (cpu_only, with_cuda) in cases.items():
            self.assertEqual(_boot.cpu_backend(asked, False), cpu_only, asked)
            self.assertEqual(_boot.cpu_backend(asked, True), with_cuda, asked)
        opts, target, _ = _boot.parse(["--trim-cpu", "--no-hook", "t.py"])
        self.assertTrue(opts["cpu"] and opts["no_hook"])

    def test_plain_script_and_errors(self):
        self.assertEqual(_boot.parse(["train.py", "-x"])[1:], ("train.py", ["-x"]))
        with self.assertRaisesRegex(SystemExit, "unknown option"):
            _boot.parse(["--bogus", "train.py"])
        with self.assertRaisesRegex(SystemExit, "no script"):
            _boot.parse(["--seed=1", "--"])


if __name__ == "__main__":
    unittest.main()
