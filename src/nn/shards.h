// The buckets of a DistOpt with sharded optimizer state (Note [Sharded optimizer state] in
// nn/dist_opt.h): which parameters share a bucket, where each lies in it, this rank's slot of
// it, and the two collectives that surround this rank's updates.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/collective.h"
#include "core/tensor.h"

namespace loom {
namespace nn {

// One parameter's piece in this rank's slot: views of the parameter (its own block, so a graph
// sees the parameter written) and of the reduced gradient, the same length, one-dimensional.
struct ShardPiece {
  Tensor param, grad;
  std::string key;  // the state key the caller gave with the gradient ("" : by storage)
  int ndim = 0;     // the whole parameter's dimensions
};

class GradientShards {
 public:
  // comm: the registry id; bucket_bytes: a bucket closes when its gradients reach this size.
  GradientShards(int comm, int rank, int size, size_t bucket_bytes);
  // Parameters get memory of their own again (their buckets go).
  ~GradientShards();
  GradientShards(const GradientShards&) = delete;
  GradientShards& operator=(const GradientShards&) = delete;

  // `grad`, final for this step, goes into its bucket (a copy op). Returns the buckets whose
  // gradients are now all in and reduce-scattered (in place: this rank's slot holds the sums).
  std::vector<int> Add(const Tensor& param, const Tensor& grad, const std::string& key, Compression wire);
  // The end of a step: the bucket still open is laid out, and every bucket that received a
  // gradient this step and has not been reduce-scattered is, now. Returns those buckets.
  std::vector<int> Close(Compression wire);
  // This rank's pieces of bucket b's parameters that received a gradient this step.
  std::vector<ShardPiece> Pieces(int b) const;
  // Every rank's updated slot of bucket b's parameters to every rank (in place), and b is
  // ready for the next step.
  void Gather(int b);

  // Whether every rank has a piece in one of `buckets` (the same answer on every rank).
  bool EveryRankHasPieces(const std::vector<int>& buckets) const;
  // A step that failed half way: what it handed over is dropped (an open bucket with it).
  void Abandon();

  // Bytes of this rank's slots over all buckets, and of all buckets (state bytes scale with the
  // first; a DistOpt without sharding keeps state of the second's size).
  size_t slot_bytes() const;
  size_t bucket_bytes_total() const;
  int num_buckets() const { return int(buckets_.size()); }

 private:
  struct Member {
    Tensor param;    // the whole parameter
    int64_t at = 0;  // its first element in the bucket
    std::string key;
    bool arrived = false;  // this step
  };
  struct Bucket {
    std::vector<Member> members;
    int64_t slot = 0;  // elements per rank; 0 until laid out
    Tensor grads, params;  // (size * slot) each, persistent
    std::vector<std::pair<Tensor, std::string>> waiting;  // gradients that came before the layout
    int arrived = 0;
    bool reduced = false;  // this step
  };

  void LayOut(Bucket& b);
  void Store(Bucket& b, Member& m, const Tensor& grad);
  bool Complete(const Bucket& b) const;
  void Reduce(Bucket& b, Compression wire);

  int comm_, rank_, size_;
  size_t cap_;
  std::vector<Bucket> buckets_;  // the last one open (not laid out) while it collects
  std::map<const Block*, std::pair<int, int>> where_;  // parameter block -> (bucket, member)
};

}  // namespace nn
}  // namespace loom
