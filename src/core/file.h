// Whole files in and out, with the guarantees every loom file needs: checkpoints and graph
// dumps (src/io), DOT and trace files (src/graph). Here, in core, so that both may use it
// (DESIGN.md: graph does not include io).
//
// Note [Atomic file writes]
// A writer never leaves a broken file at `path`: it writes `path + ".tmp.<pid>"`, fsyncs it,
// renames it over `path` (atomic on POSIX file systems) and fsyncs the directory so that the
// rename itself survives a crash. On any error the temporary file is removed and an IOError
// names the file and the system's reason. A crash mid-save leaves at most a stray ".tmp.<pid>"
// file, never a truncated `path`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

// Writes the concatenation of `pieces` to `path` atomically. `component` starts the error
// messages: "[checkpoint] cannot write 'x.ckpt': No such file or directory".
void WriteFileAtomic(const std::string& path, const std::vector<std::string_view>& pieces, const char* component);

// Reads a whole file; IOError naming `path` when it cannot.
std::string ReadFile(const std::string& path, const char* component);

// The temporary name WriteFileAtomic uses for `path` in this process.
std::string TempPathFor(const std::string& path);

}  // namespace loom
