// The op update_group (core/ops/optimizer.cc): what its records share with their members, for
// its shape inference, its kernels (device/optimizer_formulas.h's MembersOf, CUDA's grouped
// launch) and the tests' reference.
#pragma once

#include "core/attrs.h"

namespace loom {

// A member's attributes of an update_group record (Note [Small updates grouped] in
// graph/group_updates.cc): the group's but "of" and "members".
inline Attrs UpdateGroupMemberAttrs(const Attrs& group) {
  Attrs a;
  for (const auto& [key, value] : group.items())
    if (key != "of" && key != "members") a.Set(key, value);
  return a;
}

}  // namespace loom
