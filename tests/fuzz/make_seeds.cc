// Writes valid packets of every scheme and dtype as the fuzzer's seeds, each in every shape of
// tests/fuzz/seed_cuts.h (cut at each check point, inside the header, other versions, ...), with
// and without a fabric trim size (which adds a check point at the fabric's cut).
#include <cstdio>
#include <string>
#include <vector>

#include "codec/encoder.h"
#include "tests/fuzz/seed_cuts.h"

using namespace trim::codec;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make-seeds DIR\n");
    return 2;
  }
  int count = 0;
  for (uint32_t fabric_trim_bytes : {0u, 256u}) {
    for (uint8_t head_bits : {uint8_t{1}, uint8_t{2}}) {  // 2: plane Q and the bin ratio
      for (int s = 0; s < kNumSchemes; ++s) {
        for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kRaw}) {
          Scheme scheme = static_cast<Scheme>(s);
          if (dt == DType::kRaw && scheme != Scheme::kNone) continue;
          if (fabric_trim_bytes != 0 && scheme == Scheme::kNone) continue;  // raw packets have no points
          if (head_bits == 2 && !sign_head(scheme)) continue;
          CodecConfig cfg;
          cfg.scheme = scheme;
          cfg.head_bits = head_bits;
          cfg.packet_bytes = fabric_trim_bytes != 0 ? 1400 : 600;
          cfg.row_elems = 256;
          cfg.fabric_keep_bytes = fabric_keep_bytes(fabric_trim_bytes);
          const size_t bytes = 1000 * dtype_bytes(dt) + 1;
          std::vector<uint8_t> msg(bytes);
          for (size_t i = 0; i < bytes; ++i) msg[i] = static_cast<uint8_t>(i * 37 + 11);
          Layout layout = Layout::make(cfg, dt, scheme, bytes).value();
          Encoder enc(cfg);
          auto packets = enc.encode_message(layout, MessageId{42, 3, true}, msg.data()).value();
          for (size_t k = 0; k < packets.size(); k += 3) {
            for (const std::vector<uint8_t>& v : trim::fuzz::v2_variants(packets[k])) {
              std::string path = std::string(argv[1]) + "/seed" + std::to_string(count++);
              FILE* f = std::fopen(path.c_str(), "wb");
              if (f == nullptr) return 1;
              std::fwrite(v.data(), 1, v.size(), f);
              std::fclose(f);
            }
          }
        }
      }
    }
  }
  std::printf("wrote %d seeds to %s\n", count, argv[1]);
  return 0;
}
