// `trim-bench cuda`: GPU codec throughput against the copy that fits each path, timed in the
// same run: a device-to-device cudaMemcpy of the same message (encode, decode) and a
// device-to-host copy of it into pinned memory (encode_pinned, which ends in pinned staging as
// the plugin's sends do). The message is >= 1 GiB (8192 rows of 2^15 fp32; --quick: 1024
// rows). Per scheme and dtype:
//   encode        device message -> packets in device memory (the kernel's speed)
//   encode_pinned device message -> packets in pinned host memory (kernel + one D2H copy)
//   decode        whole packets in device memory -> device message
// gbps counts message bytes once per second; ratio = gbps / baseline_gbps.
//   --json   one JSON object per line: bench, scheme, dtype, op, bytes, gbps, baseline,
//            baseline_gbps, ratio, copy_gbps (D2D), d2h_gbps, device
// Without a usable GPU it prints one line saying why it skipped and exits 0.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "codec/layout.h"
#include "cuda/gpu_codec.h"
#include "tools/bench/bench_util.h"

namespace {

using trim::codec::CodecConfig;
using trim::codec::DType;
using trim::codec::Layout;
using trim::codec::Scheme;
using trim::gpu::DeviceBuffer;
using trim::gpu::GpuCodec;
using trim::gpu::PinnedBuffer;

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

// Gaussian-like values (sum of uniforms) from a cheap generator: the bytes' statistics matter
// little to the kernels, their volume does.
std::vector<float> make_values(size_t n) {
  std::vector<float> v(n);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < n; ++i) {
    float s = 0;
    for (int k = 0; k < 4; ++k) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      s += static_cast<float>(x >> 40) * 0x1p-24f - 0.5f;
    }
    v[i] = s;
  }
  return v;
}

struct Report {
  bool json;
  std::string device;
  double copy_gbps;  // device to device
  double d2h_gbps;   // device to pinned host
  void line(const char* scheme, const char* dtype, const char* op, uint64_t bytes, double seconds) const {
    const double gbps = bytes / seconds / 1e9;
    const bool to_host = std::string(op) == "encode_pinned";
    const double base = to_host ? d2h_gbps : copy_gbps;
    const char* base_name = to_host ? "d2h" : "d2d";
    if (json) {
      std::printf("{\"bench\":\"cuda\",\"scheme\":\"%s\",\"dtype\":\"%s\",\"op\":\"%s\",\"bytes\":%llu,"
                  "\"gbps\":%.2f,\"baseline\":\"%s\",\"baseline_gbps\":%.2f,\"ratio\":%.3f,\"copy_gbps\":%.2f,"
                  "\"d2h_gbps\":%.2f,\"device\":\"%s\"}\n",
                  scheme, dtype, op, static_cast<unsigned long long>(bytes), gbps, base_name, base, gbps / base,
                  copy_gbps, d2h_gbps, json_escape(device).c_str());
    } else {
      std::printf("%-5s %-5s %-14s %8.1f GB/s  (%s %8.1f GB/s, ratio %.3f)\n", scheme, dtype, op, gbps, base_name,
                  base, gbps / base);
    }
    std::fflush(stdout);
  }
};

int fail(const std::string& what) {
  std::fprintf(stderr, "trim-bench cuda: %s\n", what.c_str());
  return 1;
}

}  // namespace

int run_cuda_bench(int argc, char** argv) {
  const bool json = trim::bench::has_flag(argc, argv, "--json");
  const bool quick = trim::bench::has_flag(argc, argv, "--quick");
  std::string why;
  if (!trim::gpu::gpu_available(&why)) {
    std::printf("{\"bench\":\"cuda\",\"skipped\":true,\"reason\":\"%s\"}\n", json_escape(why).c_str());
    return 0;
  }
  const uint32_t row_elems = 32768, rows = quick ? 1024 : 8192;
  const int reps = quick ? 3 : 5;
  const uint64_t elems = static_cast<uint64_t>(rows) * row_elems;
  const uint64_t max_bytes = elems * 4;
  std::string err;
  DeviceBuffer msg(max_bytes, &err), copy(max_bytes, &err), out(max_bytes, &err);
  if (msg.data() == nullptr || copy.data() == nullptr || out.data() == nullptr) return fail(err);
  {
    // 64 MiB of values, repeated over the message.
    const std::vector<float> chunk = make_values(16u << 20);
    const size_t chunk_bytes = chunk.size() * 4;
    for (uint64_t off = 0; off < max_bytes; off += chunk_bytes) {
      if (!msg.upload(chunk.data(), std::min<uint64_t>(chunk_bytes, max_bytes - off), off)) return fail("upload");
    }
  }
  Report rep{json, trim::gpu::gpu_device_name(), 0, 0};
  const double copy_s = trim::bench::best_seconds(reps, [&] { copy.copy_from(msg, max_bytes); });
  rep.copy_gbps = max_bytes / copy_s / 1e9;
  {
    PinnedBuffer host(max_bytes, &err);
    if (host.data() == nullptr) return fail(err);
    const double d2h_s = trim::bench::best_seconds(reps, [&] { msg.download(host.data(), max_bytes); });
    rep.d2h_gbps = max_bytes / d2h_s / 1e9;
  }

  struct Variant {
    Scheme scheme;
    DType dtype;
  };
  const Variant variants[] = {{Scheme::kRht, DType::kF32}, {Scheme::kSign, DType::kF32}, {Scheme::kSq, DType::kF32},
                              {Scheme::kSd, DType::kF32},  {Scheme::kNone, DType::kF32}, {Scheme::kRht, DType::kBF16}};
  for (const Variant& v : variants) {
    CodecConfig cfg;
    cfg.scheme = v.scheme;
    cfg.row_elems = row_elems;
    const uint64_t bytes = elems * trim::codec::dtype_bytes(v.dtype);
    auto layout = Layout::make(cfg, v.dtype, v.scheme, bytes);
    if (!layout) return fail(layout.status().to_string());
    std::unique_ptr<GpuCodec> gc = GpuCodec::create(cfg, &err);
    if (gc == nullptr) return fail(err);
    const size_t stride = cfg.packet_bytes;
    const uint64_t n_packets = layout->packets();
    DeviceBuffer packets(n_packets * stride, &err);
    if (packets.data() == nullptr) return fail(err);
    std::vector<uint32_t> sizes(n_packets);
    const trim::codec::MessageId id{1, 1, true};
    auto encode_into = [&](uint8_t* dst) {
      const GpuCodec::Ticket t = gc->encode_rows_async(*layout, id, msg.data(), 0, layout->rows(), dst, stride, sizes.data());
      if (t == 0 || !gc->wait(t)) std::fprintf(stderr, "encode: %s\n", gc->last_error().c_str());
    };
    const char* sname = trim::codec::scheme_name(v.scheme);
    const char* dname = trim::codec::dtype_name(v.dtype);
    encode_into(packets.data());  // warm-up (and the packets decode reads)
    rep.line(sname, dname, "encode", bytes, trim::bench::best_seconds(reps, [&] { encode_into(packets.data()); }));
    {
      PinnedBuffer pinned(n_packets * stride, &err);
      if (pinned.data() == nullptr) return fail(err);
      encode_into(pinned.data());
      rep.line(sname, dname, "encode_pinned", bytes,
               trim::bench::best_seconds(reps, [&] { encode_into(pinned.data()); }));
    }
    auto decode = [&] {
      const GpuCodec::Ticket t =
          gc->decode_rows_async(*layout, id, packets.data(), stride, sizes.data(), 0, layout->rows(), out.data());
      if (t == 0 || !gc->wait(t)) std::fprintf(stderr, "decode: %s\n", gc->last_error().c_str());
    };
    decode();
    rep.line(sname, dname, "decode", bytes, trim::bench::best_seconds(reps, decode));
  }
  return 0;
}
