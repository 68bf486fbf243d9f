#!/usr/bin/env python3
"""An ordinary PyTorch DDP training script on data that needs no download; nothing here knows about
any network plugin. Launched like any torchrun job (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT); NCCL on CUDA, else gloo. Tasks: digits (a small CNN or MLP on scikit-learn's 8x8
digits), widemlp (the digits through a 64-W-W-10 MLP: 11.6 MB of gradient a step, so the network
sets the step time), charlm (a byte-level transformer on the standard library's *.py files).
JSON lines (rank 0 on stdout; every rank into --json-out, "{rank}" replaced): config, compute
(--measure-compute), epoch (epoch 0 = untrained), eval (--eval-every), target (first eval at
--target-acc), final (every rank's parameter sha256, iteration p50/p99 without the first step,
which holds the lazy connection setup; its time is first_step_ms). An iteration is one optimizer
step, timed with the device synchronized at both ends; the fields: the log() calls below."""
import argparse
import argparse
import datetime
import hashlib
import json
import math
import os
import platform
import socket
import sysconfig
import time
from pathlib import Path

TASK_DEFAULTS = {
    # lr and optimizer per task: plain SGD+momentum trains the CNN in a few epochs; the
    # transformer needs Adam to get anywhere in the few hundred steps a smoke budget allows.
    # widemlp: 128 per rank (256 a step at 2 ranks, 5 steps an epoch) at lr 0.3 reached 0.95 val
    # accuracy after 35-40 steps for seeds 0-3 and stayed above 0.955 (CPU, one process with the
    # same global batch); 12 epochs = 60 steps at 2 ranks end near 0.97.
    "digits": {"lr": 0.05, "optimizer": "sgd", "batch_size": 32, "epochs": 20},
    "charlm": {"lr": 2e-3, "optimizer": "adam", "batch_size": 32, "epochs": 3},
    "widemlp": {"lr": 0.3, "optimizer": "sgd", "batch_size": 128, "epochs": 12},
}
DIGITS_IMAGES, DIGITS_VAL_SHARE = 1797, 5  # scikit-learn's digits; 1/5 of them held out


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("--task", choices=sorted(TASK_DEFAULTS), default="digits")
    a("--model", choices=["cnn", "mlp"], default="cnn", help="digits only")
    a("--epochs", type=int, help="default: 20 digits, 3 charlm, 12 widemlp")
    a("--batch-size", type=int, help="per rank (default 32; widemlp 128)")
    a("--lr", type=float, help="default: 0.05 (sgd) digits, 2e-3 (adam) charlm, 0.3 (sgd) widemlp")
    a("--optimizer", choices=["sgd", "adam"])
    a("--seed", type=int, default=0, help="model init and data order (same on every rank)")
    a("--data-seed", type=int, default=0, help="train/val split of digits")
    a("--digits-csv", help="digits.csv.gz to use instead of scikit-learn's (default: scikit-learn's)")
    a("--target-acc", type=float, help="log the wall-clock time at which val accuracy first reaches this (0..1)")
    a("--max-steps", type=int, default=0,
      help="stop after this many optimizer steps in all (0: no limit); for smoke runs")
    a("--json-out", help='JSON-lines log; "{rank}" is replaced by the rank')
    a("--device", choices=["auto", "cuda", "cpu"], default="auto")
    a("--backend", choices=["auto", "nccl", "gloo", "trim"], default="auto",
      help="auto: nccl on CUDA, else gloo; trim: the nccl_trim package's CPU backend, through the plugin")
    a("--timeout-s", type=float, default=300, help="collective timeout")
    a("--seq-len", type=int, default=128, help="charlm context length")
    a("--charlm-bytes", type=int, default=2_000_000, help="charlm corpus size")
    a("--d-model", type=int, default=128, help="charlm width")
    a("--layers", type=int, default=4, help="charlm depth")
    a("--width", type=int, default=1664, help="widemlp hidden width (1664: 11.6 MB of gradient)")
    a("--eval-every", type=int, default=0, metavar="N",
      help="also evaluate every N optimizer steps (0: at epoch ends only): a finer time to --target-acc")
    a("--time-limit-s", type=float, default=0, metavar="S", help="stop training after the step in which S s of "
      "training passed (0: no limit); the final event follows, saying stopped_by_time_limit")
    a("--describe", action="store_true",
      help="print the model's size and step count as one JSON line (no torch; WORLD_SIZE from the env)")
    a("--measure-compute", type=int, default=0, metavar="N",
      help="first time N forward+backward passes under DDP no_sync (params untouched): a compute event")
    a("--deterministic", action="store_true",
      help="deterministic cuDNN/cuBLAS kernels (same data + same sums = same parameter bits)")
    a("--die-after-iters", type=int, default=0, metavar="N",
      help="test: rank --die-rank SIGKILLs itself after its N-th optimizer step (0: never)")
    a("--die-rank", type=int, default=1, help="the rank that --die-after-iters kills (default 1)")
    args = p.parse_args(argv)
    if args.die_after_iters < 0:
        p.error("--die-after-iters must be >= 0")
    if args.eval_every < 0 or args.measure_compute < 0 or args.width < 1 or args.time_limit_s < 0:
        p.error("--eval-every, --measure-compute and --time-limit-s must be >= 0, --width >= 1")
    for k, v in TASK_DEFAULTS[args.task].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    return args


# ---------------------------------------------------------------- data

def digits_csv_path(explicit):
    """scikit-learn's bundled sklearn/datasets/data/digits.csv.gz (64 pixels 0..16 and the label a
    line), found without importing sklearn; or --digits-csv's copy (torch but no scikit-learn)."""
    if explicit:
        return Path(explicit)
    import importlib.util
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("digits: scikit-learn is not installed; pass --digits-csv with a copy of "
                         "sklearn/datasets/data/digits.csv.gz")
    return Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "digits.csv.gz"


def load_digits_data(csv_path, data_seed):
    """8x8 images scaled to [0, 1] and labels: (train, val, info). The 80/20 split does not depend
    on --seed: runs with different training seeds are evaluated on the same images. Plain Python,
    so neither numpy nor scikit-learn is needed at run time."""
    import csv
    import gzip
    import random
    with gzip.open(csv_path, "rt") as f:
        rows = [[int(v) for v in r] for r in csv.reader(f) if r]
    order = list(range(len(rows)))
    random.Random(data_seed).shuffle(order)
    n_val = len(rows) // DIGITS_VAL_SHARE
    val, train = order[:n_val], order[n_val:]
    part = lambda idx: ([[v / 16.0 for v in rows[i][:64]] for i in idx], [rows[i][64] for i in idx])  # noqa: E731
    return part(train), part(val), {"dataset": "scikit-learn digits (digits.csv.gz)", "path": str(csv_path),
                                    "train": len(train), "val": len(val)}


def stdlib_corpus(max_bytes):
    """The standard library's *.py files in sorted path order, as raw bytes (a byte-level
    vocabulary of 256 needs no tokenizer and no decoding). Third-party packages and test suites
    are left out: they differ between installations and hold deliberately odd files."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "dist-packages", "test", "tests", "idle_test"}
    files = sorted((p for p in root.rglob("*.py") if not skip.intersection(p.relative_to(root).parts)),
                   key=lambda p: p.relative_to(root).as_posix())
    chunks, total = [], 0
    for f in files:
        try:
            chunks.append(f.read_bytes() + b"\n")
        except OSError:
            continue
        total += len(chunks[-1])
        if total >= max_bytes:
            break
    data = b"".join(chunks)[:max_bytes]
    return data, {"dataset": "stdlib *.py", "root": str(root), "files": len(chunks), "bytes": len(data),
                  "sha256": hashlib.sha256(data).hexdigest()[:16]}


def charlm_windows(torch, corpus, seq_len, device="cpu"):
    """Non-overlapping windows of SEQ_LEN+1 bytes of CORPUS (input + shifted target): the start
    offsets of the train windows (before 90% of the corpus) and of the val windows (after it), and
    batch(starts, idx) -> (inputs, targets) of the windows at STARTS[IDX]."""
    buf = torch.frombuffer(bytearray(corpus), dtype=torch.uint8).to(device=device, dtype=torch.long)
    split, offsets = len(corpus) * 9 // 10, torch.arange(seq_len + 1, device=device)

    def batch(starts, idx):
        w = buf[starts[idx][:, None] + offsets]
        return w[:, :-1], w[:, 1:]
    return (torch.arange(0, split - seq_len - 1, seq_len, device=device),
            torch.arange(split, len(corpus) - seq_len - 1, seq_len, device=device), batch)


# ---------------------------------------------------------------- models

def mlp_width(args):
    """The hidden width of the 64-W-W-10 MLPs (widemlp; digits --model mlp: 512), else None."""
    return args.width if args.task == "widemlp" else 512 if args.task == "digits" and args.model == "mlp" else None


def describe(args, world):
    """Parameters, fp32 gradient bytes and optimizer steps of this run, without torch (bench.congestion
    sizes its runs with it; test_bench_ddp checks the counts against build_model's models)."""
    w, d = mlp_width(args), args.d_model
    if w:
        params = (64 * w + w) + (w * w + w) + (w * 10 + 10)
    elif args.task == "digits":
        params = (1 * 32 * 9 + 32) + (32 * 64 * 9 + 64) + (64 * 4 * 4 * 256 + 256) + (256 * 10 + 10)
    else:  # charlm: per layer attention 4d^2+4d, feed-forward 8d^2+5d, two LayerNorms 4d
        params = 256 * d + args.seq_len * d + args.layers * (12 * d * d + 13 * d) + 2 * d + (d * 256 + 256)
    if args.task == "charlm":  # the corpus is assumed at least --charlm-bytes long
        n_train = len(range(0, args.charlm_bytes * 9 // 10 - args.seq_len - 1, args.seq_len))
    else:
        n_train = DIGITS_IMAGES - DIGITS_IMAGES // DIGITS_VAL_SHARE
    steps_per_epoch = n_train // world // args.batch_size
    steps = steps_per_epoch * args.epochs
    return {"task": args.task, "params": params, "grad_bytes": 4 * params, "world_size": world,
            "batch_size": args.batch_size, "steps_per_epoch": steps_per_epoch, "epochs": args.epochs,
            "steps": min(steps, args.max_steps) if args.max_steps else steps}


def build_model(args, nn, torch):
    w = mlp_width(args)
    if w:
        return nn.Sequential(nn.Flatten(), nn.Linear(64, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(), nn.Linear(w, 10))
    if args.task == "digits":
        # ~283k parameters (1.1 MB of fp32 gradient per step): large enough that the ring's
        # messages are not all below a transport's "small message" threshold.
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 4 * 4, 256), nn.ReLU(), nn.Linear(256, 10))

    class CharTransformer(nn.Module):
        """Pre-norm causal transformer over bytes. The causal mask is a plain attribute, not a
        registered buffer: DDP would otherwise broadcast it from rank 0 before every forward."""

        def __init__(self, d, layers, seq_len):
            super().__init__()
            self.tok = nn.Embedding(256, d)
            self.pos = nn.Embedding(seq_len, d)
            layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=4 * d, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, 256)
            self._mask = None

        def forward(self, x):
            t = x.shape[1]
            if self._mask is None or self._mask.shape[0] != t or self._mask.device != x.device:
                self._mask = nn.Transformer.generate_square_subsequent_mask(t, device=x.device)
            h = self.tok(x) + self.pos(torch.arange(t, device=x.device))
            h = self.blocks(h, mask=self._mask, is_causal=True)
            return self.head(self.norm(h))

    return CharTransformer(args.d_model, args.layers, args.seq_len)


# ---------------------------------------------------------------- helpers

def parse_size(s):
    """Bytes of "4K", "1.5M", "16MiB", "300"."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper().rstrip("B").rstrip("I")
    return int(float(s[:-1]) * units[s[-1]]) if s and s[-1] in units else int(s)


def percentile(values, q):
    """Nearest-rank percentile (p99 of fewer than 100 samples is the worst one)."""
    return sorted(values)[max(0, math.ceil(q / 100.0 * len(values)) - 1)] if values else None


def tensor_bytes(torch, t):
    """The raw bytes of a CPU tensor (through numpy when present; torch alone needs none)."""
    try:
        return t.contiguous().numpy().tobytes()
    except (ImportError, RuntimeError):
        return bytes(t.contiguous().view(-1).view(torch.uint8).tolist())


def run_facts(torch, device):
    """The config event's versions (of the software and the GPU) and NCCL_* environment."""
    out = {"python": platform.python_version(), "torch": torch.__version__,
           "torch_cuda": torch.version.cuda, "hostname": socket.gethostname()}
    for mod in ("numpy", "sklearn"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            out[mod] = None
    if device.type == "cuda":
        try:
            v = torch.cuda.nccl.version()
            # Older PyTorch returns one integer: major*10000 + minor*100 + patch (2.18+ encoding).
            v = ".".join(map(str, v)) if isinstance(v, tuple) else f"{v // 10000}.{v // 100 % 100}.{v % 100}"
        except Exception:  # no CUDA build, or no NCCL in it
            v = None
        out.update(gpu=torch.cuda.get_device_name(device), nccl=v)
    return {"versions": out, "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")}}


def sync(torch, device):
    """On CUDA, wait for the device: a step or a call ends when the GPU is done, not at its launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def barrier(dist, device):
    dist.barrier(device_ids=[device.index] if device.type == "cuda" else None)


class Logger:
    def __init__(self, rank, path):
        self.rank, self.f = rank, None
        if path and ("{rank}" in path or rank == 0):
            path = Path(path.replace("{rank}", str(rank)))
            path.parent.mkdir(parents=True, exist_ok=True)
            self.f = open(path, "w")

    def __call__(self, event, **fields):
        line = json.dumps({"event": event, "rank": self.rank, **fields})
        if self.f:
            self.f.write(line + "\n")
            self.f.flush()
        if self.rank == 0:
            print(line, flush=True)


def init_distributed(args, torch, dist):
    """torchrun-style environment -> (rank, world, device, backend), process group initialised.
    NCCL on CUDA, else gloo (CPU smoke runs); --device and --backend override."""
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", str(rank)))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        # Several ranks may share one GPU (a one-GPU test machine): wrap the local rank around.
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, world)))
    backend = args.backend if args.backend != "auto" else ("nccl" if use_cuda else "gloo")
    if backend == "trim":
        import nccl_trim  # noqa: F401 - registers the "trim" backend
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=args.timeout_s))
    return rank, world, device, backend


def make_deterministic(torch):
    """Kernels whose results do not depend on scheduling (cuDNN's non-atomic algorithms, cuBLAS
    with a fixed workspace). CUBLAS_WORKSPACE_CONFIG must be set before cuBLAS starts."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=True)


def die_now(log, rank, step):
    """A rank lost without warning: no destroy_process_group, no goodbye, sockets closed by the
    kernel. The event line comes first (flushed) so the launcher knows when it happened."""
    import signal
    import sys
    print(f"ddp_train: rank {rank}: --die-after-iters {step}: SIGKILL now", file=sys.stderr, flush=True)
    log("die", step=step, time=time.time(), pid=os.getpid())
    if log.f:  # log() flushed it: on disk before the kill
        os.fsync(log.f.fileno())
    os.kill(os.getpid(), signal.SIGKILL)


# ---------------------------------------------------------------- main

def main():
    args = parse_args()
    if args.describe:
        print(json.dumps(describe(args, int(os.environ.get("WORLD_SIZE", "1")))))
        return
    import torch
    if args.deterministic:
        make_deterministic(torch)
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world, device, backend = init_distributed(args, torch, dist)
    log = Logger(rank, args.json_out)
    if args.die_after_iters and not 0 <= args.die_rank < world:
        raise SystemExit(f"--die-rank {args.die_rank}: no such rank in a world of {world}")

    # Data: every rank loads the whole (small) set onto its device once, and indexes batches
    # from it; a DataLoader's per-batch overhead would dominate steps this small.
    if args.task == "charlm":
        corpus, data_info = stdlib_corpus(args.charlm_bytes)
        train, val, batch = charlm_windows(torch, corpus, args.seq_len, device)
        n_train, n_val = len(train), len(val)
        data_info.update(train_windows=n_train, val_windows=n_val, seq_len=args.seq_len)
    else:
        parts = load_digits_data(digits_csv_path(args.digits_csv), args.data_seed)
        train, val = ((torch.tensor(x, dtype=torch.float32, device=device).reshape(-1, 1, 8, 8),
                       torch.tensor(y, dtype=torch.long, device=device)) for x, y in parts[:2])
        n_train, n_val, data_info = len(parts[0][1]), len(parts[1][1]), parts[2]

        def batch(part, idx):  # (images, labels)
            return part[0][idx], part[1][idx]

    # Same seed on every rank: replicas start identical (DDP also broadcasts rank 0's weights).
    torch.manual_seed(args.seed)
    model = build_model(args, nn, torch).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    # What DDP all-reduces per step: every gradient, in the parameters' own dtype.
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = (torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9) if args.optimizer == "sgd"
           else torch.optim.Adam(ddp.parameters(), lr=args.lr))

    def loss_and_correct(net, x, y):
        out = net(x)
        out2, y2 = out.reshape(-1, out.shape[-1]), y.reshape(-1)
        return F.cross_entropy(out2, y2), (out2.argmax(1) == y2).sum()

    def out_of_steps():
        return bool(args.max_steps) and total_steps >= args.max_steps

    @torch.no_grad()
    def checkpoint(event, train_time, **fields):
        """Log EVENT with the val loss and accuracy (per byte for charlm) over the whole val set, sharded
        across ranks and summed in float64 (a few bytes: no transport touches values that small); after
        the first step at which val accuracy reaches --target-acc, also the target event. The same
        all-reduce carries rank 0's verdict on --time-limit-s (its clock decides for all: every rank
        must stop after the same step), so the limit costs no collective. Returns (val loss, val acc)."""
        nonlocal stopped_by_time, reached
        model.eval()
        idx_all = torch.arange(rank, n_val, world, device=device)
        tot = torch.zeros(4, dtype=torch.float64, device=device)
        if rank == 0 and args.time_limit_s and time.perf_counter() - t0 >= args.time_limit_s:
            tot[3] = 1.0
        eb = max(args.batch_size, 256)
        for i in range(0, len(idx_all), eb):
            x, y = batch(val, idx_all[i:i + eb])
            loss, correct = loss_and_correct(model, x, y)  # no DDP hooks for eval
            tot[:3] += torch.stack([loss.double() * y.numel(), correct.double(),
                                    torch.tensor(float(y.numel()), dtype=torch.float64, device=device)])
        dist.all_reduce(tot)
        stopped_by_time = stopped_by_time or tot[3].item() > 0
        model.train()
        loss, acc, wall = (tot[0] / tot[2]).item(), (tot[1] / tot[2]).item(), time.perf_counter() - t0
        log(event, **fields, val_loss=loss, val_acc=acc, wall_s=wall, train_s=train_time)
        if args.target_acc is not None and reached is None and total_steps and acc >= args.target_acc:
            reached = {"epoch": epoch, "step": total_steps, "wall_s": wall, "train_s": train_time, "val_acc": acc}
            log("target", target_acc=args.target_acc, **reached)
        return loss, acc

    log("config", world_size=world, backend=backend, device=str(device), params=n_params,
        grad_bytes=grad_bytes, data=data_info, args=vars(args), **run_facts(torch, device))

    compute_ms, stopped_by_time = None, False
    if args.measure_compute:
        # The GPU time of one step without the network: forward+backward on the first batch under
        # no_sync (no all-reduce), both ranks at once (barriers), 2 warm-ups. Gradients are
        # dropped and no optimizer step is taken: the training below starts exactly as without.
        x, y = batch(train, torch.arange(min(args.batch_size, n_train), device=device))
        barrier(dist, device)
        ms = []
        with ddp.no_sync():
            for i in range(args.measure_compute + 2):
                sync(torch, device)
                ts = time.perf_counter()
                loss_and_correct(ddp, x, y)[0].backward()
                sync(torch, device)
                ms += [(time.perf_counter() - ts) * 1e3] if i >= 2 else []
        opt.zero_grad(set_to_none=True)
        barrier(dist, device)
        compute_ms = percentile(ms, 50)
        log("compute", steps=len(ms), compute_p50_ms=compute_ms, compute_min_ms=min(ms),
            compute_max_ms=max(ms), grad_bytes=grad_bytes)

    t0 = time.perf_counter()
    train_s, total_steps, reached, epoch = 0.0, 0, None, 0
    val_loss0, val_acc0 = val_loss, val_acc = checkpoint("epoch", 0.0, epoch=0, steps=0, train_loss=None)
    per_rank = n_train // world
    steps_per_epoch = per_rank // args.batch_size
    if steps_per_epoch == 0:
        raise SystemExit(f"batch size {args.batch_size} > {per_rank} training samples per rank")
    gen = torch.Generator().manual_seed(args.seed)
    # Iteration times of the whole run, without the very first step: that one includes the
    # communicator's lazy connection setup and says nothing about the steady state.
    all_ms, first_step_ms = [], None
    ddp.train()
    for epoch in range(1, args.epochs + 1):
        # One permutation per epoch, the same on every rank (same generator, same seed); rank r
        # takes every world-th sample, and every rank runs the same number of steps (DDP needs it).
        mine = torch.randperm(n_train, generator=gen).to(device)[rank:per_rank * world:world]
        times, loss_sum = [], torch.zeros((), device=device)
        for s in range(steps_per_epoch):
            if out_of_steps() or stopped_by_time:
                break
            sync(torch, device)
            ts = time.perf_counter()
            x, y = batch(train, mine[s * args.batch_size:(s + 1) * args.batch_size])
            opt.zero_grad(set_to_none=True)
            loss, _ = loss_and_correct(ddp, x, y)
            loss.backward()  # DDP all-reduces the gradient buckets during backward
            opt.step()
            sync(torch, device)
            times.append(time.perf_counter() - ts)
            loss_sum += loss.detach()
            total_steps += 1
            if args.die_after_iters and rank == args.die_rank and total_steps >= args.die_after_iters:
                die_now(log, rank, total_steps)
            last = s + 1 == steps_per_epoch or out_of_steps()  # then the epoch's own eval follows
            if args.eval_every and total_steps % args.eval_every == 0 and not last:
                # Between steps, outside their timing; parameters and data order are untouched.
                checkpoint("eval", train_s + sum(times), epoch=epoch, steps=total_steps)
        train_s += sum(times)
        steps, ms = len(times), [t * 1e3 for t in times]
        if epoch == 1 and ms:
            first_step_ms, ms = ms[0], ms[1:]
        all_ms += ms
        val_loss, val_acc = checkpoint(
            "epoch", train_s, epoch=epoch, steps=steps, train_loss=(loss_sum / max(1, steps)).item(),
            iter_p50_ms=percentile(ms, 50), iter_p99_ms=percentile(ms, 99),
            iter_mean_ms=sum(ms) / len(ms) if ms else None,
            samples_per_s=steps * args.batch_size * world / sum(times) if times else None)
        if out_of_steps() or stopped_by_time:
            break

    # Replica check: each rank hashes its own parameter bytes; the hashes are gathered. The
    # parameters themselves are gathered as int32 bit patterns, so that the spread between
    # replicas is measured on exactly the bits each rank holds.
    flat = torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])
    digests = [None] * world
    dist.all_gather_object(digests, hashlib.sha256(tensor_bytes(torch, flat.cpu())).hexdigest())
    bits = [torch.empty_like(flat.view(torch.int32)) for _ in range(world)]
    dist.all_gather(bits, flat.view(torch.int32).contiguous())
    ref = bits[0].view(torch.float32).double()
    spread = [{"max_abs_diff": d.abs().max().item(), "rel_l2_diff": (d.norm() / ref.norm().clamp_min(1e-30)).item()}
              for d in (b.view(torch.float32).double() - ref for b in bits)]
    got = reached or {}
    log("final", epochs=epoch, steps=total_steps, wall_s=time.perf_counter() - t0, train_s=train_s,
        val_loss=val_loss, val_acc=val_acc, initial_val_loss=val_loss0, initial_val_acc=val_acc0,
        loss_decreased=val_loss < val_loss0, target_acc=args.target_acc, time_to_target_s=got.get("wall_s"),
        train_time_to_target_s=got.get("train_s"), epochs_to_target=got.get("epoch"),
        steps_to_target=got.get("step"), stopped_by_time_limit=stopped_by_time,
        iter_p50_ms=percentile(all_ms, 50), iter_p99_ms=percentile(all_ms, 99),
        iter_max_ms=max(all_ms, default=None), iter_count=len(all_ms), first_step_ms=first_step_ms,
        param_sha256=digests, params_identical=len(set(digests)) == 1,
        params_vs_rank0=spread, params=n_params, grad_bytes=grad_bytes, compute_ms=compute_ms)
    barrier(dist, device)
    # A clean shutdown closes the transport's connections (and lets it log its counters).
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
