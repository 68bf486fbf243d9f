"""Finding and loading the native libraries, and their errors: the paths, libtrim-rht's ctypes
binding (round trip on plain buffers, failures carry the library's reason), and the probe of the
plugin NCCL loaded. No torch."""

import array
import ctypes
import ctypes.util
import os
import shutil
import tempfile
import threading
import unittest
from unittest import mock

from _support import lib_dir, require_libs

import nccl_trim
from nccl_trim import coll, plugin, rht


class PathsTest(unittest.TestCase):
    def setUp(self):
        require_libs()

    def test_paths_come_from_the_override_directory(self):
        self.assertEqual(nccl_trim.plugin_path(), str((lib_dir() / "libnccl-net-trim.so").resolve()))
        self.assertEqual(nccl_trim.rht_library_path(), str((lib_dir() / "libtrim-rht.so").resolve()))

    def test_without_override_the_package_lib_dir_is_used(self):
        with mock.patch.dict(os.environ):
            os.environ.pop("NCCL_TRIM_LIB_DIR")
            self.assertEqual(nccl_trim.lib_dir().name, "lib")
            self.assertEqual(nccl_trim.lib_dir().parent.name, "nccl_trim")

    def test_a_missing_library_says_where_it_looked_and_what_to_do(self):
        with tempfile.TemporaryDirectory() as empty, mock.patch.dict(os.environ, {"NCCL_TRIM_LIB_DIR": empty}):
            with self.assertRaises(nccl_trim.LibraryError) as e:
                nccl_trim.plugin_path()
            self.assertIn(empty, str(e.exception))
            self.assertIn("make python-libs", str(e.exception))
            with self.assertRaisesRegex(nccl_trim.LibraryError, "libtrim-rht.so not found"):
                nccl_trim.rht_library_path()
            with self.assertRaises(nccl_trim.LibraryError):  # env() needs the plugin's path
                nccl_trim.env()


class RhtLibraryTest(unittest.TestCase):
    def setUp(self):
        require_libs()
        self.lib = rht.load()

    def test_host_round_trip_on_a_plain_buffer(self):
        values = [((i * 7919) % 1000) / 100.0 - 5.0 for i in range(1000)]
        buf = array.array("f", values)
        ptr, n = buf.buffer_info()
        seed = self.lib.bucket_seed(1, 2, 3)
        self.lib.forward_host(ptr, n, rht.F32, 15, 0, seed)
        self.assertNotEqual(list(buf)[:10], values[:10])
        self.lib.inverse_host(ptr, n, rht.F32, 15, 0, seed)
        self.assertLess(max(abs(a - b) for a, b in zip(buf, values)), 1e-5 * 5)

    def test_bucket_seeds_are_deterministic_and_distinct(self):
        seeds = {self.lib.bucket_seed(7, b, s) for b in range(4) for s in range(4)}
        self.assertEqual(len(seeds), 16)
        self.assertEqual(self.lib.bucket_seed(7, 1, 2), self.lib.bucket_seed(7, 1, 2))

    def test_failures_raise_with_the_library_reason(self):
        buf = array.array("d", [1.0])
        with self.assertRaisesRegex(rht.RhtError, "dtype 4 is not supported"):
            self.lib.forward_host(buf.buffer_info()[0], 1, 4, 15, 0, 1)
        with self.assertRaisesRegex(rht.RhtError, "row_log2 16 is out of range"):
            self.lib.forward_host(buf.buffer_info()[0], 1, rht.F32, 16, 0, 1)

    def test_gpu_availability_reports_why_not(self):
        ok, why = self.lib.cuda_available()
        if not ok:
            self.assertTrue(why, "cuda_available() said no without a reason")

    def test_loading_something_else_is_a_library_error(self):
        with self.assertRaisesRegex(nccl_trim.LibraryError, "cannot load"):
            rht.RhtLibrary("/nonexistent/libtrim-rht.so")
        with self.assertRaisesRegex(nccl_trim.LibraryError, "is not libtrim-rht"):
            rht.RhtLibrary(ctypes.util.find_library("m") or "libm.so.6")


class CollLibraryTest(unittest.TestCase):
    """libtrim-coll's binding, without torch: one rank is a local copy; errors carry the library's
    text and map to the package's exceptions."""

    def setUp(self):
        require_libs()
        self.lib = coll.load()

    def test_loading_something_else_is_a_library_error(self):
        with self.assertRaisesRegex(nccl_trim.LibraryError, "cannot load"):
            coll.CollLibrary("/nonexistent/libtrim-coll.so")
        with self.assertRaisesRegex(nccl_trim.LibraryError, "is not libtrim-coll"):
            coll.CollLibrary(ctypes.util.find_library("m") or "libm.so.6")

    def test_one_rank_reduces_locally_and_bad_arguments_are_unsupported(self):
        c = coll.Communicator(self.lib, rank=0, nranks=1, comm_id=1, name="test")
        try:
            c.connect(bytes(coll.HANDLE_BYTES), 1000)
            buf = array.array("f", [1.5, -2.0, 3.25])
            ptr, n = buf.buffer_info()
            c.all_reduce(ptr, n, coll.FLOAT32, coll.AVG, 1000)
            self.assertEqual(list(buf), [1.5, -2.0, 3.25])
            with self.assertRaisesRegex(nccl_trim.UnsupportedError, "unknown dtype 42"):
                c.all_reduce(ptr, n, 42, coll.SUM, 1000)
            with self.assertRaisesRegex(nccl_trim.UnsupportedError, "root 3"):
                c.broadcast(ptr, 12, 3, 1000)
        finally:
            c.close()
        c.close()  # idempotent

    def test_a_bad_plugin_is_a_plugin_error_naming_it(self):
        with self.assertRaisesRegex(nccl_trim.PluginError, "/nonexistent/libnccl-net-trim.so"):
            coll.Communicator(self.lib, rank=0, nranks=2, comm_id=1, plugin="/nonexistent/libnccl-net-trim.so")


class PluginProbeTest(unittest.TestCase):
    """plugin.loaded_plugin() sees only a plugin already loaded into the process (RTLD_NOLOAD)."""

    def setUp(self):
        require_libs()

    def test_not_loaded_is_a_plugin_error_that_says_how_to_fix_it(self):
        # A private copy (other tests load the build's): never loaded by anyone, so NOLOAD fails.
        built = lib_dir() / "libnccl-net-trim.so"
        with tempfile.TemporaryDirectory() as d, mock.patch.dict(os.environ, {"NCCL_TRIM_LIB_DIR": d}):
            copy = os.path.join(d, "libnccl-net-trim.so")
            shutil.copy(built, copy)
            with self.assertRaises(nccl_trim.PluginError) as e:
                plugin.loaded_plugin({"NCCL_NET_PLUGIN": copy, "NCCL_NET": "Trim"})
            self.assertIn("has not loaded", str(e.exception))
            self.assertIn("nccl_trim.env()", str(e.exception))

    def test_a_loaded_plugin_is_found_and_checked_for_the_hook_exports(self):
        path = nccl_trim.plugin_path()
        lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)  # as NCCL loads it
        # Every export the hook uses is there (a missing one is a broken build, never a skip).
        for name in ("nccl_trim_hook_abi", "nccl_trim_hook_traffic_class", "nccl_trim_hook_declare",
                     "nccl_trim_hook_comms", "nccl_trim_hook_send_conns", "nccl_trim_hook_undeclared_conns",
                     "nccl_trim_rotated_messages", "ncclTrimStatsJson"):
            self.assertTrue(hasattr(lib, name), f"{path} does not export {name}")
        found = plugin.loaded_plugin({"NCCL_NET_PLUGIN": path})
        self.assertEqual(found.traffic_class(), plugin.hook_traffic_class({}))

    def counters(self, found):
        return {"hook_comms": found.hook_comms(), "hook_send_conns": found.hook_send_conns(),
                "undeclared_conns": found.undeclared_conns(), "rotated_messages": found.rotated_messages()}

    def run_pair(self, traffic_class):
        """A 2-rank communicator in this process (a thread per rank) through the loaded plugin,
        one all_reduce of 1 MiB of float32 (rows above NCCL_TRIM_MIN_BYTES) and close."""
        lib = coll.load()
        comms = [coll.Communicator(lib, rank=r, nranks=2, comm_id=0x7e57 + traffic_class, traffic_class=traffic_class,
                                   name=f"counted {r}") for r in range(2)]
        bufs = [array.array("f", [float(r + 1)]) * (1 << 18) for r in range(2)]
        errors = []

        def rank(r):
            try:
                comms[r].connect(comms[1 - r].handle, 20000)
                ptr, n = bufs[r].buffer_info()
                comms[r].all_reduce(ptr, n, coll.FLOAT32, coll.SUM, 20000)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
        threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        try:
            self.assertFalse(any(t.is_alive() for t in threads), "the pair did not finish within 60 s")
            self.assertEqual(errors, [])
            self.assertEqual((bufs[0][0], bufs[1][-1]), (3.0, 3.0))
        finally:
            for c in comms:
                c.close()

    def test_the_hook_counters_count_the_hooks_class_and_nothing_else(self):
        # Process-wide counters (other tests of this process move them too): what one pair adds.
        path = nccl_trim.plugin_path()
        self.held = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)  # the object the pair's communicators load
        found = plugin.loaded_plugin({"NCCL_NET_PLUGIN": path})
        found.declare(found.traffic_class(), 15)  # as register() does (the default rows: 2^15)
        before = self.counters(found)
        self.run_pair(traffic_class=-1)
        self.assertEqual(self.counters(found), before, "an untagged communicator moved the hook's counters")
        self.run_pair(traffic_class=found.traffic_class())
        after = self.counters(found)
        delta = {k: after[k] - before[k] for k in after}
        rotated = delta.pop("rotated_messages")
        # Both ranks' communicators have the hook's class, and each sends over one connection, as
        # rotated (declared): none is counted as undeclared.
        self.assertEqual(delta, {"hook_comms": 2, "hook_send_conns": 2, "undeclared_conns": 0})
        self.assertGreater(rotated, 0, "nothing was sent as rotated")

    def test_the_declaration_checks_the_class_and_the_rows(self):
        found = plugin.loaded_plugin({"NCCL_NET_PLUGIN": nccl_trim.plugin_path()})
        with self.assertRaisesRegex(nccl_trim.RowMismatchError, r"2\^14 .*NCCL_TRIM_ROW_ELEMS is 32768"):
            found.declare(116, 14)
        with self.assertRaisesRegex(nccl_trim.PluginError, r"class 117.*NCCL_TRIM_HOOK_TRAFFIC_CLASS is 116"):
            found.declare(117, 15)
        with mock.patch.dict(os.environ, {"NCCL_TRIM_ROW_ELEMS": "4096"}):
            with self.assertRaisesRegex(nccl_trim.RowMismatchError, r"row_log2=15.*NCCL_TRIM_ROW_ELEMS is 4096"):
                found.declare(116, 15)
            found.declare(116, 12)
        found.declare(116, 15)  # idempotent; the hook declares at every register()

    def test_a_plugin_without_the_declaration_is_refused(self):
        # A plugin of hook ABI 1 (before the declaration existed): its rotated path trusted any tag.
        fake = mock.Mock(spec=["nccl_trim_hook_abi"])
        fake.nccl_trim_hook_abi = mock.Mock(return_value=1)
        with self.assertRaisesRegex(nccl_trim.PluginError, "hook ABI 1, this package speaks 2"):
            plugin.LoadedPlugin(fake, "old.so")
        fake = mock.Mock(spec=["nccl_trim_hook_abi", "nccl_trim_hook_traffic_class"])
        fake.nccl_trim_hook_abi = mock.Mock(return_value=2)
        with self.assertRaisesRegex(nccl_trim.PluginError, "lacks one of its exports"):
            plugin.LoadedPlugin(fake, "broken.so")

    def test_traffic_class_comes_from_the_environment(self):
        self.assertEqual(plugin.hook_traffic_class({}), 116)
        self.assertEqual(plugin.hook_traffic_class({"NCCL_TRIM_HOOK_TRAFFIC_CLASS": "0x20"}), 32)
        for bad in ("x", "256", "-1"):
            with self.assertRaises(nccl_trim.PluginError):
                plugin.hook_traffic_class({"NCCL_TRIM_HOOK_TRAFFIC_CLASS": bad})


class ImportTest(unittest.TestCase):
    def test_importing_the_package_does_not_import_torch(self):
        import subprocess
        import sys
        code = "import sys, nccl_trim, nccl_trim.run, nccl_trim.launch_args; print('torch' in sys.modules)"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        self.assertEqual(out.stdout.strip(), "False")


if __name__ == "__main__":
    unittest.main()
