// loom-bench: times training steps of the model zoo (src/nn/models.h) eagerly and as replayed
// graphs, on synthetic data, and reports speed, memory and whether training really happened.
//
//   loom-bench --model mlp|cnn|resnet18|resnet50 [--batch N] [--mode eager,graph-planned,...]
//              [--device cpu|cuda] [--steps N] [--warmup N] [--threads N] [--json]
//              [--timeline DIR] [--peak-gflops G]
//              [--dist | --simulate-ranks N[,N...] [--link-gbps G] [--latency-us L]]
//              [--bucket-mb X] [--first-bucket-mb X] [--no-overlap]
//
// Each mode trains a fresh model built from the same seed with SGD (lr 0.01, momentum 0.9) and
// softmax cross-entropy. Per mode it prints one JSON line (--json) and, at the end, a Markdown
// table with the speed-up and the memory ratio against eager.
//
// The harness refuses to report a run that did not train (docs/design.md, "Lessons"): the loss must
// change between the first and the last step, the parameters' bytes must change, and the
// model's optimizer step count must have advanced by every step taken. Otherwise it prints what
// failed and exits 3 (SINGA's own harness once timed the forward pass only, after an API change).
//
// What the memory figures mean (also in --help and under the table):
//   peak_bytes            the device allocator's peak over the timed steps (ResetPeak after the
//                         warm-up; round 1 only with --rounds, Note [Rounds]): requested bytes of
//                         parameters, optimizer state, inputs and everything the step allocates
//                         (a planned graph's arena included).
//   state_bytes           parameters + optimizer state + BatchNorm statistics + the input batch.
//   working_peak_bytes    peak_bytes - state_bytes: what the step itself needs at its worst.
//   rss_peak_delta_bytes  growth of the process's resident set: VmHWM at the end of the run minus
//                         VmRSS before the model was built (the high-water mark is reset then via
//                         /proc/self/clear_refs), so it includes allocator caching, BLAS buffers
//                         and heap fragmentation. Comparable with tools/bench_torch.py on the CPU.
//   arena_bytes, lower_bound_bytes   from the training graph (GraphStats): the planned arena and
//                         the liveness lower bound of the intermediates, counting blocks that share
//                         memory through in-place reuse once (lower_bound_no_inplace_bytes: without
//                         that reuse, what a dynamic replay holds); null in eager mode.
//
// What the speed figures mean:
//   flops_per_step        floating-point operations of the step's matrix products and
//                         convolutions, forward and backward (graph/flops.h), counted on the op list
//                         of one step captured without the fusion passes: what the model needs,
//                         whatever a mode fuses. gflops_per_s = flops_per_step / median step time.
//   fma_peak_gflops       the machine's float32 FMA peak with loom's thread count, measured at the
//                         start (tools/fma_peak.h; --peak-gflops gives it instead) on the CPU, and
//                         on a GPU its float32 GEMM peak (8192^3, in the float32 math in force);
//                         the fraction of it a step reaches is fraction_of_peak. On a machine other
//                         jobs load, the threads share the cores with them: compare with
//                         fma_peak_gflops_one_thread (one thread alone) x threads.
//   kernels               the library, kernel and ISA every GEMM and convolution kind ran with
//                         (device/kernel_report.h), in the order first used.
//
// Data parallelism (Note [Scaling runs]):
//   --dist            the ranks of tools/launch.sh -n N train data-parallel over MPI (DistOpt),
//                     --batch being the global batch; each mode also runs "compute only" (the
//                     same per-rank batch, no communicator) so exposed communication = step time
//                     - compute-only step time. Rank 0 reports. --shard adds a third variant,
//                     DistOpt with sharded optimizer state (optimizer_state_bytes: this rank's).
//   --simulate-ranks  this process plays rank 0 of N on a modelled network (io/comm/simulated.h,
//                     ring all-reduce, alpha-beta: --link-gbps, --latency-us); --batch is per rank
//                     (weak scaling, as data-parallel figures are usually quoted); N = 1 runs
//                     without a communicator and is the baseline of scaling_efficiency.
//
// Exit codes: 0 ok, 1 a loom error (printed), 2 bad flags, 3 a run that did not train.
#include <malloc.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/autocast.h"
#include "core/file.h"
#include "core/ops.h"
#include "device/cpu/kernels/conv_dnnl.h"
#include "device/cpu/parallel.h"
#include "core/device.h"
#include "examples/common/dist.h"
#include "examples/common/flags.h"
#include "device/kernel_report.h"
#include "graph/flops.h"
#include "graph/graph.h"
#include "io/comm/simulated.h"
#include "nn/dist_opt.h"
#include "nn/model.h"
#include "nn/models.h"
#include "nn/transformer.h"
#include "nn/optimizer.h"
#include "tools/fma_peak.h"

namespace {

using loom::DType;
using loom::Shape;
using loom::Tensor;
namespace nn = loom::nn;
namespace ops = loom::ops;

constexpr uint64_t kSeed = 20240607;

using loom::flags::UsageError;
class NotTrainedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ---------------------------------------------------------------- models

struct ModelSpec {
  std::string name;  // the --model value
  std::string arch;  // what it is, for the report
  Shape sample;      // one input sample
  int64_t classes;
  int64_t default_batch;
  std::function<std::shared_ptr<nn::Layer>(nn::LayerOptions)> make;
  // A language model: sample = {T} tokens in [0, classes), the labels the next T tokens.
  bool lm = false;
};

// --model gpt's shape (--gpt-layers, --gpt-dim, --gpt-heads, --context, --vocab): the CPU's small
// GPT of issue 32 by default.
nn::GptConfig GptFromFlags(int64_t layers, int64_t dim, int64_t heads, int64_t context, int64_t vocab) {
  nn::GptConfig c;
  c.layers = layers;
  c.dim = dim;
  c.heads = heads;
  c.context = context;
  c.vocab = vocab;
  return c;
}

std::vector<ModelSpec> Zoo(const nn::GptConfig& gpt = nn::GptConfig()) {
  const std::string gpt_arch = loom::detail::Cat("gpt-L", gpt.layers, "-d", gpt.dim, "-h", gpt.heads, "-T",
                                                 gpt.context, "-V", gpt.vocab);
  return {
      {"mlp",
       "mlp-784-1024-1024-10",
       {784},
       10,
       64,
       [](nn::LayerOptions o) {
         return nn::MakeMlp({784, 1024, 1024, 10}, o);
       }},
      {"cnn",
       "small-cnn-3x32x32 (conv32-bn-relu-pool, conv64-bn-relu-pool, linear)",
       {3, 32, 32},
       10,
       32,
       [](nn::LayerOptions o) { return nn::MakeSmallCnn(3, 10, o); }},
      {"resnet18",
       "resnet18-cifar-3x32x32",
       {3, 32, 32},
       10,
       16,
       [](nn::LayerOptions o) { return nn::MakeResNet18(10, o); }},
      {"resnet50",
       "resnet50-3x224x224",
       {3, 224, 224},
       1000,
       8,
       [](nn::LayerOptions o) { return nn::MakeResNet50(1000, o); }},
      {"gpt",
       gpt_arch,
       {gpt.context},
       gpt.vocab,
       8,
       [gpt](nn::LayerOptions o) { return std::make_shared<nn::Gpt>(gpt, o); },
       true},
  };
}

// ---------------------------------------------------------------- modes

enum class Mode { kEager, kGraphDynamic, kGraphPlanned, kGraphParallel, kCudaGraph };
const char* kModeNames[] = {"eager", "graph-dynamic", "graph-planned", "graph-parallel", "cuda-graph"};
const char* Name(Mode m) { return kModeNames[int(m)]; }

// The CPU convolution in force (--cpu-conv, else LOOM_CPU_CONV; Note [Winograd]).
const char* CpuConvName() {
  switch (loom::cpu::GetCpuConvImpl()) {
    case loom::cpu::CpuConvImpl::kIm2col: return "im2col";
    case loom::cpu::CpuConvImpl::kWinograd: return "winograd";
    default: return "auto";
  }
}
bool UsesGraph(Mode m) { return m != Mode::kEager; }

Mode ParseMode(const std::string& s) {
  for (int i = 0; i < 5; ++i)
    if (s == kModeNames[i]) return Mode(i);
  throw UsageError("--mode: unknown mode '" + s +
                   "' (eager, graph-dynamic, graph-planned, graph-parallel, cuda-graph)");
}

// ---------------------------------------------------------------- flags

struct Flags {
  std::string model = "mlp";
  loom::Precision precision = loom::Precision::kFloat32;  // Note [Precision policy] (core/autocast.h)
  int64_t batch = 0;  // 0: the model's default
  std::vector<Mode> modes = {Mode::kEager, Mode::kGraphPlanned};
  std::string device = "cpu";
  int64_t steps = 20;
  int64_t warmup = 3;
  int64_t threads = 0;  // 0: the core count
  bool json = false;
  bool narrow = false;    // the short table (issue 33: the demo's), the full one stays in the JSON
  std::string json_file;  // the JSON lines go here as well (written atomically at the end)
  std::string timeline_dir;
  double lr = 0.01, momentum = 0.9;
  bool lr_set = false;
  std::string optimizer = "sgd";  // sgd (momentum) or adam
  int64_t gpt_layers = 4, gpt_dim = 256, gpt_heads = 4, context = 256, vocab = 1024;
  int64_t rounds = 1;
  double peak_gflops = 0;  // 0: measure it (CPU)
  // Graph pass switches set on the command line, in order (GraphOptions::passes; Note [Pass
  // switches and counters]); the others keep their defaults.
  std::vector<std::pair<std::string, bool>> passes;
  std::string cpu_conv;  // "": LOOM_CPU_CONV or auto; else auto, im2col or winograd (Note [Winograd])
  double budget_fraction = 0;  // GraphOptions::memory_budget = persistent + this x unbudgeted arena
  bool dist = false;              // data-parallel over MPI's world
  bool shard = false;             // --shard: also a sharded-state variant (Note [Sharded optimizer state])
  std::vector<int> simulate_ranks;  // data-parallel over simulated ranks (Note [Simulated ranks])
  std::vector<int> predict_ranks;   // Note [Predicting a data-parallel step] for these rank counts too
  std::string link_table;           // --link-table: comm_bench's JSON lines
  int profile_replays = 5;          // ... from the per-op medians of this many profiled replays
  double link_gbps = 25, latency_us = 10;
  double bucket_mb = 0, first_bucket_mb = -1;  // GraphOptions::bucket_bytes, first_bucket_bytes (0/-1: defaults)
  bool overlap = true;                         // GraphOptions::overlap_collectives
  bool fused_loss = true;  // Model::set_fused_loss: the GPT's head fused with its loss
};

const char* kUsage =
    "usage: loom-bench [--model mlp|cnn|resnet18|resnet50|gpt] [--batch N] [--mode M[,M...]]\n"
    "                  [--device cpu|cuda] [--steps N] [--warmup N] [--threads N] [--json] [--timeline DIR]\n"
    "                  [--rounds R] [--lr X] [--momentum X] [--peak-gflops G] [--pass NAME=on|off]...\n"
    "                  [--no-fuse-bias-act] [--no-fused-loss]\n"
    "                  [--plan-layouts | --no-plan-layouts] [--blocked-weights | --no-blocked-weights]\n"
    "                  [--cpu-conv auto|im2col|winograd]\n"
    "                  [--memory-budget-fraction F] [--dist | --simulate-ranks N[,N...] [--link-gbps G]\n"
    "                  [--latency-us L]] [--bucket-mb X] [--first-bucket-mb X] [--no-overlap]\n"
    "  --model M      mlp (784-1024-1024-10), cnn (small CNN, 3x32x32), resnet18 (CIFAR stem, 3x32x32),\n"
    "                 resnet50 (3x224x224, 1000 classes); default mlp\n"
    "  --batch N      samples per step (default: mlp 64, cnn 32, resnet18 16, resnet50 8)\n"
    "  --mode LIST    comma-separated: eager, graph-dynamic, graph-planned, graph-parallel, cuda-graph\n"
    "                 (default eager,graph-planned); each gets a fresh model from the same seed\n"
    "  --device D     cpu or cuda (default cpu)\n"
    "  --steps N      timed steps (default 20)\n"
    "  --warmup N     untimed steps first, at least 1 (the graph capture happens there; default 3)\n"
    "  --threads N    CPU threads for loom and OpenBLAS (default: the core count; with --dist, the\n"
    "                 launcher's share, LOOM_NUM_THREADS)\n"
    "  --rounds R     split the timed steps into R chunks and let the modes take turns, chunk by chunk\n"
    "                 (all models stay alive; memory is measured in round 1, per mode); default 1\n"
    "  --json         one JSON line per run on stdout; the table goes to stderr\n"
    "  --json-file F  also write the JSON lines to F (atomically, at the end); the table stays on stdout\n"
    "  --narrow       a short table: mode, ms/step, speed-up, peak MiB, arena / bound (the rest in the JSON)\n"
    "  --timeline DIR write the memory timelines of one step (eager, graph-dynamic, graph-planned:\n"
    "                 eager.csv, dynamic.csv, planned.csv, meta.json) and a Chrome trace of one planned\n"
    "                 replay (trace.json) into DIR; plot them with tools/plot_memory.py DIR\n"
    "  --lr X, --momentum X   SGD settings (default 0.01 and 0.9, as tools/bench_torch.py)\n"
    "  --optimizer O  sgd (momentum, the default) or adam (betas 0.9, 0.999, eps 1e-8; lr 0.001 unless --lr)\n"
    "  --model gpt    GPT-2's architecture (nn/transformer.h) on token sequences of a learnable chain:\n"
    "                 --gpt-layers L (4), --gpt-dim D (256), --gpt-heads H (4), --context T (256), --vocab V\n"
    "                 (1024); batch 8 by default. Its head's product and loss are one linear_cross_entropy,\n"
    "                 which makes no logits (Note [Cross-entropy fused with the head's product]);\n"
    "                 --no-fused-loss keeps the plain matmul and softmax_cross_entropy\n"
    "  --peak-gflops G the machine's FP32 peak for fraction_of_peak (default: measured at the start on\n"
    "                 the CPU with loom's thread count, as tools/fma_peak does)\n"
    "  --precision P    fp32 (default), bf16 or fp16: matrix products from bfloat16 or float16 operands,\n"
    "                 float32 elsewhere (Note [Precision policy] in core/autocast.h); fp16 with dynamic loss\n"
    "                 scaling (Note [Loss scaling]: the JSON gives the final scale and the skipped steps)\n"
    "  --pass NAME=on|off     switches the graph pass NAME on or off in every graph (GraphOptions::passes;\n"
    "                         --list-passes names them, with their defaults); repeatable. Shorthands:\n"
    "  --no-fuse-bias-act     --pass fuse_bias_act=off: matmul, add_bias and the activation stay apart\n"
    "  --plan-layouts, --no-plan-layouts  --pass plan_layouts=on|off: conv/batch-norm/relu/add activations\n"
    "                         in oneDNN's blocked layout (on by default)\n"
    "  --blocked-weights, --no-blocked-weights  --pass keep_weights_blocked=on|off: SGD/Adam-updated\n"
    "                         convolution weights (and their gradients and optimizer state) in oneDNN's\n"
    "                         blocked layout between replays (on by default)\n"
    "  --list-passes  prints the graph passes (name, default, devices, what it does) and exits\n"
    "  --cpu-conv I   CPU convolutions: auto (oneDNN direct, else im2col; the default), im2col, or winograd\n"
    "                 (oneDNN's Winograd F(4x4,3x3) for 3x3 stride-1 layers: faster, ~1e-4 relative rounding,\n"
    "                 more scratch; Note [Winograd] in device/cpu/kernels/conv_dnnl.h); default LOOM_CPU_CONV\n"
    "  --memory-budget-fraction F  planned graphs get memory_budget = persistent bytes + F x the arena\n"
    "                 of the same graph without a budget (captured first, in one untimed step)\n"
    "  --shard        with --dist, a third variant: DistOpt with sharded optimizer state (ZeRO stage 1)\n"
    "  --dist         data-parallel over the ranks of tools/launch.sh -n N (MPI, DistOpt): --batch is the\n"
    "                 global batch; each mode also runs compute-only (same per-rank batch, no communicator)\n"
    "                 to measure the exposed communication; rank 0 reports\n"
    "  --simulate-ranks LIST  e.g. 1,2,4,8: this process is rank 0 of N on a modelled network (ring\n"
    "                 all-reduce, alpha-beta model, the modelled time really waited on the collective\n"
    "                 lane); --batch is per rank; N = 1 runs without a communicator (the baseline)\n"
    "  --link-gbps G, --latency-us L  the simulated link (default 25 Gbit/s, 10 us per message), also the\n"
    "                 model of the predictions (tools/comm_bench measures them)\n"
    "  --predict-ranks LIST  e.g. 1,2,4,...,512: with --dist or --simulate-ranks, predict the step at these\n"
    "                 rank counts from each graph run's profiled replay (Note [Predicting a data-parallel step])\n"
    "  --profile-replays K  the predictions take each op's median time over K profiled replays (default 5)\n"
    "  --link-table F  also predict with tools/comm_bench's measured times (its --json-file F) where it has\n"
    "                 the collective and rank count (predicted_ms_per_step_table)\n"
    "  --bucket-mb X, --first-bucket-mb X  gradient bucket sizes of data-parallel graphs (default 25, 1)\n"
    "  --no-overlap   data-parallel graphs all-reduce after the whole backward (no overlap)\n"
    "Training: SGD, softmax cross-entropy, synthetic class-pattern data (fixed seed).\n"
    "A run whose loss or parameters did not change, or whose step count did not advance, is refused (exit 3).\n"
    "Memory: peak_bytes = device allocator peak over the (first round's) timed steps (requested bytes:\n"
    "parameters, "
    "optimizer state, inputs, intermediates, a planned arena); state_bytes = parameters + optimizer and\n"
    "BatchNorm state + the input batch; working_peak_bytes = peak_bytes - state_bytes;\n"
    "rss_peak_delta_bytes = process VmHWM at the end minus VmRSS before the model was built.\n";


std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep))
    if (!cur.empty()) out.push_back(cur);
  return out;
}

// Note [Pass switches and counters]: a name no registered pass has is a usage error that lists them.
void SetPass(Flags& f, const std::string& name, bool on) {
  try {
    loom::GraphOptions().passes.Set(name, on);
  } catch (const loom::ValueError& e) {
    throw UsageError(std::string("--pass: ") + e.what());
  }
  f.passes.emplace_back(name, on);
}

void ListPasses() {
  for (const loom::PassDef* p : loom::RegisteredPasses()) {
    std::string devices;
    for (loom::DeviceType t : {loom::DeviceType::kCPU, loom::DeviceType::kCUDA})
      if (p->devices & loom::DeviceBit(t)) devices += (devices.empty() ? "" : ",") + std::string(loom::Name(t));
    std::printf("%-24s %-4s %-9s %s\n", p->name, p->on ? "on" : "off", devices.c_str(), p->doc);
  }
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  loom::flags::Args a(argc, argv);
  while (a.Next()) {
    if (a.Is("--help") || a.Is("-h")) {
      std::cout << kUsage;
      std::exit(0);
    } else if (a.Is("--model")) {
      f.model = a.Value();
    } else if (a.Is("--optimizer")) {
      f.optimizer = a.Value();
      if (f.optimizer != "sgd" && f.optimizer != "adam")
        throw UsageError("--optimizer must be sgd or adam, got '" + f.optimizer + "'");
    } else if (a.Is("--gpt-layers")) {
      f.gpt_layers = a.Int(1);
    } else if (a.Is("--gpt-dim")) {
      f.gpt_dim = a.Int(1);
    } else if (a.Is("--gpt-heads")) {
      f.gpt_heads = a.Int(1);
    } else if (a.Is("--context")) {
      f.context = a.Int(1);
    } else if (a.Is("--vocab")) {
      f.vocab = a.Int(2);
    } else if (a.Is("--batch")) {
      f.batch = a.Int(1);
    } else if (a.Is("--mode")) {
      f.modes.clear();
      for (const std::string& m : Split(a.Value(), ',')) {
        Mode mode = ParseMode(m);
        if (std::find(f.modes.begin(), f.modes.end(), mode) == f.modes.end()) f.modes.push_back(mode);
      }
      if (f.modes.empty()) throw UsageError("--mode needs at least one mode");
    } else if (a.Is("--device")) {
      f.device = a.Value();
      if (f.device != "cpu" && f.device != "cuda")
        throw UsageError("--device must be cpu or cuda, got '" + f.device + "'");
    } else if (a.Is("--steps")) {
      f.steps = a.Int(2);
    } else if (a.Is("--warmup")) {
      f.warmup = a.Int(1);
    } else if (a.Is("--threads")) {
      f.threads = a.Int(1);
    } else if (a.Switch("--json")) {
      f.json = true;
    } else if (a.Switch("--narrow")) {
      f.narrow = true;
    } else if (a.Is("--json-file")) {
      f.json_file = a.Value();
    } else if (a.Is("--timeline")) {
      f.timeline_dir = a.Value();
    } else if (a.Is("--rounds")) {
      f.rounds = a.Int(1);
    } else if (a.Is("--lr")) {
      f.lr = a.Double();
      f.lr_set = true;
    } else if (a.Is("--momentum")) {
      f.momentum = a.Double();
    } else if (a.Is("--peak-gflops")) {
      f.peak_gflops = a.Double();
      if (!(f.peak_gflops > 0)) throw UsageError("--peak-gflops must be positive");
    } else if (a.Is("--no-fused-loss")) {
      f.fused_loss = false;
    } else if (a.Is("--precision")) {
      const std::string v = a.Value();
      try {
        f.precision = loom::PrecisionFromName(v);
      } catch (const loom::ValueError&) {
        throw UsageError("--precision wants fp32, bf16 or fp16, got '" + v + "'");
      }
    } else if (a.Is("--pass")) {
      const std::string v = a.Value();
      const size_t eq = v.find('=');
      const std::string name = v.substr(0, eq), state = eq == std::string::npos ? "" : v.substr(eq + 1);
      if (state != "on" && state != "off") throw UsageError("--pass wants NAME=on or NAME=off, got '" + v + "'");
      SetPass(f, name, state == "on");
    } else if (a.Switch("--list-passes")) {
      ListPasses();
      std::exit(0);
    } else if (a.Switch("--no-fuse-bias-act")) {
      SetPass(f, "fuse_bias_act", false);
    } else if (a.Switch("--plan-layouts")) {
      SetPass(f, "plan_layouts", true);
    } else if (a.Switch("--no-plan-layouts")) {
      SetPass(f, "plan_layouts", false);
    } else if (a.Switch("--blocked-weights")) {
      SetPass(f, "keep_weights_blocked", true);
    } else if (a.Switch("--no-blocked-weights")) {
      SetPass(f, "keep_weights_blocked", false);
    } else if (a.Is("--cpu-conv")) {
      f.cpu_conv = a.Value();
      if (f.cpu_conv == "auto") loom::cpu::SetCpuConvImpl(loom::cpu::CpuConvImpl::kAuto);
      else if (f.cpu_conv == "im2col") loom::cpu::SetCpuConvImpl(loom::cpu::CpuConvImpl::kIm2col);
      else if (f.cpu_conv == "winograd") loom::cpu::SetCpuConvImpl(loom::cpu::CpuConvImpl::kWinograd);
      else throw UsageError("--cpu-conv must be auto, im2col or winograd, got '" + f.cpu_conv + "'");
    } else if (a.Switch("--shard")) {
      f.shard = true;
    } else if (a.Switch("--dist")) {
      f.dist = true;
    } else if (a.Is("--link-table")) {
      f.link_table = a.Value();
    } else if (a.Is("--profile-replays")) {
      f.profile_replays = int(a.Int(1));
    } else if (a.Is("--predict-ranks")) {
      f.predict_ranks.clear();
      for (const std::string& n : Split(a.Value(), ',')) f.predict_ranks.push_back(int(loom::flags::ParseInt("--predict-ranks", n, 1)));
    } else if (a.Is("--simulate-ranks")) {
      f.simulate_ranks.clear();
      for (const std::string& n : Split(a.Value(), ',')) f.simulate_ranks.push_back(int(loom::flags::ParseInt("--simulate-ranks", n, 1)));
      if (f.simulate_ranks.empty()) throw UsageError("--simulate-ranks needs at least one rank count");
    } else if (a.Is("--link-gbps")) {
      f.link_gbps = a.Double();
      if (!(f.link_gbps > 0)) throw UsageError("--link-gbps must be positive");
    } else if (a.Is("--latency-us")) {
      f.latency_us = a.Double();
    } else if (a.Is("--bucket-mb")) {
      f.bucket_mb = a.Double();
      if (!(f.bucket_mb > 0)) throw UsageError("--bucket-mb must be positive");
    } else if (a.Is("--first-bucket-mb")) {
      f.first_bucket_mb = a.Double();
    } else if (a.Switch("--no-overlap")) {
      f.overlap = false;
    } else if (a.Is("--memory-budget-fraction")) {
      f.budget_fraction = a.Double();
      if (!(f.budget_fraction > 0)) throw UsageError("--memory-budget-fraction must be positive");
    } else {
      a.Unknown();
    }
  }
  bool known = false;
  for (const ModelSpec& s : Zoo()) known = known || s.name == f.model;
  if (!known) throw UsageError("--model must be mlp, cnn, resnet18, resnet50 or gpt, got '" + f.model + "'");
  if (f.gpt_dim % f.gpt_heads != 0)
    throw UsageError(loom::detail::Cat("--gpt-dim ", f.gpt_dim, " must be a multiple of --gpt-heads ", f.gpt_heads));
  if (f.optimizer == "adam" && !f.lr_set) f.lr = 1e-3;
  for (Mode m : f.modes)
    if (m == Mode::kCudaGraph && f.device != "cuda")
      throw UsageError("--mode cuda-graph needs --device cuda: the CPU has no device graphs");
  if (f.dist && !f.simulate_ranks.empty()) throw UsageError("--dist and --simulate-ranks exclude each other");
  if (!f.predict_ranks.empty() && !f.dist && f.simulate_ranks.empty())
    throw UsageError("--predict-ranks needs --dist or --simulate-ranks (a graph with collectives to profile)");
  if (f.shard && !f.dist) throw UsageError("--shard needs --dist (a simulated rank cannot shard: Note [Sharded optimizer state])");
  if (!f.timeline_dir.empty() && (f.dist || !f.simulate_ranks.empty()))
    throw UsageError("--timeline is for one process without a communicator");
  return f;
}

// ---------------------------------------------------------------- data
// Synthetic, deterministic, learnable: sample s belongs to class c(s); its values are c's binary
// prototype (blocks of 4x4 pixels per channel for images, single features otherwise), blended
// with another class's prototype and uniform noise. Everything is a counter-based hash of
// (seed, sample, position), so tools/bench_torch.py generates the same recipe in numpy.

uint64_t Mix64(uint64_t z) {  // splitmix64's finaliser
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
float Unit(uint64_t h) { return float(h >> 40) * (1.0f / 16777216.0f); }  // [0, 1), 24 bits

// One step's batch on the host: float samples, or a language model's tokens, and the labels.
struct HostBatch {
  std::vector<float> x;
  std::vector<int32_t> tokens, y;
  void Into(Tensor tx, Tensor ty) const {  // handles on the tensors to fill
    if (tx.dtype() == DType::kInt32)
      tx.CopyFrom(tokens);
    else
      tx.CopyFrom(x);
    ty.CopyFrom(y);
  }
};

struct Data {
  int64_t n = 0, dim = 0;
  std::vector<float> x;    // (n, dim)
  std::vector<int32_t> y;  // (n)
  // A language model's (lm): n sequences of dim + 1 tokens; a sample is the first dim, its
  // labels the last dim.
  bool lm = false;
  std::vector<int32_t> seq;  // (n, dim + 1)

  // Samples [step * batch, (step + 1) * batch) modulo n; with --dist, this rank's `rows` of them
  // from row `first` on.
  void Batch(int64_t step, int64_t batch, HostBatch& b, int64_t first = 0, int64_t rows = -1) const {
    rows = rows < 0 ? batch : rows;
    if (!lm) return loom::examples::CopyBatchRows(x, y, dim, step, batch, first, rows, b.x, b.y);
    b.tokens.resize(size_t(rows * dim));
    b.y.resize(size_t(rows * dim));
    for (int64_t j = 0; j < rows; ++j) {
      const int32_t* s = &seq[size_t(((step * batch + first + j) % n) * (dim + 1))];
      std::copy_n(s, dim, b.tokens.begin() + j * dim);
      std::copy_n(s + 1, dim, b.y.begin() + j * dim);
    }
  }
};

// Prototype bit of class c at feature p (image features map to 4x4 blocks of one channel).
bool ProtoBit(const Shape& sample, uint64_t seed, int64_t c, int64_t p) {
  int64_t key = p;
  if (sample.size() == 3) {
    int64_t h = sample[1], w = sample[2];
    int64_t ch = p / (h * w), r = (p / w) % h, col = p % w;
    key = (ch * ((h + 3) / 4) + r / 4) * ((w + 3) / 4) + col / 4;
  }
  return Unit(Mix64(seed ^ Mix64(uint64_t(c) * 1000003ULL + uint64_t(key)))) < 0.25f;
}

// A language model's text: sequences of a first-order chain over the vocabulary. Each next token
// is, with probability 3/4, the current token's fixed successor (a hash of it), else a uniformly
// drawn one: learnable (the loss falls from ln V toward about a quarter of it), and a counter-
// based hash of (seed, sequence, position), as tools/bench_common.py makes it.
Data MakeTokens(const ModelSpec& spec, int64_t batch, uint64_t seed) {
  Data d;
  d.lm = true;
  d.dim = spec.sample[0];
  d.n = std::max<int64_t>(2 * batch, 64);
  const uint64_t v = uint64_t(spec.classes);
  d.seq.resize(size_t(d.n * (d.dim + 1)));
  for (int64_t s = 0; s < d.n; ++s) {
    const uint64_t hs = Mix64(seed + 0x100000000ULL * uint64_t(s + 1));
    int32_t* t = &d.seq[size_t(s * (d.dim + 1))];
    t[0] = int32_t(Mix64(hs ^ 1) % v);
    for (int64_t i = 1; i <= d.dim; ++i) {
      const uint64_t r = Mix64(hs + uint64_t(i) + 16);
      t[i] = (r >> 62) != 0 ? int32_t(Mix64(seed ^ (uint64_t(t[i - 1]) + 0x5bd1e995ULL)) % v) : int32_t((r >> 8) % v);
    }
  }
  d.y.resize(size_t(d.n * d.dim));
  for (int64_t s = 0; s < d.n; ++s)
    std::copy_n(&d.seq[size_t(s * (d.dim + 1)) + 1], d.dim, d.y.begin() + s * d.dim);
  return d;
}

Data MakeData(const ModelSpec& spec, int64_t batch, uint64_t seed) {
  if (spec.lm) return MakeTokens(spec, batch, seed);
  Data d;
  d.dim = loom::NumElements(spec.sample);
  // A pool of samples, cycled: at least two batches, about 64 MB when samples are large. When
  // that pool cannot hold a sample of every class (ResNet-50: 111 images of 1000 classes), the
  // few steps a benchmark runs would see each sample once and each class about never, and the
  // loss rises in every framework; so the pool is then two batches, revisited every other step,
  // and the loss falls (ResNet-50 b8: 7.83 -> 2.31 over 8 steps). tools/bench_common.py: same.
  const int64_t pool = std::min<int64_t>(1024, std::max<int64_t>(64, (64ll << 20) / (d.dim * 4)));
  d.n = pool < spec.classes ? 2 * batch : std::max<int64_t>(2 * batch, pool);
  d.x.resize(size_t(d.n * d.dim));
  d.y.resize(size_t(d.n));
  for (int64_t s = 0; s < d.n; ++s) {
    uint64_t hs = Mix64(seed + 0x100000000ULL * uint64_t(s + 1));
    int64_t c = int64_t(Mix64(hs ^ 1) % uint64_t(spec.classes));
    int64_t other = int64_t(Mix64(hs ^ 2) % uint64_t(spec.classes));
    float mix = 0.45f * Unit(Mix64(hs ^ 3));
    d.y[size_t(s)] = int32_t(c);
    float* xs = &d.x[size_t(s * d.dim)];
    for (int64_t p = 0; p < d.dim; ++p) {
      float v = (ProtoBit(spec.sample, seed, c, p) ? 1.0f - mix : 0.0f) +
                (ProtoBit(spec.sample, seed, other, p) ? mix : 0.0f);
      xs[p] = v + (Unit(Mix64(hs + uint64_t(p) + 16)) - 0.5f);
    }
  }
  return d;
}

// FNV-1a of the first sample's bytes, then every label's: tools/bench_torch.py prints the same.
std::string DataChecksum(const Data& d) {
  uint64_t h = 1469598103934665603ULL;
  auto eat = [&](const void* p, size_t n) {
    const unsigned char* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ULL;
  };
  if (d.lm)
    eat(d.seq.data(), size_t(d.dim) * sizeof(int32_t));  // the first sample's tokens
  else
    eat(d.x.data(), size_t(d.dim) * sizeof(float));
  eat(d.y.data(), d.y.size() * sizeof(int32_t));
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
  return buf;
}

// ---------------------------------------------------------------- process memory

size_t StatusKb(const char* key) {  // a "VmRSS:   1234 kB" line of /proc/self/status
  std::ifstream f("/proc/self/status");
  std::string line;
  size_t len = std::strlen(key);
  while (std::getline(f, line))
    if (line.compare(0, len, key) == 0) return size_t(std::strtoull(line.c_str() + len + 1, nullptr, 10));
  return 0;
}

// Resets the kernel's resident-set high-water mark (VmHWM) to the current RSS; false when the
// kernel refuses (then VmHWM is the whole process's, and rss_peak_delta_bytes an upper bound).
bool ResetHighWaterMark() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f.good()) return false;
  f << "5";
  f.flush();
  return f.good();
}

// ---------------------------------------------------------------- one run

// Note [Scaling runs]
// With --dist or --simulate-ranks each mode runs as several variants, taking turns with --rounds
// like modes do (Note [Rounds]): with --dist, "compute only" (this rank's share of the batch,
// plain SGD, no communicator) and "N ranks" (DistOpt over MPI's world); with --simulate-ranks,
// N = 1 (plain SGD on the per-rank batch) and each N > 1 (DistOpt over a simulated
// communicator). A variant's exposed communication is its median step time minus that of the
// same mode without a communicator; its scaling efficiency is the ratio of the two step times
// (the items per second of N ranks over N times those of one).
struct Variant {
  Mode mode;
  int ranks = 1;      // the ranks whose items a step counts
  bool comm = false;  // gradients all-reduced over a communicator (DistOpt)
  bool sharded = false;  // --shard: DistOpt keeps 1/N of the optimizer state (Note [Sharded optimizer state])
};

// The ranks on one host and its cores, for Note [Ranks sharing cores].
struct HostCores {
  int ranks = 1, cores = 1;
};

struct RunResult {
  Mode mode;
  Variant variant;
  int64_t rows = 0;  // samples per step on this rank
  // The simulated communicator's statistics over the timed steps, per step.
  bool simulated = false;
  double comm_modelled_ms = 0, comm_waited_ms = 0, collectives_per_step = 0, comm_bytes_per_step = 0;
  // Note [Predicting a data-parallel step], from one profiled serial replay after the timed steps.
  bool predicted = false;
  loom::StepPrediction prediction, prediction_tree;  // for this run's ranks: all-reduces by ring, by tree
  loom::StepPrediction prediction_table;              // --link-table: measured collective times
  HostCores host;  // the run's ranks on this host and its cores (Note [Ranks sharing cores]; 1, 1: not applied)
  bool has_table_prediction = false;
  struct AtRanks {
    int ranks;
    loom::StepPrediction ring, tree;
  };
  std::vector<AtRanks> predictions;  // --predict-ranks
  struct CollectiveCost {
    std::string op;
    double wire_bytes, ring_s, tree_s, table_s, wait_s, in_replay_s;  // table_s < 0: no table
  };
  std::vector<CollectiveCost> collectives;  // each collective of the profiled replay
  std::vector<double> ms;  // timed steps
  double median = 0, p10 = 0, p90 = 0;
  double first_loss = 0, last_loss = 0;
  size_t peak_bytes = 0, state_bytes = 0, rss_delta = 0, param_bytes = 0;
  size_t optimizer_state_bytes = 0;  // momentum, Adam's moments: this rank's
  size_t fused_param_bytes = 0;  // parameters whose gradient the graph computes into the update
  uint64_t final_checksum = 0;   // parameters and BatchNorm statistics after the last step
  bool rss_exact = true;
  bool has_graph = false;
  loom::GraphStats gstats;
  size_t memory_budget = 0;  // its GraphOptions::memory_budget
  int64_t optimizer_steps = 0;
  // Note [Loss scaling] (fp16): the scale after the last step and the steps skipped; -1: none.
  double loss_scale = -1;
  int64_t skipped_steps = -1;
};

double Percentile(std::vector<double> v, double q) {  // nearest rank
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[size_t(std::lround(q * double(v.size() - 1)))];
}

// FNV-1a over every parameter's bytes, and with states the BatchNorm running statistics too.
uint64_t ParamChecksum(nn::Model& m, bool with_states = false) {
  uint64_t h = 1469598103934665603ULL;
  auto named = m.Params();
  if (with_states)
    for (auto& s : m.States()) named.push_back(s);
  for (auto& p : named) {
    std::vector<float> v = p.second.ToVector<float>();
    const unsigned char* b = reinterpret_cast<const unsigned char*>(v.data());
    for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ b[i]) * 1099511628211ULL;
  }
  return h;
}

size_t StateBytes(nn::Model& m, const Tensor& x, const Tensor& y) {
  size_t bytes = x.nbytes() + y.nbytes();
  for (auto& p : m.Params()) bytes += p.second.nbytes();
  for (auto& s : m.States()) bytes += s.second.nbytes();
  return bytes + m.optimizer().state_bytes();  // a DistOpt's are those of the optimizer it wraps
}

// Parameter traffic of one SGD-momentum step, unfused: the forward reads W (1 pass), the backward
// reads W for the input gradients (1; the first layer's is not needed) and writes dW (1), the
// update reads W, dW and the momentum and writes W and the momentum (5): about 8 passes over the
// parameters' bytes. What an MLP at a small batch cannot avoid: its time is bounded by these bytes
// over the memory bandwidth. A graph that computes a weight gradient into its update (Note
// [Weight gradient into the update]) neither writes dW nor reads it back: 6 passes over that
// weight. param_traffic_bytes_per_step = 8 * param_bytes - 2 * fused_param_bytes.
size_t ParamBytes(nn::Model& m) {
  size_t b = 0;
  for (auto& p : m.Params()) b += p.second.nbytes();
  return b;
}

// The options of a mode's graphs (each Model owns its graphs and their options).
loom::GraphOptions GraphOptionsFor(Mode mode, const Flags& f, bool fuse = true) {
  loom::GraphOptions o;
  o.run_passes = fuse;
  for (const auto& [name, on] : f.passes) o.passes.Set(name, on);
  o.memory = mode == Mode::kGraphDynamic ? loom::MemoryMode::kDynamic : loom::MemoryMode::kPlanned;
  o.device_graph = mode == Mode::kCudaGraph;
  if (f.bucket_mb > 0) o.bucket_bytes = int(f.bucket_mb * (1 << 20));
  if (f.first_bucket_mb >= 0) o.first_bucket_bytes = int(f.first_bucket_mb * (1 << 20));
  o.overlap_collectives = f.overlap;
  return o;
}

// The rows of each batch of `batch` samples that this rank trains on (rows 0: all of them).
struct Shard {
  int64_t first = 0, rows = 0;
};

// What the JSON's "optimizer" says, as tools/bench_common.py says it.
std::string OptimizerName(const Flags& f) {
  char buf[128];
  if (f.optimizer == "adam")
    std::snprintf(buf, sizeof buf, "adam lr %g betas 0.9,0.999 eps 1e-08", f.lr);
  else
    std::snprintf(buf, sizeof buf, "sgd lr %g momentum %g", f.lr, f.momentum);
  return buf;
}

// A fresh model from the seed, compiled for `mode`, with its input tensors.
// With a communicator, the optimizer is DistOpt over it (Note [Scaling runs]).
struct Session {
  std::unique_ptr<nn::Model> model;
  Tensor x, y;
  Shard shard;
};

Session NewSession(const Flags& f, const ModelSpec& spec, int64_t batch, Mode mode,
                   const std::shared_ptr<loom::Device>& dev, const Data& data, bool fuse = true,
                   const std::shared_ptr<loom::Communicator>& comm = nullptr, Shard shard = {}, bool sharded = false) {
  dev->SetRandSeed(kSeed);
  nn::LayerOptions lo;
  lo.device = dev;
  Session s;
  s.shard = shard.rows > 0 ? shard : Shard{0, batch};
  std::shared_ptr<nn::Optimizer> opt;
  if (f.optimizer == "adam")
    opt = std::make_shared<nn::Adam>(f.lr);
  else
    opt = std::make_shared<nn::SGD>(f.lr, f.momentum);
  std::shared_ptr<nn::Layer> net = spec.make(lo);
  if (comm) {
    // Sharded buckets take the graph's bucket size (--bucket-bytes), in every mode.
    const size_t bucket = sharded ? size_t(GraphOptionsFor(mode, f).bucket_bytes) : size_t(25 << 20);
    auto d = std::make_shared<nn::DistOpt>(opt, comm, std::nullopt, bucket, sharded);
    std::vector<Tensor> params;
    for (auto& p : net->Params()) params.push_back(p.second);
    d->BroadcastParameters(params);  // the same seed on every rank already; rank 0's, to be sure
    opt = d;
  }
  s.model = std::make_unique<nn::Model>(net, opt);
  s.model->set_precision(f.precision);
  // A loop that reads only the loss, as the peers' steps: the output (a language model's
  // logits) stays in the plan (Note [A step that keeps no output]).
  s.model->set_keep_output(false);
  s.model->set_fused_loss(f.fused_loss);
  Shape xs = {s.shard.rows};
  xs.insert(xs.end(), spec.sample.begin(), spec.sample.end());
  s.x = ops::Empty(xs, spec.lm ? DType::kInt32 : DType::kFloat32, dev);
  s.y = ops::Empty({spec.lm ? s.shard.rows * spec.sample[0] : s.shard.rows}, DType::kInt32, dev);
  HostBatch hb;
  data.Batch(0, batch, hb, s.shard.first, s.shard.rows);
  hb.Into(s.x, s.y);
  loom::GraphOptions o = GraphOptionsFor(mode, f, fuse);
  if (f.budget_fraction > 0 && fuse && UsesGraph(mode) && o.memory == loom::MemoryMode::kPlanned) {
    // Note [Recomputing for a memory budget]: the budget is relative to this graph. (Not for the
    // FLOP-count capture, fuse = false: flops_per_step stays the model's, without recomputation.)
    Flags plain = f;
    plain.budget_fraction = 0;
    Session probe = NewSession(plain, spec, batch, mode, dev, data, fuse, comm, shard, sharded);
    probe.model->TrainOneBatch(probe.x, probe.y);
    const loom::GraphStats& st = probe.model->train_graph()->stats();
    o.memory_budget = st.persistent_bytes + size_t(f.budget_fraction * double(st.arena_bytes));
    dev->SetRandSeed(kSeed);
  }
  s.model->Compile({s.x}, /*is_train=*/true, /*use_graph=*/UsesGraph(mode),
                   /*sequential=*/mode != Mode::kGraphParallel, o);
  return s;
}

// One mode's run in progress: its model, the steps taken so far, its results.
struct ModeRun {
  RunResult r;
  Session s;
  uint64_t sum0 = 0;  // parameter checksum before training
  int64_t done = 0;   // steps taken
  std::shared_ptr<loom::SimulatedCommunicator> sim;  // --simulate-ranks with N > 1
};

// Note [Predicting a data-parallel step]: serial replays, profiled (--profile-replays training
// steps more, after the checks above): their compute ops' median times, and each collective's name and bytes on the wire,
// whose time the model gives for any number of ranks and link (Predict). A serial replay (every
// mode but graph-parallel) runs collectives in line: no lane.
struct ReplayProfile {
  std::vector<double> seconds;  // compute ops: measured
  std::vector<double> cpu_seconds;  // compute ops: the process's CPU time (Note [Ranks sharing cores])
  std::vector<double> in_replay;  // collectives: measured in the replay (with the wait for the other ranks)
  // collectives: each replay's compute time since the previous collective (for the first, since
  // the last one of the step before); Note [Waiting for the slowest rank]
  std::vector<std::vector<double>> before;
  std::vector<std::string> collective;  // "" for compute ops
  std::vector<double> wire_bytes;
  std::vector<std::vector<int>> succs;
};

// `replays` profiled serial replays; each compute op's time is its median over them (one replay
// on a shared machine catches some ops descheduled).
ReplayProfile ProfileReplays(loom::Graph& g, int replays) {
  const std::vector<loom::OpRecord>& ops = g.ops().ops;
  std::vector<std::vector<double>> times(ops.size()), cpu(ops.size());
  g.set_profile(true);
  for (int k = 0; k < replays; ++k) {
    g.Run(/*sequential=*/true);
    const std::vector<loom::OpTiming>& prof = g.last_profile();
    for (size_t i = 0; i < ops.size(); ++i) {
      times[i].push_back((prof[i].end_us - prof[i].start_us) * 1e-6);
      cpu[i].push_back(prof[i].cpu_us * 1e-6);
    }
  }
  g.set_profile(false);
  const loom::Schedule& sched = g.schedule();
  ReplayProfile p;
  p.succs = sched.succs;
  p.before.resize(ops.size());
  for (int k = 0; k < replays; ++k) {
    double since = 0;  // the ops after the step's last collective come before its first
    for (size_t i = ops.size(); i-- > 0 && sched.lane[i] != loom::Lane::kCollective;) since += times[i][size_t(k)];
    for (size_t i = 0; i < ops.size(); ++i) {
      if (sched.lane[i] != loom::Lane::kCollective) {
        since += times[i][size_t(k)];
      } else {
        p.before[i].push_back(since);
        since = 0;
      }
    }
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    const bool collective = sched.lane[i] == loom::Lane::kCollective;
    p.seconds.push_back(collective ? 0.0 : Percentile(times[i], 0.5));
    p.cpu_seconds.push_back(collective ? 0.0 : Percentile(cpu[i], 0.5));
    p.in_replay.push_back(collective ? Percentile(times[i], 0.5) : 0.0);
    p.collective.push_back(collective ? ops[i].name() : "");
    double bytes = ops[i].inputs.empty() ? 0 : double(ops[i].inputs[0].nbytes());
    const std::string name = ops[i].name();
    if ((name == "allreduce" || name == "reducescatter") && ops[i].attrs.Int("compress", 0) != 0)
      bytes = double(ops[i].inputs[0].numel()) * 2;  // Note [Gradients on the wire]: 16 bits
    p.wire_bytes.push_back(bytes);
  }
  return p;
}

// --link-table FILE: tools/comm_bench's measured medians. A collective of a measured kind and
// rank count takes the time interpolated (log-log) between the measured sizes around its bytes;
// any other, the alpha-beta model. It separates the simulator's structure (profile, schedule,
// lane) from the model's fit when a prediction is checked against a measured run.
struct LinkTable {
  std::map<std::pair<std::string, int>, std::vector<std::pair<double, double>>> rows;  // -> (bytes, s)
  bool Lookup(const std::string& op, int ranks, double bytes, double* seconds) const {
    // allgather_shards' bytes are its whole buffer, as comm_bench's all-gather rows are.
    const std::string kind = op == "allgather_shards" ? "allgather" : op == "allgather" ? "" : op;
    auto it = rows.find({kind, ranks});
    if (it == rows.end() || it->second.size() < 2) return false;
    const auto& v = it->second;
    size_t k = 1;
    while (k + 1 < v.size() && v[k].first < bytes) ++k;
    const double x0 = std::log(v[k - 1].first), x1 = std::log(v[k].first);
    const double y0 = std::log(v[k - 1].second), y1 = std::log(v[k].second);
    const double t = (std::log(std::max(bytes, 1.0)) - x0) / (x1 - x0);
    *seconds = std::exp(y0 + t * (y1 - y0));
    return true;
  }
};

double JsonField(const std::string& line, const std::string& key) {
  const size_t at = line.find("\"" + key + "\": ");
  return at == std::string::npos ? std::nan("") : std::atof(line.c_str() + at + key.size() + 4);
}

LinkTable LoadLinkTable(const std::string& path) {
  LinkTable t;
  std::istringstream in(loom::ReadFile(path, "loom-bench --link-table", 1 << 24));
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find("\"collective\": \"");
    if (at == std::string::npos) continue;
    const size_t from = at + 15, to = line.find('"', from);
    const double ranks = JsonField(line, "ranks"), bytes = JsonField(line, "bytes"), us = JsonField(line, "median_us");
    if (to == std::string::npos || !(ranks >= 2) || !(bytes > 0) || !(us > 0))
      throw UsageError(loom::detail::Cat("--link-table ", path, ": not a comm_bench line: ", line.substr(0, 120)));
    t.rows[{line.substr(from, to - from), int(ranks)}].emplace_back(bytes, us * 1e-6);
  }
  if (t.rows.empty()) throw UsageError(loom::detail::Cat("--link-table ", path, ": no comm_bench lines in it"));
  for (auto& kv : t.rows) std::sort(kv.second.begin(), kv.second.end());
  return t;
}

// The ranks on this host and its cores (HostCores) from OpenMPI's local size and this process's
// affinity (tools/launch.sh pins no rank, so it is the host's cores).
HostCores ThisHost() {
  HostCores h;
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  h.ranks = local && std::atoi(local) > 0 ? std::atoi(local) : 1;
  cpu_set_t cpus;
  h.cores = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? std::max(1, CPU_COUNT(&cpus)) : 1;
  return h;
}

// The step on `link` (its ranks), all-reduces by the ring or the tree; with `table`, measured
// times where it has them; with `host`, the compute ops' cores shared by its ranks (Note [Ranks
// sharing cores]; null: each rank has its cores to itself).
loom::StepPrediction Predict(const ReplayProfile& p, const loom::SimulatedLink& link, bool lane_overlaps, bool tree,
                             const LinkTable* table = nullptr, const HostCores* host = nullptr) {
  const size_t n = p.seconds.size();
  std::vector<double> costs(n);
  std::vector<bool> lane(n);
  // Note [Ranks sharing cores], per stretch of compute between two collectives in issue order
  // (the ops after the step's last collective join those before its first, as in `before`):
  // each op's time stretched by max(wall, cpu x ranks / cores) / wall of its stretch.
  std::vector<int> stretch(n, 0);
  std::vector<double> wall_of(1, 0.0), cpu_of(1, 0.0);
  for (size_t i = 0; i < n; ++i) {
    if (!p.collective[i].empty()) {
      wall_of.push_back(0), cpu_of.push_back(0);
      continue;
    }
    stretch[i] = int(wall_of.size()) - 1;
    wall_of.back() += p.seconds[i];
    cpu_of.back() += p.cpu_seconds[i];
  }
  if (wall_of.size() > 1) {  // the last stretch wraps around to the first
    for (size_t i = 0; i < n; ++i)
      if (stretch[i] == int(wall_of.size()) - 1) stretch[i] = 0;
    wall_of[0] += wall_of.back(), cpu_of[0] += cpu_of.back();
  }
  std::vector<double> factor(wall_of.size(), 1.0);
  for (size_t k = 0; host && k < factor.size(); ++k)
    if (wall_of[k] > 0) factor[k] = loom::SharedCoresSeconds(wall_of[k], cpu_of[k], host->ranks, host->cores) / wall_of[k];
  double wait = 0, shared = 0;
  for (size_t i = 0; i < n; ++i) {
    lane[i] = !p.collective[i].empty() && lane_overlaps;
    if (p.collective[i].empty()) {
      costs[i] = p.seconds[i] * factor[size_t(stretch[i])];
      shared += costs[i] - p.seconds[i];
      continue;
    }
    if (!table || !table->Lookup(p.collective[i], link.ranks, p.wire_bytes[i], &costs[i]))
      costs[i] = loom::CollectiveSeconds(p.collective[i], p.wire_bytes[i], link, tree);
    const double w = loom::StragglerSeconds(p.before[i], link.ranks);  // Note [Waiting for the slowest rank]
    costs[i] += w;
    wait += w;
  }
  loom::StepPrediction r = loom::PredictStep(p.succs, lane, costs);
  r.wait_s = wait;
  r.shared_cores_s = shared;
  // Collectives in line (no lane) count as exposed communication, not compute.
  r.compute_s = 0;
  for (size_t i = 0; i < costs.size(); ++i)
    if (p.collective[i].empty()) r.compute_s += costs[i];
  r.comm_s = 0;
  for (size_t i = 0; i < costs.size(); ++i)
    if (!p.collective[i].empty()) r.comm_s += costs[i];
  r.exposed_s = r.step_s - r.compute_s;
  return r;
}

// The runs of Note [Scaling runs]: each mode without a communicator, then with one.
std::vector<Variant> Variants(const Flags& f, int world) {
  std::vector<Variant> v;
  for (Mode m : f.modes) {
    if (f.dist) {
      v.push_back({m, world, false});
      v.push_back({m, world, true});
      if (f.shard) v.push_back({m, world, true, true});
    } else if (!f.simulate_ranks.empty()) {
      for (int n : f.simulate_ranks) v.push_back({m, n, n > 1});
    } else {
      v.push_back({m, 1, false});
    }
  }
  return v;
}

std::string Label(const Flags& f, const RunResult& r) {
  std::string s = Name(r.mode);
  if (f.dist)
    s += r.variant.comm ? loom::detail::Cat(", ", r.variant.ranks, " ranks (MPI", r.variant.sharded ? ", sharded" : "", ")")
                        : ", compute only";
  else if (!f.simulate_ranks.empty())
    s += loom::detail::Cat(", ", r.variant.ranks, r.variant.ranks > 1 ? " ranks (simulated)" : " rank");
  return s;
}

// One training step on batch number run.done; returns its time in ms (copy-in to loss read).
double Step(ModeRun& run, const Data& data, int64_t batch, loom::Device& dev, HostBatch& hb) {
  data.Batch(run.done, batch, hb, run.s.shard.first, run.s.shard.rows);
  auto t0 = std::chrono::steady_clock::now();
  hb.Into(run.s.x, run.s.y);
  double loss = run.s.model->TrainOneBatch(run.s.x, run.s.y).loss.Item();  // a host read: synchronises
  dev.Synchronize();
  auto t1 = std::chrono::steady_clock::now();
  // Graph mode: later batches go straight into the graph's own input tensors (no copy, no
  // second input buffer), as a data loader feeding a replayed step does.
  if (run.s.model->use_graph()) {
    std::vector<Tensor> in = run.s.model->GraphInputs(run.s.x, run.s.y);
    if (!in.empty() && in[0].block() != run.s.x.block()) {
      run.s.x = in[0];
      run.s.y = in[1];
    }
  }
  if (!std::isfinite(loss))
    throw NotTrainedError(loom::detail::Cat("mode ", Name(run.r.mode), ": the loss is ", loss, " at step ",
                                            run.done + 1, ": training diverged"));
  if (run.done == 0) run.r.first_loss = loss;
  run.r.last_loss = loss;
  ++run.done;
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

// Note [Rounds]
// On a shared machine speed drifts over seconds, so timing the modes one after the other can
// favour whichever ran in a quiet moment. With --rounds R the timed steps are split into R
// chunks and the modes take turns, chunk by chunk, each keeping its model (and graph) alive.
// Memory is measured in round 1 only, in each mode's own window: its model is built, warmed up
// and timed while the other modes' models sit idle, holding constant memory, which is
// subtracted (peak_bytes = allocator peak in the window - live bytes before the model existed).
std::vector<RunResult> RunModes(const Flags& f, const ModelSpec& spec, int64_t batch,
                                const std::shared_ptr<loom::Device>& dev, const Data& data,
                                const loom::examples::Dist& dist) {
  const std::vector<Variant> variants = Variants(f, dist.world());
  std::vector<std::unique_ptr<ModeRun>> runs;
  HostBatch hb;
  const int64_t rounds = std::max<int64_t>(1, std::min(f.rounds, f.steps));
  auto chunk = [&](int64_t round) { return f.steps / rounds + (round < f.steps % rounds ? 1 : 0); };
  for (int64_t round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < variants.size(); ++i) {
      if (round > 0) {
        for (int64_t k = 0; k < chunk(round); ++k) runs[i]->r.ms.push_back(Step(*runs[i], data, batch, *dev, hb));
        continue;
      }
      auto run = std::make_unique<ModeRun>();
      run->r.mode = variants[i].mode;
      run->r.variant = variants[i];
      dev->EmptyCache();  // earlier modes' cached free memory goes back: RSS growth is this mode's
      malloc_trim(0);
      run->r.rss_exact = ResetHighWaterMark();
      size_t rss0_kb = StatusKb("VmRSS:");
      size_t live0 = dev->stats().live_bytes;
      std::shared_ptr<loom::Communicator> comm;
      Shard shard;
      if (f.dist) shard = {batch / dist.world() * dist.rank(), batch / dist.world()};
      if (variants[i].comm && f.dist) comm = dist.comm();
      if (variants[i].comm && !f.dist) {
        run->sim = std::make_shared<loom::SimulatedCommunicator>(
            loom::SimulatedLink{variants[i].ranks, f.link_gbps, f.latency_us});
        comm = run->sim;
      }
      run->s = NewSession(f, spec, batch, run->r.mode, dev, data, true, comm, shard, variants[i].sharded);
      run->r.rows = run->s.shard.rows;
      run->sum0 = ParamChecksum(*run->s.model);
      for (int64_t w = 0; w < f.warmup; ++w) Step(*run, data, batch, *dev, hb);
      if (run->sim) run->sim->ResetStats();  // the timed steps' collectives only
      dev->ResetPeak();
      for (int64_t k = 0; k < chunk(0); ++k) run->r.ms.push_back(Step(*run, data, batch, *dev, hb));
      dev->Synchronize();
      size_t peak = dev->stats().peak_bytes;
      run->r.peak_bytes = peak > live0 ? peak - live0 : 0;
      size_t hwm_kb = StatusKb("VmHWM:");
      run->r.rss_delta = hwm_kb > rss0_kb ? (hwm_kb - rss0_kb) * 1024 : 0;
      runs.push_back(std::move(run));
    }
  }

  std::vector<RunResult> out;
  const int64_t total = f.warmup + f.steps;
  for (auto& run : runs) {
    RunResult& r = run->r;
    nn::Model& model = *run->s.model;
    r.state_bytes = StateBytes(model, run->s.x, run->s.y);
    r.optimizer_state_bytes = model.optimizer().state_bytes();
    r.param_bytes = ParamBytes(model);
    r.optimizer_steps = model.steps();
    if (model.optimizer().scales_losses()) {
      const nn::LossScaleReading ls = model.loss_scale();
      r.loss_scale = ls.scale;
      r.skipped_steps = ls.skipped_steps;
    }
    if (UsesGraph(r.mode)) {
      r.has_graph = true;
      r.gstats = model.train_graph()->stats();
      r.memory_budget = model.graph_options().memory_budget;
      for (const loom::OpRecord& op : model.train_graph()->ops().ops)
        if (op.name() == "matmul_sgd_update") r.fused_param_bytes += op.inputs[0].nbytes();
    }
    // Did it train? (docs/design.md: refuse to report a run in which nothing moved.)
    std::string why;
    if (r.first_loss == r.last_loss)
      why += loom::detail::Cat(" the loss did not change (", r.first_loss, " at step 1 and at step ", total, ");");
    if (ParamChecksum(model) == run->sum0) why += " the parameters did not change;";
    r.final_checksum = ParamChecksum(model, true);
    if (r.optimizer_steps != total)
      why += loom::detail::Cat(" the model counted ", r.optimizer_steps, " optimizer steps for ", total, " calls;");
    if (r.has_graph && r.gstats.replays != uint64_t(total))
      why += loom::detail::Cat(" the graph replayed ", r.gstats.replays, " times for ", total, " steps;");
    if (!why.empty())
      throw NotTrainedError(loom::detail::Cat("mode ", Label(f, r), ":", why, " refusing to report this run"));
    if (run->sim) {
      const loom::SimulatedStats st = run->sim->stats();
      const double steps = double(r.ms.size());
      r.simulated = true;
      r.comm_modelled_ms = st.modelled_s * 1e3 / steps;
      r.comm_waited_ms = st.waited_s * 1e3 / steps;
      r.collectives_per_step = double(st.collectives) / steps;
      r.comm_bytes_per_step = st.bytes / steps;
    }
    if (r.has_graph && r.variant.comm) {  // Note [Predicting a data-parallel step]
      const ReplayProfile prof = ProfileReplays(*model.train_graph(), f.profile_replays);
      const bool lane = r.mode == Mode::kGraphParallel;
      const loom::SimulatedLink link{r.variant.ranks, f.link_gbps, f.latency_us};
      // MPI ranks on the CPU share this host's cores (Note [Ranks sharing cores]); simulated
      // ranks and GPUs do not.
      r.host = ThisHost();
      const HostCores* host = f.dist && dev->type() == loom::DeviceType::kCPU ? &r.host : nullptr;
      if (!host) r.host = HostCores{};
      r.predicted = true;
      r.prediction = Predict(prof, link, lane, false, nullptr, host);
      r.prediction_tree = Predict(prof, link, lane, true, nullptr, host);
      std::unique_ptr<LinkTable> table;
      if (!f.link_table.empty()) {
        table = std::make_unique<LinkTable>(LoadLinkTable(f.link_table));
        r.prediction_table = Predict(prof, link, lane, false, table.get(), host);
        r.has_table_prediction = true;
      }
      for (size_t i = 0; i < prof.collective.size(); ++i) {  // each collective's costs, for the JSON
        if (prof.collective[i].empty()) continue;
        const std::string& op = prof.collective[i];
        double t = -1;
        if (!table || !table->Lookup(op, link.ranks, prof.wire_bytes[i], &t)) t = -1;
        r.collectives.push_back({op, prof.wire_bytes[i], loom::CollectiveSeconds(op, prof.wire_bytes[i], link, false),
                                 loom::CollectiveSeconds(op, prof.wire_bytes[i], link, true), t,
                                 loom::StragglerSeconds(prof.before[i], link.ranks), prof.in_replay[i]});
      }
      for (int n : f.predict_ranks) {
        const loom::SimulatedLink l{n, f.link_gbps, f.latency_us};
        r.predictions.push_back({n, Predict(prof, l, lane, false), Predict(prof, l, lane, true)});
      }
    }
    r.median = Percentile(r.ms, 0.5);
    r.p10 = Percentile(r.ms, 0.1);
    r.p90 = Percentile(r.ms, 0.9);
    out.push_back(r);
  }
  return out;
}

// ---------------------------------------------------------------- arithmetic

// What the step computes and what the machine could: flops_per_step, the measured peak, and the
// kernels that ran (see the header comment).
struct Speed {
  int64_t flops_per_step = 0;
  double peak_gflops = 0;            // loom's thread count at once
  double peak_gflops_per_thread = 0;  // one thread alone (0: not measured)
  std::string peak_what;              // how the peak was obtained
};

// A GPU's float32 peak as loom reaches it: the best of 5 square GEMMs (n = 8192) in the float32
// math in force (Note [Float32 math on the GPU]), after 2 untimed ones; each timed between device
// synchronisations.
double MeasureGemmPeak(const std::shared_ptr<loom::Device>& dev, std::string* what) {
  constexpr int64_t n = 8192;
  loom::Tensor a = loom::ops::Uniform({n, n}, -1, 1, loom::DType::kFloat32, dev);
  loom::Tensor b = loom::ops::Uniform({n, n}, -1, 1, loom::DType::kFloat32, dev);
  double best = 1e30;
  for (int i = 0; i < 7; ++i) {
    dev->Synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    loom::Tensor c = loom::ops::MatMul(a, b);
    dev->Synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 2) best = std::min(best, s);
  }
  const double gflops = 2.0 * double(n) * double(n) * double(n) / best / 1e9;
  *what = loom::detail::Cat("measured: float32 GEMM ", n, "^3 (best of 5), ", loom::Name(loom::CudaFloat32Math()),
                            " math");
  return gflops;
}

// The dense arithmetic of one training step (graph/flops.h), counted on the op list of a step
// captured without the passes. Capturing runs one step (the first call of a graph-mode model
// captures it, then replays it).
int64_t CountStepFlops(const Flags& f, const ModelSpec& spec, int64_t batch, const std::shared_ptr<loom::Device>& dev,
                       const Data& data) {
  Session s = NewSession(f, spec, batch, Mode::kGraphPlanned, dev, data, /*fuse=*/false);
  s.model->TrainOneBatch(s.x, s.y).loss.Item();
  return loom::DenseFlops(s.model->train_graph()->ops().ops);
}

std::string JsonString(const std::string& v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

// {"blocked_layouts": 12, ...}: every counter of the registered passes (GraphStats::counters).
std::string PassCountersJson(const loom::GraphStats& stats) {
  std::string out = "{";
  for (const loom::PassFieldInfo& c : loom::PassCounters::Fields())
    out += (out.size() > 1 ? ", " : "") + JsonString(c.name) + ": " + std::to_string(stats.counters.Get(c.name));
  return out + "}";
}

std::string KernelsJson() {
  std::string out = "[";
  for (const auto& k : loom::ReportedKernels()) {
    if (out.size() > 1) out += ", ";
    out += "{\"kind\": " + JsonString(k.first) + ", \"impl\": " + JsonString(k.second) + "}";
  }
  return out + "]";
}

// {"name": value, ...}: loom::KernelCounters(), the process's so far (device/kernel_report.h).
std::string KernelCountersJson() {
  std::string out = "{";
  for (const auto& c : loom::KernelCounters()) {
    char v[64];
    std::snprintf(v, sizeof v, "%.6g", c.second);
    out += (out.size() > 1 ? ", " : "") + JsonString(c.first) + ": " + v;
  }
  return out + "}";
}

double Gflops(const Speed& sp, double ms) { return ms > 0 ? double(sp.flops_per_step) / (ms * 1e6) : 0; }

// ---------------------------------------------------------------- memory timeline

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  LOOM_CHECK(f.good(), IOError, "[loom-bench] cannot open '", path, "' for writing");
  f << text;
  f.flush();
  LOOM_CHECK(f.good(), IOError, "[loom-bench] failed writing '", path, "'");
}

// One step's memory, three ways: eager (the allocator's live bytes after each op, minus what was
// live before the step), dynamic recycling and the planned arena (from the graph's analysis).
void WriteTimeline(const Flags& f, const std::string& dir, const ModelSpec& spec, int64_t batch,
                   const std::shared_ptr<loom::Device>& dev, const Data& data) {
  HostBatch hb;
  size_t eager_peak = 0, eager_ops = 0;
  {
    Session s = NewSession(f, spec, batch, Mode::kEager, dev, data);
    s.model->TrainOneBatch(s.x, s.y).loss.Item();  // step 1 creates the momentum buffers
    data.Batch(1, batch, hb);
    hb.Into(s.x, s.y);
    size_t base = dev->stats().live_bytes;
    dev->RecordEagerTimeline(true);
    { s.model->TrainOneBatch(s.x, s.y).loss.Item(); }
    auto tl = dev->TakeEagerTimeline();
    dev->RecordEagerTimeline(false);
    std::ostringstream o;
    o << "op,name,live_bytes,live_total_bytes\n";
    for (size_t i = 0; i < tl.size(); ++i) {
      size_t live = tl[i].second > base ? tl[i].second - base : 0;
      eager_peak = std::max(eager_peak, live);
      o << i << "," << tl[i].first << "," << live << "," << tl[i].second << "\n";
    }
    eager_ops = tl.size();
    WriteText(dir + "/eager.csv", o.str());
  }
  // Dynamic and planned without a budget; with --memory-budget-fraction the budgeted plan too
  // (budgeted.csv), drawn beside the unbudgeted one.
  loom::GraphStats dyn, plan, budgeted;
  Flags unbudgeted = f;
  unbudgeted.budget_fraction = 0;
  struct Run { Mode mode; const Flags* flags; const char* file; loom::GraphStats* stats; };
  std::vector<Run> runs;
  runs.push_back(Run{Mode::kGraphDynamic, &unbudgeted, "/dynamic.csv", &dyn});
  runs.push_back(Run{Mode::kGraphPlanned, &unbudgeted, "/planned.csv", &plan});
  if (f.budget_fraction > 0) runs.push_back(Run{Mode::kGraphPlanned, &f, "/budgeted.csv", &budgeted});
  for (const Run& run : runs) {
    Session s = NewSession(*run.flags, spec, batch, run.mode, dev, data);
    s.model->TrainOneBatch(s.x, s.y).loss.Item();  // capture + first replay
    loom::Graph& g = *s.model->train_graph();
    if (run.stats == &plan) g.set_profile(true);
    data.Batch(1, batch, hb);
    hb.Into(s.x, s.y);
    s.model->TrainOneBatch(s.x, s.y).loss.Item();
    WriteText(dir + run.file, g.MemoryTimelineCsv());
    if (run.stats == &plan) g.WriteTrace(dir + "/trace.json");
    *run.stats = g.stats();
  }
  char meta[1024];
  std::snprintf(meta, sizeof meta,
                "{\"model\": \"%s\", \"arch\": \"%s\", \"batch\": %lld, \"device\": \"%s\", \"eager_ops\": %zu, "
                "\"graph_ops\": %zu, \"eager_step_peak_bytes\": %zu, \"dynamic_peak_bytes\": %zu, "
                "\"arena_bytes\": %zu, \"lower_bound_bytes\": %zu, \"lower_bound_no_inplace_bytes\": %zu, "
                "\"inplace_ops\": %zu, \"persistent_bytes\": %zu, "
                "\"plan_strategy\": \"%s\", \"budget_fraction\": %g, \"budgeted_arena_bytes\": %zu, "
                "\"budgeted_persistent_bytes\": %zu, \"memory_budget\": %zu, \"recomputed_ops\": %zu}\n",
                spec.name.c_str(), spec.arch.c_str(), (long long)batch, dev->name().c_str(), eager_ops, plan.num_ops,
                eager_peak, dyn.dynamic_peak_bytes, plan.arena_bytes, plan.lower_bound_bytes,
                plan.lower_bound_no_inplace_bytes, plan.inplace_ops, plan.persistent_bytes, plan.plan_strategy.c_str(),
                f.budget_fraction, budgeted.arena_bytes, budgeted.persistent_bytes,
                f.budget_fraction > 0 ? plan.persistent_bytes + size_t(f.budget_fraction * double(plan.arena_bytes)) : 0,
                budgeted.recomputed_ops);
  WriteText(dir + "/meta.json", meta);
}

// ---------------------------------------------------------------- report

// The same mode's run without a communicator (Note [Scaling runs]); null when there is none.
const RunResult* Baseline(const std::vector<RunResult>& runs, const RunResult& r) {
  for (const RunResult& b : runs)
    if (b.mode == r.mode && !b.variant.comm) return &b;
  return nullptr;
}

double ItemsPerSecond(const RunResult& r) { return double(r.rows * r.variant.ranks) * 1000.0 / r.median; }

// The data-parallel fields of a run's JSON line (Note [Scaling runs]).
std::string ScalingJson(const Flags& f, const RunResult& r, const RunResult* base) {
  const bool any = f.dist || !f.simulate_ranks.empty();
  if (!any) return "";
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                ", \"ranks\": %d, \"communicator\": \"%s\", \"batch_per_rank\": %lld, \"global_batch\": %lld, "
                "\"exposed_comm_ms\": %s, \"exposed_comm_fraction\": %s, \"scaling_efficiency\": %s, "
                "\"sharded_optimizer_state\": %s, \"optimizer_state_bytes\": %zu",
                r.variant.ranks, !r.variant.comm ? "none" : f.dist ? "mpi" : "simulated", (long long)r.rows,
                (long long)(r.rows * r.variant.ranks),
                base ? std::to_string(r.median - base->median).c_str() : "null",
                base ? std::to_string((r.median - base->median) / r.median).c_str() : "null",
                base ? std::to_string(base->median / r.median).c_str() : "null", r.variant.sharded ? "true" : "false",
                r.optimizer_state_bytes);
  std::string out = buf;
  if (!f.simulate_ranks.empty()) {
    std::snprintf(buf, sizeof buf,
                  ", \"simulated_link_gbps\": %g, \"simulated_latency_us\": %g, \"overlap\": %s, "
                  "\"bucket_bytes\": %d, \"first_bucket_bytes\": %d, \"allreduces_per_step\": %.2f, "
                  "\"comm_bytes_per_step\": %.0f, \"comm_modelled_ms_per_step\": %.4f, \"comm_waited_ms_per_step\": %.4f, "
                  "\"simulation_is\": \"this process is rank 0 of N; the other ranks are modelled as equally fast; each "
                  "collective waits its ring all-reduce alpha-beta time on the collective lane\"",
                  f.link_gbps, f.latency_us, f.overlap ? "true" : "false", GraphOptionsFor(r.mode, f).bucket_bytes,
                  GraphOptionsFor(r.mode, f).first_bucket_bytes, r.collectives_per_step, r.comm_bytes_per_step,
                  r.comm_modelled_ms, r.comm_waited_ms);
    out += buf;
  }
  if (r.predicted) {
    const loom::StepPrediction &p = r.prediction, &t = r.prediction_tree;
    std::snprintf(buf, sizeof buf,
                  ", \"predicted_ms_per_step\": %.4f, \"predicted_compute_ms_per_step\": %.4f, "
                  "\"predicted_exposed_comm_ms\": %.4f, \"predicted_scaling_efficiency\": %.4f, "
                  "\"predicted_ms_per_step_tree\": %.4f, \"predicted_wait_ms\": %.4f, \"prediction_link_gbps\": %g, "
                  "\"prediction_latency_us\": %g, \"predicted_shared_cores_ms\": %.4f, \"host_ranks\": %d, "
                  "\"host_cores\": %d, "
                  "\"prediction_is\": \"profiled serial replays: compute ops at their median times in issue order, "
                  "collectives at the alpha-beta model's times (all-reduce by ring; _tree: by binomial tree) plus the wait "
                  "for the slowest rank (from the replays' spread) on their lane, dependencies from the schedule; compute ops no "
                  "faster than the host's cores allow its ranks (max(wall, cpu x host_ranks / host_cores))\"",
                  p.step_s * 1e3, p.compute_s * 1e3, p.exposed_s * 1e3, p.step_s > 0 ? p.compute_s / p.step_s : 0.0,
                  t.step_s * 1e3, p.wait_s * 1e3, f.link_gbps, f.latency_us, p.shared_cores_s * 1e3, r.host.ranks,
                  r.host.cores);
    out += buf;
    if (f.dist) {  // against this run's measurement
      std::snprintf(buf, sizeof buf, ", \"prediction_error\": %.4f, \"prediction_error_tree\": %.4f",
                    p.step_s * 1e3 / r.median - 1, t.step_s * 1e3 / r.median - 1);
      out += buf;
    }
    if (r.has_table_prediction) {
      const double ms = r.prediction_table.step_s * 1e3;
      std::snprintf(buf, sizeof buf, ", \"predicted_ms_per_step_table\": %.4f", ms);
      out += buf;
      if (f.dist) {
        std::snprintf(buf, sizeof buf, ", \"prediction_error_table\": %.4f", ms / r.median - 1);
        out += buf;
      }
    }
    // A JSON array of `v`, each element written by `item` into a buffer.
    auto array = [&buf](const auto& v, const auto& item) {
      std::string a = "[";
      for (size_t i = 0; i < v.size(); ++i) {
        item(v[i]);
        a += (i ? ", " : "") + std::string(buf);
      }
      return a + "]";
    };
    if (!r.collectives.empty())
      out += ", \"collectives\": " + array(r.collectives, [&buf](const RunResult::CollectiveCost& c) {
               std::snprintf(buf, sizeof buf,
                             "{\"op\": \"%s\", \"wire_bytes\": %.0f, \"ring_ms\": %.4f, \"tree_ms\": %.4f, "
                             "\"table_ms\": %.4f, \"wait_ms\": %.4f, \"in_replay_ms\": %.4f}",
                             c.op.c_str(), c.wire_bytes, c.ring_s * 1e3, c.tree_s * 1e3,
                             c.table_s < 0 ? -1.0 : c.table_s * 1e3, c.wait_s * 1e3, c.in_replay_s * 1e3);
             });
    if (!r.predictions.empty())
      out += ", \"predictions\": " + array(r.predictions, [&buf](const RunResult::AtRanks& q) {
               std::snprintf(buf, sizeof buf,
                             "{\"ranks\": %d, \"ms_per_step\": %.4f, \"ms_per_step_tree\": %.4f, \"compute_ms\": %.4f, "
                             "\"scaling_efficiency\": %.4f, \"scaling_efficiency_tree\": %.4f}",
                             q.ranks, q.ring.step_s * 1e3, q.tree.step_s * 1e3, q.ring.compute_s * 1e3,
                             q.ring.compute_s / q.ring.step_s, q.tree.compute_s / q.tree.step_s);
             });
  }
  return out;
}

std::string Json(const Flags& f, const ModelSpec& spec, int64_t batch, const std::string& device, const RunResult& r,
                 const std::string& data_checksum, const Speed& sp, const RunResult* base) {
  auto num_or_null = [&](bool ok, size_t v) { return ok ? std::to_string(v) : std::string("null"); };
  char buf[4096];
  std::snprintf(
      buf, sizeof buf,
      "{\"tool\": \"loom-bench\", \"model\": \"%s\", \"arch\": \"%s\", \"batch\": %lld, \"mode\": \"%s\", "
      "\"precision\": \"%s\", \"fused_loss\": %s, "
      "\"device\": \"%s\", \"cpu_conv\": \"%s\", \"threads\": %d, \"steps\": %lld, \"warmup\": %lld, \"rounds\": %lld, "
      "\"ms_per_step_median\": %.4f, \"ms_per_step_p10\": %.4f, \"ms_per_step_p90\": %.4f, \"items_per_s\": %.2f, "
      "\"peak_bytes\": %zu, \"state_bytes\": %zu, \"working_peak_bytes\": %zu, \"rss_peak_delta_bytes\": %zu, "
      "\"rss_peak_delta_exact\": %s, \"arena_bytes\": %s, \"lower_bound_bytes\": %s, "
      "\"lower_bound_no_inplace_bytes\": %s, \"inplace_ops\": %s, \"dynamic_peak_bytes\": %s, "
      "\"persistent_bytes\": %s, \"graph_ops\": %s, \"first_loss\": %.6f, \"last_loss\": %.6f, "
      "\"loss_fell\": %s, \"optimizer_steps\": %lld, \"params_changed\": true, \"param_bytes\": %zu, "
      "\"param_traffic_bytes_per_step\": %zu, \"param_traffic_gb_per_s\": %.2f, \"optimizer\": \"%s\", \"data_checksum\": \"%s\", "
      "\"peak_bytes_is\": \"device allocator peak over the timed steps (params, optimizer state, inputs, "
      "intermediates, arena)\", \"rss_peak_delta_is\": \"process VmHWM at the end minus VmRSS before the model was "
      "built\"}",
      spec.name.c_str(), spec.arch.c_str(), (long long)batch, Name(r.mode), loom::Name(f.precision),
      f.fused_loss ? "true" : "false", device.c_str(), CpuConvName(), loom::NumThreads(),
      (long long)f.steps, (long long)f.warmup, (long long)std::min(f.rounds, f.steps), r.median, r.p10, r.p90,
      ItemsPerSecond(r), r.peak_bytes, r.state_bytes,
      r.peak_bytes > r.state_bytes ? r.peak_bytes - r.state_bytes : 0, r.rss_delta, r.rss_exact ? "true" : "false",
      num_or_null(r.has_graph && r.gstats.memory == loom::MemoryMode::kPlanned, r.gstats.arena_bytes).c_str(),
      num_or_null(r.has_graph, r.gstats.lower_bound_bytes).c_str(),
      num_or_null(r.has_graph, r.gstats.lower_bound_no_inplace_bytes).c_str(),
      num_or_null(r.has_graph, r.gstats.inplace_ops).c_str(),
      num_or_null(r.has_graph && r.gstats.memory == loom::MemoryMode::kDynamic, r.gstats.dynamic_peak_bytes).c_str(),
      num_or_null(r.has_graph, r.gstats.persistent_bytes).c_str(), num_or_null(r.has_graph, r.gstats.num_ops).c_str(),
      r.first_loss, r.last_loss, r.last_loss < r.first_loss ? "true" : "false", (long long)r.optimizer_steps,
      r.param_bytes, 8 * r.param_bytes - 2 * r.fused_param_bytes,
      double(8 * r.param_bytes - 2 * r.fused_param_bytes) / (r.median * 1e6), OptimizerName(f).c_str(),
      data_checksum.c_str());
  std::string out = buf;
  out.pop_back();  // the closing brace: the arithmetic and kernel fields follow
  char more[2048];
  const double gf = Gflops(sp, r.median);
  std::snprintf(more, sizeof more,
                ", \"loss_scale\": %s, \"skipped_steps\": %s, \"final_params_checksum\": \"%016llx\", \"memory_budget\": %zu, \"recomputed_ops\": %zu, \"recompute_flops\": %lld, "
                "\"pass_counters\": %s, \"flops_per_step\": %lld, \"gflops_per_s\": %.2f, \"fma_peak_gflops\": %s, "
                "\"fma_peak_gflops_one_thread\": %s, \"fma_peak_is\": %s, \"fraction_of_peak\": %s, \"kernels\": ",
                r.loss_scale < 0 ? "null" : std::to_string(r.loss_scale).c_str(),
                r.skipped_steps < 0 ? "null" : std::to_string(r.skipped_steps).c_str(),
                (unsigned long long)r.final_checksum, r.memory_budget, r.has_graph ? r.gstats.recomputed_ops : size_t(0),
                (long long)(r.has_graph ? r.gstats.recompute_flops : 0),
                r.has_graph ? PassCountersJson(r.gstats).c_str() : "null", (long long)sp.flops_per_step, gf,
                sp.peak_gflops > 0 ? std::to_string(sp.peak_gflops).c_str() : "null",
                sp.peak_gflops_per_thread > 0 ? std::to_string(sp.peak_gflops_per_thread).c_str() : "null",
                JsonString(sp.peak_what).c_str(),
                sp.peak_gflops > 0 ? std::to_string(gf / sp.peak_gflops).c_str() : "null");
  return out + ScalingJson(f, r, base) + more + KernelsJson() + ", \"kernel_counters\": " + KernelCountersJson() + "}";
}

// Note [Scaling runs], as a table: one row per run.
std::string ScalingTable(const Flags& f, const std::vector<RunResult>& runs) {
  std::ostringstream o;
  char buf[512];
  const bool sim = !f.simulate_ranks.empty();
  if (sim) {
    std::snprintf(buf, sizeof buf,
                  "\nData-parallel scaling, SIMULATED: this process is rank 0 of N, the other ranks modelled as equally "
                  "fast; ring all-reduce on a %g Gbit/s link with %g us per message (alpha-beta), each all-reduce "
                  "waiting its modelled time on the collective lane; buckets %.1f MiB (first %.2f MiB), %s; batch %lld "
                  "per rank.\n\n",
                  f.link_gbps, f.latency_us, GraphOptionsFor(Mode::kGraphParallel, f).bucket_bytes / double(1 << 20),
                  GraphOptionsFor(Mode::kGraphParallel, f).first_bucket_bytes / double(1 << 20),
                  f.overlap ? "all-reduce overlapping backward" : "all-reduce after backward",
                  (long long)(runs.empty() ? 0 : runs[0].rows));
    o << buf;
    o << "Measured: step times with the modelled waits (exposed = minus the same mode's 1-rank time; noisy on a "
         "shared machine). Predicted: Note [Predicting a data-parallel step] (profiled replays' compute times, "
         "the model's all-reduce times plus the wait for the slowest rank, the schedule's dependencies).\n\n";
    o << "| mode | ranks | all-reduces/step | MB/step | modelled comm ms/step | measured ms/step | items/s (all ranks) "
         "| measured exposed ms | measured efficiency | predicted ms/step | predicted exposed ms | predicted efficiency "
         "|\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  } else {
    std::snprintf(buf, sizeof buf,
                  "\nData-parallel over MPI (measured): compute only = the same per-rank batch without a communicator. "
                  "Predicted (graph modes): Note [Predicting a data-parallel step] from this run's own profiled replays, "
                  "collectives (plus the wait for the slowest rank) by the alpha-beta model at %g Gbit/s and %g us per message (tools/comm_bench's fit: "
                  "--link-gbps, --latency-us), all-reduce by ring / tree (/ comm_bench's measured times with "
                  "--link-table); error = predicted / measured - 1.\n\n",
                  f.link_gbps, f.latency_us);
    o << buf
      << "| mode | ranks | ms/step median | items/s (all ranks) | exposed comm ms | exposed comm fraction | "
         "efficiency vs compute only | predicted ms/step ring / tree | error ring / tree |\n"
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  }
  for (const RunResult& r : runs) {
    const RunResult* base = Baseline(runs, r);
    const double exposed = base ? r.median - base->median : 0;
    if (sim) {
      std::string pred = "| - | - | - |";
      if (r.predicted) {
        char p[128];
        std::snprintf(p, sizeof p, "| %.1f | %.1f | %.3f |", r.prediction.step_s * 1e3, r.prediction.exposed_s * 1e3,
                      r.prediction.compute_s / r.prediction.step_s);
        pred = p;
      }
      std::snprintf(buf, sizeof buf, "| %s | %d | %.1f | %.1f | %.2f | %.1f | %.1f | %.1f | %.3f %s\n", Name(r.mode),
                    r.variant.ranks, r.collectives_per_step, r.comm_bytes_per_step / 1e6, r.comm_modelled_ms, r.median,
                    ItemsPerSecond(r), exposed, base ? base->median / r.median : 0.0, pred.c_str());
    }
    else {
      std::string pred = "| - | - |";
      if (r.predicted) {
        char p[128];
        const double ring = r.prediction.step_s * 1e3, tree = r.prediction_tree.step_s * 1e3;
        std::snprintf(p, sizeof p, "| %.2f / %.2f | %+.1f%% / %+.1f%% |", ring, tree, 100 * (ring / r.median - 1),
                      100 * (tree / r.median - 1));
        pred = p;
        if (r.has_table_prediction) {  // --link-table: measured collective times
          const double table = r.prediction_table.step_s * 1e3;
          std::snprintf(p, sizeof p, "| %.2f / %.2f / %.2f | %+.1f%% / %+.1f%% / %+.1f%% |", ring, tree, table,
                        100 * (ring / r.median - 1), 100 * (tree / r.median - 1), 100 * (table / r.median - 1));
          pred = p;
        }
      }
      std::snprintf(buf, sizeof buf, "| %s | %s | %.2f | %.1f | %.2f | %.1f%% | %.2f %s\n", Name(r.mode),
                    !r.variant.comm ? "compute only"
                    : r.variant.sharded ? (std::to_string(r.variant.ranks) + ", sharded").c_str()
                                        : std::to_string(r.variant.ranks).c_str(),
                    r.median, ItemsPerSecond(r), exposed, base ? 100 * exposed / r.median : 0.0,
                    base ? base->median / r.median : 0.0, pred.c_str());
    }
    o << buf;
  }
  for (const RunResult& r : runs) {
    if (r.predictions.empty()) continue;
    std::snprintf(buf, sizeof buf,
                  "\nPredicted scaling of %s (%s), from its profiled replay: per-rank batch %lld, a %g Gbit/s link "
                  "with %g us per message.\n\n| ranks | ms/step ring | ms/step tree | compute ms | efficiency ring | "
                  "efficiency tree |\n|---:|---:|---:|---:|---:|---:|\n",
                  Name(r.mode), Label(f, r).c_str(), (long long)r.rows, f.link_gbps, f.latency_us);
    o << buf;
    for (const auto& q : r.predictions) {
      std::snprintf(buf, sizeof buf, "| %d | %.2f | %.2f | %.2f | %.3f | %.3f |\n", q.ranks, q.ring.step_s * 1e3,
                    q.tree.step_s * 1e3, q.ring.compute_s * 1e3, q.ring.compute_s / q.ring.step_s,
                    q.tree.compute_s / q.tree.step_s);
      o << buf;
    }
  }
  return o.str();
}

std::string MiB(size_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", double(b) / (1 << 20));
  return buf;
}

std::string Fmt2(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// --narrow: five columns a terminal shows whole; the JSON lines keep every field.
std::string NarrowTable(const Flags& f, const std::vector<RunResult>& runs) {
  const RunResult* eager = nullptr;
  for (const RunResult& r : runs)
    if (r.mode == Mode::kEager && !r.variant.comm && !eager) eager = &r;
  std::ostringstream o;
  char buf[512];
  o << "\n| mode | ms/step | speed-up | peak MiB | arena / bound |\n|---|---:|---:|---:|---:|\n";
  for (const RunResult& r : runs) {
    const bool planned = r.has_graph && r.gstats.memory == loom::MemoryMode::kPlanned && r.gstats.lower_bound_bytes;
    std::snprintf(buf, sizeof buf, "| %s | %.3f | %s | %s | %s |\n", Label(f, r).c_str(), r.median,
                  eager ? loom::detail::Cat(Fmt2(eager->median / r.median), "x").c_str() : "-",
                  MiB(r.peak_bytes).c_str(),
                  planned ? Fmt2(double(r.gstats.arena_bytes) / double(r.gstats.lower_bound_bytes)).c_str() : "-");
    o << buf;
  }
  return o.str();
}

std::string Table(const Flags& f, const ModelSpec& spec, int64_t batch, const std::string& device,
                  const std::vector<RunResult>& runs, const Speed& sp) {
  if (f.narrow) return NarrowTable(f, runs);
  const RunResult* eager = nullptr;
  for (const RunResult& r : runs)
    if (r.mode == Mode::kEager && !r.variant.comm && !eager) eager = &r;
  std::ostringstream o;
  char buf[1024];
  o << "\n### " << spec.arch << ", batch " << batch << ", " << device << "\n\n";
  o << "| mode | ms/step median | p10 | p90 | items/s | GFLOP/s | % of peak | speed-up vs eager | peak MiB | "
       "peak vs eager | working peak MiB | arena MiB | lower bound MiB | arena / bound | RSS growth MiB | "
       "loss first -> last |\n";
  o << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  for (const RunResult& r : runs) {
    std::string speedup = eager ? std::to_string(eager->median / r.median) : "-";
    std::string memratio = eager ? std::to_string(double(r.peak_bytes) / double(eager->peak_bytes)) : "-";
    if (eager) {
      std::snprintf(buf, sizeof buf, "%.2fx", eager->median / r.median);
      speedup = buf;
      std::snprintf(buf, sizeof buf, "%.2f", double(r.peak_bytes) / double(eager->peak_bytes));
      memratio = buf;
    }
    bool planned = r.has_graph && r.gstats.memory == loom::MemoryMode::kPlanned;
    std::string arena = planned ? MiB(r.gstats.arena_bytes) : "-";
    std::string lb = r.has_graph ? MiB(r.gstats.lower_bound_bytes) : "-";
    std::string ratio = "-";
    if (planned && r.gstats.lower_bound_bytes) {
      std::snprintf(buf, sizeof buf, "%.3f", double(r.gstats.arena_bytes) / double(r.gstats.lower_bound_bytes));
      ratio = buf;
    }
    std::string peak = "-";
    if (sp.peak_gflops > 0) {
      std::snprintf(buf, sizeof buf, "%.1f%%", 100 * Gflops(sp, r.median) / sp.peak_gflops);
      peak = buf;
    }
    std::snprintf(buf, sizeof buf,
                  "| %s | %.3f | %.3f | %.3f | %.1f | %.1f | %s | %s | %s | %s | %s | %s | %s | %s | %s%s | %.4f -> %.4f%s |\n",
                  Label(f, r).c_str(), r.median, r.p10, r.p90, ItemsPerSecond(r), Gflops(sp, r.median),
                  peak.c_str(), speedup.c_str(),
                  MiB(r.peak_bytes).c_str(), memratio.c_str(),
                  MiB(r.peak_bytes > r.state_bytes ? r.peak_bytes - r.state_bytes : 0).c_str(), arena.c_str(),
                  lb.c_str(), ratio.c_str(), MiB(r.rss_delta).c_str(), r.rss_exact ? "" : " (upper bound)",
                  r.first_loss, r.last_loss, r.last_loss < r.first_loss ? "" : " (rose)");
    o << buf;
  }
  o << "\npeak = device allocator peak over the timed steps (parameters, optimizer state, inputs, intermediates, "
       "planned arena); working peak = peak - (parameters + optimizer/BatchNorm state + input batch); arena and "
       "lower bound from the training graph (liveness lower bound of the intermediates); RSS growth = process "
       "VmHWM at the end minus VmRSS before the model was built. Every run above trained: its loss and parameters "
       "changed and its step count advanced.\n";
  std::snprintf(buf, sizeof buf, "GFLOP/s = %.3f GFLOP per step (matrix products and convolutions, forward and backward) / median step time; ",
                double(sp.flops_per_step) / 1e9);
  o << buf;
  if (sp.peak_gflops > 0) {
    std::snprintf(buf, sizeof buf, "peak = %.1f GFLOP/s (%s).\n", sp.peak_gflops, sp.peak_what.c_str());
    o << buf;
  } else {
    o << "no peak for this device.\n";
  }
  o << "Kernels:";
  for (const auto& k : loom::ReportedKernels()) o << " " << k.first << " = " << k.second << ";";
  o << "\n";
  if (f.dist || !f.simulate_ranks.empty()) o << ScalingTable(f, runs);
  return o.str();
}

int Main(const Flags& f) {
  // With --dist the launcher has split the cores between the ranks (LOOM_NUM_THREADS, which
  // loom's pool reads): keep its share unless --threads says otherwise.
  if (f.threads > 0 || !f.dist)
    loom::SetNumThreads(f.threads > 0 ? int(f.threads) : int(std::max(1u, std::thread::hardware_concurrency())));
  const loom::examples::Dist dist = f.dist ? loom::examples::Dist::World() : loom::examples::Dist();
  std::ostream& err = dist.Out(std::cerr);  // rank 0 reports
  std::ostream& out = dist.Out(std::cout);
  std::shared_ptr<loom::Device> dev;
  if (f.device == "cuda") {
    LOOM_CHECK(loom::CudaAvailable(), DeviceError,
               "[loom-bench] --device cuda: no CUDA device (loom built without CUDA, or no GPU visible)");
    dev = loom::CudaDevice(0);
  } else {
    dev = loom::CpuDevice();
  }
  if (!f.timeline_dir.empty()) {  // fail before the runs, not after
    ::mkdir(f.timeline_dir.c_str(), 0755);
    struct stat st;
    LOOM_CHECK(::stat(f.timeline_dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), IOError, "[loom-bench] --timeline: '",
               f.timeline_dir, "' is not a directory and cannot be created");
  }
  ModelSpec spec;
  for (const ModelSpec& s : Zoo(GptFromFlags(f.gpt_layers, f.gpt_dim, f.gpt_heads, f.context, f.vocab)))
    if (s.name == f.model) spec = s;
  const int64_t batch = f.batch > 0 ? f.batch : spec.default_batch;
  for (Mode m : f.modes)
    LOOM_CHECK(m != Mode::kCudaGraph || dev->HasDeviceGraphs(), DeviceError,
               "[loom-bench] --mode cuda-graph: ", dev->name(), " has no device graphs");

  const int64_t rows = dist.ShardRows(batch, "loom-bench");  // this rank's samples per step
  err << "loom-bench: " << spec.arch << ", batch " << batch << ", " << dev->name() << ", " << loom::NumThreads()
            << " threads, " << f.warmup << " warm-up + " << f.steps << " timed steps per mode"
            << (f.rounds > 1 ? ", modes taking turns in " + std::to_string(std::min(f.rounds, f.steps)) + " rounds"
                             : "")
            << std::endl;
  if (f.dist) err << loom::detail::Cat("data-parallel over MPI: ", dist.world(), " ranks, ", rows, " samples per rank\n");
  Data data = MakeData(spec, batch, kSeed);
  Speed sp;
  if (f.peak_gflops > 0) {
    sp.peak_gflops = f.peak_gflops;
    sp.peak_what = "given by --peak-gflops";
  } else if (f.device == "cpu") {
    const loom_tools::FmaPeak p = loom_tools::MeasureFmaPeak(loom::NumThreads());
    sp.peak_gflops = p.gflops;
    sp.peak_gflops_per_thread = p.gflops_per_thread;
    sp.peak_what = loom::detail::Cat("measured: float32 FMA chains, ", p.isa, ", ", p.threads, " threads at once, ",
                                     p.gflops_per_thread, " GFLOP/s for one thread alone");
  } else {
    sp.peak_gflops = MeasureGemmPeak(dev, &sp.peak_what);
  }
  std::vector<RunResult> runs = RunModes(f, spec, batch, dev, data, dist);
  sp.flops_per_step = CountStepFlops(f, spec, rows, dev, data);  // this rank's
  std::string json_lines;
  for (const RunResult& r : runs) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "  %-15s median %9.3f ms/step (p10 %.3f, p90 %.3f), peak %s MiB, loss %.4f -> %.4f", Label(f, r).c_str(),
                  r.median, r.p10, r.p90, MiB(r.peak_bytes).c_str(), r.first_loss, r.last_loss);
    err << line << std::endl;
    if (!(r.last_loss < r.first_loss))
      err << "  warning: the loss rose (" << r.first_loss << " -> " << r.last_loss
                << "): it trained (the parameters moved) but is not converging at this batch and learning rate"
                << std::endl;
    const std::string json = Json(f, spec, batch, dev->name(), r, DataChecksum(data), sp, Baseline(runs, r));
    if (f.json) out << json << std::endl;
    json_lines += json + "\n";
  }
  // Rank 0 reports (Note [Scaling runs]): the other ranks' file would replace its own.
  if (!f.json_file.empty() && dist.rank() == 0) loom::WriteFileAtomic(f.json_file, {json_lines}, "loom-bench");
  (f.json ? err : out) << Table(f, spec, batch, dev->name(), runs, sp) << std::flush;
  if (!f.timeline_dir.empty()) {
    WriteTimeline(f, f.timeline_dir, spec, batch, dev, data);
    std::cerr << "loom-bench: memory timelines and trace in " << f.timeline_dir
              << " (plot: /usr/bin/python3 tools/plot_memory.py " << f.timeline_dir << ")" << std::endl;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  try {
    flags = ParseFlags(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "loom-bench: " << e.what() << " (loom-bench --help lists the flags)" << std::endl;
    return 2;
  }
  try {
    return Main(flags);
  } catch (const NotTrainedError& e) {
    std::cerr << "loom-bench: error: " << e.what() << std::endl;
    return 3;
  } catch (const loom::Error& e) {
    std::cerr << "loom-bench: " << e.what() << std::endl;
    return 1;
  }
}
