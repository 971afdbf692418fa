// core/file.h: the one atomic file writer (Note [Atomic file writes]) that checkpoints, graph
// dumps and the graph's DOT and trace files all use, and whole-file reads.
#include <sys/stat.h>

#include "common/files.h"
#include "common/harness.h"
#include "core/file.h"

namespace loom {
namespace test {
namespace {

std::string Text(const std::string& path) {
  std::vector<uint8_t> b = ReadBytes(path);
  return std::string(b.begin(), b.end());
}

TEST(AtomicFile, WritesThePiecesAndReplacesTheOldFile) {
  TempDir dir;
  const std::string p = dir / "out.dot";
  WriteFileAtomic(p, {"digraph ", "{}", "\n"}, "graph");
  EXPECT_EQ(Text(p), "digraph {}\n");
  WriteFileAtomic(p, {"second"}, "graph");
  EXPECT_EQ(ReadFile(p, "graph"), "second");
  EXPECT_EQ(dir.List(), std::vector<std::string>{"out.dot"});  // no temporary file left
}

TEST(AtomicFile, AFailedWriteLeavesNothingBehindAndNamesThePath) {
  TempDir dir;
  LOOM_EXPECT_THROW_MSG(WriteFileAtomic(dir / "missing/x.dot", {"a"}, "graph"), IOError,
                        "[graph] cannot write '" + (dir / "missing/x.dot") + "': cannot open");
  // The destination is a directory: the write succeeds, the rename fails, the temporary goes.
  ASSERT_EQ(::mkdir((dir / "isdir").c_str(), 0755), 0);
  LOOM_EXPECT_THROW_MSG(WriteFileAtomic(dir / "isdir", {"a"}, "trace"), IOError, "renaming");
  EXPECT_EQ(dir.List(), std::vector<std::string>{"isdir"});
  LOOM_EXPECT_THROW_MSG(ReadFile(dir / "none", "graph"), IOError, "none");
}

}  // namespace
}  // namespace test
}  // namespace loom
