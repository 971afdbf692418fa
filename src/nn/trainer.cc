#include "nn/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "core/file.h"
#include "core/ops.h"
#include "core/device.h"
#include "nn/dist_opt.h"
#include "nn/optimizer_checkpoint.h"

namespace loom {
namespace nn {

// ---- RunState ----

namespace {

void PutU64(std::map<std::string, double>* meta, const std::string& key, uint64_t v) {
  (*meta)[key + "_hi"] = double(v >> 32);
  (*meta)[key + "_lo"] = double(v & 0xffffffffull);
}

double Need(const std::map<std::string, double>& meta, const std::string& key, const std::string& source) {
  auto it = meta.find(key);
  LOOM_CHECK(it != meta.end(), IOError, "[trainer] '", source, "' holds no '", key,
             "': not a checkpoint of a Trainer (nn::Trainer, loom.trainer.Trainer)");
  return it->second;
}

// A whole number in [0, limit], or IOError.
double Whole(const std::map<std::string, double>& meta, const std::string& key, const std::string& source,
             double limit) {
  double v = Need(meta, key, source);
  LOOM_CHECK(v >= 0 && v <= limit && v == std::floor(v), IOError, "[trainer] '", source, "': '", key, "' is ", v,
             ", not a whole number in [0, ", limit, "]");
  return v;
}

uint64_t GetU64(const std::map<std::string, double>& meta, const std::string& key, const std::string& source) {
  return (uint64_t(Whole(meta, key + "_hi", source, 4294967295.0)) << 32) |
         uint64_t(Whole(meta, key + "_lo", source, 4294967295.0));
}

}  // namespace

std::map<std::string, double> RunState::ToMeta() const {
  std::map<std::string, double> m;
  m["run/step"] = double(step);
  m["run/epoch"] = double(position.epoch);
  m["run/index"] = double(position.index);
  PutU64(&m, "run/loader_seed", loader_seed);
  PutU64(&m, "run/augment_seed", augment_seed);
  PutU64(&m, "run/rng_seed", rng_seed);
  PutU64(&m, "run/rng_counter", rng_counter);
  m["run/best_top1"] = best_top1;
  m["run/best_step"] = double(best_step);
  m["run/seconds"] = seconds;
  m["run/loss_sum"] = loss_sum;
  m["run/losses"] = double(losses);
  m["run/rank"] = double(rank);
  m["run/world"] = double(world);
  m["run/batch_size"] = double(batch_size);
  return m;
}

RunState RunState::FromMeta(const std::map<std::string, double>& meta, const std::string& source) {
  constexpr double kMax = 9.0e15;  // exact in a double
  RunState s;
  s.step = int64_t(Whole(meta, "run/step", source, kMax));
  s.position.epoch = int64_t(Whole(meta, "run/epoch", source, kMax));
  s.position.index = int64_t(Whole(meta, "run/index", source, kMax));
  s.loader_seed = GetU64(meta, "run/loader_seed", source);
  s.augment_seed = GetU64(meta, "run/augment_seed", source);
  s.rng_seed = GetU64(meta, "run/rng_seed", source);
  s.rng_counter = GetU64(meta, "run/rng_counter", source);
  s.best_top1 = Need(meta, "run/best_top1", source);
  s.best_step = int64_t(Whole(meta, "run/best_step", source, kMax));
  s.seconds = Need(meta, "run/seconds", source);
  s.loss_sum = Need(meta, "run/loss_sum", source);
  s.losses = int64_t(Whole(meta, "run/losses", source, kMax));
  // Note [Checkpoints across ranks]: absent in checkpoints written before ranks were recorded.
  if (meta.count("run/world")) {
    s.rank = int64_t(Whole(meta, "run/rank", source, 1e6));
    s.world = int64_t(Whole(meta, "run/world", source, 1e6));
    LOOM_CHECK(s.world >= 1 && s.rank < s.world, IOError, "[trainer] '", source, "': rank ", s.rank, " of a world of ",
               s.world, " ranks");
  }
  // Checkpoints written before the batch size was saved lack it: 0, unchecked.
  if (meta.count("run/batch_size")) s.batch_size = int64_t(Whole(meta, "run/batch_size", source, kMax));
  LOOM_CHECK(s.best_top1 == -1 || (s.best_top1 >= 0 && s.best_top1 <= 1), IOError, "[trainer] '", source,
             "': 'run/best_top1' is ", s.best_top1, ", not an accuracy");
  return s;
}

LoaderFacts FactsOf(const io::DataLoader& loader) {
  LoaderFacts f;
  f.epoch = loader.position().epoch;
  f.index = loader.position().index;
  f.batch_size = loader.options().batch_size;
  f.batches_per_epoch = loader.batches_per_epoch();
  f.seed = loader.options().seed;
  f.augment_seed = loader.options().augment_seed;
  return f;
}

RunState CaptureRunState(int64_t step, const LoaderFacts& loader, const Device& dev) {
  RunState s;
  s.step = step;
  s.position = {loader.epoch, loader.index};
  s.batch_size = loader.batch_size;
  s.loader_seed = loader.seed;
  s.augment_seed = loader.augment_seed;
  s.rng_seed = dev.rng_seed();
  s.rng_counter = dev.rng_counter();
  return s;
}

RunState CaptureRunState(int64_t step, const io::DataLoader& loader, const Device& dev) {
  return CaptureRunState(step, FactsOf(loader), dev);
}

void CheckRunState(const RunState& s, const LoaderFacts& o, const std::string& source) {
  LOOM_CHECK(o.seed == s.loader_seed && o.augment_seed == s.augment_seed, IOError, "[trainer] '", source,
             "' was saved by a run whose loader had seed ", s.loader_seed, " and augment_seed ", s.augment_seed,
             "; this loader has ", o.seed, " and ", o.augment_seed, ": it would not continue that run");
  // The position counts batches: with another batch size, batch i of the epoch is other samples.
  LOOM_CHECK(s.batch_size == 0 || s.batch_size == o.batch_size, IOError, "[trainer] '", source,
             "' was saved by a run whose loader had batch_size ", s.batch_size, "; this loader has ", o.batch_size,
             ": its position (epoch ", s.position.epoch, ", batch ", s.position.index, ") would not continue that run");
  LOOM_CHECK(s.position.index <= o.batches_per_epoch, IOError, "[trainer] '", source, "' stands at batch ",
             s.position.index, " of an epoch; this loader has ", o.batches_per_epoch, " batches an epoch");
}

void CheckRunState(const RunState& s, const io::DataLoader& loader, const std::string& source) {
  CheckRunState(s, FactsOf(loader), source);
}

void ApplyRngState(const RunState& s, const LoaderFacts& loader, Device& dev, const std::string& source) {
  CheckRunState(s, loader, source);
  dev.SetRandSeed(s.rng_seed);
  dev.AdvanceRng(s.rng_counter);
}

void ApplyRunState(const RunState& s, io::DataLoader& loader, Device& dev, const std::string& source) {
  ApplyRngState(s, FactsOf(loader), dev, source);
  loader.Seek(s.position.epoch, s.position.index);
}

// ---- TrainingLog ----

namespace {
std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
}  // namespace

const char* TrainingLog::Header() {
  return "step,epoch,seconds,lr,train_loss,ms_per_step,items_per_s,eval_loss,eval_top1,eval_top5\n";
}

TrainingLog::TrainingLog(std::string path, int64_t resume_step) : path_(std::move(path)) {
  std::string keep = Header();
  if (resume_step > 0) {  // the rows up to the checkpoint's step stay, later ones are redone
    std::string old;
    try {
      old = ReadFile(path_, "trainer");
    } catch (const IOError&) {  // no log yet: a fresh one
    }
    std::istringstream in(old);
    std::string line;
    for (bool header = true; std::getline(in, line); header = false) {
      if (header || line.empty()) continue;
      // A whole row (a run killed mid-write may have left half of one) of a step up to the resume's.
      const std::string step = line.substr(0, line.find(','));
      const bool whole = std::count(line.begin(), line.end(), ',') == 9;
      if (whole && !step.empty() && step.size() < 16 && step.find_first_not_of("0123456789") == std::string::npos &&
          std::stoll(step) <= resume_step)
        keep += line + "\n";
    }
  }
  WriteFileAtomic(path_, {keep}, "trainer");
  out_.open(path_, std::ios::app);
  LOOM_CHECK(bool(out_), IOError, "[trainer] cannot write '", path_, "'");
}

void TrainingLog::Row(int64_t step, double epoch, double seconds, const std::string& rest) {
  out_ << step << ',' << Fmt("%.4f", epoch) << ',' << Fmt("%.3f", seconds) << ',' << rest << '\n';
  out_.flush();  // a killed run keeps its log up to here
  LOOM_CHECK(bool(out_), IOError, "[trainer] writing '", path_, "' failed");
}

void TrainingLog::Train(int64_t step, double epoch, double seconds, double lr, double loss, double ms_per_step,
                        double items_per_s) {
  Row(step, epoch, seconds,
      detail::Cat(Fmt("%.6g", lr), ',', Fmt("%.6g", loss), ',', Fmt("%.4g", ms_per_step), ',',
                  Fmt("%.4g", items_per_s), ",,,"));
}

void TrainingLog::Eval(int64_t step, double epoch, double seconds, const EvalResult& r) {
  Row(step, epoch, seconds,
      detail::Cat(",,,,", Fmt("%.6g", r.loss), ',', Fmt("%.6g", r.top1), ',', Fmt("%.6g", r.top5)));
}

// ---- Trainer ----

Trainer::Trainer(Model& model, io::DataLoader& train, io::DataLoader* held_out, TrainerOptions options)
    : model_(model), train_(train), held_out_(held_out), opt_(std::move(options)) {
  LOOM_CHECK(model_.compiled(), GraphError, "[trainer] the model is not compiled: call Compile first");
  LOOM_CHECK(opt_.epochs >= 1 || opt_.max_steps >= 1, ValueError, "[trainer] epochs ", opt_.epochs,
             " and max_steps ", opt_.max_steps, ": one of them must be positive");
  LOOM_CHECK(opt_.log_every >= 1, ValueError, "[trainer] log_every ", opt_.log_every, " must be positive");
  LOOM_CHECK(opt_.eval_every >= 0 && opt_.checkpoint_every >= 0, ValueError,
             "[trainer] eval_every and checkpoint_every must be >= 0 (0: at each epoch's end)");
  LOOM_CHECK(!opt_.resume || !opt_.checkpoint_dir.empty(), ValueError, "[trainer] resume needs a checkpoint_dir");
  const int64_t batch = train_.options().batch_size;
  LOOM_CHECK(!model_.use_graph() || train_.options().drop_last || train_.samples_per_epoch() % batch == 0, ValueError,
             "[trainer] a graph-mode model trains on batches of one shape: give the training loader drop_last (",
             train_.samples_per_epoch(), " samples are not a multiple of the batch ", batch, ")");
  if (!opt_.checkpoint_dir.empty()) dir_ = std::make_unique<io::CheckpointDir>(opt_.checkpoint_dir, opt_.keep_last);
  if (auto* dist = dynamic_cast<DistOpt*>(&model_.optimizer())) {  // Note [Checkpoints across ranks]
    comm_ = &dist->communicator();
    rank_ = comm_->rank();
    world_ = comm_->size();
    sharded_ = dist->sharded();
  }
  if (held_out_) evaluator_ = std::make_unique<Evaluator>(model_);
  batch_ = train_.options().batch_size;
  NamedTensors params = model_.Params();
  LOOM_CHECK(!params.empty(), ValueError, "[trainer] the model has no parameters");
  dev_ = params[0].second.device_ptr();
  monitor_ = std::make_unique<StepMonitor>(dev_, params, model_.use_graph(), model_.graph_options());
}

Trainer::~Trainer() = default;

double Trainer::Seconds() const {
  return seconds_before_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

io::NamedTensors Trainer::StateTensors() {
  io::NamedTensors t = model_.Params();
  for (auto& kv : model_.States()) t.push_back(kv);
  return t;
}

RunState Trainer::CurrentRunState(const StepMonitor::Reading& r) {
  RunState s = CaptureRunState(step_, train_, *dev_);
  s.best_top1 = best_top1_;
  s.best_step = best_step_;
  s.seconds = Seconds();
  s.loss_sum = r.loss_sum;
  s.losses = r.losses;
  s.rank = rank_;
  s.world = world_;
  return s;
}

void Trainer::Save(const std::string& path) {
  StepMonitor::Reading r = monitor_->Read(/*restart_loss_sum=*/false);
  ThrowIfBad(r);  // Note [Non-finite steps are caught on the device]: only good states are saved
  io::NamedTensors tensors = StateTensors();
  std::map<std::string, double> meta = CurrentRunState(r).ToMeta();
  nn::AddOptimizerState(model_.optimizer(), &tensors, &meta);
  io::SaveCheckpoint(path, tensors, meta);
}

void Trainer::Restore(const std::string& path) {
  io::Checkpoint ck = io::LoadCheckpoint(path);
  // Note [Check everything, then copy] in io/checkpoint.h: every check before the first write.
  io::NamedTensors targets = StateTensors();
  io::CheckRestoreInto(ck, targets);
  // Sharded, rank 0's optimizer state is rank 0's alone: the others take theirs from their files.
  const bool own_optimizer_state = !sharded_ || rank_ == 0;
  if (own_optimizer_state) nn::CheckOptimizerState(ck, model_.optimizer());
  RunState s = RunState::FromMeta(ck.meta, path);
  LOOM_CHECK(s.world == world_, IOError, "[trainer] '", path, "' was written by a run of ", s.world, " rank(s); this ",
             "run has ", world_, ": resume it with ", s.world, " (each rank's BatchNorm statistics and run state ",
             "cannot be redistributed)");
  CheckRunState(s, train_, path);
  io::RestoreInto(ck, targets);
  if (own_optimizer_state) nn::RestoreOptimizerState(ck, model_.optimizer(), dev_);
  ApplyRunState(s, train_, *dev_, path);
  monitor_->SetSteps(s.step, s.loss_sum, s.losses);
  step_ = last_log_step_ = s.step;
  best_top1_ = s.best_top1;
  best_step_ = s.best_step;
  seconds_before_ = s.seconds;
}

// ---- Note [Checkpoints across ranks] ----

void Trainer::SaveRankFile(const std::string& path) {
  StepMonitor::Reading r = monitor_->Read(/*restart_loss_sum=*/false);
  ThrowIfBad(r);
  io::NamedTensors tensors = model_.States();
  std::map<std::string, double> meta = CurrentRunState(r).ToMeta();
  if (sharded_) nn::AddOptimizerState(model_.optimizer(), &tensors, &meta);
  io::SaveCheckpoint(path, tensors, meta);
}

// Over what Restore put there from rank 0's checkpoint: this rank's states and run state.
void Trainer::RestoreRankFile(const std::string& path) {
  io::Checkpoint ck = io::LoadCheckpoint(path);
  io::NamedTensors targets = model_.States();
  io::CheckRestoreInto(ck, targets);
  if (sharded_) nn::CheckOptimizerState(ck, model_.optimizer());
  RunState s = RunState::FromMeta(ck.meta, path);
  LOOM_CHECK(s.rank == rank_ && s.world == world_ && s.step == step_, IOError, "[trainer] '", path, "' holds rank ",
             s.rank, " of ", s.world, " at step ", s.step, "; expected rank ", rank_, " of ", world_, " at step ", step_);
  CheckRunState(s, train_, path);
  io::RestoreInto(ck, targets);
  if (sharded_) nn::RestoreOptimizerState(ck, model_.optimizer(), dev_);
  ApplyRunState(s, train_, *dev_, path);
  monitor_->SetSteps(s.step, s.loss_sum, s.losses);
}

// One all-reduce of a host number over the ranks (through the device for a device communicator).
static double ReduceOverRanks(Communicator& comm, const std::shared_ptr<Device>& dev, double v, ReduceOp op) {
  if (!comm.on_device()) {
    comm.AllReduce(&v, 1, DType::kFloat64, op);
    return v;
  }
  Tensor t = ops::FromVector(std::vector<double>{v}, {1}, dev);
  comm.AllReduce(t.raw_data(), 1, DType::kFloat64, op);
  return t.ToVector<double>()[0];
}

void Trainer::CheckAllRanks(bool ok, const char* what) {
  const double failed = ReduceOverRanks(*comm_, dev_, ok ? 0.0 : std::ldexp(1.0, rank_ % 52), ReduceOp::kSum);
  if (failed == 0) return;
  std::string ranks;
  for (int r = 0; r < std::min(world_, 52); ++r)
    if (std::fmod(std::floor(failed / std::ldexp(1.0, r)), 2.0) == 1.0) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  throw IOError(detail::Cat("[trainer] ", what, " failed on rank(s) ", ranks.empty() ? "(52 and above)" : ranks,
                            " of ", world_, " (see each rank's own error)"));
}

// The newest step checkpoint every rank sees; IOError on every rank when they see different ones.
int64_t Trainer::AgreedLatestStep() {
  std::vector<int64_t> steps = dir_->Steps();
  const double mine = steps.empty() ? -1.0 : double(steps.back());
  const double hi = ReduceOverRanks(*comm_, dev_, mine, ReduceOp::kMax);
  const double lo = -ReduceOverRanks(*comm_, dev_, -mine, ReduceOp::kMax);
  LOOM_CHECK(hi == lo, IOError, "[trainer] the ranks see different newest checkpoints in '", dir_->dir(), "' (steps ",
             int64_t(lo), " to ", int64_t(hi), "): a data-parallel run's checkpoint folder must be one they share");
  return int64_t(hi);
}

// Runs f on this rank; then the ranks agree that it succeeded everywhere. A rank where it threw
// rethrows its own exception; the others throw IOError naming the ranks that failed.
void Trainer::OnEveryRank(const char* what, const std::function<void()>& f) {
  std::exception_ptr mine;
  try {
    f();
  } catch (const Error&) {
    mine = std::current_exception();
  }
  try {
    CheckAllRanks(!mine, what);
  } catch (const IOError&) {
    if (mine) std::rethrow_exception(mine);
    throw;
  }
}

std::string Trainer::ResumePath() {
  if (!comm_ || world_ == 1) {
    std::string latest = dir_->Latest();
    if (!latest.empty()) Restore(latest);
    return latest;
  }
  const int64_t step = AgreedLatestStep();
  if (step < 0) return "";
  OnEveryRank("resuming", [&] {
    Restore(dir_->PathFor(step));
    if (rank_ > 0) RestoreRankFile(dir_->RankPathFor(step, rank_));
  });
  return dir_->PathFor(step);
}

bool Trainer::NextBatch() {
  if (train_.options().drop_last) {
    if (!x_.defined()) {
      x_ = Tensor(train_.x_shape(batch_), DType::kFloat32, train_.options().device);
      y_ = Tensor(train_.y_shape(batch_), train_.y_dtype(), train_.options().device);
    }
    return train_.NextInto(x_, y_);
  }
  io::Batch b;
  if (!train_.Next(&b)) return false;
  x_ = b.x;
  y_ = b.y;
  return true;
}

void Trainer::ThrowIfBad(const StepMonitor::Reading& r) {
  if (r.first_bad == 0) return;
  if (bar_) bar_->Finish();
  throw NonFiniteError(r.first_bad, dir_ ? dir_->LatestBefore(r.first_bad) : std::string());
}

void Trainer::CheckFinite() { ThrowIfBad(monitor_->Read(/*restart_loss_sum=*/false)); }

void Trainer::Log() {
  StepMonitor::Reading r = monitor_->Read();
  ThrowIfBad(r);
  auto now = std::chrono::steady_clock::now();
  const double secs = std::chrono::duration<double>(now - last_log_time_).count();
  const int64_t steps = step_ - last_log_step_;
  last_log_time_ = now;
  last_log_step_ = step_;
  if (r.losses == 0) return;
  last_loss_ = r.loss_sum / double(r.losses);
  const double ms = steps > 0 ? 1e3 * secs / double(steps) : 0, items = secs > 0 ? double(steps * batch_) / secs : 0;
  const int64_t bpe = train_.batches_per_epoch();
  // With a schedule the rate lives on the device (a host read here, at a log point, as the loss's).
  Optimizer& opt = model_.optimizer();
  const double lr = opt.schedule() ? opt.LearningRateTensor(dev_).Item() : opt.learning_rate();
  std::string fields = detail::Cat("epoch ", (step_ - 1) / bpe + 1, "  ", Fmt("%.1f ms/step", ms), "  ",
                                   Fmt("%.0f items/s", items), "  loss ", Fmt("%.4f", last_loss_), "  lr ",
                                   Fmt("%g", lr));
  fields_ = fields;
  if (log_) log_->Train(step_, double(step_) / double(bpe), Seconds(), lr, last_loss_, ms, items);
}

void Trainer::Eval() {
  if (!evaluator_ || last_eval_step_ == step_) return;
  last_eval_step_ = step_;
  CheckFinite();  // an evaluation of NaN weights says nothing: report the step instead
  held_out_->Seek(0, 0);
  last_eval_ = evaluator_->Run(*held_out_);
  const bool best = last_eval_.top1 > best_top1_;
  if (best) {
    best_top1_ = last_eval_.top1;
    best_step_ = step_;
  }
  if (opt_.verbose && bar_)
    bar_->Print(detail::Cat("step ", step_, "  held-out loss ", Fmt("%.4f", last_eval_.loss), "  top-1 ",
                            Fmt("%.2f%%", 100 * last_eval_.top1), "  top-5 ", Fmt("%.2f%%", 100 * last_eval_.top5),
                            "  ", Fmt("%.1fs", Seconds()), best && step_ > 0 ? "  (best)" : ""));
  if (log_) log_->Eval(step_, double(step_) / double(train_.batches_per_epoch()), Seconds(), last_eval_);
  if (opt_.on_eval) opt_.on_eval(step_, step_ > 0 ? last_loss_ : std::nan(""), last_eval_);
  if (best && dir_ && step_ > 0 && rank_ == 0) Save(dir_->BestPath());
}

void Trainer::Checkpoint() {
  if (!comm_ || world_ == 1) {
    Save(dir_->PathFor(step_));
    dir_->Prune();
    return;
  }
  // Note [Checkpoints across ranks]: the rank files, agreement, rank 0's file, agreement, pruning.
  OnEveryRank("writing the rank checkpoints", [&] {
    if (rank_ > 0) SaveRankFile(dir_->RankPathFor(step_, rank_));
  });
  OnEveryRank("writing rank 0's checkpoint", [&] {
    if (rank_ > 0) return;
    Save(dir_->PathFor(step_));
    dir_->Prune();
  });
}

TrainResult Trainer::Fit() {
  TrainResult result;
  // A new run in a folder holding another run's checkpoints would prune them first, and would
  // overwrite its best.ckpt with its own first evaluation: refused, resuming or not, when there is
  // no step checkpoint to continue from (on every rank alike: they see the same folder).
  std::string resumed;
  const std::string existing = dir_ ? dir_->Existing() : std::string();
  if (opt_.resume) resumed = ResumePath();  // Note [Checkpoints across ranks]: agreed between ranks
  if (!resumed.empty()) {
    result.resumed_from = step_;
  } else if (!existing.empty()) {
    throw ValueError(detail::Cat("[trainer] '", dir_->dir(), "' holds checkpoints of another run ('", existing, "')",
                                 opt_.resume ? " but no step checkpoint to resume from" : "",
                                 ": resume it, or give a new checkpoint_dir"));
  }
  const int64_t bpe = train_.batches_per_epoch();
  LOOM_CHECK(bpe > 0, ValueError, "[trainer] the training loader gives no batch (fewer samples than one batch "
             "with drop_last)");
  int64_t total = opt_.epochs * bpe;
  if (opt_.max_steps > 0 && (opt_.epochs < 1 || opt_.max_steps < total)) total = opt_.max_steps;
  start_ = last_log_time_ = std::chrono::steady_clock::now();
  if (!opt_.csv.empty() && rank_ == 0) log_ = std::make_unique<TrainingLog>(opt_.csv, step_);  // one log per run
  bar_ = std::make_unique<ProgressBar>(total, stdout, opt_.progress);
  if (opt_.verbose && result.resumed_from >= 0)
    bar_->Print(detail::Cat("resumed at step ", step_, " from '", resumed, "'"));
  if (opt_.eval_at_start && step_ == 0 && held_out_) Eval();
  while (step_ < total) {
    if (!NextBatch()) continue;  // the end of an epoch: the next call starts the following one
    Model::StepResult r = model_.TrainOneBatch(x_, y_);
    monitor_->Record(r.loss);
    if (model_.use_graph() && train_.options().drop_last) {  // feed the graph's own inputs from now on
      std::vector<Tensor> in = model_.GraphInputs(x_, y_);
      if (!in.empty()) {
        x_ = in[0];
        y_ = in[1];
      }
    }
    ++step_;
    const bool epoch_end = train_.position().index == bpe, last = step_ == total;
    if (step_ % opt_.log_every == 0 || epoch_end || last) Log();
    bar_->Update(step_, fields_);
    if ((opt_.eval_every > 0 ? step_ % opt_.eval_every == 0 : epoch_end) || last) Eval();
    if (epoch_end && opt_.on_epoch_end) opt_.on_epoch_end(step_ / bpe);
    if (dir_ && ((opt_.checkpoint_every > 0 ? step_ % opt_.checkpoint_every == 0 : epoch_end) || last)) Checkpoint();
  }
  CheckFinite();
  bar_->Finish();
  log_.reset();
  result.steps = step_;
  result.train_loss = last_loss_;
  result.eval = last_eval_;
  result.best_top1 = best_top1_;
  result.best_step = best_step_;
  result.seconds = Seconds();
  return result;
}

}  // namespace nn
}  // namespace loom
