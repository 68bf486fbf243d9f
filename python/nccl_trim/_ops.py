"""The trim backend's operations beyond the ring's five: send/recv (tags, any source), gather,
scatter, all_to_all (uneven splits), reduce, the coalesced forms, and monitored_barrier.

Point-to-point messages travel on the group's p2p connections (nccl_trim.p2p), exact. gather,
scatter, all_to_all, reduce and monitored_barrier are built on them, as gloo builds its own on
its pairs: they run on the group's worker in issue order like every collective, their messages
tagged with the collective's sequence number on a channel of their own, so they never match a
user's send. reduce gathers every rank's tensor at the root and reduces there in rank order
(exact, like the ring's MAX/MIN/PROD). The coalesced forms flatten into one ring collective.
"""

import functools
import time
from typing import List, Optional

import torch
import torch.distributed as dist

from . import coll, p2p
from ._work import TrimBackendError, _Contiguous, _cpu_tensor, _dtype, _one, _op, _timeout_ms, _Work
from .errors import UnsupportedError


class _P2PWork(_Work):
    """A send's or receive's Work; a receive knows the rank its message came from."""

    _source = -1  # set when the receive finishes

    def _source_rank(self) -> int:  # noqa: D401 - torch's name
        self.wait()
        return self._source

    source_rank = _source_rank


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor's bytes, as a flat uint8 view (no copy)."""
    return t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)


def _rows(t: torch.Tensor, splits: List[int], size: int, what: str, role: str) -> List[int]:
    """The element counts of `t`'s blocks for all_to_all_single: `splits` rows each (dim 0), or
    equal blocks when no splits are given."""
    if t.dim() == 0:
        raise UnsupportedError(f"trim: {what} needs {role} tensors with at least one dimension")
    per_row = t.numel() // t.size(0) if t.size(0) else 0
    if not splits:
        if t.size(0) % size:
            raise UnsupportedError(f"trim: {what}: {role} has {t.size(0)} rows, not a multiple of the group's "
                                   f"{size} ranks; give split sizes")
        return [t.size(0) // size * per_row] * size
    if len(splits) != size or any(s < 0 for s in splits) or sum(splits) != t.size(0):
        raise UnsupportedError(f"trim: {what}: {role} split sizes {list(splits)} must be {size} non-negative row "
                               f"counts summing to the {role}'s {t.size(0)} rows")
    return [s * per_row for s in splits]


def _from_bytes(b: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A tensor of `like`'s shape and dtype holding the bytes `b` (any alignment)."""
    out = torch.empty(like.shape, dtype=like.dtype)
    _bytes(out).copy_(b)
    return out


def _reduce_into(acc: torch.Tensor, other: torch.Tensor, op: int) -> None:
    if op in (coll.SUM, coll.AVG):
        acc.add_(other)
    elif op == coll.PROD:
        acc.mul_(other)
    elif op == coll.MAX:
        torch.maximum(acc, other, out=acc)
    else:
        torch.minimum(acc, other, out=acc)


class MoreOps:
    """Mixed into TrimBackend: needs its _submit, _p2p, _completions, _rank, _size, _timeout."""

    # No NCCL-style coalescing: batch_isend_irecv issues its ops one by one, as on gloo. (Without
    # this, torch's own property asks the Python class, which asks torch: a RecursionError.)
    @property
    def supports_coalescing(self) -> bool:
        return False

    # torch's debug checks (TORCH_DISTRIBUTED_DEBUG=DETAIL) ask a group for its collective sequence
    # number; every rank issues the same collectives in the same order, so a count agrees.
    def _set_sequence_number_for_group(self) -> None:
        pass

    def _get_sequence_number_for_group(self) -> int:
        return self._seq_count

    setSequenceNumberForGroup = _set_sequence_number_for_group  # noqa: N815 - the C++ names
    getSequenceNumberForGroup = _get_sequence_number_for_group  # noqa: N815

    # ---- send / recv

    def _p2p_ms(self) -> int:
        return _timeout_ms(None, self._timeout)

    def _finisher(self, work: _P2PWork, after=None):
        def done(tr: p2p.Transfer) -> None:
            work._source = tr.source
            error = tr.error
            if error is None and after is not None:
                try:
                    after()
                except BaseException as e:  # noqa: BLE001 - the Work reports it
                    error = e
            if error is not None and not isinstance(error, TrimBackendError) and isinstance(error, p2p.P2PError):
                error = TrimBackendError(str(error), code=error.code)
            self._completions.put(functools.partial(work._finish, error))
        return done

    def send(self, tensors, dstRank, tag=0):  # noqa: N803 (torch's names)
        t = _one(tensors, "send")
        data = _bytes(t.contiguous())
        work = _P2PWork([t])
        self._p2p.send(data, dstRank, p2p.USER, tag, self._p2p_ms(), p2p.Transfer(self._finisher(work)))
        return work

    def _recv(self, tensors, src: Optional[int], tag: int, what: str):
        t = _one(tensors, what)
        c = _Contiguous(t)
        work = _P2PWork([t])
        self._p2p.recv(_bytes(c.c), src, p2p.USER, tag, self._p2p_ms(),
                       p2p.Transfer(self._finisher(work, c.write_back)))
        return work

    def recv(self, tensors, srcRank, tag=0):  # noqa: N803
        return self._recv(tensors, srcRank, tag, "recv")

    def recv_anysource(self, tensors, tag=0):
        return self._recv(tensors, None, tag, "recv from any source")

    # ---- collectives on p2p (the worker runs them)

    def _next_tag(self) -> int:
        with self._state:
            self._p2p_seq += 1
            return self._p2p_seq

    def _exchange(self, tag: int, sends, recvs, ms: int) -> None:
        """Posts `recvs` [(rank, uint8 dest)] and `sends` [(rank, uint8 data)] on the collective
        channel under `tag`, and waits for all of them; raises the first error."""
        transfers = []
        for src, dest in recvs:
            tr = p2p.Transfer()
            self._p2p.recv(dest, src, p2p.COLL, tag, ms, tr)
            transfers.append(tr)
        for dst, data in sends:
            tr = p2p.Transfer()
            self._p2p.send(data, dst, p2p.COLL, tag, ms, tr)
            transfers.append(tr)
        for tr in transfers:
            tr.wait()
        error = next((tr.error for tr in transfers if tr.error is not None), None)
        if error is not None:
            raise error

    def _root(self, opts, what: str) -> int:
        root = opts.rootRank
        if not 0 <= root < self._size:
            raise UnsupportedError(f"trim: {what} from rank {root} in a group of {self._size}")
        return root

    def gather(self, output_tensors, input_tensors, opts=None):
        t = _one(input_tensors, "gather")
        root = self._root(opts, "gather")
        outs = []
        if self._rank == root:
            outs = self._per_rank(output_tensors, t, "gather", "output")
        elif output_tensors and any(len(o) for o in output_tensors):
            raise UnsupportedError(f"trim: gather: only the root (rank {root}) passes output tensors")
        src, tag = t.contiguous(), self._next_tag()

        def run(ms):
            if self._rank != root:
                self._exchange(tag, [(root, _bytes(src))], [], ms)
                return
            dests = [_Contiguous(o) for o in outs]
            self._exchange(tag, [], [(r, _bytes(d.c)) for r, d in enumerate(dests) if r != root], ms)
            dests[root].c.copy_(src.view_as(dests[root].c))
            for d in dests:
                d.write_back()
        return self._submit(run, outs, opts)

    def scatter(self, output_tensors, input_tensors, opts=None):
        t = _one(output_tensors, "scatter")
        root = self._root(opts, "scatter")
        ins = []
        if self._rank == root:
            ins = [i.contiguous() for i in self._per_rank(input_tensors, t, "scatter", "input")]
        elif input_tensors and any(len(i) for i in input_tensors):
            raise UnsupportedError(f"trim: scatter: only the root (rank {root}) passes input tensors")
        dst, tag = _Contiguous(t), self._next_tag()

        def run(ms):
            if self._rank == root:
                self._exchange(tag, [(r, _bytes(i)) for r, i in enumerate(ins) if r != root], [], ms)
                dst.c.copy_(ins[root].view_as(dst.c))
            else:
                self._exchange(tag, [], [(root, _bytes(dst.c))], ms)
            dst.write_back()
        return self._submit(run, [t], opts)

    def _all_to_all(self, sends: List[torch.Tensor], recvs: List[torch.Tensor], outputs, opts, after):
        """Block r of `sends` to rank r, block r of `recvs` from it (contiguous uint8 each); then
        after()."""
        tag = self._next_tag()
        me = self._rank

        def run(ms):
            self._exchange(tag, [(r, s) for r, s in enumerate(sends) if r != me],
                           [(r, d) for r, d in enumerate(recvs) if r != me], ms)
            recvs[me].copy_(sends[me])
            after()
        return self._submit(run, outputs, opts)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):  # noqa: A002
        what = "all_to_all_single"
        _cpu_tensor(input, what)
        _cpu_tensor(output, what)
        if input.dtype != output.dtype:
            raise UnsupportedError(f"trim: {what}: input is {input.dtype}, output {output.dtype}")
        ins = _rows(input, list(input_split_sizes), self._size, what, "input")
        outs = _rows(output, list(output_split_sizes), self._size, what, "output")
        src, dst = input.contiguous(), _Contiguous(output)
        es = input.element_size()

        def blocks(flat: torch.Tensor, counts: List[int]) -> List[torch.Tensor]:
            offsets = [sum(counts[:r]) * es for r in range(self._size)]
            return [flat[o:o + c * es] for o, c in zip(offsets, counts)]
        return self._all_to_all(blocks(_bytes(src), ins), blocks(_bytes(dst.c), outs), [output], opts, dst.write_back)

    all_to_all_single = alltoall_base

    def alltoall(self, output_tensors, input_tensors, opts=None):
        for lst, role in ((output_tensors, "output"), (input_tensors, "input")):
            if len(lst) != self._size:
                raise UnsupportedError(f"trim: all_to_all needs {self._size} {role} tensors, got {len(lst)}")
            for x in lst:
                _cpu_tensor(x, "all_to_all")
        ins = [i.contiguous() for i in input_tensors]
        outs = [_Contiguous(o) for o in output_tensors]
        return self._all_to_all([_bytes(i) for i in ins], [_bytes(o.c) for o in outs], list(output_tensors), opts,
                                lambda: [o.write_back() for o in outs])

    def reduce(self, tensors, opts=None):
        t = _one(tensors, "reduce")
        _dtype(t, "reduce")  # NCCL's types only, as all_reduce
        op, root = _op(opts.reduceOp, t, "reduce"), self._root(opts, "reduce")
        src, tag = t.contiguous().clone(), self._next_tag()

        def run(ms):
            if self._rank != root:
                self._exchange(tag, [(root, _bytes(src))], [], ms)
                return
            parts = [src if r == root else torch.empty_like(src) for r in range(self._size)]
            self._exchange(tag, [], [(r, _bytes(parts[r])) for r in range(self._size) if r != root], ms)
            acc = parts[0]  # private: received here, or the clone of this rank's tensor
            for part in parts[1:]:  # rank order: the same result whichever rank is the root
                _reduce_into(acc, part, op)
            if op == coll.AVG:
                if acc.is_floating_point():
                    acc.div_(self._size)
                else:
                    acc = acc.div(self._size, rounding_mode="trunc")
            t.copy_(acc.view_as(t))
        return self._submit(run, [t], opts)

    # ---- sparse all_reduce (gloo's: SUM of COO tensors), exact

    def _sparse_all_reduce(self, t: torch.Tensor, opts):
        """Every rank's coalesced indices and values travel by two exact all_gathers (the counts,
        then both padded to the largest), and each rank sums them locally in rank order."""
        if t.device.type != "cpu":
            raise UnsupportedError(f"trim: all_reduce got a sparse {t.device.type} tensor; the trim backend carries "
                                   "CPU tensors")
        if opts.reduceOp != dist.ReduceOp.SUM:
            raise UnsupportedError("trim: sparse all_reduce supports ReduceOp.SUM only (as gloo)")
        src = t.coalesce()
        indices, values = src.indices().contiguous(), src.values().contiguous()
        n, nnz = self._size, indices.size(1)

        def gather(x: torch.Tensor, ms: int) -> torch.Tensor:
            out = torch.empty((n,) + tuple(x.shape), dtype=x.dtype)
            self._comm.all_gather(x.data_ptr(), out.data_ptr(), x.numel() * x.element_size(), ms)
            return out

        def run(ms):
            counts = gather(torch.tensor([nnz], dtype=torch.int64), ms).view(-1).tolist()
            most = max(counts)
            idx = torch.zeros(indices.size(0), most, dtype=indices.dtype)
            idx[:, :nnz] = indices
            val = torch.zeros((most,) + tuple(values.shape[1:]), dtype=values.dtype)
            val[:nnz] = values
            all_idx, all_val = gather(idx, ms), gather(val, ms)
            parts = [(all_idx[r][:, :c], all_val[r][:c]) for r, c in enumerate(counts)]
            result = torch.sparse_coo_tensor(torch.cat([p[0] for p in parts], 1), torch.cat([p[1] for p in parts]),
                                             t.shape).coalesce()
            t.copy_(result)
        return self._submit(run, [t], opts)

    # ---- the coalesced forms: one ring collective over the tensors laid end to end

    def allreduce_coalesced(self, tensors, opts=None):
        if not tensors:
            raise UnsupportedError("trim: all_reduce_coalesced needs at least one tensor")
        for x in tensors:
            _cpu_tensor(x, "all_reduce_coalesced")
            if x.dtype != tensors[0].dtype:
                raise UnsupportedError(f"trim: all_reduce_coalesced needs tensors of one dtype, got {tensors[0].dtype} "
                                       f"and {x.dtype}")
        dtype, op = _dtype(tensors[0], "all_reduce_coalesced"), _op(opts.reduceOp, tensors[0], "all_reduce_coalesced")
        flat = torch.cat([x.reshape(-1) for x in tensors])

        def run(ms):
            self._comm.all_reduce(flat.data_ptr(), flat.numel(), dtype, op, ms)
            offset = 0
            for x in tensors:
                x.copy_(flat[offset:offset + x.numel()].view_as(x))
                offset += x.numel()
        return self._submit(run, list(tensors), opts)

    def allgather_coalesced(self, output_lists, input_tensors, opts=None):
        what = "all_gather_coalesced"
        if len(output_lists) != self._size:
            raise UnsupportedError(f"trim: {what} needs {self._size} output lists, got {len(output_lists)}")
        for lst in output_lists:
            if len(lst) != len(input_tensors) or any(o.numel() != i.numel() or o.dtype != i.dtype
                                                     for o, i in zip(lst, input_tensors)):
                raise UnsupportedError(f"trim: {what}: every output list must match the input tensors' sizes and "
                                       "dtypes")
        for x in input_tensors:
            _cpu_tensor(x, what)
        src = torch.cat([_bytes(x.contiguous()) for x in input_tensors]) if input_tensors else \
            torch.empty(0, dtype=torch.uint8)
        flat = torch.empty(self._size * src.numel(), dtype=torch.uint8)

        def run(ms):
            self._comm.all_gather(src.data_ptr(), flat.data_ptr(), src.numel(), ms)
            for lst, block in zip(output_lists, flat.view(self._size, -1) if src.numel() else [flat] * self._size):
                offset = 0
                for o in lst:
                    n = o.numel() * o.element_size()
                    o.copy_(_from_bytes(block[offset:offset + n], o))
                    offset += n
        return self._submit(run, [o for lst in output_lists for o in lst], opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self._each(outputs, inputs, opts, self._allgather_base, "all_gather_into_tensor_coalesced")

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self._each(outputs, inputs, opts, self._reduce_scatter_base, "reduce_scatter_tensor_coalesced")

    allgather_into_tensor_coalesced = all_gather_single_coalesced
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def _each(self, outputs, inputs, opts, one, what: str):
        if len(outputs) != len(inputs) or not outputs:
            raise UnsupportedError(f"trim: {what} needs as many outputs as inputs (at least one), got "
                                   f"{len(outputs)} and {len(inputs)}")
        works = [one(o, i, opts) for o, i in zip(outputs, inputs)]

        def run(ms):  # queued after them: they have run; this reports their errors
            for w in works:
                w.wait()
        return self._submit(run, list(outputs), opts)

    # ---- monitored_barrier: gloo's, on the p2p connections

    def monitored_barrier(self, opts=None, wait_all_ranks=False):
        """Gloo's: every rank sends rank 0 a token and waits for its answer; rank 0 names the
        ranks that did not arrive within the timeout (the first, or all with wait_all_ranks).
        Raises here (torch's monitoredBarrier returns nothing)."""
        t = getattr(opts, "timeout", None)
        ms = _timeout_ms(None, self._timeout) if t is None or t.total_seconds() < 0 else int(t.total_seconds() * 1000)
        tag = self._next_tag()
        me, size = self._rank, self._size

        def run(_ms):
            token = torch.zeros(1, dtype=torch.uint8)
            if me != 0:
                try:
                    self._exchange(tag, [(0, token)], [], max(ms, 1))
                    self._exchange(tag, [], [(0, torch.zeros(1, dtype=torch.uint8))], max(ms, 1))
                except p2p.P2PError as e:
                    raise TrimBackendError(f"[Rank {me}]: Rank {me} successfully reached monitoredBarrier, but received "
                                           "errors while waiting for send/recv from rank 0. Please check rank 0 logs "
                                           f"for faulty rank. ({e})", code=e.code) from e
                return
            if ms == 0 and size > 1:
                raise TrimBackendError("[Rank 0]: Rank 0 timed out in monitoredBarrier after 0 ms", code=coll.ETIMEOUT)
            t0 = time.monotonic()
            transfers = {}
            for r in range(1, size):
                tr = p2p.Transfer()
                self._p2p.recv(torch.zeros(1, dtype=torch.uint8), r, p2p.COLL, tag, ms, tr)
                transfers[r] = tr
            failed = []
            for r, tr in transfers.items():
                tr.wait()
                if tr.error is not None:
                    failed.append(r)
                    if not wait_all_ranks:
                        break
            if failed:
                elapsed = int((time.monotonic() - t0) * 1000)
                who = f"Ranks {', '.join(map(str, failed))}" if wait_all_ranks else f"Rank {failed[0]}"
                raise TrimBackendError(f"[Rank 0]: {who} failed to pass monitoredBarrier in {elapsed} ms",
                                       code=coll.ETIMEOUT)
            self._exchange(tag, [(r, token) for r in range(1, size)], [], max(ms, 1))
        self._submit(run, [], opts, blocking=True).wait()


def install_p2p_works(backend_cls) -> None:
    """Makes dist.isend and dist.irecv (and so dist.send, dist.recv) on a trim group return the
    backend's own Work.

    torch hands the Work a Python backend returns to the caller wrapped in a holder that forwards
    wait() and get_future() only (torch 2.15's PyWorkHolder): the holder's is_completed() stays
    False for good, and its _source_rank() raises, so dist.recv(tensor) from any source fails
    after its message arrived. For a trim group these call the backend directly, with torch's
    own argument handling, and return its Work, which answers both; every other call goes to
    torch's function unchanged. Idempotent."""
    c10d = dist.distributed_c10d
    if getattr(c10d.irecv, "_nccl_trim", False):
        return
    torch_irecv, torch_isend = c10d.irecv, c10d.isend

    def trim_group(tensor, group):
        if not isinstance(tensor, torch.Tensor) or c10d._rank_not_in_group(group):
            return None, None
        pg = c10d._group_or_default_group(group)
        try:
            backend = pg._get_backend(tensor.device)
        except (RuntimeError, ValueError):
            return None, None
        return (pg, backend) if isinstance(backend, backend_cls) else (None, None)

    def as_real(tensor):
        return torch.view_as_real(tensor) if tensor.is_complex() else tensor

    @functools.wraps(torch_irecv)
    def irecv(tensor, src=None, group=None, tag=0, group_src=None):
        pg, backend = trim_group(tensor, group)
        if backend is None:
            return torch_irecv(tensor, src=src, group=group, tag=tag, group_src=group_src)
        if src is None and group_src is None:
            return backend.recv_anysource([as_real(tensor)], tag)
        return backend.recv([as_real(tensor)], c10d._canonicalize_group_rank(pg, src, group_src), tag)

    @functools.wraps(torch_isend)
    def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
        pg, backend = trim_group(tensor, group)
        if backend is None:
            return torch_isend(tensor, dst=dst, group=group, tag=tag, group_dst=group_dst)
        return backend.send([as_real(tensor)], c10d._canonicalize_group_rank(pg, dst, group_dst), tag)

    irecv._nccl_trim = isend._nccl_trim = True
    c10d.irecv = dist.irecv = irecv
    c10d.isend = dist.isend = isend
