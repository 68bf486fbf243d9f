// trim::net over the UDP transport: contexts, devices and connection setup (TCP handshake).
// Memory registration is net_mem.cc, the data path and teardown net_ops.cc; the data path
// itself lives in the engines (engine*.cc) and the per-connection state machines (send_proto,
// recv_proto).
#include "transport/net_api.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <memory>
#include <mutex>

#include "codec/rng.h"
#include "common/log.h"
#include "transport/classify.h"
#include "transport/devices.h"
#include "transport/net_internal.h"
#include "common/param_enums.h"

namespace trim::net {

using detail::null_argument;
using transport::Conn;
using transport::Engine;
using transport::Fd;
using transport::Role;

namespace {

// ---- Process-wide state: devices and their engines ----

struct Globals {
  std::mutex mu;
  bool devices_ready = false;
  Status devices_status;
  std::vector<transport::NetIf> devices;
  // Per device, NCCL_TRIM_ENGINES progress engines, each started on first use; new listens and
  // connects take them in turn, so a device's connections (NCCL's channels) spread over them.
  struct DeviceEngines {
    std::vector<std::unique_ptr<Engine>> engines;
    uint32_t next = 0;
  };
  std::vector<DeviceEngines> engines;
  int contexts = 0;
};

Globals& globals() {
  static Globals* g = new Globals();  // never destroyed: engine threads may outlive static destructors
  return *g;
}

void stop_engines_at_exit() {
  Globals& g = globals();
  std::lock_guard<std::mutex> lock(g.mu);
  for (auto& dev : g.engines) {
    for (auto& e : dev.engines) {
      if (e) e->stop();
    }
  }
}

Status ensure_devices(const Params& p) {
  Globals& g = globals();
  if (g.devices_ready) return g.devices_status;
  g.devices_ready = true;
  Result<std::vector<transport::NetIf>> devs = transport::discover_interfaces(p.ifname, static_cast<int>(p.speed_mbps));
  if (!devs) {
    g.devices_status = devs.status();
    return g.devices_status;
  }
  g.devices = devs.value();
  g.engines.resize(g.devices.size());
  for (const auto& d : g.devices) {
    TRIM_INFO("NET/Trim: device {} {} ({} Mbps, MTU {}{}{})", d.name, transport::ip4_to_string(d.ip4_be), d.speed_mbps,
              d.mtu, d.pci_path.empty() ? "" : ", ", d.pci_path);
  }
  std::atexit(stop_engines_at_exit);
  return Status::ok();
}

// NCCL_TRIM_MTU against every device, per context (contexts may carry different params), and
// what each device offers, for the log.
Status check_context_mtu(const std::vector<transport::NetIf>& devices, const Params& p) {
  TRIM_RETURN_IF_ERROR(transport::check_mtu(devices, p.mtu));
  std::string offers;
  for (const auto& d : devices) {
    offers += fmt::format("{}{} {} (interface {})", offers.empty() ? "" : ", ", d.name,
                          transport::resolve_mtu(d, p.mtu), d.mtu > 0 ? std::to_string(d.mtu) : std::string("unknown"));
  }
  TRIM_INFO("NET/Trim: MTU offered per device (NCCL_TRIM_MTU={}; each connection agrees on the smaller of its two "
            "ends' at the handshake): {}",
            p.mtu == kAuto ? std::string("auto") : std::to_string(p.mtu), offers);
  return Status::ok();
}

// The DSCP marks, and what survives a trim of the fabric's size (NCCL_TRIM_FABRIC_TRIM_BYTES).
void log_fabric(const std::vector<transport::NetIf>& devices, const Params& p, const codec::CodecConfig& cfg) {
  TRIM_INFO("NET/Trim: DSCP trimmable {} (NCCL_TRIM_DSCP_TRIMMABLE), exact {}, control {}; a packet arriving with "
            "DSCP {} (NCCL_TRIM_DSCP_TRIMMED) or shorter than its header says is a trim; fabric trim size {}",
            p.dscp_trimmable, p.dscp_exact, p.dscp_control, p.dscp_trimmed,
            p.fabric_trim_bytes > 0 ? std::to_string(p.fabric_trim_bytes) + " B" : std::string("not set"));
  if (p.fabric_trim_bytes == 0) return;
  for (const auto& d : devices) {
    TRIM_INFO("NET/Trim: {}: {}", d.name,
              codec::fabric_trim_summary(cfg, static_cast<uint32_t>(p.fabric_trim_bytes),
                                         static_cast<uint32_t>(transport::resolve_mtu(d, p.mtu))));
  }
}

// The device's next engine (started on first use) and, in *mtu_bytes, the MTU this end offers
// there.
Result<Engine*> engine_for(const Params& p, int dev, int* mtu_bytes) {
  Globals& g = globals();
  std::lock_guard<std::mutex> lock(g.mu);
  TRIM_RETURN_IF_ERROR(ensure_devices(p));
  if (dev < 0 || dev >= static_cast<int>(g.devices.size())) {
    return Status(Code::kInvalidArgument, fmt::format("device {} does not exist ({} devices)", dev, g.devices.size()));
  }
  *mtu_bytes = transport::resolve_mtu(g.devices[dev], p.mtu);
  Globals::DeviceEngines& d = g.engines[dev];
  if (d.engines.size() < static_cast<size_t>(p.engines)) d.engines.resize(static_cast<size_t>(p.engines));
  const size_t k = d.next++ % static_cast<uint32_t>(p.engines);
  if (!d.engines[k]) {
    Status err;
    transport::EngineConfig cfg = transport::EngineConfig::from_params(p, &err);
    if (!err.is_ok()) return err;
    const std::string name = k == 0 ? g.devices[dev].name : fmt::format("{}#{}", g.devices[dev].name, k);
    auto e = std::make_unique<Engine>(name, g.devices[dev].ip4_be, cfg);
    TRIM_RETURN_IF_ERROR(e->start());
    d.engines[k] = std::move(e);
  }
  return d.engines[k].get();
}

// What both ends must agree on, in the Hello, and the MTU this end offers (resolved for its
// device; the connection takes the smaller of the two ends').
// The scheme a send connection offers: the context's, except that the comm hook's communicator
// (NCCL_TRIM_HOOK_TRAFFIC_CLASS, from NCCL's per-comm config or the connect's) sends its
// already-rotated gradients as `rotated` where the context would rotate them per hop, once the
// hook has declared that class rotated, in this context's rows (hook_trust.cc).
codec::Scheme send_scheme(const Context& ctx, const ConnectOptions& options) {
  const int tc = options.traffic_class != kTrafficClassUnset ? options.traffic_class : ctx.traffic_class;
  if (tc != static_cast<int>(ctx.params.hook_traffic_class) || ctx.codec.scheme != codec::Scheme::kRht) {
    return ctx.codec.scheme;
  }
  const int declared = detail::declared_row_log2(tc);
  if (declared >= 0 && (uint64_t{1} << declared) == ctx.codec.row_elems) return codec::Scheme::kRotated;
  detail::note_undeclared(ctx, tc, declared);
  return codec::Scheme::kRht;
}

transport::Hello make_hello(const Context& ctx, codec::Scheme scheme, uint64_t nonce, uint64_t cookie, const Engine& e,
                            int mtu_bytes) {
  transport::Hello h;
  h.listen_nonce = nonce;
  h.cookie = cookie;
  h.udp_ip4_be = e.ip4_be();
  h.udp_port = e.udp_port();
  h.mtu = static_cast<uint16_t>(mtu_bytes);
  h.scheme = static_cast<uint8_t>(scheme);
  h.head_bits = ctx.codec.head_bits;
  h.row_elems = ctx.codec.row_elems;
  h.seed = ctx.codec.seed;
  h.clip_sigmas = ctx.codec.clip_sigmas;
  h.fabric_trim_bytes = static_cast<uint16_t>(ctx.params.fabric_trim_bytes);
  return h;
}

// Every codec setting but the MTU, which is agreed instead (min of both ends).
// A sender of the comm hook's communicator offers `rotated` where we would take rht: the same
// configuration, the rotation done upstream (our own context may not know the tag: v10 passes
// it to connect only).
std::string codec_mismatch(const transport::Hello& ours, const transport::Hello& theirs) {
  const bool rotated_rht = ours.scheme == static_cast<uint8_t>(codec::Scheme::kRht) &&
                           theirs.scheme == static_cast<uint8_t>(codec::Scheme::kRotated);
  if (ours.scheme != theirs.scheme && !rotated_rht) {
    return fmt::format("NCCL_TRIM_SCHEME differs: {} here, {} at the peer",
                       codec::scheme_name(static_cast<codec::Scheme>(ours.scheme)),
                       codec::scheme_name(static_cast<codec::Scheme>(theirs.scheme)));
  }
  if (ours.head_bits != theirs.head_bits) return "NCCL_TRIM_HEAD_BITS differs between the peers";
  if (ours.row_elems != theirs.row_elems) return "NCCL_TRIM_ROW_ELEMS differs between the peers";
  if (ours.seed != theirs.seed) return "NCCL_TRIM_SEED differs between the peers";
  if (ours.clip_sigmas != theirs.clip_sigmas) return "NCCL_TRIM_CLIP_SIGMAS differs between the peers";
  if (ours.fabric_trim_bytes != theirs.fabric_trim_bytes) {
    return fmt::format("NCCL_TRIM_FABRIC_TRIM_BYTES differs: {} here, {} at the peer (it sizes packets)",
                       ours.fabric_trim_bytes, theirs.fabric_trim_bytes);
  }
  return "";
}

// What this end offers a connection to `peer_ip4_be`: sized by the route the data takes (to the
// switch when there is one), so a same-host peer gets loopback's size (transport::connection_mtu).
int offer_mtu(const Params& p, const Engine& engine, int dev_offer_bytes, uint32_t peer_ip4_be) {
  const transport::EngineConfig& cfg = engine.config();
  const uint32_t to = cfg.has_switch ? cfg.switch_addr.sin_addr.s_addr : peer_ip4_be;
  return transport::connection_mtu(dev_offer_bytes, p.mtu, transport::route_mtu(engine.ip4_be(), to));
}

// The per-connection parameters both ends derive from the handshake, the packet size from the
// agreed MTU (both ends' layouts must cut messages alike).
transport::ConnParams conn_params(const Context& ctx, codec::Scheme scheme, Engine* engine, uint64_t cookie,
                                  uint32_t dst_ip, uint16_t dst_port, int agreed_mtu_bytes) {
  transport::ConnParams cp;
  cp.codec = ctx.codec;
  cp.codec.scheme = scheme;
  cp.codec.packet_bytes = codec::packet_bytes_for_mtu(static_cast<uint32_t>(agreed_mtu_bytes));
  cp.codec.seed = codec::mix64(ctx.codec.seed ^ cookie);  // distinct randomness per connection
  cp.cookie = cookie;
  cp.dst_ip4_be = dst_ip;
  cp.dst_port = dst_port;
  cp.window_max = static_cast<uint32_t>(ctx.params.window_packets);
  cp.target_trim = ctx.params.target_trim;
  cp.min_rto_ns = static_cast<uint64_t>(ctx.params.min_rto_us) * 1000;
  cp.rate_gbps = ctx.params.rate_gbps;
  cp.rto_undo = param::rto_undo(ctx.params) == param::RtoUndo::kOn;
  cp.udp_checksummed = !transport::trimmable_no_check(ctx.params);
  cp.error_feedback = false;  // only a send comm whose owner declares its buffers (declare_send_buffers)
  cp.quiet_ns = static_cast<uint64_t>(ctx.params.quiet_ms) * 1'000'000;
  cp.quiet_exact = param::quiet_layout(ctx.params) == param::QuietLayout::kExact;
  cp.pool = ctx.pool;
  cp.waker = engine;
  return cp;
}

}  // namespace

// ---- Connection setup state ----

class ListenComm {
 public:
  Context* ctx = nullptr;
  int dev = 0;
  Engine* engine = nullptr;
  int mtu_bytes = 0;  // what this end offers on the device; a connection offers by its route (offer_mtu)
  Fd fd;
  uint64_t nonce = 0;
  struct Pending {
    Fd fd;
    uint8_t buf[transport::kHelloBytes] = {};
    size_t have = 0;
    // Once the Hello is whole: the answer, written without waiting (the rest at a later call,
    // though a fresh socket's buffer always takes its 32 bytes at once), and what it decided.
    bool answered = false;
    transport::Hello hello;
    transport::HelloAck ack;
    int offer_bytes = 0;
    std::string why;  // a refusal's reason
    uint8_t out[transport::kFrameBytes] = {};
    size_t out_done = 0;
  };
  std::vector<std::unique_ptr<Pending>> pending;
};

namespace {

struct ConnectStage {
  Context* ctx = nullptr;
  Engine* engine = nullptr;
  Fd fd;
  transport::ListenHandle target;
  uint64_t cookie = 0;
  int mtu_bytes = 0;  // offered in the Hello
  codec::Scheme scheme = codec::Scheme::kNone;  // offered in the Hello
  // Once connected: the Hello, written without waiting (the rest at a later call, though a
  // fresh socket's buffer always takes its 96 bytes at once).
  bool connected = false;
  uint8_t hello[transport::kHelloBytes] = {};
  size_t hello_done = 0;
  uint8_t buf[transport::kFrameBytes] = {};
  size_t have = 0;
};

ConnectStage* stage_of(const void* handle) {
  ConnectStage* s = nullptr;
  std::memcpy(&s, static_cast<const uint8_t*>(handle) + transport::kHandleStageOffset, sizeof s);
  return s;
}
void set_stage(const void* handle, ConnectStage* s) {
  // NCCL gives a writable buffer; the API takes it as const only because peers never see this.
  std::memcpy(const_cast<uint8_t*>(static_cast<const uint8_t*>(handle)) + transport::kHandleStageOffset, &s, sizeof s);
}

}  // namespace

// ---- Lifetime ----

Result<Context*> init(const InitOptions& options) {
  std::vector<std::string> warnings;
  Result<Params> p = options.params != nullptr ? Result<Params>(*options.params) : process_params(&warnings);
  if (!p) return p.status();
  for (const std::string& w : warnings) TRIM_WARN("NET/Trim: {}", w);
  // The MTU is per device and connection; the smallest one a connection may agree on checks
  // that every codec knob works with any of them.
  Result<codec::CodecConfig> cfg = codec::CodecConfig::from_params(p.value(), transport::kMinMtuBytes);
  if (!cfg) return cfg.status();
  Status sw;
  transport::EngineConfig::from_params(p.value(), &sw);  // reject a bad NCCL_TRIM_SWITCH now
  TRIM_RETURN_IF_ERROR(sw);
  {
    Globals& g = globals();
    std::lock_guard<std::mutex> lock(g.mu);
    TRIM_RETURN_IF_ERROR(ensure_devices(p.value()));
    TRIM_RETURN_IF_ERROR(check_context_mtu(g.devices, p.value()));
    log_fabric(g.devices, p.value(), cfg.value());
    ++g.contexts;
  }
  auto ctx = std::make_unique<Context>();
  ctx->comm_id = options.comm_id;
  ctx->traffic_class = options.traffic_class;
  ctx->params = p.value();
  ctx->codec = cfg.value();
  // Each connection's packet size comes from its agreed MTU (conn_params); 0 makes any other
  // use fail CodecConfig::validate() loudly instead of cutting packets of a guessed size.
  ctx->codec.packet_bytes = 0;
  ctx->classifier = std::make_unique<transport::SendClassifier>(ctx->params, ctx->codec, options.profiler);
  const int threads = ctx->params.codec_threads == kAuto ? transport::CodecPool::auto_threads()
                                                        : static_cast<int>(ctx->params.codec_threads);
  ctx->pool = threads > 0 ? transport::CodecPool::instance(threads) : nullptr;
  TRIM_INFO("NET/Trim: codec {} (NCCL_TRIM_CODEC_THREADS={})",
            threads > 0 ? fmt::format("on {} worker threads", threads) : std::string("on the progress engine's thread"),
            ctx->params.codec_threads == kAuto ? std::string("auto") : std::to_string(ctx->params.codec_threads));
  if (ctx->traffic_class == static_cast<int>(ctx->params.hook_traffic_class)) {
    transport::global_stats().hook_comms.fetch_add(1, std::memory_order_relaxed);
    const bool declared = detail::declared_row_log2(ctx->traffic_class) >= 0;
    TRIM_INFO("NET/Trim: comm {:#x} has the nccl_trim comm hook's traffic class {}: {}", ctx->comm_id,
              ctx->traffic_class,
              ctx->codec.scheme != codec::Scheme::kRht
                  ? fmt::format("NCCL_TRIM_SCHEME={} applies as it is", codec::scheme_name(ctx->codec.scheme))
              : declared ? "the hook declared it rotated: its data is sent as scheme rotated (no transform here)"
                         : "no hook declared it rotated (yet): its data is rotated per hop (rht) like any other");
  }
  if (ctx->params.error_feedback != 0) {
    TRIM_INFO("NET/Trim: NCCL_TRIM_ERROR_FEEDBACK=1 applies to the send connections whose owner declares buffers "
              "that keep their meaning between calls (the nccl_trim CPU backend's): what trims take from an fp32 "
              "message is added to the next one sent from its buffer. NCCL's own connections (staging buffers that "
              "hold different data every step) send without it");
  }
  if (ctx->params.test_codec_stall_ms > 0) {
    transport::testing::set_stall_ms(static_cast<uint32_t>(ctx->params.test_codec_stall_ms));
  }
  if (ctx->params.test_drop > 0 || ctx->params.test_dup > 0 || ctx->params.test_reorder > 0 ||
      ctx->params.test_trim > 0 || ctx->params.test_codec_stall_ms > 0) {
    TRIM_WARN("NET/Trim: TEST-ONLY fault injection is on (NCCL_TRIM_TEST_*): never use this in a real job");
  }
  return ctx.release();
}

Status finalize(Context* ctx) {
  if (ctx == nullptr) return null_argument("finalize", "context");
  {
    Globals& g = globals();
    std::lock_guard<std::mutex> lock(g.mu);
    --g.contexts;
  }
  TRIM_INFO("NET/Trim: sends of comm {:#x} by op/proto/dtype/phase: {}", ctx->comm_id, ctx->classifier->summary());
  delete ctx;
  return Status::ok();
}

Result<int> device_count() {
  Globals& g = globals();
  std::lock_guard<std::mutex> lock(g.mu);
  if (!g.devices_ready) return Status(Code::kUnavailable, "devices: init has not run");
  TRIM_RETURN_IF_ERROR(g.devices_status);
  return static_cast<int>(g.devices.size());
}

Result<DeviceProps> device_props(int dev) {
  Globals& g = globals();
  std::lock_guard<std::mutex> lock(g.mu);
  if (!g.devices_ready) return Status(Code::kUnavailable, "device_props: init has not run");
  TRIM_RETURN_IF_ERROR(g.devices_status);
  if (dev < 0 || dev >= static_cast<int>(g.devices.size())) {
    return Status(Code::kInvalidArgument, fmt::format("device_props: device {} does not exist", dev));
  }
  const transport::NetIf& d = g.devices[dev];
  DeviceProps p;
  p.name = d.name;
  p.pci_path = d.pci_path;
  p.guid = d.guid;
  p.ptr_support = kPtrHost;  // NCCL stages GPU data through its pinned host buffers
  p.speed_mbps = d.speed_mbps;
  p.port = 0;
  p.latency_us = 0;
  p.max_comms = 65536;
  p.max_recvs = 1;
  p.max_p2p_bytes = INT_MAX;  // v8 sizes are int; the codec's limit is 4 GiB
  p.max_coll_bytes = INT_MAX;
  p.max_multi_request_size = 1;
  return p;
}

// Once a process: the control streams' minimum RTO as the kernel took it, or that it could not.
static void say_ctrl_rto_min(int fd, uint32_t wanted_us) {
  static std::once_flag said;
  std::call_once(said, [&] {
    const uint32_t got_us = transport::tcp_rto_min_us(fd);
    if (got_us > 0) {
      TRIM_INFO("NET/Trim: control streams' TCP minimum RTO {} us (NCCL_TRIM_MIN_RTO_US {} us, in the kernel's "
                "ticks; Linux's default is 200 ms)", got_us, wanted_us);
    } else {
      TRIM_INFO("NET/Trim: this kernel has no per-socket TCP minimum RTO (TCP_RTO_MIN_US, Linux 6.15): a control "
                "frame lost to congestion waits the system's (net.ipv4.tcp_rto_min_us, 200 ms by default)");
    }
  });
}

Result<ListenComm*> listen(Context* ctx, int dev, void* handle_out, size_t handle_capacity) {
  if (ctx == nullptr) return null_argument("listen", "context");
  if (handle_out == nullptr) return null_argument("listen", "handle");
  if (handle_capacity < transport::kHandleBytes) {
    return Status(Code::kInvalidArgument, "listen: handle capacity below 128 bytes");
  }
  int mtu_bytes = 0;
  Result<Engine*> e = engine_for(ctx->params, dev, &mtu_bytes);
  if (!e) return e.status();
  auto l = std::make_unique<ListenComm>();
  l->ctx = ctx;
  l->dev = dev;
  l->engine = e.value();
  l->mtu_bytes = mtu_bytes;
  uint16_t port = 0;
  Result<Fd> fd = transport::open_tcp_listener(l->engine->ip4_be(), &port, l->engine->config().ctrl_tcp());
  if (!fd) return fd.status();
  l->fd = std::move(fd).value();
  say_ctrl_rto_min(l->fd.get(), l->engine->config().ctrl_rto_min_us);
  l->nonce = transport::random_u64();
  transport::write_handle(transport::ListenHandle{l->engine->ip4_be(), port, l->nonce},
                          static_cast<uint8_t*>(handle_out));
  return l.release();
}

Result<SendComm*> connect(Context* ctx, int dev, const void* handle, const ConnectOptions& options) {
  if (ctx == nullptr) return null_argument("connect", "context");
  if (handle == nullptr) return null_argument("connect", "handle");
  ConnectStage* st = stage_of(handle);
  if (st == nullptr) {
    transport::ListenHandle target;
    TRIM_RETURN_IF_ERROR(transport::parse_handle(static_cast<const uint8_t*>(handle), &target));
    int mtu_bytes = 0;
    Result<Engine*> e = engine_for(ctx->params, dev, &mtu_bytes);
    if (!e) return e.status();
    Result<Fd> fd = transport::start_tcp_connect(transport::make_addr(target.ip4_be, target.tcp_port),
                                                 e.value()->config().ctrl_tcp());
    if (!fd) return fd.status();
    st = new ConnectStage();
    st->ctx = ctx;
    st->engine = e.value();
    st->fd = std::move(fd).value();
    st->target = target;
    st->cookie = transport::random_u64();
    st->mtu_bytes = offer_mtu(ctx->params, *e.value(), mtu_bytes, target.ip4_be);
    st->scheme = send_scheme(*ctx, options);
    set_stage(handle, st);
  }
  std::unique_ptr<ConnectStage> owned(st);  // released back below while still in progress
  const std::string peer = transport::addr_string(st->target.ip4_be, st->target.tcp_port);
  // A listener of another handshake version (its handle says so) still gets our Hello, which
  // names our version, so that its accept fails naming both as well; then we fail, naming both.
  const bool other_version = st->target.version != transport::kFrameVersion;
  auto fail = [&](Status s) {
    set_stage(handle, nullptr);
    if (other_version) {
      return Status(Code::kBadConfig,
                    fmt::format("connect to {}: the listener speaks nccl-trim handshake version {} (its listen handle "
                                "says so), we speak version {}: every rank must run the same nccl-trim build ({})",
                                peer, st->target.version, transport::kFrameVersion, s.message()));
    }
    return Status(s.code(), fmt::format("connect to {}: {}", peer, s.message()));
  };
  if (!st->connected) {
    Result<bool> done = transport::tcp_connect_done(st->fd.get());
    if (!done) return fail(done.status());
    if (!done.value()) {
      owned.release();
      return static_cast<SendComm*>(nullptr);
    }
    st->connected = true;
    transport::write_hello(make_hello(*ctx, st->scheme, st->target.nonce, st->cookie, *st->engine, st->mtu_bytes),
                           st->hello);
  }
  if (st->hello_done < transport::kHelloBytes) {
    Result<bool> written = transport::write_some(st->fd.get(), st->hello, transport::kHelloBytes, &st->hello_done);
    if (!written) return fail(written.status());
    if (!written.value()) {
      owned.release();
      return static_cast<SendComm*>(nullptr);
    }
    // Its answer would tell nothing more, and another build's may never come.
    if (other_version) return fail(Status(Code::kBadConfig, "our Hello told it our version"));
  }
  Result<bool> got = transport::read_some(st->fd.get(), st->buf, transport::kFrameBytes, &st->have);
  if (!got) return fail(got.status());
  if (!got.value()) {
    owned.release();
    return static_cast<SendComm*>(nullptr);
  }
  transport::HelloAck ack;
  Status ps = transport::parse_hello_ack(st->buf, &ack);
  if (!ps.is_ok()) return fail(ps);
  if (ack.status == transport::kHelloCodecMismatch) {
    return fail(Status(Code::kBadConfig, "the peer uses different NCCL_TRIM_* codec settings (see its log)"));
  }
  if (ack.status == transport::kHelloVersion && ack.version != transport::kFrameVersion) {
    return fail(Status(Code::kBadConfig,
                       ack.version == 0
                           ? fmt::format("the listener refused our handshake version {}: it is an older nccl-trim "
                                         "build (handshake version 1); every rank must run the same build",
                                         transport::kFrameVersion)
                           : fmt::format("the listener speaks nccl-trim handshake version {}, we speak version {}: "
                                         "every rank must run the same nccl-trim build",
                                         ack.version, transport::kFrameVersion)));
  }
  if (ack.status == transport::kHelloBadMtu) {
    return fail(Status(Code::kBadConfig, fmt::format("the peer refused our MTU {} (see its log)", st->mtu_bytes)));
  }
  if (ack.status != transport::kHelloOk) {
    return fail(Status(Code::kBadConfig, fmt::format("the peer refused the connection (reason {})", ack.status)));
  }
  // The agreed MTU is the smaller of both ends': more than we offered could be fragmented here.
  if (ack.mtu < transport::kMinMtuBytes || ack.mtu > st->mtu_bytes) {
    return fail(Status(Code::kBadPacket, fmt::format("the peer's HelloAck agrees on MTU {}, outside [{}, {}] (the "
                                                    "NCCL_TRIM_MTU we offered)",
                                                    ack.mtu, transport::kMinMtuBytes, st->mtu_bytes)));
  }
  set_stage(handle, nullptr);
  auto comm = std::make_unique<SendComm>(ctx);
  auto c = std::make_unique<Conn>();
  c->role = Role::kSend;
  c->cookie = st->cookie;
  c->peer_udp = transport::make_addr(ack.udp_ip4_be, ack.udp_port);
  c->data_dst = st->engine->config().has_switch ? st->engine->config().switch_addr : c->peer_udp;
  c->peer_name = transport::addr_string(c->peer_udp);
  c->tcp = std::move(st->fd);
  c->send = std::make_unique<transport::SendProto>(
      conn_params(*ctx, st->scheme, st->engine, c->cookie, ack.udp_ip4_be, ack.udp_port, ack.mtu));
  comm->core.engine = st->engine;
  comm->core.conn = std::move(c);
  comm->core.rotated = st->scheme == codec::Scheme::kRotated;
  if (comm->core.rotated) transport::global_stats().hook_send_conns.fetch_add(1, std::memory_order_relaxed);
  // The ack carries only the agreed value: the peer offered it when it is below ours.
  TRIM_INFO("NET/Trim: send connection {:#018x} to {} (data via {}), MTU {} (agreed: ours {}, peer {}{})",
            comm->core.conn->cookie, comm->core.conn->peer_name, transport::addr_string(comm->core.conn->data_dst),
            ack.mtu, st->mtu_bytes, ack.mtu < st->mtu_bytes ? "" : ">= ", ack.mtu);
  comm->core.engine->add(comm->core.conn.get());
  return comm.release();
}

namespace {

// The whole Hello of `p` decides its answer (p->out) and what accept makes of it.
void answer_hello(const ListenComm& l, ListenComm::Pending* p) {
  transport::Hello& hello = p->hello;
  Status hs = transport::parse_hello(p->buf, &hello);
  p->offer_bytes = hs.is_ok() ? offer_mtu(l.ctx->params, *l.engine, l.mtu_bytes, hello.udp_ip4_be) : l.mtu_bytes;
  const transport::Hello ours = make_hello(*l.ctx, l.ctx->codec.scheme, l.nonce, hello.cookie, *l.engine, p->offer_bytes);
  transport::HelloAck& ack = p->ack;
  ack.udp_ip4_be = l.engine->ip4_be();
  ack.udp_port = l.engine->udp_port();
  ack.mtu = std::min(ours.mtu, hello.mtu);  // the connection's MTU: no end sends above its own
  std::string& why = p->why;
  if (!hs.is_ok()) {
    why = hs.message();
    ack.status = transport::kHelloVersion;
  } else if (hello.listen_nonce != l.nonce) {
    why = "handshake for another listener (stale handle?)";
    ack.status = transport::kHelloBadNonce;
  } else if (hello.mtu < transport::kMinMtuBytes) {
    why = fmt::format("the peer offers MTU {}, below {}", hello.mtu, transport::kMinMtuBytes);
    ack.status = transport::kHelloBadMtu;
  } else if (!(why = codec_mismatch(ours, hello)).empty()) {
    ack.status = transport::kHelloCodecMismatch;
  }
  transport::write_hello_ack(ack, p->out);
  p->answered = true;
}

}  // namespace

Result<RecvComm*> accept(ListenComm* l) {
  if (l == nullptr) return null_argument("accept", "listen comm");
  for (;;) {  // take every connection that is waiting
    Result<Fd> fd = transport::tcp_accept(l->fd.get());
    if (!fd) return fd.status();
    if (!fd->valid()) break;
    auto p = std::make_unique<ListenComm::Pending>();
    p->fd = std::move(fd).value();
    if (l->pending.size() >= 1024) break;  // a flood of half-open connections must not grow memory
    l->pending.push_back(std::move(p));
  }
  for (auto it = l->pending.begin(); it != l->pending.end(); ++it) {
    ListenComm::Pending& p = **it;
    if (!p.answered) {
      Result<bool> got = transport::read_some(p.fd.get(), p.buf, transport::kHelloBytes, &p.have);
      if (!got) {  // a stranger or a peer that died mid-handshake: forget it, keep listening
        TRIM_WARN("NET/Trim: dropping a half-open connection: {}", got.status().message());
        l->pending.erase(it);
        return static_cast<RecvComm*>(nullptr);
      }
      if (!got.value()) continue;
      answer_hello(*l, &p);
    }
    Result<bool> written = transport::write_some(p.fd.get(), p.out, transport::kFrameBytes, &p.out_done);
    if (written.is_ok() && !written.value()) continue;  // the rest when the socket has room
    std::unique_ptr<ListenComm::Pending> done = std::move(*it);
    l->pending.erase(it);
    const transport::Hello& hello = done->hello;
    const transport::HelloAck& ack = done->ack;
    const int offer_bytes = done->offer_bytes;
    if (ack.status != transport::kHelloOk) {
      return Status(Code::kBadConfig, "accept: refused a connection: " + done->why);
    }
    if (!written) return written.status();
    auto comm = std::make_unique<RecvComm>(l->ctx);
    auto c = std::make_unique<Conn>();
    c->role = Role::kRecv;
    c->cookie = hello.cookie;
    c->peer_udp = transport::make_addr(hello.udp_ip4_be, hello.udp_port);
    c->peer_name = transport::addr_string(c->peer_udp);
    c->tcp = std::move(done->fd);
    c->recv = std::make_unique<transport::RecvProto>(
        conn_params(*l->ctx, static_cast<codec::Scheme>(hello.scheme), l->engine, c->cookie, l->engine->ip4_be(),
                    l->engine->udp_port(), ack.mtu));
    comm->core.engine = l->engine;
    comm->core.conn = std::move(c);
    TRIM_INFO("NET/Trim: recv connection {:#018x} from {}, MTU {} (agreed: ours {}, peer {})", comm->core.conn->cookie,
              comm->core.conn->peer_name, ack.mtu, offer_bytes, hello.mtu);
    comm->core.engine->add(comm->core.conn.get());
    return comm.release();
  }
  return static_cast<RecvComm*>(nullptr);
}

Result<uint32_t> send_packet_bytes(const SendComm* comm) {
  if (comm == nullptr || !comm->core.conn || !comm->core.conn->send) return null_argument("send_packet_bytes", "send comm");
  return comm->core.conn->send->params().codec.packet_bytes;
}

Status declare_send_buffers(SendComm* comm) {
  if (comm == nullptr) return null_argument("declare_send_buffers", "send comm");
  if (comm->ctx()->params.error_feedback == 0) return Status::ok();
  transport::Conn* c = comm->core.conn.get();
  // Before the first isend, so the engine has never looked at the connection's sends: from
  // then on, the mutex of posted_sends orders this before every read of the feedback state.
  if (comm->core.next_seq != 0) {
    return Status(Code::kInvalidArgument, fmt::format("declare_send_buffers: connection {:#018x} has sent already: "
                                                      "declare before the first isend",
                                                      c->cookie));
  }
  if (c->send->enable_error_feedback()) {
    transport::global_stats().ef_conns.fetch_add(1, std::memory_order_relaxed);
    TRIM_INFO("NET/Trim: send connection {:#018x}: error feedback on (its owner declared its buffers)", c->cookie);
  }
  return Status::ok();
}

CommCore* detail::core_of(Comm* comm) {
  if (SendComm* s = as_send(comm)) return &s->core;
  if (RecvComm* r = as_recv(comm)) return &r->core;
  return nullptr;
}

Comm* as_comm(SendComm* comm) { return comm; }
Comm* as_comm(RecvComm* comm) { return comm; }
SendComm* as_send(Comm* comm) {
  return comm != nullptr && comm->kind() == Comm::Kind::kSend ? static_cast<SendComm*>(comm) : nullptr;
}
RecvComm* as_recv(Comm* comm) {
  return comm != nullptr && comm->kind() == Comm::Kind::kRecv ? static_cast<RecvComm*>(comm) : nullptr;
}

// ---- Memory registration: host memory needs no pinning for sockets ----

Status close_listen(ListenComm* listen) {
  if (listen == nullptr) return null_argument("close_listen", "listen comm");
  delete listen;
  return Status::ok();
}

std::string stats_json() { return transport::global_stats().to_json(); }

HookCounters hook_counters() {
  const transport::GlobalStats& s = transport::global_stats();
  HookCounters h;
  h.comms = s.hook_comms.load(std::memory_order_relaxed);
  h.send_conns = s.hook_send_conns.load(std::memory_order_relaxed);
  h.rotated_messages = s.rotated_messages.load(std::memory_order_relaxed);
  h.undeclared_conns = s.hook_undeclared_conns.load(std::memory_order_relaxed);
  return h;
}

namespace {
std::atomic<bool> g_profiler_active{false};
}  // namespace

bool profiler_active() { return g_profiler_active.load(std::memory_order_relaxed); }
void set_profiler_active() { g_profiler_active.store(true, std::memory_order_relaxed); }

Result<std::string> engine_endpoint(int dev) {
  Globals& g = globals();
  std::lock_guard<std::mutex> lock(g.mu);
  if (dev < 0 || dev >= static_cast<int>(g.engines.size()) || g.engines[dev].engines.empty() ||
      !g.engines[dev].engines[0]) {
    return Status(Code::kUnavailable, fmt::format("device {} has no progress engine running", dev));
  }
  const Engine& e = *g.engines[dev].engines[0];
  return transport::addr_string(e.ip4_be(), e.udp_port());
}

}  // namespace trim::net
