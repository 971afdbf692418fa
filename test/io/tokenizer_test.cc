// The byte-level BPE tokenizer (Note [Byte-level BPE]): pieces and merges against expectations
// worked out by hand, the encoding of tools/text.py on the cases it wrote into
// test/io/text_fixture (a second implementation, in Python), round trips of arbitrary bytes, and
// merges files broken one way at a time.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>

#include "common/files.h"
#include "core/error.h"
#include "core/file.h"
#include "io/checksum.h"
#include "io/tokenizer.h"

namespace loom {
namespace test {
namespace {

const std::string kFixture = std::string(LOOM_SOURCE_DIR) + "/test/io/text_fixture";

std::vector<std::string> PieceStrings(const std::string& text) {
  std::vector<std::string> out;
  for (const auto& [b, e] : io::Tokenizer::Pieces(text)) out.push_back(text.substr(b, e - b));
  return out;
}

TEST(Tokenizer, PiecesFollowTheRule) {
  using V = std::vector<std::string>;
  EXPECT_EQ(PieceStrings(""), V{});
  EXPECT_EQ(PieceStrings("Hello, world!"), (V{"Hello", ",", " world", "!"}));
  EXPECT_EQ(PieceStrings("a  b"), (V{"a", " ", " b"}));             // the last space goes with the word
  EXPECT_EQ(PieceStrings(" \n x"), (V{" \n", " x"}));
  EXPECT_EQ(PieceStrings("x \n"), (V{"x", " \n"}));                  // white space at the end stays whole
  EXPECT_EQ(PieceStrings("\n\n  x"), (V{"\n\n ", " x"}));
  EXPECT_EQ(PieceStrings("\nx"), (V{"\n", "x"}));                    // only a space joins the next word
  EXPECT_EQ(PieceStrings("1234 5.6"), (V{"1234", " 5", ".", "6"}));
  EXPECT_EQ(PieceStrings("caf\xc3\xa9 \xff\xfe\x80z"), (V{"caf\xc3\xa9", " \xff\xfe\x80z"}));  // bytes >= 0x80 are letters
  EXPECT_EQ(PieceStrings(" ?!x"), (V{" ?!", "x"}));
  EXPECT_EQ(PieceStrings(std::string("a\0b", 3)), (V{"a", std::string(1, '\0'), "b"}));
}

TEST(Tokenizer, MergesApplyLowestFirstAtEveryOccurrence) {
  // 256 = "aa", 257 = "aa" + "a", 258 = "bc".
  io::Tokenizer t = io::Tokenizer::FromMerges({{97, 97}, {256, 97}, {98, 99}});
  EXPECT_EQ(t.vocab_size(), 259);
  EXPECT_EQ(t.TokenBytes(257), "aaa");
  EXPECT_EQ(t.Encode("aaa"), (std::vector<int32_t>{257}));          // aa|a, then (aa, a)
  EXPECT_EQ(t.Encode("aaaa"), (std::vector<int32_t>{256, 256}));     // both (a, a) first, left to right
  EXPECT_EQ(t.Encode("aaaaa"), (std::vector<int32_t>{256, 257}));
  EXPECT_EQ(t.Encode("abcd"), (std::vector<int32_t>{97, 258, 100}));
  EXPECT_EQ(t.Encode("a a"), (std::vector<int32_t>{97, 32, 97}));    // no merge crosses a piece
  EXPECT_EQ(t.Encode(""), std::vector<int32_t>{});
  EXPECT_EQ(io::Tokenizer().Encode("hi"), (std::vector<int32_t>{104, 105}));
}

// Encoding agrees with tools/text.py on every case it wrote: the same ids, byte for byte back.
TEST(Tokenizer, EncodesAsTheConverterDid) {
  io::Tokenizer t = io::Tokenizer::Load(kFixture + "/merges.txt");
  EXPECT_EQ(t.vocab_size(), 256 + 96);
  std::istringstream cases(ReadFile(kFixture + "/cases.txt", "test"));
  std::string line;
  int n = 0;
  while (std::getline(cases, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    std::string text;
    for (size_t i = 0; i + 1 < tab; i += 2) text.push_back(char(std::stoi(line.substr(i, 2), nullptr, 16)));
    std::vector<int32_t> expected;
    std::istringstream ids(line.substr(tab + 1));
    for (int32_t id; ids >> id;) expected.push_back(id);
    EXPECT_EQ(t.Encode(text), expected) << "case " << n << ": " << line.substr(0, tab);
    EXPECT_EQ(t.Decode(expected), text) << "case " << n;
    ++n;
  }
  EXPECT_GT(n, 200);
}

TEST(Tokenizer, AnyBytesRoundTrip) {
  io::Tokenizer t = io::Tokenizer::Load(kFixture + "/merges.txt");
  uint64_t state = 42;
  for (int round = 0; round < 300; ++round) {
    std::string s;
    const size_t len = io::SplitMix64(state++) % 200;
    for (size_t i = 0; i < len; ++i) {
      const uint64_t r = io::SplitMix64(state++);
      // Half the bytes from the sample's alphabet (so merges happen), half any byte at all.
      s.push_back(r & 1 ? "the summer's love \n\t"[r % 20] : char(r >> 8));
    }
    std::vector<int32_t> ids = t.Encode(s);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < t.vocab_size());
    ASSERT_EQ(t.Decode(ids), s) << "round " << round;
  }
  // One long piece: the encoder is O(n log n) per piece.
  const std::string long_piece(1 << 20, 'e');
  EXPECT_EQ(t.Decode(t.Encode(long_piece)), long_piece);
}

TEST(Tokenizer, DecodeRefusesIdsOutOfRange) {
  io::Tokenizer t = io::Tokenizer::FromMerges({{97, 97}});
  EXPECT_EQ(t.Decode({256, 98}), "aab");
  for (int32_t bad : {257, -1}) {
    try {
      t.Decode({97, bad});
      FAIL() << "no error for id " << bad;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("id " + std::to_string(bad) + " at index 1"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("[0, 257)"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(t.TokenBytes(257), ValueError);
}

TEST(Tokenizer, FromMergesRefusesAMergeOfLaterTokens) {
  EXPECT_THROW(io::Tokenizer::FromMerges({{256, 97}}), ValueError);        // 256 does not exist yet
  EXPECT_THROW(io::Tokenizer::FromMerges({{97, 97}, {97, 97}}), ValueError);  // a repeated pair
  EXPECT_THROW(io::Tokenizer::FromMerges({{-1, 97}}), ValueError);
}

// A merges file broken one way at a time: an IOError naming the file and the line.
TEST(Tokenizer, LoadNamesTheFileAndLineOfEachProblem) {
  TempDir dir;
  struct Case {
    std::string text, expected;
  };
  const std::vector<Case> cases = {
      {"", "is empty"},
      {"loom-bpe 1 1\n97 97", "truncated: its last line has no newline"},
      {"gpt2 merges\n97 97\n", "line 1: expected 'loom-bpe 1 <merges>'"},
      {"loom-bpe 1 2\n97 97\n", "declares 2 merges, it holds 1"},
      {"loom-bpe 1 1\n97 97\n98 98\n", "line 3: more merges than the 1"},
      {"loom-bpe 1 2\n97 97\n97 x\n", "line 3: expected '<left id> <right id>', got '97 x'"},
      {"loom-bpe 1 2\n97 97\n97  98\n", "line 3: expected"},
      {"loom-bpe 1 2\n97 97\n257 97\n", "line 3: merge 1 (257, 97) names a token that does not exist"},
      {"loom-bpe 1 2\n97 97\n97 97\n", "line 3: merge 1 (97, 97) repeats merge 0"},
      {"loom-bpe 1 1\n-1 97\n", "line 2: expected"},
  };
  for (const Case& c : cases) {
    const std::string path = dir / "merges.txt";
    WriteBytes(path, std::vector<uint8_t>(c.text.begin(), c.text.end()));
    try {
      io::Tokenizer::Load(path);
      FAIL() << "no error for " << c.text;
    } catch (const IOError& e) {
      EXPECT_NE(std::string(e.what()).find("[tokenizer] '" + path + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(io::Tokenizer::Load(dir / "absent.txt"), IOError);
  EXPECT_THROW(io::Tokenizer::Load(dir.path()), IOError);  // a directory
}

}  // namespace
}  // namespace test
}  // namespace loom
