// io's whole-file reads and atomic writes are core/file.h's (Note [Atomic file writes]), which
// src/graph uses too; the io:: names stay for io's callers.
#pragma once

#include "core/file.h"

namespace loom {
namespace io {

using ::loom::ReadFile;
using ::loom::WriteFileAtomic;

}  // namespace io
}  // namespace loom
