#include "core/backend_library.h"

#include <dlfcn.h>
#include <unistd.h>

#include <map>
#include <mutex>

#include "core/error.h"

namespace loom {

namespace {
std::mutex& Mu() {
  static std::mutex mu;
  return mu;
}
// file -> its table, for the life of the process (handles are never closed).
std::map<std::string, const void*>& Opened() {
  static auto* opened = new std::map<std::string, const void*>();
  return *opened;
}
}  // namespace

std::string LibraryFolder() {
  Dl_info info;
  if (!dladdr(reinterpret_cast<const void*>(&LibraryFolder), &info) || !info.dli_fname) return "";
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

const void* OpenBackendLibrary(const std::string& file, const char* entry, const char* what) {
  std::lock_guard<std::mutex> lock(Mu());
  auto it = Opened().find(file);
  if (it != Opened().end()) return it->second;
  // Beside libloom.so when it is there, else wherever the loader's search path finds it.
  const std::string folder = LibraryFolder();
  std::string path = folder.empty() ? file : folder + "/" + file;
  if (access(path.c_str(), F_OK) != 0) path = file;
  // RTLD_GLOBAL: what it brings in (libmpi, whose plug-ins resolve its symbols) is seen by later libraries.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    const char* why = dlerror();
    throw DeviceError(detail::Cat("[", what, "] cannot load ", path, ": ", why ? why : "unknown reason"));
  }
  dlerror();
  const void* table = nullptr;
  if (auto fn = reinterpret_cast<const void* (*)()>(dlsym(handle, entry))) table = fn();
  LOOM_CHECK(table, DeviceError, "[", what, "] ", file, " has no ", entry, "(): not a loom backend library");
  Opened()[file] = table;
  return table;
}

bool BackendLibraryOpen(const std::string& file) {
  std::lock_guard<std::mutex> lock(Mu());
  return Opened().count(file) != 0;
}

}  // namespace loom
