// Whole files in and out, with the guarantees every loom file needs: checkpoints and graph
// dumps (src/io), DOT and trace files (src/graph). Here, in core, so that both may use it
// (docs/design.md: graph does not include io).
//
// Note [Atomic file writes]
// A writer never leaves a broken file at `path`: it writes `path + ".tmp.<pid>"`, fsyncs it,
// renames it over `path` (atomic on POSIX file systems) and fsyncs the directory so that the
// rename itself survives a crash. On any error the temporary file is removed and an IOError
// names the file and the system's reason. A crash mid-save leaves at most a stray ".tmp.<pid>"
// file, never a truncated `path`.
//
// The writer keeps the permission bits of a file it replaces (a checkpoint made 0600 stays so);
// a new file gets 0644 less the umask. The reader reads regular files only: a FIFO, a socket or
// a directory is an IOError raised before the file is opened, so a read never blocks waiting
// for a writer.
//
// Note [Names are C strings]
// The system sees a path up to its first NUL byte, so "a\0b.ckpt" would silently be "a"; a
// name stored in a file and shown in messages and in Python (a checkpoint's tensor names) would
// be cut there too. Such names are refused with a ValueError, the NUL shown escaped (a message
// is a C string as well).
#pragma once

#include <cstdint>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

// Writes the concatenation of `pieces` to `path` atomically. `component` starts the error
// messages: "[checkpoint] cannot write 'x.ckpt': No such file or directory".
void WriteFileAtomic(const std::string& path, const std::vector<std::string_view>& pieces, const char* component);

// Reads a whole file; IOError naming `path` when it cannot, and before allocating anything when
// the file is larger than `max_bytes` (a reader's own limit: a sparse 64 GiB file costs no disk)
// or larger than the memory that can be had for it.
std::string ReadFile(const std::string& path, const char* component, size_t max_bytes = SIZE_MAX);

// ValueError unless `text` is free of NUL bytes: "[<component>] <what> 'a\0b' contains a NUL
// byte (at 1), ..." (Note [Names are C strings]). WriteFileAtomic and ReadFile check their paths.
void CheckNoNulByte(const std::string& text, const char* component, const char* what);

}  // namespace loom
