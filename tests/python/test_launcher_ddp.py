"""DDP as python -m nccl_trim.run patches it (nccl_trim._boot.install, what every worker runs), on
2 gloo ranks on CPU with the RHT hook (the host twin), in the ways users build and use DDP
(_launcher_worker.py is what each rank runs; spawned once for the class):

- gradient_as_bucket_view, static_graph, find_unused_parameters, no_sync and Join (uneven
  inputs): the hooked run's parameters are within 1e-5 x max|p| of plain DDP's (the hook only
  rounds differently: see test_hook_gloo.py), its replicas are bitwise identical, and the hook
  ran (its step count is that of the synchronised backward passes);
- a DDP built inside a library that imported the class by name before the patch, and a subclass
  the library defined then: both get the hook;
- an RhtState through a checkpoint (torch.save / torch.load with weights_only=True, and pickle):
  restored unbound with its seed, rows and step; register(state=...) goes on from that step, and
  the resumed run ends within the bound of the run without a break; ranks that restore different
  steps are refused on every rank;
- process groups destroyed and made again (the trim backend, whose hook groups are cached): a new
  init gets a new hook group (a new tagged communicator, counted by the plugin) and the destroyed
  one is dropped from the cache; a hook group destroyed alone is replaced, a live one reused.
"""

import unittest

from _support import SpawnedRanks

WORLD = 2
PARAM_BOUND = 1e-5


class PatchedDdpTest(SpawnedRanks):
    WORKER, WORLD, WEIGHTS_ONLY = "_launcher_worker", WORLD, False

    def assert_close(self, got, want, what):
        for i, (p, q) in enumerate(zip(got, want)):
            bound = PARAM_BOUND * q.abs().max().item()
            self.assertLessEqual((p - q).abs().max().item(), bound, f"{what}: parameter {i}")

    def test_ddp_options_and_join_with_the_patched_hook(self):
        # Synchronised backward passes: 4 steps; no_sync: 2 of 4 backwards; Join: rank 1's 5
        # steps, matched by rank 0's shadow of the last 2 (which runs the hook on zeros).
        steps = {"gradient_as_bucket_view": 4, "static_graph": 4, "find_unused_parameters": 4, "no_sync": 2,
                 "join": 5}
        for name, want_steps in steps.items():
            with self.subTest(feature=name):
                for r, rank in enumerate(self.ranks):
                    self.assertIsNone(rank["plain"][name]["step"])
                    self.assertEqual(rank["hooked"][name]["step"], want_steps, f"rank {r}")
                    self.assert_close(rank["hooked"][name]["params"], rank["plain"][name]["params"], f"rank {r}")
                for a, b in zip(self.ranks[0]["hooked"][name]["params"], self.ranks[1]["hooked"][name]["params"]):
                    self.assertTrue(self.torch.equal(a, b), "hooked replicas differ")

    def test_a_library_ddp_made_with_a_name_imported_before_the_patch_is_hooked(self):
        for name in ("by_name", "subclass"):
            with self.subTest(made=name):
                for r, rank in enumerate(self.ranks):
                    lib = rank["library"][name]
                    self.assertTrue(lib["hooked"], f"rank {r}: no hook")
                    self.assertEqual(lib["step"], 2, f"rank {r}")
                self.assertEqual(self.ranks[0]["library"][name]["hash"], self.ranks[1]["library"][name]["hash"])
        self.assertTrue(self.ranks[0]["library"]["subclass"]["library_ready"], "the subclass's own __init__ did not finish")

    def test_rht_state_survives_a_checkpoint(self):
        for r, rank in enumerate(self.ranks):
            c = rank["checkpoint"]
            self.assertEqual(c["restored"], (False, 77, 15, 2), f"rank {r}: restored (bound, seed, rows, step)")
            self.assertIn("register(model, state=state)", c["unbound_use"] or "", f"rank {r}")
            self.assertTrue(c["same_object"], f"rank {r}")
            self.assertEqual(c["step"], 4, f"rank {r}: the resumed hook did not go on from step 2")
            self.assert_close(c["resumed"], c["whole"], f"rank {r}: resumed vs unbroken")
            self.assertEqual(c["pickled"], (False, 77, 15, 4), f"rank {r}: pickle round trip")
            self.assertIn("different steps", c["step_mismatch"] or "", f"rank {r}: a step mismatch went through")
        self.assertEqual(self.ranks[0]["checkpoint"]["resumed_hash"], self.ranks[1]["checkpoint"]["resumed_hash"])

    def test_destroyed_process_groups_never_leave_a_stale_hook_group(self):
        for r, rank in enumerate(self.ranks):
            rc = rank["recreate"]
            for n in ("round0", "round1"):
                self.assertEqual(rc[n]["new_comms"], 1, f"rank {r} {n}: the plugin saw no new hook communicator")
                self.assertEqual(rc[n]["step"], 2, f"rank {r} {n}")
                self.assertTrue(rc[n]["live"], f"rank {r} {n}")
            self.assertTrue(rc["fresh_after_reinit"], f"rank {r}: a destroyed hook group was reused")
            self.assertTrue(rc["destroyed_forgotten"], f"rank {r}: the cache still holds a destroyed group")
            after = rc["after_hook_group_destroyed"]
            self.assertTrue(after["new_group"], f"rank {r}: the destroyed hook group was reused")
            self.assertEqual(after["new_comms"], 1, f"rank {r}: {after}")
            self.assertTrue(after["live_reused"], f"rank {r}: a live hook group was not reused")
        for key in ("round0", "round1"):
            self.assertEqual(self.ranks[0]["recreate"][key]["hash"], self.ranks[1]["recreate"][key]["hash"])
        self.assertEqual(self.ranks[0]["recreate"]["after_hook_group_destroyed"]["hash"],
                         self.ranks[1]["recreate"]["after_hook_group_destroyed"]["hash"])


if __name__ == "__main__":
    unittest.main()
