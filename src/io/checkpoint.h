// Checkpoints: named tensors and named scalars, saved to one protobuf file and loaded back.
//
//   io::SaveCheckpoint("model.ckpt", {{"w0", w0}, {"b0", b0}}, {{"step", 100}});
//   io::Checkpoint ck = io::LoadCheckpoint("model.ckpt");      // tensors on the CPU
//   io::RestoreInto(ck, {{"w0", w0}, {"b0", b0}});               // into existing tensors
//
// Saving is atomic (Note [Atomic file writes] in core/file.h): a crash or an error mid-save never
// leaves a broken file at the destination. Loading checks the magic, the format version, the
// length and the checksum before it looks at a single tensor; every problem is an IOError that
// names the file and says what is wrong. The format is described in loom.proto.
//
// Host reads are needed to save, so saving is refused while a tensor's device is capturing a
// graph (docs/design.md invariant 4); so is restoring. Between replays both are fine: restoring is a
// feed, and the next replay reads the restored values.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "io/checkpoint_format.h"

namespace loom {

class Device;

namespace io {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct Checkpoint {
  std::string path;                    // where it was loaded from, for messages
  NamedTensors tensors;                // on the CPU, in file order
  std::map<std::string, double> meta;  // "step", "optimizer/lr", ...

  bool Has(const std::string& name) const;
  const Tensor& Get(const std::string& name) const;        // IOError naming the file if absent
  double Meta(const std::string& name) const;              // IOError naming the file if absent
  double Meta(const std::string& name, double dflt) const;
};

// Writes `tensors` (any device, any layout; names unique and non-empty) and `meta` to `path`.
void SaveCheckpoint(const std::string& path, const NamedTensors& tensors,
                    const std::map<std::string, double>& meta = {});

// Reads a checkpoint written by SaveCheckpoint; its tensors land on the CPU.
Checkpoint LoadCheckpoint(const std::string& path);
// The same from bytes already in memory; `source` is named in errors.
Checkpoint DecodeCheckpointBytes(const std::string& bytes, const std::string& source);

// The halves of SaveCheckpoint (encode: host reads of the tensors; write: the file alone) and of
// LoadCheckpoint (read: the file alone; DecodeCheckpointBytes), for a caller that keeps the file
// I/O apart from the device work: swig/io.i releases Python's interpreter lock around the file
// I/O only (Note [The interpreter lock and file I/O] there).
EncodedCheckpoint EncodeCheckpointOf(const NamedTensors& tensors, const std::map<std::string, double>& meta);
void WriteCheckpointFile(const std::string& path, const EncodedCheckpoint& enc);
std::string ReadCheckpointFile(const std::string& path);

// Note [Check everything, then copy]
// A restore either changes nothing or everything it was asked to: every restore path checks
// all of its targets first (parameters, states, optimizer slots, metadata) and reports every
// problem in one error, and only then writes. A caller restoring several things at once (a
// model and its optimizer: loom.model's load_states) runs every Check* first and every write
// after, so a bad optimizer section never leaves the weights already overwritten.

// Copies the checkpoint's values into existing tensors (any device, any layout). Every target
// must be in the checkpoint with the same shape and dtype; the checkpoint may hold more. All
// mismatches are reported together, by name, in one IOError, and then nothing is copied.
void RestoreInto(const Checkpoint& ckpt, const NamedTensors& targets);
// What RestoreInto would refuse, without copying anything: throws its error, or returns.
void CheckRestoreInto(const Checkpoint& ckpt, const NamedTensors& targets);

// The problems RestoreInto would report (Note [Check everything, then copy]), appended to
// `problems`; (*sources)[i] is target i's tensor in the file, or null. Mistakes in the call itself
// (an undefined target, a name given twice, a device that is capturing) throw at once.
void CollectRestoreProblems(const Checkpoint& ckpt, const NamedTensors& targets, std::vector<const Tensor*>* sources,
                            std::vector<std::string>* problems);
// One IOError listing every problem, after `head`.
[[noreturn]] void ThrowProblems(const std::string& head, const std::vector<std::string>& problems);

}  // namespace io
}  // namespace loom
