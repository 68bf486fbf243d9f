"""nccl_trim.env() / apply_env(): the NCCL settings that route NCCL through the plugin. No torch."""

import os
import unittest
from unittest import mock

from _support import lib_dir, require_libs

import nccl_trim


class EnvTest(unittest.TestCase):
    def setUp(self):
        require_libs()
        self.plugin = str((lib_dir() / "libnccl-net-trim.so").resolve())

    def test_defaults_name_the_plugin_by_absolute_path_and_force_the_net(self):
        settings = nccl_trim.env(environ={})
        self.assertEqual(settings, {"NCCL_NET_PLUGIN": self.plugin, "NCCL_NET": "Trim"})
        self.assertTrue(os.path.isabs(settings["NCCL_NET_PLUGIN"]))

    def test_keywords_become_nccl_trim_variables(self):
        settings = nccl_trim.env(environ={}, scheme="rht", head_bits=16, tuner=False, switch="127.0.0.1:9")
        self.assertEqual(settings["NCCL_TRIM_SCHEME"], "rht")
        self.assertEqual(settings["NCCL_TRIM_HEAD_BITS"], "16")
        self.assertEqual(settings["NCCL_TRIM_TUNER"], "0")
        self.assertEqual(settings["NCCL_TRIM_SWITCH"], "127.0.0.1:9")

    def test_values_already_set_win_unless_overridden(self):
        user = {"NCCL_NET": "Socket", "NCCL_TRIM_SCHEME": "sd"}
        kept = nccl_trim.env(environ=user, scheme="rht")
        self.assertEqual((kept["NCCL_NET"], kept["NCCL_TRIM_SCHEME"]), ("Socket", "sd"))
        forced = nccl_trim.env(environ=user, override=True, scheme="rht")
        self.assertEqual((forced["NCCL_NET"], forced["NCCL_TRIM_SCHEME"]), ("Trim", "rht"))

    def test_bad_knob_names_are_refused(self):
        for bad in ("Scheme", "nccl-x", "_x"):
            with self.assertRaisesRegex(ValueError, "not a knob name"):
                nccl_trim.env(environ={}, **{bad: 1})

    def test_apply_env_sets_the_environment(self):
        target = {"NCCL_TRIM_SCHEME": "sd"}
        settings = nccl_trim.apply_env(environ=target, scheme="rht", mtu=1500)
        self.assertEqual(target, {**settings, "NCCL_TRIM_SCHEME": "sd"})
        self.assertEqual(target["NCCL_TRIM_MTU"], "1500")
        with mock.patch.dict(os.environ, {}, clear=True):
            os.environ["NCCL_TRIM_LIB_DIR"] = str(lib_dir())
            nccl_trim.apply_env()
            self.assertEqual(os.environ["NCCL_NET_PLUGIN"], self.plugin)


if __name__ == "__main__":
    unittest.main()
