// The text corpus and its tokenizer (src/io/text.h, io/tokenizer.h, io/data_dir.h): loom/io.py
// builds loom.io.TextCorpus and loom.io.Tokenizer on these names. Loading reads and checks files
// without the interpreter lock (LOOM_WITHOUT_GIL, io.i); every problem is a loom.IOError, a bad
// argument a loom.ValueError.
//
// Crossing as Python values: text to encode <- str (its UTF-8) or bytes; ids <- a sequence of
// ints; decoded text and a split's ids -> bytes (the ids as int32, which loom/io.py views with
// numpy); (inputs, targets) -> a tuple of two Tensors.

%{
#include "io/data_dir.h"
#include "io/text.h"

namespace loom_py {
// ids as int32 for Tokenizer::Decode, checked here against the vocabulary as Decode would (an int
// beyond int32 could not even be passed on).
static std::vector<int32_t> Int32Ids(PyObject* o, const loom::io::Tokenizer& tok) {
  std::vector<int64_t> wide;
  if (!ToInt64Vector(o, wide, "ids")) throw PythonError();
  std::vector<int32_t> ids(wide.size());
  for (size_t i = 0; i < wide.size(); ++i) {
    LOOM_CHECK(wide[i] >= 0 && wide[i] < tok.vocab_size(), ValueError, "[tokenizer] Decode: id ", wide[i],
               " at index ", i, " is out of range [0, ", tok.vocab_size(), ")");
    ids[i] = int32_t(wide[i]);
  }
  return ids;
}
}  // namespace loom_py
%}

%typemap(out) std::pair<loom::Tensor, loom::Tensor> {
  $result = Py_BuildValue("(NN)", loom_py::WrapTensor($1.first), loom_py::WrapTensor($1.second));
}

LOOM_WITHOUT_GIL(loom::io::Tokenizer::Load)
LOOM_WITHOUT_GIL(loom::io::TextCorpus::Load)

%ignore loom::io::Tokenizer::FromMerges;  // tests build tokenizers in C++; Python loads files
%ignore loom::io::Tokenizer::merges;
%ignore loom::io::Tokenizer::Pieces;
%ignore loom::io::Tokenizer::TokenBytes;  // token_bytes below: bytes, not str
%ignore loom::io::Tokenizer::Encode;      // encode below: str or bytes
%ignore loom::io::Tokenizer::Decode;      // decode_bytes below
%ignore loom::io::TextCorpus::FromTokens;
%ignore loom::io::TextCorpus::tokenizer;  // tokenizer below: a copy, which outlives the corpus
%ignore loom::io::TextCorpus::tokens;     // tokens_bytes below
%ignore loom::io::Name(TextSplit);
%ignore loom::io::kMaxMergesFileBytes;
%include "io/tokenizer.h"
%include "io/data_dir.h"
%include "io/text.h"

%extend loom::io::Tokenizer {
  // The ids of `text`: a str is encoded as UTF-8 first; bytes-like objects are taken as they are.
  PyObject* encode(PyObject* text) const {
    std::string bytes;
    if (PyUnicode_Check(text)) {
      if (!loom_py::Utf8(text, bytes)) throw loom_py::PythonError();
    } else {
      Py_buffer view;
      if (PyObject_GetBuffer(text, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Format(loom_py::g_errors[loom_py::kType], "[tokenizer] encode takes str or bytes, got %s",
                     Py_TYPE(text)->tp_name);
        throw loom_py::PythonError();
      }
      bytes.assign(static_cast<const char*>(view.buf), size_t(view.len));
      PyBuffer_Release(&view);
    }
    std::vector<int32_t> ids = $self->Encode(bytes);
    PyObject* list = PyList_New(Py_ssize_t(ids.size()));
    if (!list) throw loom_py::PythonError();
    for (size_t i = 0; i < ids.size(); ++i) PyList_SET_ITEM(list, Py_ssize_t(i), PyLong_FromLong(ids[i]));
    return list;
  }
  PyObject* decode_bytes(PyObject* ids) const {
    const std::string s = $self->Decode(loom_py::Int32Ids(ids, *$self));
    return PyBytes_FromStringAndSize(s.data(), Py_ssize_t(s.size()));
  }
  PyObject* token_bytes(int32_t id) const {
    const std::string& s = $self->TokenBytes(id);
    return PyBytes_FromStringAndSize(s.data(), Py_ssize_t(s.size()));
  }
}

%extend loom::io::TextCorpus {
  loom::io::Tokenizer tokenizer_copy() const { return $self->tokenizer(); }
  // The split's ids as int32 bytes (native order).
  PyObject* tokens_bytes(loom::io::TextSplit s) const {
    const std::vector<int32_t>& ids = $self->tokens(s);
    return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(ids.data()),
                                     Py_ssize_t(ids.size() * sizeof(int32_t)));
  }
}
