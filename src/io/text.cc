#include "io/text.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/device.h"
#include "core/error.h"
#include "core/file.h"
#include "io/checksum.h"
#include "io/data_dir.h"

namespace loom {
namespace io {
namespace {

constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'T', 'O', 'K', '1'};
constexpr size_t kHeaderBytes = 40;
constexpr size_t kMaxTokenFileBytes = size_t(8) << 30;

uint32_t U32(const std::string& b, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(b[at + size_t(i)]);
  return v;
}
uint64_t U64(const std::string& b, size_t at) { return uint64_t(U32(b, at + 4)) << 32 | U32(b, at); }

std::string MissingMessage(const std::string& path) {
  return detail::Cat("[text] '", path, "' is missing: run tools/setup.sh, which makes the text corpus in ",
                     "$LOOM_DATA_DIR/text (default <checkout>/data/text)");
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// The ids of one token file, checked whole (Note [Text corpus]); returns the header's byte count.
int64_t ReadTokenFile(const std::string& path, const Tokenizer& tok, uint32_t merges_hash, std::vector<int32_t>* ids) {
  LOOM_CHECK(Exists(path), IOError, MissingMessage(path));
  const std::string b = ReadFile(path, "text", kMaxTokenFileBytes);
  const std::string where = "[text] '" + path + "'";
  LOOM_CHECK(b.size() >= kHeaderBytes, IOError, where, " is truncated: ", b.size(), " bytes, its header takes ",
             kHeaderBytes);
  LOOM_CHECK(std::memcmp(b.data(), kMagic, sizeof(kMagic)) == 0, IOError, where,
             " has a bad magic number: not a token file of tools/text.py");
  const uint32_t vocab = U32(b, 8), merges = U32(b, 12);
  const uint64_t count = U64(b, 16), bytes = U64(b, 24), checksum = U64(b, 32);
  LOOM_CHECK(vocab == uint64_t(tok.vocab_size()) && merges == merges_hash, IOError, where,
             " was made with another tokenizer (vocabulary ", vocab, ", merges.txt hash ", merges,
             ") than this folder's merges.txt (", tok.vocab_size(), ", ", merges_hash,
             "): run tools/setup.sh to convert the corpus again");
  const uint64_t payload = uint64_t(b.size() - kHeaderBytes);
  LOOM_CHECK(payload % 2 == 0 && payload / 2 == count, IOError, where, " is ",
             count > payload / 2 ? "truncated" : "longer than its header says", ": the header declares ", count,
             " tokens of 2 bytes after the header, the file has ", payload, " bytes there");
  LOOM_CHECK(Fnv1a64(b.data() + kHeaderBytes, payload) == checksum, IOError, where,
             " is corrupt: the checksum of its ids does not match the header's");
  ids->resize(size_t(count));
  uint64_t decoded = 0;
  for (size_t i = 0; i < count; ++i) {
    const int32_t id = int32_t(static_cast<unsigned char>(b[kHeaderBytes + 2 * i]) |
                               static_cast<unsigned char>(b[kHeaderBytes + 2 * i + 1]) << 8);
    LOOM_CHECK(id < tok.vocab_size(), IOError, where, ": token ", i, " is ", id, ", beyond the vocabulary of ",
               tok.vocab_size());
    (*ids)[i] = id;
    decoded += tok.TokenBytes(id).size();
  }
  LOOM_CHECK(decoded == bytes, IOError, where, ": its tokens decode to ", decoded, " bytes, the header says ", bytes);
  return int64_t(bytes);
}

int64_t DecodedBytes(const Tokenizer& tok, const std::vector<int32_t>& ids, size_t begin, size_t end) {
  int64_t n = 0;
  for (size_t i = begin; i < end; ++i) n += int64_t(tok.TokenBytes(ids[i]).size());
  return n;
}

}  // namespace

const char* Name(TextSplit s) { return s == TextSplit::kTrain ? "train" : "valid"; }

TextCorpus TextCorpus::Load(const std::string& dir) {
  LOOM_CHECK(Exists(dir), IOError, "[text] the corpus folder '", dir, "' does not exist: run tools/setup.sh, which ",
             "makes the text corpus in $LOOM_DATA_DIR/text (default <checkout>/data/text)");
  for (const char* name : {"merges.txt", "train.bin", "valid.bin"})
    LOOM_CHECK(Exists(dir + "/" + name), IOError, MissingMessage(dir + "/" + name));
  LOOM_CHECK(Exists(dir + "/SOURCE"), IOError, "[text] '", dir, "' is incomplete (no SOURCE, which tools/text.py ",
             "writes last): run tools/setup.sh to convert the corpus again");
  TextCorpus c;
  c.dir_ = dir;
  const std::string merges_path = dir + "/merges.txt";
  const std::string merges = ReadFile(merges_path, "tokenizer", kMaxMergesFileBytes);
  c.tokenizer_ = Tokenizer::Parse(merges, merges_path);
  const uint32_t merges_hash = uint32_t(Fnv1a64(merges.data(), merges.size()));
  c.train_bytes_ = ReadTokenFile(dir + "/train.bin", c.tokenizer_, merges_hash, &c.train_);
  c.valid_bytes_ = ReadTokenFile(dir + "/valid.bin", c.tokenizer_, merges_hash, &c.valid_);
  return c;
}

TextCorpus TextCorpus::FromTokens(Tokenizer tokenizer, std::vector<int32_t> train, std::vector<int32_t> valid) {
  TextCorpus c;
  c.tokenizer_ = std::move(tokenizer);
  c.train_ = std::move(train);
  c.valid_ = std::move(valid);
  c.train_bytes_ = DecodedBytes(c.tokenizer_, c.train_, 0, c.train_.size());  // checks the ids
  c.valid_bytes_ = DecodedBytes(c.tokenizer_, c.valid_, 0, c.valid_.size());
  return c;
}

void TextCorpus::CheckContext(TextSplit s, int64_t context, const char* fn) const {
  LOOM_CHECK(context > 0, ValueError, "[text] ", fn, ": context must be positive, got ", context);
  LOOM_CHECK(context < num_tokens(s), ValueError, "[text] ", fn, ": a window of context ", context, " needs ",
             context, " + 1 tokens, the ", Name(s), " split has ", num_tokens(s));
}

// Note [Counter-based text batches]
// Window i of the batch at `step` starts at SplitMix64(SplitMix64(SplitMix64(seed) ^ step) ^ i)
// mod (tokens - context), uniform over every start that leaves context + 1 tokens (the modulo's
// bias is below tokens / 2^64). Nothing advances between calls: the same (seed, step) gives the
// same batch whatever came before, so a resumed run (its step count restored) reads the batches
// an uninterrupted one would have, and data-parallel ranks can draw disjoint batches from one
// seed by their own steps. The same counter-based idea as Note [Counter-based augmentation].
std::vector<int64_t> TextCorpus::BatchPositions(TextSplit s, int64_t batch, int64_t context, uint64_t seed,
                                                int64_t step) const {
  LOOM_CHECK(batch > 0, ValueError, "[text] Batch: batch must be positive, got ", batch);
  LOOM_CHECK(step >= 0, ValueError, "[text] Batch: step must be >= 0, got ", step);
  CheckContext(s, context, "Batch");
  const uint64_t starts = uint64_t(num_tokens(s) - context);
  const uint64_t base = SplitMix64(SplitMix64(seed) ^ uint64_t(step));
  std::vector<int64_t> out(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) out[size_t(i)] = int64_t(SplitMix64(base ^ uint64_t(i)) % starts);
  return out;
}

std::pair<Tensor, Tensor> TextCorpus::Windows(TextSplit s, const std::vector<int64_t>& starts, int64_t context,
                                              const std::shared_ptr<Device>& dev) const {
  LOOM_CHECK(dev, DeviceError, "[text] no device given for the batch");
  const std::vector<int32_t>& ids = tokens(s);
  const int64_t batch = int64_t(starts.size());
  std::vector<int32_t> x(size_t(batch * context)), y(size_t(batch * context));
  for (int64_t i = 0; i < batch; ++i) {
    const int32_t* w = ids.data() + starts[size_t(i)];
    std::copy(w, w + context, x.begin() + i * context);
    std::copy(w + 1, w + context + 1, y.begin() + i * context);
  }
  Tensor inputs({batch, context}, DType::kInt32, dev), targets({batch, context}, DType::kInt32, dev);
  inputs.CopyFrom(x);
  targets.CopyFrom(y);
  return {inputs, targets};
}

std::pair<Tensor, Tensor> TextCorpus::Batch(TextSplit s, int64_t batch, int64_t context, uint64_t seed, int64_t step,
                                            const std::shared_ptr<Device>& dev) const {
  return Windows(s, BatchPositions(s, batch, context, seed, step), context, dev);
}

int64_t TextCorpus::NumWindows(TextSplit s, int64_t context) const {
  CheckContext(s, context, "NumWindows");
  return (num_tokens(s) - 1) / context;
}

std::pair<Tensor, Tensor> TextCorpus::EvalBatch(TextSplit s, int64_t first, int64_t batch, int64_t context,
                                                const std::shared_ptr<Device>& dev) const {
  const int64_t windows = NumWindows(s, context);
  LOOM_CHECK(batch > 0, ValueError, "[text] EvalBatch: batch must be positive, got ", batch);
  LOOM_CHECK(first >= 0 && first < windows, ValueError, "[text] EvalBatch: first window ", first,
             " is outside [0, ", windows, ") (the ", Name(s), " split in windows of context ", context, ")");
  std::vector<int64_t> starts;
  for (int64_t w = first; w < std::min(windows, first + batch); ++w) starts.push_back(w * context);
  return Windows(s, starts, context, dev);
}

int64_t TextCorpus::EvalBytes(TextSplit s, int64_t context) const {
  const int64_t windows = NumWindows(s, context);
  return DecodedBytes(tokenizer_, tokens(s), 1, size_t(windows * context + 1));
}

double TextCorpus::UnigramBitsPerByte() const {
  const int64_t vocab = tokenizer_.vocab_size();
  std::vector<int64_t> train_count(size_t(vocab), 0), valid_count(size_t(vocab), 0);
  for (int32_t t : train_) ++train_count[size_t(t)];
  for (int32_t t : valid_) ++valid_count[size_t(t)];
  const double total = double(num_tokens(TextSplit::kTrain) + vocab);
  double bits = 0;
  for (size_t t = 0; t < size_t(vocab); ++t)
    if (valid_count[t]) bits -= double(valid_count[t]) * std::log2(double(train_count[t] + 1) / total);
  return valid_bytes_ > 0 ? bits / double(valid_bytes_) : 0.0;
}

std::string DefaultTextDir() { return DefaultDataDir() + "/text"; }

}  // namespace io
}  // namespace loom
