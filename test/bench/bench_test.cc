// Smoke tests of tools/loom-bench, run as a separate process (the harness is what users run):
// a tiny MLP run in eager and planned-graph mode reports two trained runs, and a run that
// cannot train (learning rate 0) is refused with exit code 3. loom-bench is found next to this
// test executable (both are built into the build folder's root).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/programs.h"
#include "device/cpu/blas.h"
#include "device/cpu/dnnl_gemm.h"

namespace {

using loom::test::ProgramBuilt;
using loom::test::ProgramPath;
using loom::test::ProgramRun;

const std::string& BenchPath() {
  static const std::string path = ProgramPath("loom-bench");
  return path;
}

ProgramRun RunBench(const std::string& args) { return loom::test::RunProgram(BenchPath(), args); }

std::vector<std::string> JsonLines(const std::string& out) {
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < out.size()) {
    size_t end = out.find('\n', pos);
    if (end == std::string::npos) end = out.size();
    if (out.compare(pos, 1, "{") == 0) lines.push_back(out.substr(pos, end - pos));
    pos = end + 1;
  }
  return lines;
}

double Field(const std::string& json, const std::string& key) {
  size_t k = json.find("\"" + key + "\": ");
  if (k == std::string::npos) return -1;
  return std::strtod(json.c_str() + k + key.size() + 4, nullptr);
}

TEST(LoomBench, ReportsTrainedRunsOfEagerAndPlannedGraph) {
  if (!ProgramBuilt(BenchPath())) GTEST_SKIP() << BenchPath() << " not built";
  ProgramRun r = RunBench("--model mlp --batch 4 --steps 3 --warmup 1 --mode eager,graph-planned --threads 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::vector<std::string> lines = JsonLines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_NE(lines[0].find("\"mode\": \"eager\""), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("\"mode\": \"graph-planned\""), std::string::npos) << lines[1];
  for (const std::string& l : lines) {
    for (const char* key : {"ms_per_step_median", "ms_per_step_p10", "ms_per_step_p90", "items_per_s", "peak_bytes",
                            "first_loss", "last_loss", "rss_peak_delta_bytes"})
      EXPECT_GT(Field(l, key), 0) << key << " in " << l;
    EXPECT_NE(Field(l, "first_loss"), Field(l, "last_loss")) << l;
    EXPECT_EQ(Field(l, "optimizer_steps"), 4) << l;
    // MLP 784-1024-1024-10 at batch 4: forward, weight and input gradients of each layer, but no
    // input gradient for the first (graph/flops.h).
    EXPECT_EQ(Field(l, "flops_per_step"), 2.0 * 4 * (3 * (784 * 1024 + 1024 * 1024 + 1024 * 10) - 784 * 1024)) << l;
    EXPECT_GT(Field(l, "gflops_per_s"), 0) << l;
    EXPECT_GT(Field(l, "fma_peak_gflops"), 0) << l;
    EXPECT_GT(Field(l, "fraction_of_peak"), 0) << l;
    EXPECT_NE(l.find("\"kernels\": [{\"kind\": \"gemm f32\", \"impl\": \""), std::string::npos) << l;
    EXPECT_NE(l.find("\"kernel_counters\": {"), std::string::npos) << l;
  }
  // Same seed, same data, serial replay: the graph reproduces eager's losses (docs/design.md inv. 5).
  EXPECT_EQ(Field(lines[0], "last_loss"), Field(lines[1], "last_loss"));
  // The planned arena is reported and within 5% of the liveness lower bound.
  double arena = Field(lines[1], "arena_bytes"), bound = Field(lines[1], "lower_bound_bytes");
  EXPECT_GT(bound, 0);
  EXPECT_LE(arena, 1.05 * bound);
  EXPECT_NE(r.out.find("| graph-planned |"), std::string::npos) << "no Markdown table row:\n" << r.out;
}

// Note [Which GEMM kernel]: OpenBLAS forced onto its SSE3 kernels (what it picks on a CPU its
// table does not know) draws one warning that says where float32 GEMMs run instead, and
// LOOM_DEBUG=1 names each GEMM kernel once.
// --narrow (the demo's table: five columns) with --json-file: the full figures in the file.
TEST(LoomBench, NarrowTableOnStdoutEveryFigureInTheJsonFile) {
  if (!ProgramBuilt(BenchPath())) GTEST_SKIP() << BenchPath() << " not built";
  loom::test::TempDir tmp;
  const std::string file = tmp / "runs.jsonl";
  ProgramRun r = RunBench("--model mlp --batch 4 --steps 3 --warmup 1 --mode eager,graph-planned --threads 1 "
                          "--narrow --json-file " + file);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("| mode | ms/step | speed-up | peak MiB | arena / bound |"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("| ms/step median | p10 |"), std::string::npos) << "the wide table:\n" << r.out;
  EXPECT_TRUE(JsonLines(r.out).empty()) << "JSON on stdout without --json:\n" << r.out;
  auto bytes = loom::test::ReadBytes(file);
  std::vector<std::string> lines = JsonLines(std::string(bytes.begin(), bytes.end()));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_GT(Field(lines[1], "arena_bytes"), 0) << lines[1];
  EXPECT_GE(Field(lines[0], "ms_per_step_p10"), 0) << lines[0];  // present (Field gives -1 for a missing key)
}

TEST(LoomBench, WarnsOnceWhenOpenBlasRunsOlderKernels) {
  if (!ProgramBuilt(BenchPath())) GTEST_SKIP() << BenchPath() << " not built";
  if (loom::CpuIsaLevel() <= 0) GTEST_SKIP() << "this CPU has nothing newer than SSE: OpenBLAS's Prescott kernels fit";
  ProgramRun r = loom::test::RunProgram(
      "env", "OPENBLAS_CORETYPE=Prescott LOOM_DEBUG=1 " + BenchPath() +
                 " --model mlp --batch 4 --steps 2 --warmup 1 --mode eager --threads 1 --peak-gflops 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string warning = "[loom] warning: OpenBLAS chose its 'Prescott' kernels";
  const size_t at = r.out.find(warning);
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(warning, at + 1), std::string::npos) << "warned more than once:\n" << r.out;
  if (loom::cpu::HaveDnnlGemm()) {
    EXPECT_NE(r.out.find("float32 GEMM runs on oneDNN"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("[loom] kernel gemm f32: oneDNN "), std::string::npos) << r.out;
    // Without LOOM_DEBUG a float32 run that never reaches OpenBLAS says nothing about it.
    ProgramRun quiet = loom::test::RunProgram(
        "env", "OPENBLAS_CORETYPE=Prescott LOOM_DEBUG=0 " + BenchPath() +
                   " --model mlp --batch 4 --steps 2 --warmup 1 --mode eager --threads 1 --peak-gflops 1 --json");
    ASSERT_EQ(quiet.exit_code, 0) << quiet.out;
    EXPECT_EQ(quiet.out.find(warning), std::string::npos) << quiet.out;
  }
}

// Note [Rounds] in tools/loom-bench.cc: with the modes taking turns, each mode's memory is
// still its own (what the other, idle models hold is subtracted), and the losses are the same.
TEST(LoomBench, RoundsKeepEachModesMemoryAndLosses) {
  if (!ProgramBuilt(BenchPath())) GTEST_SKIP() << BenchPath() << " not built";
  const std::string args = "--model mlp --batch 4 --steps 4 --warmup 1 --mode eager,graph-planned --threads 1 --json";
  ProgramRun one = RunBench(args), two = RunBench(args + " --rounds 2");
  ASSERT_EQ(one.exit_code, 0) << one.out;
  ASSERT_EQ(two.exit_code, 0) << two.out;
  std::vector<std::string> a = JsonLines(one.out), b = JsonLines(two.out);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(Field(b[i], "rounds"), 2) << b[i];
    EXPECT_EQ(Field(a[i], "peak_bytes"), Field(b[i], "peak_bytes")) << a[i] << "\n" << b[i];
    EXPECT_EQ(Field(a[i], "last_loss"), Field(b[i], "last_loss"));
  }
}

// --timeline with --memory-budget-fraction writes the budgeted plan's timeline beside the
// unbudgeted one (tools/plot_memory.py draws both): more ops (the recomputed ones), an arena within
// the budget and below the unbudgeted arena.
TEST(LoomBench, TimelineShowsTheBudgetedPlanBesideTheUnbudgetedOne) {
  if (!ProgramBuilt(BenchPath())) GTEST_SKIP() << BenchPath() << " not built";
  loom::test::TempDir dir;
  ProgramRun r = RunBench("--model cnn --batch 8 --steps 2 --warmup 1 --mode eager --threads 1 --memory-budget-fraction 0.8 "
                          "--timeline " + dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto read = [&](const std::string& name) {
    std::ifstream f(dir / name);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  };
  auto lines = [](const std::string& text) { return std::count(text.begin(), text.end(), '\n'); };
  const std::string meta = read("meta.json"), planned = read("planned.csv"), budgeted = read("budgeted.csv");
  ASSERT_FALSE(budgeted.empty()) << "no budgeted.csv in " << dir.path();
  const double recomputed = Field(meta, "recomputed_ops");
  EXPECT_GT(recomputed, 0) << meta;
  EXPECT_EQ(lines(budgeted), lines(planned) + long(recomputed)) << meta;
  EXPECT_LE(Field(meta, "budgeted_arena_bytes") + Field(meta, "budgeted_persistent_bytes"), Field(meta, "memory_budget")) << meta;
  EXPECT_LT(Field(meta, "budgeted_arena_bytes"), Field(meta, "arena_bytes")) << meta;
}

TEST(LoomBench, RefusesARunThatDidNotTrain) {
  if (!ProgramBuilt(BenchPath())) GTEST_SKIP() << BenchPath() << " not built";
  ProgramRun r = RunBench("--model mlp --batch 2 --steps 2 --warmup 1 --mode eager --lr 0 --threads 1 --json");
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_NE(r.out.find("parameters did not change"), std::string::npos) << r.out;
  EXPECT_TRUE(JsonLines(r.out).empty()) << r.out;
}

// --precision fp16 (Note [Loss scaling]): the JSON gives the precision, the final loss scale and the
// skipped steps; the graph replays eager's losses and scale.
TEST(LoomBench, Fp16RunsReportTheirLossScale) {
  if (!ProgramBuilt(BenchPath())) GTEST_SKIP() << BenchPath() << " not built";
  ProgramRun r = RunBench("--model mlp --batch 4 --steps 3 --warmup 1 --mode eager,graph-planned --threads 1 "
                          "--precision fp16 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::vector<std::string> lines = JsonLines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  for (const std::string& l : lines) {
    EXPECT_NE(l.find("\"precision\": \"fp16\""), std::string::npos) << l;
    EXPECT_GT(Field(l, "loss_scale"), 0) << l;
    EXPECT_GE(Field(l, "skipped_steps"), 0) << l;
    EXPECT_NE(l.find("\"kind\": \"gemm f16 -> f32\""), std::string::npos) << l;
  }
  EXPECT_EQ(Field(lines[0], "last_loss"), Field(lines[1], "last_loss"));
  EXPECT_EQ(Field(lines[0], "loss_scale"), Field(lines[1], "loss_scale"));
  EXPECT_EQ(RunBench("--model mlp --precision fp8").exit_code, 2);
}

TEST(LoomBench, RejectsBadFlags) {
  if (!ProgramBuilt(BenchPath())) GTEST_SKIP() << BenchPath() << " not built";
  EXPECT_EQ(RunBench("--model vgg").exit_code, 2);
  EXPECT_EQ(RunBench("--mode cuda-graph --device cpu").exit_code, 2);
  EXPECT_EQ(RunBench("--mode warp-speed").exit_code, 2);
}

}  // namespace
