// Shape ops. reshape, transpose and permute are views: no kernel, the output shares the input's
// block with new shape, strides and offset. concat, slice and broadcast_to copy into fresh
// contiguous outputs, so that the kernels downstream see plain row-major memory.
#include <algorithm>
#include <utility>

#include "core/ops/common.h"

LOOM_OP_KIND(copy);
LOOM_OP_KIND(slice_grad);

namespace loom {

using namespace opdecl;

namespace {

// An axis in [0, rank). Unlike NormalizeAxis, a rank-0 tensor has no axis to name.
int64_t Axis(int64_t axis, int64_t rank, const char* op) {
  int64_t a = axis < 0 ? axis + rank : axis;
  LOOM_CHECK(a >= 0 && a < rank, ValueError, "[", op, "] axis ", axis, " is out of range for a tensor of rank ",
             rank);
  return a;
}

// The target shape of a reshape with its -1 (at most one) resolved.
Shape ResolveReshape(const Shape& in, const Shape& target) {
  int64_t known = 1;
  int64_t infer_at = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      LOOM_CHECK(infer_at < 0, ShapeError, "[reshape] only one dimension may be -1, got ", ToString(target));
      infer_at = int64_t(i);
    } else {
      LOOM_CHECK(target[i] >= 0, ShapeError, "[reshape] negative dimension in ", ToString(target));
      known *= target[i];
    }
  }
  const int64_t n = NumElements(in);
  Shape out = target;
  if (infer_at >= 0) {
    // known == 0 leaves -1 undetermined, whatever n is.
    LOOM_CHECK(known != 0 && n % known == 0, ShapeError, "[reshape] cannot reshape ", ToString(in), " into ",
               ToString(target));
    out[size_t(infer_at)] = n / known;
  }
  LOOM_CHECK(NumElements(out) == n, ShapeError, "[reshape] cannot reshape ", ToString(in), " into ",
             ToString(target));
  return out;
}

// `perm` with negative entries mapped into [0, rank); throws unless it permutes in's axes.
std::vector<int64_t> CheckPermutation(const Shape& in, const std::vector<int64_t>& perm) {
  const int64_t rank = int64_t(in.size());
  bool ok = int64_t(perm.size()) == rank;
  std::vector<int64_t> p(perm.size());
  std::vector<bool> seen(size_t(rank), false);
  for (size_t i = 0; ok && i < perm.size(); ++i) {
    int64_t a = perm[i] < 0 ? perm[i] + rank : perm[i];
    ok = a >= 0 && a < rank && !seen[size_t(a)];
    if (ok) {
      seen[size_t(a)] = true;
      p[i] = a;
    }
  }
  LOOM_CHECK(ok, ValueError, "[permute] ", ToString(perm), " is not a permutation of the axes of ", ToString(in));
  return p;
}

struct SliceRange {
  int64_t axis, start, end;
};
// Negative start/end count from the end of the axis (as in Python); anything outside
// 0 <= start <= end <= size is an error rather than being clamped.
SliceRange SliceBounds(const Shape& in, int64_t axis, int64_t start, int64_t end) {
  int64_t ax = Axis(axis, int64_t(in.size()), "slice");
  int64_t n = in[size_t(ax)];
  int64_t s = start < 0 ? start + n : start;
  int64_t e = end < 0 ? end + n : end;
  LOOM_CHECK(0 <= s && s <= e && e <= n, ValueError, "[slice] range [", start, ", ", end,
             ") is out of bounds for axis ", axis, " of ", ToString(in), " (size ", n, ")");
  return {ax, s, e};
}

Tensor ViewOf(const Tensor& x, Shape shape, Shape strides, int64_t offset) {
  return Tensor(x.block_ptr(), std::move(shape), std::move(strides), offset, x.dtype());
}

}  // namespace

// slice's normalised range; slice_grad gets it from slice's backward, with the input's shape.
const std::vector<AttrDecl> kSliceAttrs = {{"axis", kInt}, {"start", kInt}, {"end", kInt}};

// ---- views ----

LOOM_OP(reshape) {
  def.attrs = {{"shape", kInts}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("reshape", in, 1);
    return std::vector<TensorMeta>{{ResolveReshape(in[0].shape, a.Ints("shape")), in[0].dtype}};
  };
  def.view = [](const Tensor& x, const Attrs& a) {
    Shape shape = ResolveReshape(x.shape(), a.Ints("shape"));
    // ops::Reshape hands us contiguous inputs (its copy has autograd of its own). Tensor::Reshape
    // calls the op directly; a strided input then gets a private copy, which autograd need not
    // see: reshape's backward reshapes the gradient back either way.
    Tensor c = x.is_contiguous() ? x : Call1(op_kind::copy, {x});
    return ViewOf(c, shape, ContiguousStrides(shape), c.offset());
  };
  def.backward = [](const BackwardArgs& a) {
    return std::vector<Tensor>{ops::Reshape(a.grad_outputs[0], a.input_metas[0].shape)};
  };
}

LOOM_OP(transpose) {
  def.attrs = {{"a", kInt}, {"b", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("transpose", in, 1);
    int64_t r = int64_t(in[0].shape.size());
    int64_t i = Axis(a.Int("a"), r, "transpose"), j = Axis(a.Int("b"), r, "transpose");
    Shape s = in[0].shape;
    std::swap(s[size_t(i)], s[size_t(j)]);
    return std::vector<TensorMeta>{{s, in[0].dtype}};
  };
  def.view = [](const Tensor& x, const Attrs& a) {
    size_t i = size_t(Axis(a.Int("a"), x.ndim(), "transpose")), j = size_t(Axis(a.Int("b"), x.ndim(), "transpose"));
    Shape shape = x.shape(), strides = x.strides();
    std::swap(shape[i], shape[j]);
    std::swap(strides[i], strides[j]);
    return ViewOf(x, shape, strides, x.offset());
  };
  // A swap is its own inverse. The gradient is a strided view; consumers copy it as needed.
  def.backward = [](const BackwardArgs& a) {
    return std::vector<Tensor>{ops::Transpose(a.grad_outputs[0], a.attrs.Int("a"), a.attrs.Int("b"))};
  };
}

LOOM_OP(permute) {
  def.attrs = {{"perm", kInts}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("permute", in, 1);
    std::vector<int64_t> p = CheckPermutation(in[0].shape, a.Ints("perm"));
    Shape s(p.size());
    for (size_t i = 0; i < p.size(); ++i) s[i] = in[0].shape[size_t(p[i])];
    return std::vector<TensorMeta>{{s, in[0].dtype}};
  };
  def.view = [](const Tensor& x, const Attrs& a) {
    std::vector<int64_t> p = CheckPermutation(x.shape(), a.Ints("perm"));
    Shape shape(p.size()), strides(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
      shape[i] = x.shape()[size_t(p[i])];
      strides[i] = x.strides()[size_t(p[i])];
    }
    return ViewOf(x, shape, strides, x.offset());
  };
  // Output axis i is input axis p[i], so the gradient goes back through the inverse permutation.
  def.backward = [](const BackwardArgs& a) {
    std::vector<int64_t> p = CheckPermutation(a.input_metas[0].shape, a.attrs.Ints("perm"));
    std::vector<int64_t> inv(p.size());
    for (size_t i = 0; i < p.size(); ++i) inv[size_t(p[i])] = int64_t(i);
    return std::vector<Tensor>{ops::Permute(a.grad_outputs[0], inv)};
  };
}

// ---- copies ----

LOOM_OP(concat) {
  def.attrs = {{"axis", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    LOOM_CHECK(!in.empty(), ValueError, "[concat] needs at least one input");
    const Shape& s0 = in[0].shape;
    int64_t axis = Axis(a.Int("axis"), int64_t(s0.size()), "concat");
    Shape out = s0;
    for (size_t i = 1; i < in.size(); ++i) {
      LOOM_CHECK(in[i].dtype == in[0].dtype, DTypeError, "[concat] input ", i, " is ", Name(in[i].dtype),
                 ", input 0 is ", Name(in[0].dtype));
      const Shape& si = in[i].shape;
      bool ok = si.size() == s0.size();
      for (size_t d = 0; ok && d < si.size(); ++d) ok = int64_t(d) == axis || si[d] == s0[d];
      LOOM_CHECK(ok, ShapeError, "[concat] input ", i, " is ", ToString(si), ", input 0 is ", ToString(s0),
                 ": shapes must agree except on axis ", axis);
      out[size_t(axis)] += si[size_t(axis)];
    }
    return std::vector<TensorMeta>{{out, in[0].dtype}};
  };
  // The gradient of input i is its band of the output gradient.
  def.backward = [](const BackwardArgs& a) {
    const Tensor& g = a.grad_outputs[0];
    int64_t axis = Axis(a.attrs.Int("axis"), g.ndim(), "concat");
    std::vector<Tensor> gin(a.input_metas.size());
    int64_t off = 0;
    for (size_t i = 0; i < gin.size(); ++i) {
      int64_t n = a.input_metas[i].shape[size_t(axis)];
      if (a.needs_input_grad[i]) gin[i] = ops::Slice(g, axis, off, off + n);
      off += n;
    }
    return gin;
  };
}

LOOM_OP(slice) {
  def.attrs = kSliceAttrs;
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("slice", in, 1);
    SliceRange r = SliceBounds(in[0].shape, a.Int("axis"), a.Int("start"), a.Int("end"));
    Shape s = in[0].shape;
    s[size_t(r.axis)] = r.end - r.start;
    return std::vector<TensorMeta>{{s, in[0].dtype}};
  };
  def.backward = [](const BackwardArgs& a) {
    Attrs attrs = a.attrs;  // slice's, for slice_grad (Note [Declared attributes])
    attrs.Bind(op_kind::slice_grad).Set("shape", a.input_metas[0].shape);
    return std::vector<Tensor>{Call1(op_kind::slice_grad, {a.grad_outputs[0]}, attrs)};
  };
}

// dy: the slice's output gradient -> dx: zeros of the input's shape ("shape" attr) with dy
// written at [start, end) along axis.
LOOM_OP(slice_grad) {
  def.internal = "backward of slice";
  def.attrs = Join(kSliceAttrs, {{"shape", kInts}});
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("slice_grad", in, 1);
    const Shape& full = a.Ints("shape");
    SliceRange r = SliceBounds(full, a.Int("axis"), a.Int("start"), a.Int("end"));
    Shape s = full;
    s[size_t(r.axis)] = r.end - r.start;
    LOOM_CHECK(in[0].shape == s, ShapeError, "[slice_grad] gradient is ", ToString(in[0].shape), ", the slice of ",
               ToString(full), " is ", ToString(s));
    return std::vector<TensorMeta>{{full, in[0].dtype}};
  };
  // Linear in dy: its own gradient is the slice again.
  def.backward = [](const BackwardArgs& a) {
    return std::vector<Tensor>{
        ops::Slice(a.grad_outputs[0], a.attrs.Int("axis"), a.attrs.Int("start"), a.attrs.Int("end"))};
  };
}

LOOM_OP(broadcast_to) {
  def.attrs = {{"shape", kInts}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("broadcast_to", in, 1);
    const Shape& s = in[0].shape;
    const Shape& t = a.Ints("shape");
    bool ok = s.size() <= t.size();
    for (size_t i = 0; ok && i < s.size(); ++i) {
      int64_t d = s[s.size() - 1 - i], e = t[t.size() - 1 - i];
      ok = d == e || d == 1;
    }
    for (size_t i = 0; ok && i < t.size(); ++i) ok = t[i] >= 0;
    LOOM_CHECK(ok, ShapeError, "[broadcast_to] cannot broadcast ", ToString(s), " to ", ToString(t));
    return std::vector<TensorMeta>{{t, in[0].dtype}};
  };
  def.backward = [](const BackwardArgs& a) {
    const Tensor& g = a.grad_outputs[0];
    const Shape& s = a.input_metas[0].shape;
    return std::vector<Tensor>{g.shape() == s ? g : ops::SumTo(g, s)};
  };
}

namespace ops {

Tensor Reshape(const Tensor& x, const Shape& shape) {
  LOOM_CHECK(x.defined(), ValueError, "[reshape] input 0 is undefined");
  return Call1(op_kind::reshape, {x.Contiguous()}, Attrs{{"shape", shape}});
}

Tensor Transpose(const Tensor& x, int64_t a, int64_t b) {
  return Call1(op_kind::transpose, {x}, Attrs{{"a", a}, {"b", b}});
}

Tensor Permute(const Tensor& x, const std::vector<int64_t>& perm) {
  return Call1(op_kind::permute, {x}, Attrs{{"perm", perm}});
}

Tensor Concat(const std::vector<Tensor>& xs, int64_t axis) {
  LOOM_CHECK(!xs.empty(), ValueError, "[concat] needs at least one input");
  return Call1(op_kind::concat, xs, Attrs{{"axis", axis}});
}

Tensor Slice(const Tensor& x, int64_t axis, int64_t start, int64_t end) {
  LOOM_CHECK(x.defined(), ValueError, "[slice] input 0 is undefined");
  // The record carries the normalised range, so kernels and dumps never see negative indices.
  SliceRange r = SliceBounds(x.shape(), axis, start, end);
  return Call1(op_kind::slice, {x}, Attrs{{"axis", r.axis}, {"start", r.start}, {"end", r.end}});
}

Tensor BroadcastTo(const Tensor& x, const Shape& shape) {
  if (x.defined() && x.shape() == shape) return x;
  return Call1(op_kind::broadcast_to, {x}, Attrs{{"shape", shape}});
}

Tensor Flatten(const Tensor& x, int64_t start_axis) {
  LOOM_CHECK(x.defined(), ValueError, "[flatten] input 0 is undefined");
  int64_t rank = x.ndim();
  int64_t s = NormalizeAxis(start_axis, rank, "flatten");  // rank 0: axis 0, giving (1,)
  Shape shape(x.shape().begin(), x.shape().begin() + std::min(s, rank));
  int64_t rest = 1;
  for (int64_t d = s; d < rank; ++d) rest *= x.shape()[size_t(d)];
  shape.push_back(rest);
  return Reshape(x, shape);
}

}  // namespace ops
}  // namespace loom
