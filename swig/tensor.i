// loom::Tensor and dtypes. The Python-facing methods (operators, numpy conversion, properties)
// are written in Python on top of these, in loom/tensor.py; here is only what needs C++:
// host copies through the buffer protocol (no numpy headers: any C-contiguous buffer works) and
// the facts that decide whether a zero-copy view of a tensor's memory is safe.

%{
#include "core/tensor.h"
#include "core/device.h"

namespace loom_py {

// A Python buffer released on scope exit.
struct Buffer {
  Py_buffer view{};
  bool ok = false;
  Buffer(PyObject* o, int flags) { ok = PyObject_GetBuffer(o, &view, flags) == 0; }
  ~Buffer() { if (ok) PyBuffer_Release(&view); }
};

// Whether a buffer of `itemsize`-byte elements with struct format `f` holds values of `dtype` as
// they are (native byte order, same kind and width). Anything else, numpy converts first.
static bool HoldsDType(const char* f, Py_ssize_t itemsize, loom::DType dtype) {
  if (!f || size_t(itemsize) != loom::SizeOf(dtype)) return false;
  if (*f == '@' || *f == '=') ++f;
  if (f[0] == '\0' || f[1] != '\0') return false;
  switch (dtype) {
    case loom::DType::kFloat32: return *f == 'f';
    case loom::DType::kFloat64: return *f == 'd';
    case loom::DType::kFloat16: return *f == 'e';
    case loom::DType::kInt32:
    case loom::DType::kInt64: return *f == 'i' || *f == 'l' || *f == 'q';  // the width is itemsize's
    case loom::DType::kUInt8: return *f == 'B';
    case loom::DType::kBool: return *f == '?';
    case loom::DType::kBFloat16: return false;
  }
  return false;
}

}  // namespace loom_py
%}

// Exceptions to the naming rule (Note [Bindings come from the headers] in loom.i).
%rename(dtype_size) loom::SizeOf;  // size_of would not say of what
%rename(dtype_name) loom::Name(DType);
%rename(device) loom::Tensor::device_ptr;  // Tensor::device() is the raw pointer, ignored below

// Type information only: Shape is std::vector<int64_t>, converted by typemaps.i; the shape
// helpers stay C++'s.
%import "core/shape.h"

// dtype.h: the DType enum, SizeOf, Name, IsFloating, DTypeFromName.
%ignore loom::DTypeOf;  // a compile-time trait
%include "core/dtype.h"

// tensor.h: the Tensor handle. Ignored: what hands out raw pointers, blocks or autograd nodes
// (kernels' and autograd's business), templates, and the setters that return Tensor& (a
// second, non-owning Python proxy); the %extend below has Python's versions of those.
%ignore loom::AutogradMeta;
%ignore loom::Tensor::Tensor(std::shared_ptr<Block>, Shape, Shape, int64_t, DType);
%ignore loom::Tensor::block;
%ignore loom::Tensor::block_ptr;
%ignore loom::Tensor::device;
%ignore loom::Tensor::raw_data;
%ignore loom::Tensor::set_requires_grad;
%ignore loom::Tensor::grad_fn;
%ignore loom::Tensor::meta;
%ignore loom::Tensor::set_meta;
%ignore loom::Tensor::set_name;
%ignore loom::Tensor::Item;          // item() below returns an int, bool or float by dtype
%ignore loom::Tensor::CopyFromHost;  // _copy_from_buffer below takes any Python buffer
%ignore loom::CheckHostReadAllowed;
%include "core/tensor.h"

%extend loom::Tensor {
  // Tensor& returns would hand Python a second, non-owning proxy; these return nothing.
  void _set_requires_grad(bool r) { $self->set_requires_grad(r); }
  void _set_name(const std::string& n) { $self->set_name(n); }
  bool _has_grad_fn() const { return $self->grad_fn() != nullptr; }

  // One element as a Python number: int for integer dtypes, bool for bool, float otherwise.
  // One call, no Python frame: a training loop reads its loss every step.
  PyObject* item() const {
    double v = $self->Item();
    switch ($self->dtype()) {
      case loom::DType::kInt32:
      case loom::DType::kInt64:
      case loom::DType::kUInt8: return PyLong_FromDouble(v);
      case loom::DType::kBool: return PyBool_FromLong(v != 0);
      default: return PyFloat_FromDouble(v);
    }
  }

  // Host -> tensor: `obj` is any C-contiguous buffer of exactly nbytes() bytes (the Python side
  // has checked shape and dtype and said what it expected). A feed: allowed during a capture.
  void _copy_from_buffer(PyObject* obj) {
    loom_py::Buffer b(obj, PyBUF_C_CONTIGUOUS);
    if (!b.ok) throw loom_py::PythonError();
    $self->CopyFromHost(b.view.buf, size_t(b.view.len));
  }
  // copy_from_numpy's fast path, one call for the usual batch: when `obj` is a C-contiguous
  // buffer of exactly this tensor's shape and dtype, writes it and returns true; otherwise
  // writes nothing and returns false (loom/tensor.py then converts it or says what is wrong).
  bool _copy_from_exact(PyObject* obj) {
    loom_py::Buffer b(obj, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT);
    if (!b.ok) {
      PyErr_Clear();
      return false;
    }
    const loom::Shape& shape = $self->shape();
    if (b.view.ndim != int(shape.size()) || !loom_py::HoldsDType(b.view.format, b.view.itemsize, $self->dtype()))
      return false;
    for (size_t i = 0; i < shape.size(); ++i)
      if (b.view.shape[i] != shape[i]) return false;
    $self->CopyFromHost(b.view.buf, size_t(b.view.len));
    return true;
  }
  // Tensor -> host: `obj` is a writable C-contiguous buffer of exactly nbytes() bytes.
  void _copy_to_buffer(PyObject* obj) {
    loom::CheckHostReadAllowed(*$self, "to_numpy");
    loom_py::Buffer b(obj, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE);
    if (!b.ok) throw loom_py::PythonError();
    LOOM_CHECK(size_t(b.view.len) == $self->nbytes(), ShapeError, "[to_numpy] ", $self->Describe(), " holds ",
               $self->nbytes(), " bytes, the host buffer has ", b.view.len);
    loom::Tensor c = $self->is_contiguous() ? *$self : $self->Contiguous();
    c.device()->Synchronize();
    c.device()->MemcpyToHost(b.view.buf, c.raw_data(), c.nbytes());
  }

  // Note [Zero-copy views from Python]
  // The address of the first element when the host may alias this tensor's memory, else 0:
  // the tensor is on the CPU, its block has memory of its own (a block bound to a planned
  // arena does not: the graph recycles that memory for other blocks between uses), and its
  // device is not capturing (a view taken then would show values no replay has written yet).
  // The Python side keeps the Tensor alive for as long as the numpy array exists (numpy holds
  // the object that gave it __array_interface__ as the array's base), and the Tensor keeps the
  // block alive.
  size_t _host_address() const {
    if (!$self->defined()) return 0;
    loom::Block* b = $self->block();
    loom::Device* d = b->device();
    // A block a graph keeps in a kernel's layout between replays (Note [Layout guards] in
    // graph/layout_guard.h) is copied instead; a viewed block is never kept so.
    if (d->type() != loom::DeviceType::kCPU || !b->allocated() || !b->owns_memory() || d->buffering() || b->guard())
      return 0;
    b->set_host_viewed();
    return reinterpret_cast<size_t>($self->raw_data());
  }
  bool _allocated() const { return $self->defined() && $self->block()->allocated(); }
  bool _persistent() const { return $self->defined() && $self->block()->persistent(); }
  void _set_persistent(bool p) {
    LOOM_CHECK($self->defined(), ValueError, "[tensor] undefined tensor");
    $self->block()->set_persistent(p);
  }
  // Makes this handle refer to `other`'s memory and autograd state (Tensor.to_device, which SINGA
  // defines as in place). Other handles of the old tensor keep the old memory.
  void _rebind(const loom::Tensor& other) {
    LOOM_CHECK(other.defined(), ValueError, "[tensor] cannot rebind to an undefined tensor");
    *$self = other;
  }
  // Identity of the memory: two handles share storage when their block ids are equal.
  unsigned long long _block_id() const { return $self->defined() ? $self->block()->id() : 0; }
}
