// examples/common/flags.h: the one command-line parser of loom-mlp, loom-cnn, loom-bench and
// graph_dump (flag spellings, values, switches, positional arguments, and the usage errors).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../../examples/common/flags.h"

namespace {

using loom::flags::Args;
using loom::flags::UsageError;

struct Parsed {
  int64_t batch = 0;
  double lr = 0;
  bool json = false;
  std::string model, path;
};

// The loop each program writes: two valued flags, a switch, one positional argument.
Parsed Parse(std::vector<std::string> words) {
  std::vector<char*> argv{const_cast<char*>("prog")};
  for (std::string& w : words) argv.push_back(&w[0]);
  Parsed p;
  Args a(int(argv.size()), argv.data());
  while (a.Next()) {
    if (a.Is("--batch")) p.batch = a.Int(1);
    else if (a.Is("--lr")) p.lr = a.Double();
    else if (a.Is("--model")) p.model = a.Value();
    else if (a.Switch("--json")) p.json = true;
    else if (a.Positional() && p.path.empty()) p.path = a.name();
    else a.Unknown();
  }
  return p;
}

std::string Error(std::vector<std::string> words) {
  try {
    Parse(std::move(words));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Flags, ValuesFollowOrJoinTheFlag) {
  Parsed p = Parse({"--batch", "8", "--lr=0.5", "step.lgd", "--model=a=b", "--json"});
  EXPECT_EQ(p.batch, 8);
  EXPECT_EQ(p.lr, 0.5);
  EXPECT_EQ(p.model, "a=b");  // only the first '=' splits
  EXPECT_TRUE(p.json);
  EXPECT_EQ(p.path, "step.lgd");
  EXPECT_EQ(Parse({"--model", "--json"}).model, "--json");  // a separate value is taken as it is
  EXPECT_FALSE(Parse({"--model", "--json"}).json);
}

TEST(Flags, MistakesNameTheFlag) {
  EXPECT_EQ(Error({"--batch"}), "--batch needs a value");
  EXPECT_EQ(Error({"--batch=12abc"}), "--batch expects an integer, got '12abc'");
  EXPECT_EQ(Error({"--batch", "0"}), "--batch must be at least 1, got 0");
  EXPECT_EQ(Error({"--lr=-1"}), "--lr must not be negative, got -1");
  EXPECT_EQ(Error({"--json=1"}), "--json takes no value");
  EXPECT_EQ(Error({"--jsn"}), "unknown argument '--jsn'");
  EXPECT_EQ(Error({"--jsn=3"}), "unknown argument '--jsn=3'");
  EXPECT_EQ(Error({"a.lgd", "b.lgd"}), "unknown argument 'b.lgd'");
}

}  // namespace
