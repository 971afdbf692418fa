// Errors are exceptions (docs/design.md invariant 9).
//
// Two checks, both throw:
//   LOOM_CHECK(cond, Kind, msg...)  a caller mistake  -> a typed user error (ShapeError, ...)
//   LOOM_ASSERT(cond, msg...)       a broken invariant -> InternalError (a loom bug)
// Messages start with the op or component in brackets: "[matmul] lhs is (2, 3), rhs is (4, 5)".
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace loom {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// Wrong shapes or ranks.                      Python: ValueError
class ShapeError : public Error { public: using Error::Error; };
// Wrong or unsupported dtype.                 Python: TypeError
class DTypeError : public Error { public: using Error::Error; };
// Wrong device, or a backend that is absent.  Python: RuntimeError
class DeviceError : public Error { public: using Error::Error; };
// Misuse of capture / replay.                 Python: RuntimeError
class GraphError : public Error { public: using Error::Error; };
// Files and bytes.                            Python: OSError
class IOError : public Error { public: using Error::Error; };
// Any other bad argument (out of range...).   Python: ValueError
class ValueError : public Error { public: using Error::Error; };
// A collective failed: a peer rank died, raised, timed out, or captured another graph.
//                                             Python: RuntimeError
class CommError : public Error { public: using Error::Error; };
// An ONNX model loom cannot write or read: an op, opset or dtype without a mapping, or a malformed
// file. The message names the node.            Python: ValueError
class OnnxError : public Error { public: using Error::Error; };
// A loom bug: an invariant did not hold.      Python: RuntimeError
class InternalError : public Error { public: using Error::Error; };

namespace detail {
template <typename... Args>
std::string Cat(const Args&... args) {
  std::ostringstream s;
  (s << ... << args);
  return s.str();
}
}  // namespace detail

}  // namespace loom

#define LOOM_CHECK(cond, Kind, ...)                                \
  do {                                                             \
    if (!(cond)) throw ::loom::Kind(::loom::detail::Cat(__VA_ARGS__)); \
  } while (0)

#define LOOM_ASSERT(cond, ...)                                                          \
  do {                                                                                  \
    if (!(cond))                                                                        \
      throw ::loom::InternalError(::loom::detail::Cat("internal error at ", __FILE__, ":", \
                                                      __LINE__, ": (" #cond ") ", ##__VA_ARGS__)); \
  } while (0)
