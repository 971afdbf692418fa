#include "io/data_dir.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <climits>
#include <cstdlib>

#include "core/error.h"

namespace loom {
namespace io {
namespace {

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The resolved path of the shared object holding this function, or "".
std::string LibraryPath() {
  Dl_info info;
  if (::dladdr(reinterpret_cast<void*>(&DefaultDataDir), &info) == 0 || !info.dli_fname) return "";
  char resolved[PATH_MAX];
  return ::realpath(info.dli_fname, resolved) ? std::string(resolved) : std::string(info.dli_fname);
}

}  // namespace

std::string DefaultDataDir() {
  const char* env = std::getenv("LOOM_DATA_DIR");
  if (env && *env) return env;
  const std::string lib = LibraryPath();
  for (std::string dir = lib; !dir.empty();) {
    const size_t slash = dir.rfind('/');
    if (slash == std::string::npos || slash == 0) break;
    dir.resize(slash);
    if (IsFile(dir + "/tools/setup.sh")) return dir + "/data";
  }
  throw IOError(detail::Cat("[data] no data folder: LOOM_DATA_DIR is not set and libloom (",
                            lib.empty() ? std::string("its path unknown") : lib,
                            ") is not inside a loom checkout; set LOOM_DATA_DIR to the folder tools/setup.sh "
                            "filled (<checkout>/data)"));
}

}  // namespace io
}  // namespace loom
