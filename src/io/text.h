// A tokenized text corpus for language models: the tokenizer and the token ids of a training and
// a held-out split, read whole into host memory, served as (inputs, targets) batches of int32
// Tensors on a device. tools/setup.sh makes the corpus (tools/text.py: Shakespeare's works, a
// 1,024-token byte-level BPE) in $LOOM_DATA_DIR/text, by default <checkout>/data/text.
//
//   auto corpus = io::TextCorpus::Load(io::DefaultTextDir());
//   auto [x, y] = corpus.Batch(io::TextSplit::kTrain, 32, 128, seed, step, dev);  // (32, 128) each
//   for (int64_t w = 0; w < corpus.NumWindows(io::TextSplit::kValid, 128); w += 64)
//     auto [vx, vy] = corpus.EvalBatch(io::TextSplit::kValid, w, 64, 128, dev);
//   bits per byte = summed nats / ln 2 / corpus.EvalBytes(io::TextSplit::kValid, 128)
//
// Note [Text corpus]
// A corpus folder holds four files, made together by tools/text.py (SOURCE last, so a folder
// without it is incomplete):
//   merges.txt             the tokenizer (Note [Byte-level BPE] in io/tokenizer.h)
//   train.bin, valid.bin   a 40-byte little-endian header, then the ids as uint16 little-endian:
//                            0  8 bytes  magic "LOOMTOK1"
//                            8  uint32   vocabulary size (that of merges.txt)
//                           12  uint32   the low 32 bits of the FNV-1a 64 of merges.txt's bytes
//                           16  uint64   number of tokens
//                           24  uint64   UTF-8 bytes the tokens decode to (bits per byte's divisor)
//                           32  uint64   FNV-1a 64 of the ids' bytes (io/checksum.h)
//   SOURCE, text.json      where the text came from, the split, counts and the unigram baseline
// Load checks each file whole before keeping anything: the magic, the size against the count,
// the checksum, every id below the vocabulary size, the decoded length against the header's
// bytes, and that both splits were made with this merges.txt. Any problem is an IOError naming
// the file; a missing file says to run tools/setup.sh.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "io/tokenizer.h"

namespace loom {

class Device;

namespace io {

enum class TextSplit { kTrain, kValid };
const char* Name(TextSplit s);  // "train", "valid"

class TextCorpus {
 public:
  // Reads dir/merges.txt, train.bin and valid.bin (Note [Text corpus]).
  static TextCorpus Load(const std::string& dir);
  // A corpus of ids in memory (tests, text from elsewhere); ValueError on an id out of range.
  static TextCorpus FromTokens(Tokenizer tokenizer, std::vector<int32_t> train, std::vector<int32_t> valid);

  const std::string& dir() const { return dir_; }  // "" for FromTokens
  const Tokenizer& tokenizer() const { return tokenizer_; }
  int64_t num_tokens(TextSplit s) const { return int64_t(tokens(s).size()); }
  // UTF-8 bytes the split's tokens decode to (bits per byte = nats / ln 2 / bytes).
  int64_t num_bytes(TextSplit s) const { return s == TextSplit::kTrain ? train_bytes_ : valid_bytes_; }
  const std::vector<int32_t>& tokens(TextSplit s) const { return s == TextSplit::kTrain ? train_ : valid_; }

  // A training batch (Note [Counter-based text batches]): `batch` windows of context + 1 tokens
  // starting at BatchPositions(...); inputs (batch, context) int32 and targets, the same windows
  // shifted by one token, on `dev`. ValueError for batch <= 0, context <= 0, a negative step, or
  // a split shorter than context + 1 tokens.
  std::pair<Tensor, Tensor> Batch(TextSplit s, int64_t batch, int64_t context, uint64_t seed, int64_t step,
                                  const std::shared_ptr<Device>& dev) const;
  // Where Batch's windows start: window i at a position drawn from (seed, step, i) alone.
  std::vector<int64_t> BatchPositions(TextSplit s, int64_t batch, int64_t context, uint64_t seed,
                                      int64_t step) const;

  // Evaluation: the split cut into consecutive windows of context + 1 tokens, window w starting
  // at token w * context, so each token after the first is a target exactly once, except the
  // last (num_tokens - 1) % context, which no window reaches. NumWindows = (num_tokens - 1) / context.
  int64_t NumWindows(TextSplit s, int64_t context) const;
  // Windows [first, first + batch), clipped to NumWindows (the last batch may be smaller).
  // ValueError for first outside [0, NumWindows) or batch <= 0.
  std::pair<Tensor, Tensor> EvalBatch(TextSplit s, int64_t first, int64_t batch, int64_t context,
                                      const std::shared_ptr<Device>& dev) const;
  // UTF-8 bytes of the tokens that the windows' targets cover: the divisor for the bits per byte
  // of a whole pass of EvalBatch.
  int64_t EvalBytes(TextSplit s, int64_t context) const;

  // The unigram baseline, in bits per held-out byte: the held-out tokens' cross-entropy under the
  // training tokens' frequencies with add-one smoothing (tools/text.py writes the same number
  // into text.json as unigram_bits_per_byte).
  double UnigramBitsPerByte() const;

 private:
  // The checked (batch, context) windows starting at `starts`, as tensors on `dev`.
  std::pair<Tensor, Tensor> Windows(TextSplit s, const std::vector<int64_t>& starts, int64_t context,
                                    const std::shared_ptr<Device>& dev) const;
  void CheckContext(TextSplit s, int64_t context, const char* fn) const;

  std::string dir_;
  Tokenizer tokenizer_;
  std::vector<int32_t> train_, valid_;
  int64_t train_bytes_ = 0, valid_bytes_ = 0;
};

// Where tools/setup.sh puts the corpus: DefaultDataDir() + "/text" (io/data_dir.h).
std::string DefaultTextDir();

}  // namespace io
}  // namespace loom
