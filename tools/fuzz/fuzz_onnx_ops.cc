// libFuzzer target: the ONNX importer's op handlers, structure-aware. The input is an OpSpec
// (onnx_op_spec.h): one registered op, or a chain of it, with fuzzed attribute values and input
// shapes, dtypes and values, written into a valid ModelProto here, imported, run on the CPU and
// differentiated. Where fuzz_onnx spends most inputs on protobuf framing, every input here
// reaches a handler's checks and kernels. Any input must run or raise a loom error; an
// InternalError, another exception, a signal or a sanitizer finding is a crash. The seeds
// (make_seeds onnx_ops) include the inputs that once crashed or hung a handler (issue 36).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <google/protobuf/stubs/logging.h>

#include "core/autograd.h"
#include "core/device.h"
#include "core/error.h"
#include "core/ops.h"
#include "io/onnx/import.h"
#include "io/onnx/import_graph.h"
#include "io/onnx/tensor_proto.h"
#include "onnx_op_spec.h"

namespace {

using loom::DType;
using loom::Tensor;
using loom::fuzz::AttrSpec;
using loom::fuzz::InputSpec;
using loom::fuzz::OpSpec;
namespace pb = loom::onnx_pb;

// Inputs hold at most this many elements (a dimension of 0 lets the others be huge, as in the
// CumSum and EyeLike cases), so one input runs in milliseconds.
constexpr int64_t kMaxElements = 4096;

const loom::io::onnx::OpEntry& Resolve(const std::string& op_type) {
  const auto& reg = loom::io::onnx::OpRegistry();
  for (const auto& e : reg)
    if (e.op_type == op_type) return e;
  return reg[std::hash<std::string>()(op_type) % reg.size()];
}

loom::Shape Dims(const std::vector<int64_t>& given) {
  loom::Shape s;
  bool zero = false;
  for (int64_t d : given) {
    s.push_back(d < 0 ? -(d + 1) : d);
    zero = zero || s.back() == 0;
  }
  if (zero) return s;
  int64_t n = 1;
  for (int64_t d : s)
    if (__builtin_mul_overflow(n, d, &n) || n > kMaxElements) {
      for (int64_t& e : s) e %= 5;
      break;
    }
  return s;
}

DType ToDType(InputSpec::Dtype d) {
  switch (d) {
    case InputSpec::kFloat64: return DType::kFloat64;
    case InputSpec::kInt64: return DType::kInt64;
    case InputSpec::kInt32: return DType::kInt32;
    case InputSpec::kBool: return DType::kBool;
    case InputSpec::kUInt8: return DType::kUInt8;
    default: return DType::kFloat32;
  }
}

// The input's values: its own, cycled, or a small pattern of its seed; in its dtype.
Tensor Values(const InputSpec& in, const loom::Shape& shape, const std::shared_ptr<loom::Device>& dev) {
  const int64_t n = loom::NumElements(shape, "fuzz");
  std::vector<int64_t> v(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = in.values.empty() ? (i * 7 + in.value_seed) % 11 - 5 : in.values[size_t(i) % in.values.size()];
  const DType dt = ToDType(in.dtype);
  if (dt == DType::kInt64) return loom::ops::FromVector<int64_t>(v, shape, dev);
  if (dt == DType::kInt32) return loom::ops::FromVector<int32_t>(std::vector<int32_t>(v.begin(), v.end()), shape, dev);
  if (dt == DType::kUInt8 || dt == DType::kBool) {
    std::vector<uint8_t> b;
    for (int64_t x : v) b.push_back(uint8_t(dt == DType::kBool ? x & 1 : x & 0xff));
    Tensor t = loom::ops::FromVector<uint8_t>(b, shape, dev);
    return dt == DType::kBool ? loom::ops::Cast(t, DType::kBool) : t;
  }
  std::vector<double> f;  // given values are IEEE-754 bit patterns: NaN, inf and 1e30 are reachable
  for (int64_t x : v) f.push_back(in.values.empty() ? double(x) / 2 : loom::fuzz::FromBits(x));
  return loom::ops::Cast(loom::ops::FromVector<double>(f, shape, dev), dt);
}

void SetAttr(pb::NodeProto* node, const AttrSpec& a, const std::string& name) {
  pb::AttributeProto* p = node->add_attribute();
  p->set_name(name);
  switch (a.kind) {
    case AttrSpec::kInt: p->set_type(pb::AttributeProto::INT); p->set_i(a.i); break;
    case AttrSpec::kFloat: p->set_type(pb::AttributeProto::FLOAT); p->set_f(float(a.f)); break;
    case AttrSpec::kInts:
      p->set_type(pb::AttributeProto::INTS);
      for (int64_t v : a.ints) p->add_ints(v);
      break;
    default: p->set_type(pb::AttributeProto::STRING); p->set_s(a.s); break;
  }
}

// The model of `s`, and the tensors its graph inputs are fed, in order.
pb::ModelProto Build(const OpSpec& s, const std::shared_ptr<loom::Device>& dev, std::vector<Tensor>* feed) {
  const auto& e = Resolve(s.op_type);
  pb::ModelProto m;
  m.set_ir_version(8);
  int64_t opset = s.opset;
  if (opset < e.since || opset > e.until) opset = e.since + opset % (e.until - e.since + 1);
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  pb::GraphProto* g = m.mutable_graph();
  g->set_name("fuzz");
  std::vector<InputSpec> inputs = s.inputs;
  const size_t max_in = e.max_inputs < 0 ? loom::fuzz::kMaxInputs : size_t(e.max_inputs);
  while (inputs.size() < size_t(e.min_inputs)) inputs.push_back(InputSpec{false, false, InputSpec::kFloat32, {2, 3}});
  if (inputs.size() > max_in) inputs.resize(max_in);
  std::vector<std::string> names;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const InputSpec& in = inputs[k];
    if (in.omitted && k > 0) {
      names.push_back("");
      continue;
    }
    const std::string name = "in" + std::to_string(k);
    names.push_back(name);
    const loom::Shape shape = Dims(in.dims);
    if (in.initializer) {
      loom::io::onnx::TensorToProto(Values(in, shape, dev), name, g->add_initializer());
      continue;
    }
    pb::ValueInfoProto* v = g->add_input();
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(loom::io::onnx::OnnxFromDType(ToDType(in.dtype)));
    for (int64_t d : shape) tt->mutable_shape()->add_dim()->set_dim_value(d);
    feed->push_back(Values(in, shape, dev));
  }
  const int nout = std::max(e.min_outputs, std::min<int>({int(s.outputs), e.max_outputs, 3}));
  std::string prev;
  for (uint16_t c = 0; c < s.chain; ++c) {
    pb::NodeProto* node = g->add_node();
    node->set_op_type(e.op_type);
    node->set_name("n" + std::to_string(c));
    for (size_t k = 0; k < names.size(); ++k) node->add_input(k == 0 && c > 0 ? prev : names[k]);
    for (int j = 0; j < nout; ++j) node->add_output("y" + std::to_string(c) + "_" + std::to_string(j));
    for (const AttrSpec& a : s.attrs) {
      std::string name = a.name;
      bool known = false;
      for (const std::string& k : e.attrs) known = known || k == name;
      if (!known && !e.attrs.empty()) name = e.attrs[a.pick % e.attrs.size()];
      bool dup = false;
      for (const auto& p : node->attribute()) dup = dup || p.name() == name;
      if (!dup) SetAttr(node, a, name);
    }
    prev = node->output(0);
  }
  for (int j = 0; j < nout; ++j) g->add_output()->set_name("y" + std::to_string(s.chain - 1) + "_" + std::to_string(j));
  return m;
}

}  // namespace

// A spec may ask for a large tensor (Tile by 10^6): that is a request, not a defect. Tensors come
// from loom's allocator (aligned_alloc), which refuses with DeviceError when memory is short; here
// memory is short above 256 MiB, so that such an input ends in that typed error within the
// fuzzer's RSS limit. Host arrays come from operator new, which still aborts above it: a handler
// that sizes one by a dimension or a value without a bound is a finding (Note [Host-built index
// arrays] in src/io/onnx/import_graph.h). Their bound is lowered to 2^22 values (32 MiB of int64)
// here: a chain of NonZero doubles its indices at each node, and at the default 2^26 the chain's
// live arrays outgrew the fuzzer's 2 GiB before any one of them reached the bound.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1:max_allocation_size_mb=256"; }

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  loom::io::SetOnnxHostValueLimit(int64_t(1) << 22);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const OpSpec spec = loom::fuzz::Decode(data, size);
  const std::shared_ptr<loom::Device> dev = loom::CpuDevice();
  try {
    std::vector<Tensor> feed;
    const pb::ModelProto m = Build(spec, dev, &feed);
    loom::io::OnnxModel model = loom::io::ImportOnnxFromBytes(m.SerializeAsString(), dev);
    std::vector<Tensor> outs = model.Forward(feed);
    if (spec.backward)
      for (const Tensor& y : outs)
        if (y.requires_grad()) {
          loom::Backward(loom::ops::Sum(y));
          break;
        }
    dev->Synchronize();
  } catch (const loom::InternalError& e) {
    std::fprintf(stderr, "fuzz_onnx_ops: internal error: %s\n", e.what());
    std::abort();
  } catch (const loom::Error&) {
    // refused with a typed error: the expected outcome for most inputs
  }
  return 0;
}
