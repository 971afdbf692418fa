// libFuzzer target: the CIFAR-10 batch parser (src/io/dataset_format.h). The first byte picks
// raw (even) or gzip-compressed (odd) input. Inputs must parse or raise loom::Error.
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "io/dataset_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool gz = data[0] & 1;
  data += 1;
  size -= 1;
  try {
    loom::io::ImageData d;
    if (gz) {
      std::vector<uint8_t> raw = loom::io::Gunzip(data, size, "fuzz", size_t(16) << 20);
      loom::io::AppendCifar10(raw.data(), raw.size(), "fuzz", &d);
    } else {
      loom::io::AppendCifar10(data, size, "fuzz", &d);
    }
    if (d.images.size() != size_t(d.n) * 3072 || d.labels.size() != size_t(d.n)) std::abort();
    for (int32_t l : d.labels)
      if (l < 0 || l > 9) std::abort();
  } catch (const loom::Error&) {
  }
  return 0;
}
