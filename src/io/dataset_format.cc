#include "io/dataset_format.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace loom {
namespace io {

namespace {

uint32_t BigEndian32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

size_t IdxElementSize(uint8_t type) {
  switch (type) {
    case 0x08: case 0x09: return 1;
    case 0x0B: return 2;
    case 0x0C: case 0x0D: return 4;
    case 0x0E: return 8;
    default: return 0;
  }
}

const char* IdxTypeName(uint8_t type) {
  switch (type) {
    case 0x08: return "unsigned bytes";
    case 0x09: return "signed bytes";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "unknown";
  }
}

std::string DimsString(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? " x " : "") + std::to_string(dims[i]);
  return s;
}

// The MNIST-specific checks on an idx header: unsigned bytes, `ndims` dimensions.
IdxHeader MnistHeader(const uint8_t* data, size_t size, const std::string& source, size_t ndims, const char* what,
                      const char* dim_names) {
  const std::string where = "[mnist] '" + source + "': ";
  IdxHeader h = ParseIdxHeader(data, size, source);
  uint32_t magic = BigEndian32(data), want = 0x800u | uint32_t(ndims);
  LOOM_CHECK(h.type == 0x08, IOError, where, "bad magic number ", Hex32(magic), ": ", what, " hold ",
             IdxTypeName(0x08), " (magic ", Hex32(want), "), this file holds ", IdxTypeName(h.type));
  LOOM_CHECK(h.dims.size() == ndims, IOError, where, "wrong dimensions: MNIST ", what, " have ", ndims, " (",
             dim_names, "), this file has ", h.dims.size(), " (", DimsString(h.dims), "; magic ", Hex32(magic),
             ", expected ", Hex32(want), ")");
  return h;
}

}  // namespace

IdxHeader ParseIdxHeader(const uint8_t* data, size_t size, const std::string& source) {
  const std::string where = "[idx] '" + source + "': ";
  LOOM_CHECK(size >= 4, IOError, where, "truncated: ", size, " bytes, an idx header needs at least 4");
  uint32_t magic = BigEndian32(data);
  IdxHeader h;
  h.type = data[2];
  size_t ndims = data[3];
  LOOM_CHECK(data[0] == 0 && data[1] == 0 && IdxElementSize(h.type) != 0 && ndims > 0, IOError, where,
             "bad magic number ", Hex32(magic),
             ": an idx file starts with two zero bytes, a type code (0x08-0x0E) and the number of dimensions");
  h.data_offset = 4 + 4 * ndims;
  LOOM_CHECK(size >= h.data_offset, IOError, where, "truncated: the header declares ", ndims,
             " dimensions (", h.data_offset, " header bytes), the file has ", size, " bytes");
  uint64_t elems = 1;
  for (size_t i = 0; i < ndims; ++i) {
    uint32_t d = BigEndian32(data + 4 + 4 * i);
    h.dims.push_back(int64_t(d));
    if (elems != 0 && d > (uint64_t(1) << 48) / elems) elems = uint64_t(1) << 48;  // absurd: caught below
    else elems *= d;
  }
  uint64_t bytes = elems * IdxElementSize(h.type);
  LOOM_CHECK(bytes <= size - h.data_offset, IOError, where, "truncated: the header declares ", DimsString(h.dims),
             " ", IdxTypeName(h.type), " (", h.data_offset + bytes, " bytes with the header), the file has ", size,
             " bytes");
  LOOM_CHECK(bytes == size - h.data_offset, IOError, where, "size mismatch: the header declares ", DimsString(h.dims),
             " ", IdxTypeName(h.type), " (", h.data_offset + bytes, " bytes with the header), the file has ", size,
             " bytes (", size - h.data_offset - bytes, " unexpected bytes at the end)");
  h.data_bytes = size_t(bytes);
  return h;
}

void ParseMnistImages(const uint8_t* data, size_t size, const std::string& source, ImageData* out) {
  IdxHeader h = MnistHeader(data, size, source, 3, "images", "count, rows, columns");
  // With no images the header declares 0 bytes whatever the image size: the bound on rows x columns
  // (ParseIdxHeader's) keeps ImageData::sample_size() from overflowing.
  LOOM_CHECK(h.dims[1] > 0 && h.dims[2] > 0 && uint64_t(h.dims[1]) * uint64_t(h.dims[2]) <= (uint64_t(1) << 48),
             IOError, "[mnist] '", source, "': wrong dimensions: images of ", h.dims[1], " x ", h.dims[2], " pixels");
  LOOM_CHECK(out->labels.empty() || int64_t(out->labels.size()) == h.dims[0], IOError, "[mnist] '", source,
             "': wrong dimensions: ", h.dims[0], " images for ", out->labels.size(), " labels");
  out->n = h.dims[0];
  out->channels = 1;
  out->height = h.dims[1];
  out->width = h.dims[2];
  out->images.assign(data + h.data_offset, data + h.data_offset + h.data_bytes);
}

void ParseMnistLabels(const uint8_t* data, size_t size, const std::string& source, ImageData* out) {
  IdxHeader h = MnistHeader(data, size, source, 1, "labels", "count");
  LOOM_CHECK(out->images.empty() || out->n == h.dims[0], IOError, "[mnist] '", source, "': wrong dimensions: ",
             h.dims[0], " labels for ", out->n, " images");
  const uint8_t* p = data + h.data_offset;
  std::vector<int32_t> labels(size_t(h.dims[0]));
  for (size_t i = 0; i < labels.size(); ++i) {
    LOOM_CHECK(p[i] <= 9, IOError, "[mnist] '", source, "': label ", int(p[i]), " at index ", i,
               " is not a digit 0-9");
    labels[i] = p[i];
  }
  out->labels = std::move(labels);
  if (out->images.empty()) out->n = h.dims[0];
}

void AppendCifar10(const uint8_t* data, size_t size, const std::string& source, ImageData* out) {
  const std::string where = "[cifar10] '" + source + "': ";
  LOOM_CHECK(size > 0, IOError, where, "the file is empty");
  LOOM_CHECK(size % kCifar10RecordBytes == 0, IOError, where, "size ", size, " bytes is not a multiple of the ",
             kCifar10RecordBytes, "-byte record (1 label byte + 3072 pixel bytes): ", size / kCifar10RecordBytes,
             " whole records and ", size % kCifar10RecordBytes, " bytes more (truncated?)");
  LOOM_CHECK(out->n == 0 || (out->channels == 3 && out->height == 32 && out->width == 32), IOError, where,
             "cannot append CIFAR-10 records to a data set of ", out->channels, " x ", out->height, " x ",
             out->width, " images");
  const size_t records = size / kCifar10RecordBytes, pixels = kCifar10RecordBytes - 1;
  for (size_t r = 0; r < records; ++r) {
    uint8_t label = data[r * kCifar10RecordBytes];
    LOOM_CHECK(label <= 9, IOError, where, "record ", r, " has label ", int(label), ", CIFAR-10 labels are 0-9");
  }
  out->images.reserve(out->images.size() + records * pixels);
  out->labels.reserve(out->labels.size() + records);
  for (size_t r = 0; r < records; ++r) {
    const uint8_t* rec = data + r * kCifar10RecordBytes;
    out->labels.push_back(rec[0]);
    out->images.insert(out->images.end(), rec + 1, rec + kCifar10RecordBytes);
  }
  out->n += int64_t(records);
  out->channels = 3;
  out->height = 32;
  out->width = 32;
}

bool IsGzip(const uint8_t* data, size_t size) { return size >= 2 && data[0] == 0x1f && data[1] == 0x8b; }

std::vector<uint8_t> Gunzip(const uint8_t* data, size_t size, const std::string& source, size_t max_bytes) {
  const std::string where = "[gzip] '" + source + "': ";
  constexpr size_t kChunk = size_t(64) << 10;
  constexpr size_t kMaxFeed = size_t(1) << 30;  // zlib counts input in uInt
  z_stream z;
  std::memset(&z, 0, sizeof z);
  LOOM_CHECK(inflateInit2(&z, 16 + MAX_WBITS) == Z_OK, IOError, where, "cannot initialise zlib");
  struct End {
    z_stream* z;
    ~End() { inflateEnd(z); }
  } end{&z};
  std::vector<uint8_t> out;
  std::vector<uint8_t> buf(kChunk);
  z.next_in = const_cast<Bytef*>(data);
  z.avail_in = uInt(std::min(size, kMaxFeed));
  for (;;) {
    z.next_out = buf.data();
    z.avail_out = uInt(buf.size());
    int rc = inflate(&z, Z_NO_FLUSH);
    size_t got = buf.size() - z.avail_out;
    LOOM_CHECK(out.size() + got <= max_bytes, IOError, where, "decompresses to more than ", max_bytes, " bytes");
    out.insert(out.end(), buf.data(), buf.data() + got);
    size_t consumed = size_t(z.next_in - data);
    if (z.avail_in == 0 && consumed < size) z.avail_in = uInt(std::min(size - consumed, kMaxFeed));
    if (rc == Z_OK) continue;
    if (rc == Z_STREAM_END) {
      if (consumed == size) break;
      // Another gzip member follows (as `cat a.gz b.gz` makes), or garbage.
      LOOM_CHECK(IsGzip(data + consumed, size - consumed), IOError, where, size - consumed,
                 " unexpected bytes after the end of the gzip stream");
      LOOM_CHECK(inflateReset(&z) == Z_OK, IOError, where, "cannot reset zlib");
      continue;
    }
    LOOM_CHECK(!(rc == Z_BUF_ERROR && consumed == size), IOError, where,
               "truncated gzip stream: the data ends before the stream's end marker");
    throw IOError(where + "corrupt gzip stream: " + (z.msg ? z.msg : "zlib error " + std::to_string(rc)));
  }
  return out;
}

}  // namespace io
}  // namespace loom
