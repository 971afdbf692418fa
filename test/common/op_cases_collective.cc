// Op-case rows of the collectives (all-reduce, all-gather, broadcast, reduce-scatter, gather of shards) (Note [The op-case table] in op_cases.h). On a 1-rank
// in-process communicator an all-reduce is `scale` times its input, so the table's checks apply
// as to any op: forward against that, backward (Note [A differentiable all-reduce]) against
// finite differences, graph replay, another device. Several ranks: test/dist.
#include "common/op_case_table.h"
#include "core/comm_registry.h"
#include "io/comm/inproc.h"

namespace loom {
namespace test {
namespace table {

void AddCollectiveCases(Table& t) {
  static const int kOneRank = RegisterCommunicator(MakeInProcGroup(1)[0]);
  auto scaled = [](const RefArgs& a) {
    HostTensor y = a.in[0];
    for (double& v : y.v) v *= a.attrs.Float("scale");
    return std::vector<HostTensor>{y, a.in[1]};
  };
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    t.Add("allreduce", "sum, 1 rank, scale 2", dt, scaled)
        .In(Uniform({3, 4}))
        .In(Values({1}, {0}, DType::kInt64))
        .Attr("comm", int64_t(kOneRank))
        .Attr("reduce", int64_t(0))
        .Attr("scale", 2.0)
        .Attr("compress", int64_t(0))
        .Exact();
    // One rank: the gathered tensor is the input with a leading dimension of 1, and a broadcast
    // from rank 0 leaves its buffer as it was.
    t.Add("allgather", "1 rank", dt,
          [](const RefArgs& a) {
            HostTensor y = a.in[0];
            y.shape.insert(y.shape.begin(), 1);
            return std::vector<HostTensor>{y, a.in[1]};
          })
        .In(Uniform({3, 4}))
        .In(Values({1}, {0}, DType::kInt64))
        .Attr("comm", int64_t(kOneRank))
        .Attr("size", int64_t(1))
        .Exact();
    // One rank: a reduce-scatter's one slot is the sum of one rank (the buffer), and gathering
    // one slot leaves the buffer as it was (Note [Sharded optimizer state]).
    auto same = [](const RefArgs& a) { return std::vector<HostTensor>{a.in[0], a.in[1]}; };
    t.Add("reducescatter", "sum, 1 rank", dt, same)
        .In(Uniform({12}))
        .In(Values({1}, {0}, DType::kInt64))
        .Attr("comm", int64_t(kOneRank))
        .Attr("size", int64_t(1))
        .Attr("reduce", int64_t(0))
        .Attr("compress", int64_t(0))
        .Into({0, 1})
        .Exact();
    t.Add("allgather_shards", "1 rank", dt, same)
        .In(Uniform({12}))
        .In(Values({1}, {0}, DType::kInt64))
        .Attr("comm", int64_t(kOneRank))
        .Attr("size", int64_t(1))
        .Into({0, 1})
        .Exact();
    t.Add("broadcast", "1 rank, root 0", dt, [](const RefArgs& a) { return std::vector<HostTensor>{a.in[0], a.in[1]}; })
        .In(Uniform({2, 5}))
        .In(Values({1}, {0}, DType::kInt64))
        .Attr("comm", int64_t(kOneRank))
        .Attr("root", int64_t(0))
        .Into({0, 1})
        .Exact();
  }
}

}  // namespace table
}  // namespace test
}  // namespace loom
