// The text corpus (Note [Text corpus]): the small corpus tools/text.py --fixture wrote loads and
// re-encodes to its own ids, broken copies give IOErrors naming the file, batches are a function
// of (seed, step) with targets shifted by one, evaluation windows cover the split once, bad
// arguments are ValueErrors. The real corpus that tools/setup.sh makes is checked too when it is
// there (it always is after the set-up, so CI runs those tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <set>

#include "common/files.h"
#include "common/harness.h"
#include "core/error.h"
#include "core/file.h"
#include "io/checksum.h"
#include "io/data_dir.h"
#include "io/text.h"

namespace loom {
namespace test {
namespace {

using io::TextSplit;
const std::string kFixture = std::string(LOOM_SOURCE_DIR) + "/test/io/text_fixture";

// What text.json says of a split: `"tokens": N` inside the split's object, and the like.
double JsonNumber(const std::string& json, const std::string& object, const std::string& key) {
  size_t at = object.empty() ? 0 : json.find("\"" + object + "\"");
  at = json.find("\"" + key + "\":", at);
  EXPECT_NE(at, std::string::npos) << key;
  return at == std::string::npos ? -1 : std::strtod(json.c_str() + at + key.size() + 3, nullptr);
}

// The corpus agrees with text.json and with the converter's encoding: its ids decode to the
// split's bytes, and encoding those bytes again gives the same ids.
void CheckAgainstConverter(const io::TextCorpus& c, const std::string& dir, TextSplit s) {
  const std::string json = ReadFile(dir + "/text.json", "test");
  EXPECT_EQ(c.num_tokens(s), JsonNumber(json, io::Name(s), "tokens"));
  EXPECT_EQ(c.num_bytes(s), JsonNumber(json, io::Name(s), "bytes"));
  const std::string text = c.tokenizer().Decode(c.tokens(s));
  EXPECT_EQ(int64_t(text.size()), c.num_bytes(s));
  EXPECT_TRUE(c.tokenizer().Encode(text) == c.tokens(s)) << io::Name(s) << " split: C++ encodes differently";
  EXPECT_NEAR(c.UnigramBitsPerByte(), JsonNumber(json, "", "unigram_bits_per_byte"), 1e-6);
}

TEST(TextCorpus, FixtureLoadsAndMatchesTheConverter) {
  io::TextCorpus c = io::TextCorpus::Load(kFixture);
  EXPECT_EQ(c.dir(), kFixture);
  EXPECT_EQ(c.tokenizer().vocab_size(), 256 + 96);
  CheckAgainstConverter(c, kFixture, TextSplit::kTrain);
  CheckAgainstConverter(c, kFixture, TextSplit::kValid);
}

// The real corpus: Shakespeare, 1,024 tokens, about 10% held out.
TEST(TextCorpus, RealCorpusLoadsAndMatchesTheConverter) {
  const std::string dir = io::DefaultTextDir();
  if (!FileExists(dir + "/SOURCE")) GTEST_SKIP() << "no text corpus in " << dir << ": run tools/setup.sh";
  io::TextCorpus c = io::TextCorpus::Load(dir);
  EXPECT_EQ(c.tokenizer().vocab_size(), 1024);
  EXPECT_GT(c.num_bytes(TextSplit::kTrain), 4000000);
  const double held_out = double(c.num_bytes(TextSplit::kValid)) / double(c.num_bytes(TextSplit::kTrain) +
                                                                        c.num_bytes(TextSplit::kValid));
  EXPECT_NEAR(held_out, 0.1, 0.01);
  CheckAgainstConverter(c, dir, TextSplit::kTrain);  // 1.9 M tokens encoded by C++ as by Python
  CheckAgainstConverter(c, dir, TextSplit::kValid);
  EXPECT_NE(c.tokenizer().Decode(c.tokens(TextSplit::kTrain)).find("To be, or not to be"), std::string::npos);
}

TEST(TextCorpus, DefaultDirFollowsLoomDataDir) {
  const char* old = std::getenv("LOOM_DATA_DIR");
  const std::string saved = old ? old : "";
  ::setenv("LOOM_DATA_DIR", "/some/where", 1);
  EXPECT_EQ(io::DefaultTextDir(), "/some/where/text");
  ::setenv("LOOM_DATA_DIR", "", 1);  // empty is unset, as in tools/setup.sh
  char root[PATH_MAX];
  ASSERT_TRUE(::realpath(LOOM_SOURCE_DIR, root));
  EXPECT_EQ(io::DefaultTextDir(), std::string(root) + "/data/text");  // the checkout of libloom.so
  if (old) ::setenv("LOOM_DATA_DIR", saved.c_str(), 1); else ::unsetenv("LOOM_DATA_DIR");
}

// ---- broken files ----

class BrokenCorpus : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"merges.txt", "train.bin", "valid.bin", "SOURCE"})
      WriteBytes(dir_ / name, ReadBytes(kFixture + "/" + name));
  }
  // Loading fails with an IOError whose message holds `file` and `expected`.
  void ExpectError(const std::string& file, const std::string& expected) {
    try {
      io::TextCorpus::Load(dir_.path());
      ADD_FAILURE() << "no error; expected " << expected;
    } catch (const IOError& e) {
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
  TempDir dir_;
};

TEST_F(BrokenCorpus, EachProblemIsAnIOErrorNamingTheFile) {
  const std::vector<uint8_t> good = ReadBytes(dir_ / "train.bin");
  const std::string train = dir_ / "train.bin";
  auto with = [&](auto change) {
    std::vector<uint8_t> b = good;
    change(b);
    WriteBytes(train, b);
  };
  with([](auto& b) { b.resize(b.size() - 1); });
  ExpectError(train, "is truncated: the header declares");
  with([](auto& b) { b.resize(b.size() - 2); });
  ExpectError(train, "is truncated: the header declares");
  with([](auto& b) { b.push_back(0); });
  ExpectError(train, "longer than its header says");
  with([](auto& b) { b.push_back(0), b.push_back(0); });
  ExpectError(train, "longer than its header says");
  with([](auto& b) { b.resize(20); });
  ExpectError(train, "is truncated: 20 bytes, its header takes 40");
  with([](auto& b) { b[0] = 'X'; });
  ExpectError(train, "bad magic number");
  with([](auto& b) { b[50] ^= 1; });
  ExpectError(train, "checksum");
  with([](auto& b) { b[8] = 0; });  // the vocabulary size
  ExpectError(train, "made with another tokenizer");
  with([](auto& b) { b[24] ^= 1; });  // the decoded byte count
  ExpectError(train, "decode to");
  WriteBytes(train, good);
  EXPECT_NO_THROW(io::TextCorpus::Load(dir_.path()));

  // Another merges.txt of the same size (its last merge replaced): the splits were made with
  // a different one.
  std::string merges = ReadFile(dir_ / "merges.txt", "test");
  merges.erase(merges.rfind('\n', merges.size() - 2) + 1);
  merges += "0 0\n";
  WriteBytes(dir_ / "merges.txt", std::vector<uint8_t>(merges.begin(), merges.end()));
  ExpectError(train, "made with another tokenizer");
}

TEST_F(BrokenCorpus, AnIdBeyondTheVocabulary) {
  // Token 0 set to 0xffff, the checksum recomputed: only the range check can catch it.
  std::vector<uint8_t> b = ReadBytes(dir_ / "valid.bin");
  b[40] = b[41] = 0xff;
  const uint64_t h = io::Fnv1a64(b.data() + 40, b.size() - 40);
  for (int i = 0; i < 8; ++i) b[32 + size_t(i)] = uint8_t(h >> (8 * i));
  WriteBytes(dir_ / "valid.bin", b);
  ExpectError(dir_ / "valid.bin", "token 0 is 65535, beyond the vocabulary of 352");
}

TEST_F(BrokenCorpus, MissingFilesSayToRunTheSetup) {
  ::unlink((dir_ / "valid.bin").c_str());
  ExpectError(dir_ / "valid.bin", "is missing: run tools/setup.sh");
  WriteBytes(dir_ / "valid.bin", ReadBytes(kFixture + "/valid.bin"));
  ::unlink((dir_ / "SOURCE").c_str());
  ExpectError(dir_.path(), "is incomplete");
  ExpectError(dir_.path(), "tools/setup.sh");
  EXPECT_THROW(io::TextCorpus::Load(dir_ / "absent"), IOError);
  ::unlink((dir_ / "merges.txt").c_str());
  WriteBytes(dir_ / "SOURCE", {});
  ExpectError(dir_ / "merges.txt", "run tools/setup.sh");
}

// ---- batches ----

io::TextCorpus Fixture() { return io::TextCorpus::Load(kFixture); }

TEST(TextCorpus, BatchIsAFunctionOfSeedAndStepWithTargetsShiftedByOne) {
  io::TextCorpus c = Fixture();
  const int64_t batch = 6, context = 16;
  auto [x, y] = c.Batch(TextSplit::kTrain, batch, context, 7, 3, CpuDevice());
  EXPECT_EQ(x.shape(), (Shape{batch, context}));
  EXPECT_EQ(y.shape(), (Shape{batch, context}));
  EXPECT_EQ(x.dtype(), DType::kInt32);
  const std::vector<int32_t> xs = x.ToVector<int32_t>(), ys = y.ToVector<int32_t>();
  const std::vector<int64_t> starts = c.BatchPositions(TextSplit::kTrain, batch, context, 7, 3);
  const std::vector<int32_t>& ids = c.tokens(TextSplit::kTrain);
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t p = starts[size_t(i)];
    ASSERT_TRUE(p >= 0 && p + context < c.num_tokens(TextSplit::kTrain));
    for (int64_t j = 0; j < context; ++j) {
      EXPECT_EQ(xs[size_t(i * context + j)], ids[size_t(p + j)]);
      EXPECT_EQ(ys[size_t(i * context + j)], ids[size_t(p + j + 1)]);
    }
  }
  // Other calls in between change nothing; another step or seed draws other windows.
  c.Batch(TextSplit::kTrain, batch, context, 7, 4, CpuDevice());
  c.Batch(TextSplit::kValid, 2, 8, 1, 0, CpuDevice());
  EXPECT_EQ(c.Batch(TextSplit::kTrain, batch, context, 7, 3, CpuDevice()).first.ToVector<int32_t>(), xs);
  EXPECT_NE(c.BatchPositions(TextSplit::kTrain, batch, context, 7, 4), starts);
  EXPECT_NE(c.BatchPositions(TextSplit::kTrain, batch, context, 8, 3), starts);
  // Window i depends on (seed, step, i) alone: a larger batch starts with the same windows.
  std::vector<int64_t> more = c.BatchPositions(TextSplit::kTrain, 2 * batch, context, 7, 3);
  EXPECT_EQ(std::vector<int64_t>(more.begin(), more.begin() + batch), starts);
}

TEST(TextCorpus, BatchDrawsEveryStartThatLeavesAWholeWindow) {
  io::TextCorpus c = Fixture();
  const int64_t n = c.num_tokens(TextSplit::kValid), context = n - 8;  // 8 possible starts
  std::set<int64_t> seen;
  for (int64_t step = 0; step < 50; ++step)
    for (int64_t p : c.BatchPositions(TextSplit::kValid, 4, context, 1, step)) seen.insert(p);
  EXPECT_EQ(seen, (std::set<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  // The largest context there is: one start.
  EXPECT_EQ(c.BatchPositions(TextSplit::kValid, 3, n - 1, 1, 0), (std::vector<int64_t>{0, 0, 0}));
}

TEST(TextCorpus, EvalWindowsCoverTheSplitOnce) {
  io::TextCorpus c = Fixture();
  const std::vector<int32_t>& ids = c.tokens(TextSplit::kTrain);
  for (int64_t context : {1, 7, 64}) {
    const int64_t windows = c.NumWindows(TextSplit::kTrain, context);
    EXPECT_EQ(windows, (c.num_tokens(TextSplit::kTrain) - 1) / context);
    std::vector<int32_t> inputs, targets;
    for (int64_t first = 0; first < windows; first += 5) {
      auto [x, y] = c.EvalBatch(TextSplit::kTrain, first, 5, context, CpuDevice());
      EXPECT_EQ(x.dim(0), std::min<int64_t>(5, windows - first));  // the last batch is clipped
      for (int32_t v : x.ToVector<int32_t>()) inputs.push_back(v);
      for (int32_t v : y.ToVector<int32_t>()) targets.push_back(v);
    }
    EXPECT_EQ(inputs, std::vector<int32_t>(ids.begin(), ids.begin() + windows * context));
    EXPECT_EQ(targets, std::vector<int32_t>(ids.begin() + 1, ids.begin() + windows * context + 1));
    EXPECT_EQ(c.EvalBytes(TextSplit::kTrain, context), int64_t(c.tokenizer().Decode(targets).size()));
  }
}

// A ValueError that starts with `[text] <fn>` and holds `numbers`.
template <typename F>
void ExpectValueError(F f, const std::string& fn, const std::string& numbers) {
  try {
    f();
    ADD_FAILURE() << "no error; expected " << numbers;
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[text] " + fn, 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find(numbers), std::string::npos) << e.what();
  }
}

TEST(TextCorpus, BadArgumentsAreValueErrors) {
  io::TextCorpus c = Fixture();
  const int64_t n = c.num_tokens(TextSplit::kValid);
  const std::string ns = std::to_string(n);
  auto dev = CpuDevice();
  ExpectValueError([&] { c.Batch(TextSplit::kValid, 2, 0, 0, 0, dev); }, "Batch", "context must be positive, got 0");
  ExpectValueError([&] { c.Batch(TextSplit::kValid, 2, n, 0, 0, dev); }, "Batch",
                   "context " + ns + " needs " + ns + " + 1 tokens, the valid split has " + ns);
  ExpectValueError([&] { c.Batch(TextSplit::kValid, 0, 4, 0, 0, dev); }, "Batch", "batch must be positive, got 0");
  ExpectValueError([&] { c.Batch(TextSplit::kValid, 2, 4, 0, -1, dev); }, "Batch", "step must be >= 0, got -1");
  ExpectValueError([&] { c.NumWindows(TextSplit::kValid, -3); }, "NumWindows", "got -3");
  const std::string windows = std::to_string(c.NumWindows(TextSplit::kValid, 4));
  ExpectValueError([&] { c.EvalBatch(TextSplit::kValid, std::stoll(windows), 2, 4, dev); }, "EvalBatch",
                   "first window " + windows + " is outside [0, " + windows + ")");
  ExpectValueError([&] { c.EvalBatch(TextSplit::kValid, -1, 2, 4, dev); }, "EvalBatch", "first window -1");
  ExpectValueError([&] { c.EvalBatch(TextSplit::kValid, 0, 0, 4, dev); }, "EvalBatch", "got 0");
  EXPECT_THROW(c.Batch(TextSplit::kValid, 2, 4, 0, 0, nullptr), DeviceError);
}

TEST(TextCorpus, UnigramBaselineByHand) {
  // No merges: 256 tokens of one byte each. Train counts: 0 twice, 1 once; p(t) = (count + 1) / (3 + 256).
  io::TextCorpus c = io::TextCorpus::FromTokens(io::Tokenizer(), {0, 0, 1}, {0, 1, 2});
  EXPECT_EQ(c.num_bytes(TextSplit::kValid), 3);
  const double bits = -(std::log2(3.0 / 259) + std::log2(2.0 / 259) + std::log2(1.0 / 259));
  EXPECT_DOUBLE_EQ(c.UnigramBitsPerByte(), bits / 3);
  EXPECT_THROW(io::TextCorpus::FromTokens(io::Tokenizer(), {0, 256}, {}), ValueError);
}

}  // namespace
}  // namespace test
}  // namespace loom
