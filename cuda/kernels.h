// Internal: the launch functions of cuda/encode.cu and cuda/decode.cu, called by
// cuda/gpu_codec.cc. Plain structs and an opaque stream, so g++ compiles the caller.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/codec_index.h"

namespace trim::gpu {

struct KernelCommon {
  RowGeom geom;
  uint32_t first_row, n_rows;
  uint64_t first_slot;       // row_first_slot(geom, first_row): packet j of the range is slot first_slot + j
  size_t stride;
  uint64_t cookie, seed;
  uint32_t msg_seq;
  bool trimmable;
  float clip_sigmas;
  float fwht_scale[16];      // codec::fwht_scale(0..15), correctly rounded on the host
};

struct EncodeParams {
  KernelCommon c;
  const uint8_t* msg;  // device
  uint8_t* out;        // pinned host or device
};

struct DecodeParams {
  KernelCommon c;
  const uint8_t* packets;    // pinned host or device
  const uint32_t* received;  // device: bytes received per packet of the range
  uint8_t* out;              // device: the message
};

// Threads per block (at most kMaxRowThreads: the kernels need ~120 registers a thread) and
// dynamic shared memory of a row's block.
constexpr uint32_t kMaxRowThreads = 512;
uint32_t row_block_threads(uint32_t row_elems);
size_t encode_smem_bytes(const RowGeom& g);
size_t decode_smem_bytes(const RowGeom& g);

// Return a cudaError_t as int (0 = launched) and launch on `device`, the current one, where
// the kernels were prepared (prepare_*: setup only, they load the module; may wait).
int launch_encode(const EncodeParams& p, void* stream, int device);
int launch_decode(const DecodeParams& p, void* stream, int device);
int prepare_encode(int device);
int prepare_decode(int device);

}  // namespace trim::gpu
