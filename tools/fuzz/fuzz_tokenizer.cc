// libFuzzer target: the merges-file parser and the BPE encoder (src/io/tokenizer.h). The input is
// a merges file, a NUL byte, then text: the file must parse or raise loom::Error, and a tokenizer
// that parsed must encode the text into ids within its vocabulary that decode to it exactly
// (Note [Byte-level BPE]).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "io/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string merges = input.substr(0, nul);
  const std::string text = nul == std::string::npos ? std::string() : input.substr(nul + 1);
  try {
    const loom::io::Tokenizer tok = loom::io::Tokenizer::Parse(merges, "fuzz");
    const std::vector<int32_t> ids = tok.Encode(text);
    for (int32_t id : ids)
      if (id < 0 || id >= tok.vocab_size()) std::abort();
    if (tok.Decode(ids) != text) std::abort();
  } catch (const loom::Error&) {
  }
  return 0;
}
