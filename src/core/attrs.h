// Op attributes: a small ordered list of named values. Attributes are data (docs/design.md
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

struct OpDef;

// The type of a declared attribute (Note [Declared attributes]); in AttrValue's order.
enum class AttrType : uint8_t { kInt = 0, kFloat = 1, kInts = 2, kStr = 3 };
struct AttrDecl {
  std::string key;
  AttrType type;
};
// op's declaration of attribute `key`, or null when op has none of that name.
const AttrDecl* FindAttrDecl(const OpDef& op, const std::string& key);

// Note [Attribute types]
// C++ ops set their attributes themselves, with the right types, but Python's call_op passes
// whatever value it is given. A missing attribute, one of another type than the op declares or
// one the op does not have is therefore the caller's mistake, not a loom bug: an AttrError (a
// ValueError) naming the op and the attribute: "[softmax] attribute 'axis' must be an int, got
// a str", "[softmax] has no attribute 'axsi'; its attributes: axis (an int)". Call and CallInto
// (core/op.cc) put the op's name in front of the errors raised while the op is called.
//
// Note [Declared attributes]
// Each op declares every attribute it has, with its type, in its LOOM_OP definition:
// `def.attrs = {{"axis", kInt}, {"keepdims", kInt}};` (OpDef::attrs): those its wrapper and
// its backward set, those graph passes set on its records (layouts, fusions), and so every key
// that its kernels, backward, passes, dumps or the ONNX exporter read. A record's Attrs are
// bound to its op's declaration where the record meets the op: Call and CallInto (before shape
// inference), Device::Submit, OpList::Append (a graph pass's records), Device::Supports, and a
// kernel's own record (collective kernels, the weight-layout guard); Device::RunKernel asserts
// that a record is bound to its op. Two checks follow:
//   - binding checks each attribute present, and Set on bound Attrs checks the one it sets: a
//     key the op does not declare, or a value of another type, is an AttrError (Note [Attribute
//     types]) listing the attributes the op does have. A misspelt keyword from Python's call_op
//     fails there instead of leaving the default in force. An int is accepted for a float, as
//     Float reads it. Attributes handed to another op (a backward passing the forward's on to
//     its gradient op) are bound to that op first: `ga.Bind(op_kind::slice_grad).Set(...)`.
//   - reading a key the op does not declare (Int, Float, Ints, Str, Has) is a loom bug, found at
//     its first read: an InternalError (LOOM_ASSERT) naming the op and the key. Reading a
//     declared key that is absent returns the default, as before.
// The second check stays off the hot path: bound Attrs hold only declared keys, so a read that
// finds its key needs no check; only a read that misses looks the key up in the declaration
// (kernels read their attributes on every replay). Attrs bound to no op (built by hand in a
// test or a helper, or read back from a dump file) check nothing, as before.
class AttrError : public ValueError {
 public:
  using ValueError::ValueError;
};

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string, AttrValue>> init) : items_(init) {}

  // Binds these attributes to op's declaration and checks them (Note [Declared attributes]);
  // an AttrError "[op] ..." for a key op does not declare or a value of the wrong type.
  Attrs& Bind(const OpDef& op);  // core/op.cc
  const OpDef* op() const { return op_; }  // the op bound to; null: none

  Attrs& Set(const std::string& key, AttrValue v) {
    if (op_) CheckSet(*op_, key, v);
    for (auto& kv : items_)
      if (kv.first == key) { kv.second = std::move(v); return *this; }
    items_.emplace_back(key, std::move(v));
    return *this;
  }
  bool Has(const std::string& key) const { return Lookup(key) != nullptr; }
  int64_t Int(const std::string& key) const { return Get<int64_t>(key); }
  int64_t Int(const std::string& key, int64_t dflt) const {
    const AttrValue* v = Lookup(key);
    return v ? As<int64_t>(key, *v) : dflt;
  }
  double Float(const std::string& key) const { return Number(key, Required(key, "a number")); }
  double Float(const std::string& key, double dflt) const {
    const AttrValue* v = Lookup(key);
    return v ? Number(key, *v) : dflt;
  }
  const std::vector<int64_t>& Ints(const std::string& key) const { return Get<std::vector<int64_t>>(key); }
  const std::string& Str(const std::string& key) const { return Get<std::string>(key); }

  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }
  std::string ToString() const;  // "axis=1, keepdims=0"

 private:
  // What each alternative of AttrValue is called in messages.
  static const char* TypeName(size_t index) {
    static const char* const names[] = {"an int", "a float", "a list of ints", "a str"};
    return names[index];
  }
  const AttrValue* Find(const std::string& key) const {
    for (auto& kv : items_)
      if (kv.first == key) return &kv.second;
    return nullptr;
  }
  // Find, and for a key that is absent from bound attributes, the check that the op declares it
  // (a present key was checked when it was bound or set).
  const AttrValue* Lookup(const std::string& key) const {
    const AttrValue* v = Find(key);
    if (!v && op_) CheckDeclared(*op_, key);
    return v;
  }
  static void CheckDeclared(const OpDef& op, const std::string& key);                   // core/op.cc
  static void CheckSet(const OpDef& op, const std::string& key, const AttrValue& v);  // core/op.cc
  static AttrError WrongType(const std::string& key, const char* want, const AttrValue& v) {
    return AttrError(detail::Cat("attribute '", key, "' must be ", want, ", got ", TypeName(v.index())));
  }
  const AttrValue& Required(const std::string& key, const char* want) const {
    const AttrValue* v = Lookup(key);
    if (!v) throw AttrError(detail::Cat("needs attribute '", key, "' (", want, ")"));
    return *v;
  }
  static double Number(const std::string& key, const AttrValue& v) {
    if (auto* i = std::get_if<int64_t>(&v)) return double(*i);
    if (auto* d = std::get_if<double>(&v)) return *d;
    throw WrongType(key, "a number", v);
  }
  template <typename T>
  static constexpr size_t IndexOf() {
    constexpr size_t index = std::is_same_v<T, int64_t> ? 0 : std::is_same_v<T, double> ? 1
                             : std::is_same_v<T, std::vector<int64_t>> ? 2 : 3;
    static_assert(std::is_same_v<std::variant_alternative_t<index, AttrValue>, T>);
    return index;
  }
  template <typename T>
  static const T& As(const std::string& key, const AttrValue& v) {
    const T* t = std::get_if<T>(&v);
    if (!t) throw WrongType(key, TypeName(IndexOf<T>()), v);
    return *t;
  }
  template <typename T>
  const T& Get(const std::string& key) const {
    return As<T>(key, Required(key, TypeName(IndexOf<T>())));
  }
  std::vector<std::pair<std::string, AttrValue>> items_;
  const OpDef* op_ = nullptr;  // Note [Declared attributes]
};

}  // namespace loom
