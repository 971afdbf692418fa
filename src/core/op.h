// Ops are data (docs/design.md invariant 1).
//
// An OpDef declares one op kind in one place: its name, shape inference, which inputs and
// outputs its backward needs, its backward (written with other ops) and, registered from the
// backend folders, one kernel per device type. An OpRecord is one use of an op: kind,
// attributes, the tensors it reads and the tensors it writes. Every op goes through
// Device::Submit(OpRecord), which either runs the kernel now (eager) or appends the record to
// the graph being captured. Graph passes, dumps and cost accounting read the same record.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/attrs.h"
#include "core/tensor.h"

namespace loom {

enum class DeviceType : uint8_t { kCPU = 0, kCUDA = 1 };
constexpr int kNumDeviceTypes = 2;
const char* Name(DeviceType t);

struct OpDef;

struct OpRecord {
  const OpDef* def = nullptr;
  Attrs attrs;
  std::vector<Tensor> inputs;   // read (plain views: no autograd state)
  std::vector<Tensor> outputs;  // written; may alias inputs for in-place updates (optimizers)
  uint64_t rng_offset = 0;      // first Philox counter of a random op, relative to the run's base

  const std::string& name() const;
  // Binds attrs to def's declaration, checking them, unless they are bound to it already (Note
  // [Declared attributes] in core/attrs.h): where a record meets its op.
  void BindAttrs() {
    if (attrs.op() != def) attrs.Bind(*def);
  }
};

// What a kernel gets besides the record: the device and per-run values.
struct KernelContext {
  Device* device = nullptr;
  uint64_t rng_seed = 0;  // the device generator's key
  uint64_t rng_base = 0;  // added to OpRecord::rng_offset: advances every replay (invariant 6)
  // Note [Planned scratch]: in a planned graph, the arena bytes reserved for this op's scratch
  // (OpDef::scratch); null in eager mode, where a kernel takes its scratch from the device pool.
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  // Set while a device graph is recorded: random kernels read {base, seed} from these two device
  // words instead of rng_base and rng_seed, since every launch of the recording may use another
  // base and, after SetRandSeed, another seed.
  const uint64_t* rng_base_device = nullptr;
};

// x: ..., kernels never allocate tensors: outputs are allocated (or bound) before the call.
using KernelFn = void (*)(const OpRecord& op, const KernelContext& ctx);

struct TensorMeta {
  Shape shape;
  DType dtype;
};

// What a backward function receives. Only the inputs/outputs the OpDef declared in
// saved_inputs/saved_outputs are defined (Note [Backward keeps only what it needs]).
struct BackwardArgs {
  const Attrs& attrs;
  const std::vector<Tensor>& inputs;
  const std::vector<Tensor>& outputs;
  const std::vector<TensorMeta>& input_metas;
  const std::vector<Tensor>& grad_outputs;  // undefined where no gradient flowed
  const std::vector<bool>& needs_input_grad;
};

struct OpDef {
  std::string name;
  // Why the op has no Python function of its name ("backward of relu", "made by a graph pass");
  // null for a user-facing op, which loom.autograd then provides (test/python/test_bindings.py).
  const char* internal = nullptr;
  // Note [Declared attributes] (core/attrs.h): every attribute the op has, with its type, that
  // anything reads: `def.attrs = {{"axis", kInt}, {"keepdims", kInt}};` (kInt, kFloat, kInts,
  // kStr: core/ops/common.h). A record's attributes are checked against it where the record
  // meets the op (a key not declared or a value of another type is an AttrError naming the op
  // and listing these), and a read of a key not declared here is an InternalError.
  std::vector<AttrDecl> attrs;
  // Validates inputs and attributes (throwing typed errors that name the op) and returns the
  // outputs' shapes and dtypes.
  std::function<std::vector<TensorMeta>(const std::vector<TensorMeta>&, const Attrs&)> infer;
  // Note [Backward keeps only what it needs]
  // The autograd node keeps exactly these inputs/outputs alive, nothing else (docs/design.md
  // invariant 8). Eager peak memory depends on it.
  std::vector<int> saved_inputs;
  std::vector<int> saved_outputs;
  // Returns one gradient per input (undefined where none). Null: not differentiable.
  std::function<std::vector<Tensor>(const BackwardArgs&)> backward;
  // For random ops: how many Philox counters one run of the op consumes.
  std::function<uint64_t(const OpRecord&)> random_draws;
  // Kernels receive contiguous inputs unless this is set (then they honour strides).
  bool accepts_strided = false;
  // A view op produces its output without a kernel, sharing the input's block.
  std::function<Tensor(const Tensor&, const Attrs&)> view;
  // Note [Outputs that are inputs]: (output index, input index) pairs. Call makes such an
  // output the given input tensor itself (same block, which must be contiguous) instead of a
  // fresh one, so that an op can both create new outputs with autograd history and update
  // state in place (batch_norm_train's running statistics). The record lists the tensor among
  // the outputs as well as the inputs, so graph analysis sees the read and the write.
  std::vector<std::pair<int, int>> inplace;
  // Note [In-place reuse]: inputs whose memory output 0 MAY take over when the planner sees the
  // input die at this op (CanRunInPlace in graph/graph.cc). Listing an input promises that every
  // device's kernel reads element k of it before writing element k of output 0, and nothing
  // else of it afterwards (element-wise loops). Same shape and dtype as output 0 only.
  std::vector<int> shareable_inputs;

  std::array<KernelFn, kNumDeviceTypes> kernels{};
  // Note [Planned scratch]: bytes of scratch a device's kernel needs for this record (registered
  // with the kernel), so that a planned graph packs scratch into its arena like any block.
  std::array<size_t (*)(const OpRecord&), kNumDeviceTypes> scratch{};
  // Note [What a kernel supports]
  // A kernel that handles only some records (shapes, dtypes,
  // attributes) registers a predicate saying which; none means every record that passes
  // `infer`. Graph passes ask it (Device::Supports) before they create a fused op, so that a
  // kernel's limits are written once, beside the kernel.
  std::array<bool (*)(const OpRecord&), kNumDeviceTypes> supports{};
};

// The op registry. Op declarations (src/core/ops/*.cc, LOOM_OP) and kernels (src/device/*/...,
// LOOM_KERNEL) register by name from static initialisers, in any order.
void RegisterKernel(const std::string& name, DeviceType device, KernelFn fn);
void RegisterScratch(const std::string& name, DeviceType device, size_t (*fn)(const OpRecord&));
void RegisterSupports(const std::string& name, DeviceType device, bool (*fn)(const OpRecord&));
const OpDef& GetOp(const std::string& name);  // throws ValueError for an unknown op
std::vector<std::string> ListOps();

// Note [Op kinds]
// Code that must recognise an op (a graph pass looking for an SGD update) compares OpDef
// addresses, never names, and code that calls an op (the ops:: wrappers, backward functions,
// kernels that run another op's kernel) calls it by kind, `Call1(op_kind::erf_grad, {x, dy})`:
// LOOM_OP(relu) also defines the handle `loom::op_kind::relu`, and a file that needs it
// declares it with LOOM_OP_KIND(relu) at global scope. A misspelt kind is then a link error, not
// a pass that silently never fires or a call that fails only when it runs. Names remain for
// what is data: Python's call_op, the ONNX importer, dumps. LOOM_OP is used inside namespace
// loom. The handles are references bound by static initialisers: use them at run time, not
// from another static initialiser.
OpDef& DefineOp(const char* name, void (*define)(OpDef&));

#define LOOM_CONCAT_INNER(a, b) a##b
#define LOOM_CONCAT(a, b) LOOM_CONCAT_INNER(a, b)
// LOOM_OP(relu) { def.infer = ...; def.backward = ...; }
#define LOOM_OP(opname)                                                                     \
  static void LOOM_CONCAT(loom_define_op_, opname)(::loom::OpDef & def);                    \
  namespace op_kind {                                                                       \
  extern const ::loom::OpDef& opname;                                                       \
  const ::loom::OpDef& opname = ::loom::DefineOp(#opname, &LOOM_CONCAT(loom_define_op_, opname)); \
  }                                                                                         \
  static void LOOM_CONCAT(loom_define_op_, opname)(::loom::OpDef & def)
// LOOM_OP_KIND(sgd_update);  declares loom::op_kind::sgd_update (Note [Op kinds]).
#define LOOM_OP_KIND(opname) \
  namespace loom {           \
  namespace op_kind {        \
  extern const ::loom::OpDef& opname; \
  }                          \
  }
// LOOM_KERNEL_SCRATCH(conv2d, kCPU, Conv2dScratchBytes);  (Note [Planned scratch])
#define LOOM_KERNEL_SCRATCH(opname, devtype, fn)                                                  \
  static const bool LOOM_CONCAT(loom_scratch_registered_##opname##_, devtype) =                  \
      (::loom::RegisterScratch(#opname, ::loom::DeviceType::devtype, fn), true)
// LOOM_KERNEL_SUPPORTS(matmul_sgd_update, kCPU, Fn);  (Note [What a kernel supports])
#define LOOM_KERNEL_SUPPORTS(opname, devtype, fn)                                                \
  static const bool LOOM_CONCAT(loom_supports_registered_##opname##_, devtype) =                \
      (::loom::RegisterSupports(#opname, ::loom::DeviceType::devtype, fn), true)
// LOOM_KERNEL(relu, kCPU, ReluCpu);
#define LOOM_KERNEL(opname, devtype, fn)                                                  \
  static const bool LOOM_CONCAT(loom_kernel_registered_##opname##_, devtype) =            \
      (::loom::RegisterKernel(#opname, ::loom::DeviceType::devtype, fn), true)

// ---- Calling ops ----
// Call: runs (or buffers) op `op` on `inputs`, creating fresh outputs, and records autograd
// history when gradients are enabled and an input requires them. C++ names the op by its kind,
// `Call1(op_kind::relu, {x})` (Note [Op kinds]); the forms taking a name are for callers whose
// op names are data (Python's call_op, tests).
std::vector<Tensor> Call(const OpDef& op, const std::vector<Tensor>& inputs, const Attrs& attrs = {});
Tensor Call1(const OpDef& op, const std::vector<Tensor>& inputs, const Attrs& attrs = {});
std::vector<Tensor> Call(const std::string& name, const std::vector<Tensor>& inputs, const Attrs& attrs = {});
Tensor Call1(const std::string& name, const std::vector<Tensor>& inputs, const Attrs& attrs = {});
// CallInto: writes into given outputs (in-place updates such as optimizer steps, fills).
// No autograd history.
void CallInto(const OpDef& op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
              const Attrs& attrs = {});
void CallInto(const std::string& name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
              const Attrs& attrs = {});

// Gradient mode (thread-local). Backward runs with gradients disabled.
bool GradEnabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
 private:
  bool prev_;
};

}  // namespace loom
