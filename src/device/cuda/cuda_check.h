// Status checks for the CUDA runtime, cuBLAS(Lt) and cuDNN (docs/style.md, "Errors"): every call's
// status is checked and a failure is thrown as a DeviceError with the call, file:line and the
// library's own name and message.
//   LOOM_CUDA_CHECK(cudaMalloc(&p, n));
//   LOOM_CUDA_CHECK(cublasSgemm(...));      // the same macro: overloaded on the status type
//   LOOM_CUDA_CHECK_LAUNCH();               // after a kernel launch (does not synchronise)
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "core/error.h"

namespace loom {
namespace cuda {

[[noreturn]] inline void ThrowStatus(const char* lib, const char* name, const char* msg, const char* expr,
                                     const char* file, int line) {
  throw DeviceError(detail::Cat("[", lib, "] ", expr, " failed at ", file, ":", line, ": ", name, ": ", msg));
}

inline void Check(cudaError_t e, const char* expr, const char* file, int line) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so that later calls start clean
  ThrowStatus("cuda", cudaGetErrorName(e), cudaGetErrorString(e), expr, file, line);
}

inline void Check(cublasStatus_t s, const char* expr, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  ThrowStatus("cublas", cublasGetStatusName(s), cublasGetStatusString(s), expr, file, line);
}

inline void Check(cudnnStatus_t s, const char* expr, const char* file, int line) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  char last[512];
  cudnnGetLastErrorString(last, sizeof last);  // cuDNN 9: the detail behind the status
  std::string msg = last[0] ? detail::Cat(cudnnGetErrorString(s), " (", last, ")") : cudnnGetErrorString(s);
  ThrowStatus("cudnn", "cudnnStatus_t", msg.c_str(), expr, file, line);
}

}  // namespace cuda
}  // namespace loom

#define LOOM_CUDA_CHECK(expr) ::loom::cuda::Check((expr), #expr, __FILE__, __LINE__)
// A launch reports bad configurations at once and faults in the kernel at the next
// synchronisation (a host read), which checks again.
#define LOOM_CUDA_CHECK_LAUNCH() ::loom::cuda::Check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
