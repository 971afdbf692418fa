// ONNX import: parse a ModelProto into ImportedGraph, check every node against the registry
// (Note [ONNX handlers] in import_graph.h) and infer dtypes through the graph, then run it.
#include "io/onnx/import.h"

#include <algorithm>
#include <atomic>
#include <set>

#include "core/error.h"
#include "core/ops.h"
#include "core/device.h"
#include "core/file.h"
#include "io/onnx/import_graph.h"
#include "io/onnx/tensor_proto.h"

namespace loom {
namespace io {
namespace onnx {

// ---- NodeSpec ----

std::string NodeSpec::Where() const { return detail::Cat("[onnx] node '", name, "' (", op_type, ")"); }

const Attr& NodeSpec::Get(const std::string& key) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) Fail(*this, "attribute '" + key + "' is required");
  return it->second;
}

static const Attr* Typed(const NodeSpec& n, const std::string& key, Attr::Kind kind, const char* kind_name) {
  auto it = n.attrs.find(key);
  if (it == n.attrs.end()) return nullptr;
  if (it->second.kind != kind)
    Fail(n, detail::Cat("attribute '", key, "' must be ", kind_name, ", got ", it->second.type_name));
  return &it->second;
}

int64_t NodeSpec::Int(const std::string& key, int64_t dflt) const {
  const Attr* a = Typed(*this, key, Attr::kInt, "INT");
  return a ? a->i : dflt;
}
double NodeSpec::Float(const std::string& key, double dflt) const {
  const Attr* a = Typed(*this, key, Attr::kFloat, "FLOAT");
  return a ? a->f : dflt;
}
std::string NodeSpec::Str(const std::string& key, const std::string& dflt) const {
  const Attr* a = Typed(*this, key, Attr::kString, "STRING");
  return a ? a->s : dflt;
}
std::vector<int64_t> NodeSpec::Ints(const std::string& key, const std::vector<int64_t>& dflt) const {
  const Attr* a = Typed(*this, key, Attr::kInts, "INTS");
  return a ? a->ints : dflt;
}
std::vector<double> NodeSpec::Floats(const std::string& key, const std::vector<double>& dflt) const {
  const Attr* a = Typed(*this, key, Attr::kFloats, "FLOATS");
  return a ? a->floats : dflt;
}

// ---- shared helpers ----

void Fail(const NodeSpec& n, const std::string& what) { throw OnnxError(n.Where() + ": " + what); }
void Fail(const RunContext& c, const std::string& what) { Fail(c.node, what); }

const Tensor& RunContext::T(size_t i) const {
  if (!Has(i)) Fail(node, detail::Cat("input ", i, " is required"));
  return in_[i].t;
}

const Value& RunContext::V(size_t i) const {
  if (i >= in_.size()) Fail(node, detail::Cat("input ", i, " is required"));
  return in_[i];
}

std::vector<int64_t> RunContext::Ints(size_t i, const char* what) const {
  // Has first: an input past the node's last (Pad at opset 11 without its pads) is not read.
  if (!Has(i)) Fail(node, detail::Cat("input ", i, " (", what, ") is required"));
  const Value& v = in_[i];
  if (v.host) return *v.host;
  if (v.t.numel() == 0) return {};  // an empty tensor from a file has nothing to read (nor written)
  if (v.t.dtype() == DType::kInt64) return v.t.Contiguous().ToVector<int64_t>();
  Tensor c = ops::Cast(v.t, IsFloating(v.t.dtype()) ? DType::kFloat64 : DType::kInt64);
  if (c.dtype() == DType::kInt64) return c.ToVector<int64_t>();
  std::vector<int64_t> out;
  for (double d : c.ToVector<double>()) {
    // A float outside int64 (or NaN) has no integer to truncate to: converting it is undefined.
    if (!(d > -9.3e18 && d < 9.3e18))
      Fail(node, detail::Cat("input ", i, " (", what, ") holds ", d, ", not a number an int64 can hold"));
    out.push_back(int64_t(d));
  }
  return out;
}

namespace {
std::atomic<int64_t> g_host_value_limit{kMaxHostValues};
}  // namespace

size_t HostCount(const RunContext& c, int64_t n, const char* what) {
  const int64_t limit = OnnxHostValueLimit();
  if (n < 0 || n > limit)
    Fail(c, detail::Cat(what, " needs ", n, " values built on the host, more than the ", limit,
                        " loom builds (Note [Host-built index arrays])"));
  return size_t(n);
}

int64_t RunContext::Int(size_t i, const char* what) const {
  const std::vector<int64_t> v = Ints(i, what);
  if (v.size() != 1) Fail(node, detail::Cat("input ", i, " (", what, ") must hold one value, it holds ", v.size()));
  return v[0];
}

double RunContext::Double(size_t i, const char* what) const {
  const std::vector<double> v = Doubles(i, what);
  if (v.size() != 1) Fail(node, detail::Cat("input ", i, " (", what, ") must hold one value, it holds ", v.size()));
  return v[0];
}

std::vector<double> RunContext::Doubles(size_t i, const char* what) const {
  if (!Has(i)) Fail(node, detail::Cat("input ", i, " (", what, ") is required"));
  const Value& v = in_[i];
  if (v.host) return std::vector<double>(v.host->begin(), v.host->end());
  if (v.t.numel() == 0) return {};
  return ops::Cast(v.t, DType::kFloat64).Contiguous().ToVector<double>();
}

void CheckFloatInput(const InferArgs& a, size_t i) {
  if (a.node.HasInput(i) && a[i] != DType::kFloat32 && a[i] != DType::kFloat64)
    Fail(a.node, detail::Cat("input ", i, " '", a.node.inputs[i], "' is ", Name(a[i]),
                             "; loom runs this op on float32 and float64 only"));
}

void CheckSameDType(const InferArgs& a, size_t i, size_t j) {
  if (a.node.HasInput(i) && a.node.HasInput(j) && a[i] != a[j])
    Fail(a.node, detail::Cat("inputs ", i, " and ", j, " have different dtypes (", Name(a[i]), ", ", Name(a[j]), ")"));
}

int64_t Axis(const RunContext& c, int64_t axis, int64_t rank, const char* what) {
  if (axis < -rank || axis >= rank)
    Fail(c, detail::Cat(what, " ", axis, " is out of range for rank ", rank));
  return axis < 0 ? axis + rank : axis;
}

Value V(const Tensor& t) { return Value{t, nullptr}; }

Value HostInts(const std::vector<int64_t>& values, const Shape& shape, DType dtype, const std::shared_ptr<Device>& dev) {
  Tensor t = ops::FromVector<int64_t>(values, shape, dev);
  if (dtype != DType::kInt64) t = ops::Cast(t, dtype);
  return Value{t, std::make_shared<const std::vector<int64_t>>(values)};
}

std::vector<DType> Same0(const InferArgs& a) { return std::vector<DType>(std::max<size_t>(1, a.node.outputs.size()), a[0]); }
std::vector<DType> FloatUnary(const InferArgs& a) {
  CheckFloatInput(a, 0);
  return {a[0]};
}
std::vector<DType> FloatAllSame(const InferArgs& a) {
  for (size_t i = 0; i < a.size(); ++i) {
    CheckFloatInput(a, i);
    CheckSameDType(a, 0, i);
  }
  return {a[0]};
}

OpEntry MakeOp(const char* op_type, int64_t since, int min_inputs, int max_inputs, std::vector<std::string> attrs,
               std::vector<DType> (*infer)(const InferArgs&), std::vector<Value> (*run)(RunContext&)) {
  OpEntry e;
  e.op_type = op_type;
  e.since = since;
  e.min_inputs = min_inputs;
  e.max_inputs = max_inputs;
  e.attrs = std::move(attrs);
  e.infer = infer;
  e.run = run;
  return e;
}

const std::vector<OpEntry>& OpRegistry() {
  static const std::vector<OpEntry> registry = [] {
    std::vector<OpEntry> r;
    AddMathOps(&r);
    AddNnOps(&r);
    AddShapeOps(&r);
    AddIndexOps(&r);
    AddLossOps(&r);
    std::sort(r.begin(), r.end(), [](const OpEntry& a, const OpEntry& b) {
      return a.op_type != b.op_type ? a.op_type < b.op_type : a.since < b.since;
    });
    return r;
  }();
  return registry;
}

// ---- parsing ----

namespace {

using onnx_pb::AttributeProto;
using onnx_pb::GraphProto;
using onnx_pb::ModelProto;
using onnx_pb::NodeProto;
using onnx_pb::ValueInfoProto;

bool IsIntegral(DType t) { return t == DType::kInt32 || t == DType::kInt64 || t == DType::kUInt8 || t == DType::kBool; }

// Integer values of a small integer tensor, known on the host (Value::host).
std::shared_ptr<const std::vector<int64_t>> HostValues(const Tensor& t) {
  if (!IsIntegral(t.dtype()) || t.numel() > (1 << 16)) return nullptr;
  if (t.numel() == 0) return std::make_shared<const std::vector<int64_t>>();  // nothing written to read
  return std::make_shared<const std::vector<int64_t>>(ops::Cast(t, DType::kInt64).ToVector<int64_t>());
}

Attr ParseAttr(const AttributeProto& a, const std::string& where, const std::shared_ptr<Device>& dev) {
  Attr r;
  r.type_name = AttributeProto::AttributeType_IsValid(a.type())
                    ? AttributeProto::AttributeType_Name(static_cast<AttributeProto::AttributeType>(a.type()))
                    : detail::Cat("type ", int(a.type()));
  LOOM_CHECK(a.ref_attr_name().empty(), OnnxError, where, ": attribute '", a.name(),
             "' refers to a function attribute, which loom does not import");
  switch (a.type()) {
    case AttributeProto::INT: r.kind = Attr::kInt; r.i = a.i(); break;
    case AttributeProto::FLOAT: r.kind = Attr::kFloat; r.f = a.f(); break;
    case AttributeProto::STRING: r.kind = Attr::kString; r.s = a.s(); break;
    case AttributeProto::INTS: r.kind = Attr::kInts; r.ints.assign(a.ints().begin(), a.ints().end()); break;
    case AttributeProto::FLOATS: r.kind = Attr::kFloats; r.floats.assign(a.floats().begin(), a.floats().end()); break;
    case AttributeProto::TENSOR:
      r.kind = Attr::kTensor;
      r.t = TensorFromProto(a.t(), dev, detail::Cat(where, " attribute '", a.name(), "'"));
      r.t_ints = HostValues(r.t);
      break;
    default: r.kind = Attr::kOther; break;  // graphs, sparse tensors, strings: no handler takes them
  }
  return r;
}

OnnxValueInfo ParseValueInfo(const ValueInfoProto& v, const char* what) {
  std::string where = detail::Cat("[onnx] graph ", what, " '", v.name(), "'");
  LOOM_CHECK(!v.name().empty(), OnnxError, "[onnx] a graph ", what, " has no name");
  LOOM_CHECK(v.has_type() && v.type().has_tensor_type(), OnnxError, where,
             " is not a tensor (sequences, maps and optionals are not imported)");
  const auto& tt = v.type().tensor_type();
  LOOM_CHECK(tt.has_elem_type(), OnnxError, where, " has no element type");
  OnnxValueInfo info;
  info.name = v.name();
  info.dtype = DTypeFromOnnx(tt.elem_type(), where);
  if (tt.has_shape()) {
    info.has_shape = true;
    for (const auto& d : tt.shape().dim()) {
      if (d.has_dim_value()) {
        LOOM_CHECK(d.dim_value() >= 0, OnnxError, where, " has a negative dimension ", d.dim_value());
        info.shape.push_back(d.dim_value());
      } else {
        info.shape.push_back(-1);
      }
    }
  }
  return info;
}

// The type ONNX gives an attribute: by its name, which means the same in every op the registry
// holds, except `value` (a TENSOR but in Pad before opset 11) and Constant's value_* forms.
Attr::Kind AttrKind(const std::string& op, const std::string& name, const char** type_name) {
  static const std::map<std::string, std::pair<Attr::Kind, const char*>> kinds = {
      {"alpha", {Attr::kFloat, "FLOAT"}},      {"beta", {Attr::kFloat, "FLOAT"}},
      {"gamma", {Attr::kFloat, "FLOAT"}},      {"epsilon", {Attr::kFloat, "FLOAT"}},
      {"momentum", {Attr::kFloat, "FLOAT"}},   {"ratio", {Attr::kFloat, "FLOAT"}},
      {"min", {Attr::kFloat, "FLOAT"}},        {"max", {Attr::kFloat, "FLOAT"}},
      {"value_float", {Attr::kFloat, "FLOAT"}}, {"value_floats", {Attr::kFloats, "FLOATS"}},
      {"value_int", {Attr::kInt, "INT"}},      {"value_ints", {Attr::kInts, "INTS"}},
      {"value", {Attr::kTensor, "TENSOR"}},    {"auto_pad", {Attr::kString, "STRING"}},
      {"mode", {Attr::kString, "STRING"}},     {"axes", {Attr::kInts, "INTS"}},
      {"perm", {Attr::kInts, "INTS"}},         {"pads", {Attr::kInts, "INTS"}},
      {"strides", {Attr::kInts, "INTS"}},      {"dilations", {Attr::kInts, "INTS"}},
      {"kernel_shape", {Attr::kInts, "INTS"}}, {"split", {Attr::kInts, "INTS"}},
      {"starts", {Attr::kInts, "INTS"}},       {"ends", {Attr::kInts, "INTS"}},
      {"scales", {Attr::kFloats, "FLOATS"}},   {"bias", {Attr::kFloat, "FLOAT"}},
      {"lambd", {Attr::kFloat, "FLOAT"}},      {"reduction", {Attr::kString, "STRING"}},
      {"coordinate_transformation_mode", {Attr::kString, "STRING"}},
      {"nearest_mode", {Attr::kString, "STRING"}}, {"cubic_coeff_a", {Attr::kFloat, "FLOAT"}},
      {"extrapolation_value", {Attr::kFloat, "FLOAT"}},
  };
  if (op == "Pad" && name == "value") {
    *type_name = "FLOAT";
    return Attr::kFloat;
  }
  auto it = kinds.find(name);
  if (it != kinds.end()) {
    *type_name = it->second.second;
    return it->second.first;
  }
  *type_name = "INT";  // axis, keepdims, group, transA, ceil_mode, to, blocksize, seed, ...
  return Attr::kInt;
}

// The model's IR version and default-domain opset into g, each checked against what loom imports.
void ReadVersions(const ModelProto& m, ImportedGraph* g) {
  g->ir_version = m.ir_version();
  LOOM_CHECK(m.ir_version() >= 3, OnnxError, "[onnx] IR version ", m.ir_version(),
             " is older than 3 (the first with opset imports); loom imports IR 3 to 8");
  LOOM_CHECK(m.ir_version() <= 8, OnnxError, "[onnx] IR version ", m.ir_version(),
             " is newer than 8, the version of the ONNX schema loom was built with");
  for (const auto& o : m.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") {
      g->opset = o.version();
    } else if (o.domain() != "ai.onnx.ml" && o.domain() != "ai.onnx.preview.training") {
      throw OnnxError(detail::Cat("[onnx] the model imports operator set domain '", o.domain(),
                                  "', which loom does not implement"));
    }
  }
  LOOM_CHECK(g->opset >= 1, OnnxError, "[onnx] the model imports no version of the default operator set");
}

// The registry's handler of node n at `opset` (the entry for its op_type whose range holds the
// opset), after checking n's attributes and input and output counts against it.
const OpEntry& HandlerFor(const NodeSpec& n, int opset, const std::string& where) {
  const OpEntry* e = nullptr;
  std::string ranges;
  for (const auto& r : OpRegistry()) {
    if (r.op_type != n.op_type) continue;
    ranges += detail::Cat(ranges.empty() ? "" : ", ", r.since, " to ", r.until);
    if (opset >= r.since && opset <= r.until) e = &r;
  }
  LOOM_CHECK(!ranges.empty(), OnnxError, where, ": op ", n.op_type, " is not supported by loom's importer");
  LOOM_CHECK(e != nullptr, OnnxError, where, ": ", n.op_type, " at opset ", opset,
             " is not supported (loom implements it for opsets ", ranges, ")");
  for (const auto& kv : n.attrs) {
    LOOM_CHECK(std::find(e->attrs.begin(), e->attrs.end(), kv.first) != e->attrs.end(), OnnxError, where,
               ": attribute '", kv.first, "' is not supported");
    const char* want = nullptr;
    const Attr::Kind k = AttrKind(n.op_type, kv.first, &want);
    LOOM_CHECK(kv.second.kind == k, OnnxError, where, ": attribute '", kv.first, "' must be ", want, ", got ",
               kv.second.type_name);
  }
  int nin = int(n.inputs.size()), nout = int(n.outputs.size());
  LOOM_CHECK(nin >= e->min_inputs && (e->max_inputs < 0 || nin <= e->max_inputs), OnnxError, where, ": ", nin,
             " inputs, expected ", e->min_inputs, e->max_inputs < 0 ? " or more" : detail::Cat(" to ", e->max_inputs));
  LOOM_CHECK(nout >= e->min_outputs && nout <= e->max_outputs, OnnxError, where, ": ", nout,
             " outputs, loom's handler produces ", e->min_outputs, " to ", e->max_outputs);
  return *e;
}

std::shared_ptr<ImportedGraph> Parse(const ModelProto& m, const std::shared_ptr<Device>& dev) {
  LOOM_CHECK(dev != nullptr, OnnxError, "[onnx] import needs a device");
  auto g = std::make_shared<ImportedGraph>();
  g->device = dev;
  ReadVersions(m, g.get());
  LOOM_CHECK(m.has_graph(), OnnxError, "[onnx] the model has no graph");
  const GraphProto& gp = m.graph();
  LOOM_CHECK(gp.sparse_initializer_size() == 0, OnnxError, "[onnx] sparse initializers are not imported");

  // Every name: defined once, before its use (ONNX graphs are in topological order).
  std::map<std::string, DType> dtypes;
  std::set<std::string> init_names;
  for (const auto& t : gp.initializer()) {
    LOOM_CHECK(!t.name().empty(), OnnxError, "[onnx] an initializer has no name");
    LOOM_CHECK(init_names.insert(t.name()).second, OnnxError, "[onnx] initializer '", t.name(), "' is defined twice");
    Tensor v = TensorFromProto(t, dev, detail::Cat("[onnx] initializer '", t.name(), "'"));
    g->initializers.emplace_back(t.name(), v);
    dtypes[t.name()] = v.dtype();
  }
  for (const auto& vi : gp.input()) {
    if (init_names.count(vi.name())) continue;  // IR < 4 lists initializers as inputs too
    OnnxValueInfo info = ParseValueInfo(vi, "input");
    LOOM_CHECK(!dtypes.count(info.name), OnnxError, "[onnx] graph input '", info.name, "' is defined twice");
    dtypes[info.name] = info.dtype;
    g->inputs.push_back(info);
  }

  std::set<std::string> bn_stats, other_uses, constants = init_names;
  for (int k = 0; k < gp.node_size(); ++k) {
    const NodeProto& np = gp.node(k);
    NodeSpec n;
    n.name = np.name().empty() ? detail::Cat("#", k) : np.name();
    n.op_type = np.op_type();
    n.opset = g->opset;
    const std::string where = n.Where();
    LOOM_CHECK(np.domain().empty() || np.domain() == "ai.onnx", OnnxError, where, ": domain '", np.domain(),
               "' is not one loom implements");
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    for (const auto& a : np.attribute()) {
      LOOM_CHECK(!n.attrs.count(a.name()), OnnxError, where, ": attribute '", a.name(), "' is given twice");
      n.attrs[a.name()] = ParseAttr(a, where, dev);
    }
    const OpEntry* e = &HandlerFor(n, g->opset, where);
    InferArgs args{n, {}, {}};
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const std::string& in = n.inputs[i];
      args.constant.push_back(constants.count(in) != 0);
      if (in.empty()) {
        args.in.push_back(DType::kFloat32);
        continue;
      }
      auto it = dtypes.find(in);
      LOOM_CHECK(it != dtypes.end(), OnnxError, where, ": input ", i, " '", in,
                 "' is not defined before the node (not a graph input, an initializer or an earlier output)");
      args.in.push_back(it->second);
      if (n.op_type == "BatchNormalization" && (i == 3 || i == 4)) bn_stats.insert(in);
      else other_uses.insert(in);
    }
    std::vector<DType> out = e->infer(args);
    LOOM_ASSERT(out.size() >= size_t(std::count_if(n.outputs.begin(), n.outputs.end(),
                                                    [](const std::string& s) { return !s.empty(); })),
                where, ": the handler infers ", out.size(), " outputs");
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.outputs[i].empty()) continue;
      LOOM_CHECK(!dtypes.count(n.outputs[i]), OnnxError, where, ": output '", n.outputs[i], "' is defined twice");
      dtypes[n.outputs[i]] = out[i];
      if (n.op_type == "Constant") constants.insert(n.outputs[i]);
    }
    g->nodes.push_back(std::move(n));
    g->handlers.push_back(e);
  }
  for (const auto& vo : gp.output()) {
    LOOM_CHECK(dtypes.count(vo.name()), OnnxError, "[onnx] graph output '", vo.name(), "' is not computed by the graph");
    OnnxValueInfo info;
    if (vo.has_type() && vo.type().has_tensor_type() && vo.type().tensor_type().has_elem_type()) {
      info = ParseValueInfo(vo, "output");
      LOOM_CHECK(info.dtype == dtypes[vo.name()], OnnxError, "[onnx] graph output '", vo.name(), "' is declared ",
                 Name(info.dtype), " but the graph computes ", Name(dtypes[vo.name()]));
    } else {
      info.name = vo.name();
      info.dtype = dtypes[vo.name()];
    }
    g->outputs.push_back(info);
  }
  LOOM_CHECK(!g->outputs.empty(), OnnxError, "[onnx] the graph has no outputs");

  // Initializers: float ones train, unless only BatchNormalization's running statistics use them.
  for (auto& kv : g->initializers) {
    Tensor& t = kv.second;
    bool stats_only = bn_stats.count(kv.first) && !other_uses.count(kv.first);
    if ((t.dtype() == DType::kFloat32 || t.dtype() == DType::kFloat64) && !stats_only) {
      t.set_requires_grad(true);
      t.set_name(kv.first);
    }
    g->constants[kv.first] = Value{t, HostValues(t)};
  }
  return g;
}

// Rethrows a loom error raised while running `n` with the node in front, keeping its kind.
[[noreturn]] void RethrowForNode(const NodeSpec& n) {
  const std::string w = n.Where() + ": ";
  try {
    throw;
  } catch (const OnnxError& e) {
    const std::string m = e.what();
    if (m.rfind("[onnx] node", 0) == 0) throw;
    throw OnnxError(w + m);
  } catch (const GraphError& e) {
    throw GraphError(w + e.what());
  } catch (const ShapeError& e) {
    throw ShapeError(w + e.what());
  } catch (const DTypeError& e) {
    throw DTypeError(w + e.what());
  } catch (const ValueError& e) {
    throw ValueError(w + e.what());
  } catch (const DeviceError& e) {
    throw DeviceError(w + e.what());
  }
}

}  // namespace
}  // namespace onnx

// ---- OnnxModel ----

using onnx::ImportedGraph;
using onnx::Value;

static const ImportedGraph& G(const std::shared_ptr<const ImportedGraph>& g) {
  LOOM_CHECK(g != nullptr, OnnxError, "[onnx] the model is empty (default-constructed OnnxModel)");
  return *g;
}

const std::vector<OnnxValueInfo>& OnnxModel::inputs() const { return G(graph_).inputs; }
const std::vector<OnnxValueInfo>& OnnxModel::outputs() const { return G(graph_).outputs; }
const std::vector<std::pair<std::string, Tensor>>& OnnxModel::initializers() const { return G(graph_).initializers; }
std::vector<std::pair<std::string, Tensor>> OnnxModel::parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& kv : G(graph_).initializers)
    if (kv.second.requires_grad()) out.push_back(kv);
  return out;
}
int64_t OnnxModel::opset() const { return G(graph_).opset; }
int64_t OnnxModel::ir_version() const { return G(graph_).ir_version; }
size_t OnnxModel::num_nodes() const { return G(graph_).nodes.size(); }
std::vector<std::string> OnnxModel::node_op_types() const {
  std::vector<std::string> out;
  for (const auto& n : G(graph_).nodes) out.push_back(n.op_type);
  return out;
}

std::vector<Tensor> OnnxModel::Forward(const std::vector<Tensor>& inputs) const {
  const ImportedGraph& g = G(graph_);
  LOOM_CHECK(inputs.size() <= g.inputs.size(), OnnxError, "[onnx] forward: ", inputs.size(),
             " inputs given, the graph takes ", g.inputs.size());
  std::map<std::string, Value> env = g.constants;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const OnnxValueInfo& info = g.inputs[i];
    const Tensor& t = inputs[i];
    LOOM_CHECK(t.defined(), OnnxError, "[onnx] forward: input ", i, " '", info.name, "' is undefined");
    LOOM_CHECK(t.dtype() == info.dtype, OnnxError, "[onnx] forward: input ", i, " '", info.name, "' is ",
               Name(t.dtype()), ", the graph declares ", Name(info.dtype));
    // Declared shapes are not enforced: files get them wrong (ONNX's own CastLike tests feed a
    // (1,) tensor to a (3, 4) input); the ops check the shapes they need and name the node.
    env[info.name] = Value{t, nullptr};
  }
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const onnx::NodeSpec& n = g.nodes[k];
    std::vector<Value> in;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.inputs[i].empty()) {
        in.emplace_back();
        continue;
      }
      auto it = env.find(n.inputs[i]);
      LOOM_CHECK(it != env.end(), OnnxError, n.Where(), ": input '", n.inputs[i],
                 "' has no value (a graph input that was not given)");
      in.push_back(it->second);
    }
    onnx::RunContext ctx(n, std::move(in), g.device);
    std::vector<Value> out;
    try {
      out = g.handlers[k]->run(ctx);
    } catch (const Error&) {
      onnx::RethrowForNode(n);
    }
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.outputs[i].empty()) continue;
      LOOM_ASSERT(i < out.size() && out[i].t.defined(), n.Where(), ": the handler did not compute output ", i);
      env[n.outputs[i]] = out[i];
    }
  }
  std::vector<Tensor> outs;
  for (const auto& o : g.outputs) outs.push_back(env.at(o.name).t);
  return outs;
}

OnnxModel ImportOnnxFromBytes(const std::string& bytes, const std::shared_ptr<Device>& device) {
  onnx_pb::ModelProto m;
  LOOM_CHECK(bytes.size() <= size_t(INT32_MAX), OnnxError, "[onnx] the model is ", bytes.size(),
             " bytes, over protobuf's 2 GiB limit");
  LOOM_CHECK(m.ParseFromString(bytes), OnnxError, "[onnx] the model (", bytes.size(),
             " bytes) is not a valid ONNX ModelProto");
  OnnxModel model;
  model.graph_ = onnx::Parse(m, device);
  return model;
}

OnnxModel ImportOnnx(const std::string& path, const std::shared_ptr<Device>& device) {
  return ImportOnnxFromBytes(ReadFile(path, "onnx", size_t(INT32_MAX)), device);  // a protobuf message's limit
}


void SetOnnxHostValueLimit(int64_t n) {
  LOOM_CHECK(n >= 1 && n <= onnx::kMaxHostValues, ValueError, "[onnx] host value limit ", n, " must be in [1, ",
             onnx::kMaxHostValues, "]");
  onnx::g_host_value_limit.store(n, std::memory_order_relaxed);
}
int64_t OnnxHostValueLimit() { return onnx::g_host_value_limit.load(std::memory_order_relaxed); }

std::string OnnxImportProblem(const std::string& bytes, const std::shared_ptr<Device>& device) {
  try {
    ImportOnnxFromBytes(bytes, device);
  } catch (const OnnxError& e) {
    return e.what();
  }
  return "";
}

std::vector<OnnxOpSupport> SupportedOnnxOpRanges() {
  std::vector<OnnxOpSupport> out;
  for (const auto& e : onnx::OpRegistry()) out.push_back({e.op_type, e.since, e.until});
  return out;
}

std::vector<std::string> SupportedOnnxOps() {
  std::vector<std::string> out;
  for (const auto& e : onnx::OpRegistry())
    if (out.empty() || out.back() != e.op_type) out.push_back(e.op_type);
  return out;
}

}  // namespace io
}  // namespace loom
