"""A gloo DDP job with torch's own PowerSGD comm hook, for test_launcher_powersgd.py (not a test
itself): it trains 6 steps (PowerSGD compresses from step 2) and prints one JSON line per rank:
the parameters' hash, the backends, and the warnings its register_comm_hook call raised."""

import faulthandler
import gc
import hashlib
import json
import sys
import warnings

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
from torch.nn.parallel import DistributedDataParallel as DDP

# A rare abort at exit (below) prints every Python thread's stack, to tell torch's from ours.
faulthandler.enable(all_threads=True)
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(1)
model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)))
state = powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model.register_comm_hook(state, powerSGD.powerSGD_hook)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
g = torch.Generator().manual_seed(100 + rank)
for _ in range(6):
    x = torch.randn(8, 16, generator=g)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), torch.sin(x[:, :4])).backward()
    opt.step()
flat = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
sys.stdout.write(json.dumps({
    "rank": rank, "backend": dist.get_backend(), "iter": state.iter,
    "params_sha256": hashlib.sha256(",".join(v.hex() for v in flat).encode()).hexdigest(),
    "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
    "rht_state": getattr(model, "_nccl_trim_state", "absent") is not None,
}) + "\n")  # one write: the ranks share the pipe
sys.stdout.flush()
# The DDP reducer (and the hook's state) before the group: torch 2.15's gloo aborts at exit about
# half the time when the group is destroyed under a live reducer ("terminate called without an
# active exception", plain torchrun too). Rarely it still does: a core of one such abort (plain
# gloo, 2026-11-30) has gloo's pt_gloo_runloop thread dropping a finished allreduce Work while the
# main thread finalizes; the Work's tensors need the GIL, which a finalizing Python answers with
# pthread_exit, and its unwinding through the Work's destructor calls std::terminate.
del model, state, opt
gc.collect()
dist.destroy_process_group()
