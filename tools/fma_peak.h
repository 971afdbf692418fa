// The machine's float32 multiply-add peak, measured: each thread runs independent chains of
// fused multiply-adds on registers of the widest vector ISA this build targets (-march=native:
// AVX-512, else AVX2 + FMA, else SSE multiply and add), with enough chains in flight to cover the
// FMA latency on every FMA port. No memory is touched in the loop, so this is the arithmetic
// ceiling a GEMM or convolution can approach, not a figure any real kernel reaches.
// Used by tools/fma_peak.cc (prints it) and by loom-bench (the fraction of peak of a step).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace loom_tools {

struct FmaPeak {
  const char* isa = "";
  int threads = 0;
  double gflops_per_thread = 0;  // best single thread, running alone
  double gflops = 0;             // all threads at once
};

namespace fma_detail {

#if defined(__AVX512F__)
constexpr const char* kIsa = "avx512f";
using V = __m512;
inline V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline V Set(float x) { return _mm512_set1_ps(x); }
inline float First(V v) { return _mm512_cvtss_f32(v); }
constexpr int kLanes = 16;
constexpr int kFlopsPerOp = 2;
#elif defined(__AVX2__) && defined(__FMA__)
constexpr const char* kIsa = "avx2+fma";
using V = __m256;
inline V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V Set(float x) { return _mm256_set1_ps(x); }
inline float First(V v) { return _mm256_cvtss_f32(v); }
constexpr int kLanes = 8;
constexpr int kFlopsPerOp = 2;
#else
constexpr const char* kIsa = "sse (mul + add)";
using V = __m128;
inline V Fma(V a, V b, V c) { return _mm_add_ps(_mm_mul_ps(a, b), c); }
inline V Set(float x) { return _mm_set1_ps(x); }
inline float First(V v) { return _mm_cvtss_f32(v); }
constexpr int kLanes = 4;
constexpr int kFlopsPerOp = 2;
#endif

// 16 independent chains: 2 FMA ports x latency 4-5 needs 8-10 in flight; 16 covers wider cores.
constexpr int kChains = 16;

// Runs `iters` rounds of kChains FMAs; returns a value that depends on all of them.
__attribute__((noinline)) inline float Chains(long iters) {
  V acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = Set(0.001f * float(i + 1));
  const V mul = Set(0.999999f), add = Set(1e-7f);
  for (long it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = Fma(acc[i], mul, add);
  }
  float s = 0;
  for (int i = 0; i < kChains; ++i) s += First(acc[i]);
  return s;
}

inline double FlopsOf(long iters) { return double(iters) * kChains * kLanes * kFlopsPerOp; }

// GFLOP/s of `threads` threads running `iters` rounds each at once (wall time of the slowest).
inline double Run(int threads, long iters) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::atomic<float> sink{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&] {
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      float v = Chains(iters);
      float cur = sink.load();
      while (!sink.compare_exchange_weak(cur, cur + v)) {
      }
    });
  while (ready.load() < threads) std::this_thread::yield();
  auto t0 = std::chrono::steady_clock::now();
  go = true;
  for (auto& t : ts) t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return FlopsOf(iters) * threads / s / 1e9;
}

}  // namespace fma_detail

// Best of `reps` runs of about `seconds` each, for one thread alone and for `threads` at once.
// The machine may be shared: the best run is the one least disturbed.
inline FmaPeak MeasureFmaPeak(int threads, double seconds = 0.1, int reps = 3) {
  using namespace fma_detail;
  FmaPeak p;
  p.isa = kIsa;
  p.threads = std::max(threads, 1);
  // Calibrate the round count to the time asked for.
  long iters = 1 << 16;
  for (;;) {
    auto t0 = std::chrono::steady_clock::now();
    volatile float keep = Chains(iters);
    (void)keep;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > seconds / 4 || iters > (1L << 34)) {
      iters = long(double(iters) * seconds / std::max(s, 1e-6));
      break;
    }
    iters *= 4;
  }
  iters = std::max(iters, 1L << 12);
  for (int r = 0; r < reps; ++r) {
    p.gflops_per_thread = std::max(p.gflops_per_thread, Run(1, iters));
    p.gflops = std::max(p.gflops, Run(p.threads, iters));
  }
  // All threads at once below 90% of threads x one thread: another process held a core during
  // every run (seen on a 2-core VM: 117 GFLOP/s for 2 threads, half the 234 of a quiet moment,
  // which doubled every "% of peak" printed after it), or the threads share cores (SMT). Try
  // again, a little apart, up to kRetries times, keeping the best: a disturbance passes, SMT's
  // figure stays, and only SMT pays the extra runs.
  constexpr int kRetries = 10;
  for (int r = 0; r < kRetries && p.gflops < 0.9 * p.threads * p.gflops_per_thread; ++r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    p.gflops = std::max(p.gflops, Run(p.threads, iters));
  }
  return p;
}

}  // namespace loom_tools
