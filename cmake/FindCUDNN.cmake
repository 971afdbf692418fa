# Finds cuDNN 9 (header cudnn.h, library libcudnn) next to the CUDA toolkit or in the system
# paths, and defines the imported target CUDNN::CUDNN. CUDNN_ROOT (or the environment's
# CUDNN_ROOT / CUDNN_PATH) points at a separate installation.
#   CUDNN_FOUND, CUDNN_INCLUDE_DIR, CUDNN_LIBRARY, CUDNN_VERSION
set(_cudnn_hints ${CUDNN_ROOT} $ENV{CUDNN_ROOT} $ENV{CUDNN_PATH} ${CUDAToolkit_LIBRARY_ROOT}
                 ${CUDAToolkit_TARGET_DIR} /usr/local/cuda)
find_path(CUDNN_INCLUDE_DIR cudnn.h
  HINTS ${_cudnn_hints} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include include/x86_64-linux-gnu include/aarch64-linux-gnu)
find_library(CUDNN_LIBRARY NAMES cudnn
  HINTS ${_cudnn_hints} ${CUDAToolkit_LIBRARY_DIR}
  PATH_SUFFIXES lib64 lib lib/x64 lib/x86_64-linux-gnu lib/aarch64-linux-gnu)

if(CUDNN_INCLUDE_DIR)
  set(_cudnn_version_header ${CUDNN_INCLUDE_DIR}/cudnn_version.h)
  if(NOT EXISTS ${_cudnn_version_header})
    set(_cudnn_version_header ${CUDNN_INCLUDE_DIR}/cudnn.h)
  endif()
  file(STRINGS ${_cudnn_version_header} _cudnn_lines REGEX "#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) +[0-9]+")
  foreach(_part MAJOR MINOR PATCHLEVEL)
    string(REGEX MATCH "CUDNN_${_part} +([0-9]+)" _m "${_cudnn_lines}")
    set(_cudnn_${_part} ${CMAKE_MATCH_1})
  endforeach()
  set(CUDNN_VERSION "${_cudnn_MAJOR}.${_cudnn_MINOR}.${_cudnn_PATCHLEVEL}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR VERSION_VAR CUDNN_VERSION)
if(CUDNN_FOUND AND _cudnn_MAJOR AND _cudnn_MAJOR LESS 9)
  message(FATAL_ERROR "loom needs cuDNN 9 or later; found ${CUDNN_VERSION} at ${CUDNN_INCLUDE_DIR}")
endif()
if(CUDNN_FOUND AND NOT TARGET CUDNN::CUDNN)
  add_library(CUDNN::CUDNN UNKNOWN IMPORTED)
  set_target_properties(CUDNN::CUDNN PROPERTIES
    IMPORTED_LOCATION ${CUDNN_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${CUDNN_INCLUDE_DIR})
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
