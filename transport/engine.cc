#include "transport/engine.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "transport/codec_pool.h"
#include "transport/engine_tx.h"
#include "common/param_enums.h"

namespace trim::transport {

namespace {
constexpr uint32_t kTxBudgetPerConn = 64;  // packets a connection may emit per loop turn
constexpr uint64_t kMaxSleepNs = 50'000'000;
std::atomic<SendBufferForTest*> g_test_buffer{nullptr};
}  // namespace

void set_send_buffer_for_test(SendBufferForTest* b) { g_test_buffer.store(b, std::memory_order_release); }
SendBufferForTest* send_buffer_for_test() { return g_test_buffer.load(std::memory_order_acquire); }

bool trimmable_no_check(const Params& p) {
  const param::UdpChecksum csum = param::udp_checksum(p);
  return csum == param::UdpChecksum::kZero || (csum == param::UdpChecksum::kAuto && p.fabric_trim_bytes > 0);
}

EngineConfig EngineConfig::from_params(const Params& p, Status* error) {
  EngineConfig c;
  c.timeout_ns = static_cast<uint64_t>(p.timeout_ms) * 1'000'000ull;
  c.tos_trimmable = static_cast<uint8_t>(p.dscp_trimmable << 2);
  c.tos_exact = static_cast<uint8_t>(p.dscp_exact << 2);
  c.tos_control = static_cast<uint8_t>(p.dscp_control << 2);
  c.tos_trimmed = static_cast<uint8_t>(p.dscp_trimmed << 2);
  c.ctrl_rto_min_us = static_cast<uint32_t>(p.min_rto_us);
  c.trimmable_no_check = transport::trimmable_no_check(p);
  c.udp_offload = param::udp_offload(p) == param::UdpOffload::kOn;
  // auto: off. Measured on loopback and veth, where the kernel copies at delivery, it only
  // costs (docs/BENCHMARKS.md); no path where it helped has been measured yet.
  c.zerocopy = param::zerocopy(p) == param::Zerocopy::kOn ? ZeroCopy::Mode::kOn : ZeroCopy::Mode::kOff;
  switch (param::rx_cut(p)) {
    case param::RxCut::kOff: c.rx_cut = RxCut::kOff; break;
    case param::RxCut::kPacket: c.rx_cut = RxCut::kRequired; break;
    case param::RxCut::kAuto:
      c.rx_cut = p.fabric_trim_bytes > 0 ? RxCut::kTry : RxCut::kOff;
      if (p.fabric_trim_bytes == 0) c.rx_cut_off_why = "NCCL_TRIM_FABRIC_TRIM_BYTES is not set (no trimming fabric declared)";
      break;
  }
  c.drop = p.test_drop;
  c.dup = p.test_dup;
  c.reorder = p.test_reorder;
  c.trim = p.test_trim;
  c.fault_seed = p.test_seed;
  if (!p.switch_addr.empty()) {
    Result<sockaddr_in> a = parse_host_port(p.switch_addr);
    if (!a) {
      *error = a.status();
      return c;
    }
    c.has_switch = true;
    c.switch_addr = a.value();
  }
  *error = Status::ok();
  return c;
}

uint32_t Engine::Tx::run_end(uint32_t first) const {
  uint32_t end = first + 1;
  // Data runs of one class; not trimmable packets without a checksum, which GSO refuses.
  if (!gso_ || cls_[first] == Class::kCtrl || no_check_class(cls_[first])) return end;
  const uint32_t seg = bytes_[first];
  uint64_t total = seg;
  auto same_dst = [](const sockaddr_in& a, const sockaddr_in& b) {
    return a.sin_addr.s_addr == b.sin_addr.s_addr && a.sin_port == b.sin_port;
  };
  const bool pinned = holds_[first] != nullptr;
  // Without the copy every page of every piece is a fragment of the one skb the kernel builds.
  const bool zerocopy = pinned && zc_.active();
  uint32_t frags = zerocopy ? ZeroCopy::frags(iov_[2 * first]) + ZeroCopy::frags(iov_[2 * first + 1]) : 0;
  auto frags_fit = [&](uint32_t d) {
    if (!zerocopy) return true;
    const uint32_t f = ZeroCopy::frags(iov_[2 * d]) + ZeroCopy::frags(iov_[2 * d + 1]);
    if (frags + f > ZeroCopy::kMaxFrags) return false;
    frags += f;
    return true;
  };
  while (end < n_ && end - first < kMaxGsoSegments && cls_[end] == cls_[first] && bytes_[end] <= seg &&
         (holds_[end] != nullptr) == pinned &&
         total + bytes_[end] <= kMaxGsoBytes && same_dst(to_[end], to_[first]) && frags_fit(end)) {
    total += bytes_[end];
    // Only the last segment may be shorter.
    if (bytes_[end++] < seg) break;
  }
  return end;
}

void Engine::Tx::set_no_check(bool on) {
  if (on == no_check_ || (on && !no_check_ok_)) return;
  const int v = on ? 1 : 0;
  if (setsockopt(fd_, SOL_SOCKET, SO_NO_CHECK, &v, sizeof v) != 0) {
    TRIM_WARN("NET/Trim: SO_NO_CHECK refused ({}): trimmable packets keep their UDP checksum, which a trimming "
              "switch must then fix or clear",
              std::strerror(errno));
    no_check_ok_ = false;
    return;
  }
  no_check_ = on;
}

uint32_t Engine::Tx::send_some(uint32_t first) {
  // One sendmmsg covers datagrams of one checksum setting: trimmable ones without (when so
  // configured), the rest with.
  set_no_check(no_check_class(cls_[first]));
  const bool no_check = no_check_class(cls_[first]);  // false if the kernel just refused it
  // ...and of one kind: pinned datagrams (without a copy, while the kernel lets us) or not.
  const bool pinned = holds_[first] != nullptr;
  const bool zerocopy = pinned && zc_.active();
  uint32_t groups = 0;
  for (uint32_t d = first; d < n_ && no_check_class(cls_[d]) == no_check && (holds_[d] != nullptr) == pinned;
       ++groups) {
    const uint32_t end = run_end(d);
    msghdr& h = mmsg_[groups].msg_hdr;
    h = msghdr{};
    h.msg_name = &to_[d];
    h.msg_namelen = sizeof(sockaddr_in);
    h.msg_iov = &iov_[2 * d];
    h.msg_iovlen = 2 * (end - d);
    const bool segmented = end - d > 1;
    if (segmented || cls_[d] != Class::kCtrl) {
      h.msg_control = cmsg_[groups];
      // Laid out by hand: CMSG_NXTHDR would read the next header's stale length.
      cmsghdr* cm = reinterpret_cast<cmsghdr*>(cmsg_[groups]);
      size_t used = 0;
      if (segmented) {
        cm->cmsg_level = SOL_UDP;
        cm->cmsg_type = UDP_SEGMENT;
        cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        const uint16_t seg = static_cast<uint16_t>(bytes_[d]);
        std::memcpy(CMSG_DATA(cm), &seg, sizeof seg);
        used += CMSG_SPACE(sizeof(uint16_t));
        cm = reinterpret_cast<cmsghdr*>(cmsg_[groups] + used);
      }
      if (cls_[d] != Class::kCtrl) {  // control packets keep the socket's TOS
        cm->cmsg_level = IPPROTO_IP;
        cm->cmsg_type = IP_TOS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        const int tos = cls_[d] == Class::kTrimmable ? tos_trimmable_ : tos_exact_;
        std::memcpy(CMSG_DATA(cm), &tos, sizeof tos);
        used += CMSG_SPACE(sizeof(int));
      }
      h.msg_controllen = used;
    }
    run_[groups] = end - d;
    first_[groups] = d;
    d = end;
  }
  const int flags = MSG_DONTWAIT | (zerocopy ? MSG_ZEROCOPY : 0);
  SendBufferForTest* test = send_buffer_for_test();
  const int r = test != nullptr ? test->sendmmsg(fd_, mmsg_, groups, flags) : sendmmsg(fd_, mmsg_, groups, flags);
  last_zerocopy_ = zerocopy;
  if (r <= 0) return 0;
  uint32_t sent = 0, super = 0;
  for (int i = 0; i < r; ++i) {
    sent += run_[i];
    super += run_[i] > 1 ? 1 : 0;
    if (zerocopy) zc_.sent(&holds_[first_[i]], run_[i]);
  }
  zc_.sent_any();
  if (super > 0) global_stats().gso_sends.fetch_add(super, std::memory_order_relaxed);
  return sent;
}

uint32_t Engine::Tx::send_batch(bool from_queue) {
  uint32_t done = 0;
  while (done < n_) {
    const uint32_t sent = send_some(done);
    if (sent > 0) {
      if (from_queue) {
        const uint64_t at = now_ns();
        for (uint32_t i = done; i < done + sent; ++i) {
          const Queued& q = queue_[i];
          if (q.cls != Class::kCtrl) left_.push_back(Left{q.cookie, q.psn, at});
        }
      }
      done += sent;
      continue;
    }
    if (errno == EINTR) continue;
    if (last_zerocopy_ && zc_.refused(errno)) continue;  // at once, copied
    // The socket's send buffer is full: the rest leaves on a later turn (EPOLLOUT), never
    // waiting here, where nothing else of the engine would run.
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) return done;
    if (gso_ && (errno == EIO || errno == EINVAL || errno == ENOPROTOOPT || errno == EOPNOTSUPP)) {
      // The device or kernel cannot segment for us: send packet by packet from now on.
      TRIM_INFO("NET/Trim: UDP segmentation offload refused ({}): sending packet by packet", std::strerror(errno));
      gso_ = false;
      continue;
    }
    // A run the kernel refuses (e.g. an unreachable switch): skip it, counted and said once
    // per engine; the retransmission logic owns what happens next.
    const uint32_t skipped = run_end(done) - done;
    global_stats().send_refused.fetch_add(skipped, std::memory_order_relaxed);
    if (!refusal_logged_) {
      refusal_logged_ = true;
      TRIM_WARN("NET/Trim: the kernel refused {} datagram(s) ({}); they are resent by loss recovery "
                "(counter send_refused)", skipped, std::strerror(errno));
    }
    done += skipped;
  }
  return done;
}

void Engine::Tx::enqueue(const uint8_t* head, uint32_t head_bytes, const uint8_t* rest, uint32_t rest_bytes,
                         const sockaddr_in& to, Class cls, uint64_t cookie) {
  if (queue_.size() >= kMaxQueued) {
    global_stats().send_queue_drops.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Queued& q = queue_.emplace_back();
  q.bytes.resize(static_cast<size_t>(head_bytes) + rest_bytes);
  std::memcpy(q.bytes.data(), head, head_bytes);
  if (rest_bytes > 0) std::memcpy(q.bytes.data() + head_bytes, rest, rest_bytes);
  q.to = to;
  q.cls = cls;
  q.cookie = cookie;
  q.psn = cls != Class::kCtrl && head_bytes >= codec::kHeaderBytes ? codec::stamped_psn(head) : 0;
}

void Engine::Tx::flush() {
  // What waits is older than the batch, which stays empty meanwhile (push queues behind it).
  while (!queue_.empty()) {
    n_ = static_cast<uint32_t>(std::min<size_t>(queue_.size(), kBatch));
    for (uint32_t i = 0; i < n_; ++i) {
      Queued& q = queue_[i];
      iov_[2 * i] = iovec{q.bytes.data(), q.bytes.size()};
      iov_[2 * i + 1] = iovec{nullptr, 0};
      to_[i] = q.to;
      bytes_[i] = static_cast<uint32_t>(q.bytes.size());
      cls_[i] = q.cls;
      cookie_[i] = q.cookie;
      holds_[i].reset();  // copied: sent copied
    }
    const uint32_t loaded = n_, done = send_batch(true);
    queue_.erase(queue_.begin(), queue_.begin() + done);
    n_ = 0;
    if (done < loaded) {
      note_full();
      return;
    }
  }
  const uint32_t done = send_batch(false);
  for (uint32_t i = done; i < n_; ++i) {
    const iovec& h = iov_[2 * i];
    const iovec& r = iov_[2 * i + 1];
    enqueue(static_cast<const uint8_t*>(h.iov_base), static_cast<uint32_t>(h.iov_len),
            static_cast<const uint8_t*>(r.iov_base), static_cast<uint32_t>(r.iov_len), to_[i], cls_[i], cookie_[i]);
  }
  // The ledger keeps what the kernel holds; what waits was copied.
  for (uint32_t i = 0; i < n_; ++i) holds_[i].reset();
  if (done < n_) note_full();
  n_ = 0;
}

Engine::Engine(std::string name, uint32_t ip4_be, const EngineConfig& cfg)
    : name_(std::move(name)), ip4_be_(ip4_be), cfg_(cfg), rng_(cfg.fault_seed) {
  faults_ = cfg.drop > 0 || cfg.dup > 0 || cfg.reorder > 0 || cfg.trim > 0;
}

Engine::~Engine() { stop(); }

Status Engine::start() {
  Result<Fd> udp = open_udp(ip4_be_, &udp_port_);
  if (!udp) return udp.status();
  udp_ = std::move(udp).value();
  TRIM_RETURN_IF_ERROR(open_cut_socket());
  epoll_ = Fd(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_.valid()) return errno_status("epoll_create1");
  wake_fd_ = Fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd_.valid()) return errno_status("eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // null: the UDP or cut socket (read every turn)
  epoll_event wake_ev{};
  wake_ev.events = EPOLLIN;
  wake_ev.data.ptr = &wake_fd_;  // drained only when it fires: most turns find it empty
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, udp_.get(), &ev) != 0 ||
      epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &wake_ev) != 0 ||
      (cut_.valid() && epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, cut_.fd(), &ev) != 0)) {
    return errno_status("epoll_ctl");
  }
  rx_bufs_.assign(kBatch, std::vector<uint8_t>(65536));  // a GRO batch is at most 64 KiB
  // Control traffic carries the control DSCP (the socket's default); data packets say their own
  // class per packet (engine_tx.h). Every datagram comes with the TOS it arrived with: a trimming
  // switch rewrites it.
  const int tos = cfg_.tos_control, on = 1;
  if (setsockopt(udp_.get(), IPPROTO_IP, IP_TOS, &tos, sizeof tos) != 0 ||
      setsockopt(udp_.get(), IPPROTO_IP, IP_RECVTOS, &on, sizeof on) != 0) {
    return errno_status("setsockopt(IP_TOS/IP_RECVTOS)");
  }
  if (cfg_.udp_offload) {
    gro_ = setsockopt(udp_.get(), SOL_UDP, UDP_GRO, &on, sizeof on) == 0;
    if (!gro_) TRIM_INFO("NET/Trim: UDP_GRO unavailable ({}): receiving packet by packet", std::strerror(errno));
  }
  running_ = true;
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "trim-engine");  // per-role CPU in top -H and /proc
    run();
  });
  TRIM_INFO("NET/Trim: progress engine for {} on {}{}{}", name_, addr_string(ip4_be_, udp_port_),
            cfg_.has_switch ? ", data through switch " + addr_string(cfg_.switch_addr) : std::string(),
            faults_ ? fmt::format(" [TEST fault injection: drop {} dup {} reorder {} trim {}]", cfg_.drop, cfg_.dup,
                                  cfg_.reorder, cfg_.trim)
                    : std::string());
  return Status::ok();
}

void Engine::stop() {
  if (!running_.exchange(false)) return;
  wake();
  if (thread_.joinable()) thread_.join();
  if (cut_.valid()) {
    TRIM_INFO("NET/Trim: progress engine for {}: {} cut datagrams received from the packet socket, {} frames "
              "rejected, {} dropped by its full queue (NCCL_TRIM_RX_CUT)",
              name_, cut_received_, cut_rejected_, cut_.take_drops());
  }
  std::lock_guard<std::mutex> lock(cmd_mu_);
  exited_ = true;  // waiters in submit() may return: no thread touches their memory now
  cmd_cv_.notify_all();
}

void Engine::wake() {
  pending_.fetch_add(1);
  if (sleeping_.load()) {
    const uint64_t one = 1;
    ssize_t r = write(wake_fd_.get(), &one, sizeof one);
    (void)r;  // a full eventfd already wakes the engine
  }
}

void Engine::submit(const Cmd& cmd, bool wait) {
  std::unique_lock<std::mutex> lock(cmd_mu_);
  if (exited_) return;
  cmds_.push_back(cmd);
  const uint64_t ticket = ++cmds_submitted_;
  has_cmds_ = true;
  lock.unlock();
  wake();
  if (!wait) return;
  lock.lock();
  cmd_cv_.wait(lock, [&] { return cmds_applied_ >= ticket || exited_; });
}

void Engine::add(Conn* c) { submit(Cmd{Cmd::kAdd, c}, false); }

void Engine::remove(Conn* c) { submit(Cmd{Cmd::kRemove, c}, true); }

void Engine::release_memory(Conn* c, uintptr_t lo, uintptr_t hi) { submit(Cmd{Cmd::kReleaseMemory, c, lo, hi}, true); }

void Engine::apply_release(const Cmd& cmd, Tx* tx) {
  Conn* c = cmd.conn;
  if (c->has_posted.load(std::memory_order_acquire)) pull_posted(c, tx);  // posted ops count too
  const bool used = (c->send && c->send->uses_memory(cmd.lo, cmd.hi)) ||
                    (c->recv && c->recv->uses_memory(cmd.lo, cmd.hi));
  if (used) {
    declare_dead(c, Status(Code::kUnavailable, "memory deregistered while operations on it were in flight "
                                           "(communicator abort): connection failed"));
  }
}

void Engine::apply_commands(Tx* tx) {
  std::vector<Cmd> cmds;
  {
    std::lock_guard<std::mutex> lock(cmd_mu_);
    cmds.swap(cmds_);
    has_cmds_ = false;
  }
  const uint64_t now = now_ns();
  for (const Cmd& cmd : cmds) {
    Conn* c = cmd.conn;
    auto& map = c->role == Role::kSend ? send_by_cookie_ : recv_by_cookie_;
    if (cmd.kind == Cmd::kReleaseMemory) {
      apply_release(cmd, tx);
    } else if (cmd.kind == Cmd::kAdd) {
      conns_.push_back(c);
      map[c->cookie] = c;
      c->last_heard_ns = c->last_ping_ns = now;
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.ptr = c;
      if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c->tcp.get(), &ev) != 0) {
        declare_dead(c, errno_status("epoll_ctl(control connection)"));
      }
    } else {
      conns_.erase(std::remove(conns_.begin(), conns_.end(), c), conns_.end());
      auto it = map.find(c->cookie);
      if (it != map.end() && it->second == c) map.erase(it);
      if (c->tcp_open) epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c->tcp.get(), nullptr);
      c->ctrl_watched = false;  // close writes what still waits, then the FIN
    }
  }
  DeferredWakes::flush_this_thread();  // what a released connection failed
  std::lock_guard<std::mutex> lock(cmd_mu_);
  cmds_applied_ += cmds.size();
  cmd_cv_.notify_all();
}

void Engine::pull_posted(Conn* c, Tx* tx) {
  std::vector<SendOp*> sends;
  std::vector<RecvOp*> recvs;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    sends.swap(c->posted_sends);
    recvs.swap(c->posted_recvs);
    c->has_posted = false;
  }
  tx->bind(c);
  for (SendOp* op : sends) {
    Status st = c->dead ? c->dead_status : c->send->post(op);
    if (!st.is_ok()) op->result.fail(st);
  }
  for (RecvOp* op : recvs) {
    Status st = c->dead ? c->dead_status : c->recv->post(op, tx);
    if (!st.is_ok()) op->result.fail(st);
  }
}

void Engine::declare_dead(Conn* c, Status why) {
  if (c->dead) return;
  TRIM_WARN("NET/Trim: connection {} {:#018x} to {}: {}", c->role == Role::kSend ? "send" : "recv", c->cookie,
            c->peer_name, why.message());
  c->dead_status = why;
  c->dead.store(true, std::memory_order_release);
  if (c->send) c->send->fail_all(why);
  if (c->recv) c->recv->fail_all(why);
}

void Engine::timers(Conn* c, uint64_t now, Tx* tx) {
  if (c->dead) return;
  if (c->send) c->send->on_timer(now);
  if (now - c->last_ping_ns >= ping_interval_ns()) {
    CtrlPacket ping;
    ping.type = CtrlType::kPing;
    ping.to = c->role == Role::kSend ? Role::kRecv : Role::kSend;
    ping.cookie = c->cookie;
    ping.timestamp_ns = now;
    tx->bind(c);
    tx->ctrl(ping);
    c->last_ping_ns = now;
  }
  // Silence only matters while something waits on the peer: an idle connection may be quiet
  // for hours, and a live peer that has not posted yet still answers keepalives. So it counts
  // from when the wait began (a peer frozen while nothing waited must not fail an operation
  // posted just before its first packet arrives) up to when the socket was last read, not to
  // now: this process may itself have been stopped in between (SIGSTOP, a preempted VM), with
  // the peer's packets waiting unread in the socket.
  const bool waiting = (c->send && c->send->has_pending()) || (c->recv && c->recv->has_pending());
  if (!waiting) c->idle_at_ns = now;
  const uint64_t since = std::max(c->last_heard_ns, c->idle_at_ns);
  if (waiting && heard_until_ns_ > since && heard_until_ns_ - since > cfg_.timeout_ns) {
    declare_dead(c, Status(Code::kUnavailable,
                           fmt::format("peer {} silent for {} ms (NCCL_TRIM_TIMEOUT_MS={}): declared dead",
                                       c->peer_name, (heard_until_ns_ - since) / 1'000'000,
                                       cfg_.timeout_ns / 1'000'000)));
  }
}

void Engine::restamp(Tx* tx) {
  for (const Tx::Left& l : tx->left_late()) {
    auto it = send_by_cookie_.find(l.cookie);
    if (it != send_by_cookie_.end() && !it->second->dead) it->second->send->on_left(l.psn, l.at_ns);
  }
  tx->left_late().clear();
}

void Engine::watch_writable(bool on) {
  SendBufferForTest* test = send_buffer_for_test();
  const int fd = !on ? -1 : test != nullptr ? test->writable_fd() : udp_.get();
  if (fd == writable_fd_) return;
  // The socket stays in the set for EPOLLIN; a test's stand-in is there only while watched.
  auto watch = [this](int f, bool out) {
    epoll_event ev{};
    const uint32_t out_bit = out ? uint32_t{EPOLLOUT} : 0u;
    ev.events = f == udp_.get() ? uint32_t{EPOLLIN} | out_bit : uint32_t{EPOLLOUT};
    ev.data.ptr = nullptr;  // handled every turn, as the socket's EPOLLIN
    const int op = f == udp_.get() ? EPOLL_CTL_MOD : out ? EPOLL_CTL_ADD : EPOLL_CTL_DEL;
    if (epoll_ctl(epoll_.get(), op, f, &ev) != 0) {
      // Not expected; the queue then leaves at the next timer or datagram (50 ms at most).
      TRIM_WARN("NET/Trim: epoll_ctl(EPOLLOUT) failed: {}", std::strerror(errno));
    }
  };
  if (writable_fd_ >= 0) watch(writable_fd_, false);
  if (fd >= 0) watch(fd, true);
  writable_fd_ = fd;
}

void Engine::sleep_until(uint64_t deadline_ns, uint64_t now) {
  epoll_event events[16];
  int n = 0;
  bool block = deadline_ns > now;
  if (block) {
    sleeping_.store(true);
    if (pending_.exchange(0) != 0 || has_cmds_) block = false;
  }
  if (block) {
    const uint64_t ns = std::min(deadline_ns - now, kMaxSleepNs);
    timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
    n = epoll_pwait2(epoll_.get(), events, 16, &ts, nullptr);
    if (n < 0 && errno == ENOSYS) n = epoll_wait(epoll_.get(), events, 16, static_cast<int>((ns + 999'999) / 1'000'000));
  } else {
    n = epoll_wait(epoll_.get(), events, 16, 0);
  }
  sleeping_.store(false);
  bool woken = false;
  for (int i = 0; i < n; ++i) {
    if (events[i].data.ptr == &wake_fd_) {
      woken = true;
    } else if (events[i].data.ptr != nullptr) {
      on_tcp_event(static_cast<Conn*>(events[i].data.ptr), events[i].events);
    }
  }
  // Level-triggered: a signal not reported in this batch of 16 is reported by the next wait.
  if (woken) {
    uint64_t drained;
    ssize_t r = read(wake_fd_.get(), &drained, sizeof drained);
    (void)r;
  }
}

void Engine::run() {
  Tx tx(udp_.get(), cfg_.udp_offload, cfg_);
  DeferredWakes wakes;  // a turn's completions wake their waiters once, after its sends
  while (running_.load(std::memory_order_relaxed)) {
    if (has_cmds_.load(std::memory_order_acquire)) apply_commands(&tx);
    uint64_t now = now_ns();
    bool busy = false;
    for (Conn* c : conns_) {
      if (c->has_posted.load(std::memory_order_acquire)) {
        pull_posted(c, &tx);
        busy = true;
      }
    }
    busy |= rx_batch(now, &tx);
    if (tx.zerocopy().reap()) {
      for (Conn* c : conns_) {
        if (c->send && !c->dead) c->send->on_kernel_released();
      }
    }
    heard_until_ns_ = now;  // what arrived before `now` has been read, and stamped no earlier
    now = now_ns();
    uint64_t deadline = now + kMaxSleepNs;
    for (Conn* c : conns_) {
      tx.bind(c);
      timers(c, now, &tx);
      sync_ctrl(c, now);
      if (c->send && !c->dead) {
        // While datagrams wait for the socket no data is emitted: it would only queue behind
        // them (copied), its send time stamped long before it leaves.
        if (!tx.waiting()) {
          const uint32_t n = c->send->poll_tx(now, kTxBudgetPerConn, &tx);
          if (n == kTxBudgetPerConn) busy = true;
        }
        deadline = std::min(deadline, c->send->next_deadline_ns(now));
      }
      if (c->recv) c->recv->poll_codec();
      // A dead connection sends no keepalives (timers skips it): its stale ping time would be
      // a deadline always in the past, and the engine would spin until the comm is closed.
      if (!c->dead) deadline = std::min(deadline, c->last_ping_ns + ping_interval_ns());
    }
    const bool waited = tx.waiting();
    tx.flush();
    restamp(&tx);
    if (waited && !tx.waiting()) busy = true;  // the connections held back may send now
    watch_writable(tx.waiting());
    wakes.flush();
    sleep_until(busy ? now : deadline, now);
  }
  if (tx.buffer_full() > 0) {
    TRIM_INFO("NET/Trim: progress engine for {}: the socket's send buffer was full {} times (datagrams waited "
              "in the engine, counter send_buffer_full)",
              name_, tx.buffer_full());
  }
}

void GlobalStats::add(const ConnCounters& c) {
  sent_packets += c.sent_packets;
  sent_bytes += c.sent_bytes;
  retransmitted_packets += c.retransmitted;
  received_packets += c.received_packets;
  trimmed_accepted += c.trimmed_accepted;
  trimmed_nacked += c.trimmed_nacked;
  trimmed_marked += c.trimmed_marked;
  dup_packets += c.dup_packets;
  bad_packets += c.bad_packets + c.out_of_window;
  rto_events += c.rto_events;
  spurious_rto += c.spurious_rto;
  rto_resends_cancelled += c.rto_resends_cancelled;
  codec_tasks += c.codec_tasks;
  codec_inline += c.codec_inline;
  trims_reported += c.trims_reported;
  trims_unmatched += c.trims_unmatched;
  ef_applied += c.ef_applied;
  ef_recorded += c.ef_recorded;
  quiet_messages += c.quiet_messages;
}

std::string GlobalStats::to_json() const {
  return fmt::format(
      "{{\"sent_packets\":{},\"sent_bytes\":{},\"retransmitted_packets\":{},\"received_packets\":{},"
      "\"trimmed_accepted\":{},\"trimmed_nacked\":{},\"dup_packets\":{},\"bad_packets\":{},\"rto_events\":{},\"spurious_rto\":{},"
      "\"unknown_conn\":{},\"wrong_source\":{},\"malformed\":{},\"injected_drops\":{},\"injected_trims\":{},"
      "\"gso_sends\":{},\"gro_batches\":{},\"codec_tasks\":{},\"codec_inline\":{},\"hook_comms\":{},"
      "\"hook_send_conns\":{},\"rotated_messages\":{},\"hook_undeclared_conns\":{},\"codec_cancelled\":{},"
      "\"codec_waited_tasks\":{},\"trimmed_marked\":{},\"header_cuts\":{},\"bad_payload_check\":{},"
      "\"cut_received\":{},\"cut_rejected\":{},\"trims_reported\":{},\"trims_unmatched\":{},\"ef_applied\":{},"
      "\"ef_recorded\":{},\"ef_conns\":{},\"quiet_messages\":{},\"zerocopy_sends\":{},\"zerocopy_copied\":{},"
      "\"zerocopy_refused\":{},\"send_refused\":{},\"send_buffer_full\":{},\"send_queue_drops\":{},"
      "\"ctrl_buffer_full\":{},\"ctrl_stalled_conns\":{},\"rto_resends_cancelled\":{},\"placed_packets\":{},"
      "\"placed_misses\":{}}}",
      sent_packets.load(), sent_bytes.load(), retransmitted_packets.load(), received_packets.load(),
      trimmed_accepted.load(), trimmed_nacked.load(), dup_packets.load(),
      bad_packets.load() + unknown_conn.load() + wrong_source.load() + malformed.load(), rto_events.load(),
      spurious_rto.load(), unknown_conn.load(), wrong_source.load(), malformed.load(), injected_drops.load(), injected_trims.load(),
      gso_sends.load(), gro_batches.load(), codec_tasks.load(), codec_inline.load(), hook_comms.load(),
      hook_send_conns.load(), rotated_messages.load(), hook_undeclared_conns.load(), codec_tasks_cancelled(),
      codec_waited_tasks.load(), trimmed_marked.load(), header_cuts.load(),
      codec::packet_error_counters().get(codec::PacketError::kBadPayloadCheck), cut_received.load(),
      cut_rejected.load(), trims_reported.load(), trims_unmatched.load(), ef_applied.load(), ef_recorded.load(),
      ef_conns.load(), quiet_messages.load(), zerocopy_sends.load(), zerocopy_copied.load(),
      zerocopy_refused.load(), send_refused.load(), send_buffer_full.load(), send_queue_drops.load(),
      ctrl_buffer_full.load(), ctrl_stalled_conns.load(), rto_resends_cancelled.load(), placed_packets.load(),
      placed_misses.load());
}

GlobalStats& global_stats() {
  static GlobalStats* stats = new GlobalStats();  // never destroyed: engine threads may outlive statics
  return *stats;
}

std::string ConnCounters::to_string() const {
  return fmt::format(
      "sent {} pkts ({} B), retransmitted {} (fast {}, tail probes {}, timeouts {}, spurious timeouts {} whose queued "
      "resends were cancelled {}), NACKs received {}; "
      "received {} pkts ({} B), "
      "trimmed accepted {}, trimmed NACKed {}, trimmed DSCP {}, cut read from the packet socket {}, duplicates {}, bad {}, "
      "out of window {}; ACKs sent {} received {}; codec tasks {} (on the engine {}); cuts reported to us {} "
      "(too late to feed back {}), error feedback: messages with a residual added {}, leaving one {}; "
      "messages sent quiet (no trim or loss lately: exact or unrotated) {}",
      sent_packets, sent_bytes, retransmitted, fast_retransmits, tail_probes, rto_events, spurious_rto, rto_resends_cancelled, nacks_received, received_packets,
      received_bytes, trimmed_accepted, trimmed_nacked, trimmed_marked, cut_received, dup_packets, bad_packets, out_of_window,
      acks_sent, acks_received, codec_tasks, codec_inline, trims_reported, trims_unmatched, ef_applied, ef_recorded,
      quiet_messages);
}

}  // namespace trim::transport
