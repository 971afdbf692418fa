// Note [Casts fused into their producers] (graph/fuse_casts.cc): the producers' 16-bit results
// against the cast op's bits, on any device (test/graph on the CPU, test/cuda on a GPU).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"

namespace loom {
namespace test {

// (4, 300) float32 on the CPU (more than one store tile): random values in [-6, 6) with zeros,
// infinities, NaN, subnormals, bfloat16 and float16 ties and float16's edges mixed in.
Tensor AwkwardFloats(uint32_t seed);

// The 16-bit elements of t (on any device) as stored.
std::vector<uint16_t> Bits16(const Tensor& t);

// Every producer that takes out_dtype (the unary activations, add_bias, layer_norm), run on
// `dev` with a bfloat16 and a float16 result: each must equal `dev`'s own cast of its float32
// result bit for bit, and layer_norm's statistics must be unchanged; bias_grad's copy of its dy
// (copy_dtype) likewise, its sums unchanged (gtest expectations).
void ExpectProducersWriteTheCastOpsBits(const std::shared_ptr<Device>& dev);

// Note [Attention results kept in bfloat16] (graph/bf16_attention.cc), on `dev`: a bfloat16
// qkv's attention and gradient give bfloat16 values in float32 (y, dqkv), the same bits with
// out_dtype bfloat16, the gradient the same from a bfloat16 y, lse unchanged; bias_grad of a
// bfloat16 dy equals bias_grad of its float32 copy bit for bit (gtest expectations).
void ExpectAttentionResultsKeepTheirBits(const std::shared_ptr<Device>& dev);

}  // namespace test
}  // namespace loom
