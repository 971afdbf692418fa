#include "common/op_check.h"

#include <cmath>
#include <exception>
#include <random>

#include "common/graph_capture.h"
#include "common/harness.h"

namespace loom {
namespace test {
namespace {

// A stable seed per (case, input): FNV-1a of the label.
uint32_t SeedOf(const std::string& label, size_t input) {
  uint32_t h = 2166136261u;
  for (char ch : label) h = (h ^ uint8_t(ch)) * 16777619u;
  return h ^ uint32_t(input * 0x9e3779b9u);
}

// The values of a uniform or grid input, on the host.
std::vector<double> HostValues(const InputSpec& s, uint32_t seed) {
  if (s.kind == InputSpec::Kind::kValues) return s.values;
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(s.lo, s.hi);
  std::vector<double> v(size_t(NumElements(s.shape)));
  for (double& x : v) x = s.kind == InputSpec::Kind::kGrid ? std::round(dist(gen) * 2) / 2 : dist(gen);
  return v;
}

Tensor View(const InputSpec& s, const Tensor& t) { return s.permute.empty() ? t : ops::Permute(t, s.permute); }

bool IsFloat(DType t) { return t == DType::kFloat32 || t == DType::kFloat64; }
// An output compared within the row's tolerances (OpCase::rounded16 for 16-bit ones).
bool Tolerant(const OpCase& c, DType t) {
  return IsFloat(t) || (c.rounded16 && (t == DType::kBFloat16 || t == DType::kFloat16));
}

std::vector<HostTensor> ToHost(const std::vector<Tensor>& ts) {
  std::vector<HostTensor> out;
  for (const Tensor& t : ts) out.emplace_back(t.shape(), ToDoubles(t));
  return out;
}

void SetGenerator(const OpCase& c, Device& dev) {
  dev.SetRandSeed(c.seed);
  dev.AdvanceRng(c.counter);
}

// Runs `check`, reporting an exception as a failure of the row in `mode`.
template <typename F>
void Guarded(const char* mode, const OpCase& c, F check) {
  SCOPED_TRACE(std::string("[") + mode + "] " + c.label);
  try {
    check();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "[" << mode << "] " << c.label << " (" << c.op << ", " << c.attrs.ToString()
                  << ") threw: " << e.what();
  }
}

}  // namespace

std::vector<Tensor> MakeInputs(const OpCase& c, const std::shared_ptr<Device>& dev) {
  auto cpu = CpuDevice();
  std::vector<Tensor> made;  // on the CPU, viewed: what later derivations see
  std::vector<Tensor> out;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const InputSpec& s = c.inputs[i];
    Tensor base;
    if (s.kind == InputSpec::Kind::kDerived) {
      NoGradGuard no_grad;
      base = s.derive(made).Detach();
    } else {
      base = FromDoubles(HostValues(s, SeedOf(c.label, i)), s.shape, s.dtype.value_or(c.dtype), cpu);
    }
    made.push_back(View(s, base));
    out.push_back(dev.get() == cpu.get() ? made.back() : View(s, ToDevice(base, dev)));
  }
  return out;
}

std::vector<Tensor> RunCase(const OpCase& c, const std::vector<Tensor>& inputs, const std::shared_ptr<Device>& dev) {
  NoGradGuard no_grad;
  if (c.random) SetGenerator(c, *dev);
  switch (c.outputs) {
    case OpCase::Outputs::kNew: return Call(c.op, inputs, c.attrs);
    case OpCase::Outputs::kIntoInputs: {
      std::vector<TensorMeta> metas;
      for (const Tensor& t : inputs) metas.push_back({t.shape(), t.dtype()});
      std::vector<Tensor> outs;
      for (size_t k = 0; k < c.into.size(); ++k) {
        if (c.into[k] >= 0) {
          outs.push_back(inputs[size_t(c.into[k])]);
          continue;
        }
        const TensorMeta m = GetOp(c.op).infer(metas, Attrs(c.attrs).Bind(GetOp(c.op)))[k];
        outs.emplace_back(m.shape, m.dtype, dev);
      }
      CallInto(c.op, inputs, outs, c.attrs);
      return outs;
    }
    case OpCase::Outputs::kFresh: {
      std::vector<Tensor> outs;
      for (const TensorMeta& m : GetOp(c.op).infer({}, c.attrs)) outs.emplace_back(m.shape, m.dtype, dev);
      CallInto(c.op, inputs, outs, c.attrs);
      return outs;
    }
  }
  return {};
}

void CheckForward(const OpCase& c) {
  Guarded("forward", c, [&] {
    std::vector<Tensor> in = MakeInputs(c, CpuDevice());
    std::vector<HostTensor> host_in = ToHost(in);  // before the op: in-place updates change them
    std::vector<Tensor> out = RunCase(c, in, CpuDevice());
    std::vector<HostTensor> want = c.ref(RefArgs{host_in, c.attrs, c.seed, c.counter});
    ASSERT_EQ(out.size(), want.size()) << "outputs of the op and of the reference";
    for (size_t i = 0; i < out.size(); ++i) {
      const std::string what = c.label + " output " + std::to_string(i);
      ASSERT_EQ(out[i].shape(), want[i].shape) << what;
      bool tolerant = Tolerant(c, out[i].dtype());
      ExpectClose(ToDoubles(out[i]), want[i].v, tolerant ? c.rtol : 0, tolerant ? c.atol : 0, what);
    }
    // Note [Outputs that are inputs] (core/op.h): such outputs are the input tensors themselves.
    if (c.outputs != OpCase::Outputs::kNew) return;
    for (const auto& [o, i] : GetOp(c.op).inplace) {
      EXPECT_EQ(out[size_t(o)].block(), in[size_t(i)].block()) << c.label << ": output " << o << " is input " << i;
    }
  });
}

void CheckGradient(const OpCase& c) {
  Guarded("gradient", c, [&] {
    std::vector<Tensor> in = MakeInputs(c, CpuDevice());
    std::vector<bool> differentiable;
    for (const InputSpec& s : c.inputs) differentiable.push_back(!s.constant && s.kind != InputSpec::Kind::kDerived);
    // Random rows draw the same numbers on every evaluation, so finite differences see one function.
    OpFn f = [&](const std::vector<Tensor>& x) {
      if (c.random) SetGenerator(c, *CpuDevice());
      return Call(c.op, x, c.attrs)[0];
    };
    GradCheck(f, in, c.grad_eps, c.grad_tol, "[gradient] " + c.label, differentiable);
  });
}

void CheckGraphReplay(const OpCase& c) {
  Guarded("graph", c, [&] {
    auto cpu = CpuDevice();
    std::vector<Tensor> eager = RunCase(c, MakeInputs(c, cpu), cpu);
    std::vector<Tensor> in = MakeInputs(c, cpu);
    CapturedGraph graph(cpu, "op_case");
    std::vector<Tensor> replayed = graph.Capture([&] { return RunCase(c, in, cpu); });
    if (c.random) SetGenerator(c, *cpu);  // the capture drew nothing; the replay draws from here
    graph.Replay(/*sequential=*/true);
    ASSERT_EQ(eager.size(), replayed.size());
    for (size_t i = 0; i < eager.size(); ++i)
      EXPECT_TRUE(HostBytes(eager[i]) == HostBytes(replayed[i]))
          << c.label << " output " << i << ": the replay wrote other bytes than eager execution";
  });
}

void CheckAgainstCpu(const OpCase& c, const std::shared_ptr<Device>& dev) {
  Guarded(dev->name().c_str(), c, [&] {
    std::vector<Tensor> want = RunCase(c, MakeInputs(c, CpuDevice()), CpuDevice());
    std::vector<Tensor> got = RunCase(c, MakeInputs(c, dev), dev);
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const std::string what = c.label + " output " + std::to_string(i);
      ASSERT_EQ(want[i].shape(), got[i].shape()) << what;
      ASSERT_EQ(want[i].dtype(), got[i].dtype()) << what;
      if (Tolerant(c, want[i].dtype()) && !c.exact())
        ExpectClose(ToDoubles(got[i]), ToDoubles(want[i]), c.cuda_rtol, c.cuda_atol, what);
      else
        EXPECT_TRUE(SameBitsAnyNaN(want[i], got[i])) << what << ": " << Name(want[i].dtype()) << " bytes differ";
    }
  });
}

}  // namespace test
}  // namespace loom
