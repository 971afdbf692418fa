// comm_bench: the alpha-beta parameters of this machine's communicator, measured (issue 35).
// Run as the ranks of tools/launch.sh -n N (MPI's world: shared memory by default, TCP on
// loopback with OMPI_MCA_btl=tcp,self). For each message size, from 4 bytes to --max-mib, each
// collective (all-reduce, reduce-scatter, all-gather of float32 sums) runs --reps times after a
// warm-up; a repetition's time is the slowest rank's (an all-reduce of the times), and a size's
// figure is the median repetition. Each repetition starts with the message out of the caches (a
// 128 MiB scratch buffer written first), as a gradient bucket is in a training step: backward
// wrote it among megabytes of other traffic, and the all-gather's target was last read a step
// ago. On shared memory that doubles the time of messages of a few MiB against a buffer sent
// over and over (measured: 2 ranks, 1 MiB all-reduce 0.20 ms warm, 0.44 ms cold), and the warm
// figures made loom-bench's predictions 11-34% low (docs/benchmarks.md); --warm keeps the old way.
// Then the ring models of io/comm/simulated.h are fitted to the
// all-reduce medians by least squares on relative error (small messages count as much as large):
//   all-reduce, ring:  t(B) = 2 (N-1) alpha + 2 (N-1)/N B / beta
// which gives alpha (the per-message latency) and beta (the link's bytes per second), the
// numbers `loom-bench --link-gbps G --latency-us L` takes (Note [Simulated ranks]); the fit's
// error at each size is printed beside it. A benchmark: it judges nothing.
//
//   tools/launch.sh -n 2 -- build/comm_bench [--max-mib 64] [--reps 20] [--factor 2] [--fit-min-kib K] [--json-file F]
// Prints one JSON line per (collective, size) and a last line with the fit. Rank 0 reports.
// Exit codes: 0 ok, 1 a loom error (printed), 2 bad flags.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/file.h"
#include "examples/common/flags.h"
#include "io/comm/comm.h"

namespace {

const char* kUsage =
    "usage: tools/launch.sh -n N -- comm_bench [--max-mib M] [--reps R] [--json-file F]\n"
    "  --max-mib M   largest message in MiB (default 64)\n"
    "  --reps R      timed repetitions per size (default 20; half as many, at least 10, for messages over 4 MiB)\n"
    "  --factor F    each message size F times the last (default 2; a shared-memory transport's time\n"
    "                bends where messages leave the caches, so loom-bench --link-table wants them close)\n"
    "  --fit-min-kib K  fit the model to messages of at least K KiB only (default: all; gradient\n"
    "                buckets are MiBs, where a shared-memory transport behaves otherwise than on small ones)\n"
    "  --warm        time a buffer sent over and over (in the caches); default: each repetition\n"
    "                starts with the message evicted, as a gradient bucket is in a training step\n"
    "  --json-file F also write the JSON lines to F (rank 0, atomically)\n";

struct Flags {
  double max_mib = 64;
  int64_t reps = 20;
  double fit_min_kib = 0;  // the fit takes messages of at least this size
  double factor = 2;       // successive message sizes
  bool cold = true;        // each repetition starts with its buffer out of the caches
  std::string json_file;
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  loom::flags::Args a(argc, argv);
  while (a.Next()) {
    if (a.Is("--help") || a.Is("-h")) {
      std::cout << kUsage;
      std::exit(0);
    } else if (a.Is("--max-mib")) {
      f.max_mib = a.Double();
    } else if (a.Is("--reps")) {
      f.reps = a.Int(1);
    } else if (a.Is("--warm")) {
      f.cold = false;
    } else if (a.Is("--factor")) {
      f.factor = a.Double();
    } else if (a.Is("--fit-min-kib")) {
      f.fit_min_kib = a.Double();
    } else if (a.Is("--json-file")) {
      f.json_file = a.Value();
    } else {
      a.Unknown();
    }
  }
  if (!(f.max_mib > 0 && f.max_mib <= 1024)) throw loom::flags::UsageError("--max-mib must lie in (0, 1024]");
  if (!(f.factor >= 1.1 && f.factor <= 16)) throw loom::flags::UsageError("--factor must lie in [1.1, 16]");
  return f;
}

enum class Kind { kAllReduce, kReduceScatter, kAllGather };
const char* Name(Kind k) {
  return k == Kind::kAllReduce ? "allreduce" : k == Kind::kReduceScatter ? "reducescatter" : "allgather";
}

// One collective over a buffer of `bytes` (the whole buffer: the all-gather sends 1/N of it).
void Run(loom::Communicator& c, Kind k, std::vector<float>& buf) {
  const int n = c.size();
  const int64_t count = int64_t(buf.size());
  switch (k) {
    case Kind::kAllReduce: c.AllReduce(buf.data(), count, loom::DType::kFloat32, loom::ReduceOp::kSum); break;
    case Kind::kReduceScatter:
      c.ReduceScatter(buf.data(), count / n, loom::DType::kFloat32, loom::ReduceOp::kSum);
      break;
    case Kind::kAllGather:
      c.AllGather(buf.data() + (count / n) * c.rank(), buf.data(), count / n, loom::DType::kFloat32);
      break;
  }
}

// Writes `scratch` whole: the caches then hold it instead of the message (--cold).
void Evict(std::vector<float>& scratch) {
  static float v = 0;
  v += 1;
  for (size_t i = 0; i < scratch.size(); i += 16) scratch[i] = v;
}

// Median over repetitions of the slowest rank's seconds; with `scratch`, caches evicted before each.
double Time(loom::Communicator& c, Kind k, std::vector<float>& buf, int64_t reps, std::vector<float>* scratch) {
  for (int w = 0; w < 3; ++w) Run(c, k, buf);
  std::vector<double> t;
  for (int64_t r = 0; r < reps; ++r) {
    if (scratch) Evict(*scratch);
    c.Barrier();
    const auto t0 = std::chrono::steady_clock::now();
    Run(c, k, buf);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    c.AllReduce(&s, 1, loom::DType::kFloat64, loom::ReduceOp::kMax);
    t.push_back(s);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Fit {
  double alpha_s = 0, beta = 0;  // seconds per message, bytes per second
  double max_rel_error = 0;
};

// Weighted least squares of t = a + b B with weights 1/t^2 (relative error); then
// a = 2 (N-1) alpha and b = 2 (N-1) / (N beta).
Fit FitRing(const std::vector<double>& bytes, const std::vector<double>& secs, int n) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const double w = 1 / (secs[i] * secs[i]);
    sw += w;
    sx += w * bytes[i];
    sy += w * secs[i];
    sxx += w * bytes[i] * bytes[i];
    sxy += w * bytes[i] * secs[i];
  }
  const double det = sw * sxx - sx * sx;
  LOOM_CHECK(det > 0, ValueError, "[comm_bench] cannot fit the ring model to ", bytes.size(), " sizes");
  double b = (sw * sxy - sx * sy) / det, a = (sy - b * sx) / sw;
  a = std::max(a, 0.0);
  b = std::max(b, 1e-15);
  Fit f;
  f.alpha_s = a / (2.0 * (n - 1));
  f.beta = 2.0 * (n - 1) / (n * b);
  for (size_t i = 0; i < bytes.size(); ++i)
    f.max_rel_error = std::max(f.max_rel_error, std::abs(a + b * bytes[i] - secs[i]) / secs[i]);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  try {
    f = ParseFlags(argc, argv);
  } catch (const loom::flags::UsageError& e) {
    std::cerr << "comm_bench: " << e.what() << "\n" << kUsage;
    return 2;
  }
  try {
    std::shared_ptr<loom::Communicator> comm = loom::MakeCommunicator("mpi");
    const int n = comm->size();
    LOOM_CHECK(n >= 2, ValueError, "[comm_bench] needs at least 2 ranks (tools/launch.sh -n N), has ", n);
    const char* btl = std::getenv("OMPI_MCA_btl");
    const std::string transport = btl ? btl : "default (shared memory on one host)";
    std::string lines;
    std::vector<double> fit_bytes, fit_secs;
    std::vector<float> scratch(f.cold ? size_t(128) << 20 >> 2 : 0);  // 128 MiB: past a last-level cache
    const int64_t max_floats = int64_t(f.max_mib * (1 << 20) / 4);
    // Sizes multiples of n (the reduce-scatter's slots), each about --factor times the last.
    for (int64_t floats = n; floats <= max_floats;
         floats = std::max(floats + n, int64_t(std::llround(double(floats) * f.factor / n)) * n)) {
      std::vector<float> buf(size_t(floats), 1.0f);
      const int64_t reps = floats * 4 > (4 << 20) ? std::max<int64_t>(10, f.reps / 2) : f.reps;
      for (Kind k : {Kind::kAllReduce, Kind::kReduceScatter, Kind::kAllGather}) {
        const double s = Time(*comm, k, buf, reps, f.cold ? &scratch : nullptr);
        const double bytes = double(floats) * 4;
        if (k == Kind::kAllReduce && bytes >= f.fit_min_kib * 1024) {
          fit_bytes.push_back(bytes);
          fit_secs.push_back(s);
        }
        char line[400];
        std::snprintf(line, sizeof line,
                      "{\"collective\": \"%s\", \"ranks\": %d, \"transport\": \"%s\", \"caches\": \"%s\", "
                      "\"bytes\": %.0f, \"median_us\": %.3f, \"reps\": %lld, \"gbps_bus\": %.4f}\n",
                      Name(k), n, transport.c_str(), f.cold ? "cold" : "warm", bytes, s * 1e6, (long long)reps,
                      bytes * 8 / s / 1e9 * (k == Kind::kAllReduce ? 2.0 * (n - 1) / n : double(n - 1) / n));
        lines += line;
      }
    }
    const Fit fit = FitRing(fit_bytes, fit_secs, n);
    char line[600];
    std::snprintf(line, sizeof line,
                  "{\"fit\": \"ring all-reduce, 2 (N-1) alpha + 2 (N-1)/N bytes / beta\", \"ranks\": %d, "
                  "\"transport\": \"%s\", \"caches\": \"%s\", \"fit_min_bytes\": %.0f, \"latency_us\": %.3f, \"link_gbps\": %.4f, \"max_rel_error\": %.3f, "
                  "\"loom_bench_flags\": \"--link-gbps %.4f --latency-us %.3f\"}\n",
                  n, transport.c_str(), f.cold ? "cold" : "warm", f.fit_min_kib * 1024, fit.alpha_s * 1e6, fit.beta * 8 / 1e9, fit.max_rel_error, fit.beta * 8 / 1e9,
                  fit.alpha_s * 1e6);
    lines += line;
    if (comm->rank() == 0) {
      std::fputs(lines.c_str(), stdout);
      if (!f.json_file.empty()) loom::WriteFileAtomic(f.json_file, {lines}, "comm_bench");
    }
  } catch (const loom::Error& e) {
    std::cerr << "comm_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
