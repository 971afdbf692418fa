// LOOM_HD marks a function that both backends compile from one definition: __host__ __device__
// when nvcc compiles it (a .cu file), a plain inline function otherwise. core/half.h and the
// kernels' shared headers (device/kernel_shapes.h, core/elementwise_formulas.h,
// device/philox.h) use it.
#pragma once

#if defined(__CUDACC__)
#define LOOM_HD __host__ __device__ __forceinline__
#else
#define LOOM_HD inline
#endif
