# Copies ONNX's schema (IN) to OUT under the protobuf package loom.onnx_pb instead of onnx; see the
# comment above its use in CMakeLists.txt for why. Fails if the file does not declare `package onnx;`.
file(READ "${IN}" schema)
string(FIND "${schema}" "\npackage onnx;" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${IN} does not declare `package onnx;`: is it ONNX's onnx.proto?")
endif()
string(REPLACE "\npackage onnx;" "\npackage loom.onnx_pb;" schema "${schema}")
file(WRITE "${OUT}.tmp" "${schema}")
file(RENAME "${OUT}.tmp" "${OUT}")
