// Collective op declarations (core/collective.h). Inputs: the buffer, the communicator's token
// (Note [The collective token]), then, for allreduce, member tensors aliasing the buffer.
// Outputs list the same tensors (in place), except allgather's gathered result.
// attrs: comm (registry id); allreduce: reduce (0 sum, 1 max), scale, compress (Compression);
// allgather: size (ranks); broadcast: root; reducescatter: size, reduce, compress;
// allgather_shards: size.
#include "core/collective.h"

#include "core/ops/common.h"
#include "core/comm_registry.h"

namespace loom {

using namespace opdecl;

const char* Name(Compression c) {
  switch (c) {
    case Compression::kNone: return "none";
    case Compression::kFloat16: return "fp16";
    case Compression::kBFloat16: return "bf16";
  }
  return "?";
}

Compression ParseCompression(const std::string& s) {
  if (s == "none" || s.empty() || s == "fp32" || s == "float32") return Compression::kNone;
  if (s == "fp16" || s == "float16") return Compression::kFloat16;
  if (s == "bf16" || s == "bfloat16") return Compression::kBFloat16;
  throw ValueError(detail::Cat("[allreduce] compression '", s, "': expected none (or fp32), fp16 or bf16"));
}

namespace {
void CheckToken(const char* op, const std::vector<TensorMeta>& in) {
  LOOM_CHECK(in.size() >= 2 && in[1].dtype == DType::kInt64 && NumElements(in[1].shape) == 1, ValueError, "[", op,
             "] input 1 must be the communicator's token (int64, one element)");
}
// A reducing collective's buffer and attributes: floating data, a 16-bit wire only from float32
// or float64, a sum or a max.
void CheckReduction(const char* op, const TensorMeta& buf, const Attrs& a) {
  LOOM_CHECK(IsFloating(buf.dtype), DTypeError, "[", op, "] buffer must be floating, got ", Name(buf.dtype));
  const auto c = Compression(a.Int("compress", 0));
  LOOM_CHECK(c == Compression::kNone || buf.dtype == DType::kFloat32 || buf.dtype == DType::kFloat64, DTypeError,
             "[", op, "] ", Name(c), " compression needs float32 or float64 data, got ", Name(buf.dtype));
  const int64_t r = a.Int("reduce", 0);
  LOOM_CHECK(r == 0 || r == 1, ValueError, "[", op, "] reduce ", r, ": 0 (sum) or 1 (max)");
}

// A buffer of `size` equal slots, one per rank.
void CheckSlots(const char* op, const TensorMeta& buf, int64_t size) {
  LOOM_CHECK(size >= 1, ValueError, "[", op, "] size ", size, " must be >= 1");
  LOOM_CHECK(buf.shape.size() == 1 && buf.shape[0] % size == 0, ShapeError, "[", op, "] buffer ", ToString(buf.shape),
             ": expected one dimension holding ", size, " equal slots (one per rank)");
}
}  // namespace

LOOM_OP(allreduce) {
  def.internal = "reached through DistOpt, SyncBatchNorm2d and the gradient-bucket pass";
  def.attrs = {{"comm", kInt}, {"reduce", kInt}, {"scale", kFloat}, {"compress", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckToken("allreduce", in);
    CheckReduction("allreduce", in[0], a);
    return in;
  };
  // Note [A differentiable all-reduce]
  // Called out of place (ops::AllReduced), output 1 is the
  // token itself. The ranks' losses add up, so the gradient of a sum over ranks is, on every
  // rank, the sum over ranks of the incoming gradients: the same all-reduce, backwards.
  def.inplace = {{1, 1}};
  def.saved_inputs = {1};
  def.backward = [](const BackwardArgs& a) {
    LOOM_CHECK(a.attrs.Int("reduce", 0) == 0, ValueError, "[allreduce] only a sum is differentiable");
    std::vector<Tensor> grads(a.inputs.size());
    if (a.needs_input_grad[0] && a.grad_outputs[0].defined())
      grads[0] = Call(op_kind::allreduce, {a.grad_outputs[0].Contiguous(), a.inputs[1]}, a.attrs)[0];
    return grads;
  };
}

LOOM_OP(allgather) {
  def.internal = "reached through loom.collective";
  def.attrs = {{"comm", kInt}, {"size", kInt}};
  def.inplace = {{1, 1}};  // the token passes through, as allreduce's
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("allgather", in, 2);
    CheckToken("allgather", in);
    const int64_t n = a.Int("size");
    LOOM_CHECK(n >= 1, ValueError, "[allgather] size ", n, " must be >= 1");
    Shape s{n};
    s.insert(s.end(), in[0].shape.begin(), in[0].shape.end());
    return std::vector<TensorMeta>{{s, in[0].dtype}, in[1]};
  };
}

// Note [Sharded optimizer state] (nn/dist_opt.h): the two collectives of a sharded step, both
// in place over a buffer of `size` equal slots, one per rank. Inputs: the buffer, the token,
// then (allgather_shards) member tensors whose blocks alias the buffer, as allreduce's.
LOOM_OP(reducescatter) {
  def.internal = "reached through DistOpt with sharded optimizer state";
  def.attrs = {{"comm", kInt}, {"size", kInt}, {"reduce", kInt}, {"compress", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("reducescatter", in, 2);
    CheckToken("reducescatter", in);
    CheckSlots("reducescatter", in[0], a.Int("size"));
    CheckReduction("reducescatter", in[0], a);
    return in;
  };
}

LOOM_OP(allgather_shards) {
  def.internal = "reached through DistOpt with sharded optimizer state";
  def.attrs = {{"comm", kInt}, {"size", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    LOOM_CHECK(in.size() >= 2, ValueError, "[allgather_shards] expected the buffer, the token and members, got ",
               in.size(), " inputs");
    CheckToken("allgather_shards", in);
    CheckSlots("allgather_shards", in[0], a.Int("size"));
    return in;
  };
}

LOOM_OP(broadcast) {
  def.internal = "reached through DistOpt (parameters from rank 0)";
  def.attrs = {{"comm", kInt}, {"root", kInt}};
  def.infer = [](const std::vector<TensorMeta>& in, const Attrs& a) {
    CheckArity("broadcast", in, 2);
    CheckToken("broadcast", in);
    LOOM_CHECK(a.Int("root") >= 0, ValueError, "[broadcast] root ", a.Int("root"), " is negative");
    return in;
  };
}

namespace ops {

namespace {
void CheckBuffer(const char* op, const Tensor& t) {
  LOOM_CHECK(t.defined(), ValueError, "[", op, "] undefined tensor");
  LOOM_CHECK(t.is_contiguous(), ValueError, "[", op, "] buffer ", t.Describe(), " must be contiguous");
}
}  // namespace

void AllReduce(int comm, const Tensor& t, ReduceOp op, double scale, Compression compression,
               const std::vector<Tensor>& members) {
  CheckBuffer("allreduce", t);
  NoGradGuard no_grad;
  Tensor token = CommunicatorToken(comm, t.device_ptr());
  std::vector<Tensor> io{t, token};
  io.insert(io.end(), members.begin(), members.end());
  CallInto(op_kind::allreduce, io, io,
           Attrs{{"comm", int64_t(comm)}, {"reduce", int64_t(op == ReduceOp::kMax)}, {"scale", scale},
                 {"compress", int64_t(compression)}});
}

Tensor AllReduced(int comm, const Tensor& t, double scale) {
  CheckBuffer("allreduce", t);
  Tensor token = CommunicatorToken(comm, t.device_ptr());
  return Call(op_kind::allreduce, {t, token}, Attrs{{"comm", int64_t(comm)}, {"reduce", int64_t(0)}, {"scale", scale},
                                            {"compress", int64_t(0)}})[0];
}

Tensor AllGather(int comm, const Tensor& t) {
  CheckBuffer("allgather", t);
  NoGradGuard no_grad;
  Tensor token = CommunicatorToken(comm, t.device_ptr());
  const int64_t n = FindCommunicator(comm)->size();
  Shape s{n};
  s.insert(s.end(), t.shape().begin(), t.shape().end());
  Tensor out(s, t.dtype(), t.device_ptr());
  CallInto(op_kind::allgather, {t, token}, {out, token}, Attrs{{"comm", int64_t(comm)}, {"size", n}});
  return out;
}

void ReduceScatter(int comm, const Tensor& t, ReduceOp op, Compression compression) {
  CheckBuffer("reducescatter", t);
  NoGradGuard no_grad;
  Tensor token = CommunicatorToken(comm, t.device_ptr());
  const int64_t n = FindCommunicator(comm)->size();
  CallInto(op_kind::reducescatter, {t, token}, {t, token},
           Attrs{{"comm", int64_t(comm)}, {"size", n}, {"reduce", int64_t(op == ReduceOp::kMax)},
                 {"compress", int64_t(compression)}});
}

void AllGatherShards(int comm, const Tensor& t, const std::vector<Tensor>& members) {
  CheckBuffer("allgather_shards", t);
  NoGradGuard no_grad;
  Tensor token = CommunicatorToken(comm, t.device_ptr());
  const int64_t n = FindCommunicator(comm)->size();
  std::vector<Tensor> io{t, token};
  io.insert(io.end(), members.begin(), members.end());
  CallInto(op_kind::allgather_shards, io, io, Attrs{{"comm", int64_t(comm)}, {"size", n}});
}

void Broadcast(int comm, const Tensor& t, int root) {
  CheckBuffer("broadcast", t);
  NoGradGuard no_grad;
  Tensor token = CommunicatorToken(comm, t.device_ptr());
  CallInto(op_kind::broadcast, {t, token}, {t, token}, Attrs{{"comm", int64_t(comm)}, {"root", int64_t(root)}});
}

}  // namespace ops
}  // namespace loom
