// oneDNN's sgemm behind loom's Gemm (dnnl_gemm.h).
#include "device/cpu/dnnl_gemm.h"

#include "core/error.h"

#ifdef LOOM_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>

#include "device/cpu/omp_one_thread.h"
#endif

namespace loom {
namespace cpu {

#ifndef LOOM_HAVE_DNNL

bool HaveDnnlGemm() { return false; }
void DnnlSgemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
               float*, int64_t) {
  LOOM_ASSERT(false, "DnnlSgemm: loom was built without oneDNN");
}
std::string DnnlIsa() { return "none"; }

#else  // LOOM_HAVE_DNNL

bool HaveDnnlGemm() { return true; }

void DnnlSgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  OneOmpThread one;
  dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  LOOM_ASSERT(st == dnnl_success, "dnnl_sgemm failed with status ", int(st), " (ta=", ta, " tb=", tb, " m=", m,
              " n=", n, " k=", k, " lda=", lda, " ldb=", ldb, " ldc=", ldc, ")");
}

std::string DnnlIsa() {
  using isa = dnnl::cpu_isa;
  switch (dnnl::get_effective_cpu_isa()) {
    case isa::sse41: return "sse41";
    case isa::avx: return "avx";
    case isa::avx2: return "avx2";
    case isa::avx2_vnni: return "avx2_vnni";
    case isa::avx512_mic: return "avx512_mic";
    case isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case isa::avx512_core: return "avx512_core";
    case isa::avx512_core_vnni: return "avx512_core_vnni";
    case isa::avx512_core_bf16: return "avx512_core_bf16";
    case isa::avx512_core_amx: return "avx512_core_amx";
    default: return "generic (no JIT ISA)";
  }
}

#endif  // LOOM_HAVE_DNNL

}  // namespace cpu
}  // namespace loom
