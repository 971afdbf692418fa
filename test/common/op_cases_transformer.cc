// The op-case rows of the transformer ops (op_cases.h): attention over one key block and over
// several (Tq, Tk > 64, the CPU kernel's block), causal and not, Tq != Tk, an explicit scale.
#include "common/op_case_table.h"

namespace loom {
namespace test {
namespace table {
namespace {

struct Attn {
  Shape q, k, v;
  int64_t causal;
  double scale;
  bool grad;  // force the finite-difference check (more than kSmallGradElements per input)
};

void AddAttention(Table& t) {
  const std::vector<Attn> shapes = {
      {{2, 3, 5, 4}, {2, 3, 5, 4}, {2, 3, 5, 4}, 0, 0, false},
      {{2, 3, 5, 4}, {2, 3, 5, 4}, {2, 3, 5, 4}, 1, 0, false},
      {{2, 3, 4}, {2, 6, 4}, {2, 6, 5}, 0, 0.5, false},  // more keys than queries, Dv != D
      {{2, 6, 4}, {2, 3, 4}, {2, 3, 5}, 1, 0, false},    // more queries than keys, causal
      {{1, 70, 3}, {1, 70, 3}, {1, 70, 2}, 1, 0, true},  // two blocks of queries and of keys
      {{1, 70, 3}, {1, 70, 3}, {1, 70, 2}, 0, 0, true},
  };
  for (DType dt : kFloats)
    for (const Attn& s : shapes) {
      const Attrs a{{"causal", s.causal}, {"scale", s.scale}};
      const std::string variant = WithAttrs("q " + S(s.q) + " k " + S(s.k) + " v " + S(s.v), a);
      OpCase& c = t.Add("attention", variant, dt, ref::Attention).In(Uniform(s.q, -2, 2)).In(Uniform(s.k, -2, 2));
      c.In(Uniform(s.v)).Attr("causal", s.causal).Attr("scale", s.scale);
      if (s.grad && dt == kF64) c.Grad();
      // (q, k, v, y, lse, dy, dlse) with y and lse the forward's
      OpCase& g = t.Add("attention_grad", variant, dt, ref::AttentionGrad);
      g.In(Uniform(s.q, -2, 2)).In(Uniform(s.k, -2, 2)).In(Uniform(s.v));
      g.In(OutputOf("attention", {0, 1, 2}, a, 0)).In(OutputOf("attention", {0, 1, 2}, a, 1));
      Shape y = s.q;
      y.back() = s.v.back();
      g.In(Uniform(y)).In(Uniform(Shape(s.q.begin(), s.q.end() - 1), -0.5, 0.5));
      g.Attr("causal", s.causal).Attr("scale", s.scale);
    }
  // Several blocks of 64 in float32, heads and a batch: the kernels' tiling at scale.
  for (int64_t causal : {0, 1}) {
    const Attrs a{{"causal", causal}, {"scale", 0.0}};
    const Shape q{2, 2, 130, 16};
    t.Add("attention", WithAttrs("q " + S(q) + " (blocks)", a), kF32, ref::Attention)
        .In(Uniform(q, -2, 2))
        .In(Uniform(q, -2, 2))
        .In(Uniform(q))
        .Attr("causal", causal)
        .Attr("scale", 0.0)
        .Tol(1e-5, 1e-5);
  }
}

// The packed form: qkv (B, T, 3 D) with heads; one block and two.
void AddAttentionQkv(Table& t) {
  struct Packed {
    Shape qkv;
    int64_t heads, causal;
    bool grad;
  };
  // The last: heads of 64 (GPT-2's), both lanes' columns of CUDA's tiled kernels in use.
  for (const Packed& s : {Packed{{2, 5, 12}, 2, 1, false}, Packed{{2, 5, 12}, 1, 0, false},
                          Packed{{1, 70, 6}, 2, 1, true}, Packed{{1, 66, 12}, 4, 0, false},
                          Packed{{1, 40, 384}, 2, 1, false}})
    for (DType dt : kFloats) {
      const Attrs a{{"heads", s.heads}, {"causal", s.causal}, {"scale", 0.0}};
      const std::string variant = WithAttrs("qkv " + S(s.qkv), a);
      OpCase& c = t.Add("attention_qkv", variant, dt, ref::AttentionQkv).In(Uniform(s.qkv, -2, 2));
      c.attrs = a;
      if (s.grad && dt == kF64) c.Grad();
      const Shape y{s.qkv[0], s.qkv[1], s.qkv[2] / 3}, lse{s.qkv[0], s.heads, s.qkv[1]};
      OpCase& g = t.Add("attention_qkv_grad", variant, dt, ref::AttentionQkvGrad).In(Uniform(s.qkv, -2, 2));
      g.In(OutputOf("attention_qkv", {0}, a, 0)).In(OutputOf("attention_qkv", {0}, a, 1));
      g.In(Uniform(y)).In(Uniform(lse, -0.5, 0.5));
      g.attrs = a;
    }
  // A bfloat16 qkv with float32 results, forward and gradient: what the bf16 policy lowers them
  // to (Note [Attention from a bfloat16 qkv] in device/cpu/kernels/attention.cc), against the
  // float64 attention of the same bfloat16 values. The kernels round the probabilities, dy and
  // dS to bfloat16 before their products (relative 2^-9 each): 5e-3 relative and absolute on
  // the forward, 1e-2 on the gradient (measured: the gradient's worst elements are about 4e-3
  // off, the forward's within 2e-3).
  for (const Packed& s : {Packed{{2, 5, 12}, 2, 1, false}, Packed{{1, 70, 6}, 2, 1, false},
                          Packed{{1, 66, 12}, 4, 0, false}}) {
    const Attrs a = Attrs{{"heads", s.heads}, {"causal", s.causal}, {"scale", 0.0}}.Set("out_dtype", int64_t(kF32));
    const std::string variant = WithAttrs("qkv " + S(s.qkv), a) + " -> float32";
    const char* why = "head widths cuDNN's fused attention does not take (a multiple of 8) or a nonzero dlse: "
                      "the policy keeps attention float32 on CUDA for them";
    OpCase& c = t.Add("attention_qkv", variant, DType::kBFloat16, ref::AttentionQkv).In(Uniform(s.qkv, -2, 2));
    c.NoGrad("an attention of a bfloat16 qkv is not differentiated (Note [Precision policy])").CpuOnly(why);
    c.attrs = a;
    c.Tol(5e-3, 5e-3);
    const Shape y{s.qkv[0], s.qkv[1], s.qkv[2] / 3}, lse{s.qkv[0], s.heads, s.qkv[1]};
    OpCase& g = t.Add("attention_qkv_grad", variant, DType::kBFloat16, ref::AttentionQkvGrad).In(Uniform(s.qkv, -2, 2));
    g.In(OutputOf("attention_qkv", {0}, a, 0)).In(OutputOf("attention_qkv", {0}, a, 1));
    g.In(Uniform(y).As(kF32)).In(Uniform(lse, -0.5, 0.5).As(kF32)).CpuOnly(why);
    g.attrs = a;
    g.Tol(1e-2, 1e-2);
  }
  // The records cuDNN's fused attention takes (Note [Attention on cuDNN]): head widths that are
  // multiples of 8, and the gradient's dlse zeros that it knows are zeros (zero_dlse, as
  // attention_qkv's backward makes them). Also run on CUDA, against the CPU within twice these
  // tolerances: both round y and dqkv to bfloat16 (relative 2^-9), from sums in other orders.
  for (const Packed& s : {Packed{{2, 130, 48}, 2, 1, false}, Packed{{2, 64, 384}, 2, 0, false},
                          Packed{{1, 100, 192}, 1, 1, false}}) {
    const Attrs a = Attrs{{"heads", s.heads}, {"causal", s.causal}, {"scale", 0.0}}.Set("out_dtype", int64_t(kF32));
    const std::string variant = WithAttrs("qkv " + S(s.qkv), a) + " -> float32";
    OpCase& c = t.Add("attention_qkv", variant, DType::kBFloat16, ref::AttentionQkv).In(Uniform(s.qkv, -2, 2));
    c.NoGrad("an attention of a bfloat16 qkv is not differentiated (Note [Precision policy])");
    c.attrs = a;
    c.Tol(5e-3, 5e-3);
    const Shape y{s.qkv[0], s.qkv[1], s.qkv[2] / 3}, lse{s.qkv[0], s.heads, s.qkv[1]};
    OpCase& g = t.Add("attention_qkv_grad", variant + " zero_dlse", DType::kBFloat16, ref::AttentionQkvGrad)
                    .In(Uniform(s.qkv, -2, 2));
    g.In(OutputOf("attention_qkv", {0}, a, 0)).In(OutputOf("attention_qkv", {0}, a, 1));
    g.In(Uniform(y).As(kF32)).In(Values(lse, std::vector<double>(size_t(NumElements(lse)), 0.0), kF32));
    g.attrs = Attrs(a).Set("zero_dlse", int64_t(1));
    g.Tol(1e-2, 1e-2);
    // y and dqkv kept in bfloat16 (Note [Attention results kept in bfloat16] in
    // graph/bf16_attention.cc): the gradient reads the forward's bfloat16 y.
    const Attrs low = Attrs(a).Set("out_dtype", int64_t(DType::kBFloat16));
    const std::string low_variant = WithAttrs("qkv " + S(s.qkv), low) + " -> bfloat16";
    OpCase& c16 = t.Add("attention_qkv", low_variant, DType::kBFloat16, ref::AttentionQkv).In(Uniform(s.qkv, -2, 2));
    c16.NoGrad("an attention of a bfloat16 qkv is not differentiated (Note [Precision policy])");
    c16.attrs = low;
    c16.Tol(5e-3, 5e-3).Rounded16();
    OpCase& g16 = t.Add("attention_qkv_grad", low_variant + " zero_dlse", DType::kBFloat16, ref::AttentionQkvGrad)
                      .In(Uniform(s.qkv, -2, 2));
    g16.In(OutputOf("attention_qkv", {0}, low, 0)).In(OutputOf("attention_qkv", {0}, low, 1));
    g16.In(Uniform(y).As(kF32)).In(Values(lse, std::vector<double>(size_t(NumElements(lse)), 0.0), kF32));
    g16.attrs = Attrs(low).Set("zero_dlse", int64_t(1));
    g16.Tol(1e-2, 1e-2).Rounded16();
  }
}

// Note [Cross-entropy fused with the head's product] (core/ops/loss.cc): the loss alone (grads
// 0) and with its gradients (grads 1), w as a table (tb 1) or (D, V), whole and in chunks of
// rows (the last one short), against the reference's unchunked float64 logits. The small float64
// rows with grads also check the backward (which scales the gradients) by finite differences.
void AddLinearCrossEntropy(Table& t) {
  struct Lce {
    int64_t n, d, v, tb, grads, chunk;
    DType labels;
  };
  const char* no_grad = "grads 0 computes the loss alone, which has no backward";
  for (const Lce& k : {Lce{10, 6, 7, 1, 1, 0, DType::kInt32}, Lce{10, 6, 7, 0, 1, 3, DType::kInt64},
                       Lce{37, 5, 300, 1, 1, 8, DType::kInt32}, Lce{12, 4, 9, 1, 0, 5, DType::kInt64}})
    for (DType dt : kFloats) {
      std::vector<double> labels;
      for (int64_t i = 0; i < k.n; ++i) labels.push_back(double((i * 7 + 3) % k.v));
      const Attrs a{{"tb", k.tb}, {"grads", k.grads}, {"chunk", k.chunk}};
      const Shape w = k.tb ? Shape{k.v, k.d} : Shape{k.d, k.v};
      OpCase& c = t.Add("linear_cross_entropy", WithAttrs("h " + S({k.n, k.d}) + " w " + S(w), a), dt,
                        ref::LinearCrossEntropy)
                      .In(Uniform({k.n, k.d}, -2, 2))
                      .In(Uniform(w, -1, 1))
                      .In(Values({k.n}, labels, k.labels));
      c.attrs = a;
      if (!k.grads) c.NoGrad(no_grad);
    }
  // What the bf16 policy lowers it to: bfloat16 h and w, float32 results, against the float64
  // products of the same bfloat16 values. The loss's products are exact in float32 sums (5e-5);
  // the gradients' products read p rounded to bfloat16 (relative 2^-9 each): 1e-2.
  for (int64_t tb : {1, 0}) {
    const int64_t n = 33, d = 16, v = 40;
    std::vector<double> labels;
    for (int64_t i = 0; i < n; ++i) labels.push_back(double((i * 5 + 1) % v));
    const Attrs a = Attrs{{"tb", tb}, {"grads", int64_t(1)}, {"chunk", int64_t(8)}}.Set("out_dtype", int64_t(kF32));
    const Shape w = tb ? Shape{v, d} : Shape{d, v};
    OpCase& c = t.Add("linear_cross_entropy", WithAttrs("h " + S({n, d}) + " w " + S(w), a) + " -> float32",
                      DType::kBFloat16, ref::LinearCrossEntropy)
                    .In(Uniform({n, d}, -2, 2))
                    .In(Uniform(w, -1, 1))
                    .In(Values({n}, labels, DType::kInt32));
    c.attrs = a;
    c.NoGrad("a bfloat16 record is not differentiated (Note [Precision policy])");
    c.Tol(1e-2, 2e-4);
  }
}

}  // namespace

void AddTransformerCases(Table& t) {
  AddAttention(t);
  AddAttentionQkv(t);
  AddLinearCrossEntropy(t);
}

}  // namespace table
}  // namespace test
}  // namespace loom
