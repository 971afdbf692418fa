// oneDNN's sgemm and matmul primitive behind loom's Gemm (dnnl_gemm.h).
#include "device/cpu/dnnl_gemm.h"

#include "core/error.h"
#include "device/kernel_report.h"

#ifdef LOOM_HAVE_DNNL
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "device/cpu/dnnl_common.h"
#endif

namespace loom {
namespace cpu {

#ifndef LOOM_HAVE_DNNL

bool HaveDnnlGemm() { return false; }
void DnnlSgemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
               float*, int64_t) {
  LOOM_ASSERT(false, "DnnlSgemm: loom was built without oneDNN");
}
bool DnnlMatmul(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
                float*, int64_t) {
  return false;
}
bool DnnlMatmulBf16(bool, bool, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t, const uint16_t*, int64_t,
                    float, float*, int64_t) {
  return false;
}
bool DnnlMatmulF16(bool, bool, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t, const uint16_t*, int64_t,
                   float, float*, int64_t) {
  return false;
}
bool DnnlMatmulHalfTakes(bool, bool, bool, int64_t, int64_t, int64_t, float, int64_t, int64_t, float, int64_t) {
  return false;
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

namespace {

namespace dn = dnnl;
using md = dn::memory::desc;

struct Matmul {
  dn::matmul prim;
  md a, b, c, pad;
  size_t pad_bytes = 0;
  std::string impl;
};

// The operands' type: float32, bfloat16 or float16 (C is float32 in all three).
enum class In { kF32, kBf16, kF16 };
// ta, tb, accumulate (beta == 1), m, n, k, lda, ldb, ldc, the operands' type
using Key = std::tuple<bool, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, In>;
std::mutex g_mu;
std::map<Key, std::unique_ptr<Matmul>>& Cache() {
  static auto* m = new std::map<Key, std::unique_ptr<Matmul>>;  // lives to process exit
  return *m;
}

// A row-major (rows, cols) operand, or the transpose of a row-major (cols, rows) one.
md Operand(int64_t rows, int64_t cols, int64_t ld, bool transposed, In type = In::kF32) {
  const auto dt = type == In::kBf16  ? dn::memory::data_type::bf16
                  : type == In::kF16 ? dn::memory::data_type::f16
                                     : dn::memory::data_type::f32;
  return md({rows, cols}, dt, transposed ? dn::memory::dims{1, ld} : dn::memory::dims{ld, 1});
}

std::unique_ptr<Matmul> Build(const Key& key) {
  const auto [ta, tb, acc, m, n, k, lda, ldb, ldc, type] = key;
  auto mm = std::make_unique<Matmul>();
  mm->a = Operand(m, k, lda, ta, type);
  mm->b = Operand(k, n, ldb, tb, type);
  mm->c = Operand(m, n, ldc, false);
  dn::primitive_attr attr;
  attr.set_scratchpad_mode(dn::scratchpad_mode::user);
  if (acc) {
    dn::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  dn::matmul::primitive_desc pd(dn::matmul::desc(mm->a, mm->b, mm->c), attr, Engine());
  mm->prim = dn::matmul(pd);
  mm->pad = pd.scratchpad_desc();
  mm->pad_bytes = mm->pad.get_size();
  mm->impl = pd.impl_info_str();
  ReportKernel(type == In::kBf16 ? "gemm bf16 -> f32" : type == In::kF16 ? "gemm f16 -> f32" : "gemm f32",
               "oneDNN matmul " + mm->impl + " (ISA " + DnnlIsa() + ")");
  return mm;
}

}  // namespace

namespace {
// The cached primitive for key, built at its first use (under one OpenMP thread: a primitive
// plans its split from the count it sees when built); null when oneDNN has none for it.
const Matmul* Get(const Key& key) {
  std::lock_guard<std::mutex> l(g_mu);
  auto it = Cache().find(key);
  if (it == Cache().end()) {
    std::unique_ptr<Matmul> built;
    try {
      built = Build(key);
    } catch (const dn::error&) {
      built.reset();  // no implementation for this shape: the caller's fallback runs it (cached as such)
    }
    it = Cache().emplace(key, std::move(built)).first;
  }
  return it->second.get();
}

bool Run(const Key& key, const void* a, const void* b, float* c) {
  OneOmpThread one;
  const Matmul* mm = Get(key);
  if (!mm) return false;
  thread_local std::vector<char> pad;  // the per-thread scratchpad (dnnl_gemm.h)
  if (pad.size() < mm->pad_bytes) pad.resize(mm->pad_bytes);
  auto cp = [](const void* v) { return const_cast<void*>(v); };  // oneDNN takes void* handles
  mm->prim.execute(Stream(), {{DNNL_ARG_SRC, dn::memory(mm->a, Engine(), cp(a))},
                              {DNNL_ARG_WEIGHTS, dn::memory(mm->b, Engine(), cp(b))},
                              {DNNL_ARG_DST, dn::memory(mm->c, Engine(), c)},
                              {DNNL_ARG_SCRATCHPAD, dn::memory(mm->pad, Engine(), pad.data())}});
  return true;
}
}  // namespace

bool DnnlMatmul(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (alpha != 1.0f || (beta != 0.0f && beta != 1.0f)) return false;
  return Run(Key{ta, tb, beta == 1.0f, m, n, k, lda, ldb, ldc, In::kF32}, a, b, c);
}

bool DnnlMatmulBf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a, int64_t lda,
                    const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (alpha != 1.0f || (beta != 0.0f && beta != 1.0f)) return false;
  return Run(Key{ta, tb, beta == 1.0f, m, n, k, lda, ldb, ldc, In::kBf16}, a, b, c);
}

bool DnnlMatmulF16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a, int64_t lda,
                   const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (alpha != 1.0f || (beta != 0.0f && beta != 1.0f)) return false;
  return Run(Key{ta, tb, beta == 1.0f, m, n, k, lda, ldb, ldc, In::kF16}, a, b, c);
}

bool DnnlMatmulHalfTakes(bool bf16, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, int64_t lda,
                         int64_t ldb, float beta, int64_t ldc) {
  if (alpha != 1.0f || (beta != 0.0f && beta != 1.0f)) return false;
  OneOmpThread one;
  return Get(Key{ta, tb, beta == 1.0f, m, n, k, lda, ldb, ldc, bf16 ? In::kBf16 : In::kF16}) != nullptr;
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
