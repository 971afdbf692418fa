#include "device/device.h"

#include "core/error.h"
#include "graph/graph.h"

namespace loom {

Device::Device(DeviceType type, int id, CachingAllocator::RawAlloc alloc, CachingAllocator::RawFree free)
    : type_(type),
      id_(id),
      alloc_(std::make_unique<CachingAllocator>(std::move(alloc), std::move(free))),
      graph_options_(std::make_unique<GraphOptions>()) {}

Device::~Device() = default;

std::string Device::name() const { return std::string(Name(type_)) + ":" + std::to_string(id_); }

void* Device::Malloc(size_t bytes) { return alloc_->Malloc(bytes); }
void Device::Free(void* p) { alloc_->Free(p); }

const uint64_t* Device::BeginDeviceGraphCapture(const void*) {
  throw DeviceError(detail::Cat("[graph] device graphs are not supported on ", name()));
}
void Device::EndDeviceGraphCapture(const void*) {
  throw DeviceError(detail::Cat("[graph] device graphs are not supported on ", name()));
}
void Device::LaunchDeviceGraph(const void*, uint64_t) {
  throw DeviceError(detail::Cat("[graph] device graphs are not supported on ", name()));
}

void Device::RunKernel(const OpRecord& op, const KernelContext& ctx) {
  KernelFn fn = op.def->kernels[int(type_)];
  LOOM_ASSERT(fn, "no ", Name(type_), " kernel for ", op.name());
  fn(op, ctx);
  ++ops_run_;
}

void Device::Submit(OpRecord op) {
  LOOM_CHECK(HasKernel(*op.def), DeviceError, "[", op.name(), "] has no kernel for device ", name());
  for (const Tensor& t : op.inputs)
    LOOM_CHECK(t.device() == this, DeviceError, "[", op.name(), "] input ", t.Describe(), " is not on ", name());
  for (const Tensor& t : op.outputs)
    LOOM_CHECK(t.device() == this, DeviceError, "[", op.name(), "] output ", t.Describe(), " is not on ", name());
  if (buffering()) {
    capturing_->Append(std::move(op));
    return;
  }
  for (size_t i = 0; i < op.inputs.size(); ++i)
    LOOM_CHECK(op.inputs[i].block()->allocated(), ValueError, "[", op.name(), "] input ", i, " (",
               op.inputs[i].Describe(), ") was never written");
  for (const Tensor& t : op.outputs) t.block()->Allocate();
  if (op.def->random_draws) {
    op.rng_offset = rng_counter_;
    rng_counter_ += op.def->random_draws(op);
  }
  KernelContext ctx;
  ctx.device = this;
  ctx.rng_seed = rng_seed_;
  ctx.rng_base = 0;
  RunKernel(op, ctx);
  if (record_timeline_) timeline_.emplace_back(op.name(), alloc_->stats().live_bytes);
}

}  // namespace loom
