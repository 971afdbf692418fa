// fma_peak: the machine's measured float32 FMA peak (tools/fma_peak.h says how), one JSON line.
//
//   fma_peak [--threads N] [--seconds S]     N: default the core count; S: per run (default 0.2)
//
// loom-bench measures the same at its start and reports each step's fraction of it.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "tools/fma_peak.h"

int main(int argc, char** argv) {
  int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  double seconds = 0.2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--threads" || a == "--seconds") && i + 1 < argc) {
      char* end = nullptr;
      const double v = std::strtod(argv[++i], &end);
      if (!end || *end || v <= 0 || (a == "--threads" && (v != int(v) || v > 4096))) {
        std::fprintf(stderr, "fma_peak: %s wants a positive %s, got '%s'\n", a.c_str(),
                     a == "--threads" ? "integer" : "number", argv[i]);
        return 2;
      }
      (a == "--threads" ? threads = int(v) : (seconds = v, 0));
    } else {
      std::fprintf(stderr, "usage: fma_peak [--threads N] [--seconds S]\n");
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  const loom_tools::FmaPeak p = loom_tools::MeasureFmaPeak(threads, seconds);
  std::printf(
      "{\"tool\": \"fma_peak\", \"isa\": \"%s\", \"threads\": %d, \"gflops_per_thread\": %.1f, \"gflops\": %.1f, "
      "\"what\": \"float32, independent FMA chains in registers, best of 3 runs, up to 10 more while disturbed\"}\n",
      p.isa, p.threads, p.gflops_per_thread, p.gflops);
  return 0;
}
