// Writes seed inputs for one fuzz target into a corpus folder:
//   make_seeds checkpoint|idx|cifar DIR
// Each seed starts with the mode byte its target reads first.
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "io/checkpoint_format.h"
#include "io/dataset_format.h"

namespace {

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
    std::fprintf(stderr, "usage: %s checkpoint|idx|cifar DIR\n", argv[0]);
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
  } else {
    std::fprintf(stderr, "unknown target '%s'\n", what.c_str());
    return 2;
  }
  return 0;
}
