// trim::net's data path (isend, irecv, iflush, test: NCCL's proxy thread, with NCCL's kernel
// spinning on the GPU until the data has moved, so nothing here may wait) and teardown (close).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "transport/net_internal.h"

namespace trim::net {

using transport::Conn;
using detail::null_argument;

namespace {

OpAttr unpack_attr(uint32_t v) {
  OpAttr a;
  a.func = static_cast<Func>(v & 0xff);
  a.algo = static_cast<Algo>((v >> 8) & 0xff);
  a.proto = static_cast<Proto>((v >> 16) & 0xff);
  return a;
}

}  // namespace

// ---- Data path ----

Result<Request*> isend(SendComm* comm, const void* data, size_t bytes, int tag, MemHandle* mem, void* profiler_op) {
  (void)tag;  // NCCL matches FIFO per comm; tags carry nothing more
  if (comm == nullptr) return null_argument("isend", "comm");
  if (data == nullptr && bytes != 0) return null_argument("isend", "data");
  Conn* c = comm->core.conn.get();
  if (c->dead.load(std::memory_order_acquire)) return c->dead_status;
  if (bytes > static_cast<size_t>(INT_MAX)) {
    return Status(Code::kInvalidArgument, fmt::format("isend: {} bytes exceeds maxP2pBytes", bytes));
  }
  Request* r = comm->core.free_slot(comm);
  if (r == nullptr) return static_cast<Request*>(nullptr);
  Context& ctx = *comm->ctx();
  const transport::ClassifyResult cls =
      ctx.classifier->classify(unpack_attr(ctx.attr.load(std::memory_order_relaxed)), profiler_op, bytes);
  transport::SendOp& op = r->send;
  op.data = static_cast<const uint8_t*>(data);
  op.bytes = bytes;
  op.seq = comm->core.next_seq++;
  op.trimmable = cls.trimmable;
  if (cls.trimmable && comm->core.rotated) {
    transport::global_stats().rotated_messages.fetch_add(1, std::memory_order_relaxed);
  }
  (void)mem;  // host memory only: nothing to look up
  op.dtype = cls.dtype;
  op.result.reset(&ctx.completions);
  {
    std::lock_guard<std::mutex> lock(c->mu);
    c->posted_sends.push_back(&op);
    c->has_posted.store(true, std::memory_order_release);
  }
  comm->core.engine->wake();
  return r;
}

Result<Request*> irecv(RecvComm* comm, int n, const RecvBuffer* buffers, bool completion_optional) {
  (void)completion_optional;  // we always complete; NCCL then need not rely on LL flags alone
  if (comm == nullptr) return null_argument("irecv", "comm");
  if (buffers == nullptr) return null_argument("irecv", "buffers");
  if (n != 1) {
    return Status(Code::kInvalidArgument, fmt::format("irecv: {} buffers, but this device reports maxRecvs = 1", n));
  }
  Conn* c = comm->core.conn.get();
  if (c->dead.load(std::memory_order_acquire)) return c->dead_status;
  const RecvBuffer& b = buffers[0];
  const bool combine = b.combine_type >= 0;
  if (combine && (!codec::valid_red_type(b.combine_type) || !codec::valid_red_op(b.combine_op))) {
    return Status(Code::kInvalidArgument,
                  fmt::format("irecv: cannot combine NCCL datatype {} with op {}", b.combine_type, b.combine_op));
  }
  Request* r = comm->core.free_slot(comm);
  if (r == nullptr) return static_cast<Request*>(nullptr);
  transport::RecvOp& op = r->recv;
  op.combine = combine;
  op.combine_type = static_cast<codec::RedType>(combine ? b.combine_type : 0);
  op.combine_op = static_cast<codec::RedOp>(b.combine_op);
  op.data = static_cast<uint8_t*>(buffers[0].data);
  op.capacity = buffers[0].capacity_bytes;
  op.seq = comm->core.next_seq++;
  op.result.reset(&comm->ctx()->completions);
  {
    std::lock_guard<std::mutex> lock(c->mu);
    c->posted_recvs.push_back(&op);
    c->has_posted.store(true, std::memory_order_release);
  }
  comm->core.engine->wake();
  return r;
}

Result<Request*> iflush(RecvComm* comm, int n, const RecvBuffer* buffers) {
  if (comm == nullptr) return null_argument("iflush", "comm");
  if (buffers == nullptr || n < 1 || n > kMaxRecvs) return Status(Code::kInvalidArgument, "iflush: bad buffers");
  // Host memory: the data is where the CPU sees it, and NCCL's kernel reads it from there.
  return static_cast<Request*>(nullptr);
}

namespace {
// The completion a request reports: its send's or its receive's.
const transport::OpResult& result_of(const Request* request) {
  return request->owner->kind() == Comm::Kind::kSend ? request->send.result : request->recv.result;
}
}  // namespace

Status test(Request* request, Completion* out) {
  if (request == nullptr) return null_argument("test", "request");
  if (out == nullptr) return null_argument("test", "completion");
  if (!request->in_use) return Status(Code::kInvalidArgument, "test: request is not in use (tested after done?)");
  const transport::OpResult& res = result_of(request);
  *out = Completion();
  switch (res.state()) {
    case transport::OpResult::kPending: return Status::ok();
    case transport::OpResult::kDone:
      out->done = true;
      out->count = 1;
      out->sizes_bytes[0] = res.bytes();
      request->in_use = false;
      return Status::ok();
    case transport::OpResult::kFailed: {
      Status err = res.error();
      request->in_use = false;
      return err;
    }
  }
  return Status(Code::kInternal, "test: corrupt request state");
}

Status wait_any(Request* const* requests, int n, int64_t timeout_ns, bool* ready) {
  if (ready == nullptr) return null_argument("wait_any", "ready");
  *ready = false;
  if (requests == nullptr || n < 1) return Status(Code::kInvalidArgument, "wait_any: no requests");
  Context* ctx = nullptr;
  for (int i = 0; i < n; ++i) {
    const Request* r = requests[i];
    if (r == nullptr || !r->in_use) return Status(Code::kInvalidArgument, "wait_any: a request is not in use");
    if (ctx != nullptr && r->owner->ctx() != ctx) {
      return Status(Code::kInvalidArgument, "wait_any: requests of different contexts");
    }
    ctx = r->owner->ctx();
  }
  transport::CompletionSignal& signal = ctx->completions;
  const uint32_t gen = signal.arm();
  for (int i = 0; i < n; ++i) {
    if (!result_of(requests[i]).pending_seq_cst()) {
      *ready = true;
      return Status::ok();
    }
  }
  signal.wait(gen, timeout_ns);
  return Status::ok();
}

Status set_op_attr(Context* ctx, const OpAttr& attr) {
  if (ctx == nullptr) return null_argument("set_op_attr", "context");
  const uint32_t packed = static_cast<uint32_t>(attr.func) | static_cast<uint32_t>(attr.algo) << 8 |
                          static_cast<uint32_t>(attr.proto) << 16;
  ctx->attr.store(packed, std::memory_order_relaxed);
  return Status::ok();
}

// ---- Teardown ----

namespace {

template <typename CommT>
Status close_comm(CommT* comm) {
  std::unique_ptr<CommT> owned(comm);
  Conn* c = comm->core.conn.get();
  comm->core.engine->remove(c);  // from here on only this thread (and its codec tasks) touch it
  // Codec tasks of its operations may still read or write NCCL's buffers, which NCCL frees
  // after close: stop them, and let those that run end.
  const uint32_t found = detail::codec_tasks_in_flight(*c);
  if (c->send) c->send->cancel_codec();
  if (c->recv) c->recv->cancel_codec();
  detail::wait_for_codec(*comm->ctx(), *c, "close", found);
  if (c->tcp_open && c->ctrl.writable()) {
    // The receiver says how many messages it completed, so a sender whose last ACKs were lost
    // still completes those sends instead of failing them.
    const uint64_t fin_value = c->recv ? c->recv->completed() : comm->core.next_seq;
    uint8_t b[transport::kFrameBytes];
    transport::write_frame(transport::Frame{transport::FrameType::kFin, 0, fin_value}, b);
    // After the frames that still wait, in order. Best effort, waiting 100 ms at most for room:
    // close runs on NCCL's thread (which waits for close anyway), never the engine's, and the
    // peer may be gone.
    c->ctrl.push(c->tcp.get(), b);
    c->ctrl.drain_for(c->tcp.get(), 100);
  }
  const transport::ConnCounters& k = c->send ? c->send->counters() : c->recv->counters();
  transport::global_stats().add(k);
  TRIM_INFO("NET/Trim: closed {} connection {:#018x} with {}: {}", c->send ? "send" : "recv", c->cookie,
            c->peer_name, k.to_string());
  return Status::ok();
}

}  // namespace

uint32_t detail::codec_tasks_in_flight(const transport::Conn& c) {
  return c.send ? c.send->tasks_in_flight() : c.recv->tasks_in_flight();
}

void detail::wait_for_codec(const Context& ctx, const transport::Conn& c, const char* what, uint32_t found) {
  const auto in_flight = [&c] { return codec_tasks_in_flight(c); };
  if (found != 0) transport::global_stats().codec_waited_tasks.fetch_add(found, std::memory_order_relaxed);
  const auto start = std::chrono::steady_clock::now();
  auto next_warn = start + std::chrono::milliseconds(ctx.params.timeout_ms);
  auto nap = std::chrono::microseconds(20);
  for (uint32_t n; (n = in_flight()) != 0;) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_warn) {
      TRIM_WARN("NET/Trim: {} of connection {:#018x} still waits for {} codec task(s) after {} ms (a codec worker is "
                "stalled?): NCCL frees the buffers they use once it returns, so it keeps waiting",
                what, c.cookie, n, std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count());
      next_warn = now + std::chrono::milliseconds(ctx.params.timeout_ms);
    }
    std::this_thread::sleep_for(nap);
    nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::milliseconds(1));
  }
}

Status close_send(SendComm* comm) {
  if (comm == nullptr) return null_argument("close_send", "comm");
  return close_comm(comm);
}

Status close_recv(RecvComm* comm) {
  if (comm == nullptr) return null_argument("close_recv", "comm");
  return close_comm(comm);
}

}  // namespace trim::net
