// Note [Attribute types] in core/attrs.h: a missing attribute or one of another type is the
// caller's mistake (an AttrError, a ValueError) naming the op, the attribute and the types, not
// an InternalError (issue 16, class 8).
//
// Note [Declared attributes]: each op declares its attributes; a record's are checked against
// the declaration where the record meets the op, and reading an undeclared key is a loom bug.
#include <cstring>
#include <set>

#include "common/harness.h"
#include "core/device.h"

namespace loom {
namespace test {
namespace {

// A test-only op whose kernel reads a key it does not declare: a misspelt read in a kernel.
LOOM_OP(test_misread_attr) {
  def.attrs = {{"stride", AttrType::kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs&) { return std::vector<TensorMeta>{in[0]}; };
}
void MisreadAttrCpu(const OpRecord& op, const KernelContext&) {
  const int64_t stride = op.attrs.Int("stride", 1);  // declared: the default when absent
  EXPECT_EQ(stride, op.attrs.Has("stride") ? op.attrs.Int("stride") : 1);
  op.attrs.Int("strdie", 1);  // not declared
  std::memcpy(op.outputs[0].raw_data(), op.inputs[0].raw_data(), op.inputs[0].nbytes());
}
LOOM_KERNEL(test_misread_attr, kCPU, MisreadAttrCpu);

TEST(Attrs, AWronglyTypedOrMissingAttributeIsAUserErrorNamingTheOp) {
  Tensor x = RandomTensor({2, 3}, DType::kFloat32, 1);
  LOOM_EXPECT_THROW_MSG(Call("softmax", {x}, Attrs{{"axis", std::string("x")}}), ValueError,
                        "[softmax] attribute 'axis' must be an int, got a str");
  LOOM_EXPECT_THROW_MSG(Call("add_scalar", {x}, Attrs{{"s", std::vector<int64_t>{1}}}), AttrError,
                        "[add_scalar] attribute 's' must be a number, got a list of ints");
  LOOM_EXPECT_THROW_MSG(Call("reshape", {x}, Attrs{}), AttrError,
                        "[reshape] needs attribute 'shape' (a list of ints)");
  Tensor y = ops::Zeros({2, 3}, DType::kFloat32, Cpu());
  Attrs fill{{"shape", y.shape()}, {"dtype", int64_t(y.dtype())}, {"value", std::string("1")}};
  LOOM_EXPECT_THROW_MSG(CallInto("fill", {}, {y}, fill), ValueError,
                        "[fill] attribute 'value' must be a number, got a str");
  // Read directly, without an op: the attribute and the types, no brackets.
  Attrs a{{"k", int64_t(2)}};
  EXPECT_EQ(a.Float("k"), 2.0);  // an int is a number
  LOOM_EXPECT_THROW_MSG(a.Str("k"), AttrError, "attribute 'k' must be a str, got an int");
}

TEST(Attrs, AnAttributeTheOpDoesNotDeclareIsAUserErrorNamingTheOpAndWhatItHas) {
  Tensor x = RandomTensor({2, 3}, DType::kFloat32, 1);
  // A misspelt key used to leave the default in force silently.
  LOOM_EXPECT_THROW_MSG(Call("softmax", {x}, Attrs{{"axsi", int64_t(0)}}), AttrError,
                        "[softmax] has no attribute 'axsi'; its attributes: axis (an int)");
  LOOM_EXPECT_THROW_MSG(Call1("leaky_relu", {x}, Attrs{{"slop", 0.5}}), ValueError,
                        "[leaky_relu] has no attribute 'slop'; its attributes: slope (a number)");
  LOOM_EXPECT_THROW_MSG(Call1("exp", {x}, Attrs{{"slope", 0.5}}), AttrError,
                        "[exp] has no attribute 'slope'; it takes none");
  Tensor w = RandomTensor({4, 3, 1, 1}, DType::kFloat32, 2);
  Tensor img = RandomTensor({1, 3, 2, 2}, DType::kFloat32, 3);
  Attrs conv{{"strdie", std::vector<int64_t>{1, 1}}, {"padding", std::vector<int64_t>{0, 0}},
             {"dilation", std::vector<int64_t>{1, 1}}, {"groups", int64_t(1)}};
  LOOM_EXPECT_THROW_MSG(Call1("conv2d", {img, w}, conv), AttrError,
                        "[conv2d] has no attribute 'strdie'; its attributes: stride (a list of ints), padding (a list "
                        "of ints), dilation (a list of ints), groups (an int), padding_end (a list of ints)");
  // CallInto checks the same way.
  Tensor y = ops::Zeros({2, 3}, DType::kFloat32, Cpu());
  Attrs fill{{"shape", y.shape()}, {"dtype", int64_t(y.dtype())}, {"valeu", 1.0}};
  LOOM_EXPECT_THROW_MSG(CallInto("fill", {}, {y}, fill), AttrError, "[fill] has no attribute 'valeu'");
}

TEST(Attrs, AValueOfAnotherTypeThanDeclaredIsAnAttrErrorBeforeAnythingReadsIt) {
  Tensor x = RandomTensor({2, 3}, DType::kFloat32, 1);
  LOOM_EXPECT_THROW_MSG(Call("reshape", {x}, Attrs{{"shape", int64_t(6)}}), AttrError,
                        "[reshape] attribute 'shape' must be a list of ints, got an int");
  LOOM_EXPECT_THROW_MSG(Call("softmax", {x}, Attrs{{"axis", 1.0}}), AttrError,
                        "[softmax] attribute 'axis' must be an int, got a float");
  Attrs sum{{"begin", int64_t(0)}, {"end", int64_t(1)}, {"keepdims", std::string("no")}};
  LOOM_EXPECT_THROW_MSG(Call("sum", {x}, sum), AttrError, "[sum] attribute 'keepdims' must be an int, got a str");
  // An int is a number: accepted for a float attribute, as Float reads it.
  Tensor y = Call1("add_scalar", {x}, Attrs{{"s", int64_t(2)}});
  EXPECT_EQ(y.ToVector<float>()[0], x.ToVector<float>()[0] + 2.0f);
}

TEST(Attrs, RecordsAreCheckedWhereTheyMeetTheirOp) {
  // A record built by hand and submitted (as a graph pass or a test does), not through Call.
  Tensor x = RandomTensor({2, 3}, DType::kFloat32, 1);
  OpRecord r;
  r.def = &GetOp("mul_scalar");
  r.attrs = Attrs{{"scale", 2.0}};
  r.inputs = {x};
  r.outputs = {ops::Zeros({2, 3}, DType::kFloat32, Cpu())};
  LOOM_EXPECT_THROW_MSG(Cpu()->Submit(r), AttrError, "[mul_scalar] has no attribute 'scale'; its attributes: s");
  EXPECT_FALSE(r.attrs.op());  // Submit checked a copy
  LOOM_EXPECT_THROW_MSG(Cpu()->Supports(r), AttrError, "[mul_scalar] has no attribute 'scale'");
  r.attrs = Attrs{{"s", 2.0}};
  EXPECT_TRUE(Cpu()->Supports(r));
  Cpu()->Submit(r);
  EXPECT_EQ(r.outputs[0].ToVector<float>()[1], 2.0f * x.ToVector<float>()[1]);
  // Bound attributes check what is set on them later (a pass setting a layout attribute).
  Attrs a{{"s", 1.0}};
  a.Bind(GetOp("mul_scalar"));
  EXPECT_EQ(a.op(), &GetOp("mul_scalar"));
  a.Set("s", int64_t(3));
  EXPECT_EQ(a.Float("s"), 3.0);
  LOOM_EXPECT_THROW_MSG(a.Set("x_blocked", int64_t(1)), AttrError, "[mul_scalar] has no attribute 'x_blocked'");
  LOOM_EXPECT_THROW_MSG(a.Set("s", std::string("3")), AttrError,
                        "[mul_scalar] attribute 's' must be a number, got a str");
  // Rebinding to another op checks against that op (a backward handing its attributes on).
  Attrs conv{{"stride", std::vector<int64_t>{1, 1}}, {"groups", int64_t(1)}};
  conv.Bind(GetOp("conv2d"));
  Attrs grad = conv;
  grad.Bind(GetOp("conv2d_grad_input")).Set("x_shape", std::vector<int64_t>{1, 3, 2, 2});
  LOOM_EXPECT_THROW_MSG(Attrs(conv).Set("x_shape", std::vector<int64_t>{1}), AttrError,
                        "[conv2d] has no attribute 'x_shape'");
  LOOM_EXPECT_THROW_MSG(Attrs(grad).Bind(GetOp("max_pool2d")), AttrError, "[max_pool2d] has no attribute 'groups'");
}

TEST(Attrs, ReadingAKeyTheOpDoesNotDeclareIsAnInternalErrorAtTheFirstRead) {
  Attrs a{{"axis", int64_t(1)}};
  a.Bind(GetOp("softmax"));
  EXPECT_EQ(a.Int("axis"), 1);
  Attrs none;
  none.Bind(GetOp("softmax"));
  EXPECT_EQ(none.Int("axis", -1), -1);  // declared and absent: the default
  EXPECT_FALSE(none.Has("axis"));
  LOOM_EXPECT_THROW_MSG(a.Int("axes", 0), InternalError,
                        "[softmax] reads attribute 'axes', which the op does not declare");
  LOOM_EXPECT_THROW_MSG(a.Has("keepdims"), InternalError, "[softmax] reads attribute 'keepdims'");
  LOOM_EXPECT_THROW_MSG(a.Float("eps", 1e-5), InternalError, "it declares: axis (an int)");
  LOOM_EXPECT_THROW_MSG(a.Ints("shape"), InternalError, "[softmax] reads attribute 'shape'");
  // A kernel's misread fails on its first run, not silently with the default.
  Tensor x = RandomTensor({2, 3}, DType::kFloat32, 1);
  LOOM_EXPECT_THROW_MSG(Call1("test_misread_attr", {x}), InternalError,
                        "[test_misread_attr] reads attribute 'strdie', which the op does not declare");
  LOOM_EXPECT_THROW_MSG(Call1("test_misread_attr", {x}, Attrs{{"stride", int64_t(2)}}), InternalError,
                        "reads attribute 'strdie'");
  // Attributes bound to no op check nothing (built by hand, or read back from a dump).
  Attrs loose{{"k", int64_t(2)}};
  EXPECT_EQ(loose.Int("other", 5), 5);
  EXPECT_FALSE(loose.Has("other"));
}

TEST(Attrs, EveryOpsDeclarationIsWellFormed) {
  size_t with_attrs = 0;
  for (const std::string& name : ListOps()) {
    const OpDef& def = GetOp(name);
    std::set<std::string> keys;
    for (const AttrDecl& d : def.attrs) {
      EXPECT_FALSE(d.key.empty()) << name;
      EXPECT_TRUE(keys.insert(d.key).second) << name << " declares '" << d.key << "' twice";
      EXPECT_LE(int(d.type), int(AttrType::kStr)) << name << " '" << d.key << "'";
      for (char c : d.key)
        EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.')
            << name << " '" << d.key << "'";
    }
    with_attrs += !def.attrs.empty();
  }
  EXPECT_GT(with_attrs, 40u);  // the declarations are there at all
}

}  // namespace
}  // namespace test
}  // namespace loom
