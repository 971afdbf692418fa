// What a CUDA kernel records of an error it finds (Note [Errors found on the GPU] in
// cuda_device.h): plain data, no CUDA runtime, so that kernels emulated on the CPU (test/emu)
// record errors as on the GPU.
#pragma once

namespace loom {
namespace cuda {

// Written by kernels (first error wins), read and cleared by the host after a synchronisation.
enum KernelErrorCode : int {
  kKernelOk = 0,
  kLabelOutOfRange = 1,  // a = row, b = label, c = number of classes
  kIndexOutOfRange = 2,  // a = position, b = index, c = number of table rows (axis length)
  kShapeMismatch = 3,    // a = position, b = value held, c = value recorded
};
struct KernelError {
  int code;  // KernelErrorCode
  int op;    // KernelErrorOp
  long long a, b, c;
  int lock;  // held by the thread writing the record
};
enum KernelErrorOp : int {
  kOpSoftmaxCrossEntropy = 1,
  kOpSoftmaxCrossEntropyGrad = 2,
  kOpEmbedding = 3,
  kOpEmbeddingGrad = 4,
  kOpScatterElements = 5,
  kOpGatherElements = 6,
  kOpConstantOfShape = 7,
  kOpLinearCrossEntropy = 8,
};

}  // namespace cuda
}  // namespace loom
