// oneDNN convolution plans: Note [oneDNN convolution] in conv_dnnl.h.
#include "device/cpu/kernels/conv_dnnl.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/bias_act_formulas.h"
#include "device/cpu/parallel.h"
#include "device/kernel_report.h"

#ifdef LOOM_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>

#include "device/cpu/dnnl_common.h"
#endif

namespace loom {
namespace cpu {

namespace {
std::atomic<int> g_impl{-1};  // -1: not read from the environment yet

CpuConvImpl ImplFromEnv() {
  const char* s = std::getenv("LOOM_CPU_CONV");
  if (s && std::strcmp(s, "im2col") == 0) return CpuConvImpl::kIm2col;
  if (s && std::strcmp(s, "winograd") == 0) return CpuConvImpl::kWinograd;
  return CpuConvImpl::kAuto;
}
}  // namespace

void SetCpuConvImpl(CpuConvImpl impl) { g_impl = int(impl); }
CpuConvImpl GetCpuConvImpl() {
  int v = g_impl.load();
  if (v < 0) {
    v = int(ImplFromEnv());
    g_impl = v;
  }
  return CpuConvImpl(v);
}

#ifndef LOOM_HAVE_DNNL

bool HaveDnnl() { return false; }
class DnnlConvPlan {};
const DnnlConvPlan* FindDnnlConv(ConvPass, const ConvDims&, DType) { return nullptr; }
size_t DnnlConvScratchBytes(const DnnlConvPlan&) { return 0; }
void RunDnnlConv(const DnnlConvPlan&, const void*, const void*, const float*, float*, void*) {
  LOOM_ASSERT(false, "RunDnnlConv: loom was built without oneDNN");
}

#else  // LOOM_HAVE_DNNL

bool HaveDnnl() { return true; }

namespace {

namespace dn = dnnl;
using md = dn::memory::desc;
using tag = dn::memory::format_tag;
constexpr dn::memory::data_type kF32 = dn::memory::data_type::f32, kBf16 = dn::memory::data_type::bf16;
constexpr size_t kAlign = 64;

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// One operand in loom's plain layout and in the layout the convolution asked for, with the
// reorder between them when they differ (towards the convolution for inputs, back for outputs).
struct Operand {
  md plain, inner;
  bool same = true;
  dn::reorder move;
  size_t bytes() const { return same ? 0 : inner.get_size(); }

  static Operand Make(const md& plain, const md& inner, bool is_input) {
    Operand op;
    op.plain = plain;
    op.inner = inner;
    op.same = plain == inner;
    if (!op.same)
      op.move = is_input ? dn::reorder(dn::reorder::primitive_desc(Engine(), plain, Engine(), inner))
                         : dn::reorder(dn::reorder::primitive_desc(Engine(), inner, Engine(), plain));
    return op;
  }
  // Returns where the convolution reads (input) or writes (output) this operand: the user's
  // buffer when the layouts agree, else `staging` (filled from the user's buffer for an input).
  void* In(void* user, void* staging) const {
    if (same) return user;
    dn::memory from(plain, Engine(), user), to(inner, Engine(), staging);
    move.execute(Stream(), from, to);
    return staging;
  }
  // An input reorder split along dim 0 into pieces the pool runs side by side (the shared copy
  // of the weights: one thread would otherwise reorder them while the others wait). Pieces
  // start at multiples of 64 so that they never cut a layout block.
  std::vector<dn::reorder> pieces;
  std::vector<std::pair<md, md>> piece_mds;
  void Split(int64_t parts) {
    const int64_t d0 = plain.dims()[0];
    if (same || parts < 2 || d0 < 128) return;
    const int64_t step = (d0 / parts + 63) / 64 * 64;
    for (int64_t at = 0; at < d0; at += step) {
      dn::memory::dims dims = plain.dims(), offs(dims.size(), 0);
      dims[0] = std::min(step, d0 - at);
      offs[0] = at;
      md from = plain.submemory_desc(dims, offs), to = inner.submemory_desc(dims, offs);
      piece_mds.emplace_back(from, to);
      pieces.emplace_back(dn::reorder::primitive_desc(Engine(), from, Engine(), to));
    }
  }
  void* InSplit(void* user, void* staging) const {
    if (same) return user;
    if (pieces.empty()) {
      OneOmpThread one;
      return In(user, staging);
    }
    ParallelFor(int64_t(pieces.size()), 1, [&](int64_t i0, int64_t i1) {
      OneOmpThread one;
      for (int64_t i = i0; i < i1; ++i) {
        dn::memory from(piece_mds[size_t(i)].first, Engine(), user), to(piece_mds[size_t(i)].second, Engine(), staging);
        pieces[size_t(i)].execute(Stream(), from, to);
      }
    });
    return staging;
  }
  void Out(void* staging, void* user) const {
    if (same) return;
    dn::memory from(inner, Engine(), staging), to(plain, Engine(), user);
    move.execute(Stream(), from, to);
  }
};

md Act(int64_t n, int64_t c, int64_t h, int64_t w, tag t, dn::memory::data_type dt = kF32) {
  return md({n, c, h, w}, dt, t);
}
// Output channels [o0, o0 + oq) of (n, o, h, w) images stored in NCHW order: a strided view.
md ActChannels(int64_t n, int64_t o, int64_t oq, int64_t h, int64_t w, dn::memory::data_type dt = kF32) {
  return md({n, oq, h, w}, dt, dn::memory::dims{o * h * w, h * w, w, 1});
}
// Output channels [o0, o0 + oq) of (n, o, h, w) images stored nChw16c (o0 and o multiples of
// 16): the start of channel o0 is o0 h w elements in, as in NCHW, and an image is o h w apart.
md BlockedChannels(int64_t n, int64_t o, int64_t oq, int64_t h, int64_t w) {
  const md all({n, o, h, w}, kF32, tag::nChw16c);
  return oq == o ? all : all.submemory_desc({n, oq, h, w}, {0, 0, 0, 0});
}
// o output channels of the weights: loom's layout (OIHW, GOIHW with groups, OIhw16i16o when
// w_blocked), or any layout. Output channels [o0, o0 + o) of OIhw16i16o weights (o0 and o
// multiples of 16) are o0 C KH KW elements in, as in OIHW, and laid out as o channels alone.
md Weights(const ConvDims& d, int64_t o, bool any, dn::memory::data_type dt) {
  if (d.groups == 1) return md({o, d.c, d.kh, d.kw}, dt, any ? tag::any : d.w_blocked ? tag::OIhw16i16o : tag::oihw);
  return md({d.groups, o / d.groups, d.c / d.groups, d.kh, d.kw}, dt, any ? tag::any : tag::goihw);
}

// The primitive for one part's slice of the problem: nb images, oq output channels.
struct Shard {
  int64_t nb = 0, oq = 0;
  dn::primitive conv;
  Operand a, b, out;  // by pass: (x, w, y), (w, dy, dx), (x, dy, dw)
  md pad;             // oneDNN's scratchpad (user mode: it lives in the op's scratch)
  size_t scratchpad = 0;
  size_t part_bytes = 0;  // this part's scratch (the shared weight copy excluded)
};

}  // namespace

class DnnlConvPlan {
 public:
  ConvPass pass;
  ConvDims d;
  // Weight gradient of a layer with few output positions (N OH OW) and many weights: the parts
  // take output channels instead of images, so no part sums a whole weight gradient that
  // another part also sums.
  bool by_channel = false;
  struct Part {
    int64_t n0, nb, o0, oq;
    int shard;
    size_t offset;  // into the scratch
  };
  std::vector<Part> parts;
  std::vector<std::unique_ptr<Shard>> shards;
  size_t shared_bytes = 0;  // the weights' copy, shared by the parts (forward, grad input)
  size_t total_bytes = 0;
};

namespace {

// Weight gradients with at most this many output positions (N OH OW) split by channel. Summed
// oneDNN kernel time of a ResNet-18 step (batch 16, 2 threads; DNNL_VERBOSE=1): 503 ms never,
// 492 ms at 1024, 487 ms at 4096 (layers 2-4), 490 ms always.
constexpr int64_t kChannelSplitColumns = 4096;

// Winograd's geometry (Note [Winograd]); oneDNN may still have no kernel for it (then direct).
bool WinogradShape(const ConvDims& d) {
  return d.kh == 3 && d.kw == 3 && d.sh == 1 && d.sw == 1 && d.dh == 1 && d.dw == 1 && d.groups == 1;
}

std::unique_ptr<Shard> MakeShardWith(dn::algorithm alg, ConvPass pass, const ConvDims& d, int64_t nb, int64_t oq) {
  const dn::memory::dims strides{d.sh, d.sw}, dil{d.dh - 1, d.dw - 1}, pl{d.ph, d.pw},
      pr{(d.oh - 1) * d.sh + (d.kh - 1) * d.dh + 1 - d.h - d.ph, (d.ow - 1) * d.sw + (d.kw - 1) * d.dw + 1 - d.w - d.pw};
  // A bf16 plan (ConvDims::bf16): its two operands bfloat16, its result float32 (forward: x, w ->
  // y; grad input: w, dy -> dx; grad weight: x, dy -> dw).
  const bool bf16 = d.bf16;
  const auto x_dt = bf16 && pass != ConvPass::kGradInput ? kBf16 : kF32;
  const auto y_dt = bf16 && pass != ConvPass::kForward ? kBf16 : kF32;
  const auto w_dt = bf16 && pass != ConvPass::kGradWeight ? kBf16 : kF32;
  const md x_any = Act(nb, d.c, d.h, d.w, tag::any, x_dt), y_any = Act(nb, oq, d.oh, d.ow, tag::any, y_dt);
  const md x_plain = Act(nb, d.c, d.h, d.w, d.x_blocked ? tag::nChw16c : tag::nchw, x_dt),
           y_plain = d.blocked ? BlockedChannels(nb, d.o, oq, d.oh, d.ow) : ActChannels(nb, d.o, oq, d.oh, d.ow, y_dt);
  const md w_any = Weights(d, oq, true, w_dt), w_plain = Weights(d, oq, false, w_dt);
  const md bias_md = d.bias && pass == ConvPass::kForward ? md({oq}, kF32, tag::x) : md();
  dn::primitive_attr attr;
  attr.set_scratchpad_mode(dn::scratchpad_mode::user);
  // Backward primitives need the forward one as a hint: for a bf16 gradient, the bf16 forward
  // of training (x, w and y bfloat16), as oneDNN's bf16 training example makes it.
  const md hx = bf16 ? Act(nb, d.c, d.h, d.w, tag::any, kBf16) : x_any, hw = bf16 ? Weights(d, oq, true, kBf16) : w_any,
           hy = bf16 && pass != ConvPass::kForward ? Act(nb, oq, d.oh, d.ow, tag::any, kBf16) : y_any;
  dn::convolution_forward::desc fd(dn::prop_kind::forward_training, alg, hx, hw, bias_md, hy, strides, dil, pl, pr);
  dn::convolution_forward::primitive_desc fpd(fd, attr, Engine());
  auto s = std::make_unique<Shard>();
  s->nb = nb;
  s->oq = oq;
  switch (pass) {
    case ConvPass::kForward:
      s->conv = dn::convolution_forward(fpd);
      s->a = Operand::Make(x_plain, fpd.src_desc(), true);
      s->b = Operand::Make(w_plain, fpd.weights_desc(), true);
      s->out = Operand::Make(y_plain, fpd.dst_desc(), false);
      s->pad = fpd.scratchpad_desc();
      ReportKernel(d.bf16 ? "conv2d forward bf16 -> f32" : "conv2d forward f32",
                   std::string("oneDNN ") + fpd.impl_info_str());
      break;
    case ConvPass::kGradInput: {
      dn::convolution_backward_data::desc bd(alg, x_any, w_any, y_any, strides, dil, pl, pr);
      dn::convolution_backward_data::primitive_desc bpd(bd, attr, Engine(), fpd);
      s->conv = dn::convolution_backward_data(bpd);
      s->a = Operand::Make(w_plain, bpd.weights_desc(), true);
      s->b = Operand::Make(y_plain, bpd.diff_dst_desc(), true);
      s->out = Operand::Make(x_plain, bpd.diff_src_desc(), false);
      s->pad = bpd.scratchpad_desc();
      ReportKernel(bf16 ? "conv2d grad input bf16 -> f32" : "conv2d grad input f32",
                   std::string("oneDNN ") + bpd.impl_info_str());
      break;
    }
    case ConvPass::kGradWeight: {
      dn::convolution_backward_weights::desc wd(alg, x_any, w_any, md(), y_any, strides, dil, pl, pr);
      dn::convolution_backward_weights::primitive_desc wpd(wd, attr, Engine(), fpd);
      s->conv = dn::convolution_backward_weights(wpd);
      s->a = Operand::Make(x_plain, wpd.src_desc(), true);
      s->b = Operand::Make(y_plain, wpd.diff_dst_desc(), true);
      s->out = Operand::Make(w_plain, wpd.diff_weights_desc(), false);
      s->pad = wpd.scratchpad_desc();
      ReportKernel(bf16 ? "conv2d grad weight bf16 -> f32" : "conv2d grad weight f32",
                   std::string("oneDNN ") + wpd.impl_info_str());
      break;
    }
  }
  s->scratchpad = s->pad.get_size();
  return s;
}

std::unique_ptr<Shard> MakeShard(ConvPass pass, const ConvDims& d, int64_t nb, int64_t oq, bool winograd) {
  if (winograd && WinogradShape(d)) {
    try {
      return MakeShardWith(dn::algorithm::convolution_winograd, pass, d, nb, oq);
    } catch (const dn::error&) {
      // no Winograd kernel for this geometry or ISA: the direct one below
    }
  }
  return MakeShardWith(dn::algorithm::convolution_direct, pass, d, nb, oq);
}

// The weights operand the parts share (forward and input gradient).
const Operand& SharedWeights(ConvPass pass, const Shard& s) { return pass == ConvPass::kForward ? s.b : s.a; }

std::unique_ptr<DnnlConvPlan> MakePlan(ConvPass pass, const ConvDims& d, int64_t nparts, bool winograd) {
  auto p = std::make_unique<DnnlConvPlan>();
  p->pass = pass;
  p->d = d;
  // Output channels per part when splitting by channel: whole 16-channel blocks.
  const int64_t o_step = (d.o / std::max<int64_t>(nparts, 1) + 15) / 16 * 16;
  p->by_channel = pass == ConvPass::kGradWeight && nparts > 1 && d.groups == 1 && d.o >= 32 * nparts &&
                  d.n * d.oh * d.ow <= kChannelSplitColumns;
  std::map<std::pair<int64_t, int64_t>, int> by_size;
  auto add_part = [&](int64_t n0, int64_t nb, int64_t o0, int64_t oq) {
    auto it = by_size.find({nb, oq});
    if (it == by_size.end()) {
      it = by_size.emplace(std::make_pair(nb, oq), int(p->shards.size())).first;
      p->shards.push_back(MakeShard(pass, d, nb, oq, winograd));
    }
    p->parts.push_back({n0, nb, o0, oq, it->second, 0});
  };
  if (p->by_channel) {
    for (int64_t o0 = 0; o0 < d.o; o0 += o_step) add_part(0, d.n, o0, std::min(o_step, d.o - o0));
  } else {
    const int64_t base = d.n / nparts, extra = d.n % nparts;  // the first `extra` parts take one more
    for (int64_t q = 0, at = 0; q < nparts; ++q) {
      const int64_t nb = base + (q < extra ? 1 : 0);
      add_part(at, nb, 0, d.o);
      at += nb;
    }
  }
  // The parts share one copy of the weights, so every primitive must want the same layout.
  if (pass != ConvPass::kGradWeight && nparts > 1)
    for (auto& s : p->shards)
      if (SharedWeights(pass, *s).inner != SharedWeights(pass, *p->shards[0]).inner) return MakePlan(pass, d, 1, winograd);
  const size_t w_bytes = size_t(d.o * (d.c / d.groups) * d.kh * d.kw) * sizeof(float);  // a plain dw partial
  const bool partials = pass == ConvPass::kGradWeight && !p->by_channel && p->parts.size() > 1;
  for (auto& s : p->shards) {
    size_t b = AlignUp(s->scratchpad);
    switch (pass) {
      case ConvPass::kForward: b += AlignUp(s->a.bytes()) + AlignUp(s->out.bytes()); break;
      case ConvPass::kGradInput: b += AlignUp(s->b.bytes()) + AlignUp(s->out.bytes()); break;
      // Inner-layout gradient, plus a plain partial for the parts after the first when the
      // parts split the images.
      case ConvPass::kGradWeight:
        b += AlignUp(s->a.bytes()) + AlignUp(s->b.bytes()) + AlignUp(s->out.bytes()) + (partials ? AlignUp(w_bytes) : 0);
        break;
    }
    s->part_bytes = b;
  }
  if (pass != ConvPass::kGradWeight) {
    Operand& w = pass == ConvPass::kForward ? p->shards[0]->b : p->shards[0]->a;
    p->shared_bytes = AlignUp(w.bytes());
    w.Split(nparts);
  }
  size_t off = p->shared_bytes;
  for (auto& part : p->parts) {
    part.offset = off;
    off += p->shards[size_t(part.shard)]->part_bytes;
  }
  p->total_bytes = off;
  return p;
}

using Key = std::tuple<int, int, std::vector<int64_t>>;  // pass, threads, dims and choices

std::mutex g_mu;
std::map<Key, std::unique_ptr<DnnlConvPlan>>& Cache() {
  static auto* m = new std::map<Key, std::unique_ptr<DnnlConvPlan>>;  // lives to process exit
  return *m;
}

char* At(void* base, size_t off) { return static_cast<char*>(base) + off; }

}  // namespace

const DnnlConvPlan* FindDnnlConv(ConvPass pass, const ConvDims& d, DType dtype) {
  const CpuConvImpl impl = GetCpuConvImpl();
  if (dtype != DType::kFloat32 || impl == CpuConvImpl::kIm2col || d.n <= 0 || (d.blocked && d.o % 16) ||
      (d.x_blocked && d.c % 16) || (d.w_blocked && (d.groups != 1 || d.o % 16 || d.c % 16)))
    return nullptr;
  // bfloat16 operands: plain convolutions and their gradients, without a fused ReLU (ConvDims::bf16).
  if (d.bf16 && (d.relu || d.blocked || d.x_blocked || d.w_blocked)) return nullptr;
  const bool winograd = impl == CpuConvImpl::kWinograd && WinogradShape(d) && !d.bf16;
  Key key{int(pass), NumThreads(),
          {d.n, d.c, d.h, d.w, d.o, d.kh, d.kw, d.oh, d.ow, d.sh, d.sw, d.ph, d.pw, d.dh, d.dw, d.groups, d.bias,
           d.relu && pass == ConvPass::kForward, d.blocked, d.x_blocked, d.w_blocked, winograd, d.bf16}};
  std::lock_guard<std::mutex> l(g_mu);
  auto it = Cache().find(key);
  if (it != Cache().end()) return it->second.get();
  std::unique_ptr<DnnlConvPlan> plan;
  try {
    OneOmpThread one;
    plan = MakePlan(pass, d, std::max<int64_t>(1, std::min<int64_t>(NumThreads(), d.n)), winograd);
  } catch (const dn::error&) {
    plan.reset();  // no oneDNN implementation for this geometry: im2col runs it (cached as such)
  }
  return Cache().emplace(key, std::move(plan)).first->second.get();
}

size_t DnnlConvScratchBytes(const DnnlConvPlan& plan) { return plan.total_bytes; }

void RunDnnlConv(const DnnlConvPlan& p, const void* a, const void* b, const float* bias, float* out,
                 void* scratch) {
  const ConvDims& d = p.d;
  const int64_t x_img = d.c * d.h * d.w, y_img = d.o * d.oh * d.ow, y_plane = d.oh * d.ow;
  const int64_t w_elems = d.o * (d.c / d.groups) * d.kh * d.kw, w_per_o = w_elems / d.o;
  const int64_t parts = int64_t(p.parts.size());
  auto cp = [](const void* v) { return const_cast<void*>(v); };  // oneDNN takes void* handles
  // Element k of an input operand (a or b): float32, or bfloat16 in a bf16 plan (both inputs).
  const size_t in_bytes = d.bf16 ? 2 : sizeof(float);
  auto elem = [&](const void* base, int64_t k) { return At(cp(base), size_t(k) * in_bytes); };
  // The weights, shared by every part, are reordered once.
  void* w_inner = nullptr;
  if (p.pass != ConvPass::kGradWeight)
    w_inner = SharedWeights(p.pass, *p.shards[0]).InSplit(cp(p.pass == ConvPass::kForward ? b : a), scratch);
  std::vector<float*> partial(size_t(parts), nullptr);  // grad weight by image: each part's plain gradient
  auto run_part = [&](int64_t q) {
    OneOmpThread one;
    const DnnlConvPlan::Part& part = p.parts[size_t(q)];
    const Shard& s = *p.shards[size_t(part.shard)];
    // Where this part's slice starts in each operand: images n0.., output channels o0.. (the
    // same offsets in nChw16c: BlockedChannels; an image is C H W elements in either layout)
    const int64_t x_at = part.n0 * x_img, y_at = part.n0 * y_img + part.o0 * y_plane;
    char* cur = At(scratch, part.offset);
    dn::memory pad_mem(s.pad, Engine(), cur);
    cur += AlignUp(s.scratchpad);
    std::unordered_map<int, dn::memory> args;
    switch (p.pass) {
      case ConvPass::kForward: {
        char* x_st = cur;
        char* y_st = x_st + AlignUp(s.a.bytes());
        void* x = s.a.In(elem(a, x_at), x_st);
        void* y = s.out.same ? static_cast<void*>(out + y_at) : y_st;
        args = {{DNNL_ARG_SRC, dn::memory(s.a.inner, Engine(), x)},
                {DNNL_ARG_WEIGHTS, dn::memory(s.b.inner, Engine(), w_inner)},
                {DNNL_ARG_DST, dn::memory(s.out.inner, Engine(), y)},
                {DNNL_ARG_SCRATCHPAD, pad_mem}};
        if (d.bias) args.emplace(DNNL_ARG_BIAS, dn::memory(md({d.o}, kF32, tag::x), Engine(), cp(bias)));
        s.conv.execute(Stream(), args);
        s.out.Out(y, out + y_at);
        if (d.relu) {  // this part's images, just written: in cache
          float* r = out + y_at;
          for (int64_t i = 0; i < part.nb * y_img; ++i) r[i] = ew::ApplyAct(BiasAct::kRelu, r[i]);
        }
        break;
      }
      case ConvPass::kGradInput: {
        char* dy_st = cur;
        char* dx_st = dy_st + AlignUp(s.b.bytes());
        void* dy = s.b.In(elem(b, y_at), dy_st);
        void* dx = s.out.same ? static_cast<void*>(out + x_at) : dx_st;
        args = {{DNNL_ARG_WEIGHTS, dn::memory(s.a.inner, Engine(), w_inner)},
                {DNNL_ARG_DIFF_DST, dn::memory(s.b.inner, Engine(), dy)},
                {DNNL_ARG_DIFF_SRC, dn::memory(s.out.inner, Engine(), dx)},
                {DNNL_ARG_SCRATCHPAD, pad_mem}};
        s.conv.execute(Stream(), args);
        s.out.Out(dx, out + x_at);
        break;
      }
      case ConvPass::kGradWeight: {
        char* x_st = cur;
        char* dy_st = x_st + AlignUp(s.a.bytes());
        char* dw_st = dy_st + AlignUp(s.b.bytes());
        // By channel: this part's rows of dw. By image: part 0 writes dw, the others partials.
        float* plain = p.by_channel || q == 0 ? out + part.o0 * w_per_o
                                              : reinterpret_cast<float*>(dw_st + AlignUp(s.out.bytes()));
        partial[size_t(q)] = plain;
        void* x = s.a.In(elem(a, x_at), x_st);
        void* dy = s.b.In(elem(b, y_at), dy_st);
        void* dw = s.out.same ? static_cast<void*>(plain) : dw_st;
        args = {{DNNL_ARG_SRC, dn::memory(s.a.inner, Engine(), x)},
                {DNNL_ARG_DIFF_DST, dn::memory(s.b.inner, Engine(), dy)},
                {DNNL_ARG_DIFF_WEIGHTS, dn::memory(s.out.inner, Engine(), dw)},
                {DNNL_ARG_SCRATCHPAD, pad_mem}};
        s.conv.execute(Stream(), args);
        s.out.Out(dw, plain);
        break;
      }
    }
  };
  ParallelFor(parts, 1, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) run_part(q);
  });
  if (p.pass == ConvPass::kGradWeight && !p.by_channel && parts > 1) {
    // Partial gradients added in part order, split across the pool by element.
    ParallelFor(w_elems, 16384, [&](int64_t i0, int64_t i1) {
      for (int64_t q = 1; q < parts; ++q) {
        const float* src = partial[size_t(q)];
        for (int64_t i = i0; i < i1; ++i) out[i] += src[i];
      }
    });
  }
}

#endif  // LOOM_HAVE_DNNL

}  // namespace cpu
}  // namespace loom
