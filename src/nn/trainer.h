// Trainer: epochs of a DataLoader through a Model, with a progress bar, evaluation, checkpoints,
// a CSV log, non-finite detection and a resume that continues bitwise.
//
//   nn::Model model(net, std::make_shared<nn::SGD>(0.05, 0.9));
//   model.Compile({ops::Zeros(train.x_shape(64), DType::kFloat32, dev)}, true, /*use_graph=*/true);
//   nn::TrainerOptions o;
//   o.epochs = 8; o.checkpoint_dir = "runs/a"; o.checkpoint_every = 500; o.resume = true;
//   o.csv = "runs/a/log.csv";
//   nn::TrainResult r = nn::Trainer(model, train, &held_out, o).Fit();
//
// Per step the trainer feeds the next batch, runs model.TrainOneBatch and StepMonitor::Record:
// no host read (Note [Non-finite steps are caught on the device]). Every log_every steps (and at
// the end of an epoch) it reads the monitor once: the mean loss since the last read, and the
// first non-finite step, which ends the run with NonFiniteError. Evaluation (Evaluator: its own
// eval-mode graph) and checkpoints follow at their own intervals; a checkpoint is written only
// after a read found every step so far finite.
//
// Note [Bitwise resume]
// A checkpoint holds everything a step reads that changes during a run: the parameters and
// states (BatchNorm running statistics), the optimizer's state (momentum, moments, Adam's step
// count, the learning rate), and the RunState: the step count, the training loader's position
// (its shuffling order is a function of (seed, epoch); its augmentation of (augment_seed, epoch,
// sample): Note [Counter-based augmentation] in io/dataset.h), and the device's Philox key and
// counter (dropout draws: docs/design.md invariant 6). Resuming restores all of them and seeks the
// loader, so steps k+1, k+2, ... read exactly what they read in an uninterrupted run: with the
// same build, mode and threads, the final parameters are bitwise equal. Evaluation changes none
// of it (eval mode updates no statistics and draws no random numbers).
//
// Note [Checkpoints across ranks]
// A model whose optimizer is a DistOpt trains data-parallel, and the trainer takes its rank and
// world size from DistOpt's communicator. Parameters and optimizer state are the same on every
// rank (the update applies all-reduced gradients to parameters broadcast from rank 0); what
// each rank keeps of its own is its model states (BatchNorm's running statistics of its own
// batches) and its run state. So at a checkpoint of step k:
//  1. every rank r >= 1 writes step-k.rank-r.ckpt (its states and run state), atomically;
//  2. the ranks agree that every write succeeded (one all-reduce of a flag: a rank that failed
//     still takes part, so none waits for it; all throw IOError naming the failed ranks);
//  3. rank 0 writes step-k.ckpt, the whole checkpoint, with the world size in its run state,
//     then all agree again and rank 0 prunes (the rank files of pruned steps go too).
// With sharded optimizer state (Note [Sharded optimizer state] in nn/dist_opt.h) each rank's
// optimizer state is its own too: every rank's file holds it (rank 0's in step-k.ckpt), and each
// rank restores it from its own file only.
// step-k.ckpt exists only once every rank file of step k does, so the newest step-k.ckpt is a
// complete checkpoint (and loads alone as a one-rank checkpoint would). Resuming, the ranks
// agree on that step (each lists the folder, which they must share), check its world size
// against theirs (IOError on another: per-rank state cannot be redistributed), and each restores
// step-k.ckpt and, from rank 1 on, its rank file over it. The CSV log and best.ckpt are rank 0's.
// A killed run resumed this way equals an uninterrupted one bitwise, as on one rank.
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/communicator.h"
#include "io/checkpoint.h"
#include "io/checkpoint_dir.h"
#include "io/dataset.h"
#include "nn/evaluate.h"
#include "nn/model.h"
#include "nn/progress.h"
#include "nn/step_monitor.h"

namespace loom {
namespace nn {

// Where a run stands, beyond the model and the optimizer (Note [Bitwise resume]). Saved as
// checkpoint metadata under "run/"; 64-bit seeds and counters as two exact 32-bit halves.
struct RunState {
  int64_t step = 0;               // optimizer steps taken
  io::LoaderPosition position;    // the training loader's next batch
  uint64_t loader_seed = 0, augment_seed = 0;
  uint64_t rng_seed = 0, rng_counter = 0;  // the device's Philox key and counter
  double best_top1 = -1;          // the best held-out top-1 so far (-1: none yet)
  int64_t best_step = 0;
  double seconds = 0;             // training time so far, for the log's time axis
  double loss_sum = 0;            // the step monitor's losses since its last log read, and how many:
  int64_t losses = 0;             // a resumed run's next log row averages the same steps
  int64_t rank = 0, world = 1;    // Note [Checkpoints across ranks] (1 rank when a checkpoint predates it)
  int64_t batch_size = 0;         // the loader's (0: a checkpoint from before it was saved)

  std::map<std::string, double> ToMeta() const;
  // IOError naming `source` when a key is missing or holds a value no RunState has.
  static RunState FromMeta(const std::map<std::string, double>& meta, const std::string& source);
};

// What a RunState records of its training loader, and what resuming checks: any loader with a
// position, seeds and a batch size. An io::DataLoader gives it (FactsOf); Python's
// loom.data.DataLoader, which reads a user's dataset in Python, fills one itself.
struct LoaderFacts {
  int64_t epoch = 0, index = 0;  // the next batch (io::LoaderPosition)
  int64_t batch_size = 0, batches_per_epoch = 0;
  uint64_t seed = 0, augment_seed = 0;
};
LoaderFacts FactsOf(const io::DataLoader& loader);

// The state of a run at `step` whose training data comes from `loader` on `dev`.
RunState CaptureRunState(int64_t step, const LoaderFacts& loader, const Device& dev);
RunState CaptureRunState(int64_t step, const io::DataLoader& loader, const Device& dev);
// IOError when the loader's seeds or batch size differ from the saved ones (another shuffling,
// augmentation or batching would not continue the run) or the position lies outside its epochs.
void CheckRunState(const RunState& s, const LoaderFacts& loader, const std::string& source);
void CheckRunState(const RunState& s, const io::DataLoader& loader, const std::string& source);
// CheckRunState, then sets the device's generator; the loader seeks to s.position itself.
void ApplyRngState(const RunState& s, const LoaderFacts& loader, Device& dev, const std::string& source);
// CheckRunState, then seeks the loader and sets the device's generator.
void ApplyRunState(const RunState& s, io::DataLoader& loader, Device& dev, const std::string& source);

// The CSV log of a run, one row per log point and per evaluation:
//   step,epoch,seconds,lr,train_loss,ms_per_step,items_per_s,eval_loss,eval_top1,eval_top5
// (a log row leaves the eval columns empty and an evaluation row the training ones). Each row is
// flushed as it is written, so a killed run keeps its log; a resumed run keeps the rows up to its
// checkpoint's step and writes the later ones anew, so the log reads as an uninterrupted run's.
// tools/plot_training.py draws it.
class TrainingLog {
 public:
  // Opens `path`: a fresh log, or with resume_step > 0 the existing one cut after that step.
  TrainingLog(std::string path, int64_t resume_step);
  void Train(int64_t step, double epoch, double seconds, double lr, double loss, double ms_per_step,
             double items_per_s);
  void Eval(int64_t step, double epoch, double seconds, const EvalResult& r);
  static const char* Header();

 private:
  void Row(int64_t step, double epoch, double seconds, const std::string& rest);
  std::string path_;
  std::ofstream out_;
};

struct TrainerOptions {
  int64_t epochs = 1;
  int64_t max_steps = 0;          // > 0: stop after this many steps in all, even mid-epoch
  int64_t log_every = 50;         // steps between reads of the loss and the non-finite flag
  int64_t eval_every = 0;         // steps between evaluations; 0: at the end of each epoch
  bool eval_at_start = false;     // also evaluate the untrained network (not when resuming)
  int64_t checkpoint_every = 0;   // steps between checkpoints; 0: at the end of each epoch
  int keep_last = 3;              // step checkpoints kept (plus best.ckpt)
  std::string checkpoint_dir;     // empty: no checkpoints
  bool resume = false;            // start from checkpoint_dir's newest checkpoint, if any
  std::string csv;                // the log of every metric; empty: none
  bool progress = true;           // the bar (drawn only on a terminal)
  bool verbose = true;            // a line per evaluation (and on resume)
  // After each evaluation: the step, the mean training loss of the last read (NaN before the
  // first step) and the result.
  std::function<void(int64_t step, double train_loss, const EvalResult&)> on_eval;
  // After the last step of epoch `epoch` (1-based), its log and evaluation, before its
  // checkpoint: what it changes (the learning rate) is saved with the epoch.
  std::function<void(int64_t epoch)> on_epoch_end;
};

struct TrainResult {
  int64_t steps = 0;              // steps taken, in all
  int64_t resumed_from = -1;      // the step the run resumed at (-1: it started afresh)
  double train_loss = 0;          // mean loss since the previous read
  EvalResult eval;                // the last evaluation (samples 0: none)
  double best_top1 = -1;
  int64_t best_step = 0;
  double seconds = 0;
};

class Trainer {
 public:
  // The model is compiled; `held_out` may be null (no evaluation). Both loaders outlive the
  // trainer. The training loader gives whole batches of one shape (drop_last) in graph mode.
  Trainer(Model& model, io::DataLoader& train, io::DataLoader* held_out = nullptr, TrainerOptions options = {});
  ~Trainer();

  TrainResult Fit();

  // The checkpoint's content: parameters, states, optimizer and RunState (Note [Bitwise resume]).
  void Save(const std::string& path);
  // Restores a checkpoint written by Save (everything checked before anything changes).
  void Restore(const std::string& path);
  int64_t step() const { return step_; }

 private:
  bool NextBatch();
  void Log();
  void Eval();
  void Checkpoint();
  void CheckFinite();  // one read of the monitor; NonFiniteError when a step was bad
  void ThrowIfBad(const StepMonitor::Reading& r);
  io::NamedTensors StateTensors();
  RunState CurrentRunState(const StepMonitor::Reading& r);
  double Seconds() const;
  // The protocol of Note [Checkpoints across ranks]:
  void SaveRankFile(const std::string& path);
  void RestoreRankFile(const std::string& path);
  void CheckAllRanks(bool ok, const char* what);  // IOError on every rank when one was not ok
  void OnEveryRank(const char* what, const std::function<void()>& f);
  int64_t AgreedLatestStep();
  std::string ResumePath();  // the agreed newest checkpoint, restored; "" when none

  Model& model_;
  std::shared_ptr<Device> dev_;  // the parameters'
  io::DataLoader& train_;
  io::DataLoader* held_out_;
  TrainerOptions opt_;
  Communicator* comm_ = nullptr;  // a DistOpt's: Note [Checkpoints across ranks]
  int rank_ = 0, world_ = 1;
  bool sharded_ = false;  // the DistOpt keeps 1/N of the optimizer state per rank
  std::unique_ptr<StepMonitor> monitor_;
  std::unique_ptr<Evaluator> evaluator_;
  std::unique_ptr<io::CheckpointDir> dir_;
  std::unique_ptr<ProgressBar> bar_;
  std::unique_ptr<TrainingLog> log_;
  Tensor x_, y_;
  int64_t step_ = 0, batch_ = 0, last_eval_step_ = -1, last_log_step_ = 0;
  double seconds_before_ = 0;  // training time of the run before it resumed
  double last_loss_ = 0;
  std::string fields_;  // the bar's text after the count: timing, loss and rate of the last read
  double best_top1_ = -1;
  int64_t best_step_ = 0;
  EvalResult last_eval_;
  std::chrono::steady_clock::time_point start_, last_log_time_;
};

}  // namespace nn
}  // namespace loom
