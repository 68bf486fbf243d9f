#include "coll/comm.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "common/le.h"

namespace trim::coll {

namespace {

constexpr size_t kDescBytes = 48;
constexpr uint32_t kDescMagic = 0x6c6f6374;  // "tcol"
constexpr uint16_t kDescVersion = 1;

// What each rank tells rank+1 before a collective (check_ops): enough to refuse a neighbour that
// called another collective, size, type, op or root, or that is a collective ahead or behind.
struct OpDesc {
  uint16_t kind = 0;
  uint64_t seq = 0;
  uint64_t count = 0;
  int32_t dtype = -1;
  int32_t op = -1;
  int32_t root = -1;
  int32_t nranks = 0;

  void write(uint8_t* p) const {
    std::memset(p, 0, kDescBytes);
    le::put32(p, kDescMagic);
    le::put16(p + 4, kDescVersion);
    le::put16(p + 6, kind);
    le::put64(p + 8, seq);
    le::put64(p + 16, count);
    le::put32(p + 24, static_cast<uint32_t>(dtype));
    le::put32(p + 28, static_cast<uint32_t>(op));
    le::put32(p + 32, static_cast<uint32_t>(root));
    le::put32(p + 36, static_cast<uint32_t>(nranks));
  }
  static bool read(const uint8_t* p, OpDesc* d) {
    if (le::get32(p) != kDescMagic || le::get16(p + 4) != kDescVersion) return false;
    d->kind = le::get16(p + 6);
    d->seq = le::get64(p + 8);
    d->count = le::get64(p + 16);
    d->dtype = static_cast<int32_t>(le::get32(p + 24));
    d->op = static_cast<int32_t>(le::get32(p + 28));
    d->root = static_cast<int32_t>(le::get32(p + 32));
    d->nranks = static_cast<int32_t>(le::get32(p + 36));
    return true;
  }
  bool operator==(const OpDesc& o) const {
    return kind == o.kind && seq == o.seq && count == o.count && dtype == o.dtype && op == o.op && root == o.root &&
           nranks == o.nranks;
  }
};

enum OpKind : uint16_t { kAllReduceOp = 1, kBroadcastOp = 2, kAllGatherOp = 3, kReduceScatterOp = 4, kBarrierOp = 5 };

const char* kind_name(uint16_t k) {
  switch (k) {
    case kAllReduceOp: return "all_reduce";
    case kBroadcastOp: return "broadcast";
    case kAllGatherOp: return "all_gather";
    case kReduceScatterOp: return "reduce_scatter";
    case kBarrierOp: return "barrier";
  }
  return "an unknown collective";
}

std::string describe(const OpDesc& d) {
  std::string s = std::string(kind_name(d.kind)) + " #" + std::to_string(d.seq);
  if (d.kind == kBroadcastOp || d.kind == kAllGatherOp) {
    s += " of " + std::to_string(d.count) + " bytes";
  } else if (d.kind != kBarrierOp && valid_dtype(d.dtype) && valid_op(d.op)) {
    s += " of " + std::to_string(d.count) + " " + dtype_name(static_cast<DType>(d.dtype)) + " (" +
         op_name(static_cast<RedOp>(d.op)) + ")";
  }
  if (d.kind == kBroadcastOp) s += " from root " + std::to_string(d.root);
  return s;
}

// The op descriptor exchange, as one exact p2p transfer each way (NCCL's Send/Recv, so the
// plugin never trims it), posted before the op's own transfers so it matches first. The op's
// first receive is applied only after rank-1's descriptor matched this rank's.
class DescGate : public Gate {
 public:
  DescGate(const Link& l, ProfilerHost* prof, const WorkBuffers& desc, const OpDesc& mine, std::string* mismatch)
      : l_(l), desc_(desc), mine_(mine), mismatch_(mismatch), ev_(prof) {}

  Status post(int64_t deadline_ns) {
    mine_.write(reinterpret_cast<uint8_t*>(desc_.work));
    TaskInfo task;
    task.p2p = true;
    task.func = "Send";
    task.datatype = "ncclInt8";
    task.elem_bytes = 1;
    task.count = kDescBytes;
    task.root = (l_.rank + 1) % l_.nranks;
    ev_.begin(task, OpShape{task.root, 1, static_cast<int>(kDescBytes)},
              OpShape{(l_.rank + l_.nranks - 1) % l_.nranks, 1, static_cast<int>(kDescBytes)});
    ncclResult_t r = l_.net->set_net_attr(kFuncSend, kAlgoRing, kProtoSimple);
    if (r != ncclSuccess) return plugin_error("setNetAttr", r);
    ev_.send().start_step(0);
    ev_.recv().start_step(0);
    Backoff backoff;
    while (send_req_ == nullptr || recv_req_ == nullptr) {
      if (send_req_ == nullptr) {
        r = l_.net->isend(l_.send_comm, desc_.work, kDescBytes, l_.rank, desc_.work_mh, ev_.send().phandle(0),
                          &send_req_);
        if (r != ncclSuccess) return plugin_error("isend (op descriptor)", r);
      }
      if (recv_req_ == nullptr) {
        const int prev = (l_.rank + l_.nranks - 1) % l_.nranks;
        r = l_.net->irecv(l_.recv_comm, desc_.staging, desc_.slot_bytes, prev, desc_.staging_mh, ev_.recv().phandle(0),
                          &recv_req_);
        if (r != ncclSuccess) return plugin_error("irecv (op descriptor)", r);
      }
      if (send_req_ != nullptr && recv_req_ != nullptr) break;
      if (l_.abort != nullptr && l_.abort->load(std::memory_order_relaxed)) {
        return Status(Code::kUnavailable, "aborted while posting the op descriptor");
      }
      if (mono_ns() > deadline_ns) return Status(Code::kUnavailable, "deadline while posting the op descriptor");
      backoff.idle();
    }
    return Status::ok();
  }

  Status poll(bool* done, bool* moved) override {
    if (!send_done_) {
      int d = 0;
      size_t bytes = 0;
      ncclResult_t r = l_.net->test(send_req_, &d, &bytes);
      if (r != ncclSuccess) {
        return plugin_error(("test (op descriptor send to rank " + std::to_string((l_.rank + 1) % l_.nranks) + ")").c_str(),
                            r);
      }
      if (d != 0) {
        send_done_ = *moved = true;
        ev_.send().stop();
      }
    }
    if (!recv_done_) {
      int d = 0;
      size_t bytes = 0;
      ncclResult_t r = l_.net->test(recv_req_, &d, &bytes);
      if (r != ncclSuccess) {
        const int prev = (l_.rank + l_.nranks - 1) % l_.nranks;
        return plugin_error(("test (op descriptor receive from rank " + std::to_string(prev) + ")").c_str(), r);
      }
      if (d != 0) {
        recv_done_ = *moved = true;
        ev_.recv().stop();
        TRIM_RETURN_IF_ERROR(check(bytes));
      }
    }
    *done = send_done_ && recv_done_;
    return Status::ok();
  }

  int pending(void** out) const override {
    int n = 0;
    if (!send_done_) out[n++] = send_req_;
    if (!recv_done_) out[n++] = recv_req_;
    return n;
  }

 private:
  Status check(size_t bytes) {
    OpDesc theirs;
    const int prev = (l_.rank + l_.nranks - 1) % l_.nranks;
    if (bytes != kDescBytes || !OpDesc::read(reinterpret_cast<const uint8_t*>(desc_.staging), &theirs)) {
      *mismatch_ = "rank " + std::to_string(prev) + " sent " + std::to_string(bytes) +
                   " bytes where its op descriptor belongs: it runs another protocol, or is out of step with this rank";
    } else if (!(theirs == mine_)) {
      *mismatch_ = "rank " + std::to_string(prev) + " called " + describe(theirs) + " where this rank called " +
                   describe(mine_) + ": every rank must call the same collectives in the same order, with the same "
                   "size, dtype, op and root";
    }
    return mismatch_->empty() ? Status::ok() : Status(Code::kInvalidArgument, *mismatch_);
  }

  const Link& l_;
  const WorkBuffers desc_;  // by value: built per op
  OpDesc mine_;
  std::string* mismatch_;
  OpEvents ev_;
  void* send_req_ = nullptr;
  void* recv_req_ = nullptr;
  bool send_done_ = false, recv_done_ = false;
};

}  // namespace

// ---- buffers

Status HostBuffer::make(size_t bytes, const char* what, std::unique_ptr<HostBuffer>* out) {
  constexpr size_t kPage = 4096;
  void* p = nullptr;
  size_t alloc = 0;
  if (bytes <= SIZE_MAX - 2 * kPage) {
    alloc = ((bytes + kPage - 1) / kPage + 1) * kPage;
    p = std::aligned_alloc(kPage, alloc);
  }
  if (p == nullptr) {
    return Status(Code::kUnavailable, "out of memory: " + std::to_string(bytes) + " bytes for " + what +
                                          " could not be allocated");
  }
  std::memset(p, 0, alloc);  // touch every page now, not inside a timed collective
  out->reset(new HostBuffer(static_cast<char*>(p), bytes));
  return Status::ok();
}

HostBuffer::~HostBuffer() { std::free(data_); }

Status MemReg::reg(void* data, size_t bytes) {
  ncclResult_t r = net_->reg_mr(comm_, data, bytes, &mh_);
  if (r != ncclSuccess) return plugin_error("regMr", r);
  return Status::ok();
}

Status MemReg::release() {
  if (mh_ == nullptr) return Status::ok();
  ncclResult_t r = net_->dereg_mr(comm_, mh_);
  mh_ = nullptr;
  if (r != ncclSuccess) return plugin_error("deregMr", r);
  return Status::ok();
}

Result<void*> RegCache::get(void* comm, char* data, size_t bytes) {
  ++clock_;
  for (Entry& e : entries_) {
    if (e.data == data && e.bytes == bytes) {
      e.used = clock_;
      return e.mh;
    }
  }
  if (entries_.size() == kEntries) {
    auto lru = std::min_element(entries_.begin(), entries_.end(),
                                [](const Entry& a, const Entry& b) { return a.used < b.used; });
    const ncclResult_t r = net_->dereg_mr(comm, lru->mh);
    entries_.erase(lru);
    if (r != ncclSuccess) return plugin_error("deregMr", r);
  }
  void* mh = nullptr;
  const ncclResult_t r = net_->reg_mr(comm, data, bytes, &mh);
  if (r != ncclSuccess) return plugin_error("regMr", r);
  entries_.push_back(Entry{data, bytes, mh, clock_});
  return mh;
}

Status RegCache::clear(void* comm) {
  Status first;
  for (const Entry& e : entries_) {
    const ncclResult_t r = net_->dereg_mr(comm, e.mh);
    if (r != ncclSuccess && first.is_ok()) first = plugin_error("deregMr", r);
  }
  entries_.clear();
  return first;
}

// ---- setup and teardown

namespace {
CommConfig named(CommConfig cfg) {
  if (cfg.name.empty()) cfg.name = "rank " + std::to_string(cfg.rank);
  return cfg;
}
}  // namespace

Comm::Comm(const CommConfig& cfg)
    : cfg_(named(cfg)), log_(cfg_.name, cfg_.log_level), handle_(NCCL_NET_HANDLE_MAXSIZE, '\0') {}

Comm::~Comm() { (void)close(); }

Outcome Comm::create(const CommConfig& cfg, std::unique_ptr<Comm>* out) {
  if (cfg.nranks < 1 || cfg.rank < 0 || cfg.rank >= cfg.nranks) {
    return Outcome::bad(Fail::kInvalid, Status(Code::kInvalidArgument, "rank " + std::to_string(cfg.rank) + " of " +
                                                                           std::to_string(cfg.nranks) + " ranks"));
  }
  std::unique_ptr<Comm> c(new Comm(cfg));
  LogScope scope(&c->log_);
  Outcome o = c->init();
  if (!o.ok()) return o;
  *out = std::move(c);
  return Outcome::good();
}

Outcome Comm::init() {
  Result<NetPlugin*> opened = NetPlugin::open(cfg_.plugin_path, cfg_.api);
  if (!opened) return Outcome::bad(Fail::kPlugin, opened.status());
  net_.reset(opened.value());
  // NCCL always hands the net plugin its profiler callback (v10+), which does nothing while no
  // profiler is loaded; then the profiler is initialised for this communicator.
  ncclResult_t r = net_->init(cfg_.comm_id, nccl_profiler_callback, cfg_.traffic_class);
  if (r != ncclSuccess) return Outcome::bad(Fail::kPlugin, plugin_error("init", r));
  net_inited_ = true;
  if (cfg_.profiler) (void)prof_.load(net_->library());
  prof_.init(cfg_.comm_id, cfg_.nranks, cfg_.nranks, cfg_.rank);  // one rank per node
  link_ = Link{net_.get(), nullptr, nullptr, cfg_.rank, cfg_.nranks, &abort_};
  if (cfg_.nranks == 1) return Outcome::good();

  auto bad = [](Status s) { return Outcome::bad(Fail::kPlugin, std::move(s)); };
  int ndev = 0;
  r = net_->devices(&ndev);
  if (r != ncclSuccess) return bad(plugin_error("devices", r));
  if (ndev < 1) return bad(Status(Code::kUnavailable, "devices reported " + std::to_string(ndev) + " devices"));
  DeviceInfo info;
  r = net_->properties(0, &info);
  if (r != ncclSuccess) return bad(plugin_error("getProperties", r));
  device_name_ = info.name;
  // NCCL refuses a device whose maxP2pBytes is outside (0, 1 TiB] (v9+).
  if (cfg_.api != Api::kV8 && (info.max_p2p_bytes == 0 || info.max_p2p_bytes > (size_t{1} << 40))) {
    return bad(Status(Code::kInternal,
                      "getProperties: maxP2pBytes " + std::to_string(info.max_p2p_bytes) + " outside (0, 1 TiB]"));
  }
  if ((info.ptr_support & NCCL_PTR_HOST) == 0) return bad(Status(Code::kInternal, "getProperties: no NCCL_PTR_HOST"));
  if ((info.ptr_support & NCCL_PTR_CUDA) != 0) {
    return bad(Status(Code::kInternal, "getProperties: NCCL_PTR_CUDA advertised, but the plugin takes host buffers only"));
  }
  r = net_->listen(0, handle_.data(), &listen_);
  if (r != ncclSuccess) return bad(plugin_error("listen", r));
  if (listen_ == nullptr) return bad(Status(Code::kInternal, "listen succeeded without a listen comm"));
  return Outcome::good();
}

Outcome Comm::connect(const std::string& next_handle, int64_t deadline_ns, bool send, bool recv) {
  if (cfg_.nranks == 1) return Outcome::good();
  LogScope scope(&log_);
  if (listen_ == nullptr) return Outcome::bad(Fail::kInvalid, Status(Code::kInvalidArgument, "connect: called twice"));
  if (next_handle.size() != NCCL_NET_HANDLE_MAXSIZE) {
    return Outcome::bad(Fail::kInvalid, Status(Code::kInvalidArgument, "connect: a handle of " +
                                                                           std::to_string(next_handle.size()) + " bytes"));
  }
  // One handle buffer, passed to every connect retry: the plugin may keep its in-progress state
  // inside it.
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  std::memcpy(handle, next_handle.data(), sizeof(handle));
  Outcome o = connect_loop(handle, deadline_ns, send, recv);
  if (!o.ok()) {
    (void)close_comms();
    failed_ = o;
    return o;
  }
  Status st = register_slots();
  // Our sends come from the caller's buffers, which keep their meaning between calls: error
  // feedback may apply to this communicator's send comm (and to no other user's of the plugin).
  if (st.is_ok() && link_.send_comm != nullptr) st = net_->declare_send_buffers(link_.send_comm);
  if (!st.is_ok()) {
    (void)close_comms();
    failed_ = Outcome::bad(Fail::kPlugin, st);
    return failed_;
  }
  return Outcome::good();
}

Outcome Comm::connect_loop(char* handle, int64_t deadline_ns, bool send, bool recv) {
  Backoff backoff;
  while ((send && link_.send_comm == nullptr) || (recv && link_.recv_comm == nullptr)) {
    bool moved = false;
    if (send && link_.send_comm == nullptr) {
      ncclResult_t r = net_->connect(0, handle, &link_.send_comm);
      if (r != ncclSuccess) return Outcome::bad(Fail::kRemote, plugin_error("connect", r));
      moved = moved || link_.send_comm != nullptr;
    }
    if (recv && link_.recv_comm == nullptr) {
      ncclResult_t r = net_->accept(listen_, &link_.recv_comm);
      if (r != ncclSuccess) return Outcome::bad(Fail::kRemote, plugin_error("accept", r));
      moved = moved || link_.recv_comm != nullptr;
    }
    if (abort_.load(std::memory_order_relaxed)) {
      return Outcome::bad(Fail::kAborted, Status(Code::kUnavailable, "connection setup aborted"));
    }
    if (mono_ns() > deadline_ns) {
      const bool connecting = send && link_.send_comm == nullptr;
      return Outcome::bad(Fail::kTimeout,
                          Status(Code::kUnavailable,
                                 std::string("connection setup did not finish in time (") +
                                     (connecting ? "connect to rank " + std::to_string((cfg_.rank + 1) % cfg_.nranks)
                                                 : "accept from rank " +
                                                       std::to_string((cfg_.rank + cfg_.nranks - 1) % cfg_.nranks)) +
                                     " pending)"));
    }
    if (moved) backoff.progressed(); else backoff.idle();
  }
  // NCCL closes the listen comm once its connection is accepted.
  ncclResult_t r = net_->close_listen(listen_);
  listen_ = nullptr;
  if (r != ncclSuccess) return Outcome::bad(Fail::kPlugin, plugin_error("closeListen", r));
  return Outcome::good();
}

Status Comm::register_slots() {
  // NCCL registers its receive FIFO once per connection (regMr at connect) and posts every irecv
  // at the largest slice; the descriptor buffers likewise.
  slots_.slot_bytes = kSliceBytes;
  TRIM_RETURN_IF_ERROR(HostBuffer::make(0, "the address of 0-byte ops", &empty_));
  work_regs_ = std::make_unique<RegCache>(net_.get());
  recv_regs_ = std::make_unique<RegCache>(net_.get());
  if (link_.recv_comm != nullptr) {
    TRIM_RETURN_IF_ERROR(HostBuffer::make(kSliceBytes * kMaxInFlight, "the receive slots", &slot_mem_));
    slot_reg_ = std::make_unique<MemReg>(net_.get(), link_.recv_comm);
    TRIM_RETURN_IF_ERROR(slot_reg_->reg(slot_mem_->data(), slot_mem_->bytes()));
    slots_.staging = slot_mem_->data();
    slots_.staging_mh = slot_reg_->handle();
  }
  if (cfg_.check_ops && link_.recv_comm != nullptr && link_.send_comm != nullptr) {
    TRIM_RETURN_IF_ERROR(HostBuffer::make(kDescBytes, "the op descriptor", &desc_send_mem_));
    TRIM_RETURN_IF_ERROR(HostBuffer::make(64, "the op descriptor", &desc_recv_mem_));
    desc_send_reg_ = std::make_unique<MemReg>(net_.get(), link_.send_comm);
    desc_recv_reg_ = std::make_unique<MemReg>(net_.get(), link_.recv_comm);
    TRIM_RETURN_IF_ERROR(desc_send_reg_->reg(desc_send_mem_->data(), kDescBytes));
    TRIM_RETURN_IF_ERROR(desc_recv_reg_->reg(desc_recv_mem_->data(), 64));
  }
  return Status::ok();
}

Status Comm::close_comms() {
  // NCCL's teardown order: deregMr, then close; the memory itself goes with this object, after.
  Status first;
  auto keep = [&first](Status s) {
    if (!s.is_ok() && first.is_ok()) first = std::move(s);
  };
  for (auto* reg : {&slot_reg_, &desc_send_reg_, &desc_recv_reg_}) {
    if (*reg) keep((*reg)->release());
  }
  if (work_regs_ && link_.send_comm != nullptr) keep(work_regs_->clear(link_.send_comm));
  if (recv_regs_ && link_.recv_comm != nullptr) keep(recv_regs_->clear(link_.recv_comm));
  auto close = [&](const char* call, void** comm, ncclResult_t (NetPlugin::*fn)(void*)) {
    if (*comm == nullptr) return;
    ncclResult_t r = (net_.get()->*fn)(*comm);
    *comm = nullptr;
    if (r != ncclSuccess) keep(plugin_error(call, r));
  };
  if (net_) {
    close("closeSend", &link_.send_comm, &NetPlugin::close_send);
    close("closeRecv", &link_.recv_comm, &NetPlugin::close_recv);
    close("closeListen", &listen_, &NetPlugin::close_listen);
  }
  return first;
}

Status Comm::close() {
  LogScope scope(&log_);
  Status first = close_comms();
  prof_.finalize();
  if (net_inited_) {
    net_inited_ = false;
    ncclResult_t r = net_->finalize();
    if (r != ncclSuccess && first.is_ok()) first = plugin_error("finalize", r);
  }
  return first;
}

// ---- collectives

namespace {
// A run_op body: the op's own work, and its deadline (which the outcome's classification reads).
template <typename F>
struct Body {
  int64_t deadline_ns;
  F f;
  Status operator()(Gate* gate) { return f(gate); }
};
template <typename F>
Body<F> body(int64_t deadline_ns, F f) {
  return Body<F>{deadline_ns, std::move(f)};
}

Outcome refused(int kind, const std::string& why) {
  return Outcome::bad(Fail::kInvalid, Status(Code::kInvalidArgument, std::string(kind_name(static_cast<uint16_t>(kind))) +
                                                                         ": " + why));
}
}  // namespace

template <typename B>
Outcome Comm::run_op(int kind, uint64_t count, DType dtype, RedOp op, int root, B&& body) {
  OpDesc desc;
  desc.kind = static_cast<uint16_t>(kind);
  desc.seq = seq_;
  desc.count = count;
  desc.dtype = static_cast<int32_t>(dtype);
  desc.op = static_cast<int32_t>(op);
  desc.root = root;
  desc.nranks = cfg_.nranks;
  const std::string name = cfg_.name + ": " + describe(desc);
  if (!failed_.ok()) {
    return Outcome::bad(Fail::kFailed, Status(failed_.status.code(), name + " refused: this communicator failed "
                                                                            "earlier: " + failed_.status.message()));
  }
  if (link_.send_comm == nullptr || link_.recv_comm == nullptr) {
    return Outcome::bad(Fail::kInvalid, Status(Code::kInvalidArgument, name + ": not connected"));
  }
  ++seq_;
  LogScope scope(&log_);
  const uint64_t warnings_before = log_.warnings();
  Status st;
  std::string mismatch;
  // Whatever the body throws (an allocation deep in the library) fails the communicator like any
  // other error once requests may be in flight: the connections are closed below before return.
  try {
    if (abort_.load(std::memory_order_relaxed)) {
      st = Status(Code::kUnavailable, "aborted before it started");
    } else if (cfg_.check_ops) {
      DescGate gate(link_, &prof_,
                    WorkBuffers{desc_send_mem_->data(), desc_send_reg_->handle(), nullptr, desc_recv_mem_->data(), 64,
                                desc_recv_reg_->handle()},
                    desc, &mismatch);
      st = gate.post(body.deadline_ns);
      if (st.is_ok()) st = body(&gate);
    } else {
      st = body(nullptr);
    }
  } catch (const std::bad_alloc&) {
    st = Status(Code::kUnavailable, "out of memory");
  } catch (const std::exception& e) {
    st = Status(Code::kInternal, std::string("unexpected exception: ") + e.what());
  }
  if (st.is_ok()) return Outcome::good();
  Fail f = Fail::kRemote;
  if (!mismatch.empty()) f = Fail::kMismatch;
  else if (abort_.load(std::memory_order_relaxed)) f = Fail::kAborted;
  else if (mono_ns() > body.deadline_ns) f = Fail::kTimeout;
  // What the plugin warned of during the op, before the teardown adds warnings of its own.
  const std::string said = log_.warning_since(warnings_before);
  // Connections first: once this returns, the plugin must not touch the caller's memory.
  Status closed = close_comms();
  std::string text = name + " failed: " + (f == Fail::kMismatch ? mismatch : st.message());
  if (f != Fail::kMismatch && !said.empty()) text += "; the plugin said: " + said;
  if (!closed.is_ok()) text += " (closing the connections then: " + closed.message() + ")";
  failed_ = Outcome::bad(f, Status(st.code(), text));
  return failed_;
}

Result<char*> Comm::scratch(size_t bytes) {
  scratch_peak_ = std::max(scratch_peak_, bytes);
  if (++scratch_uses_ >= kScratchWindow) {
    if (scratch_ && scratch_->bytes() / 2 > scratch_peak_) scratch_.reset();
    scratch_uses_ = 0;
    scratch_peak_ = bytes;
  }
  if (!scratch_ || scratch_->bytes() < bytes) {
    scratch_.reset();  // the old one first: both at once may not fit
    TRIM_RETURN_IF_ERROR(HostBuffer::make(bytes, "the collective's scratch", &scratch_));
  }
  return scratch_->data();
}

Result<WorkBuffers> Comm::buffers_for(char* work, size_t bytes) {
  WorkBuffers b = slots_;
  b.work = work;
  Result<void*> mh = work_regs_->get(link_.send_comm, work, std::max<size_t>(bytes, 1));
  if (!mh) return mh.status();
  b.work_mh = *mh;
  if (cfg_.direct_recv && link_.recv_comm != nullptr && bytes > 0) {
    Result<void*> rmh = recv_regs_->get(link_.recv_comm, work, bytes);
    if (!rmh) return rmh.status();
    b.work_recv_mh = *rmh;
  }
  return b;
}

Status Comm::ring_op(const RingGeometry& geo, DType dtype, RedOp op, const char* proto, char* work,
                     size_t work_bytes, int64_t deadline_ns, Gate* gate) {
  if (work_bytes == 0) work = empty_->data();  // a 0-byte op still registers an address
  Result<WorkBuffers> b = buffers_for(work, work_bytes);
  if (!b) return b.status();
  return ring_run(link_, &prof_, geo, dtype, op, proto, *b, deadline_ns, gate);
}

Status Comm::gather_reduce(const char* in, char* out, size_t count, DType dtype, RedOp op, char* all,
                           int64_t deadline_ns, Gate* gate) {
  const size_t bytes = count * dtype_bytes(dtype);
  const size_t n = static_cast<size_t>(cfg_.nranks);
  if (bytes > 0) std::memcpy(all + static_cast<size_t>(cfg_.rank) * bytes, in, bytes);
  RingGeometry geo(RingKind::kAllGather, bytes * n, 1, cfg_.nranks, kSliceBytes, kSimpleSlicesPerStep);
  TRIM_RETURN_IF_ERROR(ring_op(geo, DType::kU8, RedOp::kSum, "SIMPLE", all, bytes * n, deadline_ns, gate));
  if (out != nullptr && bytes > 0) {
    // Rank n-1's values, each lower rank's combined in as a received value would be:
    // ((x_0 op x_1) op ...) with the same operand order on every rank.
    std::memcpy(out, all + (n - 1) * bytes, bytes);
    for (size_t k = n - 1; k-- > 0;) reduce_into(out, all + k * bytes, count, dtype, op);
  }
  return Status::ok();
}

namespace {
// a * b, or false when it does not fit a size_t (a count no buffer can hold).
bool mul_fits(size_t a, size_t b, size_t* out) {
  if (b != 0 && a > SIZE_MAX / b) return false;
  *out = a * b;
  return true;
}
}  // namespace

Outcome Comm::reduce_in_place(int kind, uint64_t desc_count, void* data, size_t count, DType dtype, RedOp op,
                              int64_t deadline_ns, const RingExtras& extras) {
  const size_t eb = dtype_bytes(dtype);
  Outcome o = Outcome::good();
  size_t bytes = 0, all_bytes = 0;
  if (!mul_fits(count, eb, &bytes) || !mul_fits(bytes, static_cast<size_t>(cfg_.nranks), &all_bytes)) {
    return refused(kind, std::to_string(count) + " elements do not fit in memory");
  }
  if (cfg_.nranks > 1 && is_float(dtype) && op != RedOp::kSum && op != RedOp::kAvg) {
    // NCCL gives a net plugin no reduction op, so the plugin would take a float MAX, MIN or PROD
    // for a sum and trim its reduce-scatter half: gather every rank's input exactly (an AllGather
    // is never trimmed) and reduce it here, in rank order, identically on every rank. n blocks
    // of scratch, allocated inside the op: a failure then fails it on every rank alike.
    o = run_op(kind, desc_count, dtype, op, -1, body(deadline_ns, [&](Gate* gate) {
                 Result<char*> all = scratch(all_bytes);
                 if (!all) return all.status();
                 char* d = static_cast<char*>(data);
                 return gather_reduce(d, d, count, dtype, op, *all, deadline_ns, gate);
               }));
  } else if (cfg_.nranks > 1) {
    o = run_op(kind, desc_count, dtype, op, -1, body(deadline_ns, [&](Gate* gate) {
                 // Here, not before run_op: a refused collective leaves the caller's data alone.
                 if (op == RedOp::kAvg) scale_for_avg(data, count, dtype, cfg_.nranks);
                 RingGeometry geo(RingKind::kAllReduce, count, eb, cfg_.nranks, kSliceBytes,
                                  std::strcmp(extras.proto, "LL") == 0 ? kLlSlicesPerStep : kSimpleSlicesPerStep,
                                  extras.tail_bytes);
                 return ring_op(geo, dtype, op, extras.proto, static_cast<char*>(data), bytes + extras.tail_bytes,
                                deadline_ns, gate);
               }));
  }
  if (o.ok() && op == RedOp::kAvg && cfg_.nranks > 1) finish_avg(data, count, dtype, cfg_.nranks);
  return o;
}

Outcome Comm::all_reduce(void* data, size_t count, DType dtype, RedOp op, int64_t deadline_ns,
                         const RingExtras& extras) {
  if (data == nullptr && count + extras.tail_bytes > 0) return refused(kAllReduceOp, "data is null");
  return reduce_in_place(kAllReduceOp, count, data, count, dtype, op, deadline_ns, extras);
}

Outcome Comm::barrier(int64_t deadline_ns) {
  uint8_t one = 1;
  return reduce_in_place(kBarrierOp, 0, &one, 1, DType::kU8, RedOp::kMax, deadline_ns, RingExtras());
}

Outcome Comm::broadcast(void* data, size_t bytes, int root, int64_t deadline_ns) {
  if (root < 0 || root >= cfg_.nranks) {
    return refused(kBroadcastOp, "root " + std::to_string(root) + " is not a rank of " + std::to_string(cfg_.nranks));
  }
  if (data == nullptr && bytes > 0) return refused(kBroadcastOp, "data is null");
  if (cfg_.nranks == 1) return Outcome::good();
  return run_op(kBroadcastOp, bytes, DType::kU8, RedOp::kSum, root, body(deadline_ns, [&](Gate* gate) {
                  char* work = bytes == 0 ? empty_->data() : static_cast<char*>(data);
                  Result<WorkBuffers> b = buffers_for(work, bytes);
                  if (!b) return b.status();
                  return ring_broadcast(link_, &prof_, bytes, root, *b, deadline_ns, gate);
                }));
}

Outcome Comm::all_gather(const void* in, void* out, size_t bytes_per_rank, int64_t deadline_ns) {
  if ((in == nullptr || out == nullptr) && bytes_per_rank > 0) return refused(kAllGatherOp, "a buffer is null");
  char* mine = static_cast<char*>(out) + static_cast<size_t>(cfg_.rank) * bytes_per_rank;
  if (in != mine && bytes_per_rank > 0) std::memmove(mine, in, bytes_per_rank);
  if (cfg_.nranks == 1) return Outcome::good();
  const size_t total = bytes_per_rank * static_cast<size_t>(cfg_.nranks);
  return run_op(kAllGatherOp, bytes_per_rank, DType::kU8, RedOp::kSum, -1, body(deadline_ns, [&](Gate* gate) {
                  RingGeometry geo(RingKind::kAllGather, total, 1, cfg_.nranks, kSliceBytes, kSimpleSlicesPerStep);
                  return ring_op(geo, DType::kU8, RedOp::kSum, "SIMPLE", static_cast<char*>(out), total, deadline_ns,
                                 gate);
                }));
}

Outcome Comm::reduce_scatter(const void* in, void* out, size_t count_per_rank, DType dtype, RedOp op,
                             int64_t deadline_ns) {
  if ((in == nullptr || out == nullptr) && count_per_rank > 0) return refused(kReduceScatterOp, "a buffer is null");
  const size_t n = static_cast<size_t>(cfg_.nranks);
  size_t block = 0, total = 0;
  if (!mul_fits(count_per_rank, dtype_bytes(dtype), &block) || !mul_fits(block, n, &total)) {
    return refused(kReduceScatterOp, std::to_string(count_per_rank) + " elements per rank do not fit in memory");
  }
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  if (block > 0 && dst < src + total && src < dst + block) {
    return refused(kReduceScatterOp, "the output overlaps the input");
  }
  const char* mine = src + static_cast<size_t>(cfg_.rank) * block;
  if (cfg_.nranks == 1) {
    if (block > 0) std::memcpy(dst, mine, block);
    if (op == RedOp::kAvg) {
      scale_for_avg(dst, count_per_rank, dtype, 1);
      finish_avg(dst, count_per_rank, dtype, 1);
    }
    return Outcome::good();
  }
  if (is_float(dtype) && op != RedOp::kSum && op != RedOp::kAvg) {
    // Exact, as in all_reduce (rare: NCCL's own ReduceScatter of a float MAX would be trimmed):
    // block k of every rank's input is gathered in turn, and rank k reduces it in rank order.
    // n blocks of scratch whatever n: the input is never copied whole.
    return run_op(kReduceScatterOp, count_per_rank, dtype, op, -1, body(deadline_ns, [&](Gate* gate) {
                    Result<char*> all = scratch(total);
                    if (!all) return all.status();
                    for (size_t k = 0; k < n; ++k) {
                      TRIM_RETURN_IF_ERROR(gather_reduce(src + k * block,
                                                         k == static_cast<size_t>(cfg_.rank) ? dst : nullptr,
                                                         count_per_rank, dtype, op, *all, deadline_ns,
                                                         k == 0 ? gate : nullptr));
                    }
                    return Status::ok();
                  }));
  }
  // The input is never written: the ring works on a copy in the scratch (NCCL's kernel reads
  // the user's buffer and writes its FIFOs; the scratch plays both).
  char* work = nullptr;
  Outcome o = run_op(kReduceScatterOp, count_per_rank, dtype, op, -1, body(deadline_ns, [&](Gate* gate) {
                       Result<char*> scr = scratch(total);
                       if (!scr) return scr.status();
                       work = *scr;
                       if (total > 0) std::memcpy(work, src, total);
                       if (op == RedOp::kAvg) scale_for_avg(work, count_per_rank * n, dtype, cfg_.nranks);
                       RingGeometry geo(RingKind::kReduceScatter, count_per_rank * n, dtype_bytes(dtype), cfg_.nranks,
                                        kSliceBytes, kSimpleSlicesPerStep);
                       return ring_op(geo, dtype, op, "SIMPLE", work, total, deadline_ns, gate);
                     }));
  if (!o.ok()) return o;
  if (block > 0) std::memcpy(dst, work + static_cast<size_t>(cfg_.rank) * block, block);
  if (op == RedOp::kAvg) finish_avg(dst, count_per_rank, dtype, cfg_.nranks);
  return o;
}

}  // namespace trim::coll
