// --mode allreduce: NCCL's ring allreduce (reduce-scatter, then allgather) over the plugin.
// Rank r sends to r+1 and receives from r-1. The data is cut into loops of N segments of at
// most one slice; per loop, step t sends segment send_seg(r, t) and receives recv_seg(r, t).
// Steps pipeline across loops with up to 8 sends and 8 receives in flight per connection,
// limited only by the data dependencies:
//   send i      needs receive i-1 applied (except a loop's step 0, which sends raw input);
//   receive i   needs its staging slot (i % 8) free, i.e. receive i-8 applied;
//   apply i     (add into / copy to the work buffer) needs receive i done and, in the
//               allgather half, the send that last read that segment (i-(N-1)) finished.
#include <algorithm>
#include <cstring>
#include <deque>
#include <vector>

#include "tools/harness/data.h"
#include "tools/harness/rank.h"

namespace trim::harness {

namespace {

constexpr int64_t kNsPerSec = 1000000000;

class Ring {
 public:
  Ring(RankCtx& c, const RingGeometry& geo, char* work, void* work_mh, char* staging, size_t slot_bytes,
       void* staging_mh)
      : c_(c), geo_(geo), work_(work), work_mh_(work_mh), staging_(staging), slot_bytes_(slot_bytes),
        staging_mh_(staging_mh), ops_(geo.ops()) {}

  Status run(int64_t deadline_ns) {
    Backoff backoff;
    while (applied_ < ops_ || send_done_ < ops_) {
      bool moved = false;
      TRIM_RETURN_IF_ERROR(post_sends(&moved));
      TRIM_RETURN_IF_ERROR(post_recvs(&moved));
      TRIM_RETURN_IF_ERROR(test_oldest_send(&moved));
      TRIM_RETURN_IF_ERROR(test_oldest_recv(&moved));
      TRIM_RETURN_IF_ERROR(apply_ready(&moved));
      if (moved) backoff.progressed(); else backoff.idle();
      if (mono_ns() > deadline_ns) {
        return Status(Code::kUnavailable, "deadline in allreduce: sends " + std::to_string(send_done_) + "/" +
                                              std::to_string(ops_) + " done, receives " +
                                              std::to_string(applied_) + " applied");
      }
    }
    return Status::ok();
  }

 private:
  int loop_of(size_t i) const { return static_cast<int>(i / static_cast<size_t>(geo_.steps())); }
  int step_of(size_t i) const { return static_cast<int>(i % static_cast<size_t>(geo_.steps())); }

  // Where message i starts in the work buffer and how long it is, for segment `seg`.
  size_t message_bytes(size_t i, int seg, Segment* s) const {
    *s = geo_.segment(loop_of(i), seg);
    return s->elems * 4 + (geo_.carries_tail(loop_of(i), seg, step_of(i)) ? geo_.tail_bytes() : 0);
  }

  Status post_sends(bool* moved) {
    while (send_posted_ < ops_ && send_posted_ - send_done_ < kMaxInFlight) {
      size_t i = send_posted_;
      if (step_of(i) > 0 && applied_ < i) break;  // its data is still arriving
      Segment s;
      size_t bytes = message_bytes(i, geo_.send_seg(c_.rank, step_of(i)), &s);
      void* req = nullptr;
      ncclResult_t r = c_.net->isend(c_.send_comm, work_ + s.first * 4, bytes, c_.rank, work_mh_, &req);
      if (r != ncclSuccess) return plugin_error("isend", r);
      if (req == nullptr) break;  // no slot: retry on a later pass
      send_reqs_.push_back(req);
      ++send_posted_;
      *moved = true;
    }
    return Status::ok();
  }

  Status post_recvs(bool* moved) {
    const int prev = (c_.rank + geo_.ranks() - 1) % geo_.ranks();
    while (recv_posted_ < ops_ && recv_posted_ < applied_ + kMaxInFlight) {
      size_t i = recv_posted_;
      void* req = nullptr;
      ncclResult_t r = c_.net->irecv(c_.recv_comm, slot(i), slot_bytes_, prev, staging_mh_, &req);
      if (r != ncclSuccess) return plugin_error("irecv", r);
      if (req == nullptr) break;
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
    ncclResult_t r = c_.net->test(send_reqs_.front(), &done, &size);
    if (r != ncclSuccess) return plugin_error("test(send)", r);
    if (done != 0) {
      send_reqs_.pop_front();
      ++send_done_;
      *moved = true;
    }
    return Status::ok();
  }

  Status test_oldest_recv(bool* moved) {
    if (recv_reqs_.empty()) return Status::ok();
    int done = 0;
    size_t size = 0;
    ncclResult_t r = c_.net->test(recv_reqs_.front(), &done, &size);
    if (r != ncclSuccess) return plugin_error("test(recv)", r);
    if (done != 0) {
      recv_reqs_.pop_front();
      recv_sizes_[recv_done_ % kMaxInFlight] = size;
      ++recv_done_;
      *moved = true;
    }
    return Status::ok();
  }

  Status apply_ready(bool* moved) {
    const size_t lag = static_cast<size_t>(geo_.ranks() - 1);
    while (applied_ < recv_done_) {
      size_t i = applied_;
      int t = step_of(i);
      const bool rs = geo_.is_reduce_scatter(t);
      // Allgather overwrites a segment this rank sent N-1 steps earlier: that send must be done.
      if (!rs && send_done_ <= i - lag) break;
      Segment s;
      size_t want = message_bytes(i, geo_.recv_seg(c_.rank, t), &s);
      size_t got = recv_sizes_[i % kMaxInFlight];
      if (got != want) {
        return Status(Code::kInternal, "receive " + std::to_string(i) + " (loop " + std::to_string(loop_of(i)) +
                                           ", step " + std::to_string(t) + "): test reported " +
                                           (got == SIZE_MAX ? std::string("no size") : std::to_string(got)) +
                                           " bytes, expected " + std::to_string(want));
      }
      const char* in = slot(i);
      char* dst = work_ + s.first * 4;
      if (rs) {
        // Received partial sum + own value: the reference's order (data.cc).
        float* w = reinterpret_cast<float*>(dst);
        const float* p = reinterpret_cast<const float*>(in);
        for (size_t e = 0; e < s.elems; ++e) w[e] = p[e] + w[e];
      } else {
        std::memcpy(dst, in, want);
      }
      ++applied_;
      *moved = true;
    }
    return Status::ok();
  }

  char* slot(size_t i) const { return staging_ + (i % kMaxInFlight) * slot_bytes_; }

  RankCtx& c_;
  const RingGeometry& geo_;
  char* work_;
  void* work_mh_;
  char* staging_;
  size_t slot_bytes_;
  void* staging_mh_;
  size_t ops_;
  size_t send_posted_ = 0, send_done_ = 0;
  size_t recv_posted_ = 0, recv_done_ = 0, applied_ = 0;
  size_t recv_sizes_[kMaxInFlight] = {};
  std::deque<void*> send_reqs_, recv_reqs_;
};

}  // namespace

Status run_allreduce(RankCtx& c) {
  const Options& o = c.opt;
  const int n = o.ranks;
  RingGeometry geo(o.bytes, n, kSliceBytes);
  // Slots 64-byte aligned so the reduction reads aligned floats.
  const size_t slot_bytes = (geo.max_message_bytes() + 63) / 64 * 64;
  HostBuffer& work = c.buffers->make(o.bytes);
  HostBuffer& staging = c.buffers->make(slot_bytes * kMaxInFlight);
  MemReg work_reg(c.net, c.send_comm);
  MemReg staging_reg(c.net, c.recv_comm);
  TRIM_RETURN_IF_ERROR(work_reg.reg(work.data(), std::max<size_t>(o.bytes, 1)));
  TRIM_RETURN_IF_ERROR(staging_reg.reg(staging.data(), staging.bytes()));
  const int64_t deadline = mono_ns() + static_cast<int64_t>(o.deadline_s) * kNsPerSec;

  std::vector<uint64_t> keys(static_cast<size_t>(n));
  double nmse_sum = 0;
  RankReport& rep = *c.report;
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    for (int k = 0; k < n; ++k) keys[static_cast<size_t>(k)] = data_key(o.seed, k, it);
    fill_input(keys[static_cast<size_t>(c.rank)], work.data(), o.bytes);
    ncclResult_t r = c.net->set_net_attr(kFuncAllReduce, kAlgoRing, kProtoSimple);
    if (r != ncclSuccess) return plugin_error("setNetAttr", r);
    TRIM_RETURN_IF_ERROR(c.chan->barrier());
    int64_t t0 = mono_ns();
    Ring ring(c, geo, work.data(), work_reg.handle(), staging.data(), slot_bytes, staging_reg.handle());
    TRIM_RETURN_IF_ERROR(ring.run(deadline));
    if (it >= o.warmup) rep.iter_ns.push_back(mono_ns() - t0);

    Check chk = check_allreduce(geo, keys.data(), work.data());
    rep.exact = rep.exact && chk.exact;
    rep.raw_exact = rep.raw_exact && chk.mismatched_bytes == 0;
    rep.err2 += chk.err2;
    rep.ref2 += chk.ref2;
    nmse_sum += chk.nmse();
    rep.result_hash = hash_bytes(work.data(), o.bytes, rep.result_hash);
  }
  rep.verified = true;
  rep.nmse = nmse_sum / (o.warmup + o.iters);
  return c.chan->barrier();
}

}  // namespace trim::harness
