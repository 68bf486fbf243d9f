// The two-tier leaf-spine fabric and its routes.
//
// Oversubscription is made with the number of spines: a leaf with k hosts at R Gb/s gets
// max(1, k / oversub) uplinks, one to each spine, each at k·R / (oversub · spines) Gb/s, so the
// leaf's uplink capacity is exactly k·R / oversub whatever k and oversub are (with k = 16 and
// 4:1 that is 4 spines at R). Every leaf has one link to every spine.
//
// Port numbering (one EgressPort per link direction):
//   [0, H)                     host NIC (host -> leaf)
//   [H, 2H)                    leaf -> host
//   [2H, 2H + L·S)             leaf l -> spine s at 2H + l·S + s
//   [2H + L·S, 2H + 2·L·S)     spine s -> leaf l at 2H + L·S + s·L + l
#include "switch_sim/sim/sim.h"

#include <algorithm>
#include <stdexcept>

namespace trim::sim {

const char* tier_name(Tier t) {
  switch (t) {
    case Tier::kNic: return "nic";
    case Tier::kLeafUp: return "leaf_up";
    case Tier::kSpineDown: return "spine_down";
    case Tier::kLeafDown: return "leaf_down";
  }
  return "?";
}

void Topology::build(const Config& cfg) {
  hosts_ = cfg.hosts;
  per_leaf_ = std::min(cfg.hosts_per_leaf, cfg.hosts);
  leaves_ = (hosts_ + per_leaf_ - 1) / per_leaf_;
  spines_ = std::max<uint32_t>(1, per_leaf_ / std::max<uint32_t>(1, cfg.oversub));
  uplink_gbps = cfg.link_gbps * per_leaf_ / (static_cast<double>(cfg.oversub) * spines_);
  leaf_of_host_.resize(hosts_);
  for (uint32_t h = 0; h < hosts_; ++h) leaf_of_host_[h] = h / per_leaf_;

  sw::PortConfig base;
  base.rate_gbps = cfg.link_gbps;
  base.prop_delay_ns = cfg.prop_ns;
  base.data_queue_bytes = cfg.buffer_bytes;
  base.header_queue_bytes = cfg.header_buffer_bytes ? cfg.header_buffer_bytes : cfg.buffer_bytes;
  base.prio_queue_bytes = cfg.buffer_bytes;  // --bg-priority high: the same room as the data queue
  base.mode = cfg.mode;
  base.trim_bytes = cfg.trim_bytes;
  // Exact packets of our class are cut to their bare header whatever the trim size, as
  // trim-switch --trim-exact 1 does (a loss notice; the receiver NACKs it).
  base.trim_exact_to_header = cfg.nack_exact && !cfg.fabric;
  base.priority = cfg.fabric ? sw::Priority::kDwrr : sw::Priority::kStrict;
  base.dwrr_header_share = cfg.trimmed_share;

  const size_t total = 2ull * hosts_ + (leaves_ > 1 ? 2ull * leaves_ * spines_ : 0);
  ports.clear();
  ports.reserve(total);
  tier.clear();
  tier.reserve(total);
  for (uint32_t h = 0; h < hosts_; ++h) {
    sw::PortConfig nic = base;
    // A host does not drop its own packets: the sender's window bounds this queue unless
    // --nic-buffer caps it.
    nic.data_queue_bytes = cfg.nic_buffer_bytes;
    nic.prio_queue_bytes = cfg.nic_buffer_bytes;
    nic.seed = cfg.seed * 1000003u + h;
    ports.emplace_back(nic);
    tier.push_back(Tier::kNic);
  }
  for (uint32_t h = 0; h < hosts_; ++h) {
    sw::PortConfig p = base;
    p.seed = cfg.seed * 7919u + h;
    ports.emplace_back(p);
    tier.push_back(Tier::kLeafDown);
  }
  if (leaves_ > 1) {
    for (uint32_t i = 0; i < leaves_ * spines_; ++i) {
      sw::PortConfig p = base;
      p.rate_gbps = uplink_gbps;
      ports.emplace_back(p);
      tier.push_back(Tier::kLeafUp);
    }
    for (uint32_t i = 0; i < leaves_ * spines_; ++i) {
      sw::PortConfig p = base;
      p.rate_gbps = uplink_gbps;
      ports.emplace_back(p);
      tier.push_back(Tier::kSpineDown);
    }
  }
}

Topology::Path Topology::path(uint32_t src, uint32_t dst) const {
  Path p;
  p.last = hosts_ + dst;
  const uint32_t ls = leaf_of(src), ld = leaf_of(dst);
  if (ls == ld) return p;
  const uint32_t up0 = 2 * hosts_, down0 = up0 + leaves_ * spines_;
  p.up = up0 + ls * spines_;
  p.down = down0 + ld;
  return p;
}

uint32_t Topology::port_at(uint32_t src, uint32_t dst, uint32_t spine, uint32_t hop) const {
  if (hop == 0) return src;
  const uint32_t ls = leaf_of(src), ld = leaf_of(dst);
  if (ls == ld) return hop == 1 ? hosts_ + dst : UINT32_MAX;
  const uint32_t up0 = 2 * hosts_, down0 = up0 + leaves_ * spines_;
  switch (hop) {
    case 1: return up0 + ls * spines_ + spine;
    case 2: return down0 + spine * leaves_ + ld;
    case 3: return hosts_ + dst;
    default: return UINT32_MAX;
  }
}

}  // namespace trim::sim
