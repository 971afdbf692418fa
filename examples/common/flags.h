// Command-line values for loom's programs (examples/*, tools/*.cc): whole-string parses that
// name the flag and the bad value, instead of std::stoll's silent prefix match ("12abc" -> 12).
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

}  // namespace flags
}  // namespace loom
