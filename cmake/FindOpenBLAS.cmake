# Finds OpenBLAS by its own name. Debian's libblas.so.3 may resolve to the reference BLAS, which
# is 13-18x slower, so we never link the generic name.
find_path(OPENBLAS_INCLUDE_DIR cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/aarch64-linux-gnu/openblas-pthread
        /usr/include/openblas /usr/local/include/openblas
  NO_DEFAULT_PATH)
find_path(OPENBLAS_INCLUDE_DIR cblas.h)
find_library(OPENBLAS_LIBRARY NAMES openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-pthread /usr/lib/aarch64-linux-gnu/openblas-pthread
  NO_DEFAULT_PATH)
find_library(OPENBLAS_LIBRARY NAMES openblas)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OpenBLAS REQUIRED_VARS OPENBLAS_LIBRARY OPENBLAS_INCLUDE_DIR)
if(OpenBLAS_FOUND AND NOT TARGET OpenBLAS::OpenBLAS)
  add_library(OpenBLAS::OpenBLAS UNKNOWN IMPORTED)
  set_target_properties(OpenBLAS::OpenBLAS PROPERTIES
    IMPORTED_LOCATION ${OPENBLAS_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${OPENBLAS_INCLUDE_DIR})
endif()
