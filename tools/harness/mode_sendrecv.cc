// --mode sendrecv: rank 0 streams --bytes to rank 1 per iteration in slices of at most 1 MiB,
// at most 8 in flight, like NCCL's proxy on one connection, with one proxy op (and its step
// events) per iteration. Also the fault scenarios
// (--kill-peer, --freeze-peer, --close-in-flight, --abort-in-flight), which all need exactly this shape.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>

#include "tools/harness/data.h"
#include "coll/profiler_host.h"
#include "tools/harness/rank.h"

namespace trim::harness {

// The proxy-step states and event types NCCL records, from the engine.
using namespace coll;  // NOLINT(google-build-using-namespace): the .cc of a mode that plays the proxy itself

namespace {

constexpr int64_t kNsPerMs = 1000000;

size_t message_count(size_t bytes) { return std::max<size_t>(1, (bytes + kSliceBytes - 1) / kSliceBytes); }

size_t message_bytes(size_t bytes, size_t index) {
  size_t offset = index * kSliceBytes;
  return offset >= bytes ? 0 : std::min(kSliceBytes, bytes - offset);
}

// p2p: Send on the sender and Recv on the receiver, with algo/proto left at ring SIMPLE the way
// NCCL leaves stale values for p2p ops (the plugin must ignore them and stay exact).
Status announce(RankCtx& c, bool sender) {
  uint32_t op = c.opt.op == SendRecvOp::kAllReduce ? kFuncAllReduce : sender ? kFuncSend : kFuncRecv;
  ncclResult_t r = c.net->set_net_attr(op, kAlgoRing, kProtoSimple);
  return r == ncclSuccess ? Status::ok() : plugin_error("setNetAttr", r);
}

// The profiler events of one iteration: NCCL's P2p Send/Recv task, or (--op allreduce) an fp32
// ring AllReduce SIMPLE. The latter has no ring behind it: one hop of message_count transfers,
// whose step numbering fits a ring's phase rule only by accident (2 ranks: transfers 0-1 of
// every 4 would count as reduce-scatter), so the tests that want all of it trimmable run with
// NCCL_TRIM_PHASE=all. There is a single copy of the data, hence no replicas to diverge.
void begin_events(RankCtx& c, OpEvents& ev, bool sender) {
  TaskInfo t;
  if (c.opt.op == SendRecvOp::kP2p) {
    t.p2p = true;
    t.func = sender ? "Send" : "Recv";
    t.datatype = "ncclInt8";
    t.elem_bytes = 1;
    t.count = c.opt.bytes;
    t.root = sender ? 1 : 0;
  } else {
    t.datatype = "ncclFloat32";
    t.count = c.opt.bytes / 4;
  }
  const OpShape used{sender ? 1 : 0, static_cast<int>(message_count(c.opt.bytes)), static_cast<int>(kSliceBytes)};
  ev.begin(t, sender ? used : OpShape{}, sender ? OpShape{} : used);
}


// One iteration's transfers on one connection, as NCCL's proxy drives its steps: post while
// fewer than 8 are in flight, test the oldest (NCCL tests its steps in order). SendPump and
// RecvPump say how a step is posted and what its completion means.
class StepPump {
 public:
  StepPump(NetPlugin* net, void* comm, size_t bytes, void* mh, int tag, ProxyOp* op, bool sender)
      : net_(net), comm_(comm), bytes_(bytes), mh_(mh), tag_(tag), op_(op), total_(message_count(bytes)), sender_(sender) {}
  virtual ~StepPump() = default;

  // A new iteration, whose proxy op the caller has just begun.
  void restart() {
    posted_ = 0;
    done_ = 0;
    started_ = 0;
  }
  bool finished() const { return done_ == total_; }
  size_t in_flight() const { return inflight_.size(); }
  size_t done() const { return done_; }
  size_t posted() const { return posted_; }
  size_t total() const { return total_; }

  // Posts up to `max_posts` (close-in-flight stops early); tests the oldest unless told not to.
  Status pass(bool* moved, size_t max_posts = SIZE_MAX, bool test = true) {
    while (posted_ < total_ && inflight_.size() < kMaxInFlight && max_posts > 0) {
      const int step = static_cast<int>(posted_);
      if (started_ == posted_) {  // a retried post keeps its step event
        op_->start_step(step);
        ++started_;
      }
      void* req = nullptr;
      ncclResult_t r = post(posted_, op_->phandle(step), &req);
      if (r != ncclSuccess) return plugin_error(sender_ ? "isend" : "irecv", r);
      if (req == nullptr) break;  // no slot: retry on a later pass
      op_->record_step(step, posted_state(), posted_bytes(posted_));
      inflight_.push_back(req);
      ++posted_;
      --max_posts;
      *moved = true;
    }
    if (test && !inflight_.empty()) {
      int done = 0;
      size_t size = 0;
      ncclResult_t r = net_->test(inflight_.front(), &done, &size);
      if (r != ncclSuccess) {
        inflight_.pop_front();  // an errored request is not tested again
        return plugin_error(sender_ ? "test(send)" : "test(recv)", r);
      }
      if (done != 0) {
        inflight_.pop_front();
        TRIM_RETURN_IF_ERROR(completed(done_, size));
        op_->stop_step(static_cast<int>(done_));
        ++done_;
        if (done_ == total_) op_->stop();
        *moved = true;
      }
    }
    return Status::ok();
  }

 protected:
  virtual ncclResult_t post(size_t index, void* phandle, void** req) = 0;
  virtual Status completed(size_t index, size_t size) = 0;
  virtual int posted_state() const = 0;
  virtual size_t posted_bytes(size_t index) const = 0;

  NetPlugin* net_;
  void* comm_;
  size_t bytes_;
  void* mh_;
  int tag_;

 private:
  ProxyOp* op_;
  size_t total_;
  bool sender_;
  size_t posted_ = 0, done_ = 0, started_ = 0;
  std::deque<void*> inflight_;
};

class SendPump final : public StepPump {
 public:
  SendPump(NetPlugin* net, void* comm, const char* data, size_t bytes, void* mh, int tag, ProxyOp* op)
      : StepPump(net, comm, bytes, mh, tag, op, true), data_(data) {}

 private:
  ncclResult_t post(size_t index, void* phandle, void** req) override {
    return net_->isend(comm_, const_cast<char*>(data_) + index * kSliceBytes, message_bytes(bytes_, index), tag_, mh_,
                       phandle, req);
  }
  Status completed(size_t, size_t) override { return Status::ok(); }
  int posted_state() const override { return kStepSendWait; }
  size_t posted_bytes(size_t index) const override { return message_bytes(bytes_, index); }

  const char* data_;
};

// Receives into 8 staging slots of 1 MiB (NCCL's step buffers), each irecv posting the full
// slot; completed data is copied out in order.
class RecvPump final : public StepPump {
 public:
  RecvPump(NetPlugin* net, void* comm, char* slots, void* slots_mh, char* out, size_t bytes, int tag, ProxyOp* op)
      : StepPump(net, comm, bytes, slots_mh, tag, op, false), slots_(slots), out_(out) {}

 private:
  ncclResult_t post(size_t index, void* phandle, void** req) override {
    return net_->irecv(comm_, slots_ + (index % kMaxInFlight) * kSliceBytes, kSliceBytes, tag_, mh_, phandle, req);
  }
  Status completed(size_t index, size_t size) override {
    const size_t want = message_bytes(bytes_, index);
    if (size != want) {
      return Status(Code::kInternal, "message " + std::to_string(index) + ": test reported " +
                                         (size == SIZE_MAX ? std::string("no size") : std::to_string(size)) +
                                         " bytes, the sender sent " + std::to_string(want));
    }
    std::memcpy(out_ + index * kSliceBytes, slots_ + (index % kMaxInFlight) * kSliceBytes, want);
    return Status::ok();
  }
  int posted_state() const override { return kStepRecvWait; }
  size_t posted_bytes(size_t) const override { return 0; }

  char* slots_;
  char* out_;
};

bool leaves_requests_in_flight(const Options& o) {
  return o.fault == Fault::kCloseInFlight || o.fault == Fault::kAbortInFlight;
}

// --close-in-flight / --abort-in-flight: post every slot's request, wait for the peer to have
// posted too, let the first one complete (so data is really moving), deregMr with the rest still in flight (NCCL deregisters before it
// closes), and for abort also free the buffers then, as NCCL's proxy teardown does. The caller
// closes the comm.
template <typename Pump>
Status leave_in_flight(RankCtx& c, Pump& pump, MemReg& reg) {
  const size_t want = std::min(pump.total(), kMaxInFlight);
  const int64_t give_up = mono_ns() + 2000 * kNsPerMs;
  Backoff backoff;
  bool moved = false;
  while (pump.posted() < want && mono_ns() < give_up) {
    TRIM_RETURN_IF_ERROR(pump.pass(&moved, kMaxInFlight, false));
    backoff.idle();
  }
  // Both sides have posted before either may close: an isend after the peer's close would
  // rightly fail and is not the scenario under test.
  TRIM_RETURN_IF_ERROR(c.chan->barrier());
  while (pump.done() == 0 && mono_ns() < give_up) {
    // The peer may close first: a failed request then is its fair answer, not ours to judge.
    Status st = pump.pass(&moved, 0, true);
    if (!st.is_ok()) {
      if (c.opt.verbose) std::fprintf(stderr, "[rank %d] before close: %s\n", c.rank, st.message().c_str());
      break;
    }
    backoff.idle();
  }
  c.report->in_flight_at_close = static_cast<int64_t>(pump.posted() - pump.done());
  if (c.opt.verbose) {
    std::fprintf(stderr, "[rank %d] closing with %zu of %zu requests in flight\n", c.rank,
                 pump.posted() - pump.done(), pump.posted());
  }
  TRIM_RETURN_IF_ERROR(reg.release());
  if (c.opt.fault == Fault::kAbortInFlight) c.buffers->free_all();
  // Both sides deregister before either closes: a peer's close (its FIN) abandons this side's
  // messages too, and would otherwise decide whether this deregMr still finds their codec tasks.
  return c.chan->barrier();
}

template <typename Pump>
Status drive(Pump& pump, int64_t deadline_ns) {
  Backoff backoff;
  while (!pump.finished()) {
    bool moved = false;
    Status st = pump.pass(&moved);
    if (!st.is_ok()) return st;
    if (moved) backoff.progressed(); else backoff.idle();
    if (mono_ns() > deadline_ns) return Status(Code::kUnavailable, "deadline");
  }
  return Status::ok();
}

// The fault scenarios' sender: streams iterations back to back until the plugin reports the
// dead peer, or declares a hang 3x the plugin's timeout after the peer's own announcement
// (or after the last progress, should that announcement never come).
Status fault_sender(RankCtx& c, SendPump& pump, OpEvents& ev) {
  const int64_t limit_ns = 3ll * effective_timeout_ms(c.opt) * kNsPerMs;
  int64_t peer_event_ns = 0;
  int64_t last_progress_ns = mono_ns();
  int64_t next_poll_ns = 0;
  Backoff backoff;
  begin_events(c, ev, true);
  pump.restart();
  for (;;) {
    if (pump.finished()) {
      begin_events(c, ev, true);
      pump.restart();
    }
    bool moved = false;
    Status st = pump.pass(&moved);
    int64_t now = mono_ns();
    if (!st.is_ok()) {
      c.report->outcome = Outcome::kPeerError;
      c.report->error_at_ns = now;
      c.report->error = st.message();
      return Status::ok();
    }
    if (moved) {
      last_progress_ns = now;
      backoff.progressed();
    } else {
      backoff.idle();
    }
    if (now >= next_poll_ns) {  // the parent channel, about once a millisecond
      std::string event;
      if (peer_event_ns == 0 && c.chan->poll_peer_event(&event) && event.size() == sizeof(int64_t)) {
        std::memcpy(&peer_event_ns, event.data(), sizeof(peer_event_ns));
      }
      next_poll_ns = now + kNsPerMs;
    }
    int64_t since = peer_event_ns > 0 ? peer_event_ns : last_progress_ns;
    if (now - since > limit_ns) {
      c.report->outcome = Outcome::kHang;
      c.report->error = "no error from isend/test " + std::to_string((now - since) / kNsPerMs) + " ms after the peer " +
                        (peer_event_ns > 0 ? "went away" : "stopped making progress") + " (" +
                        std::to_string(pump.in_flight()) + " sends in flight)";
      return Status::ok();
    }
  }
}

Status run_sender(RankCtx& c) {
  const Options& o = c.opt;
  HostBuffer* bufp = nullptr;
  TRIM_RETURN_IF_ERROR(c.buffers->make(o.bytes, "the message", &bufp));
  HostBuffer& buf = *bufp;
  MemReg reg(c.net, c.send_comm);
  Status st = reg.reg(buf.data(), std::max<size_t>(o.bytes, 1));
  if (!st.is_ok()) return st;
  OpEvents ev(c.prof);
  SendPump pump(c.net, c.send_comm, buf.data(), o.bytes, reg.handle(), c.rank, &ev.send());
  const int64_t deadline = mono_ns() + static_cast<int64_t>(o.deadline_s) * 1000 * kNsPerMs;

  if (leaves_requests_in_flight(o)) {
    fill_input(data_key(o.seed, 0, 0), buf.data(), o.bytes);
    TRIM_RETURN_IF_ERROR(announce(c, true));
    TRIM_RETURN_IF_ERROR(c.chan->barrier());
    begin_events(c, ev, true);
    return leave_in_flight(c, pump, reg);
  }
  if (o.fault != Fault::kNone) {
    fill_input(data_key(o.seed, 0, 0), buf.data(), o.bytes);
    TRIM_RETURN_IF_ERROR(announce(c, true));
    TRIM_RETURN_IF_ERROR(c.chan->barrier());
    return fault_sender(c, pump, ev);
  }
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    fill_input(data_key(o.seed, 0, it), buf.data(), o.bytes);
    TRIM_RETURN_IF_ERROR(announce(c, true));
    TRIM_RETURN_IF_ERROR(c.chan->barrier());
    int64_t t0 = mono_ns();
    begin_events(c, ev, true);
    pump.restart();
    TRIM_RETURN_IF_ERROR(drive(pump, deadline));
    if (it >= o.warmup) c.report->iter_ns.push_back(mono_ns() - t0);
  }
  return c.chan->barrier();  // the receiver has checked everything
}

Status run_receiver(RankCtx& c) {
  const Options& o = c.opt;
  HostBuffer* outp = nullptr;
  HostBuffer* slotsp = nullptr;
  TRIM_RETURN_IF_ERROR(c.buffers->make(o.bytes, "the message", &outp));
  TRIM_RETURN_IF_ERROR(c.buffers->make(kSliceBytes * kMaxInFlight, "the receive slots", &slotsp));
  HostBuffer& out = *outp;
  HostBuffer& slots = *slotsp;
  MemReg reg(c.net, c.recv_comm);
  TRIM_RETURN_IF_ERROR(reg.reg(slots.data(), slots.bytes()));
  OpEvents ev(c.prof);
  RecvPump pump(c.net, c.recv_comm, slots.data(), reg.handle(), out.data(), o.bytes, c.rank - 1, &ev.recv());
  const int64_t deadline = mono_ns() + static_cast<int64_t>(o.deadline_s) * 1000 * kNsPerMs;

  if (leaves_requests_in_flight(o)) {
    TRIM_RETURN_IF_ERROR(announce(c, false));
    TRIM_RETURN_IF_ERROR(c.chan->barrier());
    begin_events(c, ev, false);
    return leave_in_flight(c, pump, reg);
  }
  if (o.fault != Fault::kNone) {
    TRIM_RETURN_IF_ERROR(announce(c, false));
    TRIM_RETURN_IF_ERROR(c.chan->barrier());
    begin_events(c, ev, false);
    // Halfway through the first iteration (at least one message in), go away.
    const size_t stop_after = std::max<size_t>(1, message_count(o.bytes) / 2);
    Backoff backoff;
    while (pump.done() < stop_after) {
      bool moved = false;
      TRIM_RETURN_IF_ERROR(pump.pass(&moved));
      if (moved) backoff.progressed(); else backoff.idle();
      if (mono_ns() > deadline) return Status(Code::kUnavailable, "deadline");
    }
    int64_t now = mono_ns();
    TRIM_RETURN_IF_ERROR(c.chan->send_event(std::string(reinterpret_cast<const char*>(&now), sizeof(now))));
    raise(o.fault == Fault::kKillPeer ? SIGKILL : SIGSTOP);
    // Only a SIGCONT would bring us here; the parent never sends one.
    return Status(Code::kInternal, "resumed after SIGSTOP");
  }
  double nmse_sum = 0;
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    TRIM_RETURN_IF_ERROR(announce(c, false));
    TRIM_RETURN_IF_ERROR(c.chan->barrier());
    int64_t t0 = mono_ns();
    begin_events(c, ev, false);
    pump.restart();
    TRIM_RETURN_IF_ERROR(drive(pump, deadline));
    if (it >= o.warmup) c.report->iter_ns.push_back(mono_ns() - t0);
    Check chk = check_copy(data_key(o.seed, 0, it), out.data(), o.bytes);
    RankReport& rep = *c.report;
    rep.exact = rep.exact && chk.exact;
    rep.raw_exact = rep.raw_exact && chk.mismatched_bytes == 0;
    rep.err2 += chk.err2;
    rep.ref2 += chk.ref2;
    nmse_sum += chk.nmse();
    rep.result_hash = hash_bytes(out.data(), o.bytes, rep.result_hash);
  }
  c.report->verified = true;
  c.report->nmse = nmse_sum / (o.warmup + o.iters);
  return c.chan->barrier();
}

}  // namespace

Status run_sendrecv(RankCtx& c) { return c.rank == 0 ? run_sender(c) : run_receiver(c); }

}  // namespace trim::harness
