// Op attributes: a small ordered list of named values. Attributes are data (DESIGN.md
// invariant 1) so that dumps, passes and cost accounting can read them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/error.h"

namespace loom {

using AttrValue = std::variant<int64_t, double, std::vector<int64_t>, std::string>;

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
    const AttrValue* v = Find(key);
    LOOM_ASSERT(v, "missing attribute '", key, "'");
    if (auto* i = std::get_if<int64_t>(v)) return double(*i);
    return std::get<double>(*v);
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
  template <typename T>
  const T& Get(const std::string& key) const {
    const AttrValue* v = Find(key);
    LOOM_ASSERT(v, "missing attribute '", key, "'");
    const T* t = std::get_if<T>(v);
    LOOM_ASSERT(t, "attribute '", key, "' has another type");
    return *t;
  }
  std::vector<std::pair<std::string, AttrValue>> items_;
};

}  // namespace loom
