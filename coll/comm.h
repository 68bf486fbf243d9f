// One communicator of ring collectives over a net plugin, the C++ side of coll/trim_coll.h: what
// NCCL's init and proxy do for one communicator. Setup as NCCL does it (net init for this
// communicator, then the profiler from the plugin's own library, then listen / connect to rank+1
// / accept from rank-1), the collectives as ring ops over one pair of connections, and teardown
// in NCCL's order. A failure after connect closes the connections before it is returned (the
// plugin then touches no caller memory) and fails every later call with the first error.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "coll/net_plugin.h"
#include "coll/pipeline.h"
#include "coll/profiler_host.h"
#include "coll/reduce.h"
#include "coll/ring.h"
#include "common/status.h"

namespace trim::coll {

// Why a call failed, as the C ABI reports it (TRIM_COLL_E*, negated).
enum class Fail : int {
  kNone = 0,
  kInvalid = 1,
  kPlugin = 2,
  kRemote = 3,
  kTimeout = 4,
  kMismatch = 5,
  kAborted = 6,
  kFailed = 7,
};

struct CommConfig {
  std::string plugin_path;
  int rank = 0;
  int nranks = 1;
  uint64_t comm_id = 0;
  int traffic_class = -1;
  Api api = Api::kV12;
  bool profiler = true;   // load the profiler from the plugin's library, as NCCL does
  bool check_ops = false; // exchange an op descriptor with the ring neighbours per collective
  // Receive what is only copied (allgather steps, broadcast) straight into the caller's buffer,
  // registered with the recv comm too, instead of a staging slot and a copy. NCCL always uses
  // its slots; the PyTorch backend turns this on (one pass less over the allgather half).
  bool direct_recv = false;
  int log_level = 2;      // NCCL_LOG_WARN
  std::string name;       // of log lines and errors
};

// A call's outcome: ok, or why and what.
struct Outcome {
  Fail fail = Fail::kNone;
  Status status;
  bool ok() const { return fail == Fail::kNone; }
  static Outcome good() { return Outcome{}; }
  static Outcome bad(Fail f, Status s) { return Outcome{f, std::move(s)}; }
};

// Page-aligned host memory, zeroed (NCCL hands the plugin pinned pages; alignment is what we
// can mimic), at least one page so a 0-byte buffer still has an address to register.
class HostBuffer {
 public:
  // Fails with kUnavailable, naming the size and `what`, when the memory cannot be had: an
  // allocation failure is an error of the call that needed it, never an abort.
  static Status make(size_t bytes, const char* what, std::unique_ptr<HostBuffer>* out);
  ~HostBuffer();
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  char* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  HostBuffer(char* data, size_t bytes) : data_(data), bytes_(bytes) {}
  char* data_;
  size_t bytes_;
};

// regMr on request; deregMr exactly once (release() reports the result).
class MemReg {
 public:
  MemReg(NetPlugin* net, void* comm) : net_(net), comm_(comm) {}
  ~MemReg() { (void)release(); }
  MemReg(const MemReg&) = delete;
  MemReg& operator=(const MemReg&) = delete;
  Status reg(void* data, size_t bytes);
  Status release();
  void* handle() const { return mh_; }

 private:
  NetPlugin* net_;
  void* comm_;
  void* mh_ = nullptr;
};

// The send comm's registrations of callers' buffers, kept across collectives as NCCL keeps a user
// buffer's registration (its registration cache): DDP's buckets and a loop's tensor are the same
// memory every step, and deregMr waits for the plugin's engine thread. Keyed by exact (address,
// length); the least recently used of kEntries is deregistered first, all of them at close. A
// registration that outlives its memory is harmless: the plugin reads a region only for an
// operation posted on it, and every operation completes (or the connections are closed) before
// the collective returns.
class RegCache {
 public:
  static constexpr size_t kEntries = 16;
  explicit RegCache(NetPlugin* net) : net_(net) {}
  // The memory handle of [data, data + bytes) on `comm`, registering it on a miss.
  Result<void*> get(void* comm, char* data, size_t bytes);
  // Deregisters every entry; the first error.
  Status clear(void* comm);

 private:
  struct Entry {
    char* data;
    size_t bytes;
    void* mh;
    uint64_t used;
  };
  NetPlugin* net_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
};

// Extra knobs of a ring op for trim-harness: NCCL's LL protocol (announced, one slice per step)
// and raw tail bytes past the last element (odd sizes).
struct RingExtras {
  const char* proto = "SIMPLE";
  size_t tail_bytes = 0;
};

class Comm {
 public:
  // Loads and inits the plugin, loads the profiler, checks the device and listens (nranks > 1).
  static Outcome create(const CommConfig& cfg, std::unique_ptr<Comm>* out);
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  // This rank's listen handle (NCCL_NET_HANDLE_MAXSIZE bytes; zeros for one rank).
  const std::string& handle() const { return handle_; }
  // Connects to rank+1 (`next_handle`) and accepts rank-1 by `deadline_ns`; `send`/`recv` false
  // skip a direction (trim-harness's sendrecv mode). Registers the receive slots.
  Outcome connect(const std::string& next_handle, int64_t deadline_ns, bool send = true, bool recv = true);

  Outcome all_reduce(void* data, size_t count, DType dtype, RedOp op, int64_t deadline_ns,
                     const RingExtras& extras = RingExtras());
  Outcome broadcast(void* data, size_t bytes, int root, int64_t deadline_ns);
  Outcome all_gather(const void* in, void* out, size_t bytes_per_rank, int64_t deadline_ns);
  Outcome reduce_scatter(const void* in, void* out, size_t count_per_rank, DType dtype, RedOp op,
                         int64_t deadline_ns);
  Outcome barrier(int64_t deadline_ns);

  // Any thread: the running collective and every later one fail (kAborted).
  void abort() { abort_.store(true, std::memory_order_relaxed); }
  // Closes the connections, finalizes the profiler and the plugin's context; first error.
  Status close();

  // For trim-harness's own modes and checks.
  const CommConfig& config() const { return cfg_; }
  ProfilerHost* profiler() { return &prof_; }
  const Link& link() const { return link_; }
  const std::string& device_name() const { return device_name_; }
  // For callers that drive the plugin through link() themselves (trim-harness's modes): a LogScope
  // on it labels their lines as this communicator's.
  LogContext* log_context() { return &log_; }
  // The plugin's ncclTrimStatsJson, if it exports it.
  bool stats_json(std::string* out) const { return net_ != nullptr && net_->stats_json(out); }
  // The bytes the collectives' scratch holds now (tests: the exact fallback's memory).
  size_t scratch_bytes() const { return scratch_ ? scratch_->bytes() : 0; }

 private:
  explicit Comm(const CommConfig& cfg);
  Outcome init();
  Outcome connect_loop(char* handle, int64_t deadline_ns, bool send, bool recv);
  Status register_slots();
  Status close_comms();

  // Runs one collective (`kind`, with what its descriptor says): refuses it when failed, gates
  // it by the descriptor check, and turns a failure into the communicator's (closing the
  // connections first).
  template <typename Body>
  Outcome run_op(int kind, uint64_t count, DType dtype, RedOp op, int root, Body&& body);
  // The WorkBuffers of an op on [work, work + bytes): the slots, and the caller's buffer registered
  // with the send comm (and the recv comm under direct_recv), cached across ops.
  Result<WorkBuffers> buffers_for(char* work, size_t bytes);
  // A ring op over `work`, registered (buffers_for) for the op's length.
  Status ring_op(const RingGeometry& geo, DType dtype, RedOp op, const char* proto, char* work, size_t work_bytes,
                 int64_t deadline_ns, Gate* gate);
  // An in-place reduction of `count` elements (all_reduce, barrier, and reduce_scatter's float
  // MAX/MIN/PROD); the descriptor says `kind` and `desc_count`.
  Outcome reduce_in_place(int kind, uint64_t desc_count, void* data, size_t count, DType dtype, RedOp op,
                          int64_t deadline_ns, const RingExtras& extras);
  // Exact float MAX/MIN/PROD: every rank's `count` elements at `in` gathered into `all` (n of
  // them) by an AllGather (never trimmed), and, when `out` is not null, reduced into it in rank
  // order, identically on every rank.
  Status gather_reduce(const char* in, char* out, size_t count, DType dtype, RedOp op, char* all, int64_t deadline_ns,
                       Gate* gate);
  // The scratch of at least `bytes`, grown on demand and shrunk when a window of kScratchWindow
  // uses needed less than half of it (a one-off large op must not pin its memory for good).
  Result<char*> scratch(size_t bytes);

  CommConfig cfg_;
  LogContext log_;  // this communicator's plugin log lines and warnings (LogScope in every call)
  std::unique_ptr<NetPlugin> net_;
  ProfilerHost prof_;
  bool net_inited_ = false;
  std::string device_name_;
  std::string handle_;
  void* listen_ = nullptr;
  Link link_;
  std::atomic<bool> abort_{false};
  Outcome failed_;  // the first failure after connect; every later call returns it
  uint64_t seq_ = 0;
  // Receive slots (recv comm), op descriptors (send and recv comm), the ReduceScatter scratch
  // (send comm; grown on demand), and the address 0-byte ops register.
  std::unique_ptr<HostBuffer> slot_mem_, desc_send_mem_, desc_recv_mem_, scratch_, empty_;
  std::unique_ptr<MemReg> slot_reg_, desc_send_reg_, desc_recv_reg_;
  std::unique_ptr<RegCache> work_regs_;  // callers' buffers on the send comm
  std::unique_ptr<RegCache> recv_regs_;  // and on the recv comm (direct_recv)
  static constexpr int kScratchWindow = 16;
  int scratch_uses_ = 0;       // in the current window
  size_t scratch_peak_ = 0;    // the most one use of the current window asked for
  WorkBuffers slots_;
};

}  // namespace trim::coll
