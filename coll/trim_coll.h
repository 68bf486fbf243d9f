/* libtrim-coll: ring collectives over an NCCL net plugin, driven exactly as NCCL's proxy drives it.
 *
 * One communicator = one ring of `nranks` processes. Each rank loads the plugin (dlopen, the
 * ncclNetPlugin_vN table), inits it for this communicator (v11: with the traffic class), loads the
 * profiler plugin from the same library as NCCL does when no other profiler is configured, and
 * connects to rank+1 and accepts from rank-1. Every collective is announced as NCCL announces it
 * (setNetAttr, and the profiler chain Coll -> ProxyOp -> ProxyStep that the plugin classifies each
 * send by), then moved as NCCL's ring SIMPLE protocol moves it: slices of at most 1 MiB, 8 steps in
 * flight per connection, the oldest request tested. So the plugin trims exactly what it would trim
 * under NCCL: float32/bf16/fp16 SUM/AVG in the reduce-scatter half of an AllReduce (and every send
 * of a ReduceScatter); nothing else.
 *
 * Users: the nccl_trim Python package (torch.distributed backend "trim", through ctypes) and
 * trim-harness (the plugin's test driver). Plain C, no NCCL or torch headers.
 *
 * Bootstrap is the caller's: trim_coll_create() returns this rank's listen handle; the caller
 * publishes it (torch's Store, the harness's parent), fetches rank+1's and passes it to
 * trim_coll_connect().
 *
 * Threads: the collectives of one communicator must be called one at a time (the Python backend
 * runs them on one worker thread per process group, in the order they were issued, as NCCL
 * runs a communicator's operations in stream order). trim_coll_abort() may be called from any
 * thread at any time. Different communicators are independent.
 *
 * Errors: every function returns TRIM_COLL_OK (0) or a negative TRIM_COLL_E* code, and
 * trim_coll_last_error() says why (per thread, kept until that thread's next failure). A failure
 * after connect (a dead or disagreeing peer, a deadline, abort) leaves the communicator failed:
 * its connections are closed before the call returns, so the plugin touches no caller memory
 * afterwards, and every later collective fails at once with the first error (TRIM_COLL_EFAILED).
 * Argument errors (TRIM_COLL_EINVAL) are found before anything is sent and leave it usable.
 */
#ifndef TRIM_COLL_H_
#define TRIM_COLL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TRIM_COLL_API __attribute__((visibility("default")))
#else
#define TRIM_COLL_API
#endif

#define TRIM_COLL_ABI_VERSION 1
#define TRIM_COLL_HANDLE_BYTES 128 /* NCCL_NET_HANDLE_MAXSIZE */

enum trim_coll_status {
  TRIM_COLL_OK = 0,
  TRIM_COLL_EINVAL = -1,    /* a bad argument: unsupported dtype/op, null pointer, bad rank */
  TRIM_COLL_EPLUGIN = -2,   /* the plugin cannot be loaded or refused init/listen/connect */
  TRIM_COLL_EREMOTE = -3,   /* a peer died, closed, or the plugin failed a request */
  TRIM_COLL_ETIMEOUT = -4,  /* the call's deadline passed */
  TRIM_COLL_EMISMATCH = -5, /* the ring neighbour called a different collective, size, dtype or op */
  TRIM_COLL_EABORTED = -6,  /* trim_coll_abort() was called */
  TRIM_COLL_EFAILED = -7,   /* the communicator failed earlier; the text is that first error */
};

/* NCCL's element types (torch's bool travels as uint8). */
enum trim_coll_dtype {
  TRIM_COLL_INT8 = 0,
  TRIM_COLL_UINT8 = 1,
  TRIM_COLL_INT32 = 2,
  TRIM_COLL_UINT32 = 3,
  TRIM_COLL_INT64 = 4,
  TRIM_COLL_UINT64 = 5,
  TRIM_COLL_FLOAT16 = 6,
  TRIM_COLL_FLOAT32 = 7,
  TRIM_COLL_FLOAT64 = 8,
  TRIM_COLL_BFLOAT16 = 9,
};

/* NCCL's reduction ops (ncclRedOp_t numbering). AVG divides by nranks as NCCL does: floats are
 * multiplied by 1/nranks before the sum, integers divided (truncating) after it. */
enum trim_coll_op {
  TRIM_COLL_SUM = 0,
  TRIM_COLL_PROD = 1,
  TRIM_COLL_MAX = 2,
  TRIM_COLL_MIN = 3,
  TRIM_COLL_AVG = 4,
};

typedef struct trim_coll_comm trim_coll_comm;

typedef struct {
  int abi_version;         /* TRIM_COLL_ABI_VERSION */
  const char* plugin_path; /* the net plugin to dlopen (libnccl-net-trim.so) */
  int rank;                /* 0 .. nranks-1 */
  int nranks;              /* >= 1; 1 makes every collective a local copy */
  uint64_t comm_id;        /* equal on every rank, like NCCL's commId (the plugin's v11/v12 init gets it) */
  int traffic_class;       /* NCCL's per-communicator net config (v11/v12 init); -1 = unset */
  int net_api;             /* 8..12: which ncclNetPlugin_vN to use; 0 = the newest (12) */
  int profiler;            /* 1: load the profiler from the plugin's library as NCCL does; 0: none
                              (NCCL_PROFILER_PLUGIN=none: then nothing is trimmable) */
  int check_ops;           /* 1: before each collective, tell rank+1 what it is (one exact 48-byte
                              p2p message) and check rank-1's against ours: a mismatch is
                              TRIM_COLL_EMISMATCH instead of a hang or garbage. 0: NCCL's wire
                              pattern exactly (trim-harness). */
  int log_level;           /* plugin log lines to stderr up to this NCCL level: 0 none, 2 WARN, 3 INFO */
  const char* name;        /* prefix of log lines and errors, e.g. "trim pg 0 rank 1" (may be NULL) */
} trim_coll_config;

TRIM_COLL_API int trim_coll_abi_version(void);
TRIM_COLL_API const char* trim_coll_last_error(void);

/* Loads and inits the plugin for this communicator and listens; writes this rank's listen handle
 * (TRIM_COLL_HANDLE_BYTES bytes) to `handle`. */
TRIM_COLL_API int trim_coll_create(const trim_coll_config* config, trim_coll_comm** comm, void* handle);

/* Connects to rank+1 (its handle) and accepts rank-1, within timeout_ms; then the collectives
 * may run. A 1-rank communicator ignores the handle. */
TRIM_COLL_API int trim_coll_connect(trim_coll_comm* comm, const void* next_handle, int64_t timeout_ms);

/* In place: data holds `count` elements on every rank, and the reduction of all ranks' after. */
TRIM_COLL_API int trim_coll_all_reduce(trim_coll_comm* comm, void* data, uint64_t count, int dtype, int op,
                                       int64_t timeout_ms);
/* `bytes` bytes of root's data to every rank's data (root's is not written). */
TRIM_COLL_API int trim_coll_broadcast(trim_coll_comm* comm, void* data, uint64_t bytes, int root, int64_t timeout_ms);
/* out = nranks blocks of bytes_per_rank bytes, block k from rank k. `in` may be out's own block. */
TRIM_COLL_API int trim_coll_all_gather(trim_coll_comm* comm, const void* in, void* out, uint64_t bytes_per_rank,
                                       int64_t timeout_ms);
/* in = nranks blocks of count_per_rank elements; out (count_per_rank elements) = the reduction of
 * every rank's block `rank`. `in` is not written; out must not overlap it. */
TRIM_COLL_API int trim_coll_reduce_scatter(trim_coll_comm* comm, const void* in, void* out, uint64_t count_per_rank,
                                           int dtype, int op, int64_t timeout_ms);
/* Returns once every rank has entered it (an exact 1-byte AllReduce MAX). */
TRIM_COLL_API int trim_coll_barrier(trim_coll_comm* comm, int64_t timeout_ms);

/* Any thread: the collective running now (and every later one) fails with TRIM_COLL_EABORTED,
 * within a millisecond or so, its connections closed. */
TRIM_COLL_API int trim_coll_abort(trim_coll_comm* comm);
/* Closes the connections (after the last collective has returned), finalizes the plugin's
 * context and frees the communicator; returns the first error of the teardown. */
TRIM_COLL_API int trim_coll_destroy(trim_coll_comm* comm);

/* The plugin's process-wide counters (ncclTrimStatsJson): JSON, NUL-terminated. Returns the
 * length, or a negative code (EINVAL when cap is too small or the plugin has no such export). */
TRIM_COLL_API int trim_coll_stats_json(trim_coll_comm* comm, char* buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* TRIM_COLL_H_ */
