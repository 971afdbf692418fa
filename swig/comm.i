// Communicators (src/io/comm): made by make_communicator("mpi" | "nccl" | "auto"),
// used from Python for rank/size, an in-place all-reduce or broadcast of a tensor and a
// barrier. loom/comm.py wraps make_communicator so that an uncaught Python exception aborts
// every rank (Note [A failing rank takes the job down] in io/comm/comm.h). A failed collective
// is a loom.CommError (errors.i).
//
// The raw-buffer collectives (void* + count) are C++'s; Python passes tensors, checked here:
// the tensor must live where the communicator reduces (host for MPI, the GPU for NCCL), be
// contiguous and hold values (not be pending inside a capture). Collectives run without the
// interpreter lock: they may wait for the other ranks for up to LOOM_COMM_TIMEOUT_S.

%{
#include "core/tensor.h"
#include "core/communicator.h"
#include "io/comm/comm.h"

namespace loom_py {

struct CommWithoutGil {
  PyThreadState* s = PyEval_SaveThread();
  ~CommWithoutGil() { PyEval_RestoreThread(s); }
};

// The tensor's memory, checked for a collective of `c` named `call`.
static void* CommBuffer(loom::Communicator& c, const loom::Tensor& t, const char* call) {
  LOOM_CHECK(t.defined(), ValueError, "[", call, "] the tensor is empty (undefined)");
  loom::Device* d = t.device();
  const bool gpu = d->type() == loom::DeviceType::kCUDA;
  LOOM_CHECK(gpu == c.on_device(), DeviceError, "[", call, "] the ", c.backend(), " communicator works on ",
             c.on_device() ? "GPU" : "host", " tensors, not ", t.Describe());
  LOOM_CHECK(!d->buffering(), GraphError, "[", call, "] ", t.Describe(), " is being captured (", d->capture_name(),
             "): a communicator call runs at once, outside a capture");
  LOOM_CHECK(t.is_contiguous(), ValueError, "[", call, "] ", t.Describe(),
             " is a non-contiguous view: reduce a contiguous tensor (contiguous()) and copy back");
  LOOM_CHECK(t.block()->allocated(), GraphError, "[", call, "] ", t.Describe(), " holds no values yet");
  return t.raw_data();
}

static loom::ReduceOp CommReduceOp(const std::string& op) {
  LOOM_CHECK(op == "sum" || op == "max", ValueError, "[all_reduce] op '", op, "': expected \"sum\" or \"max\"");
  return op == "sum" ? loom::ReduceOp::kSum : loom::ReduceOp::kMax;
}

}  // namespace loom_py
%}

// Calls that wait for the other ranks run without the interpreter lock.
%define LOOM_COMM_WITHOUT_GIL(fn)
%exception fn {
  try {
    loom_py::CommWithoutGil nogil;
    $action
  } catch (...) {
    loom_py::SetPythonErrorFromCurrent();
    SWIG_fail;
  }
}
%enddef
LOOM_COMM_WITHOUT_GIL(loom::Communicator::Barrier)
LOOM_COMM_WITHOUT_GIL(loom::MakeCommunicator)

%ignore loom::Communicator::AllReduce;
%ignore loom::Communicator::AllGather;
%ignore loom::Communicator::Broadcast;
%ignore loom::ReduceOp;
// Defined only in a build with NCCL (device/cuda/nccl.cc): wrapped, it would leave the module
// with an undefined symbol everywhere else. Python asks make_communicator("nccl") instead.
%ignore loom::MakeNcclCommunicator;
%include "core/communicator.h"

// The documented keywords (c.broadcast(t, root=1), c.all_reduce(t, op="max")) work: without
// kwargs SWIG's wrappers took positions only and raised TypeError for them.
%feature("kwargs") loom::Communicator::all_reduce;
%feature("kwargs") loom::Communicator::broadcast;
%extend loom::Communicator {
  // In place: every rank ends with the sum (or max) over ranks of `t`.
  void all_reduce(loom::Tensor& t, const std::string& op = "sum") {
    const loom::ReduceOp rop = loom_py::CommReduceOp(op);
    void* p = loom_py::CommBuffer(*$self, t, "all_reduce");
    auto use = t.device()->Use();  // Note [One user at a time]
    loom_py::CommWithoutGil nogil;
    $self->AllReduce(p, t.numel(), t.dtype(), rop);
  }
  // In place: every rank ends with rank `root`'s `t`.
  void broadcast(loom::Tensor& t, int root = 0) {
    void* p = loom_py::CommBuffer(*$self, t, "broadcast");
    auto use = t.device()->Use();
    loom_py::CommWithoutGil nogil;
    $self->Broadcast(p, t.numel(), t.dtype(), root);
  }
}

%include "io/comm/comm.h"
