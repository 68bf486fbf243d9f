// Writes valid packets of every scheme and dtype, whole and trimmed, as the fuzzer's seeds.
#include <cstdio>
#include <string>
#include <vector>

#include "codec/encoder.h"

using namespace trim::codec;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make-seeds DIR\n");
    return 2;
  }
  int count = 0;
  for (int s = 0; s < kNumSchemes; ++s) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16, DType::kRaw}) {
      Scheme scheme = static_cast<Scheme>(s);
      if (dt == DType::kRaw && scheme != Scheme::kNone) continue;
      CodecConfig cfg;
      cfg.scheme = scheme;
      cfg.packet_bytes = 600;
      cfg.row_elems = 256;
      const size_t bytes = 1000 * dtype_bytes(dt) + 1;
      std::vector<uint8_t> msg(bytes);
      for (size_t i = 0; i < bytes; ++i) msg[i] = static_cast<uint8_t>(i * 37 + 11);
      Layout layout = Layout::make(cfg, dt, scheme, bytes).value();
      Encoder enc(cfg);
      auto packets = enc.encode_message(layout, MessageId{42, 3, true}, msg.data()).value();
      for (size_t k = 0; k < packets.size(); k += 3) {
        for (size_t cut : {packets[k].size(), size_t{kHeaderBytes + 20}}) {
          if (cut > packets[k].size()) continue;
          std::string path = std::string(argv[1]) + "/seed" + std::to_string(count++);
          FILE* f = std::fopen(path.c_str(), "wb");
          if (f == nullptr) return 1;
          std::fwrite(packets[k].data(), 1, cut, f);
          std::fclose(f);
        }
      }
    }
  }
  std::printf("wrote %d seeds to %s\n", count, argv[1]);
  return 0;
}
