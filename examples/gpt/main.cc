// loom-gpt: trains a small GPT (GPT-2's architecture, nn/transformer.h) on real English text, the
// public-domain Shakespeare corpus that tools/setup.sh installs in data/text (byte-level BPE,
// 1,024 tokens; io/text.h), reports the held-out loss in bits per byte against the unigram
// baseline, and samples text from it.
//
//   loom-gpt [--layers 4] [--dim 256] [--heads 4] [--context 128] [--batch 16] [--steps 600]
//            [--lr 0.003] [--warmup 60] [--weight-decay 0.1] [--clip 1.0] [--graph|--eager]
//            [--precision fp32|bf16] [--eval-every 200] [--eval-windows 256] [--sample 200]
//            [--temperature 0.8] [--prompt TEXT] [--seed 7] [--data DIR] [--threads N] [--json]
//
// AdamW (decay on matrices only, GPT-2's rule), a linear warm-up then a cosine decay to a tenth
// of --lr (both computed on the device, so a replayed graph follows them), gradient clipping by
// global norm. --graph (the default) captures the first training step and replays it; --eager
// runs every op as it is called. Evaluation covers the first --eval-windows windows of the
// held-out split (0: all of it), `context` tokens each; bits per byte = the summed loss in nats /
// ln 2 / the bytes those targets decode to. --sample N prints N tokens continuing --prompt,
// drawn with --temperature from --seed. --json ends with one JSON line of results.
// Exit codes: 0 ok, 1 a loom error (printed), 2 bad flags.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/device.h"
#include "core/ops.h"
#include "device/cpu/parallel.h"
#include "examples/common/flags.h"
#include "io/text.h"
#include "nn/model.h"
#include "nn/optimizer.h"
#include "nn/schedule.h"
#include "nn/transformer.h"

namespace {

using loom::Tensor;
using loom::flags::UsageError;
namespace flags = loom::flags;
namespace io = loom::io;
namespace nn = loom::nn;
namespace ops = loom::ops;

struct Flags {
  int64_t layers = 4, dim = 256, heads = 4, context = 128, batch = 16, steps = 600, warmup = 60;
  double lr = 3e-3, weight_decay = 0.1, clip = 1.0, temperature = 0.8;
  bool graph = true, json = false;
  std::string precision = "fp32", prompt = "ROMEO:\n", data;
  int64_t eval_every = 200, eval_windows = 256, sample = 200, seed = 7, threads = 0;
};

const char* kUsage =
    "usage: loom-gpt [--layers L] [--dim D] [--heads H] [--context T] [--batch B] [--steps N] [--lr X]\n"
    "                [--warmup N] [--weight-decay X] [--clip X] [--graph|--eager] [--precision fp32|bf16]\n"
    "                [--eval-every N] [--eval-windows N] [--sample N] [--temperature X] [--prompt TEXT]\n"
    "                [--seed N] [--data DIR] [--threads N] [--json]\n"
    "Trains a GPT on data/text (tools/setup.sh) and prints held-out bits per byte and a sample.\n";

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  flags::Args a(argc, argv);
  while (a.Next()) {
    if (a.Is("--help") || a.Is("-h")) {
      std::cout << kUsage;
      std::exit(0);
    } else if (a.Is("--layers")) f.layers = a.Int(1);
    else if (a.Is("--dim")) f.dim = a.Int(1);
    else if (a.Is("--heads")) f.heads = a.Int(1);
    else if (a.Is("--context")) f.context = a.Int(2);
    else if (a.Is("--batch")) f.batch = a.Int(1);
    else if (a.Is("--steps")) f.steps = a.Int(1);
    else if (a.Is("--warmup")) f.warmup = a.Int(0);
    else if (a.Is("--lr")) f.lr = a.Double();
    else if (a.Is("--weight-decay")) f.weight_decay = a.Double();
    else if (a.Is("--clip")) f.clip = a.Double();
    else if (a.Switch("--graph")) f.graph = true;
    else if (a.Switch("--eager")) f.graph = false;
    else if (a.Is("--precision")) f.precision = a.Value();
    else if (a.Is("--eval-every")) f.eval_every = a.Int(0);
    else if (a.Is("--eval-windows")) f.eval_windows = a.Int(0);
    else if (a.Is("--sample")) f.sample = a.Int(0);
    else if (a.Is("--temperature")) f.temperature = a.Double();
    else if (a.Is("--prompt")) f.prompt = a.Value();
    else if (a.Is("--seed")) f.seed = a.Int(0);
    else if (a.Is("--data")) f.data = a.Value();
    else if (a.Is("--threads")) f.threads = a.Int(1);
    else if (a.Switch("--json")) f.json = true;
    else a.Unknown();
  }
  if (f.dim % f.heads != 0)
    throw UsageError("--dim " + std::to_string(f.dim) + " must be a multiple of --heads " + std::to_string(f.heads));
  if (f.warmup >= f.steps) throw UsageError("--warmup must be below --steps");
  if (!(f.lr > 0) || !(f.temperature > 0)) throw UsageError("--lr and --temperature must be positive");
  if (f.precision != "fp32" && f.precision != "bf16") throw UsageError("--precision must be fp32 or bf16");
  return f;
}

// The held-out split's first `windows` windows (whole batches of them): the summed loss in nats,
// the bytes the targets decode to, and the tokens.
struct Eval {
  double nats = 0;
  int64_t bytes = 0, tokens = 0;
  double BitsPerByte() const { return nats / std::log(2.0) / double(bytes); }
};

Eval Evaluate(nn::Model& model, const io::TextCorpus& corpus, const Flags& f,
              const std::shared_ptr<loom::Device>& dev) {
  const int64_t all = corpus.NumWindows(io::TextSplit::kValid, f.context);
  int64_t windows = f.eval_windows > 0 ? std::min(f.eval_windows, all) : all;
  windows = std::max<int64_t>(f.batch, windows / f.batch * f.batch);  // whole batches: one shape
  Eval e;
  for (int64_t w = 0; w + f.batch <= std::min(windows, all); w += f.batch) {
    auto [x, y] = corpus.EvalBatch(io::TextSplit::kValid, w, f.batch, f.context, dev);
    Tensor flat = ops::Reshape(y, {-1});
    const double mean = ops::SoftmaxCrossEntropy(model.Forward(x), flat).Item();
    const std::vector<int32_t> ids = flat.ToVector<int32_t>();
    for (int32_t id : ids) e.bytes += int64_t(corpus.tokenizer().TokenBytes(id).size());
    e.nats += mean * double(ids.size());
    e.tokens += int64_t(ids.size());
  }
  model.Train(true);
  return e;
}

// --sample tokens after --prompt, each drawn from softmax(logits / temperature) of the last
// position (eager, eval mode, no gradients; the window slides once the context is full).
std::string Sample(nn::Gpt& gpt, const io::Tokenizer& tok, const Flags& f, const std::shared_ptr<loom::Device>& dev) {
  loom::NoGradGuard no_grad;
  gpt.Train(false);
  std::vector<int32_t> ids = tok.Encode(f.prompt);
  if (ids.empty()) ids.push_back(int32_t(tok.Encode("\n")[0]));
  std::mt19937_64 rng(uint64_t(f.seed) * 7919 + 1);
  const size_t prompt = ids.size();
  for (int64_t n = 0; n < f.sample; ++n) {
    const size_t start = ids.size() > size_t(f.context) ? ids.size() - size_t(f.context) : 0;
    std::vector<int32_t> window(ids.begin() + int64_t(start), ids.end());
    Tensor x = ops::FromVector(window, {1, int64_t(window.size())}, dev);
    Tensor logits = gpt.Forward(x);  // (t, V)
    const int64_t v = logits.dim(1);
    Tensor last = ops::Slice(logits, 0, logits.dim(0) - 1, logits.dim(0));
    std::vector<float> p = ops::Softmax(ops::MulScalar(last, 1.0 / f.temperature), -1).ToVector<float>();
    std::discrete_distribution<int32_t> pick(p.begin(), p.begin() + v);
    ids.push_back(pick(rng));
  }
  gpt.Train(true);
  return tok.Decode(std::vector<int32_t>(ids.begin() + int64_t(prompt), ids.end()));
}

int Train(const Flags& f) {
  if (f.threads > 0) loom::SetNumThreads(f.threads);
  const io::TextCorpus corpus = io::TextCorpus::Load(f.data.empty() ? io::DefaultTextDir() : f.data);
  auto dev = loom::CpuDevice();
  dev->SetRandSeed(uint64_t(f.seed));
  nn::GptConfig c;
  c.vocab = corpus.tokenizer().vocab_size();
  c.context = f.context;
  c.layers = f.layers;
  c.dim = f.dim;
  c.heads = f.heads;
  auto gpt = std::make_shared<nn::Gpt>(c);
  auto adamw = std::make_shared<nn::Adam>(f.lr, 0.9, 0.95, 1e-8, f.weight_decay, /*decoupled=*/true);
  adamw->set_decay_on(nn::Adam::DecayOn::kMatrices);
  adamw->SetSchedule(nn::Schedule::Sequential(
      {nn::Schedule::LinearWarmup(f.lr, f.warmup), nn::Schedule::Cosine(f.lr, f.steps - f.warmup, f.lr / 10)},
      {f.warmup}));
  if (f.clip > 0) {
    nn::GradClip clip;
    clip.max_norm = f.clip;
    adamw->SetGradClip(clip);
  }
  nn::Model model(gpt, adamw);
  model.set_precision(loom::PrecisionFromName(f.precision));
  model.set_keep_output(false);  // the loop reads only the loss: the logits stay in the memory plan
  auto [x0, y0] = corpus.Batch(io::TextSplit::kTrain, f.batch, f.context, uint64_t(f.seed), 0, dev);
  model.Compile({x0}, /*is_train=*/true, /*use_graph=*/f.graph);
  int64_t params = 0;
  for (const auto& p : model.Params()) params += p.second.numel();
  std::fprintf(stderr,
               "loom-gpt: %lld layers, width %lld, %lld heads, context %lld, vocabulary %lld: %.2fM parameters; "
               "%lld train / %lld held-out tokens; %s, %s, %d threads\n",
               (long long)f.layers, (long long)f.dim, (long long)f.heads, (long long)f.context, (long long)c.vocab,
               double(params) / 1e6, (long long)corpus.num_tokens(io::TextSplit::kTrain),
               (long long)corpus.num_tokens(io::TextSplit::kValid), f.graph ? "graph" : "eager", f.precision.c_str(),
               loom::NumThreads());
  const double unigram = corpus.UnigramBitsPerByte();
  Eval first = Evaluate(model, corpus, f, dev);
  std::fprintf(stderr, "step %5d  held-out %.3f bits/byte (unigram baseline %.3f)\n", 0, first.BitsPerByte(), unigram);
  double train_loss = 0;
  Eval last = first;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < f.steps; ++step) {
    auto [x, y] = corpus.Batch(io::TextSplit::kTrain, f.batch, f.context, uint64_t(f.seed), step, dev);
    train_loss = model.TrainOneBatch(x, ops::Reshape(y, {-1})).loss.Item();
    const bool end = step + 1 == f.steps;
    if (end || (f.eval_every > 0 && (step + 1) % f.eval_every == 0)) {
      last = Evaluate(model, corpus, f, dev);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "step %5lld  train loss %.3f  held-out %.3f bits/byte  %.0f tokens/s\n",
                   (long long)(step + 1), train_loss, last.BitsPerByte(), double((step + 1) * f.batch * f.context) / s);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string text;
  if (f.sample > 0) {
    text = Sample(*gpt, corpus.tokenizer(), f, dev);
    std::cout << "---- sample (" << f.sample << " tokens, temperature " << f.temperature << ") ----\n"
              << f.prompt << text << "\n----" << std::endl;
  }
  if (f.json)
    std::printf(
        "{\"tool\": \"loom-gpt\", \"layers\": %lld, \"dim\": %lld, \"heads\": %lld, \"context\": %lld, \"batch\": %lld, "
        "\"steps\": %lld, \"params\": %lld, \"mode\": \"%s\", \"precision\": \"%s\", \"train_loss\": %.6f, "
        "\"valid_bits_per_byte_start\": %.6f, \"valid_bits_per_byte\": %.6f, \"unigram_bits_per_byte\": %.6f, "
        "\"valid_tokens\": %lld, \"valid_bytes\": %lld, \"seconds\": %.3f, \"tokens_per_s\": %.1f}\n",
        (long long)f.layers, (long long)f.dim, (long long)f.heads, (long long)f.context, (long long)f.batch,
        (long long)f.steps, (long long)params, f.graph ? "graph" : "eager", f.precision.c_str(), train_loss,
        first.BitsPerByte(), last.BitsPerByte(), unigram, (long long)last.tokens, (long long)last.bytes, seconds,
        double(f.steps * f.batch * f.context) / seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  try {
    flags = ParseFlags(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "loom-gpt: " << e.what() << " (loom-gpt --help lists the flags)" << std::endl;
    return 2;
  }
  try {
    return Train(flags);
  } catch (const loom::Error& e) {
    std::cerr << "loom-gpt: " << e.what() << std::endl;
    return 1;
  }
}
