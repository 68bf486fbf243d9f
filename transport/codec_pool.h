// The codec worker pool: encode and decode of trimmable messages run on these threads, a task
// per chunk of rows, so the progress engine only moves packets and one message's rows are
// coded in parallel. The engine thread hands a message's tasks over through a bounded
// lock-free queue (Vyukov's MPMC ring) and never waits: it polls each task's completion flag,
// and a worker that finishes a task wakes the engine (an eventfd write only while it sleeps).
// When the queue is full the task runs on the engine's thread instead (counted).
//
// Lifetimes: a CodecWork is shared (shared_ptr) by its message and its queued tasks, so a
// message that fails or is abandoned while tasks run leaves them valid memory to finish in.
// The message's own buffers (NCCL's) are another matter: every task also counts itself in
// its connection's `in_flight` counter, and close and deregMr wait for it to reach zero before
// NCCL may free them, however long that takes (NCCL frees them as soon as we return). A work
// whose message is abandoned (failed, closed) is cancelled first, so that its tasks stop at the
// next row and queued ones never touch NCCL's buffers: the wait is then short.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codec/combine.h"
#include "codec/layout.h"
#include "codec/packet.h"

namespace trim::transport {

// What a worker pokes when it finishes a task (the engine), so the engine need not poll.
class Waker {
 public:
  virtual ~Waker() = default;
  virtual void wake() = 0;
};

// Tasks of one connection half still queued or running (close and deregMr wait for zero).
using InFlight = std::atomic<uint32_t>;

// One message's work on the pool. The engine fills it, then submits tasks 0..tasks-1; task t
// covers rows [t * rows_per_task, min(rows, (t + 1) * rows_per_task)). Workers write only the
// packets/sizes (encode) or the message (decode) of their own rows, then publish `state[t]`.
struct CodecWork {
  enum class Kind : uint8_t { kEncode, kDecode };
  enum State : uint8_t { kPending = 0, kDone = 1, kFailed = 2 };

  Kind kind = Kind::kEncode;
  codec::CodecConfig cfg;
  codec::Layout layout;
  codec::MessageId id;
  const uint8_t* src = nullptr;  // encode: the message (NCCL's buffer, or src_copy)
  // encode with error feedback: the message plus the residual of its buffer's last trims. Here
  // so that it lives as long as the tasks that read it, even past an abandoned message.
  std::vector<float> src_copy;
  uint8_t* dst = nullptr;        // decode: the message (NCCL's buffer)
  // decode: combine into dst (Decoder::begin_combine) instead of storing.
  bool combine = false;
  codec::RedType combine_type = codec::RedType::kF32;
  codec::RedOp combine_op = codec::RedOp::kSum;
  size_t stride = 0;             // bytes per packet slot in `packets`
  // encode: the packets, slot j at j * stride, and their sizes. decode: the payloads that
  // arrived (slot j's at j * stride) and, per slot, the parsed packet with its payload pointer
  // into `packets` (null: nothing arrived).
  std::vector<uint8_t> packets;
  std::vector<uint32_t> sizes;
  std::vector<codec::ParsedPacket> parsed;
  std::vector<uint32_t> row_first;  // first slot of each row, then the total
  uint32_t rows_per_task = 1;
  uint32_t tasks = 0;
  std::unique_ptr<std::atomic<uint8_t>[]> state;  // per task
  std::vector<std::string> errors;                // per task, written before state = kFailed
  std::atomic<uint32_t> tasks_left{0};
  // Set when the message is abandoned: tasks not started skip their rows, running ones stop at
  // the next row or packet (and fail). Never cleared while a task of this work may run.
  std::atomic<bool> cancelled{false};
  Waker* waker = nullptr;
  std::shared_ptr<InFlight> in_flight;

  // Sets the work up for one message: its rows' first slots, its tasks (rows_per_task(layout)
  // each), whom to wake and count. The caller then fills src/dst and the buffers.
  void prepare(Kind k, const codec::CodecConfig& c, const codec::Layout& l, const codec::MessageId& m, Waker* w,
               std::shared_ptr<InFlight> count);
  // Sizes the per-task state (reusing what is allocated) and clears it.
  void reset_tasks(uint32_t rows_per_task_, uint32_t n_tasks);
  uint32_t task_of_row(uint32_t r) const { return r / rows_per_task; }
  uint32_t first_row(uint32_t t) const { return t * rows_per_task; }
  uint32_t end_row(uint32_t t) const;
  uint8_t task_state(uint32_t t) const { return state[t].load(std::memory_order_acquire); }
  bool all_done() const { return tasks_left.load(std::memory_order_acquire) == 0; }
  // Abandons the work's unfinished tasks (see `cancelled`); harmless once every task is done.
  void cancel() { cancelled.store(true, std::memory_order_relaxed); }
  bool is_cancelled() const { return cancelled.load(std::memory_order_relaxed); }
  // The first failure among finished tasks ("" when none).
  std::string first_error() const;
};

// Rows per task: about 128 KiB of elements (one 2^15 fp32 row), so a 1 MiB slice of NCCL's
// ring is eight tasks that run in parallel, and a task is long enough (tens of us) that the
// hand-over costs little.
uint32_t rows_per_task(const codec::Layout& layout);

// Runs task t of w on the calling thread (a worker, or the engine when the queue is full).
void run_codec_task(CodecWork* w, uint32_t t);

// A connection half's finished works, kept so a new message reuses their buffers' capacity.
class SpareWork {
 public:
  // A spare work, or a new one.
  std::shared_ptr<CodecWork> take();
  // Keeps *w (and clears it) when nothing else holds it any more; a worker that has just
  // finished its task may still, for a moment: then it is simply freed.
  void give_back(std::shared_ptr<CodecWork>* w);

 private:
  std::vector<std::shared_ptr<CodecWork>> spare_;
};

class CodecPool {
 public:
  // The process's pool, grown to at least `threads` workers (never shrinks; never destroyed:
  // engine threads may outlive static destructors).
  static CodecPool* instance(int threads);
  // NCCL_TRIM_CODEC_THREADS=auto: a quarter of the CPUs this process may run on, at most 8
  // (0, the engine's thread, below 4 CPUs).
  static int auto_threads();

  // Queues task t of w; never blocks. When the queue is full the task runs here, at once.
  // Returns false in that case (for the counters).
  bool submit(const std::shared_ptr<CodecWork>& w, uint32_t t);
  int threads() const;

  // Tasks run by workers / on the submitting thread since the process started, and of those
  // the ones that found their work cancelled (they stopped early or never started; counted
  // before the task leaves its connection's in_flight, so a close that returned sees them).
  uint64_t tasks_run() const;
  uint64_t tasks_inline() const;
  uint64_t tasks_cancelled() const;

  struct Impl;

 private:
  CodecPool();
  Impl* impl_;
};

// Codec tasks, in this process, that found their work cancelled (CodecPool::tasks_cancelled
// without a pool at hand; the plugin's statistics report it).
uint64_t codec_tasks_cancelled();

namespace testing {
// Test only (tests/stalled_workers.h): called at the start of every codec task, before it
// looks at `cancelled`, so a test can stall a worker; null (the default) calls nothing.
using TaskHook = void (*)(const CodecWork& w, uint32_t t);
void set_task_hook(TaskHook hook);
// Test only (NCCL_TRIM_TEST_CODEC_STALL_MS, for runs that load the plugin as NCCL does and cannot
// reach the hook above): every codec task first waits up to `ms` milliseconds, or until its work
// is cancelled, so close and abort find tasks in flight. 0 (the default): no wait.
void set_stall_ms(uint32_t ms);
}  // namespace testing

}  // namespace trim::transport
