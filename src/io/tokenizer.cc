#include "io/tokenizer.h"

#include <functional>
#include <queue>

#include "core/error.h"
#include "core/file.h"

namespace loom {
namespace io {
namespace {

constexpr const char* kMergesHeader = "loom-bpe 1 ";

enum ByteClass { kLetter, kDigit, kSpace, kOther };

ByteClass ClassOf(unsigned char c) {
  if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c >= 0x80) return kLetter;
  if (c >= '0' && c <= '9') return kDigit;
  if (c == ' ' || (c >= '\t' && c <= '\r')) return kSpace;  // \t \n \v \f \r
  return kOther;
}

uint64_t PairKey(int32_t left, int32_t right) { return uint64_t(uint32_t(left)) << 32 | uint32_t(right); }

// A decimal number of at most 9 digits and nothing else, or -1.
int64_t ParseId(std::string_view s) {
  if (s.empty() || s.size() > 9) return -1;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

// Why merge k = (left, right) cannot follow merges [0, k) (Note [Byte-level BPE]), or "".
std::string MergeProblem(int64_t k, int64_t left, int64_t right,
                         const std::unordered_map<uint64_t, int32_t>& ranks) {
  if (256 + k >= kMaxVocabSize)
    return detail::Cat("merge ", k, " would make token ", 256 + k, ", but ids are 16-bit (at most ",
                       kMaxVocabSize - 256, " merges)");
  if (left < 0 || right < 0 || left >= 256 + k || right >= 256 + k)
    return detail::Cat("merge ", k, " (", left, ", ", right, ") names a token that does not exist before it (ids 0-",
                       255 + k, ")");
  auto it = ranks.find(PairKey(int32_t(left), int32_t(right)));
  if (it != ranks.end()) return detail::Cat("merge ", k, " (", left, ", ", right, ") repeats merge ", it->second);
  return "";
}

}  // namespace

Tokenizer::Tokenizer() {
  token_bytes_.reserve(256);
  for (int i = 0; i < 256; ++i) token_bytes_.emplace_back(1, char(i));
}

Tokenizer Tokenizer::FromMerges(const std::vector<std::pair<int32_t, int32_t>>& merges, const std::string& source) {
  Tokenizer t;
  for (size_t k = 0; k < merges.size(); ++k) {
    const auto [left, right] = merges[k];
    std::string problem = MergeProblem(int64_t(k), left, right, t.ranks_);
    LOOM_CHECK(problem.empty(), ValueError, "[tokenizer] ", source, ": ", problem);
    t.ranks_.emplace(PairKey(left, right), int32_t(k));
    t.merges_.emplace_back(left, right);
    t.token_bytes_.push_back(t.token_bytes_[size_t(left)] + t.token_bytes_[size_t(right)]);
  }
  return t;
}

Tokenizer Tokenizer::Load(const std::string& merges_path) {
  return Parse(ReadFile(merges_path, "tokenizer", kMaxMergesFileBytes), merges_path);
}

Tokenizer Tokenizer::Parse(const std::string& data, const std::string& source) {
  const std::string where = "[tokenizer] '" + source + "'";
  LOOM_CHECK(!data.empty(), IOError, where, " is empty: a merges file starts with '", kMergesHeader, "<merges>'");
  LOOM_CHECK(data.back() == '\n', IOError, where, " is truncated: its last line has no newline");
  Tokenizer t;
  int64_t expected = -1;
  size_t line_no = 0;
  for (size_t start = 0; start < data.size();) {
    const size_t end = data.find('\n', start);
    const std::string_view line(data.data() + start, end - start);
    start = end + 1;
    ++line_no;
    if (line_no == 1) {
      const std::string_view head(kMergesHeader);
      expected = line.substr(0, head.size()) == head ? ParseId(line.substr(head.size())) : -1;
      LOOM_CHECK(expected >= 0, IOError, where, " line 1: expected '", kMergesHeader, "<merges>', got '",
                 std::string(line.substr(0, 80)), "' (not a merges file of tools/text.py?)");
      continue;
    }
    const size_t space = line.find(' ');
    const int64_t left = space == std::string_view::npos ? -1 : ParseId(line.substr(0, space));
    const int64_t right = space == std::string_view::npos ? -1 : ParseId(line.substr(space + 1));
    LOOM_CHECK(left >= 0 && right >= 0, IOError, where, " line ", line_no, ": expected '<left id> <right id>', got '",
               std::string(line.substr(0, 80)), "'");
    const int64_t k = int64_t(t.merges_.size());
    LOOM_CHECK(k < expected, IOError, where, " line ", line_no, ": more merges than the ", expected,
               " its first line declares");
    std::string problem = MergeProblem(k, left, right, t.ranks_);
    LOOM_CHECK(problem.empty(), IOError, where, " line ", line_no, ": ", problem);
    t.ranks_.emplace(PairKey(int32_t(left), int32_t(right)), int32_t(k));
    t.merges_.emplace_back(int32_t(left), int32_t(right));
    t.token_bytes_.push_back(t.token_bytes_[size_t(left)] + t.token_bytes_[size_t(right)]);
  }
  LOOM_CHECK(int64_t(t.merges_.size()) == expected, IOError, where, " is truncated: its first line declares ",
             expected, " merges, it holds ", t.merges_.size());
  return t;
}

const std::string& Tokenizer::TokenBytes(int32_t id) const {
  LOOM_CHECK(id >= 0 && id < vocab_size(), ValueError, "[tokenizer] token id ", id, " is out of range [0, ",
             vocab_size(), ")");
  return token_bytes_[size_t(id)];
}

int32_t Tokenizer::Rank(int32_t left, int32_t right) const {
  auto it = ranks_.find(PairKey(left, right));
  return it == ranks_.end() ? -1 : it->second;
}

std::vector<std::pair<size_t, size_t>> Tokenizer::Pieces(std::string_view text) {
  std::vector<std::pair<size_t, size_t>> out;
  const size_t n = text.size();
  auto run_end = [&](size_t j, ByteClass c) {
    while (j < n && ClassOf(static_cast<unsigned char>(text[j])) == c) ++j;
    return j;
  };
  for (size_t i = 0; i < n;) {
    const ByteClass c = ClassOf(static_cast<unsigned char>(text[i]));
    size_t j;
    if (text[i] == ' ' && i + 1 < n && ClassOf(static_cast<unsigned char>(text[i + 1])) != kSpace) {
      j = run_end(i + 2, ClassOf(static_cast<unsigned char>(text[i + 1])));  // " word"
    } else if (c == kSpace) {
      j = run_end(i + 1, kSpace);
      if (j < n && j - 1 > i && text[j - 1] == ' ') --j;  // the last space goes with the next word
    } else {
      j = run_end(i + 1, c);
    }
    out.emplace_back(i, j);
    i = j;
  }
  return out;
}

// Applies the lowest-numbered merge present at every occurrence, left to right, until none
// applies (Note [Byte-level BPE]), in O(n log n): a heap of (merge, position) pairs taken in that
// order. A merge's pairs with its neighbours name its new token, so their merges come later
// (Load checks that every merge names earlier tokens): the heap's order is the rule's.
void Tokenizer::EncodePiece(std::string_view piece, std::vector<int32_t>* out) const {
  const size_t n = piece.size();
  if (n == 1 || merges_.empty()) {
    for (char c : piece) out->push_back(int32_t(static_cast<unsigned char>(c)));
    return;
  }
  constexpr size_t kNone = size_t(-1);
  std::vector<int32_t> id(n);
  std::vector<size_t> next(n), prev(n);
  std::vector<bool> gone(n, false);
  for (size_t i = 0; i < n; ++i) {
    id[i] = int32_t(static_cast<unsigned char>(piece[i]));
    next[i] = i + 1 < n ? i + 1 : kNone;
    prev[i] = i > 0 ? i - 1 : kNone;
  }
  using Entry = std::pair<int32_t, size_t>;  // (merge, left position)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](size_t left) {
    if (left == kNone || next[left] == kNone) return;
    const int32_t r = Rank(id[left], id[next[left]]);
    if (r >= 0) heap.emplace(r, left);
  };
  for (size_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const auto [r, left] = heap.top();
    heap.pop();
    const size_t right = next[left];
    // Stale entries: the left symbol was absorbed, or its pair has changed since it was pushed.
    if (gone[left] || right == kNone || Rank(id[left], id[right]) != r) continue;
    id[left] = 256 + r;
    gone[right] = true;
    next[left] = next[right];
    if (next[right] != kNone) prev[next[right]] = left;
    push(prev[left]);
    push(left);
  }
  for (size_t i = 0; i != kNone; i = next[i]) out->push_back(id[i]);
}

std::vector<int32_t> Tokenizer::Encode(const std::string& text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 2 + 1);
  for (const auto& [begin, end] : Pieces(text)) EncodePiece(std::string_view(text).substr(begin, end - begin), &out);
  return out;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    LOOM_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), ValueError, "[tokenizer] Decode: id ", ids[i], " at index ", i,
               " is out of range [0, ", vocab_size(), ")");
    out += token_bytes_[size_t(ids[i])];
  }
  return out;
}

}  // namespace io
}  // namespace loom
