// A byte-level BPE tokenizer: text (any bytes) <-> token ids. tools/text.py trains it and writes
// its merges file; this side loads that file and encodes exactly as the converter did.
//
//   io::Tokenizer tok = io::Tokenizer::Load("data/text/merges.txt");
//   std::vector<int32_t> ids = tok.Encode("To be, or not to be");
//   std::string back = tok.Decode(ids);   // == the input, byte for byte
//
// Note [Byte-level BPE]
// Tokens 0-255 are the bytes; token 256 + k is the concatenation of merge k's two tokens, each
// an earlier token (Load checks it). Encoding first cuts the text into pieces over four byte
// classes: letters (A-Z, a-z and every byte >= 0x80, so a UTF-8 character stays in its word),
// digits, white space (space \t \n \v \f \r) and other bytes. A piece is a space followed by a
// run of letters, digits or other bytes; or such a run alone; or a run of white space, less its
// last byte when that is a space before a non-space (the space then starts the next piece, as
// GPT-2's " word" tokens do). No merge crosses a piece. Within a piece, while some adjacent pair
// has a merge, the lowest-numbered such merge is applied at every occurrence, left to right.
// Any bytes encode, invalid UTF-8 too, and Decode(Encode(s)) == s. tools/text.py (PIECE_RE,
// Tokenizer.encode) is the same rule; test/io/text_test.cc checks the two agree on the cases
// that `tools/text.py --fixture` wrote.
//
// The merges file: a first line "loom-bpe 1 <number of merges>", then one merge per line,
// "<left id> <right id>" in decimal, newline-terminated. Load checks all of it: a bad line is an
// IOError naming the file and the line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace loom {
namespace io {

class Tokenizer {
 public:
  // The 256 byte tokens and no merges.
  Tokenizer();
  // Reads a merges file (Note [Byte-level BPE]); IOError naming the file (and the line) when it
  // is missing, unreadable or malformed.
  static Tokenizer Load(const std::string& merges_path);
  // The same from the file's bytes; `source` names it in errors.
  static Tokenizer Parse(const std::string& merges_text, const std::string& source);
  // From merges in memory; `source` is named in errors (ValueError: a merge naming a token that
  // does not exist yet, a repeated pair, too many merges for 16-bit ids).
  static Tokenizer FromMerges(const std::vector<std::pair<int32_t, int32_t>>& merges,
                              const std::string& source = "merges");

  int64_t vocab_size() const { return int64_t(token_bytes_.size()); }
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }
  // The bytes of token `id`; ValueError when id is out of range.
  const std::string& TokenBytes(int32_t id) const;

  std::vector<int32_t> Encode(const std::string& text) const;
  // ValueError on an id out of [0, vocab_size()), naming it and its index.
  std::string Decode(const std::vector<int32_t>& ids) const;

  // The pieces of `text` that encoding works on (Note [Byte-level BPE]), as [begin, end) offsets.
  static std::vector<std::pair<size_t, size_t>> Pieces(std::string_view text);

 private:
  void EncodePiece(std::string_view piece, std::vector<int32_t>* out) const;
  int32_t Rank(int32_t left, int32_t right) const;  // the merge of this pair, or -1

  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::unordered_map<uint64_t, int32_t> ranks_;  // (left << 32 | right) -> merge number
  std::vector<std::string> token_bytes_;
};

// Ids are stored as uint16 (Note [Text corpus] in io/text.h): at most this many tokens.
constexpr int64_t kMaxVocabSize = 65536;
// The largest merges file Load reads (65,280 merges take under 1 MB).
constexpr size_t kMaxMergesFileBytes = size_t(16) << 20;

}  // namespace io
}  // namespace loom
