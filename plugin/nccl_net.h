// The NCCL network-plugin ABI, versions v8 to v12, declared by us from the facts of NVIDIA's
// headers (NVIDIA/nccl tag v2.28.9-1: ext-net/example/nccl/{err,common,net,net_device,
// net_v8,net_v9,net_v10,net_v11}.h; unchanged in v2.29.7-1 and v2.30.7-1; v12 from tag
// v2.30.7-1: plugins/net/example/nccl/net_v12.h and net_device.h, which NCCL 2.30 probes first).
// Only plugin/ (and the plugin's tests) may include this: the rest of the project speaks
// trim::net.
//
// Field order and types are the ABI: NCCL reads these structs through its own definitions, so
// every member below must stay exactly where it is. The static_asserts at the end pin the
// layout on LP64 so an accidental edit fails the build instead of corrupting NCCL's view.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---- Results and logging (common to all versions) ----

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
} ncclResult_t;

typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5,
} ncclDebugLogLevel;

// Subsystem bits of a log line's `flags`; NCCL_DEBUG_SUBSYS filters on them. Only the ones the
// plugin uses are named.
enum {
  NCCL_INIT = 0x1,
  NCCL_NET = 0x10,
  NCCL_ENV = 0x80,
};

// printf-style logger NCCL passes to init.
typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file,
                                  int line, const char* fmt, ...);

// `type` values of the profiler callback (v10+).
enum {
  ncclProfilerNetEventStart = 0,
  ncclProfilerNetEventStop = 1,
  ncclProfilerNetEventUpdate = 2,
  ncclProfilerNetEventUpdateAndStop = 3,
};

// Profiler callback NCCL passes to init (v10+): eHandle in/out, pHandle from isend/irecv.
typedef ncclResult_t (*ncclProfilerCallback_t)(void** eHandle, int type, void* pHandle,
                                               int64_t pluginId, void* extData);

// ---- Constants ----

#define NCCL_NET_HANDLE_MAXSIZE 128
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4
#define NCCL_NET_MAX_REQUESTS 32
#define NCCL_NET_MAX_DEVS_PER_NIC 4  // v9-v11 virtual NICs
#define NCCL_NET_MAX_DEVS_PER_NIC_V12 8
// railId / planeId (v12) when the plugin does not know them: NCCL then ignores the field.
#define NCCL_NET_ID_UNDEF (-1)
// maxP2pBytes / maxCollBytes above this make NCCL refuse the device (1 TiB).
#define NCCL_MAX_NET_SIZE_BYTES (1024LL * 1024 * 1024 * 1024)
// Value NCCL stores in *request before an LL/LL128 irecv: completion is optional.
#define NCCL_NET_OPTIONAL_RECV_COMPLETION 0x1
#define NCCL_NET_TRAFFIC_CLASS_UNDEF (-1)

// ---- Device offload (we only ever report HOST) ----

typedef enum {
  NCCL_NET_DEVICE_HOST = 0,
  NCCL_NET_DEVICE_UNPACK = 1,
} ncclNetDeviceType;

#define NCCL_NET_DEVICE_INVALID_VERSION 0x0

typedef struct {
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v8_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v9_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v10_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v11_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v12_t;
typedef ncclNetDeviceHandle_v12_t ncclNetDeviceHandle;

// ---- Virtual NICs (v9+; identical layout in v9, v10, v11) ----

typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC];
} ncclNetVDeviceProps_v9_t;
typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v10_t;
typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v11_t;

// v12 doubles the members a virtual NIC may have (8): the struct, and so every properties field
// after vProps, moves.
typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V12];
} ncclNetVDeviceProps_v12_t;
typedef ncclNetVDeviceProps_v12_t ncclNetVDeviceProps;

// ---- Per-communicator configuration (v10: connect's argument; v11, v12: init's argument) ----

typedef struct {
  int trafficClass;  // NCCL_NET_TRAFFIC_CLASS_UNDEF when the user set none
} ncclNetCommConfig_v10_t;
typedef ncclNetCommConfig_v10_t ncclNetCommConfig_v11_t;
// NCCL declares v12's as its own struct with the same single member (it casts one to the other).
typedef ncclNetCommConfig_v10_t ncclNetCommConfig_v12_t;

// ---- Properties ----

typedef struct {
  char* name;
  char* pciPath;  // sysfs path of the NIC; NULL = virtual NIC on the CPU
  uint64_t guid;  // same guid = same physical port
  int ptrSupport;  // NCCL_PTR_* bits
  int regIsGlobal;
  int speed;  // Mbps
  int port;
  float latency;  // microseconds
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v8_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v9_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
} ncclNetProperties_v9_t;

// v10 did not change the properties.
typedef ncclNetProperties_v9_t ncclNetProperties_v10_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v11_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;  // requests one multi-request may hold
} ncclNetProperties_v11_t;

// v12: the wider vProps, then the NIC's rail and plane (NCCL_NET_ID_UNDEF = unknown). NCCL
// 2.30 keeps a ring's entry and exit NIC on one rail (NCCL_CROSS_NIC=0) and never pairs NICs of
// two different planes; it fills both with NCCL_NET_ID_UNDEF for v11 and older plugins.
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v12_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;
  int16_t planeId;
} ncclNetProperties_v12_t;

// ---- v11 operation hints (setNetAttr) ----

typedef struct {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
} ncclNetCommAttr_v11_t;

typedef struct {
  ncclNetCommAttr_v11_t sendCommAttr;
  ncclNetCommAttr_v11_t recvCommAttr;
  uint32_t op;     // 1 << ncclFunc_t (all ones = undefined)
  uint32_t algo;   // 1 << NCCL_ALGO_* (stale for p2p ops)
  uint32_t proto;  // 1 << NCCL_PROTO_* (stale for p2p ops)
} ncclNetAttr_v11_t;
// NCCL declares v12's as its own structs with the same members (it casts one to the other).
typedef ncclNetCommAttr_v11_t ncclNetCommAttr_v12_t;
typedef ncclNetAttr_v11_t ncclNetAttr_v12_t;

// ---- The plugin tables. Every version lists the same calls in the same order; the
// differences are the size types and the extra arguments noted per version. ----

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v8_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
} ncclNet_v8_t;

// v9: size_t send/recv sizes (iflush and test keep int), makeVDevice.
typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v9_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v9_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v9_t* props);
} ncclNet_v9_t;

// v10: init gains the profiler callback, connect a config, isend/irecv profiler handles.
typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v10_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v10_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v10_t* props);
} ncclNet_v10_t;

// v11: init per communicator returning a context (the config moves from connect to init),
// listen/connect take the context, finalize and setNetAttr are added.
typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config,
                       ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v11_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v11_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v11_t* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_v11_t* netAttr);
} ncclNet_v11_t;

// v12: v11's slots in v11's order; only getProperties (railId, planeId, wider vProps) and
// makeVDevice (wider vProps) take new types. Config, attributes and device handles keep v11's
// layout.
typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclNetCommConfig_v12_t* config,
                       ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v12_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v12_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v12_t* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_v12_t* netAttr);
} ncclNet_v12_t;

#ifdef __cplusplus
}  // extern "C"
#endif

// Layout pins (LP64), checked field by field against NVIDIA's v2.28.9-1 headers (v12: v2.30.7-1)
// when written.
// They guard against edits to this file; NCCL's headers stay the source of the member lists.
#if defined(__cplusplus) && defined(__LP64__)
static_assert(sizeof(ncclResult_t) == 4, "ncclResult_t must be int-sized");
static_assert(sizeof(ncclNetDeviceType) == 4, "ncclNetDeviceType must be int-sized");
static_assert(sizeof(ncclNetDeviceHandle_v8_t) == 32, "device handle layout");
static_assert(sizeof(ncclNetVDeviceProps_v9_t) == 20, "vProps layout");
static_assert(offsetof(ncclNetProperties_v8_t, guid) == 16, "v8 props layout");
static_assert(offsetof(ncclNetProperties_v8_t, latency) == 40, "v8 props layout");
static_assert(offsetof(ncclNetProperties_v8_t, netDeviceVersion) == 56, "v8 props layout");
static_assert(sizeof(ncclNetProperties_v8_t) == 64, "v8 props layout");
static_assert(offsetof(ncclNetProperties_v9_t, speed) == 36, "v9 props layout");
static_assert(offsetof(ncclNetProperties_v9_t, vProps) == 64, "v9 props layout");
static_assert(offsetof(ncclNetProperties_v9_t, maxP2pBytes) == 88, "v9 props layout");
static_assert(sizeof(ncclNetProperties_v9_t) == 104, "v9 props layout");
static_assert(offsetof(ncclNetProperties_v11_t, maxMultiRequestSize) == 104, "v11 props layout");
static_assert(sizeof(ncclNetProperties_v11_t) == 112, "v11 props layout");
static_assert(sizeof(ncclNetAttr_v11_t) == 44, "v11 net attr layout");
static_assert(sizeof(ncclNet_v8_t) == 19 * sizeof(void*), "v8 table: name + 18 calls");
static_assert(sizeof(ncclNet_v9_t) == 20 * sizeof(void*), "v9 table: name + 19 calls");
static_assert(sizeof(ncclNet_v10_t) == 20 * sizeof(void*), "v10 table: name + 19 calls");
static_assert(sizeof(ncclNet_v11_t) == 22 * sizeof(void*), "v11 table: name + 21 calls");
static_assert(sizeof(ncclNetVDeviceProps_v12_t) == 36, "v12 vProps layout");
static_assert(offsetof(ncclNetProperties_v12_t, vProps) == 64, "v12 props layout");
static_assert(offsetof(ncclNetProperties_v12_t, maxP2pBytes) == 104, "v12 props layout");
static_assert(offsetof(ncclNetProperties_v12_t, maxCollBytes) == 112, "v12 props layout");
static_assert(offsetof(ncclNetProperties_v12_t, maxMultiRequestSize) == 120, "v12 props layout");
static_assert(offsetof(ncclNetProperties_v12_t, railId) == 124, "v12 props layout");
static_assert(offsetof(ncclNetProperties_v12_t, planeId) == 126, "v12 props layout");
static_assert(sizeof(ncclNetProperties_v12_t) == 128, "v12 props layout");
static_assert(sizeof(ncclNetAttr_v12_t) == 44, "v12 net attr layout");
static_assert(sizeof(ncclNet_v12_t) == 22 * sizeof(void*), "v12 table: name + 21 calls");
static_assert(offsetof(ncclNet_v12_t, makeVDevice) == offsetof(ncclNet_v11_t, makeVDevice) &&
                  offsetof(ncclNet_v12_t, setNetAttr) == offsetof(ncclNet_v11_t, setNetAttr),
              "v12 keeps v11's slot order");
#endif
