// Command-line flags for loom's programs (examples/*, tools/*.cc): one argv walker (Args) and
// whole-string value parses that name the flag and the bad value, instead of std::stoll's
// silent prefix match ("12abc" -> 12).
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace loom {
namespace flags {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An integer >= min, the whole of v.
inline int64_t ParseInt(const std::string& flag, const std::string& v, int64_t min) {
  size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size()) throw UsageError(flag + " expects an integer, got '" + v + "'");
  if (x < min) throw UsageError(flag + " must be at least " + std::to_string(min) + ", got " + v);
  return x;
}

// A finite number >= 0, the whole of v.
inline double ParseDouble(const std::string& flag, const std::string& v) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != v.size() || !std::isfinite(x)) throw UsageError(flag + " expects a number, got '" + v + "'");
  if (x < 0) throw UsageError(flag + " must not be negative, got " + v);
  return x;
}

// Walks argv. Each argument is a flag "--name", "--name=value" or "--name value" (the value is
// then the next argument), or a positional argument, one that does not start with '-':
//   flags::Args a(argc, argv);
//   while (a.Next()) {
//     if (a.Is("--batch")) f.batch = a.Int(1);
//     else if (a.Switch("--json")) f.json = true;
//     else a.Unknown();
//   }
// Mistakes throw UsageError naming the flag: a missing value, a value given to a switch, an
// unknown argument.
class Args {
 public:
  Args(int argc, char** argv) : argc_(argc), argv_(argv) {}

  // Moves to the next argument; false after the last.
  bool Next() {
    if (++i_ >= argc_) return false;
    name_ = argv_[i_];
    value_.clear();
    size_t eq = name_.find('=');
    has_value_ = name_.rfind("--", 0) == 0 && eq != std::string::npos;
    if (has_value_) {
      value_ = name_.substr(eq + 1);
      name_ = name_.substr(0, eq);
    }
    return true;
  }

  // The flag's name without "=value", or the positional argument.
  const std::string& name() const { return name_; }
  bool Is(const char* flag) const { return name_ == flag; }
  bool Positional() const { return name_.empty() || name_[0] != '-'; }

  // True when the argument is the switch `flag`, which takes no value.
  bool Switch(const char* flag) const {
    if (!Is(flag)) return false;
    if (has_value_) throw UsageError(name_ + " takes no value");
    return true;
  }
  // The flag's value: after '=', or else the next argument (which is then consumed).
  std::string Value() {
    if (has_value_) return value_;
    if (i_ + 1 >= argc_) throw UsageError(name_ + " needs a value");
    return argv_[++i_];
  }
  int64_t Int(int64_t min) { return ParseInt(name_, Value(), min); }
  double Double() { return ParseDouble(name_, Value()); }

  [[noreturn]] void Unknown() const { throw UsageError("unknown argument '" + std::string(argv_[i_]) + "'"); }

 private:
  int argc_;
  char** argv_;
  int i_ = 0;
  std::string name_, value_;
  bool has_value_ = false;
};

}  // namespace flags
}  // namespace loom
