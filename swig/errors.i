// C++ exceptions -> Python exceptions (docs/design.md invariant 9).
//
// Every wrapped call, constructors included, runs inside one try block; whatever it throws is
// translated by its dynamic type and raised in Python, so no C++ exception ever reaches the
// interpreter's frames. The Python classes are created here (so the C++ side can raise them)
// and re-exported as loom.Error, loom.ShapeError, ... by loom/errors.py:
//
//   loom::ShapeError     loom.ShapeError     (loom.Error, ValueError)
//   loom::ValueError     loom.ValueError     (loom.Error, ValueError)
//   loom::DTypeError     loom.DTypeError     (loom.Error, TypeError)
//   loom::DeviceError    loom.DeviceError    (loom.Error, RuntimeError)
//   loom::GraphError     loom.GraphError     (loom.Error, RuntimeError)
//   loom::InternalError  loom.InternalError  (loom.Error, RuntimeError)
//   loom::IOError        loom.IOError        (loom.Error, OSError)
//   loom::CommError      loom.CommError      (loom.Error, RuntimeError)
//   loom::OnnxError      loom.OnnxError      (loom.Error, ValueError)
//   loom::Error (other)  loom.Error          (Exception)
//   std::bad_alloc       MemoryError
//   std::exception       RuntimeError
//
// Note [Every user mistake is a loom.Error]
// Mistakes caught by the bindings themselves are loom errors too, so that `except loom.Error`
// sees every one: an argument SWIG cannot convert is a loom.TypeError (loom.Error, TypeError; a
// Python-only kind: C++ types are checked by the compiler), None where a Tensor goes and an
// integer out of the C++ type's range are loom.ValueError (SWIG_Error, redefined below), and the
// typemaps raise loom.TypeError for sequences of the wrong things. Only Python's own call
// protocol (a wrong number of arguments) stays a plain TypeError.
//
// Functions with default arguments get one wrapper each (compactdefaultargs in loom.i), not an
// overload set: SWIG's dispatcher would take a loom.DTypeError (a TypeError) raised inside for
// an argument mismatch and append its "Wrong number or type of arguments" text.

%{
#include <cstring>
#include <new>
#include <stdexcept>
#include "core/error.h"

namespace loom_py {

// Thrown by C++ code that called back into Python (a step function) when Python raised: the
// Python error is already set and must reach the caller unchanged.
struct PythonError {};

enum ErrorKind { kError, kShape, kValue, kDType, kDevice, kGraph, kInternal, kIO, kType, kComm, kOnnx, kNumErrorKinds };
static PyObject* g_errors[kNumErrorKinds] = {};

static void SetError(ErrorKind k, const char* what) { PyErr_SetString(g_errors[k], what); }

// The exception being handled, as a Python error (call from inside a catch block).
static void SetPythonErrorFromCurrent() {
  try {
    throw;
  } catch (const PythonError&) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "[loom] a Python callback failed");
  } catch (const loom::ShapeError& e) { SetError(kShape, e.what());
  } catch (const loom::ValueError& e) { SetError(kValue, e.what());
  } catch (const loom::DTypeError& e) { SetError(kDType, e.what());
  } catch (const loom::DeviceError& e) { SetError(kDevice, e.what());
  } catch (const loom::GraphError& e) { SetError(kGraph, e.what());
  } catch (const loom::InternalError& e) { SetError(kInternal, e.what());
  } catch (const loom::IOError& e) { SetError(kIO, e.what());
  } catch (const loom::CommError& e) { SetError(kComm, e.what());
  } catch (const loom::OnnxError& e) { SetError(kOnnx, e.what());
  } catch (const loom::Error& e) { SetError(kError, e.what());
  } catch (const std::bad_alloc&) { PyErr_NoMemory();
  } catch (const std::exception& e) { PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) { PyErr_SetString(PyExc_RuntimeError, "[loom] unknown C++ exception");
  }
}

// Creates the exception classes in module dict `d` (from the module's init).
static int CreateErrors(PyObject* d) {
  struct Spec { ErrorKind kind; const char* name; PyObject* builtin; const char* doc; };
  g_errors[kError] = PyErr_NewExceptionWithDoc("loom.Error", "Base class of loom's errors.", PyExc_Exception, nullptr);
  if (!g_errors[kError] || PyDict_SetItemString(d, "Error", g_errors[kError]) < 0) return -1;
  const Spec specs[] = {
      {kShape, "ShapeError", PyExc_ValueError, "Wrong shapes or ranks."},
      {kValue, "ValueError", PyExc_ValueError, "A bad argument (out of range, unknown name...)."},
      {kDType, "DTypeError", PyExc_TypeError, "A wrong or unsupported dtype."},
      {kDevice, "DeviceError", PyExc_RuntimeError, "A wrong device, or a backend that is absent."},
      {kGraph, "GraphError", PyExc_RuntimeError, "Misuse of graph capture or replay."},
      {kInternal, "InternalError", PyExc_RuntimeError, "A loom bug: an internal invariant did not hold."},
      {kIO, "IOError", PyExc_OSError, "Files and bytes."},
      {kType, "TypeError", PyExc_TypeError, "An argument of the wrong type (a str where a Tensor goes...)."},
      {kComm, "CommError", PyExc_RuntimeError, "A collective failed: a peer rank died, raised or timed out."},
      {kOnnx, "OnnxError", PyExc_ValueError, "An ONNX model loom cannot write or read (unsupported op, opset or dtype; a malformed file)."},
  };
  for (const Spec& s : specs) {
    PyObject* bases = PyTuple_Pack(2, g_errors[kError], s.builtin);
    if (!bases) return -1;
    std::string full = std::string("loom.") + s.name;
    g_errors[s.kind] = PyErr_NewExceptionWithDoc(full.c_str(), s.doc, bases, nullptr);
    Py_DECREF(bases);
    if (!g_errors[s.kind] || PyDict_SetItemString(d, s.name, g_errors[s.kind]) < 0) return -1;
  }
  return 0;
}

// The Python class SWIG raises for an argument it could not convert (Note [Every user mistake
// is a loom.Error]).
static PyObject* ArgErrorType(int code) {
  switch (code) {
    case SWIG_TypeError: return g_errors[kType];
    case SWIG_ValueError:     // None for a Tensor: "invalid null reference" (SWIG 4.1)
#ifdef SWIG_NullReferenceError
    case SWIG_NullReferenceError:  // the same from SWIG 4.2 on (pyproject.toml's SWIG)
#endif
    case SWIG_OverflowError:  // 2**70 for an int64_t
      return g_errors[kValue];
    default: return SWIG_Python_ErrorType(code);
  }
}

// SWIG's message for an argument it could not convert, in loom's form: "in method 'relu',
// argument 1 of type 'loom::Tensor const &'" becomes "[relu] argument 1 must be of type Tensor";
// None there: "[relu] argument 1 is None, not a Tensor"; an int too large for the C++ type:
// "[softmax] argument 2 is out of the range of int64_t". Any other message is kept as it is.
static void SetArgError(int code, const char* msg) {
  const std::string m = msg;
  const std::string method = "method '", argument = "', argument ", type = " of type '";
  size_t a = m.find(method), b = m.find(argument), c = m.find(type);
  if (a == std::string::npos || b == std::string::npos || c == std::string::npos || m.back() != '\'') {
    PyErr_SetString(ArgErrorType(code), msg);
    return;
  }
  std::string op = m.substr(a + method.size(), b - a - method.size());
  std::string n = m.substr(b + argument.size(), c - b - argument.size());
  std::string t = m.substr(c + type.size(), m.size() - 1 - c - type.size());
  for (const char* noise : {"const ", " const", " &", " *", "loom::", "std::"})
    for (size_t p; (p = t.find(noise)) != std::string::npos;) t.erase(p, std::strlen(noise));
  std::string out = "[" + op + "] argument " + n;
  if (m.compare(0, 22, "invalid null reference") == 0) out += " is None, not a " + t;
  else if (code == SWIG_OverflowError) out += " is out of the range of " + t;
  else out += " must be of type " + t;
  PyErr_SetString(ArgErrorType(code), out.c_str());
}

// Note [The interpreter lock and file I/O]
// Reading or writing a file can take long (a large checkpoint, a slow or network disk, a data
// set); holding Python's interpreter lock meanwhile would stop every other Python thread. The
// io functions release it around the file I/O only, with this guard: the work that touches a
// device or Python objects (reading tensors to the host, making the loaded tensors, restoring
// into an optimizer) keeps the lock, as every other call does, so that releasing it never lets
// another thread into a device in the middle of an op (docs/design.md invariant 10). Nothing done
// without the lock calls back into Python or touches a Python object. The guard takes the lock
// back when it is destroyed, also while an exception unwinds, before errors.i's handler turns
// the exception into a Python error.
class WithoutGil {
 public:
  WithoutGil() : state_(PyEval_SaveThread()) {}
  ~WithoutGil() { PyEval_RestoreThread(state_); }
  WithoutGil(const WithoutGil&) = delete;
  WithoutGil& operator=(const WithoutGil&) = delete;

 private:
  PyThreadState* state_;
};

}  // namespace loom_py

#undef SWIG_Error
#define SWIG_Error(code, msg) loom_py::SetArgError(code, msg)
%}

%exception {
  try {
    $action
  } catch (...) {
    loom_py::SetPythonErrorFromCurrent();
    SWIG_fail;
  }
}

// Note [None is not self]
// SWIG converts None to a null pointer for a method's `self`, so a method reached through its
// class with None (loom.tensor.copy_from_numpy(None, a), core.Device.name(None)) called a member
// function on a null object: SIGSEGV. Every wrapped method checks its `self` first; None there
// is a loom.TypeError naming the method.
%typemap(check) SWIGTYPE *self %{
  if (!$1) {
    PyErr_SetString(loom_py::g_errors[loom_py::kType], "[$symname] called on None, not on a $*1_ltype");
    SWIG_fail;
  }
%}

%init %{
  if (loom_py::CreateErrors(d) < 0) return NULL;
%}

%pythoncode %{
Error = _core.Error
ShapeError = _core.ShapeError
ValueError = _core.ValueError
DTypeError = _core.DTypeError
DeviceError = _core.DeviceError
GraphError = _core.GraphError
InternalError = _core.InternalError
IOError = _core.IOError
TypeError = _core.TypeError
CommError = _core.CommError
OnnxError = _core.OnnxError
%}
