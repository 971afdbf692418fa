// Op attributes: a small ordered list of named values. Attributes are data (DESIGN.md
// invariant 1) so that dumps, passes and cost accounting can read them.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "core/error.h"

namespace loom {

using AttrValue = std::variant<int64_t, double, std::vector<int64_t>, std::string>;

// Note [Attribute types]
// C++ ops set their attributes themselves, with the right types, but Python's call_op passes
// whatever value it is given. A missing attribute or one of another type is therefore the
// caller's mistake, not a loom bug: an AttrError (a ValueError) naming the attribute, the type
// wanted and the type given. Call and CallInto (core/op.cc) put the op's name in front:
// "[softmax] attribute 'axis' must be an int, got a str".
class AttrError : public ValueError {
 public:
  using ValueError::ValueError;
};

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string, AttrValue>> init) : items_(init) {}

  Attrs& Set(const std::string& key, AttrValue v) {
    for (auto& kv : items_)
      if (kv.first == key) { kv.second = std::move(v); return *this; }
    items_.emplace_back(key, std::move(v));
    return *this;
  }
  bool Has(const std::string& key) const { return Find(key) != nullptr; }
  int64_t Int(const std::string& key) const { return Get<int64_t>(key); }
  int64_t Int(const std::string& key, int64_t dflt) const { return Has(key) ? Int(key) : dflt; }
  double Float(const std::string& key) const {
    const AttrValue& v = Required(key, "a number");
    if (auto* i = std::get_if<int64_t>(&v)) return double(*i);
    if (auto* d = std::get_if<double>(&v)) return *d;
    throw WrongType(key, "a number", v);
  }
  double Float(const std::string& key, double dflt) const { return Has(key) ? Float(key) : dflt; }
  const std::vector<int64_t>& Ints(const std::string& key) const { return Get<std::vector<int64_t>>(key); }
  const std::string& Str(const std::string& key) const { return Get<std::string>(key); }

  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }
  std::string ToString() const;  // "axis=1, keepdims=0"

 private:
  const AttrValue* Find(const std::string& key) const {
    for (auto& kv : items_)
      if (kv.first == key) return &kv.second;
    return nullptr;
  }
  // What each alternative of AttrValue is called in messages.
  static const char* TypeName(size_t index) {
    static const char* const names[] = {"an int", "a float", "a list of ints", "a str"};
    return names[index];
  }
  static AttrError WrongType(const std::string& key, const char* want, const AttrValue& v) {
    return AttrError(detail::Cat("attribute '", key, "' must be ", want, ", got ", TypeName(v.index())));
  }
  const AttrValue& Required(const std::string& key, const char* want) const {
    const AttrValue* v = Find(key);
    if (!v) throw AttrError(detail::Cat("needs attribute '", key, "' (", want, ")"));
    return *v;
  }
  template <typename T>
  const T& Get(const std::string& key) const {
    constexpr size_t index = std::is_same_v<T, int64_t> ? 0 : std::is_same_v<T, double> ? 1
                             : std::is_same_v<T, std::vector<int64_t>> ? 2 : 3;
    static_assert(std::is_same_v<std::variant_alternative_t<index, AttrValue>, T>);
    const T* t = std::get_if<T>(&Required(key, TypeName(index)));
    if (!t) throw WrongType(key, TypeName(index), *Find(key));
    return *t;
  }
  std::vector<std::pair<std::string, AttrValue>> items_;
};

}  // namespace loom
