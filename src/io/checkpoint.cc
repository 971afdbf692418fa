#include "io/checkpoint.h"

#include <cmath>
#include <set>

#include "core/ops.h"
#include "core/device.h"
#include "io/checkpoint_format.h"
#include "io/file.h"

namespace loom {
namespace io {

namespace {

// The tensor's bytes, contiguous, on the host.
std::string HostBytes(const Tensor& t, const std::string& name) {
  LOOM_CHECK(t.defined(), ValueError, "[checkpoint] tensor '", name, "' is undefined");
  CheckHostReadAllowed(t, "checkpoint");
  NoGradGuard no_grad;
  Tensor c = t.is_contiguous() ? t : t.Detach().Contiguous();
  std::string out(c.nbytes(), '\0');
  if (!out.empty()) {
    c.device()->Synchronize();
    c.device()->MemcpyToHost(&out[0], c.raw_data(), out.size());
  }
  return out;
}

// Writes host bytes into an existing tensor of any layout.
void WriteHostBytes(const Tensor& dst, const std::string& bytes) {
  if (dst.is_contiguous()) {
    Tensor d = dst;
    d.CopyFromHost(bytes.data(), bytes.size());
    return;
  }
  NoGradGuard no_grad;
  Tensor staging(dst.shape(), dst.dtype(), dst.device_ptr());
  staging.CopyFromHost(bytes.data(), bytes.size());
  ops::CopyInto(dst.Detach(), staging);
}

}  // namespace

bool Checkpoint::Has(const std::string& name) const {
  for (const auto& kv : tensors)
    if (kv.first == name) return true;
  return false;
}

const Tensor& Checkpoint::Get(const std::string& name) const {
  for (const auto& kv : tensors)
    if (kv.first == name) return kv.second;
  throw IOError("[checkpoint] '" + path + "' holds no tensor named '" + name + "'");
}

double Checkpoint::Meta(const std::string& name) const {
  auto it = meta.find(name);
  LOOM_CHECK(it != meta.end(), IOError, "[checkpoint] '", path, "' holds no metadata named '", name, "'");
  return it->second;
}

double Checkpoint::Meta(const std::string& name, double dflt) const {
  auto it = meta.find(name);
  return it == meta.end() ? dflt : it->second;
}

EncodedCheckpoint EncodeCheckpointOf(const NamedTensors& tensors, const std::map<std::string, double>& meta) {
  RawCheckpoint raw;
  raw.meta = meta;
  raw.tensors.reserve(tensors.size());
  for (const auto& kv : tensors) {
    RawTensor r;
    r.name = kv.first;
    r.dtype = kv.second.dtype();
    r.shape = kv.second.shape();
    r.data = HostBytes(kv.second, kv.first);
    raw.tensors.push_back(std::move(r));
  }
  return EncodeCheckpoint(std::move(raw));
}

void WriteCheckpointFile(const std::string& path, const EncodedCheckpoint& enc) {
  WriteFileAtomic(path, {enc.head, enc.payload}, "checkpoint");
}

std::string ReadCheckpointFile(const std::string& path) { return ReadFile(path, "checkpoint"); }

void SaveCheckpoint(const std::string& path, const NamedTensors& tensors, const std::map<std::string, double>& meta) {
  CheckNoNulByte(path, "checkpoint", "the path");  // before the host reads, not only at the write
  WriteCheckpointFile(path, EncodeCheckpointOf(tensors, meta));
}

Checkpoint DecodeCheckpointBytes(const std::string& bytes, const std::string& source) {
  RawCheckpoint raw = DecodeCheckpoint(bytes.data(), bytes.size(), source);
  Checkpoint ck;
  ck.path = source;
  ck.meta = std::move(raw.meta);
  auto cpu = CpuDevice();
  for (RawTensor& r : raw.tensors) {
    Tensor t(r.shape, r.dtype, cpu);
    t.CopyFromHost(r.data.data(), r.data.size());
    std::string().swap(r.data);  // give the host copy back as we go
    ck.tensors.emplace_back(r.name, t);
  }
  return ck;
}

Checkpoint LoadCheckpoint(const std::string& path) { return DecodeCheckpointBytes(ReadCheckpointFile(path), path); }

// Note [Check everything, then copy] in checkpoint.h. Appends to `problems` every reason the
// checkpoint cannot be restored into `targets` and sets (*sources)[i] to target i's source
// (null when absent). Mistakes in the call itself (an undefined target, a name given twice, a
// device that is capturing) throw at once.
void CollectRestoreProblems(const Checkpoint& ckpt, const NamedTensors& targets, std::vector<const Tensor*>* sources,
                            std::vector<std::string>* problems) {
  std::set<std::string> seen;
  sources->clear();
  for (const auto& kv : targets) {
    const std::string& name = kv.first;
    const Tensor& dst = kv.second;
    LOOM_CHECK(dst.defined(), ValueError, "[checkpoint] restore target '", name, "' is undefined");
    LOOM_CHECK(seen.insert(name).second, ValueError, "[checkpoint] restore target '", name, "' is named twice");
    LOOM_CHECK(!dst.device()->buffering(), GraphError, "[checkpoint] cannot restore '", name, "' into ",
               dst.Describe(), " while ", dst.device()->name(), " is capturing ", dst.device()->capture_name(),
               ": restore between replays");
    const Tensor* src = nullptr;
    for (const auto& c : ckpt.tensors)
      if (c.first == name) src = &c.second;
    sources->push_back(src);
    if (!src) {
      problems->push_back("'" + name + "': not in the file");
      continue;
    }
    if (src->shape() != dst.shape())
      problems->push_back("'" + name + "': shape " + ToString(src->shape()) + " in the file, " +
                          ToString(dst.shape()) + " in the target");
    if (src->dtype() != dst.dtype())
      problems->push_back("'" + name + "': dtype " + Name(src->dtype()) + " in the file, " + Name(dst.dtype()) +
                          " in the target");
  }
}

[[noreturn]] void ThrowProblems(const std::string& head, const std::vector<std::string>& problems) {
  std::string msg = detail::Cat(head, ", nothing was restored. ", problems.size(), " mismatch(es): ");
  for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
  throw IOError(msg);
}

namespace {

std::string DoesNotFit(const Checkpoint& ckpt, size_t n) {
  return detail::Cat("[checkpoint] '", ckpt.path, "' does not fit the ", n, " target tensor(s)");
}

}  // namespace

void CheckRestoreInto(const Checkpoint& ckpt, const NamedTensors& targets) {
  std::vector<const Tensor*> sources;
  std::vector<std::string> problems;
  CollectRestoreProblems(ckpt, targets, &sources, &problems);
  if (!problems.empty()) ThrowProblems(DoesNotFit(ckpt, targets.size()), problems);
}

void RestoreInto(const Checkpoint& ckpt, const NamedTensors& targets) {
  std::vector<const Tensor*> sources;
  std::vector<std::string> problems;
  CollectRestoreProblems(ckpt, targets, &sources, &problems);
  if (!problems.empty()) ThrowProblems(DoesNotFit(ckpt, targets.size()), problems);
  for (size_t i = 0; i < targets.size(); ++i)
    WriteHostBytes(targets[i].second, HostBytes(*sources[i], targets[i].first));
}

}  // namespace io
}  // namespace loom
