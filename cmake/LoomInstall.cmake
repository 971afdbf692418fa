# The C++ package (included by the top-level CMakeLists.txt after the library is defined).
# `cmake --install <build> [--prefix P]` installs, under P:
#   lib/libloom.so                       the library; its RUNPATH keeps the folders of what it links
#                                        from outside the system's (the CUDA toolkit's, say)
#   include/loom/{core,graph,io,nn}/*.h  the public headers, their includes of each other written
#                                        <loom/...> (cmake/StageHeaders.cmake)
#   include/loom/loom.h, version.h       the umbrella header (the headers a training program
#                                        uses) and LOOM_VERSION_*
#   lib/cmake/loom/                      loomConfig.cmake, loomConfigVersion.cmake, loomTargets*.cmake:
#                                        find_package(loom) gives the target loom::loom
#   lib/pkgconfig/loom.pc                pkg-config --cflags --libs loom
# A program links loom::loom and gets the include folder, C++17 and Threads; libloom's own
# dependencies (OpenBLAS, oneDNN, protobuf, zlib, MPI, CUDA) stay private to it: no public header
# includes theirs. examples/consumer is such a program, built against an install by the package
# stage of tools/test.sh. Components: runtime (the library) and development (the rest).
#
# The public headers are src/{core,graph,io,nn}/**.h, the folders the layering keeps off the
# backends (docs/design.md), less the ONNX importer's internals that include ONNX's generated
# protobuf classes, which are libloom's private build products. The repository's own code keeps
# including "core/tensor.h" from src/; installed copies are rewritten at build time into
# <build>/include/loom (the target loom_headers), and a public header that includes a private
# one fails that step.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(LOOM_PRIVATE_HEADERS io/onnx/tensor_proto.h io/onnx/export_emit.h)
file(GLOB_RECURSE LOOM_PUBLIC_HEADERS CONFIGURE_DEPENDS RELATIVE ${CMAKE_CURRENT_SOURCE_DIR}/src
  ${CMAKE_CURRENT_SOURCE_DIR}/src/core/*.h ${CMAKE_CURRENT_SOURCE_DIR}/src/graph/*.h
  ${CMAKE_CURRENT_SOURCE_DIR}/src/io/*.h ${CMAKE_CURRENT_SOURCE_DIR}/src/nn/*.h)
list(REMOVE_ITEM LOOM_PUBLIC_HEADERS ${LOOM_PRIVATE_HEADERS})
list(SORT LOOM_PUBLIC_HEADERS)

set(LOOM_STAGED_INCLUDE ${CMAKE_CURRENT_BINARY_DIR}/include)
set(_list ${CMAKE_CURRENT_BINARY_DIR}/loom_public_headers.txt)
string(REPLACE ";" "\n" _lines "${LOOM_PUBLIC_HEADERS}")
file(CONFIGURE OUTPUT ${_list} CONTENT "${_lines}\n" @ONLY)  # rewritten only when the list changes
list(TRANSFORM LOOM_PUBLIC_HEADERS PREPEND ${CMAKE_CURRENT_SOURCE_DIR}/src/ OUTPUT_VARIABLE _sources)
add_custom_command(
  OUTPUT ${LOOM_STAGED_INCLUDE}/loom/.staged
  COMMAND ${CMAKE_COMMAND} -DSRC=${CMAKE_CURRENT_SOURCE_DIR}/src -DOUT=${LOOM_STAGED_INCLUDE}/loom -DLIST=${_list}
          -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/StageHeaders.cmake
  COMMAND ${CMAKE_COMMAND} -E touch ${LOOM_STAGED_INCLUDE}/loom/.staged
  DEPENDS ${_sources} ${_list} ${CMAKE_CURRENT_SOURCE_DIR}/cmake/StageHeaders.cmake
  COMMENT "loom: the public headers as <loom/...>"
  VERBATIM)
add_custom_target(loom_headers ALL DEPENDS ${LOOM_STAGED_INCLUDE}/loom/.staged)

# The umbrella header: what a training program includes (tensors and ops, devices and graphs,
# layers, models, optimizers, data, checkpoints, the trainer).
set(LOOM_UMBRELLA core/tensor.h core/ops.h core/ops_cnn.h core/ops_transformer.h core/device.h core/autograd.h
    core/error.h graph/graph.h graph/step.h io/checkpoint.h io/dataset.h io/user_dataset.h io/text.h nn/layer.h
    nn/cnn_layers.h nn/transformer.h nn/models.h nn/model.h nn/optimizer.h nn/schedule.h nn/clip.h nn/evaluate.h
    nn/trainer.h)
set(_umbrella "// loom's umbrella header (cmake/LoomInstall.cmake): #include <loom/loom.h>\n#pragma once\n\n")
string(APPEND _umbrella "#include \"loom/version.h\"\n")
foreach(h IN LISTS LOOM_UMBRELLA)
  string(APPEND _umbrella "#include \"loom/${h}\"\n")
endforeach()
file(CONFIGURE OUTPUT ${LOOM_STAGED_INCLUDE}/loom/loom.h CONTENT "${_umbrella}" @ONLY)
file(CONFIGURE OUTPUT ${LOOM_STAGED_INCLUDE}/loom/version.h CONTENT
"// The version of the installed loom (cmake/LoomInstall.cmake).
#pragma once

#define LOOM_VERSION_MAJOR ${PROJECT_VERSION_MAJOR}
#define LOOM_VERSION_MINOR ${PROJECT_VERSION_MINOR}
#define LOOM_VERSION \"${PROJECT_VERSION}\"
" @ONLY)

# Usage requirements of the installed target; in this tree the include folder is src/ (above).
target_include_directories(loom INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(loom PUBLIC cxx_std_17)
set_target_properties(loom PROPERTIES EXPORT_NAME loom INSTALL_RPATH_USE_LINK_PATH ON)
add_library(loom::loom ALIAS loom)

install(TARGETS loom EXPORT loomTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
# Note [Backends loaded on first use]: libloom.so opens these beside itself; nothing links them.
if(LOOM_BACKEND_LIBRARIES)
  set_target_properties(${LOOM_BACKEND_LIBRARIES} PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS ${LOOM_BACKEND_LIBRARIES} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
endif()
install(DIRECTORY ${LOOM_STAGED_INCLUDE}/loom DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT development
  FILES_MATCHING PATTERN "*.h")
set(_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/loom)
install(EXPORT loomTargets NAMESPACE loom:: DESTINATION ${_cmake_dir} COMPONENT development)
configure_package_config_file(cmake/loomConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/loomConfig.cmake
  INSTALL_DESTINATION ${_cmake_dir})
# 0.x: a minor version may change the API and the ABI, so only the same minor version matches.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/loomConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/loomConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/loomConfigVersion.cmake
  DESTINATION ${_cmake_dir} COMPONENT development)
configure_file(cmake/loom.pc.in ${CMAKE_CURRENT_BINARY_DIR}/loom.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/loom.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT development)
