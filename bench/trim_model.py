"""An offline model of char-LM training through random trims, for asking "why" quickly.

One process plays both ranks of bench/workloads/ddp_train.py's char-LM job (same corpus, model,
batches, Adam, seeds: --plain reproduces the 2-rank Gloo run's val_acc digit for digit) and stands in
for the comm hook: divide by the world size, optionally scale by Adam's second moments, rotate rows
of 2^15, the 2-rank ring reduce-scatter with each packet of the sender's part trimmed with
probability --trim-p and decoded from its heads, then the inverse. Its use is the controls a live
run cannot give (2-bit heads, the shrink alone, side information, oracle Adam moments, exact
tensors); docs/RESULTS.md (issue 25) has what they showed. ~40 s a run on one core; compare
val_loss (~10x less noisy between seeds than val_acc).

  python3 -m bench trim-model --seed 0 --head 1 --precondition   # one JSON line
"""

import argparse
import json
import math
import sys
import time

import torch

from . import REPO

ROW = 1 << 15  # the rotation's row, as the hook's
HEADS = ("exact", "1", "1u", "2", "shrink")
LLOYD_MAX_2BIT = 0.9816  # the 4-level Gaussian quantizer's inner threshold, in RMS units


def fwht(x):
    """Orthonormal Walsh-Hadamard transform of each row of x (rows of a power-of-two length)."""
    n = x.shape[-1]
    y = x.reshape(-1, n)
    h = 1
    while h < n:
        y = y.view(y.shape[0], n // (2 * h), 2, h)
        y = torch.stack((y[:, :, 0] + y[:, :, 1], y[:, :, 0] - y[:, :, 1]), dim=2)
        h *= 2
    return y.reshape(x.shape) / math.sqrt(n)


def rotate(v, seed, inverse=False):
    """Randomized Hadamard transform of v in rows of ROW, a last shorter row split into its binary
    decomposition as the plugin's (codec/rht.h), so nothing is padded; the inverse with inverse=True."""
    n = v.numel()
    signs = (torch.randint(0, 2, (n,), generator=torch.Generator().manual_seed(seed)) * 2 - 1).float()
    out = torch.empty_like(v)
    start = 0
    for width in [ROW] * (n // ROW) + [1 << b for b in range(ROW.bit_length() - 1, -1, -1) if n % ROW & 1 << b]:
        x, s = v[start:start + width], signs[start:start + width]
        out[start:start + width] = fwht(x) * s if inverse else fwht(x * s)
        start += width
    return out


def estimate(row, head):
    """What the receiver makes of a trimmed packet's elements of a rotated row (the whole row,
    elementwise; the caller keeps the trimmed ones). 1: sign x mean|row| (the MSE-optimal 1-bit
    scale, NCCL_TRIM_HEAD_SCALE=mse); 1u: sign x ||row||^2/||row||_1 (unbiased); 2: 2-bit
    Lloyd-Max bins with each bin's mean |row| sent; shrink: row x 2/pi, the 1-bit estimate's
    mean shrink without its noise; exact: row itself."""
    if head == "exact":
        return row.clone()
    if head == "shrink":
        return row * (2 / math.pi)
    sign = torch.where(row >= 0, 1.0, -1.0)
    if head == "1":
        return sign * row.abs().mean()
    if head == "1u":
        return sign * (row.pow(2).sum() / row.abs().sum().clamp_min(1e-30))
    inner = row.abs() < LLOYD_MAX_2BIT * row.pow(2).mean().sqrt()
    inner_mean, outer_mean = (row.abs()[m].mean() if m.any() else row.new_zeros(()) for m in (inner, ~inner))
    return sign * torch.where(inner, inner_mean, outer_mean)


def side_info_estimate(est, mask, own, head):
    """The 1-bit estimate of a trimmed row refined with the receiver's own (exact) chunk `own`:
    the conditional mean of a jointly Gaussian (sent, own) pair given the sent element's sign,
    the correlation estimated from how often the signs agree. Only for head 1."""
    if head != "1" or not mask.any():
        return est
    sign = torch.where(est >= 0, 1.0, -1.0)
    agree = (sign[mask] * torch.where(own[mask] >= 0, 1.0, -1.0) > 0).float().mean().item()
    rho = max(-0.99, min(0.99, math.sin(math.pi * (agree - 0.5))))
    sigma_sent = est.abs().max().item() * math.sqrt(math.pi / 2)  # mean|x| = sigma sqrt(2/pi)
    sigma_own = own.pow(2).mean().sqrt().item() + 1e-30
    mu = rho * sigma_sent / sigma_own * own[mask]
    sigma = sigma_sent * math.sqrt(1 - rho * rho)
    normal = torch.distributions.Normal(0.0, 1.0)
    z = mu / sigma
    out = est.clone()
    out[mask] = mu + sign[mask] * sigma * normal.log_prob(z).exp() / normal.cdf(sign[mask] * z).clamp_min(1e-12)
    return out


def trim_message(sent, own, p, head, packet_elems, gen, side_info=False):
    """The receiver's view of `sent` (rotated, rows of ROW) after each packet is trimmed with
    probability p; own: the receiver's chunk at the same places (for side_info)."""
    out = sent.clone()
    for r0 in range(0, sent.numel(), ROW):
        row = sent[r0:r0 + ROW]
        # one draw a packet, in order (as the scalar draws were); compared in double, as .item() < p
        hit = torch.rand(-(-row.numel() // packet_elems), generator=gen).double() < p
        if not hit.any():
            continue
        mask = hit.repeat_interleave(packet_elems)[:row.numel()]
        est = estimate(row, head)
        if side_info:
            est = side_info_estimate(est, mask, own[r0:r0 + ROW], head)
        out[r0:r0 + ROW][mask] = est[mask]
    return out


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench trim-model", description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--trim-p", type=float, default=0.5)
    ap.add_argument("--head", choices=HEADS, default="1", help="how a trimmed packet decodes (estimate())")
    ap.add_argument("--plain", action="store_true", help="the exact sum, no rotation: what Gloo computes")
    ap.add_argument("--precondition", action="store_true", help="scale by Adam's second moments, as the hook's auto")
    ap.add_argument("--side-info", action="store_true", help="refine 1-bit estimates with the receiver's own chunk")
    ap.add_argument("--clean-moment", choices=("none", "m", "v"), default="none",
                    help="oracle: Adam's first (m) or second (v) moment from the exact gradient")
    ap.add_argument("--exact-params", default="", help="oracle: comma-separated name parts whose gradients stay exact")
    ap.add_argument("--packet-elems", type=int, default=2200, help="elements per packet (9000-byte MTU, fp32)")
    ap.add_argument("--charlm-bytes", type=int, default=600000)
    return ap.parse_args(argv)


def main(argv=None):
    a = parse_args(argv)
    sys.path.insert(0, str(REPO / "python"))
    from nccl_trim import precondition
    from .workloads import ddp_train as dt
    torch.set_num_threads(1)
    cfg = argparse.Namespace(task="charlm", d_model=64, layers=2, seq_len=64)
    train_starts, val_starts, batch = dt.charlm_windows(torch, dt.stdlib_corpus(a.charlm_bytes)[0], cfg.seq_len)
    torch.manual_seed(a.seed)
    model = dt.build_model(cfg, torch.nn, torch)
    named = list(model.named_parameters())
    params = [q for _, q in named]
    sizes = [q.numel() for q in params]
    opt = torch.optim.Adam(params, lr=2e-3)
    trim_gen = torch.Generator().manual_seed(1000 + a.seed)
    keys = [k for k in a.exact_params.split(",") if k]  # --exact-params: coordinates that keep the exact sum
    keep_exact = torch.cat([torch.full((q.numel(),), any(k in n for k in keys)) for n, q in named])

    def allreduce(grads, step):
        d = None
        if a.precondition and opt.state:
            d = precondition.divisors([opt.state[q]["exp_avg_sq"] if q in opt.state else None for q in params], sizes)
            grads = [g / d for g in grads]
        seed = 12345 + step
        rot = [rotate(g, seed) for g in grads]
        half = rot[0].numel() // 2
        # The ring's reduce-scatter of 2 ranks: rank r reduces chunk r, receiving the other rank's part of it.
        out = rotate(torch.cat([rot[r][c] + trim_message(rot[1 - r][c], rot[r][c], a.trim_p, a.head, a.packet_elems,
                                                         trim_gen, a.side_info)
                                for r, c in enumerate((slice(None, half), slice(half, None)))]), seed, inverse=True)
        return out * d if d is not None else out

    per_rank = len(train_starts) // 2
    steps_per_epoch = per_rank // 32
    order_gen = torch.Generator().manual_seed(a.seed)
    step, t0 = 0, time.time()
    for _ in range(a.epochs):
        perm = torch.randperm(len(train_starts), generator=order_gen)
        for s in range(steps_per_epoch):
            grads = []
            for r in range(2):
                x, y = batch(train_starts, perm[r:per_rank * 2:2][s * 32:(s + 1) * 32])
                model.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1)).backward()
                grads.append(torch.cat([q.grad.reshape(-1) for q in params]) / 2)
            exact = grads[0] + grads[1]
            g = torch.where(keep_exact, exact, exact if a.plain else allreduce(grads, step))
            step += 1
            if a.clean_moment == "none":
                for q, part in zip(params, g.split(sizes)):
                    q.grad = part.view_as(q).clone()
                opt.step()
                continue
            with torch.no_grad():  # Adam by hand, one moment fed the exact gradient
                for q, gn, gc in zip(params, g.split(sizes), exact.split(sizes)):
                    st = opt.state.setdefault(q, {"exp_avg": torch.zeros_like(q), "exp_avg_sq": torch.zeros_like(q)})
                    gm = (gc if a.clean_moment == "m" else gn).view_as(q)
                    gv = (gc if a.clean_moment == "v" else gn).view_as(q)
                    st["exp_avg"].mul_(0.9).add_(gm, alpha=0.1)
                    st["exp_avg_sq"].mul_(0.999).addcmul_(gv, gv, value=0.001)
                    m_hat, v_hat = st["exp_avg"] / (1 - 0.9 ** step), st["exp_avg_sq"] / (1 - 0.999 ** step)
                    q.sub_(2e-3 * m_hat / (v_hat.sqrt() + 1e-8))
    correct = total = loss_sum = 0
    with torch.no_grad():
        for i in range(0, len(val_starts), 256):
            x, y = batch(val_starts, torch.arange(i, min(i + 256, len(val_starts))))
            logits = model(x)
            correct += (logits.argmax(-1) == y).sum().item()
            total += y.numel()
            loss_sum += torch.nn.functional.cross_entropy(logits.reshape(-1, 256), y.reshape(-1),
                                                          reduction="sum").item()
    settings = ("seed", "plain", "head", "trim_p", "precondition", "side_info", "clean_moment", "exact_params")
    print(json.dumps({**{k: getattr(a, k) for k in settings}, "steps": step, "val_acc": round(correct / total, 5),
                      "val_loss": round(loss_sum / total, 5), "wall_s": round(time.time() - t0, 1)}), flush=True)
    return 0
