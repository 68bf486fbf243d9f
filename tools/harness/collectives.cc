// Ring AllReduce: the data is cut into loops of N segments (data.h RingGeometry); in ring step t
// of a loop rank r sends segment send_seg(r, t) and receives recv_seg(r, t), each as
// slices_per_step transfers. Transfers pipeline across steps and loops, limited only by:
//   send i      needs receive i-S applied (S = slices per step; the same slice one ring step
//               earlier), except in a loop's step 0, which sends raw input;
//   receive i   needs its staging slot (i % 8) free, i.e. receive i-8 applied;
//   apply i     (add into / copy to the work buffer) needs receive i done and, in the
//               allgather half, the send that last read that slice ((N-1)S transfers earlier)
//               finished.
// Broadcast: a chain 0 -> 1 -> ... -> N-1, each forward waiting for its receive.
#include "tools/harness/collectives.h"

#include <algorithm>
#include <cstring>

namespace trim::harness {

RingBuffers::RingBuffers(RankCtx& c, size_t work_bytes, size_t slot_bytes)
    : work_(c.buffers->make(work_bytes)),
      staging_(c.buffers->make(slot_bytes * kMaxInFlight)),
      work_reg_(c.net, c.send_comm),
      staging_reg_(c.net, c.recv_comm) {
  b_.work = work_.data();
  b_.staging = staging_.data();
  b_.slot_bytes = slot_bytes;
}

Status record_allreduce(RankCtx& c, const RingGeometry& geo, const uint64_t* keys, char* work, double* nmse_sum) {
  RankReport& rep = *c.report;
  const size_t bytes = c.opt.bytes;
  const Check chk = check_allreduce(geo, keys, work);
  rep.exact = rep.exact && chk.exact;
  rep.raw_exact = rep.raw_exact && chk.mismatched_bytes == 0;
  rep.err2 += chk.err2;
  rep.ref2 += chk.ref2;
  *nmse_sum += chk.nmse();
  rep.result_hash = hash_bytes(work, bytes, rep.result_hash);
  const uint64_t this_hash = hash_bytes(work, bytes, 0);
  Result<double> dev = replica_nmse(c.chan, c.rank, c.shared, work, geo.elems(), this_hash);
  if (!dev) return dev.status();
  rep.replica_nmse = std::max(rep.replica_nmse, *dev);
  return Status::ok();
}

Status RingBuffers::reg() {
  TRIM_RETURN_IF_ERROR(work_reg_.reg(work_.data(), std::max<size_t>(work_.bytes(), 1)));
  TRIM_RETURN_IF_ERROR(staging_reg_.reg(staging_.data(), staging_.bytes()));
  b_.work_mh = work_reg_.handle();
  b_.staging_mh = staging_reg_.handle();
  return Status::ok();
}

namespace {

class AllReduceSchedule : public Schedule {
 public:
  AllReduceSchedule(const RingGeometry& geo, int rank, Elem elem, char* work)
      : geo_(geo), rank_(rank), elem_(elem), work_(work), slices_(static_cast<size_t>(geo.slices_per_step())) {}

  size_t sends() const override { return geo_.transfers(); }
  size_t recvs() const override { return geo_.transfers(); }

  Span send_span(size_t i) const override {
    Segment s;
    size_t bytes = bytes_of(i, geo_.send_seg(rank_, geo_.step_of(i)), &s);
    return Span{work_ + s.first * 4, bytes};
  }
  bool send_ready(size_t i, size_t applied) const override {
    return geo_.step_of(i) == 0 || applied + slices_ > i;
  }
  size_t recv_bytes(size_t i) const override {
    Segment s;
    return bytes_of(i, geo_.recv_seg(rank_, geo_.step_of(i)), &s);
  }
  bool apply_ready(size_t i, size_t sends_done) const override {
    if (geo_.is_reduce_scatter(geo_.step_of(i))) return true;
    // i >= (N-1)S here: allgather steps come after N-1 reduce-scatter steps.
    return sends_done > i - static_cast<size_t>(geo_.ranks() - 1) * slices_;
  }
  void apply(size_t i, const char* in) override {
    Segment s;
    size_t bytes = bytes_of(i, geo_.recv_seg(rank_, geo_.step_of(i)), &s);
    char* dst = work_ + s.first * 4;
    if (!geo_.is_reduce_scatter(geo_.step_of(i))) {
      std::memcpy(dst, in, bytes);
    } else if (elem_ == Elem::kF32) {
      // Received partial sum + own value: the reference's order (data.cc).
      float* w = reinterpret_cast<float*>(dst);
      const float* p = reinterpret_cast<const float*>(in);
      for (size_t e = 0; e < s.elems; ++e) w[e] = p[e] + w[e];
    } else {
      uint32_t* w = reinterpret_cast<uint32_t*>(dst);
      const uint32_t* p = reinterpret_cast<const uint32_t*>(in);
      for (size_t e = 0; e < s.elems; ++e) w[e] = p[e] + w[e];
    }
  }

 private:
  // Where transfer i's slice of segment `seg` lies, and the bytes it carries (tail included).
  size_t bytes_of(size_t i, int seg, Segment* s) const {
    const int loop = geo_.loop_of(i), t = geo_.step_of(i), k = geo_.slice_of(i);
    *s = geo_.slice(loop, seg, k);
    return s->elems * 4 + (geo_.carries_tail(loop, seg, t, k) ? geo_.tail_bytes() : 0);
  }

  const RingGeometry& geo_;
  int rank_;
  Elem elem_;
  char* work_;
  size_t slices_;
};

class BroadcastSchedule : public Schedule {
 public:
  BroadcastSchedule(int rank, int ranks, size_t bytes, size_t slice, char* work)
      : root_(rank == 0), last_(rank == ranks - 1), bytes_(bytes), slice_(slice), work_(work),
        msgs_(std::max<size_t>(1, (bytes + slice - 1) / slice)) {}

  size_t sends() const override { return last_ ? 0 : msgs_; }
  size_t recvs() const override { return root_ ? 0 : msgs_; }
  Span send_span(size_t i) const override { return Span{work_ + i * slice_, len(i)}; }
  bool send_ready(size_t i, size_t applied) const override { return root_ || applied > i; }
  size_t recv_bytes(size_t i) const override { return len(i); }
  bool apply_ready(size_t, size_t) const override { return true; }
  void apply(size_t i, const char* in) override { std::memcpy(work_ + i * slice_, in, len(i)); }
  size_t messages() const { return msgs_; }

 private:
  // 0 bytes still moves one empty transfer, as NCCL does.
  size_t len(size_t i) const { return i * slice_ >= bytes_ ? 0 : std::min(slice_, bytes_ - i * slice_); }

  bool root_, last_;
  size_t bytes_, slice_;
  char* work_;
  size_t msgs_;
};

}  // namespace

Status ring_allreduce(RankCtx& c, const RingGeometry& geo, Elem elem, const char* proto, const WorkBuffers& b,
                      int64_t deadline_ns) {
  const int n = c.opt.ranks;
  const bool ll = std::strcmp(proto, "LL") == 0;
  TaskInfo task;
  task.func = "AllReduce";
  task.datatype = elem == Elem::kF32 ? "ncclFloat32" : "ncclInt32";
  task.proto = proto;
  task.count = geo.elems();
  const int steps = static_cast<int>(geo.transfers());
  const int chunk = static_cast<int>(geo.slice_bytes());
  OpEvents ev(c.prof);
  ev.begin(task, OpShape{(c.rank + 1) % n, steps, chunk}, OpShape{(c.rank + n - 1) % n, steps, chunk});
  ncclResult_t r = c.net->set_net_attr(kFuncAllReduce, kAlgoRing, ll ? kProtoLl : kProtoSimple);
  if (r != ncclSuccess) return plugin_error("setNetAttr", r);
  AllReduceSchedule s(geo, c.rank, elem, b.work);
  return run_pipeline(c, s, b, ev, deadline_ns, ll ? "allreduce (LL)" : "allreduce");
}

Status ring_broadcast(RankCtx& c, size_t bytes, const WorkBuffers& b, int64_t deadline_ns) {
  const int n = c.opt.ranks;
  const size_t slice = std::min(kSliceBytes, b.slot_bytes);
  BroadcastSchedule s(c.rank, n, bytes, slice, b.work);
  TaskInfo task;
  task.func = "Broadcast";
  task.count = bytes / 4;
  task.root = 0;
  const int msgs = static_cast<int>(s.messages());
  OpEvents ev(c.prof);
  ev.begin(task, OpShape{(c.rank + 1) % n, s.sends() > 0 ? msgs : -1, static_cast<int>(slice)},
           OpShape{(c.rank + n - 1) % n, s.recvs() > 0 ? msgs : -1, static_cast<int>(slice)});
  ncclResult_t r = c.net->set_net_attr(kFuncBroadcast, kAlgoRing, kProtoSimple);
  if (r != ncclSuccess) return plugin_error("setNetAttr", r);
  return run_pipeline(c, s, b, ev, deadline_ns, "broadcast");
}

}  // namespace trim::harness
