// Ring ops pipeline across steps and loops, limited only by:
//   send i      needs receive i-S applied (S = slices per step; the same slice one ring step
//               earlier), except in a loop's step 0, which sends this rank's own data;
//   receive i   needs its staging slot (i % 8) free, i.e. receive i-8 applied;
//   apply i     (combine into / copy to the work buffer) needs receive i done and, in the
//               allgather half of an AllReduce, the send that last read that slice ((N-1)S
//               transfers earlier) finished. In a ReduceScatter or AllGather no earlier send
//               reads what a receive writes (the segment received at step t is sent at t+1).
// A reduce-scatter receive the plugin combines itself (NetPlugin::can_combine) writes the work
// buffer while in flight: safe for the same reason, since the segment it reduces is read only by
// the send of the next step, which waits for the receive to complete.
// Broadcast: a chain root -> root+1 -> ... -> root-1, each forward waiting for its receive.
#include "coll/ring.h"

#include <algorithm>
#include <cstring>

namespace trim::coll {

RingGeometry::RingGeometry(RingKind kind, size_t elems, size_t elem_bytes, int ranks, size_t slice_bytes,
                           int slices_per_step, size_t tail_bytes)
    : kind_(kind), ranks_(ranks), slices_(slices_per_step), elems_(elems), elem_bytes_(elem_bytes),
      tail_bytes_(kind == RingKind::kAllReduce ? tail_bytes : 0) {
  // With a raw tail the last slice grows by up to 3 bytes: keep that message within a slice.
  slice_elems_ = slice_bytes / elem_bytes_ - (tail_bytes_ > 0 ? 1 : 0);
  const size_t seg_max = slice_elems_ * static_cast<size_t>(slices_);
  // Elements one loop takes from each segment's run: AllReduce cuts the buffer, the others
  // every rank's block.
  const size_t per_loop = kind_ == RingKind::kAllReduce ? seg_max * static_cast<size_t>(ranks_) : seg_max;
  const size_t total = kind_ == RingKind::kAllReduce ? elems_ : elems_ / static_cast<size_t>(ranks_);
  // At least one loop even for 0 elements: NCCL sends empty slices, and so do we.
  loops_ = static_cast<int>(std::max<size_t>(1, (total + per_loop - 1) / per_loop));
}

Segment RingGeometry::segment(int loop, int seg) const {
  const size_t seg_max = slice_elems_ * static_cast<size_t>(slices_);
  if (kind_ != RingKind::kAllReduce) {
    const size_t block = elems_ / static_cast<size_t>(ranks_);
    const size_t lo = std::min(block, static_cast<size_t>(loop) * seg_max);
    const size_t hi = std::min(block, lo + seg_max);
    return Segment{static_cast<size_t>(seg) * block + lo, hi - lo};
  }
  size_t base = static_cast<size_t>(loop) * seg_max * static_cast<size_t>(ranks_);
  size_t remaining = elems_ > base ? elems_ - base : 0;
  // Like NCCL's last loop: the remainder is split evenly, so some segments may be empty.
  size_t chunk = std::min(seg_max, (remaining + ranks_ - 1) / static_cast<size_t>(ranks_));
  size_t lo = std::min(remaining, static_cast<size_t>(seg) * chunk);
  size_t hi = std::min(remaining, lo + chunk);
  return Segment{base + lo, hi - lo};
}

Segment RingGeometry::slice(int loop, int seg, int k) const {
  Segment s = segment(loop, seg);
  const size_t n = static_cast<size_t>(slices_);
  // slices_ * per >= s.elems because s.elems <= slices_ * slice_elems_.
  size_t per = std::min(slice_elems_, ((s.elems + n - 1) / n + 15) / 16 * 16);
  size_t lo = std::min(s.elems, static_cast<size_t>(k) * per);
  size_t hi = std::min(s.elems, lo + per);
  return Segment{s.first + lo, hi - lo};
}

namespace {
int mod(int a, int n) { return ((a % n) + n) % n; }
}  // namespace

int RingGeometry::send_seg(int rank, int step) const {
  const int n = ranks_;
  switch (kind_) {
    case RingKind::kAllReduce: return mod(is_reduce_scatter(step) ? rank - step : rank + 1 - (step - (n - 1)), n);
    // Block b's chain starts at rank b+1 and ends (step N-2) at rank b.
    case RingKind::kReduceScatter: return mod(rank - 1 - step, n);
    case RingKind::kAllGather: return mod(rank - step, n);
  }
  return 0;
}

int RingGeometry::recv_seg(int rank, int step) const {
  const int n = ranks_;
  switch (kind_) {
    case RingKind::kAllReduce: return mod(is_reduce_scatter(step) ? rank - step - 1 : rank - (step - (n - 1)), n);
    case RingKind::kReduceScatter: return mod(rank - 2 - step, n);
    case RingKind::kAllGather: return mod(rank - 1 - step, n);
  }
  return 0;
}

namespace {

class RingSchedule : public Schedule {
 public:
  RingSchedule(const RingGeometry& geo, int rank, DType dtype, RedOp op, char* work)
      : geo_(geo), rank_(rank), dtype_(dtype), op_(op), work_(work), slices_(static_cast<size_t>(geo.slices_per_step())) {}

  size_t sends() const override { return geo_.transfers(); }
  size_t recvs() const override { return geo_.transfers(); }

  Span send_span(size_t i) const override {
    Segment s;
    size_t bytes = bytes_of(i, geo_.send_seg(rank_, geo_.step_of(i)), &s);
    return Span{work_ + s.first * geo_.elem_bytes(), bytes};
  }
  bool send_ready(size_t i, size_t applied) const override {
    return geo_.step_of(i) == 0 || applied + slices_ > i;
  }
  size_t recv_bytes(size_t i) const override {
    Segment s;
    return bytes_of(i, geo_.recv_seg(rank_, geo_.step_of(i)), &s);
  }
  bool apply_ready(size_t i, size_t sends_done) const override {
    if (geo_.kind() != RingKind::kAllReduce || geo_.is_reduce_scatter(geo_.step_of(i))) return true;
    // i >= (N-1)S here: allgather steps come after N-1 reduce-scatter steps.
    return sends_done > i - static_cast<size_t>(geo_.ranks() - 1) * slices_;
  }
  void apply(size_t i, const char* in) override {
    Segment s;
    size_t bytes = bytes_of(i, geo_.recv_seg(rank_, geo_.step_of(i)), &s);
    char* dst = work_ + s.first * geo_.elem_bytes();
    if (geo_.is_reduce_scatter(geo_.step_of(i))) {
      reduce_into(dst, in, s.elems, dtype_, op_);
    } else {
      std::memcpy(dst, in, bytes);
    }
  }

  char* recv_combine(size_t i, int* dtype, int* op) const override {
    if (!geo_.is_reduce_scatter(geo_.step_of(i))) return nullptr;
    Segment s;
    const size_t bytes = bytes_of(i, geo_.recv_seg(rank_, geo_.step_of(i)), &s);
    *dtype = static_cast<int>(dtype_);
    *op = static_cast<int>(op_);
    return bytes == 0 ? nullptr : work_ + s.first * geo_.elem_bytes();  // an empty slice keeps its slot
  }

  char* recv_direct(size_t i) const override {
    if (geo_.is_reduce_scatter(geo_.step_of(i))) return nullptr;  // combined on receipt
    Segment s;
    const size_t bytes = bytes_of(i, geo_.recv_seg(rank_, geo_.step_of(i)), &s);
    return bytes == 0 ? nullptr : work_ + s.first * geo_.elem_bytes();  // an empty slice keeps its slot
  }

 private:
  // Where transfer i's slice of segment `seg` lies, and the bytes it carries (tail included).
  size_t bytes_of(size_t i, int seg, Segment* s) const {
    const int loop = geo_.loop_of(i), t = geo_.step_of(i), k = geo_.slice_of(i);
    *s = geo_.slice(loop, seg, k);
    return s->elems * geo_.elem_bytes() + (geo_.carries_tail(loop, seg, t, k) ? geo_.tail_bytes() : 0);
  }

  const RingGeometry& geo_;
  int rank_;
  DType dtype_;
  RedOp op_;
  char* work_;
  size_t slices_;
};

class BroadcastSchedule : public Schedule {
 public:
  BroadcastSchedule(int rank, int root, int ranks, size_t bytes, size_t slice, char* work)
      : root_(rank == root), last_((rank - root + ranks) % ranks == ranks - 1), bytes_(bytes), slice_(slice),
        work_(work), msgs_(std::max<size_t>(1, (bytes + slice - 1) / slice)) {}

  size_t sends() const override { return last_ ? 0 : msgs_; }
  size_t recvs() const override { return root_ ? 0 : msgs_; }
  Span send_span(size_t i) const override { return Span{work_ + i * slice_, len(i)}; }
  bool send_ready(size_t i, size_t applied) const override { return root_ || applied > i; }
  size_t recv_bytes(size_t i) const override { return len(i); }
  bool apply_ready(size_t, size_t) const override { return true; }
  void apply(size_t i, const char* in) override { std::memcpy(work_ + i * slice_, in, len(i)); }
  char* recv_direct(size_t i) const override { return len(i) == 0 ? nullptr : work_ + i * slice_; }
  size_t messages() const { return msgs_; }

 private:
  // 0 bytes still moves one empty transfer, as NCCL does.
  size_t len(size_t i) const { return i * slice_ >= bytes_ ? 0 : std::min(slice_, bytes_ - i * slice_); }

  bool root_, last_;
  size_t bytes_, slice_;
  char* work_;
  size_t msgs_;
};

const char* func_name(RingKind k) {
  switch (k) {
    case RingKind::kAllReduce: return "AllReduce";
    case RingKind::kReduceScatter: return "ReduceScatter";
    case RingKind::kAllGather: return "AllGather";
  }
  return "?";
}

uint32_t func_mask(RingKind k) {
  switch (k) {
    case RingKind::kAllReduce: return kFuncAllReduce;
    case RingKind::kReduceScatter: return kFuncReduceScatter;
    case RingKind::kAllGather: return kFuncAllGather;
  }
  return 0;
}

}  // namespace

Status ring_run(const Link& l, ProfilerHost* prof, const RingGeometry& geo, DType dtype, RedOp op, const char* proto,
                const WorkBuffers& b, int64_t deadline_ns, Gate* gate) {
  const int n = l.nranks;
  const bool ll = std::strcmp(proto, "LL") == 0;
  TaskInfo task;
  task.func = func_name(geo.kind());
  task.datatype = nccl_dtype_name(dtype);
  task.elem_bytes = geo.elem_bytes();
  task.proto = proto;
  // NCCL's count: per rank for ReduceScatter and AllGather, of the whole buffer for AllReduce.
  task.count = geo.kind() == RingKind::kAllReduce ? geo.elems() : geo.elems() / static_cast<size_t>(n);
  const int steps = static_cast<int>(geo.transfers());
  const int chunk = static_cast<int>(geo.slice_bytes());
  OpEvents ev(prof);
  ev.begin(task, OpShape{(l.rank + 1) % n, steps, chunk}, OpShape{(l.rank + n - 1) % n, steps, chunk});
  ncclResult_t r = l.net->set_net_attr(func_mask(geo.kind()), kAlgoRing, ll ? kProtoLl : kProtoSimple);
  if (r != ncclSuccess) return plugin_error("setNetAttr", r);
  RingSchedule s(geo, l.rank, dtype, op, b.work);
  return run_pipeline(l, s, b, ev, deadline_ns, ll ? "AllReduce (LL)" : task.func, gate);
}

Status ring_broadcast(const Link& l, ProfilerHost* prof, size_t bytes, int root, const WorkBuffers& b,
                      int64_t deadline_ns, Gate* gate) {
  const int n = l.nranks;
  const size_t slice = std::min(kSliceBytes, b.slot_bytes);
  BroadcastSchedule s(l.rank, root, n, bytes, slice, b.work);
  TaskInfo task;
  task.func = "Broadcast";
  task.datatype = "ncclInt8";
  task.elem_bytes = 1;
  task.count = bytes;
  task.root = root;
  const int msgs = static_cast<int>(s.messages());
  OpEvents ev(prof);
  ev.begin(task, OpShape{(l.rank + 1) % n, s.sends() > 0 ? msgs : -1, static_cast<int>(slice)},
           OpShape{(l.rank + n - 1) % n, s.recvs() > 0 ? msgs : -1, static_cast<int>(slice)});
  ncclResult_t r = l.net->set_net_attr(kFuncBroadcast, kAlgoRing, kProtoSimple);
  if (r != ncclSuccess) return plugin_error("setNetAttr", r);
  return run_pipeline(l, s, b, ev, deadline_ns, "Broadcast", gate);
}

}  // namespace trim::coll
