// libFuzzer target: the MNIST idx parsers and the gzip reader (src/io/dataset_format.h).
// The first byte picks the parser: 0 images, 1 labels, 2 the bare idx header, 3 gunzip and
// then images (as LoadMnist does with a .gz file). Inputs must parse or raise loom::Error.
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "io/dataset_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] & 3;
  data += 1;
  size -= 1;
  try {
    loom::io::ImageData d;
    switch (mode) {
      case 0:
        loom::io::ParseMnistImages(data, size, "fuzz", &d);
        if (d.images.size() != size_t(d.n) * d.sample_size()) std::abort();
        break;
      case 1:
        loom::io::ParseMnistLabels(data, size, "fuzz", &d);
        if (d.labels.size() != size_t(d.n)) std::abort();
        break;
      case 2: {
        loom::io::IdxHeader h = loom::io::ParseIdxHeader(data, size, "fuzz");
        if (h.data_offset + h.data_bytes != size) std::abort();
        break;
      }
      default: {
        std::vector<uint8_t> raw = loom::io::Gunzip(data, size, "fuzz", size_t(16) << 20);
        loom::io::ParseMnistImages(raw.data(), raw.size(), "fuzz", &d);
        break;
      }
    }
  } catch (const loom::Error&) {
  }
  return 0;
}
