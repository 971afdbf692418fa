// Attrs' checks against a declaration (Note [Declared attributes] in attrs.h) and its printing.
// Apart from op.cc: the parsers' fuzz targets (tools/fuzz) read and write attributes without the
// op registry.
#include "core/attrs.h"

#include <sstream>

#include "core/op.h"
#include "core/shape.h"

namespace loom {

std::string Attrs::ToString() const {
  std::ostringstream o;
  bool first = true;
  for (auto& kv : items_) {
    o << (first ? "" : ", ") << kv.first << "=";
    first = false;
    if (auto* i = std::get_if<int64_t>(&kv.second)) o << *i;
    else if (auto* d = std::get_if<double>(&kv.second)) o << *d;
    else if (auto* s = std::get_if<std::string>(&kv.second)) o << *s;
    else o << loom::ToString(std::get<std::vector<int64_t>>(kv.second));
  }
  return o.str();
}

const AttrDecl* FindAttrDecl(const OpDef& op, const std::string& key) {
  for (const AttrDecl& d : op.attrs)
    if (d.key == key) return &d;
  return nullptr;
}

namespace {

// "stride (a list of ints), groups (an int)", for messages.
std::string DescribeDecls(const OpDef& op) {
  static const char* const names[] = {"an int", "a number", "a list of ints", "a str"};
  std::string s;
  for (const AttrDecl& d : op.attrs) s += detail::Cat(s.empty() ? "" : ", ", d.key, " (", names[int(d.type)], ")");
  return s;
}
}  // namespace

void Attrs::CheckSet(const OpDef& op, const std::string& key, const AttrValue& v) {
  const AttrDecl* d = FindAttrDecl(op, key);
  if (!d) {
    if (op.attrs.empty()) throw AttrError(detail::Cat("[", op.name, "] has no attribute '", key, "'; it takes none"));
    throw AttrError(detail::Cat("[", op.name, "] has no attribute '", key, "'; its attributes: ", DescribeDecls(op)));
  }
  // A float attribute takes an int too, as Float reads it.
  const bool ok = size_t(d->type) == v.index() || (d->type == AttrType::kFloat && v.index() == 0);
  if (!ok) {
    const char* want = d->type == AttrType::kFloat ? "a number" : TypeName(size_t(d->type));
    throw AttrError(detail::Cat("[", op.name, "] ", WrongType(key, want, v).what()));
  }
}

void Attrs::CheckDeclared(const OpDef& op, const std::string& key) {
  const bool declared = FindAttrDecl(op, key) != nullptr;
  LOOM_ASSERT(declared, "[", op.name, "] reads attribute '", key,
              "', which the op does not declare (Note [Declared attributes]); it declares: ",
              op.attrs.empty() ? "none" : DescribeDecls(op));
}

Attrs& Attrs::Bind(const OpDef& op) {
  for (const auto& kv : items_) CheckSet(op, kv.first, kv.second);
  op_ = &op;
  return *this;
}

}  // namespace loom
