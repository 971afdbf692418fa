# The CUDA backend (included by the top-level CMakeLists.txt when LOOM_CUDA is on).
#   - enables the CUDA language for src/device/cuda/*.cu, Hopper (sm_90) by default:
#     -DCMAKE_CUDA_ARCHITECTURES="90;100" (or any list CMake accepts) builds for more;
#   - lists src/device/cuda/*.cc|*.cu in LOOM_CUDA_SOURCES (libloom_cuda.so's: CMakeLists.txt);
#   - defines loom_link_cuda(target): cudart, cuBLAS, cuBLASLt, cuDNN 9 (and NVRTC with
#     cudnn-frontend, below), LOOM_WITH_CUDA=1.
# NCCL is looked up too (for the communicators in src/io); nothing links it here.

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
  set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "GPU architectures to build the CUDA kernels for (default: Hopper)")
endif()
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_EXTENSIONS OFF)
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
find_package(CUDNN REQUIRED)  # cmake/FindCUDNN.cmake
find_package(NCCL QUIET)      # cmake/FindNCCL.cmake
set(LOOM_NCCL ${NCCL_FOUND})

# The directory's compile options (-Wall, -march=native, ...) are host-compiler flags: nvcc
# rejects them, so they apply to C/C++ as they are and reach nvcc's host pass through -Xcompiler.
get_directory_property(_loom_opts COMPILE_OPTIONS)
set(_loom_host_opts)
foreach(_opt IN LISTS _loom_opts)
  list(APPEND _loom_host_opts "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:${_opt}>")
endforeach()
if(_loom_opts)
  string(REPLACE ";" "," _loom_xcompiler "${_loom_opts}")
  list(APPEND _loom_host_opts "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${_loom_xcompiler}>")
endif()
set_directory_properties(PROPERTIES COMPILE_OPTIONS "${_loom_host_opts}")
# Device code uses std::numeric_limits and other constexpr host functions.
add_compile_options($<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)

file(GLOB LOOM_CUDA_SOURCES CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_SOURCE_DIR}/src/device/cuda/*.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/src/device/cuda/*.cu)
list(FILTER LOOM_CUDA_SOURCES EXCLUDE REGEX "/nccl\\.cc$")  # with NCCL and MPI only (CMakeLists.txt)

# cuDNN's graph API through NVIDIA's header-only cudnn-frontend, for cuDNN's fused attention
# (Note [Attention on cuDNN] in src/device/cuda/cudnn_attention.h). tools/setup.sh fetches the
# pinned copy into loom's download cache; -DLOOM_CUDNN_FRONTEND_DIR=DIR names another include
# folder. Without it the bf16 attention records stay refused on CUDA (float32 attention there).
set(LOOM_CUDNN_FRONTEND_VERSION 1.32.0)
find_path(LOOM_CUDNN_FRONTEND_INCLUDE cudnn_frontend.h
  HINTS ${LOOM_CUDNN_FRONTEND_DIR}
        "$ENV{LOOM_CACHE_DIR}/cudnn-frontend-${LOOM_CUDNN_FRONTEND_VERSION}/include"
        "$ENV{XDG_CACHE_HOME}/loom/cudnn-frontend-${LOOM_CUDNN_FRONTEND_VERSION}/include"
        "$ENV{HOME}/.cache/loom/cudnn-frontend-${LOOM_CUDNN_FRONTEND_VERSION}/include"
  NO_DEFAULT_PATH)
if(LOOM_CUDNN_FRONTEND_INCLUDE)
  # Only the one file that uses it sees it (its headers are large; -isystem: not our warnings).
  set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/src/device/cuda/cudnn_attention.cc PROPERTIES
    COMPILE_DEFINITIONS LOOM_WITH_CUDNN_FRONTEND=1
    COMPILE_OPTIONS "-isystem;${LOOM_CUDNN_FRONTEND_INCLUDE}")
  set(LOOM_CUDNN_FRONTEND ON)
else()
  set(LOOM_CUDNN_FRONTEND OFF)
endif()

function(loom_link_cuda target)
  target_link_libraries(${target} PRIVATE CUDA::cudart CUDA::cublas CUDA::cublasLt CUDNN::CUDNN)
  # cudnn-frontend's headers call NVRTC (for engines loom does not use, but the calls link).
  if(LOOM_CUDNN_FRONTEND)
    target_link_libraries(${target} PRIVATE CUDA::nvrtc)
  endif()
  target_compile_definitions(${target} PUBLIC LOOM_WITH_CUDA=1)
  set_target_properties(${target} PROPERTIES CUDA_RUNTIME_LIBRARY Shared)
endfunction()

message(STATUS "loom: CUDA ${CUDAToolkit_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}, "
               "cuDNN ${CUDNN_VERSION}, NCCL ${NCCL_VERSION}, cudnn-frontend ${LOOM_CUDNN_FRONTEND} "
               "(${LOOM_CUDNN_FRONTEND_INCLUDE})")
