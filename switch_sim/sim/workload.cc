// Workloads and the event loop.
//
// allreduce: NCCL's ring. Per iteration each rank's buffer (--bytes) is n chunks of
//   ceil(bytes / n); at step s (0 <= s < 2(n-1)) rank r sends one chunk to rank r+1. A step's chunk
//   is cut into slices of at most --slice (NCCL SIMPLE's 512 KiB step), and slice j of step s+1
//   may leave rank r only once rank r has received slice j of step s from rank r-1 (whole or
//   heads). Steps 0 .. n-2 are the reduce-scatter half: trimmable. Steps n-1 .. 2n-3 are the
//   allgather half: exact. The ring is rank order = host order (--ring linear: what NCCL's
//   topology search builds, one leaf crossing per leaf) or a seeded shuffle (--ring random).
// incast: --incast-senders hosts (seeded sample, fixed across iterations) send --bytes each to
//   host 0; permutation: every host sends --bytes to its image under a fresh seeded derangement
//   each iteration. Their payload is trimmable unless --exact.
// background (exact class, never trimmable, from t = 0 until the last iteration ends):
//   constant: each host one flow to a fixed random peer, paced at --bg-load x link rate;
//   bursty: each host starts flows of --bg-flow bytes to uniformly random other hosts at Poisson
//     times, mean gap = bg_flow_bytes / (bg_load x link rate), so the offered load is bg_load of
//     its link; each flow is window-limited, so it leaves at line rate: on/off bursts.
// An iteration starts when the previous one ended; JCT = its end - its start.
#include <algorithm>
#include <cmath>

#include "switch_sim/sim/sim.h"

namespace trim::sim {

Simulator::Simulator(const Config& cfg) : cfg_(cfg), rng_(cfg.seed) {
  topo_.build(cfg_);
  for (sw::EgressPort& port : topo_.ports) port.set_departure_sink(&Simulator::on_departure, this);
  pool_.reserve(1 << 16);
  ring_.resize(cfg_.hosts);
  for (uint32_t i = 0; i < cfg_.hosts; ++i) ring_[i] = i;
  if (cfg_.ring == RingOrder::kRandom) {
    for (uint32_t i = cfg_.hosts; i > 1; --i) std::swap(ring_[i - 1], ring_[rng_() % i]);
  }
  rank_of_host_.resize(cfg_.hosts);
  for (uint32_t r = 0; r < cfg_.hosts; ++r) rank_of_host_[ring_[r]] = r;
  if (cfg_.workload == Workload::kAllreduce) {
    ring_flow_.resize(cfg_.hosts);
    for (uint32_t r = 0; r < cfg_.hosts; ++r) ring_flow_[r] = new_flow(ring_[r], ring_next(r), FlowKind::kRing);
  }
}

double Simulator::uniform() { return static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0); }

uint32_t Simulator::random_other(uint32_t host) {
  uint32_t d = static_cast<uint32_t>(rng_() % (cfg_.hosts - 1));
  return d >= host ? d + 1 : d;
}

uint64_t Simulator::chunk_bytes() const { return (cfg_.bytes + cfg_.hosts - 1) / cfg_.hosts; }

uint32_t Simulator::slices_per_step() const {
  const uint64_t c = std::max<uint64_t>(1, chunk_bytes());
  return static_cast<uint32_t>((c + cfg_.slice_bytes - 1) / cfg_.slice_bytes);
}

void Simulator::start_iteration(uint64_t t) {
  iter_start_ns_ = t;
  const uint32_t n = cfg_.hosts;
  if (cfg_.workload == Workload::kAllreduce) {
    const uint32_t S = slices_per_step(), steps = 2 * (n - 1);
    const uint64_t chunk = chunk_bytes();
    for (uint32_t r = 0; r < n; ++r) {
      Flow& f = flows_[ring_flow_[r]];
      f.msgs.clear();
      f.send_msg = 0;
      f.msgs_done = 0;
      if (cfg_.transport == Transport::kTcp) tcp_[ring_flow_[r]].rcv_msg = 0;
      for (uint32_t s = 0; s < steps; ++s) {
        for (uint32_t j = 0; j < S; ++j) {
          const uint64_t off = static_cast<uint64_t>(j) * cfg_.slice_bytes;
          const uint64_t b = chunk > off ? std::min<uint64_t>(cfg_.slice_bytes, chunk - off) : 0;
          add_msg(f, b, s < n - 1, s == 0);
        }
      }
    }
    pending_ = static_cast<uint64_t>(n) * S;
    for (uint32_t r = 0; r < n; ++r) try_send(ring_flow_[r]);
    return;
  }
  iter_flows_.clear();
  const bool trimmable = !cfg_.exact_class;
  if (cfg_.workload == Workload::kIncast) {
    // The same senders every iteration: a seeded sample of k distinct hosts other than 0.
    std::vector<uint32_t> others(n - 1);
    for (uint32_t i = 1; i < n; ++i) others[i - 1] = i;
    std::mt19937_64 pick(cfg_.seed * 31 + 7);
    for (uint32_t i = 0; i < cfg_.incast_senders; ++i) std::swap(others[i], others[i + pick() % (n - 1 - i)]);
    for (uint32_t i = 0; i < cfg_.incast_senders; ++i) iter_flows_.push_back(new_flow(others[i], 0, FlowKind::kIncast));
  } else {
    // A derangement: shuffle, then rotate any fixed point onto its neighbour.
    std::vector<uint32_t> dst(n);
    for (uint32_t i = 0; i < n; ++i) dst[i] = i;
    for (uint32_t i = n; i > 1; --i) std::swap(dst[i - 1], dst[rng_() % i]);
    for (uint32_t i = 0; i < n; ++i) {
      if (dst[i] == i) std::swap(dst[i], dst[(i + 1) % n]);
    }
    for (uint32_t i = 0; i < n; ++i) iter_flows_.push_back(new_flow(i, dst[i], FlowKind::kPerm));
  }
  for (uint32_t fid : iter_flows_) {
    add_msg(flows_[fid], cfg_.bytes, trimmable, true);
    if (iter_ == 0) first_pairs_.emplace_back(flows_[fid].src, flows_[fid].dst);
  }
  pending_ = iter_flows_.size();
  for (uint32_t fid : iter_flows_) try_send(fid);
}

void Simulator::on_msg_complete(uint32_t fid, uint32_t msg, uint64_t t) {
  Flow& f = flows_[fid];
  ++f.msgs_done;
  bool finished_one = false;
  switch (f.kind) {
    case FlowKind::kRing: {
      const uint32_t S = slices_per_step(), steps = 2 * (cfg_.hosts - 1);
      if (msg / S + 1 < steps) {
        const uint32_t out = ring_flow_[rank_of_host_[f.dst]];
        flows_[out].msgs[msg + S].ready = true;
        try_send(out);
      } else {
        finished_one = true;
      }
      break;
    }
    case FlowKind::kIncast:
    case FlowKind::kPerm:
      finished_one = f.msgs_done == f.msgs.size();
      break;
    case FlowKind::kBgConstant:
    case FlowKind::kBgBursty:
      break;
  }
  if (finished_one && --pending_ == 0) {
    jct_ns_.push_back(t - iter_start_ns_);
    ++iter_;
    if (iter_ < cfg_.iters) {
      q_.push(t, EventKind::kIterStart, 0);
    } else {
      work_done_ = true;
      work_end_ns_ = t;
    }
  }
}

void Simulator::start_background() {
  if (cfg_.background == Background::kNone || cfg_.bg_load <= 0) return;
  if (cfg_.background == Background::kConstant) {
    std::vector<uint32_t> dst(cfg_.hosts);
    for (uint32_t i = 0; i < cfg_.hosts; ++i) dst[i] = i;
    for (uint32_t i = cfg_.hosts; i > 1; --i) std::swap(dst[i - 1], dst[rng_() % i]);
    for (uint32_t i = 0; i < cfg_.hosts; ++i) {
      if (dst[i] == i) std::swap(dst[i], dst[(i + 1) % cfg_.hosts]);
    }
    for (uint32_t h = 0; h < cfg_.hosts; ++h) {
      const uint32_t fid = new_flow(h, dst[h], FlowKind::kBgConstant);
      flows_[fid].pace_ns = static_cast<uint64_t>(cfg_.mtu_bytes * 8.0 / (cfg_.bg_load * cfg_.link_gbps));
      bg_flow_of_host_.push_back(fid);
      ++ctr_.bg_flows;
    }
    for (uint32_t fid : bg_flow_of_host_) try_send(fid);
    return;
  }
  for (uint32_t h = 0; h < cfg_.hosts; ++h) on_bg_arrival(h, 0);
}

void Simulator::on_bg_arrival(uint32_t host, uint64_t t) {
  if (work_done_) return;
  if (t > 0) {  // t = 0 only draws the first arrival time
    const uint32_t fid = new_flow(host, random_other(host), FlowKind::kBgBursty);
    add_msg(flows_[fid], cfg_.bg_flow_bytes, false, true);
    ++ctr_.bg_flows;
    ctr_.bg_bytes += cfg_.bg_flow_bytes;
    try_send(fid);
  }
  const double mean_gap_ns =
      static_cast<double>(cfg_.bg_flow_bytes) * cfg_.mtu_bytes / payload_bytes() * 8.0 / (cfg_.bg_load * cfg_.link_gbps);
  const double gap = -std::log(1.0 - uniform()) * mean_gap_ns;
  q_.push(t + static_cast<uint64_t>(gap) + 1, EventKind::kBgArrival, host);
}

void Simulator::run() {
  start_background();
  q_.push(0, EventKind::kIterStart, 0);
  while (!q_.empty()) {
    const Event e = q_.pop();
    now_ns_ = e.time_ns;
    if (now_ns_ > cfg_.max_sim_ns) {
      hung_ = true;
      break;
    }
    ++ctr_.events;
    switch (e.kind) {
      case EventKind::kPort: on_port(e.id, e.time_ns); break;
      case EventKind::kArrive: on_arrive(e.id, e.time_ns); break;
      case EventKind::kAck: on_ack(e.id, e.time_ns); break;
      case EventKind::kTimer: on_timer(e.id, e.time_ns); break;
      case EventKind::kPace: {
        Flow& f = flows_[e.id];
        if (f.pace_at == e.time_ns) {
          f.pace_at = UINT64_MAX;
          try_send(e.id);
        }
        break;
      }
      case EventKind::kBgArrival: on_bg_arrival(e.id, e.time_ns); break;
      case EventKind::kIterStart: start_iteration(e.time_ns); break;
    }
  }
  end_ns_ = now_ns_;
  if (!work_done_) hung_ = true;
}

}  // namespace trim::sim
