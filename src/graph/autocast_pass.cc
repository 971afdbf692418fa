// The passes autocast_bf16 and autocast_fp16: Note [Precision policy] (core/autocast.h) on a
// captured list.
#include <limits>
#include <map>
#include <tuple>

#include "core/autocast.h"
#include "graph/op_uses.h"

namespace loom {

namespace {

// A lowered copy is reused while its source view is unwritten: keyed by the view (ViewOf).

// casts: the counter of the casts the pass made ("bf16_casts", "fp16_casts"); products: of the
// products it lowered.
PassResult LowerProducts(OpList list, Precision p, const char* products_counter, const char* casts_counter) {
  std::vector<OpRecord> out;
  out.reserve(list.size());
  std::map<ViewKey, Tensor> lowered;
  int64_t products = 0, casts = 0;
  auto written = [&](const OpRecord& r) {  // a copy of a block written since is stale
    for (const Tensor& t : r.outputs) {  // the views of one block are adjacent in the map
      auto it = lowered.lower_bound(ViewKey{t.block(), std::numeric_limits<int64_t>::min(), Shape{}, Shape{}});
      while (it != lowered.end() && std::get<0>(it->first) == t.block()) it = lowered.erase(it);
    }
  };
  for (OpRecord& op : list.ops) {
    if (!Lowers(op, p)) {
      written(op);
      out.push_back(std::move(op));
      continue;
    }
    std::vector<OpRecord> recs = Lower(op, p, [&](const Tensor& src) {
      auto it = lowered.find(ViewOf(src));
      return it == lowered.end() ? Tensor() : it->second;
    });
    ++products;
    for (OpRecord& r : recs) {
      if (r.def != op.def) {  // a cast: remember it for the later products reading the same view
        ++casts;
        lowered[ViewOf(r.inputs[0])] = r.outputs[0];
      }
      written(r);
      out.push_back(std::move(r));
    }
  }
  PassResult r{Rebuild(std::move(out), list)};
  r.counters.Add(products_counter, products);
  r.counters.Add(casts_counter, casts);
  return r;
}

PassResult LowerToBf16(OpList list, const PassContext&) {
  return LowerProducts(std::move(list), Precision::kBFloat16, "lowered_products", "bf16_casts");
}
PassResult LowerToFp16(OpList list, const PassContext&) {
  return LowerProducts(std::move(list), Precision::kFloat16, "fp16_lowered_products", "fp16_casts");
}

}  // namespace

LOOM_PASS(PassDef{"autocast_bf16", 5, kAllDevices, false, LowerToBf16,
                  "float32 matmuls, and convolutions, their gradients and attention over a packed qkv where the device "
                  "has bf16 ones, computed from bfloat16 operands with float32 results, each operand cast once while "
                  "unwritten (Note [Precision policy]); off unless the precision is bf16",
                  {{"lowered_products", "the matmuls, convolutions and attentions computed from bfloat16 operands"},
                   {"bf16_casts", "the casts to bfloat16 the pass made"}}});
// After autocast_bf16: with both on, bf16 has lowered every product and this one finds none.
LOOM_PASS(PassDef{"autocast_fp16", 6, kAllDevices, false, LowerToFp16,
                  "float32 matmuls computed from float16 operands with float32 results, each operand cast once "
                  "while unwritten (Note [Precision policy]); off unless the precision is fp16",
                  {{"fp16_lowered_products", "the matmuls computed from float16 operands"},
                   {"fp16_casts", "the casts to float16 the pass made"}}});

}  // namespace loom
