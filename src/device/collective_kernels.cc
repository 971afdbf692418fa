// Collective kernels (collective_kernels.h).
#include "device/collective_kernels.h"

#include <vector>

#include "core/collective.h"
#include "core/comm_registry.h"
#include "core/device.h"

LOOM_OP_KIND(cast);
LOOM_OP_KIND(copy);
LOOM_OP_KIND(mul_scalar);

namespace loom {

namespace {

// Calls f(pointer) on the buffer the communicator can read: `buf` itself when the communicator
// and the tensor live on the same side, else a host copy (copied back after f when `back`).
template <typename F>
void OnWire(const KernelContext& ctx, const Communicator& comm, void* buf, size_t bytes, bool back, F&& f) {
  Device& dev = *ctx.device;
  const bool tensor_on_host = dev.type() == DeviceType::kCPU;
  if (comm.on_device() != tensor_on_host) {
    f(buf);
    return;
  }
  LOOM_CHECK(!comm.on_device(), DeviceError, "[collective] the ", comm.backend(),
             " communicator works on device memory; the tensor is on ", dev.name());
  // A recorded device graph (Note [Device graph replay]) replays kernels, not host calls.
  LOOM_CHECK(!ctx.rng_base_device, DeviceError, "[collective] the ", comm.backend(), " communicator reduces host ",
             "memory and cannot be recorded into a device graph on ", dev.name(),
             ": use a device communicator (NCCL) or GraphOptions::device_graph = false");
  std::vector<char> host(bytes);
  dev.MemcpyToHost(host.data(), buf, bytes);
  f(host.data());
  if (back) dev.MemcpyFromHost(buf, host.data(), bytes);
}

// Runs the device's kernel of `op` on x -> y (element-wise: may be the same tensor).
void RunElementwise(const OpDef& op, const Tensor& x, const Tensor& y, Attrs attrs, const KernelContext& ctx) {
  OpRecord r;
  r.def = &op;
  r.attrs = std::move(attrs);
  r.BindAttrs();  // Note [Declared attributes]: RunKernel takes bound records only
  r.inputs = {x};
  r.outputs = {y};
  KernelContext plain = ctx;
  plain.scratch = nullptr;
  plain.scratch_bytes = 0;
  ctx.device->RunKernel(r, plain);
}

DType WireType(Compression c) { return c == Compression::kFloat16 ? DType::kFloat16 : DType::kBFloat16; }

// The 16-bit wire copy of a compressed collective: planned scratch in a graph, the device pool in
// eager mode; freed with this object.
class WireBuffer {
 public:
  WireBuffer(const KernelContext& ctx, const Tensor& t, Compression c) : dev_(*ctx.device) {
    const size_t bytes = size_t(t.numel()) * 2;
    void* scratch = ctx.scratch && ctx.scratch_bytes >= bytes ? ctx.scratch : nullptr;
    owned_ = scratch ? nullptr : dev_.Malloc(bytes);
    auto block = std::make_shared<Block>(bytes, dev_.shared_from_this());
    block->Bind(scratch ? scratch : owned_);
    wire_ = Tensor(block, t.shape(), ContiguousStrides(t.shape()), 0, WireType(c));
  }
  ~WireBuffer() {
    if (owned_) dev_.Free(owned_);
  }
  const Tensor& tensor() const { return wire_; }

 private:
  Device& dev_;
  void* owned_ = nullptr;
  Tensor wire_;
};

// Element `at`, `n` long, of the one-dimensional t.
Tensor Part(const Tensor& t, int64_t at, int64_t n) {
  return Tensor(t.block_ptr(), {n}, {1}, t.offset() + at, t.dtype());
}

}  // namespace

size_t AllReduceScratchBytes(const OpRecord& op) {
  const auto c = Compression(op.attrs.Int("compress", 0));
  return c == Compression::kNone ? 0 : size_t(op.inputs[0].numel()) * 2;
}

// data: (n...) in place or into a fresh output, token, members... -> the same
void AllReduceKernel(const OpRecord& op, const KernelContext& ctx) {
  std::shared_ptr<Communicator> comm = FindCommunicator(int(op.attrs.Int("comm")));
  const Tensor& t = op.outputs[0];
  const int64_t n = t.numel();
  if (op.inputs[0].raw_data() != t.raw_data())  // out of place (ops::AllReduced)
    RunElementwise(op_kind::copy, op.inputs[0], t, Attrs{}, ctx);
  const ReduceOp rop = op.attrs.Int("reduce", 0) ? ReduceOp::kMax : ReduceOp::kSum;
  const auto compress = Compression(op.attrs.Int("compress", 0));
  if (compress == Compression::kNone) {
    OnWire(ctx, *comm, t.raw_data(), t.nbytes(), true, [&](void* p) { comm->AllReduce(p, n, t.dtype(), rop); });
  } else {
    WireBuffer buffer(ctx, t, compress);
    const Tensor& wire = buffer.tensor();
    const DType w = wire.dtype();
    RunElementwise(op_kind::cast, t, wire, Attrs{{"dtype", int64_t(w)}}, ctx);
    OnWire(ctx, *comm, wire.raw_data(), wire.nbytes(), true, [&](void* p) { comm->AllReduce(p, n, w, rop); });
    RunElementwise(op_kind::cast, wire, t, Attrs{{"dtype", int64_t(t.dtype())}}, ctx);
  }
  const double scale = op.attrs.Float("scale", 1.0);
  if (scale != 1.0) RunElementwise(op_kind::mul_scalar, t, t, Attrs{{"s", scale}}, ctx);
}

// x: (n...), token -> y: (size, n...), token
void AllGatherKernel(const OpRecord& op, const KernelContext& ctx) {
  std::shared_ptr<Communicator> comm = FindCommunicator(int(op.attrs.Int("comm")));
  LOOM_CHECK(op.attrs.Int("size") == comm->size(), CommError, "[allgather] captured for ", op.attrs.Int("size"),
             " ranks, the communicator has ", comm->size());
  const Tensor &x = op.inputs[0], &y = op.outputs[0];
  OnWire(ctx, *comm, x.raw_data(), x.nbytes(), false, [&](void* send) {
    OnWire(ctx, *comm, y.raw_data(), y.nbytes(), true,
           [&](void* recv) { comm->AllGather(send, recv, x.numel(), x.dtype()); });
  });
}

// buffer: (size * count) in place, token -> the same (Note [Sharded optimizer state])
void ReduceScatterKernel(const OpRecord& op, const KernelContext& ctx) {
  std::shared_ptr<Communicator> comm = FindCommunicator(int(op.attrs.Int("comm")));
  LOOM_CHECK(op.attrs.Int("size") == comm->size(), CommError, "[reducescatter] captured for ", op.attrs.Int("size"),
             " ranks, the communicator has ", comm->size());
  const Tensor& t = op.outputs[0];
  const int64_t count = t.numel() / comm->size();
  const ReduceOp rop = op.attrs.Int("reduce", 0) ? ReduceOp::kMax : ReduceOp::kSum;
  const auto compress = Compression(op.attrs.Int("compress", 0));
  if (compress == Compression::kNone) {
    OnWire(ctx, *comm, t.raw_data(), t.nbytes(), true,
           [&](void* p) { comm->ReduceScatter(p, count, t.dtype(), rop); });
    return;
  }
  WireBuffer wire(ctx, t, compress);
  const Tensor& w = wire.tensor();
  RunElementwise(op_kind::cast, t, w, Attrs{{"dtype", int64_t(w.dtype())}}, ctx);
  OnWire(ctx, *comm, w.raw_data(), w.nbytes(), true, [&](void* p) { comm->ReduceScatter(p, count, w.dtype(), rop); });
  const int64_t at = comm->rank() * count;  // only this rank's slot holds a sum
  RunElementwise(op_kind::cast, Part(w, at, count), Part(t, at, count), Attrs{{"dtype", int64_t(t.dtype())}}, ctx);
}

// buffer: (size * count) in place, token, members... -> the same (Note [Sharded optimizer state])
void AllGatherShardsKernel(const OpRecord& op, const KernelContext& ctx) {
  std::shared_ptr<Communicator> comm = FindCommunicator(int(op.attrs.Int("comm")));
  LOOM_CHECK(op.attrs.Int("size") == comm->size(), CommError, "[allgather_shards] captured for ",
             op.attrs.Int("size"), " ranks, the communicator has ", comm->size());
  const Tensor& t = op.outputs[0];
  const int64_t count = t.numel() / comm->size();
  const size_t slot = size_t(comm->rank()) * size_t(count) * SizeOf(t.dtype());
  OnWire(ctx, *comm, t.raw_data(), t.nbytes(), true, [&](void* p) {
    comm->AllGather(static_cast<char*>(p) + slot, p, count, t.dtype());
  });
}

// x: (n...) in place, token -> the same
void BroadcastKernel(const OpRecord& op, const KernelContext& ctx) {
  std::shared_ptr<Communicator> comm = FindCommunicator(int(op.attrs.Int("comm")));
  const int root = int(op.attrs.Int("root"));
  LOOM_CHECK(root < comm->size(), CommError, "[broadcast] root ", root, " of ", comm->size(), " ranks");
  const Tensor& t = op.outputs[0];
  OnWire(ctx, *comm, t.raw_data(), t.nbytes(), true,
         [&](void* p) { comm->Broadcast(p, t.numel(), t.dtype(), root); });
}

}  // namespace loom
