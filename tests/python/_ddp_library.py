"""A stand-in for a training library (not a test): it imported DistributedDataParallel by name at
its own import, before nccl_trim.run's bootstrap patched the class, and subclasses it. The worker
of test_launcher_ddp.py imports it before install()."""

from torch.nn.parallel import DistributedDataParallel as DDP


class LibraryDDP(DDP):
    """The library's own wrapper, defined before the patch."""

    def __init__(self, module, **kwargs):
        super().__init__(module, **kwargs)
        self.library_ready = True


def build(module, **kwargs):
    """What the library hands its users: a DDP made with the name it imported."""
    return DDP(module, **kwargs)
