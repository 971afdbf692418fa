// Arithmetic of a step: the floating-point operations (a multiply-add counts 2) of its matrix
// products and convolutions, forward and backward, computed from the shapes in the op records
// (invariant 1: cost accounting reads the record). Element-wise ops, reductions, normalisation
// and the optimizer update are not counted: they are memory-bound, and counting them would make
// a GFLOP/s figure compare unlike things. loom-bench divides this by the step time.
//
// Count on a graph captured without the passes (GraphOptions::fuse = false): a fused op kind
// added by a pass is counted only if it is listed here.
#pragma once

#include <cstdint>
#include <vector>

#include "core/op.h"

namespace loom {

// matmul, matmul_sgd_update, conv2d, conv2d_grad_input, conv2d_grad_weight, and the fused
// dense_bias_act and conv2d_relu (their product only); 0 for anything else.
int64_t DenseFlops(const OpRecord& op);
int64_t DenseFlops(const std::vector<OpRecord>& ops);

}  // namespace loom
