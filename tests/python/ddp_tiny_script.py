"""A tiny gloo DDP job for test_launcher.py (not a test itself): it trains 3 steps and prints one
JSON line per rank saying what the launcher gave it."""

import hashlib
import json
import os
import sys
import warnings

warnings.simplefilter("ignore")  # torch without numpy warns at import

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(10, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(rank)
for _ in range(3):
    opt.zero_grad()
    model(torch.randn(4, 10, generator=g)).pow(2).sum().backward()
    opt.step()
state = getattr(model, "_nccl_trim_state", None)
# float.hex: exact, and no numpy needed.
flat = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
digest = hashlib.sha256(",".join(v.hex() for v in flat).encode()).hexdigest()
sys.stdout.write(json.dumps({
    "rank": rank, "hook": state is not None, "steps": None if state is None else state.step,
    "backend": dist.get_backend(), "hook_backend": None if state is None else dist.get_backend(state.hook_group),
    "argv": sys.argv[1:], "name": __name__, "path0": sys.path[0], "params_sha256": digest,
    **{k: os.environ.get(k) for k in ("NCCL_NET_PLUGIN", "NCCL_NET", "NCCL_TRIM_SCHEME")},
}) + "\n")  # one write: the ranks share the pipe
sys.stdout.flush()
dist.destroy_process_group()
