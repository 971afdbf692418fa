// Running loom's programs (tools/, examples/) from tests, as users run them: found next to the
// test executable (both are built into the build folder's root), output and exit code captured.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>

namespace loom {
namespace test {

// The path of program `name` beside this test executable.
inline std::string ProgramPath(const std::string& name) {
  std::array<char, 4096> buf{};
  ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return name;
  std::string self(buf.data(), size_t(n));
  return self.substr(0, self.rfind('/') + 1) + name;
}

inline bool ProgramBuilt(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }

struct ProgramRun {
  int exit_code = -1;  // -1: it did not exit normally
  std::string out;     // stdout and stderr
};

inline ProgramRun RunProgram(const std::string& path, const std::string& args) {
  ProgramRun r;
  std::string cmd = path + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace test
}  // namespace loom
