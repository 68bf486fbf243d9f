// trim-bench codec: one-thread encode and decode throughput per scheme and dtype over >= 64 MiB
// of Gaussian data cut into 1 MiB messages (NCCL's ring slice size), against memcpy of the
// same bytes between the same buffers in the same run.
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "codec/decoder.h"
#include "codec/encoder.h"
#include "codec/fwht.h"
#include "codec/rng.h"
#include "tools/bench/bench_util.h"

using namespace trim::codec;
using trim::bench::best_seconds;
using trim::bench::has_flag;

namespace {

struct Setup {
  uint64_t total_bytes = 0;
  uint64_t msg_bytes = 1 << 20;
  int reps = 3;
  bool json = false;
  uint8_t head_bits = 1;  // --head-bits 1|2|16 (2: sign-head schemes only)
};

std::vector<uint8_t> gaussian_bytes(DType dt, uint64_t bytes) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<uint8_t> out(bytes);
  for (uint64_t i = 0; i < bytes / dtype_bytes(dt); ++i) {
    const float x = g(rng);
    if (dt == DType::kF32) {
      std::memcpy(&out[4 * i], &x, 4);
    } else {
      const uint16_t h = dt == DType::kBF16 ? f32_to_bf16(x) : f32_to_f16(x);
      std::memcpy(&out[2 * i], &h, 2);
    }
  }
  return out;
}

double to_f64(const uint8_t* p, DType dt, uint64_t i) {
  if (dt == DType::kF32) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  return dt == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// Packet k of the run is trimmed when its hash falls under the fraction: the same packets
// every repetition, spread evenly.
bool trimmed(uint64_t k, double fraction) {
  return static_cast<double>(mix64(k + 1) >> 11) * 0x1.0p-53 < fraction;
}

int bench_one(const Setup& s, Scheme scheme, DType dt, const std::vector<uint8_t>& input, std::vector<uint8_t>& wire,
              std::vector<uint8_t>& output) {
  CodecConfig cfg;
  cfg.scheme = scheme;
  cfg.head_bits = s.head_bits;
  auto layout = Layout::make(cfg, dt, scheme, s.msg_bytes);
  if (!layout) {
    std::fprintf(stderr, "%s\n", layout.status().to_string().c_str());
    return 1;
  }
  const uint64_t msgs = s.total_bytes / s.msg_bytes;
  const uint64_t per_msg = layout->packets();
  const size_t msg_wire = per_msg * cfg.packet_bytes;
  wire.resize(msgs * msg_wire);
  std::vector<uint8_t> ring(msg_wire);
  std::vector<uint32_t> sizes(msgs * per_msg);
  Encoder enc(cfg);
  Decoder dec(cfg);

  // Encode message m's rows into packet slots at `dst` (stride packet_bytes).
  auto encode_msg = [&](uint64_t m, uint8_t* dst) {
    const MessageId id{0x5eed, static_cast<uint32_t>(m), true};
    uint64_t slot = 0;
    for (uint32_t r = 0; r < layout->rows(); ++r) {
      auto n = enc.encode_row(*layout, id, input.data() + m * s.msg_bytes, r, dst + slot * cfg.packet_bytes,
                              cfg.packet_bytes, sizes.data() + m * per_msg + slot);
      slot += n.value();
    }
  };
  for (uint64_t m = 0; m < msgs; ++m) encode_msg(m, wire.data() + m * msg_wire);  // what decode reads
  // Timed encode: as in the transport, every message goes into one reused staging ring of
  // packet slots. The baseline copies the same source bytes into the same ring.
  const double t_copy = best_seconds(s.reps + 2, [&] {
    for (uint64_t m = 0; m < msgs; ++m) std::memcpy(ring.data(), input.data() + m * s.msg_bytes, s.msg_bytes);
  });
  const double memcpy_gbps = static_cast<double>(msgs * s.msg_bytes) / t_copy / 1e9;
  const double t_enc = best_seconds(s.reps, [&] {
    for (uint64_t m = 0; m < msgs; ++m) encode_msg(m, ring.data());
  });
  // Decode reads every message's packets and writes the output; its baseline copies the
  // same bytes between the same two buffers.
  const double t_copy_dec = best_seconds(s.reps + 2, [&] {
    for (uint64_t m = 0; m < msgs; ++m) std::memcpy(output.data() + m * s.msg_bytes, wire.data() + m * msg_wire, s.msg_bytes);
  });
  const double memcpy_dec_gbps = static_cast<double>(msgs * s.msg_bytes) / t_copy_dec / 1e9;

  for (double fraction : {0.0, 0.5, 1.0}) {
    uint64_t rejected = 0;
    auto decode_all = [&] {
      for (uint64_t m = 0; m < msgs; ++m) {
        const MessageId id{0x5eed, static_cast<uint32_t>(m), true};
        (void)dec.begin(*layout, id, output.data() + m * s.msg_bytes);
        for (uint64_t k = m * per_msg; k < (m + 1) * per_msg; ++k) {
          const uint8_t* pkt = wire.data() + k * cfg.packet_bytes;
          ParsedPacket p;
          uint32_t len = sizes[k];
          if (scheme != Scheme::kNone && trimmed(k, fraction)) {
            (void)parse_packet(pkt, len, &p);
            len = kHeaderBytes + p.hdr.trim_bytes;
          }
          if (parse_packet(pkt, len, &p) != PacketError::kOk || dec.add(p) != PacketError::kOk) ++rejected;
        }
        dec.finish();
      }
    };
    const double t_dec = best_seconds(s.reps, decode_all);
    if (rejected != 0) {
      std::fprintf(stderr, "decoder rejected %llu packets\n", static_cast<unsigned long long>(rejected));
      return 1;
    }
    double err = 0, norm = 0;
    const uint64_t elems = msgs * s.msg_bytes / dtype_bytes(dt);
    for (uint64_t i = 0; i < elems; ++i) {
      const double x = to_f64(input.data(), dt, i), y = to_f64(output.data(), dt, i);
      err += (x - y) * (x - y);
      norm += x * x;
    }
    const double nmse = err / norm;
    const double bytes = static_cast<double>(msgs * s.msg_bytes);
    struct Row {
      const char* op;
      double seconds;
      double memcpy_gbps;
    };
    for (const Row& row : {Row{"encode", t_enc, memcpy_gbps}, Row{"decode", t_dec, memcpy_dec_gbps}}) {
      if (std::strcmp(row.op, "encode") == 0 && fraction != 0.0) continue;
      if (scheme == Scheme::kNone && fraction != 0.0) continue;
      const double gbps = bytes / row.seconds / 1e9;
      if (s.json) {
        std::printf(
            "{\"bench\":\"codec\",\"scheme\":\"%s\",\"dtype\":\"%s\",\"head_bits\":%u,\"op\":\"%s\","
            "\"trim_fraction\":%.2f,\"bytes\":%.0f,\"gbps\":%.3f,\"memcpy_gbps\":%.3f,\"ratio\":%.3f,\"nmse\":%.6g,"
            "\"isa\":\"%s\"}\n",
            scheme_name(scheme), dtype_name(dt), unsigned{s.head_bits}, row.op, fraction, bytes, gbps, row.memcpy_gbps,
            gbps / row.memcpy_gbps, nmse, fwht_isa());
      } else {
        std::printf("%-5s %-5s %-7s trim=%.2f  %8.3f GB/s  memcpy %8.3f GB/s  ratio %.3f  nmse %.3g\n",
                    scheme_name(scheme), dtype_name(dt), row.op, fraction, gbps, row.memcpy_gbps, gbps / row.memcpy_gbps,
                    nmse);
      }
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int run_codec_bench(int argc, char** argv) {
  Setup s;
  s.json = has_flag(argc, argv, "--json");
  const bool quick = has_flag(argc, argv, "--quick");
  trim::bench::g_thread_cpu_clock = has_flag(argc, argv, "--cpu-time");
  s.total_bytes = quick ? (16ull << 20) : (64ull << 20);
  s.reps = quick ? 2 : 3;
  const char* only = nullptr;  // --scheme NAME runs one scheme
  for (int i = 0; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--scheme") == 0) only = argv[i + 1];
    if (std::strcmp(argv[i], "--head-bits") == 0) s.head_bits = static_cast<uint8_t>(std::atoi(argv[i + 1]));
  }
  if (!valid_head_bits(s.head_bits)) {
    std::fprintf(stderr, "trim-bench codec: --head-bits must be 1, 2 or 16\n");
    return 2;
  }
  std::vector<DType> dtypes = {DType::kF32};
  if (!quick) dtypes.push_back(DType::kBF16);
  for (DType dt : dtypes) {
    const std::vector<uint8_t> input = gaussian_bytes(dt, s.total_bytes);
    std::vector<uint8_t> output(s.total_bytes), wire;
    for (Scheme scheme : {Scheme::kNone, Scheme::kSign, Scheme::kSq, Scheme::kSd, Scheme::kRht, Scheme::kRotated}) {
      if (only != nullptr && std::strcmp(only, scheme_name(scheme)) != 0) continue;
      if (s.head_bits == 2 && (scheme == Scheme::kSq || scheme == Scheme::kSd)) continue;  // random heads: no bins
      if (bench_one(s, scheme, dt, input, wire, output) != 0) return 1;
    }
  }
  return 0;
}
