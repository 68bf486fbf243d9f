// trim::net before the transport exists: init refuses (so NCCL falls back to its own transports,
// or fails loudly under NCCL_NET=Trim) and every other call reports that nothing is initialized.
// Arguments are still checked first, so the plugin's error mapping is exercised as it will be.
#include "transport/net_api.h"

#include <string>

namespace trim::net {

// Minimal endpoint types so the Comm narrowing below is real code; the transport replaces them.
class Comm {
 public:
  enum class Kind { kSend, kRecv };
  explicit Comm(Kind kind) : kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

class SendComm final : public Comm {
 public:
  SendComm() : Comm(Kind::kSend) {}
};

class RecvComm final : public Comm {
 public:
  RecvComm() : Comm(Kind::kRecv) {}
};

namespace {

constexpr const char* kNotImplemented =
    "nccl-trim transport is not implemented yet (see issue: transport and NCCL plugin)";

Status not_initialized(const char* call) {
  return Status(Code::kUnavailable, std::string(call) + ": nccl-trim transport is not initialized");
}

Status null_argument(const char* call, const char* what) {
  return Status(Code::kInvalidArgument, std::string(call) + ": " + what + " is null");
}

}  // namespace

Result<Context*> init(const InitOptions& options) {
  (void)options;  // nothing to configure until the transport exists
  return Status(Code::kUnavailable, kNotImplemented);
}

Status finalize(Context* ctx) {
  if (ctx == nullptr) return null_argument("finalize", "context");
  return not_initialized("finalize");
}

Result<int> device_count() { return not_initialized("devices"); }

Result<DeviceProps> device_props(int dev) {
  if (dev < 0) return Status(Code::kInvalidArgument, "device_props: device " + std::to_string(dev) + " < 0");
  return not_initialized("device_props");
}

Result<ListenComm*> listen(Context* ctx, int dev, void* handle_out, size_t handle_capacity) {
  if (ctx == nullptr) return null_argument("listen", "context");
  if (handle_out == nullptr) return null_argument("listen", "handle");
  if (handle_capacity == 0 || handle_capacity > kMaxHandleBytes) {
    return Status(Code::kInvalidArgument, "listen: handle capacity must be in [1, 128] bytes");
  }
  (void)dev;
  return not_initialized("listen");
}

Result<SendComm*> connect(Context* ctx, int dev, const void* handle, const ConnectOptions& options) {
  if (ctx == nullptr) return null_argument("connect", "context");
  if (handle == nullptr) return null_argument("connect", "handle");
  (void)dev;
  (void)options;
  return not_initialized("connect");
}

Result<RecvComm*> accept(ListenComm* listen) {
  if (listen == nullptr) return null_argument("accept", "listen comm");
  return not_initialized("accept");
}

Comm* as_comm(SendComm* comm) { return comm; }
Comm* as_comm(RecvComm* comm) { return comm; }

SendComm* as_send(Comm* comm) {
  return comm != nullptr && comm->kind() == Comm::Kind::kSend ? static_cast<SendComm*>(comm) : nullptr;
}

RecvComm* as_recv(Comm* comm) {
  return comm != nullptr && comm->kind() == Comm::Kind::kRecv ? static_cast<RecvComm*>(comm) : nullptr;
}

Result<MemHandle*> reg_mr(Comm* comm, const MemRegion& region) {
  if (comm == nullptr) return null_argument("reg_mr", "comm");
  if (region.data == nullptr && region.bytes != 0) return null_argument("reg_mr", "data");
  return not_initialized("reg_mr");
}

Status dereg_mr(Comm* comm, MemHandle* mem) {
  if (comm == nullptr) return null_argument("dereg_mr", "comm");
  if (mem == nullptr) return null_argument("dereg_mr", "memory handle");
  return not_initialized("dereg_mr");
}

Result<Request*> isend(SendComm* comm, const void* data, size_t bytes, int tag, MemHandle* mem,
                       void* profiler_op) {
  if (comm == nullptr) return null_argument("isend", "comm");
  if (data == nullptr && bytes != 0) return null_argument("isend", "data");
  (void)tag;
  (void)mem;
  (void)profiler_op;
  return not_initialized("isend");
}

namespace {

Status check_buffers(const char* call, int n, const RecvBuffer* buffers) {
  if (n < 1 || n > kMaxRecvs) {
    return Status(Code::kInvalidArgument,
                  std::string(call) + ": " + std::to_string(n) + " buffers, expected 1 to " +
                      std::to_string(kMaxRecvs));
  }
  if (buffers == nullptr) return null_argument(call, "buffers");
  return Status::ok();
}

}  // namespace

Result<Request*> irecv(RecvComm* comm, int n, const RecvBuffer* buffers, bool completion_optional) {
  (void)completion_optional;
  if (comm == nullptr) return null_argument("irecv", "comm");
  TRIM_RETURN_IF_ERROR(check_buffers("irecv", n, buffers));
  return not_initialized("irecv");
}

Result<Request*> iflush(RecvComm* comm, int n, const RecvBuffer* buffers) {
  if (comm == nullptr) return null_argument("iflush", "comm");
  TRIM_RETURN_IF_ERROR(check_buffers("iflush", n, buffers));
  return not_initialized("iflush");
}

Status test(Request* request, Completion* out) {
  if (request == nullptr) return null_argument("test", "request");
  if (out == nullptr) return null_argument("test", "completion");
  return not_initialized("test");
}

Status set_op_attr(Context* ctx, const OpAttr& attr) {
  if (ctx == nullptr) return null_argument("set_op_attr", "context");
  (void)attr;
  return not_initialized("set_op_attr");
}

Status close_send(SendComm* comm) {
  if (comm == nullptr) return null_argument("close_send", "comm");
  return not_initialized("close_send");
}

Status close_recv(RecvComm* comm) {
  if (comm == nullptr) return null_argument("close_recv", "comm");
  return not_initialized("close_recv");
}

Status close_listen(ListenComm* listen) {
  if (listen == nullptr) return null_argument("close_listen", "listen comm");
  return not_initialized("close_listen");
}

}  // namespace trim::net
