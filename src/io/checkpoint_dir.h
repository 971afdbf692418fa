// CheckpointDir: a training run's folder of checkpoints.
//
//   io::CheckpointDir dir("runs/a", /*keep_last=*/3);
//   dir.Save(step, tensors, meta);            // runs/a/step-000000001200.ckpt, then older ones pruned
//   dir.SaveBest(tensors, meta);              // runs/a/best.ckpt
//   std::string latest = dir.Latest();        // the newest step checkpoint, "" when none
//
// Every file is written atomically (Note [Atomic file writes] in core/file.h): a run killed at
// any moment leaves whole checkpoints only, at worst beside a stray temporary file that no
// listing here matches. Pruning happens after a save has succeeded, so the newest keep_last
// step checkpoints always exist; best.ckpt is never pruned.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/checkpoint.h"

namespace loom {
namespace io {

class CheckpointDir {
 public:
  // Creates `dir` (and its parents) when missing. keep_last >= 1.
  CheckpointDir(std::string dir, int keep_last = 3);

  const std::string& dir() const { return dir_; }
  std::string PathFor(int64_t step) const;  // dir/step-<12 digits>.ckpt
  std::string BestPath() const;             // dir/best.ckpt
  // dir/step-<12 digits>.rank-<r>.ckpt: what rank r >= 1 of a data-parallel run keeps of its own
  // at `step` (Note [Checkpoints across ranks] in nn/trainer.h). Steps() does not list these.
  std::string RankPathFor(int64_t step, int rank) const;

  // Writes the checkpoint of `step` and removes all but the newest keep_last step checkpoints.
  std::string Save(int64_t step, const NamedTensors& tensors, const std::map<std::string, double>& meta);
  std::string SaveBest(const NamedTensors& tensors, const std::map<std::string, double>& meta);
  // Removes all but the newest keep_last step checkpoints (after a caller wrote PathFor(step)),
  // and the rank files of steps older than the oldest kept.
  void Prune() const;

  std::vector<int64_t> Steps() const;  // the step checkpoints present, ascending
  std::string Latest() const;          // the newest step checkpoint's path, "" when none
  // The newest step checkpoint strictly before `step` (a run that failed at `step`), "" when none.
  std::string LatestBefore(int64_t step) const;
  // What a new run here would prune or overwrite: the newest step checkpoint, else best.ckpt when
  // it exists (another run's best, even with its step checkpoints gone); "" when neither.
  std::string Existing() const;

 private:
  std::string dir_;
  int keep_last_;
};

}  // namespace io
}  // namespace loom
