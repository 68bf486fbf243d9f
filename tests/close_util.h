// Helpers for the close-isolation tests (close_isolation_test.cc in one process,
// close_frozen_peer_test.cc across two): posting with retries, waiting on requests, message
// payloads and rounds of verified traffic over many comm pairs, as NCCL's proxy drives them.
#pragma once

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "transport/net_api.h"

namespace trim::net::close_test {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

enum class End { kPending, kDone, kFailed };
struct Outcome {
  End end = End::kPending;
  uint64_t bytes = 0;
  std::string error;
};

// One test() of a request that has not ended yet.
inline Outcome poll_once(Request* r) {
  Outcome o;
  Completion c;
  Status st = test(r, &c);
  if (!st.is_ok()) {
    o.end = End::kFailed;
    o.error = st.to_string();
  } else if (c.done) {
    o.end = End::kDone;
    o.bytes = c.sizes_bytes[0];
  }
  return o;
}

inline Outcome await(Request* r, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    Outcome o = poll_once(r);
    if (o.end != End::kPending || Clock::now() > deadline) return o;
    std::this_thread::yield();
  }
}

// isend/irecv, retried while every request slot is taken (a null request), for at most 5 s.
inline Result<Request*> post_send(SendComm* c, const void* data, size_t bytes) {
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  for (;;) {
    Result<Request*> r = isend(c, data, bytes, 0, nullptr, nullptr);
    if (!r.is_ok() || r.value() != nullptr || Clock::now() > deadline) return r;
    std::this_thread::yield();
  }
}
inline Result<Request*> post_recv(RecvComm* c, void* data, size_t capacity) {
  RecvBuffer b;
  b.data = data;
  b.capacity_bytes = capacity;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  for (;;) {
    Result<Request*> r = irecv(c, 1, &b, false);
    if (!r.is_ok() || r.value() != nullptr || Clock::now() > deadline) return r;
    std::this_thread::yield();
  }
}

inline std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 g(seed);
  for (auto& b : v) b = static_cast<uint8_t>(g());
  return v;
}
// Finite fp32 values (random bytes would hold NaNs, which no gradient encoding keeps).
inline std::vector<uint8_t> gaussian_floats(size_t count, uint32_t seed) {
  std::vector<float> f(count);
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0, 1);
  for (float& x : f) x = n(g);
  std::vector<uint8_t> v(count * sizeof(float));
  std::memcpy(v.data(), f.data(), v.size());
  return v;
}

struct Pair {
  Context* send_ctx = nullptr;  // its op attribute decides whether a send is trimmable
  SendComm* send = nullptr;
  RecvComm* recv = nullptr;
  std::string name;
};

// One message over one pair, checked end to end.
struct Transfer {
  Pair* pair = nullptr;
  bool trimmable = false;
  std::vector<uint8_t> in, out;
  Request* s = nullptr;
  Request* r = nullptr;
  Outcome so, ro;
};

// Message `k` of a pair: exact odd-sized, trimmable fp32 (AllReduce SIMPLE, above
// NCCL_TRIM_MIN_BYTES), exact large with a ragged tail, and empty, in turn.
inline void fill_message(Transfer* t, uint32_t k, uint32_t seed, size_t large_bytes) {
  switch (k % 4) {
    case 0: t->in = random_bytes(4069, seed); break;
    case 1:
      t->in = gaussian_floats(65536, seed);
      t->trimmable = true;
      break;
    case 2: t->in = random_bytes(large_bytes + 3, seed); break;
    default: t->in.clear(); break;
  }
  t->out.assign(t->in.size() + 16, 0xEE);  // posted with room to spare: the size must come back
}

inline Status set_trimmable(Context* ctx, bool trimmable) {
  OpAttr a;
  a.func = trimmable ? Func::kAllReduce : Func::kBroadcast;
  a.algo = Algo::kRing;
  a.proto = Proto::kSimple;
  return set_op_attr(ctx, a);
}

// Posts a transfer's receive (when `recv_side`) and/or send (when `send_side`).
inline std::string post(Transfer* t, bool send_side, bool recv_side) {
  if (recv_side) {
    Result<Request*> r = post_recv(t->pair->recv, t->out.data(), t->out.size());
    if (!r.is_ok() || r.value() == nullptr) {
      return t->pair->name + ": irecv: " + (r.is_ok() ? "no free slot" : r.status().to_string());
    }
    t->r = r.value();
  }
  if (send_side) {
    Status a = set_trimmable(t->pair->send_ctx, t->trimmable);
    if (!a.is_ok()) return a.to_string();
    Result<Request*> s = post_send(t->pair->send, t->in.data(), t->in.size());
    if (!s.is_ok() || s.value() == nullptr) {
      return t->pair->name + ": isend: " + (s.is_ok() ? "no free slot" : s.status().to_string());
    }
    t->s = s.value();
  }
  return "";
}

// `rounds` messages on each pair of `which`: the same plan in both processes for the same seed.
inline std::vector<Transfer> plan(std::vector<Pair>& pairs, const std::vector<int>& which, int rounds, uint32_t seed) {
  std::vector<Transfer> ts;
  for (int k = 0; k < rounds; ++k) {
    for (int i : which) {
      Transfer t;
      t.pair = &pairs[static_cast<size_t>(i)];
      fill_message(&t, static_cast<uint32_t>(k + i), seed * 131 + static_cast<uint32_t>(k * 16 + i), 1 << 20);
      ts.push_back(std::move(t));
    }
  }
  return ts;
}

// Posts this process's sides of a plan: every receive (where it holds the receive comm), then
// every send (where it holds the send comm). "" when all were posted.
inline std::string post_all(std::vector<Transfer>& ts) {
  for (Transfer& t : ts) {
    std::string e = t.pair->recv != nullptr ? post(&t, false, true) : "";
    if (!e.empty()) return e;
  }
  for (Transfer& t : ts) {
    std::string e = t.pair->send != nullptr ? post(&t, true, false) : "";
    if (!e.empty()) return e;
  }
  return "";
}

// Tests every posted request round robin, as a proxy thread does, until all have ended or the
// deadline passes; then checks that each completed with the exact bytes. "" when all is well.
inline std::string drain_and_check(std::vector<Transfer>& ts, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (bool pending = true; pending && Clock::now() < deadline;) {
    pending = false;
    for (Transfer& t : ts) {
      if (t.s != nullptr && t.so.end == End::kPending) t.so = poll_once(t.s);
      if (t.r != nullptr && t.ro.end == End::kPending) t.ro = poll_once(t.r);
      pending |= (t.s != nullptr && t.so.end == End::kPending) || (t.r != nullptr && t.ro.end == End::kPending);
    }
    if (pending) std::this_thread::yield();
  }
  std::string err;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Transfer& t = ts[i];
    const std::string what = t.pair->name + " message " + std::to_string(i) + " (" + std::to_string(t.in.size()) +
                             (t.trimmable ? " B trimmable)" : " B exact)");
    auto ended = [&](const char* side, const Outcome& o) {
      if (o.end == End::kDone && o.bytes == t.in.size()) return true;
      err += what + ": " + side +
             (o.end == End::kPending ? std::string(" still pending")
              : o.end == End::kFailed ? " failed: " + o.error
                                      : " reported " + std::to_string(o.bytes) + " bytes") +
             "\n";
      return false;
    };
    if (t.s != nullptr) ended("send", t.so);
    // The receiving side checks the bytes (in both processes the payload is a function of the
    // pair, the message and the seed).
    if (t.r == nullptr || !ended("recv", t.ro)) continue;
    if (!t.in.empty() && std::memcmp(t.in.data(), t.out.data(), t.in.size()) != 0) {
      err += what + ": bytes differ\n";
    } else if (t.out[t.in.size()] != 0xEE) {
      err += what + ": wrote past the message\n";
    }
  }
  return err;
}

}  // namespace trim::net::close_test
