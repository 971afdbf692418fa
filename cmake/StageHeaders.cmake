# Stages loom's public headers for installation (cmake -P, from cmake/LoomInstall.cmake):
#   -DSRC=<repo>/src -DOUT=<build>/include/loom -DLIST=<file of header paths relative to src/>
# Each header is copied to OUT/<path> with its includes of loom's own headers rewritten from
# "core/tensor.h" (the repository's form, relative to src/) to "loom/core/tensor.h", so that an
# installed header finds its neighbours under <prefix>/include alone and a user's own core/ or nn/
# folders cannot shadow them. An include of a header that is not in the list (a backend's, or
# generated code's) fails the build here, naming both files, rather than the user's build later.
# A staged header whose source is gone is removed.
file(STRINGS "${LIST}" headers)
set(public "")
foreach(h IN LISTS headers)
  set(public "${public}|${h}|")
endforeach()
foreach(h IN LISTS headers)
  file(READ "${SRC}/${h}" text)
  string(REGEX MATCHALL "#[ \t]*include[ \t]*\"[^\"]+\"" includes "${text}")
  foreach(inc IN LISTS includes)
    string(REGEX REPLACE "^#[ \t]*include[ \t]*\"([^\"]+)\"$" "\\1" path "${inc}")
    string(FIND "${public}" "|${path}|" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "loom: the public header src/${h} includes \"${path}\", which is not installed "
                          "(cmake/LoomInstall.cmake lists the public headers)")
    endif()
  endforeach()
  string(REGEX REPLACE "(#[ \t]*include[ \t]*\")((core|graph|io|nn)/)" "\\1loom/\\2" text "${text}")
  set(old "")
  if(EXISTS "${OUT}/${h}")
    file(READ "${OUT}/${h}" old)
  endif()
  if(NOT old STREQUAL text)  # unchanged files keep their time: an install copies only what changed
    file(WRITE "${OUT}/${h}" "${text}")
  endif()
endforeach()
file(GLOB_RECURSE staged RELATIVE "${OUT}" "${OUT}/core/*" "${OUT}/graph/*" "${OUT}/io/*" "${OUT}/nn/*")
foreach(h IN LISTS staged)
  string(FIND "${public}" "|${h}|" at)
  if(at EQUAL -1)
    file(REMOVE "${OUT}/${h}")
  endif()
endforeach()
