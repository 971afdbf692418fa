// Data set file formats, below the Tensor level: bytes in, uint8 images and int32 labels out.
// Nothing here touches a device, so the parsers are tested and fuzzed on their own.
//
//  MNIST idx (http://yann.lecun.com/exdb/mnist/): big-endian header
//    magic = 0x00 0x00 <type> <ndims>, then ndims uint32 sizes, then the data, row-major.
//    Images: magic 0x00000803 (unsigned bytes, 3 dims: count, rows, columns).
//    Labels: magic 0x00000801 (unsigned bytes, 1 dim: count), values 0-9.
//  CIFAR-10 binary (https://www.cs.toronto.edu/~kriz/cifar.html): records of 1 label byte
//    (0-9) and 3072 pixel bytes (1024 red, 1024 green, 1024 blue; each 32 x 32 row-major).
// Either may be gzip-compressed (detected by the gzip magic 0x1f 0x8b, not by the name).
//
// Every problem is an IOError that names the source and what is wrong: "bad magic number",
// "wrong dimensions", "truncated", "not a multiple of the 3073-byte record", a bad label.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace loom {
namespace io {

// Images and labels in host memory, as the files store them.
struct ImageData {
  int64_t n = 0, channels = 0, height = 0, width = 0;
  std::vector<uint8_t> images;  // (n, channels, height, width)
  std::vector<int32_t> labels;  // (n)
  size_t sample_size() const { return size_t(channels * height * width); }
};

// An idx header: element type code, dimensions, and where the data starts. Checks the magic
// number and that the file holds exactly the data the header declares.
struct IdxHeader {
  uint8_t type = 0;  // 0x08 ubyte, 0x09 sbyte, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64
  std::vector<int64_t> dims;
  size_t data_offset = 0;
  size_t data_bytes = 0;
};
IdxHeader ParseIdxHeader(const uint8_t* data, size_t size, const std::string& source);

// Sets out's n, channels (1), height, width and images.
void ParseMnistImages(const uint8_t* data, size_t size, const std::string& source, ImageData* out);
// Sets out's labels (and n when out holds no images yet; else the counts must agree).
void ParseMnistLabels(const uint8_t* data, size_t size, const std::string& source, ImageData* out);
// Appends the records of one CIFAR-10 batch file to out (3 x 32 x 32 images).
void AppendCifar10(const uint8_t* data, size_t size, const std::string& source, ImageData* out);

constexpr size_t kCifar10RecordBytes = 1 + 3 * 32 * 32;
constexpr size_t kMaxDecompressedBytes = size_t(4) << 30;

bool IsGzip(const uint8_t* data, size_t size);
// Inflates a gzip stream (several concatenated members are fine); IOError when it is corrupt,
// truncated, or would exceed max_bytes.
std::vector<uint8_t> Gunzip(const uint8_t* data, size_t size, const std::string& source,
                            size_t max_bytes = kMaxDecompressedBytes);

}  // namespace io
}  // namespace loom
