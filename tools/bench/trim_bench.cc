// trim-bench: speed of the project's pieces against a baseline measured in the same run.
#include <cstdio>
#include <cstring>

int run_codec_bench(int argc, char** argv);
int run_fwht_bench(int argc, char** argv);
int run_profiler_bench(int argc, char** argv);
int run_cuda_bench(int argc, char** argv);

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "codec") == 0) return run_codec_bench(argc - 1, argv + 1);
  if (argc >= 2 && std::strcmp(argv[1], "fwht") == 0) return run_fwht_bench(argc - 1, argv + 1);
  if (argc >= 2 && std::strcmp(argv[1], "profiler") == 0) return run_profiler_bench(argc - 1, argv + 1);
  if (argc >= 2 && std::strcmp(argv[1], "cuda") == 0) return run_cuda_bench(argc - 1, argv + 1);
  std::fprintf(stderr,
               "usage: trim-bench codec [--quick] [--json] [--scheme S] [--head-bits B] [--cpu-time]\n"
               "                                            encode/decode per scheme vs memcpy\n"
               "       trim-bench fwht  [--quick] [--json]   Walsh-Hadamard transform vs memcpy\n"
               "       trim-bench profiler [--quick] [--json]  per-isend cost of asking NCCL's profiler chain\n"
               "       trim-bench cuda  [--quick] [--json] [--row-log2 L] [--reps N] [--check]\n"
               "                                             GPU rotation (libtrim-rht) vs device-to-device copy\n");
  return 2;
}
