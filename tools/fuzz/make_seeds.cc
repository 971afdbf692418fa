// Writes seed inputs for one fuzz target into a corpus folder:
//   make_seeds checkpoint|idx|cifar|onnx_ops DIR
// Each seed starts with the mode byte its target reads first; the onnx_ops seeds are OpSpecs
// (onnx_op_spec.h), among them every input that once crashed or hung an ONNX handler.
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "io/checkpoint_format.h"
#include "io/dataset_format.h"
#include "onnx_op_spec.h"

namespace {

using loom::fuzz::AttrSpec;
using loom::fuzz::InputSpec;
using loom::fuzz::OpSpec;

void PutRaw(const std::string& dir, const std::string& name, const std::string& body) {
  std::string path = dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) { std::perror(path.c_str()); std::exit(1); }
  std::fwrite(body.data(), 1, body.size(), f);
  std::fclose(f);
}

AttrSpec IntAttr(const std::string& name, int64_t v) {
  AttrSpec a;
  a.name = name;
  a.kind = AttrSpec::kInt;
  a.i = v;
  return a;
}

InputSpec Fed(InputSpec::Dtype dt, std::vector<int64_t> dims, std::vector<int64_t> values = {}) {
  InputSpec in;
  in.dtype = dt;
  in.dims = std::move(dims);
  in.values = std::move(values);
  return in;
}

InputSpec Known(InputSpec::Dtype dt, std::vector<int64_t> dims, std::vector<int64_t> values) {
  InputSpec in = Fed(dt, std::move(dims), std::move(values));
  in.initializer = true;
  return in;
}

OpSpec Op(const std::string& type, std::vector<InputSpec> inputs, std::vector<AttrSpec> attrs = {}, int64_t opset = 13) {
  OpSpec s;
  s.op_type = type;
  s.opset = uint8_t(opset);
  s.inputs = std::move(inputs);
  s.attrs = std::move(attrs);
  return s;
}

// The ONNX inputs of issue 36, each once a SIGFPE, SIGSEGV, hang or silent answer, and a few
// ordinary ones.
void OnnxOpSeeds(const std::string& dir) {
  using loom::fuzz::Bits;
  constexpr int64_t P32 = int64_t(1) << 32, P33 = int64_t(1) << 33, P50 = int64_t(1) << 50, P62 = int64_t(1) << 62;
  const auto F = InputSpec::kFloat32, D = InputSpec::kFloat64, L = InputSpec::kInt64;
  std::vector<std::pair<std::string, OpSpec>> seeds = {
      {"depth_to_space_blocksize_2e32", Op("DepthToSpace", {Fed(F, {1, 4, 2, 2})}, {IntAttr("blocksize", P32)})},
      {"depth_to_space_no_channels", Op("DepthToSpace", {Fed(F, {1, 0, 2, 2})}, {IntAttr("blocksize", P62)})},
      {"space_to_depth_empty", Op("SpaceToDepth", {Fed(F, {1, 3, 0, 0})}, {IntAttr("blocksize", P33)})},
      {"cumsum_zero_rows_huge_axis", Op("CumSum", {Fed(F, {0, P33}), Known(L, {}, {1})})},
      {"cumsum_reverse_exclusive", Op("CumSum", {Fed(F, {3, 5}), Known(L, {}, {-1})},
                                      {IntAttr("exclusive", 1), IntAttr("reverse", 1)})},
      {"eyelike_huge_rows_no_columns", Op("EyeLike", {Fed(F, {P50, 0})}, {IntAttr("k", 1)})},
      {"trilu_huge_rows_no_columns", Op("Trilu", {Fed(F, {P50, 0})}, {}, 14)},
      {"nll_target_7_of_3", Op("NegativeLogLikelihoodLoss", {Fed(F, {2, 3}), Known(L, {2}, {1, 7})})},
      {"sce_target_minus_5", Op("SoftmaxCrossEntropyLoss", {Fed(F, {2, 3}), Fed(L, {2}, {1, -5})})},
      {"sce_ignore_minus_5", Op("SoftmaxCrossEntropyLoss", {Fed(F, {2, 3}), Fed(L, {2}, {1, -5})},
                                {IntAttr("ignore_index", -5)})},
      {"range_1e30", Op("Range", {Known(D, {}, {Bits(0)}), Known(D, {}, {Bits(1e30)}), Known(D, {}, {Bits(1)})})},
      {"range_inf", Op("Range", {Known(D, {}, {Bits(0)}), Known(D, {}, {Bits(HUGE_VAL)}), Known(D, {}, {Bits(1)})})},
      {"range_nan_delta", Op("Range", {Known(D, {}, {Bits(0)}), Known(D, {}, {Bits(10)}), Known(D, {}, {Bits(NAN)})})},
      {"conv", Op("Conv", {Fed(F, {1, 2, 5, 5}), Known(F, {3, 2, 3, 3}, {}), Known(F, {3}, {})},
                  {IntAttr("group", 1)})},
      {"gather_negative", Op("Gather", {Fed(F, {4, 3}), Known(L, {2}, {-1, 2})}, {IntAttr("axis", 0)})},
      {"reshape", Op("Reshape", {Fed(F, {2, 3, 4}), Known(L, {2}, {6, -1})})},
  };
  // A deep chain through a trainable initializer, differentiated: y = ((x + w) + w) ... (the
  // history's release recursed once per node: SIGSEGV at 100,000).
  OpSpec chain = Op("Add", {Fed(F, {1}), Known(F, {1}, {Bits(0.5)})});
  chain.chain = loom::fuzz::kMaxChain;
  seeds.emplace_back("add_chain_with_trainable_initializer", chain);
  for (auto& kv : seeds) {
    for (InputSpec& in : kv.second.inputs)  // float values without their own: a plain pattern
      if (in.values.empty()) in.value_seed = 3;
    PutRaw(dir, kv.first, loom::fuzz::Encode(kv.second));
  }
}

void Put(const std::string& dir, const std::string& name, char mode, const std::string& body) {
  std::string path = dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) { std::perror(path.c_str()); std::exit(1); }
  std::fputc(mode, f);
  std::fwrite(body.data(), 1, body.size(), f);
  std::fclose(f);
}

std::string Gzip(const std::string& raw) {
  z_stream z;
  std::memset(&z, 0, sizeof z);
  deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, uLong(raw.size())) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  z.avail_in = uInt(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(&out[0]);
  z.avail_out = uInt(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string BE32(uint32_t v) {
  return std::string{char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
}

std::string Idx(uint32_t magic, const std::vector<uint32_t>& dims, size_t count) {
  std::string s = BE32(magic);
  for (uint32_t d : dims) s += BE32(d);
  for (size_t i = 0; i < count; ++i) s += char((i * 7) % 10);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s checkpoint|idx|cifar|onnx_ops DIR\n", argv[0]);
    return 2;
  }
  std::string what = argv[1], dir = argv[2];
  using namespace loom::io;
  if (what == "checkpoint") {
    RawCheckpoint raw;
    const loom::DType dtypes[] = {loom::DType::kFloat32, loom::DType::kFloat64, loom::DType::kFloat16,
                                  loom::DType::kBFloat16, loom::DType::kInt32, loom::DType::kInt64,
                                  loom::DType::kUInt8, loom::DType::kBool};
    int i = 0;
    for (loom::DType dt : dtypes) {
      RawTensor t;
      t.name = "t" + std::to_string(i++);
      t.dtype = dt;
      t.shape = {2, int64_t(i % 3)};
      t.data.assign(size_t(2 * (i % 3)) * loom::SizeOf(dt), char(i));
      raw.tensors.push_back(t);
    }
    raw.meta = {{"step", 7}, {"optimizer/lr", 0.01}};
    EncodedCheckpoint enc = EncodeCheckpoint(raw);
    Put(dir, "file", 0, enc.Joined());
    Put(dir, "payload", 1, enc.payload);
    Put(dir, "empty_file", 0, EncodeCheckpoint(RawCheckpoint()).Joined());
  } else if (what == "idx") {
    std::string images = Idx(0x803, {3, 4, 5}, 60), labels = Idx(0x801, {3}, 3);
    Put(dir, "images", 0, images);
    Put(dir, "labels", 1, labels);
    Put(dir, "header", 2, Idx(0xD02, {2, 2}, 16));
    Put(dir, "images_gz", 3, Gzip(images));
  } else if (what == "cifar") {
    std::string recs;
    for (int r = 0; r < 2; ++r) {
      recs += char(r * 4);
      for (int k = 0; k < 3072; ++k) recs += char((r * 31 + k) % 251);
    }
    Put(dir, "batch", 0, recs);
    Put(dir, "batch_gz", 1, Gzip(recs));
  } else if (what == "onnx_ops") {
    OnnxOpSeeds(dir);
  } else {
    std::fprintf(stderr, "unknown target '%s'\n", what.c_str());
    return 2;
  }
  return 0;
}
