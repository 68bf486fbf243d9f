#include "tools/harness/bootstrap.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

namespace trim::harness {

namespace {

constexpr size_t kHeaderBytes = 8;            // type (u32) + length (u32), host order
constexpr size_t kMaxFrameBytes = 64u << 20;  // far above any real frame; catches garbage

void put_u32(std::string* out, uint32_t v) { out->append(reinterpret_cast<const char*>(&v), sizeof(v)); }

uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

Status sys_error(const char* what) { return Status(Code::kSystem, std::string(what) + ": " + std::strerror(errno)); }

// Reads exactly n bytes or fails at the deadline / EOF.
Status read_exact(int fd, char* out, size_t n, int64_t deadline_ns) {
  size_t got = 0;
  while (got < n) {
    int64_t left_ms = (deadline_ns - mono_ns()) / 1000000;
    if (left_ms <= 0) return Status(Code::kUnavailable, "bootstrap: deadline passed while waiting");
    pollfd pfd{fd, POLLIN, 0};
    int r = poll(&pfd, 1, static_cast<int>(left_ms > 1000 ? 1000 : left_ms));
    if (r < 0 && errno != EINTR) return sys_error("bootstrap poll");
    if (r <= 0) continue;
    ssize_t k = read(fd, out + got, n - got);
    if (k == 0) return Status(Code::kUnavailable, "bootstrap: the parent closed the channel");
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return sys_error("bootstrap read");
    }
    got += static_cast<size_t>(k);
  }
  return Status::ok();
}

}  // namespace

Status write_frame(int fd, MsgType type, const std::string& payload) {
  std::string frame;
  frame.reserve(kHeaderBytes + payload.size());
  put_u32(&frame, static_cast<uint32_t>(type));
  put_u32(&frame, static_cast<uint32_t>(payload.size()));
  frame += payload;
  size_t sent = 0;
  while (sent < frame.size()) {
    ssize_t k = write(fd, frame.data() + sent, frame.size() - sent);
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return sys_error("bootstrap write");
    }
    sent += static_cast<size_t>(k);
  }
  return Status::ok();
}

Result<Frame> read_frame(int fd, int64_t deadline_ns) {
  char header[kHeaderBytes];
  Status st = read_exact(fd, header, kHeaderBytes, deadline_ns);
  if (!st.is_ok()) return st;
  uint32_t len = get_u32(header + 4);
  if (len > kMaxFrameBytes) return Status(Code::kInternal, "bootstrap: frame of " + std::to_string(len) + " bytes");
  Frame f;
  f.type = static_cast<MsgType>(get_u32(header));
  f.payload.resize(len);
  st = read_exact(fd, f.payload.data(), len, deadline_ns);
  if (!st.is_ok()) return st;
  return f;
}

bool FrameReader::next(Frame* out) {
  if (buf_.size() < kHeaderBytes) return false;
  uint32_t len = get_u32(buf_.data() + 4);
  if (buf_.size() < kHeaderBytes + len) return false;
  out->type = static_cast<MsgType>(get_u32(buf_.data()));
  out->payload.assign(buf_, kHeaderBytes, len);
  buf_.erase(0, kHeaderBytes + len);
  return true;
}

std::string pack_parts(const std::vector<std::string>& parts) {
  std::string out;
  put_u32(&out, static_cast<uint32_t>(parts.size()));
  for (const std::string& p : parts) {
    put_u32(&out, static_cast<uint32_t>(p.size()));
    out += p;
  }
  return out;
}

Result<std::vector<std::string>> unpack_parts(const std::string& packed) {
  auto bad = [] { return Status(Code::kInternal, "bootstrap: malformed allgather reply"); };
  if (packed.size() < 4) return bad();
  uint32_t count = get_u32(packed.data());
  size_t pos = 4;
  std::vector<std::string> parts;
  for (uint32_t i = 0; i < count; ++i) {
    if (packed.size() < pos + 4) return bad();
    uint32_t len = get_u32(packed.data() + pos);
    pos += 4;
    if (packed.size() < pos + len) return bad();
    parts.emplace_back(packed, pos, len);
    pos += len;
  }
  return parts;
}

Result<std::vector<std::string>> RankChannel::allgather(const std::string& mine) {
  Status st = write_frame(fd_, MsgType::kGather, mine);
  if (!st.is_ok()) return st;
  for (;;) {
    Result<Frame> f = read_frame(fd_, deadline_ns_);
    if (!f) return f.status();
    switch (f->type) {
      case MsgType::kGatherReply: return unpack_parts(f->payload);
      case MsgType::kAbort: return Status(Code::kUnavailable, "bootstrap aborted: " + f->payload);
      case MsgType::kPeerEvent: early_events_.push_back(f->payload); break;
      default: return Status(Code::kInternal, "bootstrap: unexpected frame type");
    }
  }
}

Status RankChannel::barrier() {
  Result<std::vector<std::string>> r = allgather("");
  return r.status();
}

Status RankChannel::send_result(const std::string& report) { return write_frame(fd_, MsgType::kResult, report); }

Status RankChannel::send_event(const std::string& event) { return write_frame(fd_, MsgType::kEvent, event); }

bool RankChannel::poll_peer_event(std::string* event) {
  if (!early_events_.empty()) {
    *event = early_events_.front();
    early_events_.erase(early_events_.begin());
    return true;
  }
  pollfd pfd{fd_, POLLIN, 0};
  if (poll(&pfd, 1, 0) <= 0 || (pfd.revents & POLLIN) == 0) return false;
  // Only the parent writes here and outside allgathers it only forwards events.
  Result<Frame> f = read_frame(fd_, mono_ns() + 1000000000);
  if (!f || f->type != MsgType::kPeerEvent) return false;
  *event = f->payload;
  return true;
}

}  // namespace trim::harness
