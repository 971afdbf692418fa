// Which library, kernel and instruction set each kind of dense math ran with: the
// CPU's GEMM and convolution paths report here the first time they run a given implementation.
//
// With LOOM_DEBUG >= 1 each new (kind, implementation) pair is printed once to stderr, e.g.
//   [loom] kernel gemm f32: oneDNN sgemm (ISA avx512_core_bf16)
// and ReportedKernels() lists every pair reported so far in this process (loom-bench's JSON).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace loom {

// Records that `kind` (e.g. "gemm f32", "conv2d forward f32") ran with `impl`. Thread-safe;
// cheap after the first report of a pair, but callers on hot paths report once per branch.
void ReportKernel(const std::string& kind, const std::string& impl);
// Every (kind, impl) reported so far, in the order first reported.
std::vector<std::pair<std::string, std::string>> ReportedKernels();

// Adds `value` to the process-wide counter `name` (created at 0 on first use). Kernels that
// choose among implementations count what they chose and what they passed over (e.g. Note
// [Measured algorithms]: the measured milliseconds of the chosen convolution algorithms and of
// the fastest ones of any determinism); loom-bench's JSON lists them as "kernel_counters".
void AddKernelCounter(const std::string& name, double value);
// Every counter, in the order first added.
std::vector<std::pair<std::string, double>> KernelCounters();

// Prints "[loom] warning: <message>" to stderr the first time `key` is warned about in this
// process (whatever LOOM_DEBUG says); later calls with the same key print nothing.
void WarnOnce(const std::string& key, const std::string& message);

}  // namespace loom
