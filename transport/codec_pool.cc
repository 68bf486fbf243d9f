#include "transport/codec_pool.h"

#include <pthread.h>
#include <sched.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "codec/decoder.h"
#include "codec/encoder.h"
#include "common/log.h"

namespace trim::transport {

// ---- CodecWork ----

void CodecWork::prepare(Kind k, const codec::CodecConfig& c, const codec::Layout& l, const codec::MessageId& m,
                        Waker* w, std::shared_ptr<InFlight> count) {
  kind = k;
  combine = false;
  cfg = c;
  layout = l;
  id = m;
  stride = c.packet_bytes;
  l.row_first_packets(&row_first);
  const uint32_t rpt = transport::rows_per_task(l);  // (the member of the same name is the result)
  reset_tasks(rpt, (l.rows() + rpt - 1) / rpt);
  waker = w;
  in_flight = std::move(count);
}

void CodecWork::reset_tasks(uint32_t rows_per_task_, uint32_t n_tasks) {
  rows_per_task = rows_per_task_;
  if (n_tasks > tasks || !state) state = std::make_unique<std::atomic<uint8_t>[]>(n_tasks);
  tasks = n_tasks;
  for (uint32_t t = 0; t < tasks; ++t) state[t].store(kPending, std::memory_order_relaxed);
  errors.assign(tasks, std::string());
  cancelled.store(false, std::memory_order_relaxed);  // no task of the old message holds it (SpareWork)
  tasks_left.store(tasks, std::memory_order_release);
}

uint32_t CodecWork::end_row(uint32_t t) const { return std::min(layout.rows(), (t + 1) * rows_per_task); }

std::string CodecWork::first_error() const {
  for (uint32_t t = 0; t < tasks; ++t) {
    if (task_state(t) == kFailed) return errors[t];
  }
  return "";
}

std::shared_ptr<CodecWork> SpareWork::take() {
  if (spare_.empty()) return std::make_shared<CodecWork>();
  std::shared_ptr<CodecWork> w = std::move(spare_.back());
  spare_.pop_back();
  return w;
}

void SpareWork::give_back(std::shared_ptr<CodecWork>* w) {
  constexpr size_t kKeep = 4;  // a connection has a few messages of one size in flight
  if (*w && w->use_count() == 1 && spare_.size() < kKeep) spare_.push_back(std::move(*w));
  w->reset();
}

uint32_t rows_per_task(const codec::Layout& layout) {
  constexpr uint64_t kTaskBytes = 128 * 1024;
  const uint64_t row_bytes =
      std::max<uint64_t>(1, static_cast<uint64_t>(layout.row_elems()) * codec::dtype_bytes(layout.dtype()));
  return static_cast<uint32_t>(std::max<uint64_t>(1, kTaskBytes / row_bytes));
}

namespace {

// Each thread keeps one encoder and one decoder and points them at the task's connection
// (configs differ only in their seed, keyed by the connection): their row scratch is reused.
codec::Encoder& thread_encoder(const codec::CodecConfig& cfg) {
  thread_local codec::Encoder enc{cfg};
  enc.set_config(cfg);
  return enc;
}

codec::Decoder& thread_decoder(const codec::CodecConfig& cfg) {
  thread_local codec::Decoder dec{cfg};
  dec.set_config(cfg);
  return dec;
}

constexpr const char* kCancelled = "cancelled (the message was abandoned)";

std::atomic<testing::TaskHook> task_hook{nullptr};
// Tasks that found their work cancelled (counted before they let close go: see tasks_cancelled).
std::atomic<uint64_t> cancelled_tasks{0};

// Encode reads NCCL's buffer (src) and decode writes it (dst): both look at `cancelled` before
// each row or packet, so an abandoned message's buffer is soon left alone. Close and deregMr
// still wait for the task to end (a check can race with the cancel).
std::string encode_rows(CodecWork* w, uint32_t first, uint32_t end) {
  codec::Encoder& enc = thread_encoder(w->cfg);
  for (uint32_t r = first; r < end; ++r) {
    if (w->is_cancelled()) return kCancelled;
    const size_t slot = w->row_first[r];
    Result<uint32_t> n = enc.encode_row(w->layout, w->id, w->src, r, w->packets.data() + slot * w->stride, w->stride,
                                        w->sizes.data() + slot);
    if (!n) return n.status().message();
  }
  return "";
}

std::string decode_rows(CodecWork* w, uint32_t first, uint32_t end) {
  codec::Decoder& dec = thread_decoder(w->cfg);
  Status st = w->combine ? dec.begin_combine(w->layout, w->id, w->dst, w->combine_type, w->combine_op)
                         : dec.begin(w->layout, w->id, w->dst);
  if (!st.is_ok()) return st.message();
  for (uint32_t s = w->row_first[first]; s < w->row_first[end]; ++s) {
    const codec::ParsedPacket& p = w->parsed[s];
    if (p.payload == nullptr) continue;  // never arrived: finish_row estimates it
    if (w->is_cancelled()) return kCancelled;
    const codec::PacketError e = dec.add(p);
    // Every packet here was admitted by the engine's decoder with the same checks.
    if (e != codec::PacketError::kOk) return fmt::format("slot {}: {}", s, codec::packet_error_name(e));
  }
  for (uint32_t r = first; r < end; ++r) {
    if (w->is_cancelled()) return kCancelled;
    dec.finish_row(r);
  }
  return "";
}

std::atomic<uint32_t> stall_ms{0};

// NCCL_TRIM_TEST_CODEC_STALL_MS: a slow worker, as a test sees it from outside the process.
void stall(const CodecWork* w, uint32_t ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!w->is_cancelled() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

}  // namespace

void run_codec_task(CodecWork* w, uint32_t t) {
  if (testing::TaskHook hook = task_hook.load(std::memory_order_acquire)) hook(*w, t);
  if (const uint32_t ms = stall_ms.load(std::memory_order_relaxed)) stall(w, ms);
  const uint32_t first = w->first_row(t), end = w->end_row(t);
  std::string err;
  if (w->is_cancelled()) {
    err = kCancelled;
  } else {
    err = w->kind == CodecWork::Kind::kEncode ? encode_rows(w, first, end) : decode_rows(w, first, end);
  }
  if (!err.empty() && err == kCancelled) cancelled_tasks.fetch_add(1, std::memory_order_relaxed);
  // Read now what is needed after publishing: once the engine has seen this task done (the
  // release below), it may reuse *w for its next message (SpareWork) as soon as the caller
  // drops its reference, so later reads of w's plain fields would race with its writes.
  Waker* const waker = w->waker;
  const bool wake = waker != nullptr && w->kind == CodecWork::Kind::kEncode;
  InFlight* const in_flight = w->in_flight.get();  // the connection's: outlives the task (close waits)
  const bool failed = !err.empty();
  if (failed) w->errors[t] = std::move(err);
  w->state[t].store(failed ? CodecWork::kFailed : CodecWork::kDone, std::memory_order_release);
  const uint32_t left = w->tasks_left.fetch_sub(1, std::memory_order_acq_rel) - 1;
  // The engine sends an encoded packet as soon as its rows' task is done, so every encode task
  // wakes it; a receive completes only with its last task.
  if (wake || (waker != nullptr && left == 0)) waker->wake();
  // Last: once the connection's count is zero, close may free what the waker and the message
  // buffers belong to.
  if (in_flight != nullptr) in_flight->fetch_sub(1, std::memory_order_acq_rel);
}

void testing::set_task_hook(testing::TaskHook hook) { task_hook.store(hook, std::memory_order_release); }
void testing::set_stall_ms(uint32_t ms) { stall_ms.store(ms, std::memory_order_relaxed); }
uint64_t codec_tasks_cancelled() { return cancelled_tasks.load(); }

// ---- The pool ----

struct CodecPool::Impl {
  // Vyukov's bounded MPMC queue: each cell's sequence number says whether it is free for the
  // producer at position pos (seq == pos) or holds an item for the consumer (seq == pos + 1).
  struct Cell {
    std::atomic<uint64_t> seq{0};
    std::shared_ptr<CodecWork> work;
    uint32_t task = 0;
  };
  static constexpr uint64_t kCells = 4096;  // 32 messages x 8 tasks on 16 connections
  std::unique_ptr<Cell[]> cells{new Cell[kCells]};
  alignas(64) std::atomic<uint64_t> head{0};  // next to pop
  alignas(64) std::atomic<uint64_t> tail{0};  // next to push

  std::mutex mu;  // only for sleeping workers and growing the pool
  std::condition_variable cv;
  std::atomic<int> sleepers{0};
  std::atomic<int> workers{0};
  std::atomic<uint64_t> run{0}, inline_run{0};

  Impl() {
    for (uint64_t i = 0; i < kCells; ++i) cells[i].seq.store(i, std::memory_order_relaxed);
  }

  bool push(const std::shared_ptr<CodecWork>& w, uint32_t t) {
    uint64_t pos = tail.load(std::memory_order_relaxed);
    for (;;) {
      Cell& c = cells[pos % kCells];
      const uint64_t seq = c.seq.load(std::memory_order_acquire);
      const int64_t diff = static_cast<int64_t>(seq) - static_cast<int64_t>(pos);
      if (diff == 0) {
        // seq_cst, not relaxed: with submit()'s seq_cst read of `sleepers` and the worker's
        // seq_cst increment of it then read of `tail` (maybe_nonempty), all four are in one total
        // order, so either the submitter sees the sleeper or the sleeper sees this push. A
        // relaxed CAS may be reordered after the `sleepers` read (aarch64, POWER): a lost
        // wake-up. (Free on x86, where a locked CAS is a full barrier anyway.) Fences would do
        // too, but ThreadSanitizer does not model them.
        if (tail.compare_exchange_weak(pos, pos + 1, std::memory_order_seq_cst, std::memory_order_relaxed)) {
          c.work = w;
          c.task = t;
          c.seq.store(pos + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;  // full
      } else {
        pos = tail.load(std::memory_order_relaxed);
      }
    }
  }

  bool pop(std::shared_ptr<CodecWork>* w, uint32_t* t) {
    uint64_t pos = head.load(std::memory_order_relaxed);
    for (;;) {
      Cell& c = cells[pos % kCells];
      const uint64_t seq = c.seq.load(std::memory_order_acquire);
      const int64_t diff = static_cast<int64_t>(seq) - static_cast<int64_t>(pos + 1);
      if (diff == 0) {
        if (head.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          *w = std::move(c.work);
          *t = c.task;
          c.seq.store(pos + kCells, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;  // empty
      } else {
        pos = head.load(std::memory_order_relaxed);
      }
    }
  }

  bool maybe_nonempty() const {
    return tail.load(std::memory_order_seq_cst) != head.load(std::memory_order_seq_cst);
  }

  void worker() {
    std::shared_ptr<CodecWork> w;
    uint32_t t = 0;
    for (;;) {
      // Spin briefly (a few us) before sleeping: a message's tasks arrive together, so a worker
      // that ran out usually finds the next at once; a longer spin only burns a core the engine
      // may need.
      bool got = false;
      for (int i = 0; i < 256 && !(got = pop(&w, &t)); ++i) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
      }
      if (got) {
        run.fetch_add(1, std::memory_order_relaxed);
        run_codec_task(w.get(), t);
        w.reset();
        continue;
      }
      // Register as a sleeper, then re-check the queue (seq_cst both: see push); a submitter
      // that pushed before the re-check is seen by it, one that pushes after it sees the
      // sleeper and notifies under `mu`, which this thread holds until it waits.
      std::unique_lock<std::mutex> lock(mu);
      sleepers.fetch_add(1, std::memory_order_seq_cst);
      cv.wait(lock, [this] { return maybe_nonempty(); });
      sleepers.fetch_sub(1, std::memory_order_seq_cst);
    }
  }

  void grow(int n) {
    std::lock_guard<std::mutex> lock(mu);
    while (workers.load() < n) {
      std::thread([this] {
        pthread_setname_np(pthread_self(), "trim-codec");
        worker();
      }).detach();  // lives as long as the process
      workers.fetch_add(1);
    }
  }
};

CodecPool::CodecPool() : impl_(new Impl()) {}

CodecPool* CodecPool::instance(int threads) {
  static CodecPool* pool = new CodecPool();  // never destroyed: see the header
  if (pool->impl_->workers.load() < threads) {
    pool->impl_->grow(threads);
    TRIM_INFO("NET/Trim: codec pool of {} worker threads", pool->impl_->workers.load());
  }
  return pool;
}

int CodecPool::auto_threads() {
  cpu_set_t set;
  int cpus = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = CPU_COUNT(&set);
  if (cpus <= 0) cpus = static_cast<int>(std::thread::hardware_concurrency());
  // Below 4 CPUs the workers would only compete with the engine and NCCL's threads.
  return std::clamp(cpus / 4, 0, 8);
}

bool CodecPool::submit(const std::shared_ptr<CodecWork>& w, uint32_t t) {
  if (w->in_flight) w->in_flight->fetch_add(1, std::memory_order_acq_rel);
  if (!impl_->push(w, t)) {
    impl_->inline_run.fetch_add(1, std::memory_order_relaxed);
    run_codec_task(w.get(), t);
    return false;
  }
  // seq_cst, after push's seq_cst CAS: see push.
  if (impl_->sleepers.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->cv.notify_one();
  }
  return true;
}

int CodecPool::threads() const { return impl_->workers.load(); }
uint64_t CodecPool::tasks_run() const { return impl_->run.load(); }
uint64_t CodecPool::tasks_inline() const { return impl_->inline_run.load(); }
uint64_t CodecPool::tasks_cancelled() const { return cancelled_tasks.load(); }

}  // namespace trim::transport
