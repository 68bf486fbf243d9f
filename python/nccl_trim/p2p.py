"""Point-to-point transfers of the trim backend: send/recv with tags and from any source, carried
by the plugin, exact.

NCCL opens a connection per peer the first time a communicator sends to or receives from it (its
p2p channels), over the same ncclNet listen/connect/accept as the ring. Here each ordered pair of
ranks that talk gets a connection of its own, opened lazily through libtrim-coll as a 2-rank
communicator (so the plugin sees the same ncclNet calls, per-communicator init and profiler
chain), and a transfer is a 2-rank broadcast from the sender: never trimmed, every byte exact,
with the op descriptor check on. A message is a 32-byte header (channel, tag, length) and then
its payload.

Both directions between two ranks open together, the first time either rank addresses the other:
the handles travel through the group's store, and the two connects run in the same order on both
sides. From then on each peer has two threads:
- a sender that takes this rank's sends to that peer in the order they were issued;
- a receiver that drains every message the peer sends into the group's mailbox, whether or not
  a receive is posted for it yet (an eager protocol), so that no send waits for the receiving
  rank's program order and two ranks may send to each other first (batch_isend_irecv).
The mailbox matches messages to posted receives by (source, channel, tag) in arrival order, and
a receive from any source takes the oldest matching message. Unmatched messages wait there
(memory grows with what was sent and not yet received, as with MPI's eager sends).

Failures stay with the peer: a dead or closed peer fails that peer's sends and receives (and any
receive from any source) with its error; a send or receive that is not matched within its
timeout fails alone, in gloo's words. Closing the group aborts whatever is still waiting.
"""

import collections
import ctypes
import hashlib
import struct
import threading
import time
from typing import Callable, Dict, List, Optional

import torch

from . import coll
from .errors import CollectiveError

USER, COLL = 0, 1  # message channels: the user's send/recv, and the collectives built on them
_BYE = 0xFFFF  # the channel of the last header a sender sends when its group shuts down cleanly
_GOODBYE_S = 2.0  # how long a clean shutdown waits for the peer's goodbye before aborting
_HEADER = struct.Struct("<IIqQQ")  # magic, channel, tag, payload bytes, spare
_MAGIC = 0x54524D50  # "TRMP"
_POLL_S = 0.02  # how often an opening peer looks for the other side's handles in the store
_KEY = "nccl_trim/{size}/{generation}/p2p/{src}-{dst}/{side}"


class P2PError(CollectiveError):
    """A point-to-point transfer failed (its peer, its timeout, or the group's shutdown)."""


class Transfer:
    """One send or receive: done() once it finished; error is None when it succeeded. A
    receive's `source` is the rank its message came from. on_done runs once, on the thread that
    finished it (never under a lock)."""

    def __init__(self, on_done: Optional[Callable[["Transfer"], None]] = None):
        self.error: Optional[BaseException] = None
        self.source = -1
        self._event = threading.Event()
        self._on_done = on_done
        self._once = threading.Lock()

    def finish(self, error: Optional[BaseException] = None) -> bool:
        with self._once:
            if self._event.is_set():
                return False
            self.error = error
            self._event.set()
        if self._on_done is not None:
            self._on_done(self)
        return True

    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: Optional[float] = None) -> bool:
        return self._event.wait(seconds)


class _Recv:
    __slots__ = ("src", "channel", "tag", "dest", "transfer", "deadline", "ms")

    def __init__(self, src, channel, tag, dest, transfer, deadline, ms):
        self.src, self.channel, self.tag, self.dest = src, channel, tag, dest
        self.transfer, self.deadline, self.ms = transfer, deadline, ms

    def matches(self, src: int, channel: int, tag: int) -> bool:
        return (self.src is None or self.src == src) and self.channel == channel and self.tag == tag

    def describe(self) -> str:
        return f"recv from {'any rank' if self.src is None else f'rank {self.src}'} (tag {self.tag})"


def _deliver(r: _Recv, src: int, payload: torch.Tensor) -> None:
    """Copies a matched message into the receive's tensor, or fails the receive when the sizes
    disagree (gloo refuses those too: the sender's program and the receiver's differ)."""
    r.transfer.source = src
    if payload.numel() != r.dest.numel():
        r.transfer.finish(P2PError(f"trim: {r.describe()}: rank {src} sent {payload.numel()} bytes where this rank "
                                   f"expects {r.dest.numel()}: sizes must match on both sides", code=coll.EMISMATCH))
        return
    try:
        r.dest.copy_(payload)
    except BaseException as e:  # noqa: BLE001 - the receive fails, the receiver thread goes on
        r.transfer.finish(e)
        return
    r.transfer.finish(None)


class _Mailbox:
    """Posted receives and arrived messages of one group, matched in order."""

    def __init__(self, name: str):
        self._name = name
        self._cv = threading.Condition(threading.Lock())
        self._posted: List[_Recv] = []
        self._arrived: "collections.deque" = collections.deque()  # (src, channel, tag, payload)
        self._failed: Dict[int, BaseException] = {}
        self._closed: Optional[BaseException] = None
        self._watchdog: Optional[threading.Thread] = None

    def post(self, r: _Recv) -> None:
        with self._cv:
            error = self._closed or (self._failed.get(r.src) if r.src is not None else
                                     next(iter(self._failed.values()), None))
            found = None
            for i, (src, channel, tag, payload) in enumerate(self._arrived):
                if r.matches(src, channel, tag):
                    found = (src, payload)
                    del self._arrived[i]
                    break
            if found is None and error is None:
                self._posted.append(r)
                if self._watchdog is None:
                    self._watchdog = threading.Thread(target=self._expire, name=f"nccl_trim {self._name} p2p timeouts",
                                                      daemon=True)
                    self._watchdog.start()
                self._cv.notify()
                return
        if found is not None:
            _deliver(r, *found)
        else:
            r.transfer.finish(error)

    def arrive(self, src: int, channel: int, tag: int, payload: torch.Tensor) -> None:
        with self._cv:
            r = next((r for r in self._posted if r.matches(src, channel, tag)), None)
            if r is None:
                self._arrived.append((src, channel, tag, payload))
                return
            self._posted.remove(r)
        _deliver(r, src, payload)

    def fail_peer(self, src: int, error: BaseException) -> None:
        """`src` is gone: its receives fail, and so do the receives from any source (the job is
        broken; waiting for another rank's message would hide why)."""
        with self._cv:
            self._failed.setdefault(src, error)
            hit = [r for r in self._posted if r.src in (None, src)]
            self._posted = [r for r in self._posted if r.src not in (None, src)]
        for r in hit:
            r.transfer.finish(error)

    def close(self, error: BaseException) -> None:
        with self._cv:
            self._closed = error
            hit, self._posted = self._posted, []
            self._arrived.clear()
            self._cv.notify_all()
        for r in hit:
            r.transfer.finish(error)

    def _expire(self) -> None:
        with self._cv:
            while self._closed is None:
                now = time.monotonic()
                late = [r for r in self._posted if r.deadline <= now]
                if late:
                    self._posted = [r for r in self._posted if r.deadline > now]
                    self._cv.release()
                    try:
                        for r in late:
                            r.transfer.finish(P2PError(
                                f"trim: {r.describe()}: no matching send arrived: Timed out waiting {r.ms}ms for "
                                "recv operation to complete", code=coll.ETIMEOUT))
                    finally:
                        self._cv.acquire()
                    continue
                nearest = min((r.deadline for r in self._posted), default=None)
                self._cv.wait(None if nearest is None else max(0.0, nearest - now))


class _Send:
    __slots__ = ("channel", "tag", "data", "transfer", "deadline", "ms")

    def __init__(self, channel, tag, data, transfer, deadline, ms):
        self.channel, self.tag, self.data, self.transfer, self.deadline, self.ms = \
            channel, tag, data, transfer, deadline, ms


class _Peer:
    """The two connections with one peer, their sender and receiver threads, and the sends
    queued for it."""

    def __init__(self, p2p: "P2P", peer: int):
        self._p2p, self.peer = p2p, peer
        self._cv = threading.Condition(threading.Lock())
        self._sends: "collections.deque" = collections.deque()
        self._error: Optional[BaseException] = None
        self._stopping = False
        self._goodbye = False  # a clean shutdown: the sender says goodbye after the queued sends
        self._out: Optional[coll.Communicator] = None  # this rank -> peer (pair rank 0 sends)
        self._in: Optional[coll.Communicator] = None   # peer -> this rank
        self._threads: List[threading.Thread] = []
        self._start(self._run_sender, "send")

    def _start(self, target, what: str) -> None:
        t = threading.Thread(target=target, name=f"nccl_trim {self._p2p.name} p2p {what} {self.peer}", daemon=True)
        self._threads.append(t)
        t.start()

    def send(self, s: _Send) -> None:
        with self._cv:
            error = self._error
            if error is None:
                self._sends.append(s)
                self._cv.notify()
                return
        s.transfer.finish(error)

    def _fail(self, error: BaseException) -> None:
        with self._cv:
            if self._error is None:
                self._error = error
            error = self._error
            pending, self._sends = list(self._sends), collections.deque()
            self._cv.notify_all()
        for s in pending:
            s.transfer.finish(error)
        self._p2p.mailbox.fail_peer(self.peer, error)

    def _expire_sends(self) -> None:
        """Sends that waited past their deadline for the connection to open fail alone."""
        now = time.monotonic()
        with self._cv:
            late = [s for s in self._sends if s.deadline <= now]
            for s in late:
                self._sends.remove(s)
        for s in late:
            s.transfer.finish(P2PError(f"trim: send to rank {self.peer} (tag {s.tag}): rank {self.peer} has not opened "
                                       f"its point-to-point connection to this rank: Timed out waiting {s.ms}ms for "
                                       "send operation to complete", code=coll.ETIMEOUT))

    # ---- opening

    def _open(self) -> bool:
        p2p, me, peer = self._p2p, self._p2p.rank, self.peer
        lib = coll.load()
        # Two 2-rank communicators: "src->dst" has the sender as its rank 0.
        self._out = p2p.communicator(lib, me, peer, 0)
        self._in = p2p.communicator(lib, peer, me, 1)
        p2p.store.set(p2p.key(me, peer, 0), self._out.handle)
        p2p.store.set(p2p.key(peer, me, 1), self._in.handle)
        wanted = [p2p.key(me, peer, 1), p2p.key(peer, me, 0)]
        while not p2p.store.check(wanted):
            with self._cv:
                if self._stopping:
                    return False
            self._expire_sends()
            time.sleep(_POLL_S)
        out_next, in_next = (p2p.store.get(k) for k in wanted)
        ms = p2p.timeout_ms
        # The same order on both ranks: the lower rank's outgoing connection first.
        order = [(self._out, out_next), (self._in, in_next)]
        for comm, handle in (order if me < peer else order[::-1]):
            comm.connect(handle, ms)
        self._start(self._run_receiver, "recv")
        return True

    # ---- the two threads

    def _run_sender(self) -> None:
        try:
            if not self._open():
                return
            header = ctypes.create_string_buffer(_HEADER.size)
            while True:
                with self._cv:
                    while not self._sends and not self._stopping:
                        self._cv.wait()
                    if not self._sends:
                        if self._goodbye:  # the receiver may stop: nothing more comes from here
                            _HEADER.pack_into(header, 0, _MAGIC, _BYE, 0, 0, 0)
                            self._out.broadcast(ctypes.addressof(header), _HEADER.size, 0, int(_GOODBYE_S * 1000))
                        return
                    s = self._sends.popleft()
                remaining_ms = int((s.deadline - time.monotonic()) * 1000)
                if remaining_ms <= 0:
                    s.transfer.finish(P2PError(f"trim: send to rank {self.peer} (tag {s.tag}): Timed out waiting "
                                               f"{s.ms}ms for send operation to complete", code=coll.ETIMEOUT))
                    continue
                nbytes = s.data.numel()
                _HEADER.pack_into(header, 0, _MAGIC, s.channel, s.tag, nbytes, 0)
                self._out.broadcast(ctypes.addressof(header), _HEADER.size, 0, remaining_ms)
                if nbytes:
                    self._out.broadcast(s.data.data_ptr(), nbytes, 0, remaining_ms)
                s.transfer.finish(None)
        except BaseException as e:  # noqa: BLE001 - every waiter gets it
            self._fail(self._p2p.wrap(e, f"send to rank {self.peer}"))

    def _run_receiver(self) -> None:
        header = ctypes.create_string_buffer(_HEADER.size)
        try:
            while True:
                # No deadline while idle: a peer may stay silent for good; death or close ends it.
                self._in.broadcast(ctypes.addressof(header), _HEADER.size, 0, 0)
                magic, channel, tag, nbytes, _ = _HEADER.unpack_from(header, 0)
                if magic != _MAGIC:
                    raise P2PError(f"trim: rank {self.peer} sent a point-to-point header with magic {magic:#x}",
                                   code=coll.EMISMATCH)
                if channel == _BYE:
                    raise P2PError(f"trim: rank {self.peer} shut its group down", code=coll.EREMOTE)
                payload = torch.empty(nbytes, dtype=torch.uint8)
                if nbytes:
                    self._in.broadcast(payload.data_ptr(), nbytes, 0, self._p2p.timeout_ms)
                self._p2p.mailbox.arrive(self.peer, channel, tag, payload)
        except BaseException as e:  # noqa: BLE001
            self._fail(self._p2p.wrap(e, f"receive from rank {self.peer}"))

    def stop(self, graceful: bool) -> None:
        """Tells the sender to end. Graceful: after the queued sends, with a goodbye to the peer,
        whose receiver then ends too; so that neither side closes a connection with a receive
        posted on it (the plugin would warn of both), the peer's goodbye is awaited in close()."""
        with self._cv:
            self._stopping = True
            self._goodbye = graceful
            self._cv.notify_all()

    def close(self, error: BaseException, deadline: Optional[float]) -> None:
        """After stop(): waits for both threads until `deadline` (None: not at all), aborts what
        still runs, and closes the connections."""
        if deadline is not None:
            for t in list(self._threads):
                t.join(max(0.0, deadline - time.monotonic()))
        for comm in (self._out, self._in):
            if comm is not None and any(t.is_alive() for t in self._threads):
                comm.abort()
        for t in list(self._threads):
            if t is not threading.current_thread():
                t.join()
        self._fail(error)
        for comm in (self._out, self._in):
            if comm is not None:
                try:
                    comm.close()
                except CollectiveError:
                    pass  # aborted connections report the abort; nothing is waiting for them


class P2P:
    """A group's point-to-point side: peers opened on first use, one mailbox."""

    def __init__(self, store, rank: int, size: int, generation: int, comm_id: int, timeout_ms: int, options,
                 name: str):
        self.store, self.rank, self.size, self.generation = store, rank, size, generation
        self.comm_id, self.timeout_ms, self.options, self.name = comm_id, timeout_ms, options, name
        self.mailbox = _Mailbox(name)
        self._lock = threading.Lock()
        self._peers: Dict[int, _Peer] = {}
        self._closed: Optional[BaseException] = None

    def key(self, src: int, dst: int, side: int) -> str:
        return _KEY.format(size=self.size, generation=self.generation, src=src, dst=dst, side=side)

    def communicator(self, lib, src: int, dst: int, side: int) -> coll.Communicator:
        """The 2-rank communicator carrying src -> dst, this rank being its rank `side`."""
        digest = hashlib.blake2b(f"{self.comm_id}/{src}->{dst}".encode(), digest_size=8).digest()
        o = self.options
        return coll.Communicator(lib, rank=side, nranks=2, comm_id=int.from_bytes(digest, "little"),
                                 traffic_class=o.traffic_class, net_api=o.net_api, profiler=o.profiler,
                                 check_ops=True, name=f"{self.name} p2p {src}->{dst}")

    def wrap(self, e: BaseException, what: str) -> BaseException:
        if isinstance(e, P2PError):
            return e
        if isinstance(e, CollectiveError):
            return P2PError(f"trim: {what}: {e}", code=e.code)
        return e

    def _peer(self, peer: int) -> _Peer:
        with self._lock:
            if self._closed is not None:
                raise self._closed
            p = self._peers.get(peer)
            if p is None:
                p = self._peers[peer] = _Peer(self, peer)
            return p

    def _check_peer(self, peer: int, what: str) -> None:
        if not 0 <= peer < self.size or peer == self.rank:
            raise ValueError(f"trim: {what} rank {peer}: a rank of this group (0..{self.size - 1}) other than this "
                             f"one ({self.rank})")

    def send(self, data: torch.Tensor, dst: int, channel: int, tag: int, ms: int, transfer: Transfer) -> None:
        """Queues `data` (contiguous uint8) for `dst`; `transfer` finishes once it is on the wire and
        taken by the peer's receiver."""
        self._check_peer(dst, "send to")
        self._peer(dst).send(_Send(channel, tag, data, transfer, time.monotonic() + ms / 1000, ms))

    def recv(self, dest: torch.Tensor, src: Optional[int], channel: int, tag: int, ms: int,
             transfer: Transfer) -> None:
        """Posts a receive into `dest` (contiguous uint8) from `src` (None: any rank)."""
        if src is None:
            for peer in range(self.size):
                if peer != self.rank:
                    self._peer(peer)
        else:
            self._check_peer(src, "recv from")
            self._peer(src)
        self.mailbox.post(_Recv(src, channel, tag, dest, transfer, time.monotonic() + ms / 1000, ms))

    def close(self, error: BaseException, graceful: bool = False) -> None:
        with self._lock:
            if self._closed is not None:
                return
            self._closed = error
            peers = list(self._peers.values())
        # Every peer is told first, then waited for: a peer waits for its own peers' goodbyes too.
        for p in peers:
            p.stop(graceful)
        deadline = time.monotonic() + _GOODBYE_S if graceful else None
        for p in peers:
            p.close(error, deadline)
        self.mailbox.close(error)
