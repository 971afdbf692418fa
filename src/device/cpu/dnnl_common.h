// What loom's oneDNN callers (kernels/conv_dnnl.cc, dnnl_gemm.cc) share. Only for files
// compiled with oneDNN and OpenMP (LOOM_HAVE_DNNL).
#pragma once

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

namespace loom {
namespace cpu {

// The CPU engine, one for the process, and a stream per calling thread.
inline dnnl::engine& Engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}
inline dnnl::stream& Stream() {
  thread_local dnnl::stream s(Engine());
  return s;
}

// Runs oneDNN on the calling thread alone: Debian's oneDNN runs on OpenMP (libgomp), and a
// second thread team beside loom's pool would fight it for the cores (Note [One thread pool] in
// blas.cc). OpenMP's thread count is per calling thread, so this is set around every oneDNN
// call, building included: a primitive plans its own parallel split from the count it sees when
// it is built.
class OneOmpThread {
 public:
  OneOmpThread() : prev_(omp_get_max_threads()) {
    if (prev_ != 1) omp_set_num_threads(1);
  }
  ~OneOmpThread() {
    if (prev_ != 1) omp_set_num_threads(prev_);
  }
  OneOmpThread(const OneOmpThread&) = delete;
  OneOmpThread& operator=(const OneOmpThread&) = delete;

 private:
  int prev_;
};

}  // namespace cpu
}  // namespace loom
