// ONNX export (export.h): a captured graph's op list -> one ONNX GraphProto.
//
// Note [What an exported graph holds]
// A captured graph is a list of op records over blocks; ONNX is a graph of named values. The
// exporter walks the ops in issue order keeping, per block, which op output last wrote it (its
// current value), so that every read names the value it sees even when a block is written more
// than once. A block no op writes is a graph input (one of the given tensors) or an initializer
// (its current contents). Reads are views: the record holds the tensor as the op read it (shape,
// strides, offset into the block), and views made without an op (reshape, transpose, permute)
// show up only there. A view is rebuilt from the value that holds its block: a Reshape to its
// axes in memory order, then a Transpose into the order the op reads them (ViewNodes). Only the
// ops the outputs depend on are written, each through its row of the table in export_ops.cc,
// and every refusal (an op without a row, a view ONNX cannot express) is raised while the model
// is built in memory: nothing is written before the whole model exists.
//
// Note [A symbolic batch is the leading dimension]
// With dynamic_batch every graph input and output declares its first dimension "batch", and a
// runtime may feed any size there. That is only true of a value whose first dimension is the
// batch and holds nothing else: each input and output must have input 0's first size, a reshape
// of a batch-leading value must keep that dimension (Reshape's 0, copy the input's) and a
// permutation must leave it first. Mixing it with other dimensions (a (4, 6) -> (2, 12) reshape),
// moving it (a transpose) or reducing over it would compute another shape at another batch size
// than the one declared, so the export refuses such a graph. The check goes by sizes: a dimension
// that happens to equal the batch is taken for it, which can refuse a graph that would export.
#include "io/onnx/export.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <tuple>
#include <unordered_map>

#include "core/error.h"
#include "core/half.h"
#include "core/shape.h"
#include "graph/graph.h"
#include "io/onnx/export_emit.h"

namespace loom {
namespace io {

using onnx::Emitter;
using onnx::OpMapping;
using onnx::SetAttr;
namespace pb = loom::onnx_pb;

namespace {

constexpr int64_t kIrVersion = 8;  // ONNX 1.10-1.12: what Debian's onnx 1.12 writes and checks
constexpr int64_t kOpset = 17;     // the default domain's newest opset in onnx 1.12

// Where the value an op reads comes from.
struct Source {
  int op = -1;     // the op that last wrote the block, or -1: the block is written by no op before
  int output = -1;
};

// Axes of `t` in the order they lie in memory (largest stride first, ties in axis order).
std::vector<int64_t> MemoryOrder(const Tensor& t) {
  std::vector<int64_t> q(size_t(t.ndim()));
  std::iota(q.begin(), q.end(), 0);
  std::stable_sort(q.begin(), q.end(),
                   [&](int64_t a, int64_t b) { return t.strides()[size_t(a)] > t.strides()[size_t(b)]; });
  return q;
}

// Whether strides lay out `shape` row-major without gaps (dimensions of size 1 take any stride).
bool Dense(const Shape& shape, const Shape& strides) {
  int64_t expect = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

// One value of `dtype` as ONNX stores it (little-endian raw_data): the bytes `fill` writes
// (FillBits, core/dtype.h). Made on the host: an export runs no op, so it may even be called
// while the device captures something else.
std::string ScalarBytes(double v, DType dtype) {
  const uint64_t w = FillBits(dtype, v);
  return std::string(reinterpret_cast<const char*>(&w), SizeOf(dtype));
}

bool SameView(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.strides() == b.strides() && a.offset() == b.offset() && a.dtype() == b.dtype();
}

class Exporter final : public Emitter {
 public:
  Exporter(const Graph& g, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
           const OnnxExportOptions& opt)
      : graph_(g), ops_(g.ops().ops), inputs_(inputs), outputs_(outputs), opt_(opt) {}

  pb::ModelProto Build() {
    CheckArguments();
    Trace();
    SelectOps();
    for (size_t i = 0; i < ops_.size(); ++i)
      if (needed_[i]) CheckOp(int(i));
    model_.set_ir_version(kIrVersion);
    model_.set_producer_name("loom");
    model_.set_producer_version("0.1");
    if (!opt_.doc.empty()) model_.set_doc_string(opt_.doc);
    pb::OperatorSetIdProto* opset = model_.add_opset_import();
    opset->set_domain("");
    opset->set_version(kOpset);
    g_ = model_.mutable_graph();
    g_->set_name(opt_.model_name);
    for (size_t i = 0; i < inputs_.size(); ++i) AddValueInfo(g_->add_input(), input_names_[i], inputs_[i], true);
    for (size_t i = 0; i < ops_.size(); ++i) {
      if (!needed_[i]) continue;
      cur_ = int(i);
      mapping_[i]->emit(*this, *mapping_[i]);
    }
    cur_ = -1;
    WriteOutputs();
    return std::move(model_);
  }

  // ---- Emitter ----
  const OpRecord& op() const override { return ops_[size_t(cur_)]; }

  std::string In(size_t i) override {
    LOOM_ASSERT(i < op().inputs.size(), "[onnx] ", op().name(), " has no input ", i);
    return ValueOf(sources_[size_t(cur_)][i], op().inputs[i], detail::Cat("input ", i));
  }

  std::string Out(size_t k) override {
    LOOM_ASSERT(k < op().outputs.size(), "[onnx] ", op().name(), " has no output ", k);
    auto key = std::make_pair(cur_, int(k));
    auto it = produced_.find(key);
    if (it != produced_.end()) return it->second;
    std::string name = Unique(k == 0 ? NodeName(cur_) : detail::Cat(NodeName(cur_), "_", k));
    produced_[key] = name;
    shapes_.push_back({name, op().outputs[k]});
    return name;
  }

  std::string Temp(const std::string& hint) override { return Unique(detail::Cat(NodeName(cur_), "/", hint)); }

  pb::NodeProto* Node(const std::string& type, const std::vector<std::string>& inputs,
                      const std::vector<std::string>& outputs) override {
    pb::NodeProto* n = g_->add_node();
    n->set_op_type(type);
    n->set_name(Unique(cur_ >= 0 ? detail::Cat(NodeName(cur_), "/", type) : type));
    for (const std::string& s : inputs) n->add_input(s);
    for (const std::string& s : outputs) n->add_output(s);
    return n;
  }

  std::string Scalar(double value, DType dtype) override {
    auto key = std::make_pair(value, int(dtype));
    auto it = scalars_.find(key);
    if (it != scalars_.end()) return it->second;
    std::string name = Unique("scalar_" + std::to_string(scalars_.size()));
    pb::TensorProto* p = g_->add_initializer();
    p->set_name(name);
    p->set_data_type(onnx::OnnxFromDType(dtype));
    p->set_raw_data(ScalarBytes(value, dtype));
    return scalars_[key] = name;
  }

  std::string Int64s(const std::vector<int64_t>& values) override {
    auto it = int64s_.find(values);
    if (it != int64s_.end()) return it->second;
    std::string name = Unique("ints_" + std::to_string(int64s_.size()));
    pb::TensorProto* p = g_->add_initializer();
    p->set_name(name);
    p->set_data_type(pb::TensorProto::INT64);
    p->add_dims(int64_t(values.size()));
    p->set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int64_t)));
    return int64s_[values] = name;
  }

  bool dynamic_batch() const override { return opt_.dynamic_batch; }
  int64_t batch() const override { return batch_; }

  [[noreturn]] void Fail(const std::string& why) const override { FailAt(cur_, why); }

 private:
  [[noreturn]] void FailAt(int i, const std::string& why) const {
    throw OnnxError(detail::Cat("[onnx] op '", ops_[size_t(i)].name(), "' (node '", NodeName(i), "' of graph '",
                                opt_.model_name, "'): ", why));
  }

  std::string NodeName(int i) const { return detail::Cat(ops_[size_t(i)].name(), "_", i); }

  // A name no other value, node or initializer of the model has.
  std::string Unique(const std::string& want) {
    std::string name = want;
    for (int n = 1; !used_.insert(name).second; ++n) name = detail::Cat(want, "_", n);
    return name;
  }

  void CheckArguments() {
    LOOM_CHECK(graph_.finalized(), OnnxError, "[onnx] graph '", graph_.name(),
               "' is not a finished capture (end the capture before exporting it)");
    LOOM_CHECK(!outputs_.empty(), OnnxError, "[onnx] export needs at least one output tensor");
    LOOM_CHECK(opt_.input_names.empty() || opt_.input_names.size() == inputs_.size(), OnnxError, "[onnx] ",
               opt_.input_names.size(), " input names for ", inputs_.size(), " inputs");
    LOOM_CHECK(opt_.output_names.empty() || opt_.output_names.size() == outputs_.size(), OnnxError, "[onnx] ",
               opt_.output_names.size(), " output names for ", outputs_.size(), " outputs");
    auto name_of = [](const std::vector<std::string>& given, size_t i, const Tensor& t, const char* kind) {
      if (!given.empty()) return given[i];
      return t.name().empty() ? detail::Cat(kind, "_", i) : t.name();
    };
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const Tensor& t = inputs_[i];
      LOOM_CHECK(t.defined(), OnnxError, "[onnx] input ", i, " is undefined");
      LOOM_CHECK(t.is_contiguous() && t.offset() == 0, OnnxError, "[onnx] input ", i, " (", t.Describe(),
                 ") is a view; export the tensor the graph was captured with");
      LOOM_CHECK(!opt_.dynamic_batch || t.ndim() >= 1, OnnxError, "[onnx] input ", i,
                 " is a scalar: dynamic_batch needs a batch dimension on every input");
      auto [it, fresh] = input_of_block_.emplace(t.block(), int(i));
      LOOM_CHECK(fresh, OnnxError, "[onnx] inputs ", it->second, " and ", i, " are the same tensor");
      input_names_.push_back(name_of(opt_.input_names, i, t, "input"));
    }
    for (size_t j = 0; j < outputs_.size(); ++j) {
      const Tensor& t = outputs_[j];
      LOOM_CHECK(t.defined(), OnnxError, "[onnx] output ", j, " is undefined");
      LOOM_CHECK(!opt_.dynamic_batch || t.ndim() >= 1, OnnxError, "[onnx] output ", j,
                 " is a scalar: dynamic_batch needs a batch dimension on every output");
      output_names_.push_back(name_of(opt_.output_names, j, t, "output"));
    }
    std::set<std::string> seen;
    for (const std::vector<std::string>* names : {&input_names_, &output_names_})
      for (const std::string& n : *names) {
        LOOM_CHECK(!n.empty(), OnnxError, "[onnx] an input or output name is empty");
        LOOM_CHECK(seen.insert(n).second, OnnxError, "[onnx] the name '", n, "' is given to two inputs or outputs");
        used_.insert(n);
      }
    for (const auto& [name, t] : opt_.names)
      if (t.defined() && t.is_contiguous() && t.offset() == 0 && !input_of_block_.count(t.block()))
        named_.emplace(t.block(), std::make_pair(name, t));  // the first name of a block wins
    batch_ = !inputs_.empty() && inputs_[0].ndim() >= 1 ? inputs_[0].shape()[0] : 1;
    // Every input and output declares its first dimension "batch", so each must have the batch's
    // size (Note [A symbolic batch is the leading dimension]).
    for (const auto* list : {&inputs_, &outputs_})
      for (size_t i = 0; opt_.dynamic_batch && i < list->size(); ++i)
        LOOM_CHECK((*list)[i].shape()[0] == batch_, OnnxError, "[onnx] ", list == &inputs_ ? "input " : "output ", i,
                   " is ", (*list)[i].Describe(), ": with dynamic_batch its first dimension is declared the batch, but "
                   "the batch (input 0's first dimension) is ", batch_);
  }

  // Which value every op input reads (Note [What an exported graph holds]).
  void Trace() {
    std::unordered_map<const Block*, Source> last;
    sources_.resize(ops_.size());
    for (size_t i = 0; i < ops_.size(); ++i) {
      for (const Tensor& t : ops_[i].inputs) {
        auto it = last.find(t.block());
        sources_[i].push_back(it == last.end() ? Source{} : it->second);
      }
      for (size_t k = 0; k < ops_[i].outputs.size(); ++k) last[ops_[i].outputs[k].block()] = Source{int(i), int(k)};
    }
    for (const Tensor& t : outputs_) {
      auto it = last.find(t.block());
      final_.push_back(it == last.end() ? Source{} : it->second);
    }
  }

  // The ops the outputs depend on (every op reads what earlier ops wrote: one backward sweep).
  void SelectOps() {
    std::set<std::pair<int, int>> demanded;
    for (size_t j = 0; j < outputs_.size(); ++j) {
      if (final_[j].op >= 0) {
        demanded.insert({final_[j].op, final_[j].output});
      } else {
        LOOM_CHECK(input_of_block_.count(outputs_[j].block()), OnnxError, "[onnx] output ", j, " (",
                   outputs_[j].Describe(), ") is not computed by graph '", graph_.name(),
                   "': export the tensors that capture returned (a tensor computed eagerly has no ops to export)");
      }
    }
    needed_.assign(ops_.size(), false);
    mapping_.assign(ops_.size(), nullptr);
    std::set<int> inputs_read;
    for (size_t i = ops_.size(); i-- > 0;) {
      for (size_t k = 0; k < ops_[i].outputs.size() && !needed_[i]; ++k)
        needed_[i] = demanded.count({int(i), int(k)}) > 0;
      if (!needed_[i]) continue;
      for (size_t j = 0; j < sources_[i].size(); ++j) {
        const Source& s = sources_[i][j];
        if (s.op >= 0) {
          demanded.insert({s.op, s.output});
        } else {
          auto in = input_of_block_.find(ops_[i].inputs[j].block());
          if (in != input_of_block_.end()) inputs_read.insert(in->second);
        }
      }
    }
    for (size_t j = 0; j < outputs_.size(); ++j) {
      auto in = input_of_block_.find(outputs_[j].block());
      if (final_[j].op < 0 && in != input_of_block_.end()) inputs_read.insert(in->second);
    }
    for (size_t i = 0; i < inputs_.size(); ++i)
      LOOM_CHECK(inputs_read.count(int(i)), OnnxError, "[onnx] input ", i, " ('", input_names_[i], "', ",
                 inputs_[i].Describe(), ") is not read by the ops computing the outputs in graph '", graph_.name(),
                 "': pass the tensor the graph was captured with");
  }

  // Refusals that depend on the op alone, for every op before anything is emitted.
  void CheckOp(int i) {
    const OpRecord& op = ops_[size_t(i)];
    mapping_[size_t(i)] = onnx::FindOpMapping(*op.def);
    if (!mapping_[size_t(i)])
      FailAt(i, "has no ONNX counterpart in loom's exporter (export an inference graph: gradients, optimizer "
                "updates and random ops have none; src/io/onnx/export_ops.cc lists what maps)");
    for (size_t k = 0; k < op.outputs.size(); ++k) {
      const Tensor& t = op.outputs[k];
      if (!(t.is_contiguous() && t.offset() == 0 && t.nbytes() == t.block()->bytes()))
        FailAt(i, detail::Cat("writes output ", k, " into part of a larger tensor (", t.Describe(),
                              "), which ONNX's values cannot express"));
    }
  }

  // The value `t` (read by the current op, or a graph output when cur_ < 0) refers to.
  std::string ValueOf(const Source& s, const Tensor& t, const std::string& what) {
    if (s.op >= 0) {
      auto it = produced_.find({s.op, s.output});
      if (it == produced_.end()) {
        const std::string why = detail::Cat(what, " is output ", s.output, " of op '", ops_[size_t(s.op)].name(),
                                            "' (node '", NodeName(s.op), "'), which has no ONNX counterpart");
        if (cur_ >= 0) Fail("its " + why);
        throw OnnxError("[onnx] " + why);
      }
      return ViewNodes(it->second, ops_[size_t(s.op)].outputs[size_t(s.output)], t, what);
    }
    auto in = input_of_block_.find(t.block());
    if (in != input_of_block_.end())
      return ViewNodes(input_names_[size_t(in->second)], inputs_[size_t(in->second)], t, what);
    auto named = named_.find(t.block());
    if (named != named_.end() && named->second.second.dtype() == t.dtype()) {
      const auto& [name, base] = named->second;
      auto init = initializers_.find(t.block());
      if (init == initializers_.end()) {
        std::string unique = Unique(name);
        onnx::TensorToProto(base, unique, g_->add_initializer());
        init = initializers_.emplace(t.block(), unique).first;
      }
      return ViewNodes(init->second, base, t, what);
    }
    // A constant no name was given for: its values as this op reads them.
    auto key = std::make_tuple(t.block(), t.shape(), t.strides(), t.offset());
    auto c = constants_.find(key);
    if (c != constants_.end()) return c->second;
    std::string name = Unique("const_" + std::to_string(constants_.size()));
    onnx::TensorToProto(t, name, g_->add_initializer());
    return constants_[key] = name;
  }

  // `view`, a view of the block that `base` (a dense tensor, the value `name`) fills, as ONNX
  // nodes from `name`: Reshape to view's axes in memory order, then Transpose to its order.
  std::string ViewNodes(const std::string& name, const Tensor& base, const Tensor& view, const std::string& what) {
    if (SameView(base, view)) return name;
    auto key = std::make_tuple(name, view.shape(), view.strides(), view.offset());
    auto memo = views_.find(key);
    if (memo != views_.end()) return memo->second;
    const std::vector<int64_t> q = MemoryOrder(view);
    Shape dense(q.size()), dense_strides(q.size());
    for (size_t i = 0; i < q.size(); ++i) {
      dense[i] = view.shape()[size_t(q[i])];
      dense_strides[i] = view.strides()[size_t(q[i])];
    }
    const bool expressible = view.dtype() == base.dtype() && view.offset() == base.offset() &&
                             view.numel() == base.numel() && Dense(dense, dense_strides) && base.is_contiguous();
    if (!expressible) {
      const std::string why = detail::Cat("reads ", what, " as ", view.Describe(), " with strides ",
                                          ToString(view.strides()), " and offset ", view.offset(), " of ",
                                          base.Describe(), ": a view that is not a reshape or permutation of it "
                                          "has no ONNX form");
      if (cur_ >= 0) Fail(why);
      throw OnnxError("[onnx] output " + why);
    }
    bool permuted = false;
    for (size_t i = 0; i < q.size(); ++i) permuted |= q[i] != int64_t(i);
    std::string v = name;
    const std::string stem = cur_ >= 0 ? NodeName(cur_) + "/" : std::string();
    if (dense != base.shape()) {
      const std::string r = Unique(stem + "reshaped");
      Node("Reshape", {v, Int64s(ReshapeTarget(base.shape(), dense))}, {r});
      v = r;
    }
    if (permuted) {
      std::vector<int64_t> perm(q.size());
      for (size_t i = 0; i < q.size(); ++i) perm[size_t(q[i])] = int64_t(i);
      if (opt_.dynamic_batch && dense[0] == batch_ && perm[0] != 0)
        FailView(detail::Cat("reads ", what, " as ", view.Describe(), ", a permutation that moves the batch axis of ",
                             base.Describe(), " (dynamic_batch keeps it leading)"));
      const std::string p = Unique(stem + "transposed");
      SetAttr(Node("Transpose", {v}, {p}), "perm", perm);
      v = p;
    }
    if (v != name) shapes_.push_back({v, view});  // else a view differing only in size-1 strides
    return views_[key] = v;
  }

  // Reshape's shape input. With dynamic_batch a leading batch dimension stays symbolic: 0 (copy
  // the input's) when it is kept; a reshape that merges it with other dimensions or splits it
  // computes a batch of another size, so it is refused (Note [A symbolic batch is the leading
  // dimension]).
  std::vector<int64_t> ReshapeTarget(const Shape& from, const Shape& to) const {
    std::vector<int64_t> s(to.begin(), to.end());
    if (opt_.dynamic_batch && !from.empty() && from[0] == batch_) {
      if (s.empty() || s[0] != batch_)
        FailView(detail::Cat("reshapes ", ToString(from), " to ", ToString(to), ", mixing the batch dimension (",
                             batch_, ") with others (dynamic_batch keeps it leading)"));
      s[0] = 0;
    }
    return s;
  }

  // A view that cannot be exported: the current op's error, or the output's outside any op.
  [[noreturn]] void FailView(const std::string& why) const {
    if (cur_ >= 0) Fail(why);
    throw OnnxError("[onnx] output " + why);
  }

  void AddValueInfo(pb::ValueInfoProto* v, const std::string& name, const Tensor& t, bool io) {
    v->set_name(name);
    pb::TypeProto_Tensor* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::OnnxFromDType(t.dtype()));
    pb::TensorShapeProto* shape = tt->mutable_shape();
    for (int64_t d = 0; d < t.ndim(); ++d) {
      pb::TensorShapeProto_Dimension* dim = shape->add_dim();
      if (io && opt_.dynamic_batch && d == 0)
        dim->set_dim_param("batch");
      else
        dim->set_dim_value(t.shape()[size_t(d)]);
    }
  }

  // Each output is the value it names, renamed to the output's name where a node made it and
  // no other output took it, else an Identity of it.
  void WriteOutputs() {
    std::map<std::string, std::string> rename;
    std::set<std::string> fixed(input_names_.begin(), input_names_.end());
    for (const pb::TensorProto& init : g_->initializer()) fixed.insert(init.name());
    for (size_t j = 0; j < outputs_.size(); ++j) {
      const std::string v = ValueOf(final_[j], outputs_[j], detail::Cat("output ", j));
      if (!fixed.count(v) && !rename.count(v)) {
        rename[v] = output_names_[j];
      } else {
        const std::string from = rename.count(v) ? rename[v] : v;
        Node("Identity", {from}, {output_names_[j]});
      }
      AddValueInfo(g_->add_output(), output_names_[j], outputs_[j], true);
    }
    for (pb::NodeProto& n : *g_->mutable_node()) {
      for (std::string& s : *n.mutable_input())
        if (rename.count(s)) s = rename[s];
      for (std::string& s : *n.mutable_output())
        if (rename.count(s)) s = rename[s];
    }
    // Intermediate shapes ("names and shapes kept"); with a symbolic batch they would pin it.
    if (opt_.dynamic_batch) return;
    std::set<std::string> outs(output_names_.begin(), output_names_.end());
    for (const auto& [name, t] : shapes_) {
      const std::string n = rename.count(name) ? rename[name] : name;
      if (!outs.count(n)) AddValueInfo(g_->add_value_info(), n, t, false);
    }
  }

  const Graph& graph_;
  const std::vector<OpRecord>& ops_;
  const std::vector<Tensor>& inputs_;
  const std::vector<Tensor>& outputs_;
  const OnnxExportOptions& opt_;
  std::vector<std::string> input_names_, output_names_;
  std::unordered_map<const Block*, int> input_of_block_;
  std::unordered_map<const Block*, std::pair<std::string, Tensor>> named_;
  int64_t batch_ = 1;

  std::vector<std::vector<Source>> sources_;  // per op, per input
  std::vector<Source> final_;                 // per output
  std::vector<bool> needed_;
  std::vector<const OpMapping*> mapping_;

  pb::ModelProto model_;
  pb::GraphProto* g_ = nullptr;
  int cur_ = -1;  // the op being emitted
  std::set<std::string> used_;
  std::map<std::pair<int, int>, std::string> produced_;  // (op, output) -> value
  std::vector<std::pair<std::string, Tensor>> shapes_;   // values whose shape is known
  std::unordered_map<const Block*, std::string> initializers_;
  std::map<std::tuple<const Block*, Shape, Shape, int64_t>, std::string> constants_;
  std::map<std::tuple<std::string, Shape, Shape, int64_t>, std::string> views_;
  std::map<std::pair<double, int>, std::string> scalars_;
  std::map<std::vector<int64_t>, std::string> int64s_;
};

std::string Serialize(const pb::ModelProto& m) {
  const size_t size = m.ByteSizeLong();
  LOOM_CHECK(size <= size_t(INT32_MAX), OnnxError, "[onnx] the model is ", size,
             " bytes: larger than the 2 GiB one ONNX file can hold");
  std::string bytes;
  LOOM_CHECK(m.SerializeToString(&bytes), OnnxError, "[onnx] could not serialize the model");
  return bytes;
}

}  // namespace

std::string ExportOnnxBytes(const Graph& graph, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                            const OnnxExportOptions& options) {
  return Serialize(Exporter(graph, inputs, outputs, options).Build());
}

void ExportOnnx(const Graph& graph, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                const std::string& path, const OnnxExportOptions& options) {
  pb::ModelProto m = Exporter(graph, inputs, outputs, options).Build();
  onnx::WriteProtoFile(path, m, "ONNX model");
}

std::vector<std::pair<std::string, std::string>> OnnxExportableOps() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const OpMapping& m : onnx::OpMappings()) out.emplace_back(m.loom_op, m.onnx);
  return out;
}

}  // namespace io
}  // namespace loom
