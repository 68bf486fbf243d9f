#include "coll/pipeline.h"

#include <sched.h>
#include <time.h>

#include <deque>
#include <string>

namespace trim::coll {

int64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

Status plugin_error(const char* call, ncclResult_t r) {
  return Status(Code::kUnavailable, std::string(call) + " returned " + result_name(r));
}

int64_t Backoff::sleep_ns(int64_t idle_ns) {
  const int64_t ns = idle_ns / 20;
  return ns < kMinSleepNs ? kMinSleepNs : (ns > kMaxSleepNs ? kMaxSleepNs : ns);
}

void Backoff::idle() {
  if (idle_passes_++ == 0) idle_since_ns_ = mono_ns();
  if (idle_passes_ < 4) {
    sched_yield();
    return;
  }
  // 20 us at first: far below one 1 MiB slice's time on the wire.
  const int64_t ns = sleep_ns(mono_ns() - idle_since_ns_);
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  nanosleep(&ts, nullptr);
}

Status Backoff::idle(NetPlugin* net, void* const* requests, int n, int64_t deadline_ns) {
  if (net == nullptr || n == 0 || !net->can_wait()) {
    idle();
    return Status::ok();
  }
  if (idle_passes_++ < kYieldPasses) {
    sched_yield();
    return Status::ok();
  }
  const int64_t left_ns = deadline_ns - mono_ns();
  const ncclResult_t r = net->wait_any(requests, n, left_ns < kMaxSleepNs ? left_ns : kMaxSleepNs);
  return r == ncclSuccess ? Status::ok() : plugin_error("ncclTrimWaitRequests", r);
}

namespace {

class Pipeline {
 public:
  Pipeline(const Link& l, Schedule& s, const WorkBuffers& b, OpEvents& ev, Gate* gate)
      : l_(l), s_(s), gate_(gate), gate_done_(gate == nullptr), b_(b), send_op_(ev.send()), recv_op_(ev.recv()), sends_(s.sends()), recvs_(s.recvs()) {}

  Status run(int64_t deadline_ns, const char* what) {
    if (sends_ == 0) send_op_.stop();
    if (recvs_ == 0) recv_op_.stop();
    Backoff backoff;
    while (applied_ < recvs_ || send_done_ < sends_ || !gate_done_) {
      bool moved = false;
      if (!gate_done_) TRIM_RETURN_IF_ERROR(gate_->poll(&gate_done_, &moved));
      post_send_steps();
      TRIM_RETURN_IF_ERROR(post_sends(&moved));
      TRIM_RETURN_IF_ERROR(post_recvs(&moved));
      TRIM_RETURN_IF_ERROR(test_oldest_send(&moved));
      TRIM_RETURN_IF_ERROR(test_oldest_recv(&moved));
      TRIM_RETURN_IF_ERROR(apply_ready(&moved, what));
      if (moved) {
        backoff.progressed();
      } else {
        void* waits[4];
        TRIM_RETURN_IF_ERROR(backoff.idle(l_.net, waits, pending(waits), deadline_ns));
      }
      const bool aborted = l_.abort != nullptr && l_.abort->load(std::memory_order_relaxed);
      if (aborted || mono_ns() > deadline_ns) {
        return Status(Code::kUnavailable, std::string(aborted ? "aborted" : "deadline") + " in " + what + ": sends " +
                                              std::to_string(send_done_) + "/" + std::to_string(sends_) +
                                              " done, receives " + std::to_string(applied_) + "/" +
                                              std::to_string(recvs_) + " applied");
      }
    }
    return Status::ok();
  }

 private:
  static int step(size_t i) { return static_cast<int>(i); }
  // The requests whose completion the next pass would act on: the oldest of each connection
  // (the only ones tested) and the gate's.
  int pending(void** out) const {
    int n = gate_done_ ? 0 : gate_->pending(out);
    if (!send_reqs_.empty()) out[n++] = send_reqs_.front();
    if (!recv_reqs_.empty()) out[n++] = recv_reqs_.front();
    return n;
  }
  // "test(send) to rank 3": which neighbour a failed call was about.
  std::string peer_call(const char* call, bool send) const {
    const int peer = send ? (l_.rank + 1) % l_.nranks : (l_.rank + l_.nranks - 1) % l_.nranks;
    return std::string(call) + (send ? " to rank " : " from rank ") + std::to_string(peer);
  }

  // NCCL posts a send step (and starts its event) as soon as its slot is free, before its
  // data is ready: up to 8 ahead of the oldest unfinished one.
  void post_send_steps() {
    while (send_started_ < sends_ && send_started_ < send_done_ + kMaxInFlight) {
      send_op_.start_step(step(send_started_));
      send_op_.record_step(step(send_started_), kStepSendGpuWait, 0);
      ++send_started_;
    }
  }

  Status post_sends(bool* moved) {
    while (send_posted_ < send_started_) {
      size_t i = send_posted_;
      if (!s_.send_ready(i, applied_)) break;
      Span sp = s_.send_span(i);
      send_op_.record_step(step(i), kStepSendPeerWait, sp.bytes);
      void* req = nullptr;
      ncclResult_t r =
          l_.net->isend(l_.send_comm, sp.data, sp.bytes, l_.rank, b_.work_mh, send_op_.phandle(step(i)), &req);
      if (r != ncclSuccess) return plugin_error(peer_call("isend", true).c_str(), r);
      if (req == nullptr) break;  // no slot: retry on a later pass
      send_op_.record_step(step(i), kStepSendWait, sp.bytes);
      send_reqs_.push_back(req);
      ++send_posted_;
      *moved = true;
    }
    return Status::ok();
  }

  Status post_recvs(bool* moved) {
    const int prev = (l_.rank + l_.nranks - 1) % l_.nranks;
    while (recv_posted_ < recvs_ && recv_posted_ < applied_ + kMaxInFlight) {
      // Before the descriptor check only the first receive is posted: it goes through a slot,
      // and its CTS hides the check's latency. Posting all eight there made a 4-rank 4 MiB
      // AllReduce stage two thirds of its receives and add or copy them on this thread.
      if (!gate_done_ && recv_posted_ >= kStagedBeforeGate) break;
      size_t i = recv_posted_;
      if (recv_started_ == i) {  // a retried irecv keeps its step event
        recv_op_.start_step(step(i));
        ++recv_started_;
      }
      // Directly into the work buffer only after the op's descriptor check (a peer that
      // disagrees must not write the caller's memory) and once nothing still reads that place.
      const bool in_work = b_.work_recv_mh != nullptr && gate_done_;
      char* direct = in_work ? s_.recv_direct(i) : nullptr;
      int dtype = 0, op = 0;
      char* combine = in_work && direct == nullptr && l_.net->can_combine() ? s_.recv_combine(i, &dtype, &op) : nullptr;
      if ((direct != nullptr || combine != nullptr) && !s_.apply_ready(i, send_done_)) break;
      void* req = nullptr;
      void* const ph = recv_op_.phandle(step(i));
      ncclResult_t r =
          direct != nullptr    ? l_.net->irecv(l_.recv_comm, direct, s_.recv_bytes(i), prev, b_.work_recv_mh, ph, &req)
          : combine != nullptr ? l_.net->irecv_combine(l_.recv_comm, combine, s_.recv_bytes(i), prev, b_.work_recv_mh,
                                                       ph, dtype, op, &req)
                               : l_.net->irecv(l_.recv_comm, slot(i), b_.slot_bytes, prev, b_.staging_mh, ph, &req);
      if (r != ncclSuccess) return plugin_error(peer_call("irecv", false).c_str(), r);
      if (req == nullptr) break;
      recv_op_.record_step(step(i), kStepRecvWait, 0);
      recv_direct_[i % kMaxInFlight] = direct != nullptr || combine != nullptr;  // no apply() on receipt
      recv_reqs_.push_back(req);
      ++recv_posted_;
      *moved = true;
    }
    return Status::ok();
  }

  Status test_oldest_send(bool* moved) {
    if (send_reqs_.empty()) return Status::ok();
    int done = 0;
    size_t size = 0;
    ncclResult_t r = l_.net->test(send_reqs_.front(), &done, &size);
    if (r != ncclSuccess) return plugin_error(peer_call("test(send)", true).c_str(), r);
    if (done != 0) {
      send_reqs_.pop_front();
      send_op_.stop_step(step(send_done_));
      ++send_done_;
      if (send_done_ == sends_) send_op_.stop();
      *moved = true;
    }
    return Status::ok();
  }

  Status test_oldest_recv(bool* moved) {
    if (recv_reqs_.empty()) return Status::ok();
    int done = 0;
    size_t size = 0;
    ncclResult_t r = l_.net->test(recv_reqs_.front(), &done, &size);
    if (r != ncclSuccess) return plugin_error(peer_call("test(recv)", false).c_str(), r);
    if (done != 0) {
      recv_reqs_.pop_front();
      recv_sizes_[recv_done_ % kMaxInFlight] = size;
      recv_op_.record_step(step(recv_done_), kStepRecvGpuWait, size);
      ++recv_done_;
      *moved = true;
    }
    return Status::ok();
  }

  Status apply_ready(bool* moved, const char* what) {
    while (gate_done_ && applied_ < recv_done_) {
      size_t i = applied_;
      if (!s_.apply_ready(i, send_done_)) break;
      size_t want = s_.recv_bytes(i);
      size_t got = recv_sizes_[i % kMaxInFlight];
      if (got != want) {
        return Status(Code::kInternal, std::string(what) + ", receive " + std::to_string(i) + ": test reported " +
                                           (got == SIZE_MAX ? std::string("no size") : std::to_string(got)) +
                                           " bytes, expected " + std::to_string(want));
      }
      if (!recv_direct_[i % kMaxInFlight]) s_.apply(i, slot(i));
      recv_op_.stop_step(step(i));  // NCCL stops a receive step once the GPU consumed it
      ++applied_;
      if (applied_ == recvs_) recv_op_.stop();
      *moved = true;
    }
    return Status::ok();
  }

  char* slot(size_t i) const { return b_.staging + (i % kMaxInFlight) * b_.slot_bytes; }

  const Link& l_;
  Schedule& s_;
  Gate* gate_;
  bool gate_done_;
  const WorkBuffers& b_;
  ProxyOp& send_op_;
  ProxyOp& recv_op_;
  size_t sends_, recvs_;
  size_t send_started_ = 0, send_posted_ = 0, send_done_ = 0;
  size_t recv_started_ = 0, recv_posted_ = 0, recv_done_ = 0, applied_ = 0;
  size_t recv_sizes_[kMaxInFlight] = {};
  bool recv_direct_[kMaxInFlight] = {};
  std::deque<void*> send_reqs_, recv_reqs_;
};

}  // namespace

Status run_pipeline(const Link& link, Schedule& s, const WorkBuffers& b, OpEvents& ev, int64_t deadline_ns,
                    const char* what, Gate* gate) {
  Pipeline p(link, s, b, ev, gate);
  return p.run(deadline_ns, what);
}

}  // namespace trim::coll
