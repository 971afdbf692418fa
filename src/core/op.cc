#include "core/op.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>

#include "core/autograd.h"
#include "core/device.h"

namespace loom {

const char* Name(DeviceType t) { return t == DeviceType::kCPU ? "cpu" : "cuda"; }

const std::string& OpRecord::name() const { return def->name; }

namespace {
std::map<std::string, std::unique_ptr<OpDef>>& Registry() {
  static std::map<std::string, std::unique_ptr<OpDef>> r;
  return r;
}
OpDef& GetOrCreate(const std::string& name) {
  auto& slot = Registry()[name];
  if (!slot) {
    slot = std::make_unique<OpDef>();
    slot->name = name;
  }
  return *slot;
}
thread_local bool g_grad_enabled = true;
}  // namespace

OpDef& DefineOp(const char* name, void (*define)(OpDef&)) {
  OpDef& def = GetOrCreate(name);
  define(def);
  return def;
}

void RegisterKernel(const std::string& name, DeviceType device, KernelFn fn) {
  GetOrCreate(name).kernels[int(device)] = fn;
}

void RegisterScratch(const std::string& name, DeviceType device, size_t (*fn)(const OpRecord&)) {
  GetOrCreate(name).scratch[int(device)] = fn;
}

void RegisterSupports(const std::string& name, DeviceType device, bool (*fn)(const OpRecord&)) {
  GetOrCreate(name).supports[int(device)] = fn;
}

const OpDef& GetOp(const std::string& name) {
  auto it = Registry().find(name);
  LOOM_CHECK(it != Registry().end() && it->second->infer, ValueError, "[ops] unknown op '", name, "'");
  return *it->second;
}

std::vector<std::string> ListOps() {
  std::vector<std::string> names;
  for (auto& kv : Registry())
    if (kv.second->infer) names.push_back(kv.first);
  return names;
}

bool GradEnabled() { return g_grad_enabled; }
NoGradGuard::NoGradGuard() : prev_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = prev_; }

static Device* CommonDevice(const OpDef& def, const std::vector<Tensor>& inputs) {
  Device* dev = nullptr;
  for (size_t i = 0; i < inputs.size(); ++i) {
    LOOM_CHECK(inputs[i].defined(), ValueError, "[", def.name, "] input ", i, " is undefined");
    if (!dev) dev = inputs[i].device();
    LOOM_CHECK(inputs[i].device() == dev, DeviceError, "[", def.name, "] inputs are on different devices: ",
               inputs[0].Describe(), " and ", inputs[i].Describe());
  }
  return dev;
}

// Note [Attribute types] in attrs.h: an attribute error, read anywhere while the op is called
// (shape inference, an eager kernel), gets the op's name in front.
template <typename F>
static auto NamingAttrErrors(const std::string& name, F&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const AttrError& e) {
    if (e.what()[0] == '[') throw;  // named already (an op called inside another)
    throw AttrError(detail::Cat("[", name, "] ", e.what()));
  }
}

static std::vector<Tensor> CallOp(const OpDef& def, const std::vector<Tensor>& given, const Attrs& attrs);

std::vector<Tensor> Call(const OpDef& op, const std::vector<Tensor>& given, const Attrs& attrs) {
  return NamingAttrErrors(op.name, [&] { return CallOp(op, given, attrs); });
}

std::vector<Tensor> Call(const std::string& name, const std::vector<Tensor>& given, const Attrs& attrs) {
  return Call(GetOp(name), given, attrs);
}

static std::vector<Tensor> CallOp(const OpDef& def, const std::vector<Tensor>& given, const Attrs& given_attrs) {
  const std::string& name = def.name;
  // Note [Declared attributes]: checked before anything reads them; shape inference, the record
  // and the autograd node (so the backward) see them bound.
  Attrs attrs = given_attrs;
  if (attrs.op() != &def) attrs.Bind(def);
  Device* dev = CommonDevice(def, given);
  LOOM_CHECK(dev, ValueError, "[", name, "] needs at least one input (use CallInto for creation ops)");
  std::vector<Tensor> inputs = given;
  if (!def.accepts_strided && !def.view)
    for (Tensor& t : inputs)
      if (!t.is_contiguous()) t = t.Contiguous();
  std::vector<TensorMeta> in_metas;
  in_metas.reserve(inputs.size());
  for (const Tensor& t : inputs) in_metas.push_back({t.shape(), t.dtype()});
  std::vector<TensorMeta> out_metas = def.infer(in_metas, attrs);

  std::vector<Tensor> outputs;
  if (def.view) {
    outputs.push_back(def.view(inputs[0].Detach(), attrs));
  } else {
    OpRecord rec;
    rec.def = &def;
    rec.attrs = attrs;
    rec.inputs.reserve(inputs.size());
    for (const Tensor& t : inputs) rec.inputs.push_back(t.Detach());
    for (size_t o = 0; o < out_metas.size(); ++o) {
      const TensorMeta& m = out_metas[o];
      // Note [Outputs that are inputs]
      auto in_place = std::find_if(def.inplace.begin(), def.inplace.end(),
                                   [&](const std::pair<int, int>& p) { return p.first == int(o); });
      if (in_place != def.inplace.end()) {
        size_t src = size_t(in_place->second);
        LOOM_ASSERT(src < given.size(), name, " output ", o, " aliases missing input ", src);
        const Tensor& t = given[src];
        LOOM_CHECK(t.is_contiguous(), ValueError, "[", name, "] input ", src, " (", t.Describe(),
                   ") is updated in place and must be contiguous");
        LOOM_ASSERT(t.shape() == m.shape && t.dtype() == m.dtype, name, " output ", o, " is ", Name(m.dtype), " ",
                    ToString(m.shape), " but aliases input ", t.Describe());
        outputs.push_back(t.Detach());
      } else {
        outputs.emplace_back(m.shape, m.dtype, inputs[0].device_ptr());
      }
      rec.outputs.push_back(outputs.back());
    }
    dev->Submit(std::move(rec));
  }
  RecordAutograd(def, attrs, inputs, outputs);
  return outputs;
}

Tensor Call1(const OpDef& op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  std::vector<Tensor> out = Call(op, inputs, attrs);
  LOOM_ASSERT(out.size() == 1, op.name, " returns ", out.size(), " outputs");
  return out[0];
}

Tensor Call1(const std::string& name, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  return Call1(GetOp(name), inputs, attrs);
}

static void CallIntoOp(const OpDef& def, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                       const Attrs& attrs);

void CallInto(const OpDef& op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
              const Attrs& attrs) {
  NamingAttrErrors(op.name, [&] { CallIntoOp(op, inputs, outputs, attrs); });
}

void CallInto(const std::string& name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
              const Attrs& attrs) {
  CallInto(GetOp(name), inputs, outputs, attrs);
}

static void CallIntoOp(const OpDef& def, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                       const Attrs& given_attrs) {
  const std::string& name = def.name;
  Attrs attrs = given_attrs;  // Note [Declared attributes]
  if (attrs.op() != &def) attrs.Bind(def);
  LOOM_ASSERT(!def.view, "CallInto on view op ", name);
  std::vector<Tensor> all = inputs;
  all.insert(all.end(), outputs.begin(), outputs.end());
  Device* dev = CommonDevice(def, all);
  LOOM_CHECK(dev, ValueError, "[", name, "] has neither inputs nor outputs");
  std::vector<TensorMeta> in_metas;
  OpRecord rec;
  rec.def = &def;
  rec.attrs = attrs;
  for (const Tensor& t : inputs) {
    Tensor c = (!def.accepts_strided && !t.is_contiguous()) ? t.Detach().Contiguous() : t.Detach();
    in_metas.push_back({c.shape(), c.dtype()});
    rec.inputs.push_back(c);
  }
  std::vector<TensorMeta> out_metas = def.infer(in_metas, attrs);
  LOOM_CHECK(out_metas.size() == outputs.size(), ValueError, "[", name, "] writes ", out_metas.size(),
             " outputs, ", outputs.size(), " given");
  for (size_t i = 0; i < outputs.size(); ++i) {
    LOOM_CHECK(outputs[i].shape() == out_metas[i].shape && outputs[i].dtype() == out_metas[i].dtype, ShapeError,
               "[", name, "] output ", i, " is ", outputs[i].Describe(), ", the op produces ",
               Name(out_metas[i].dtype), " ", ToString(out_metas[i].shape));
    LOOM_CHECK(def.accepts_strided || outputs[i].is_contiguous(), ValueError, "[", name, "] output ", i,
               " must be contiguous");
    rec.outputs.push_back(outputs[i].Detach());
  }
  dev->Submit(std::move(rec));
}

}  // namespace loom
