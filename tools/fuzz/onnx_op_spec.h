// The input format of fuzz_onnx_ops: one ONNX node (or a chain of the same node) described by
// its op type, attributes and the shapes, dtypes and kinds of its inputs, so that libFuzzer's
// mutations land on what the importer's handlers check (attribute values, ranks, dimensions,
// dtypes) rather than on protobuf framing. Decode never fails: a short input reads as zeros.
// make_seeds writes specs with Encode; fuzz_onnx_ops builds a ModelProto from the decoded one.
// Header-only and free of loom and protobuf, so that both can include it.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace loom {
namespace fuzz {

struct AttrSpec {
  enum Kind : uint8_t { kInt, kFloat, kInts, kString, kNumKinds };
  std::string name;  // "" : the op's n-th known attribute, n = pick (the fuzz target resolves it)
  uint8_t pick = 0;
  Kind kind = kInt;
  int64_t i = 0;
  double f = 0;
  std::vector<int64_t> ints;
  std::string s;
};

struct InputSpec {
  enum Dtype : uint8_t { kFloat32, kFloat64, kInt64, kInt32, kBool, kUInt8, kNumDtypes };
  bool omitted = false;      // "" in the node's inputs: an optional input left out
  bool initializer = false;  // known on the host at import; else a graph input fed at run time
  Dtype dtype = kFloat32;
  std::vector<int64_t> dims;  // as given; the target keeps the element count small
  uint8_t value_seed = 0;     // the values are a pattern of this seed
  // These values, cycled (when not empty); for a float dtype each is a double's bit pattern.
  std::vector<int64_t> values;
};

struct OpSpec {
  std::string op_type;  // not a registered op: the fuzz target picks one by a hash of it
  uint8_t opset = 13;
  std::vector<AttrSpec> attrs;
  std::vector<InputSpec> inputs;
  uint8_t outputs = 1;
  uint16_t chain = 1;  // nodes in a chain, each one's output 0 feeding the next one's input 0
  bool backward = true;  // differentiate the sum of the first float output
};

inline int64_t Bits(double v) {
  int64_t b;
  std::memcpy(&b, &v, 8);
  return b;
}
inline double FromBits(int64_t b) {
  double v;
  std::memcpy(&v, &b, 8);
  return v;
}

// Limits the decoder applies (and the encoder respects): the fuzz target's runtime per input.
constexpr size_t kMaxAttrs = 8, kMaxInputs = 6, kMaxInts = 8, kMaxRank = 5, kMaxValues = 64;
constexpr uint16_t kMaxChain = 20000;
constexpr uint8_t kLongChain = 0xff;  // the chain byte that announces a 16-bit length

class SpecWriter {
 public:
  void U8(uint8_t v) { out_.push_back(char(v)); }
  void U16(uint16_t v) { Raw(&v, 2); }
  void I64(int64_t v) { Raw(&v, 8); }
  void F64(double v) { Raw(&v, 8); }
  void Str(const std::string& s) {
    U8(uint8_t(s.size() < 255 ? s.size() : 255));
    out_.append(s, 0, s.size() < 255 ? s.size() : 255);
  }
  const std::string& bytes() const { return out_; }

 private:
  void Raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string out_;
};

class SpecReader {
 public:
  SpecReader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  uint8_t U8() { return p_ < end_ ? *p_++ : 0; }
  uint16_t U16() { uint16_t v = 0; Raw(&v, 2); return v; }
  int64_t I64() { int64_t v = 0; Raw(&v, 8); return v; }
  double F64() { double v = 0; Raw(&v, 8); return v; }
  std::string Str() {
    size_t n = U8();
    if (n > size_t(end_ - p_)) n = size_t(end_ - p_);
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }

 private:
  void Raw(void* v, size_t n) {
    const size_t k = n < size_t(end_ - p_) ? n : size_t(end_ - p_);
    std::memcpy(v, p_, k);
    p_ += k;
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

inline std::string Encode(const OpSpec& s) {
  SpecWriter w;
  w.Str(s.op_type);
  w.U8(s.opset);
  w.U8(uint8_t(s.attrs.size()));
  for (const AttrSpec& a : s.attrs) {
    w.Str(a.name);
    w.U8(a.pick);
    w.U8(a.kind);
    switch (a.kind) {
      case AttrSpec::kInt: w.I64(a.i); break;
      case AttrSpec::kFloat: w.F64(a.f); break;
      case AttrSpec::kInts:
        w.U8(uint8_t(a.ints.size()));
        for (int64_t v : a.ints) w.I64(v);
        break;
      default: w.Str(a.s); break;
    }
  }
  w.U8(uint8_t(s.inputs.size()));
  for (const InputSpec& in : s.inputs) {
    w.U8(uint8_t((in.omitted ? 1 : 0) | (in.initializer ? 2 : 0)));
    w.U8(in.dtype);
    w.U8(uint8_t(in.dims.size()));
    for (int64_t d : in.dims) w.I64(d);
    w.U8(in.value_seed);
    w.U8(uint8_t(in.values.size()));
    for (int64_t v : in.values) w.I64(v);
  }
  w.U8(uint8_t(s.outputs - 1));  // Decode reads 1 + v % 3
  if (s.chain <= 4) {
    w.U8(uint8_t(s.chain - 1));
  } else {
    w.U8(kLongChain);
    w.U16(uint16_t(s.chain - 1));
  }
  w.U8(s.backward ? 1 : 0);
  return w.bytes();
}

inline OpSpec Decode(const uint8_t* data, size_t size) {
  SpecReader r(data, size);
  OpSpec s;
  s.op_type = r.Str();
  s.opset = r.U8();
  const size_t nattrs = r.U8() % (kMaxAttrs + 1);
  for (size_t k = 0; k < nattrs; ++k) {
    AttrSpec a;
    a.name = r.Str();
    a.pick = r.U8();
    a.kind = AttrSpec::Kind(r.U8() % AttrSpec::kNumKinds);
    switch (a.kind) {
      case AttrSpec::kInt: a.i = r.I64(); break;
      case AttrSpec::kFloat: a.f = r.F64(); break;
      case AttrSpec::kInts: {
        const size_t n = r.U8() % (kMaxInts + 1);
        for (size_t j = 0; j < n; ++j) a.ints.push_back(r.I64());
        break;
      }
      default: a.s = r.Str(); break;
    }
    s.attrs.push_back(a);
  }
  const size_t ninputs = r.U8() % (kMaxInputs + 1);
  for (size_t k = 0; k < ninputs; ++k) {
    InputSpec in;
    const uint8_t flags = r.U8();
    in.omitted = flags & 1;
    in.initializer = flags & 2;
    in.dtype = InputSpec::Dtype(r.U8() % InputSpec::kNumDtypes);
    const size_t rank = r.U8() % (kMaxRank + 1);
    for (size_t j = 0; j < rank; ++j) in.dims.push_back(r.I64());
    in.value_seed = r.U8();
    const size_t nv = r.U8() % (kMaxValues + 1);
    for (size_t j = 0; j < nv; ++j) in.values.push_back(r.I64());
    s.inputs.push_back(in);
  }
  s.outputs = uint8_t(1 + r.U8() % 3);
  // Short chains mostly: a long one (slow) only behind a marker byte that random bytes seldom are.
  const uint8_t c = r.U8();
  s.chain = uint16_t(c == kLongChain ? 1 + r.U16() % kMaxChain : 1 + c % 4);
  s.backward = r.U8() & 1;
  return s;
}

}  // namespace fuzz
}  // namespace loom
