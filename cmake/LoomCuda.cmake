# The CUDA backend (included by the top-level CMakeLists.txt when LOOM_CUDA is on).
#   - enables the CUDA language for src/device/cuda/*.cu, Hopper (sm_90) by default:
#     -DCMAKE_CUDA_ARCHITECTURES="90;100" (or any list CMake accepts) builds for more;
#   - lists src/device/cuda/*.cc|*.cu in LOOM_CUDA_SOURCES (libloom_cuda.so's: CMakeLists.txt);
#   - defines loom_link_cuda(target): cudart, cuBLAS, cuBLASLt, cuDNN 9, LOOM_WITH_CUDA=1.
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

function(loom_link_cuda target)
  target_link_libraries(${target} PRIVATE CUDA::cudart CUDA::cublas CUDA::cublasLt CUDNN::CUDNN)
  target_compile_definitions(${target} PUBLIC LOOM_WITH_CUDA=1)
  set_target_properties(${target} PROPERTIES CUDA_RUNTIME_LIBRARY Shared)
endfunction()

message(STATUS "loom: CUDA ${CUDAToolkit_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}, "
               "cuDNN ${CUDNN_VERSION}, NCCL ${NCCL_VERSION}")
