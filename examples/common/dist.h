// --dist in loom's programs (loom-mlp, loom-cnn, loom-bench; issue 15): data-parallel training
// over MPI's world, started by tools/launch.sh -n N (alone, a 1-rank world).
//
// Note [--dist in the programs]
// What a program does with --dist, the same in all of them:
//   - --batch is the global batch: rank r trains on rows [r * B/N, (r + 1) * B/N) of each global
//     batch (B must divide by N), so N ranks take the same steps as one rank at batch B;
//   - the optimizer is wrapped in nn::DistOpt (gradients summed over ranks and scaled by 1/N;
//     a captured step all-reduces gradient buckets while backward runs), and rank 0's initial
//     parameters are broadcast (every rank builds them from the same seed anyway);
//   - the loss printed is the mean over ranks of each rank's loss (its shard's mean): the loss
//     of the global batch;
//   - only rank 0 prints and writes files; at the end every rank checks that all ranks hold
//     bitwise the same parameters (a hash of their bytes, all-gathered) and says so.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "core/communicator.h"
#include "io/comm/comm.h"

namespace loom {
namespace examples {

// The rows [first, first + rows) of global batch `step` of a pool of samples (x: n rows of `dim`
// floats, y: n labels): samples (step * batch + first + j) modulo n.
inline void CopyBatchRows(const std::vector<float>& x, const std::vector<int32_t>& y, int64_t dim, int64_t step,
                          int64_t batch, int64_t first, int64_t rows, std::vector<float>& bx,
                          std::vector<int32_t>& by) {
  const int64_t n = int64_t(y.size());
  bx.resize(size_t(rows * dim));
  by.resize(size_t(rows));
  for (int64_t j = 0; j < rows; ++j) {
    const int64_t s = (step * batch + first + j) % n;
    std::copy_n(x.begin() + s * dim, dim, bx.begin() + j * dim);
    by[size_t(j)] = y[size_t(s)];
  }
}

class Dist {
 public:
  // Not distributed: one rank, no communicator.
  Dist() = default;
  // MPI's world (MakeCommunicator("mpi")); throws DeviceError naming what to install without MPI.
  static Dist World() {
    Dist d;
    d.comm_ = MakeCommunicator("mpi");
    d.rank_ = d.comm_->rank();
    d.world_ = d.comm_->size();
    return d;
  }

  bool on() const { return comm_ != nullptr; }
  int rank() const { return rank_; }
  int world() const { return world_; }
  bool root() const { return rank_ == 0; }
  const std::shared_ptr<Communicator>& comm() const { return comm_; }

  // This rank's share of a global batch of `global_batch` samples (a ValueError unless it divides).
  int64_t ShardRows(int64_t global_batch, const char* program) const {
    LOOM_CHECK(global_batch % world_ == 0, ValueError, "[", program, "] --dist: the global batch ", global_batch,
               " does not divide into ", world_, " ranks");
    return global_batch / world_;
  }

  // Rank 0's stream; a stream that writes nothing on the other ranks.
  std::ostream& Out(std::ostream& os) const {
    static std::ostream null(nullptr);
    return root() ? os : null;
  }

  // The mean over ranks of `v` (each rank's value; identity when not distributed).
  double Mean(double v) const {
    if (!on()) return v;
    comm_->AllReduce(&v, 1, DType::kFloat64, ReduceOp::kSum);
    return v / world_;
  }

  // Throws ValueError unless every rank holds bitwise the same `params` (a hash of their bytes,
  // all-gathered); returns the hash.
  uint64_t CheckSameParameters(const std::vector<Tensor>& params, const char* program) const {
    uint64_t h = 1469598103934665603ull;
    for (const Tensor& p : params) {
      const std::vector<float> v = p.ToVector<float>();
      const unsigned char* b = reinterpret_cast<const unsigned char*>(v.data());
      for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ b[i]) * 1099511628211ull;
    }
    if (!on()) return h;
    std::vector<uint64_t> all(static_cast<size_t>(world_));
    comm_->AllGather(&h, all.data(), 1, DType::kInt64);
    std::string hashes;
    bool same = true;
    for (size_t r = 0; r < all.size(); ++r) {
      hashes += detail::Cat(r ? ", " : "", "rank ", r, ": ", all[r]);
      same = same && all[r] == all[0];
    }
    LOOM_CHECK(same, ValueError, "[", program, "] --dist: the ranks' parameters differ after training (hashes ",
               hashes, "): the ranks did not take the same steps");
    return h;
  }

 private:
  std::shared_ptr<Communicator> comm_;
  int rank_ = 0, world_ = 1;
};

}  // namespace examples
}  // namespace loom
