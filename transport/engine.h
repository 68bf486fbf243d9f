// The progress engine: one thread per device that owns the device's UDP socket and does every
// socket operation of the data path (batched with sendmmsg/recvmmsg), the timers (RTO,
// keepalive, dead-peer detection) and the TCP control streams of established connections.
// NCCL's proxy thread only posts operations into a Conn and polls their OpResult.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "codec/packet.h"
#include "common/params.h"
#include "transport/ctrl_out.h"
#include "transport/cut_rx.h"
#include "transport/placed_rx.h"
#include "transport/recv_proto.h"
#include "transport/send_proto.h"
#include "transport/socket.h"
#include "transport/zerocopy.h"

namespace trim::transport {

constexpr uint32_t kBatch = 64;  // datagrams per sendmmsg/recvmmsg
// UDP GSO limits: segments per send (the kernel's UDP_MAX_SEGMENTS is 64 or more) and bytes
// (one IPv4 datagram's payload).
constexpr uint32_t kMaxGsoSegments = 64;
constexpr uint32_t kMaxGsoBytes = 65507;

// One established connection end, shared by its comm (proxy thread) and the engine.
struct Conn {
  Role role = Role::kSend;
  uint64_t cookie = 0;
  sockaddr_in peer_udp{};   // the peer engine: ACKs and keepalives go there, and come from there
  sockaddr_in data_dst{};   // send role: where data packets go (the peer, or the switch)
  Fd tcp;
  std::string peer_name;
  std::unique_ptr<SendProto> send;  // role kSend
  std::unique_ptr<RecvProto> recv;  // role kRecv

  // Proxy -> engine: operations posted since the engine last looked.
  std::mutex mu;
  std::vector<SendOp*> posted_sends;
  std::vector<RecvOp*> posted_recvs;
  std::atomic<bool> has_posted{false};

  // Set once by the engine; the proxy fails new operations with dead_status.
  std::atomic<bool> dead{false};
  Status dead_status;

  // Engine-only state.
  uint64_t last_heard_ns = 0;
  uint64_t idle_at_ns = 0;  // the last time nothing waited on the peer: silence before it is no evidence
  uint64_t last_ping_ns = 0;
  uint8_t tcp_buf[kFrameBytes] = {};
  size_t tcp_have = 0;
  bool tcp_open = true;
  CtrlOut ctrl;               // frames the TCP socket's send buffer could not take yet
  bool ctrl_watched = false;  // EPOLLOUT interest on tcp (while ctrl waits)
  bool fin_received = false;
  bool ack_due = false;
};

// NCCL_TRIM_UDP_CHECKSUM resolved: trimmable datagrams leave with UDP checksum 0.
bool trimmable_no_check(const Params& p);

struct EngineConfig {
  uint64_t timeout_ns = 30'000'000'000ull;
  // DSCP marks as TOS bytes (DSCP << 2, ECN bits 0) of what the engine sends, per class, and the
  // mark a switch gives a packet it trimmed (read back with IP_RECVTOS).
  uint8_t tos_trimmable = 18 << 2, tos_exact = 0, tos_control = 48 << 2, tos_trimmed = 11 << 2;
  // The control streams' own minimum TCP retransmission timeout (NCCL_TRIM_MIN_RTO_US, as the
  // data's): a CTS lost behind a full queue waits that long, not Linux's 200 ms.
  uint32_t ctrl_rto_min_us = 10'000;
  TcpOptions ctrl_tcp() const { return TcpOptions{tos_control, ctrl_rto_min_us}; }
  // Trimmable datagrams leave with UDP checksum 0, one by one (NCCL_TRIM_UDP_CHECKSUM).
  bool trimmable_no_check = false;
  bool udp_offload = true;  // GSO sends, GRO receives
  // NCCL_TRIM_ZEROCOPY: large exact messages leave without a copy (transport/zerocopy.h).
  ZeroCopy::Mode zerocopy = ZeroCopy::Mode::kOff;
  // NCCL_TRIM_RX_CUT: also read the cut datagrams the kernel drops for their lengths from a
  // packet socket (cut_rx.h). kTry (auto): off, said once, where it cannot be opened; kRequired
  // (packet): an error at start.
  enum class RxCut { kOff, kTry, kRequired } rx_cut = RxCut::kOff;
  std::string rx_cut_off_why;  // auto decided off before trying: why (said once at start)
  bool has_switch = false;
  sockaddr_in switch_addr{};
  double drop = 0, dup = 0, reorder = 0, trim = 0;  // test-only fault injection
  uint64_t fault_seed = 1;
  static EngineConfig from_params(const Params& p, Status* error);
};

// Test-only: stands in for the UDP socket's send buffer, which loopback never fills (the kernel
// gives a datagram's room back as it delivers it), so that a test can fill it.
class SendBufferForTest {
 public:
  virtual ~SendBufferForTest() = default;
  virtual int sendmmsg(int fd, mmsghdr* msgs, unsigned n, int flags) = 0;  // as ::sendmmsg
  virtual int writable_fd() = 0;  // watched for EPOLLOUT instead of the socket
};
// Every engine sends through `b` from its next send on (null: the socket itself). `b` must
// outlive the engines (a test's is never destroyed).
void set_send_buffer_for_test(SendBufferForTest* b);
SendBufferForTest* send_buffer_for_test();

class Engine final : public Waker {
 public:
  Engine(std::string name, uint32_t ip4_be, const EngineConfig& cfg);
  ~Engine();
  Status start();

  uint32_t ip4_be() const { return ip4_be_; }
  uint16_t udp_port() const { return udp_port_; }
  // Whether cut datagrams are read from a packet socket (NCCL_TRIM_RX_CUT), after start().
  bool receives_cuts() const { return cut_.valid(); }
  const EngineConfig& config() const { return cfg_; }

  // Hands an established connection to the engine (it starts sending keepalives at once).
  void add(Conn* c);
  // Takes a connection back; blocks until the engine thread no longer touches it.
  void remove(Conn* c);
  // NCCL deregisters memory before it frees it (on abort, with operations still in flight):
  // if a pending operation of `c` uses [lo, hi), the connection is failed so the engine never
  // touches that memory again. Blocks until the engine has looked.
  void release_memory(Conn* c, uintptr_t lo, uintptr_t hi);
  // Called after posting into a Conn, and by codec workers when a task is done. Never blocks.
  void wake() override;
  void stop();

 private:
  struct Cmd {
    enum Kind { kAdd, kRemove, kReleaseMemory } kind;
    Conn* conn;
    uintptr_t lo = 0, hi = 0;  // kReleaseMemory
  };
  // Queues a command; with `wait`, blocks until the engine thread applied it (or has exited).
  void submit(const Cmd& cmd, bool wait);
  struct Datagram {
    uint8_t* data;
    size_t len;
    sockaddr_in from;
    uint8_t tos = 0;  // the IP header's TOS byte as it arrived (DSCP << 2 | ECN)
    bool cut = false;  // read from the packet socket: a cut the kernel dropped
    const uint8_t* payload = nullptr;  // placed (placed_rx.h): the payload, not after the header
  };
  class Tx;
  void run();
  void apply_commands(Tx* tx);
  void apply_release(const Cmd& cmd, Tx* tx);
  void pull_posted(Conn* c, Tx* tx);
  bool rx_batch(uint64_t now, Tx* tx);
  // Datagrams read one at a time, straight into place, while a connection receives exact
  // messages in place (placed_rx.h): kNone when none does (nothing read), kDrained when the
  // socket ran dry, kBudget after a batch's worth, kStopped when the stream ended or a wrong
  // guess cost a copy (the batched reads follow).
  enum class Placed { kNone, kDrained, kBudget, kStopped };
  Placed rx_placed(uint64_t now, Tx* tx, bool* any);
  static const uint8_t* payload_of(const Datagram& d) {
    return d.payload != nullptr ? d.payload : d.data + codec::kHeaderBytes;
  }
  // A datagram's bytes, contiguous (a placed one's payload gathered after its header).
  static void copy_datagram(const Datagram& d, std::vector<uint8_t>* out);
  Status open_cut_socket();
  bool rx_cut_batch(uint64_t now, Tx* tx);
  void deliver(const Datagram& d, uint64_t now, Tx* tx);
  void dispatch(const Datagram& d, uint64_t now, Tx* tx);
  void release_held(uint64_t now, Tx* tx);
  void on_ctrl(const Datagram& d, uint64_t now, Tx* tx);
  void on_data(const Datagram& d, uint64_t now, Tx* tx);
  void read_tcp(Conn* c, uint64_t now);
  void on_frame(Conn* c, const Frame& f);
  // After frames may have been queued: fails a connection whose peer stopped reading its
  // control stream (queue overflow, or no progress within the dead-peer timeout), and watches
  // for EPOLLOUT on its socket while frames wait.
  void sync_ctrl(Conn* c, uint64_t now);
  // An epoll event on a connection's TCP socket.
  void on_tcp_event(Conn* c, uint32_t events);
  void timers(Conn* c, uint64_t now, Tx* tx);
  // Data packets that waited in tx for the socket: their send time is when they left.
  void restamp(Tx* tx);
  // EPOLLOUT interest while datagrams wait for room in the socket's send buffer.
  void watch_writable(bool on);
  void declare_dead(Conn* c, Status why);
  void sleep_until(uint64_t deadline_ns, uint64_t now);
  bool from_peer(const Conn* c, const sockaddr_in& from, bool data) const;
  double coin() { return uniform_(rng_); }
  // Keepalive period: four chances to be heard within the timeout, between 1 ms and 1 s.
  uint64_t ping_interval_ns() const { return std::clamp<uint64_t>(cfg_.timeout_ns / 4, 1'000'000, 1'000'000'000); }

  std::string name_;
  uint32_t ip4_be_;
  EngineConfig cfg_;
  uint16_t udp_port_ = 0;
  Fd udp_;
  CutSocket cut_;  // invalid when NCCL_TRIM_RX_CUT is off here
  Fd epoll_;
  Fd wake_fd_;
  std::thread thread_;
  std::atomic<bool> running_{false};
  std::atomic<bool> sleeping_{false};
  std::atomic<uint64_t> pending_{0};  // posts since the engine last slept: skip the sleep

  std::mutex cmd_mu_;
  std::condition_variable cmd_cv_;
  std::vector<Cmd> cmds_;
  uint64_t cmds_submitted_ = 0, cmds_applied_ = 0;
  bool exited_ = false;  // the engine thread is gone: nothing touches connections any more
  std::atomic<bool> has_cmds_{false};

  // Engine-thread state.
  std::vector<Conn*> conns_;
  std::unordered_map<uint64_t, Conn*> send_by_cookie_, recv_by_cookie_;
  uint64_t heard_until_ns_ = 0;  // the start of the last receive batch: silence is measured up to it
  std::vector<std::vector<uint8_t>> rx_bufs_;
  std::vector<uint8_t> held_;  // reorder injection: one packet held back
  sockaddr_in held_from_{};
  uint8_t held_tos_ = 0;
  bool held_cut_ = false;
  bool holding_ = false;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
  bool faults_ = false;
  bool gro_ = false;  // the socket hands us coalesced runs of packets (split in rx_batch)
  int writable_fd_ = -1;  // watched for EPOLLOUT (the socket, or a test's): datagrams wait
  uint64_t cut_received_ = 0, cut_rejected_ = 0;  // this engine's share of the global counts
  uint64_t expecting_cookie_ = 0;  // the receive connection that last took an exact packet: asked first
  Expectation expectation_;        // rx_placed's, kept here for its size
};

// Process-wide transport statistics (closed connections plus engine-level rejects).
struct GlobalStats {
  std::atomic<uint64_t> sent_packets{0}, sent_bytes{0}, retransmitted_packets{0}, received_packets{0},
      trimmed_accepted{0}, trimmed_nacked{0}, dup_packets{0}, bad_packets{0}, rto_events{0}, spurious_rto{0}, rto_resends_cancelled{0},
      unknown_conn{0}, wrong_source{0}, malformed{0}, injected_drops{0}, injected_trims{0},
      // Trimming fabrics: packets that arrived with the trimmed DSCP, and ours cut inside our
      // header (nothing of them can be used: a loss, repaired by recovery).
      trimmed_marked{0}, header_cuts{0},
      // NCCL_TRIM_RX_CUT: datagrams cut under lengths the switch left, read from the packet
      // socket and handed to the data path; frames it passed that were not such datagrams.
      cut_received{0}, cut_rejected{0},
      gso_sends{0}, gro_batches{0},  // segmentation offload: super-datagrams sent, coalesced runs received
      // Exact packets the kernel wrote straight into place (placed_rx.h), and datagrams read so
      // that were not what was expected (their bytes moved back, then handled as usual).
      placed_packets{0}, placed_misses{0},
      // NCCL_TRIM_ZEROCOPY: sends the kernel took without a copy, those it reported copied after
      // all (local delivery), and those it refused to pin (sent again copied).
      zerocopy_sends{0}, zerocopy_copied{0}, zerocopy_refused{0},
      send_refused{0},  // datagrams the kernel refused outright (skipped: recovery resends them)
      // Flushes that found the socket's send buffer full (the rest waited in the engine for
      // EPOLLOUT, no new data emitted meanwhile), and datagrams dropped as that queue was full.
      send_buffer_full{0}, send_queue_drops{0},
      // Control frames (CTS, Empty) that found their TCP socket's send buffer full (they waited
      // in the connection's queue for EPOLLOUT), and connections failed as their peer stopped
      // reading that stream (the queue overflowed, or nothing left within the timeout).
      ctrl_buffer_full{0}, ctrl_stalled_conns{0},
      codec_tasks{0}, codec_inline{0},  // codec pool tasks queued, and run on the engine (queue full)
      // Cut packets the receivers named in their ACKs (and those named too late to feed back);
      // NCCL_TRIM_ERROR_FEEDBACK: messages sent with a residual added, and messages leaving one.
      trims_reported{0}, trims_unmatched{0}, ef_applied{0}, ef_recorded{0},
      ef_conns{0},  // send connections with error feedback on (their owner declared its buffers)
      quiet_messages{0},  // rht/rotated messages sent quiet (NCCL_TRIM_QUIET_MS, _LAYOUT): exact or unrotated
      // The comm hook's communicators (NCCL_TRIM_HOOK_TRAFFIC_CLASS): live counts, not per close.
      hook_comms{0}, hook_send_conns{0}, rotated_messages{0},
      hook_undeclared_conns{0},  // send connections of that class sent as rht: no hook declared it
      // Close and deregMr: codec tasks they found queued or running (and waited for).
      codec_waited_tasks{0};
  void add(const ConnCounters& c);
  std::string to_json() const;
};
GlobalStats& global_stats();

}  // namespace trim::transport
