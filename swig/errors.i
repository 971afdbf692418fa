// C++ exceptions -> Python exceptions (DESIGN.md invariant 9).
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
//   loom::Error (other)  loom.Error          (Exception)
//   std::bad_alloc       MemoryError
//   std::exception       RuntimeError

%{
#include <new>
#include <stdexcept>
#include "core/error.h"

namespace loom_py {

// Thrown by C++ code that called back into Python (a step function) when Python raised: the
// Python error is already set and must reach the caller unchanged.
struct PythonError {};

enum ErrorKind { kError, kShape, kValue, kDType, kDevice, kGraph, kInternal, kIO, kNumErrorKinds };
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

}  // namespace loom_py
%}

%exception {
  try {
    $action
  } catch (...) {
    loom_py::SetPythonErrorFromCurrent();
    SWIG_fail;
  }
}

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
%}
