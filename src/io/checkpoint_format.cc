#include "io/checkpoint_format.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <set>

#include "core/error.h"
#include "core/file.h"
#include "io/checksum.h"
#include "io/loom.pb.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "loom checkpoints store little-endian bytes; a big-endian host needs byte swapping here"
#endif

namespace loom {
namespace io {

namespace {

constexpr size_t kMagicSize = sizeof(kCheckpointMagic);
constexpr size_t kMaxFileBytes = size_t(INT_MAX);  // protobuf's limit for one message

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Bytes needed for numel(shape) elements of `dtype` (Note [Checked sizes] in core/shape.h); a
// shape loom refuses is a corrupt file here (it must not make us allocate 2^70 bytes).
size_t CheckedBytes(const Shape& shape, DType dtype, const std::string& what) {
  try {
    return size_t(ByteSize(shape, SizeOf(dtype), "checkpoint"));
  } catch (const ShapeError& e) {
    throw IOError(detail::Cat(what, " has an impossibly large shape ", ToString(shape), " (", e.what(), ")"));
  }
}

// A minimal reader of protobuf's wire format, for the envelope only: it tells a truncated file
// ("the file ends inside field 3") from a corrupt one, and finds the payload without copying.
class WireReader {
 public:
  WireReader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  size_t pos() const { return pos_; }
  size_t left() const { return n_ - pos_; }
  bool done() const { return pos_ == n_; }
  // False when the bytes run out before the varint ends.
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= n_) return false;
      uint8_t b = p_[pos_++];
      *v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    overlong_ = true;
    return false;
  }
  bool Fixed64(uint64_t* v) {
    if (left() < 8) return false;
    std::memcpy(v, p_ + pos_, 8);
    pos_ += 8;
    return true;
  }
  bool Skip(size_t k) {
    if (left() < k) return false;
    pos_ += k;
    return true;
  }
  bool overlong() const { return overlong_; }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
  bool overlong_ = false;
};

}  // namespace

EncodedCheckpoint EncodeCheckpoint(RawCheckpoint raw) {
  CheckpointPayloadProto payload;
  std::set<std::string> names;
  for (RawTensor& t : raw.tensors) {
    LOOM_CHECK(!t.name.empty(), ValueError, "[checkpoint] a tensor has an empty name");
    CheckNoNulByte(t.name, "checkpoint", "the tensor name");
    LOOM_CHECK(names.insert(t.name).second, ValueError, "[checkpoint] two tensors are named '", t.name, "'");
    size_t want = CheckedBytes(t.shape, t.dtype, "[checkpoint] tensor '" + t.name + "'");
    LOOM_CHECK(t.data.size() == want, ValueError, "[checkpoint] tensor '", t.name, "' is ", Name(t.dtype), " ",
               ToString(t.shape), " (", want, " bytes) but has ", t.data.size(), " bytes of data");
    TensorProto* p = payload.add_tensors();
    p->set_name(t.name);
    for (int64_t d : t.shape) p->add_shape(d);
    p->set_dtype(Name(t.dtype));
    p->set_data(std::move(t.data));
    t.data.clear();
  }
  for (const auto& kv : raw.meta) {  // std::map: sorted, so files are reproducible
    CheckNoNulByte(kv.first, "checkpoint", "the metadata name");
    ScalarProto* s = payload.add_meta();
    s->set_name(kv.first);
    s->set_value(kv.second);
  }
  LOOM_CHECK(payload.ByteSizeLong() + 64 < kMaxFileBytes, IOError, "[checkpoint] ", payload.ByteSizeLong(),
             " bytes of tensors exceed the 2 GiB a protobuf checkpoint can hold");
  EncodedCheckpoint out;
  out.payload = payload.SerializeAsString();
  payload.Clear();

  // The envelope, serialized by protobuf without the payload's bytes, then the payload's field
  // header by hand: CheckpointProto's fields are written in field-number order, so head +
  // payload is exactly CheckpointProto{version, checksum, payload}.
  CheckpointProto envelope;
  envelope.set_format_version(kCheckpointFormatVersion);
  envelope.set_checksum(Fnv1a64(out.payload.data(), out.payload.size()));
  out.head.assign(kCheckpointMagic, kMagicSize);
  out.head += envelope.SerializeAsString();
  out.head += char((3 << 3) | 2);  // field 3, length-delimited
  for (uint64_t n = out.payload.size();; n >>= 7) {
    if (n < 0x80) {
      out.head += char(n);
      break;
    }
    out.head += char((n & 0x7f) | 0x80);
  }
  return out;
}

RawCheckpoint DecodeCheckpoint(const void* data, size_t size, const std::string& source) {
  const std::string where = "[checkpoint] '" + source + "': ";
  const uint8_t* bytes = static_cast<const uint8_t*>(data);
  LOOM_CHECK(size > 0, IOError, where, "truncated: the file is empty");
  LOOM_CHECK(std::memcmp(bytes, kCheckpointMagic, std::min(size, kMagicSize)) == 0, IOError, where,
             "bad magic: not a loom checkpoint (it does not start with \"LOOMCKPT\")");
  LOOM_CHECK(size > kMagicSize, IOError, where, "truncated: ", size, " bytes, only part of the header");
  LOOM_CHECK(size <= kMaxFileBytes, IOError, where, size, " bytes: larger than the 2 GiB a checkpoint can hold");

  WireReader r(bytes + kMagicSize, size - kMagicSize);
  bool has_version = false, has_checksum = false, has_payload = false;
  uint64_t version = 0, checksum = 0;
  size_t payload_at = 0, payload_size = 0;
  while (!r.done()) {
    size_t field_at = kMagicSize + r.pos();
    uint64_t tag;
    auto truncated_in = [&](uint64_t field) {
      return detail::Cat(where, "truncated: the file (", size, " bytes) ends inside field ", field, " at byte ",
                         field_at);
    };
    if (!r.Varint(&tag)) {
      LOOM_CHECK(!r.overlong(), IOError, where, "corrupt header at byte ", field_at);
      throw IOError(truncated_in(0));
    }
    uint64_t field = tag >> 3, wire = tag & 7, v = 0;
    LOOM_CHECK(field != 0, IOError, where, "corrupt header at byte ", field_at, " (field number 0)");
    switch (wire) {
      case 0:
        if (!r.Varint(&v)) {
          LOOM_CHECK(!r.overlong(), IOError, where, "corrupt header at byte ", field_at);
          throw IOError(truncated_in(field));
        }
        if (field == 1) {
          has_version = true;
          version = v;
          LOOM_CHECK(version == kCheckpointFormatVersion, IOError, where, "format version ", version,
                     ", this build reads ", kCheckpointFormatVersion);
        }
        break;
      case 1:
        if (!r.Fixed64(&v)) throw IOError(truncated_in(field));
        if (field == 2) {
          has_checksum = true;
          checksum = v;
        }
        break;
      case 2: {
        if (!r.Varint(&v)) {
          LOOM_CHECK(!r.overlong(), IOError, where, "corrupt header at byte ", field_at);
          throw IOError(truncated_in(field));
        }
        if (v > r.left()) {
          throw IOError(detail::Cat(where, "truncated: field ", field, " declares ", v, " bytes, the file has ",
                                    r.left(), " after byte ", kMagicSize + r.pos(), " (", size,
                                    " bytes in all, ", kMagicSize + r.pos() + v, " expected)"));
        }
        if (field == 3) {
          has_payload = true;
          payload_at = kMagicSize + r.pos();
          payload_size = size_t(v);
        }
        r.Skip(size_t(v));
        break;
      }
      case 5:
        if (!r.Skip(4)) throw IOError(truncated_in(field));
        break;
      default:
        throw IOError(detail::Cat(where, "corrupt header at byte ", field_at, " (field ", field, ", wire type ", wire,
                                  ")"));
    }
  }
  LOOM_CHECK(has_version, IOError, where, "corrupt header: no format version");
  LOOM_CHECK(has_payload, IOError, where, "truncated: the file (", size, " bytes) ends before the tensor data");
  LOOM_CHECK(has_checksum, IOError, where, "corrupt header: no checksum");
  uint64_t actual = Fnv1a64(bytes + payload_at, payload_size);
  LOOM_CHECK(actual == checksum, IOError, where, "checksum mismatch: the header says ", Hex(checksum),
             ", the ", payload_size, " bytes of data hash to ", Hex(actual), " (the file is corrupt)");
  return DecodeCheckpointPayload(bytes + payload_at, payload_size, source);
}

RawCheckpoint DecodeCheckpointPayload(const void* data, size_t size, const std::string& source) {
  const std::string where = "[checkpoint] '" + source + "': ";
  LOOM_CHECK(size <= kMaxFileBytes, IOError, where, "payload of ", size, " bytes exceeds 2 GiB");
  CheckpointPayloadProto payload;
  LOOM_CHECK(payload.ParseFromArray(data, int(size)), IOError, where,
             "corrupt: the tensor records do not parse (", size, " bytes)");
  RawCheckpoint raw;
  std::set<std::string> names;
  raw.tensors.reserve(size_t(payload.tensors_size()));
  for (TensorProto& p : *payload.mutable_tensors()) {
    const std::string what = where + "tensor '" + p.name() + "'";
    LOOM_CHECK(!p.name().empty(), IOError, where, "a tensor record has no name");
    // A name with a NUL byte could not have been written (Note [Names are C strings]).
    LOOM_CHECK(p.name().find('\0') == std::string::npos, IOError, where, "a tensor name holds a NUL byte");
    LOOM_CHECK(names.insert(p.name()).second, IOError, where, "two tensors are named '", p.name(), "'");
    RawTensor t;
    t.name = p.name();
    try {
      t.dtype = DTypeFromName(p.dtype());
    } catch (const DTypeError&) {
      throw IOError(what + " has unknown dtype '" + p.dtype() + "'");
    }
    t.shape.assign(p.shape().begin(), p.shape().end());
    size_t want = CheckedBytes(t.shape, t.dtype, what);
    LOOM_CHECK(p.data().size() == want, IOError, what, " is ", Name(t.dtype), " ", ToString(t.shape), " (", want,
               " bytes) but the file holds ", p.data().size(), " bytes for it");
    t.data = std::move(*p.mutable_data());
    raw.tensors.push_back(std::move(t));
  }
  for (const ScalarProto& s : payload.meta()) {
    LOOM_CHECK(s.name().find('\0') == std::string::npos, IOError, where, "a metadata name holds a NUL byte");
    LOOM_CHECK(raw.meta.emplace(s.name(), s.value()).second, IOError, where, "two metadata entries are named '",
               s.name(), "'");
  }
  return raw;
}

}  // namespace io
}  // namespace loom
