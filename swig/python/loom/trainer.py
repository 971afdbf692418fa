"""loom.trainer: epochs of a data loader through a model, with a progress bar, evaluation,
checkpoints, a resume that continues bitwise, a CSV log and a PNG of the curves. The loader is a
loom.io.DataLoader (MNIST, CIFAR-10) or a loom.data.DataLoader (your own data: numpy arrays or any
dataset with __len__ and __getitem__; a loader whose device is None gets the model's), or batches
you make (a generator function called with the epoch, any iterable of (x, y) batches, or a
loom.data.Batches), which the trainer puts in a loom.data.DataLoader.

    train = io.DataLoader(data, batch_size=64, seed=1, drop_last=True, crop_padding=4, hflip=True,
                          augment_seed=1, device=dev)
    held_out = io.DataLoader(test_data, batch_size=500, shuffle=False, device=dev)
    t = trainer.Trainer(m, train, held_out, epochs=8, checkpoint_dir="runs/a", checkpoint_every=500,
                        resume=True, csv="runs/a/log.csv", plot="runs/a/curves.png")
    result = t.fit()             # {"steps", "train_loss", "eval": {...}, "best_top1", ...}
    r = trainer.evaluate(m, held_out)   # {"samples", "loss", "top1", "top5"}

`m` is a loom.model.Model subclass (its train_one_batch returns (out, loss)) or a NativeModel,
compiled. The loop is Python; what it shares with C++'s nn::Trainer comes from C++ (src/nn):
the step monitor (a step counter and the first non-finite step kept on the device: no host read
per step; Note [Non-finite steps are caught on the device]), the run state saved with every
checkpoint (step, loader position and seeds, the device's Philox key and counter: Note [Bitwise
resume]), the checkpoint folder (step-<n>.ckpt, the newest keep_last kept, plus best.ckpt), the
CSV log and the evaluation sums. Checkpoints are Model.save_states files with the run state in
their metadata, so Model.load_states reads them too.

A NaN or infinity in the loss or the parameters at step k raises NonFiniteError(step=k) at the
next log or checkpoint point; no checkpoint is written at or after k, and
NonFiniteError.last_good_checkpoint names the newest one before it.
"""
import math
import os
import sys
import time

from . import autograd, core, errors
from . import data as _data
from . import io as _io
from .curves import plot_log
from .tensor import int32 as _int32
from .model import NativeModel

try:
    import tqdm as _tqdm
except ImportError:  # a plain bar instead
    _tqdm = None

__all__ = ["Trainer", "Evaluator", "evaluate", "NonFiniteError"]


class NonFiniteError(errors.ValueError):
    """The loss or a gradient was not finite at `step` (1-based); `last_good_checkpoint` is the
    newest checkpoint written before it, or None."""

    def __init__(self, step, last_good_checkpoint):
        self.step = int(step)
        self.last_good_checkpoint = last_good_checkpoint or None
        where = (f"; the last good checkpoint is '{self.last_good_checkpoint}'" if self.last_good_checkpoint
                 else "; no checkpoint was written before it")
        super().__init__(f"[trainer] the loss or a gradient was not finite (NaN or infinite) at step {step}{where}")


def _check_count(name, value, least):
    """A whole number of at least `least` (a bool, a float or a string is not a count)."""
    if errors._whole("trainer", name, value) < least:
        raise errors.ValueError(f"[trainer] {name} {value} must be at least {least}")


def _result(r):
    return {"samples": int(r.samples), "loss": float(r.loss), "top1": float(r.top1), "top5": float(r.top5)}


class Evaluator:
    """The eval step of one model (forward in eval mode without gradients, then the loss and the
    top-1 / top-5 counts summed on the device), kept so that its graph is captured once: a
    NativeModel's is C++'s nn::Evaluator; a Python model's is the same sums (core.MetricSums)
    behind its forward, captured as a graph of its own when the model uses graphs."""

    def __init__(self, model):
        self.model = model
        self._native = core.Evaluator(model._impl) if isinstance(model, NativeModel) else None
        self._sums = None
        self._step = None

    def _python_step(self, inputs):
        with autograd.no_grad():
            out = self.model.forward(inputs[0])
            self._sums.add(out, inputs[1])
        return [out]

    def run(self, loader):
        """One pass over `loader` from its first batch: {"samples", "loss", "top1", "top5"}."""
        loader.seek(0, 0)
        if self._native is not None and isinstance(loader, _io.DataLoader):
            return _result(self._native.run(loader._impl))
        m = self.model
        native = self._native is not None  # a NativeModel's forward runs its own eval graph
        was_training = m.net.training if native else m.training
        m.eval()
        try:
            while True:
                b = loader.next()
                if b is None:
                    break
                x, y = b[0], b[1]
                if y.dtype != _int32:
                    raise errors.DTypeError(f"[evaluate] loss, top-1 and top-5 are a classifier's: they need int32 "
                                            f"class labels, and the loader gives y of dtype {y.dtype}")
                if self._sums is None:
                    self._sums = core.MetricSums(x.device)
                if not native and m._use_graph:
                    if self._step is None:
                        self._step = core.PyStep(x.device, self._python_step, f"{type(m).__name__}.evaluate", True,
                                                 True, m._graph_options)
                    self._step.run([x, y])
                else:
                    self._python_step([x, y])
            if self._sums is None:
                raise errors.ValueError("[evaluate] the data loader gave no batch (an empty data set, or drop_last "
                                        "with fewer samples than one batch)")
            r = self._sums.read()
        finally:
            if self._sums is not None:
                self._sums.reset()
            m.train(was_training)
        return _result(r)


def evaluate(model, loader):
    """Evaluator(model).run(loader): mean loss, top-1 and top-5 accuracy of one pass."""
    return Evaluator(model).run(loader)


class _PlainBar:
    """A one-line bar redrawn in place on a terminal; silent otherwise (lines go through write)."""

    def __init__(self, total, enabled):
        self.total = total
        self.tty = enabled and sys.stdout.isatty()
        self.n = 0
        self._shown = False
        self._last = 0.0
        self._postfix = ""

    def update(self, n):
        self.n += n
        now = time.perf_counter()
        if not self.tty or (self._shown and self.n < self.total and now - self._last < 0.1):
            return
        self._last = now
        filled = 24 * min(self.n, self.total) // max(self.total, 1)
        sys.stdout.write(f"\r\033[K[{'#' * filled}{'.' * (24 - filled)}] {self.n}/{self.total}  {self._postfix}")
        sys.stdout.flush()
        self._shown = True

    def set_postfix_str(self, s, refresh=False):
        self._postfix = s

    def write(self, line):
        if self._shown:
            sys.stdout.write("\r\033[K")
            self._shown = False
        print(line, flush=True)

    def close(self):
        if self._shown:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self._shown = False


def _bar(total, initial, enabled):
    """tqdm when it is installed, else _PlainBar; both silent when stdout is not a terminal."""
    if _tqdm is not None:
        bar = _tqdm.tqdm(total=total, initial=initial, file=sys.stdout, disable=not (enabled and sys.stdout.isatty()),
                         dynamic_ncols=True)
        bar.write = lambda line: _tqdm.tqdm.write(line, file=sys.stdout)
        return bar
    bar = _PlainBar(total, enabled)
    bar.n = initial
    return bar


def _loader(loader, what):
    """A loader as given; batches you make (loom.data.Batches, a generator function, an iterable of
    batches without __getitem__) in a loom.data.DataLoader."""
    if loader is None or isinstance(loader, (_io.DataLoader, _data.DataLoader)):
        return loader
    if isinstance(loader, _data.Batches) or (not hasattr(loader, "__getitem__") and
                                             (callable(loader) or hasattr(loader, "__iter__"))):
        return _data.DataLoader(loader)
    raise errors.TypeError(f"[trainer] {what} must be a loom.io.DataLoader, a loom.data.DataLoader or batches you make "
                           f"(loom.data.Batches, a generator function, an iterable of (x, y) batches), got "
                           f"{type(loader).__name__}")


class Trainer:
    """Epochs of `train` (a loom.io.DataLoader, a loom.data.DataLoader, or batches you make:
    loom.data.Batches, a generator function, an iterable of (x, y) batches) through `model`,
    evaluated on `held_out` (the same kinds).

    epochs, max_steps   how long (max_steps > 0 stops earlier, even mid-epoch)
    log_every           steps between reads of the loss and the non-finite flag
    eval_every          steps between evaluations (0: at each epoch's end); eval_at_start too
    checkpoint_dir      where checkpoints go (None: none); checkpoint_every steps between them
                        (0: each epoch's end); keep_last of them kept, plus best.ckpt
    resume              continue from checkpoint_dir's newest checkpoint, if there is one
    csv, plot           the CSV log and a PNG of its curves (written at the end of fit)
    progress, verbose   the bar (on a terminal only) and a line per evaluation
    on_batch(step, x, y)            before each step (step: 1-based), with its batch
    on_eval(step, train_loss, r)    after each evaluation
    on_epoch_end(epoch)             after an epoch's last step, before its checkpoint
    """

    def __init__(self, model, train, held_out=None, *, epochs=1, max_steps=0, log_every=50, eval_every=0,
                 eval_at_start=False, checkpoint_dir=None, checkpoint_every=0, keep_last=3, resume=False, csv=None,
                 plot=None, progress=True, verbose=True, on_batch=None, on_eval=None, on_epoch_end=None):
        for name, value, least in (("epochs", epochs, 0), ("max_steps", max_steps, 0), ("log_every", log_every, 1),
                                   ("eval_every", eval_every, 0), ("checkpoint_every", checkpoint_every, 0),
                                   ("keep_last", keep_last, 1)):
            _check_count(name, value, least)
        if checkpoint_dir is not None and not isinstance(checkpoint_dir, (str, os.PathLike)):
            raise errors.TypeError(f"[trainer] checkpoint_dir must be a path, got {type(checkpoint_dir).__name__} "
                                   f"{checkpoint_dir!r}")
        if epochs < 1 and max_steps < 1:
            raise errors.ValueError(f"[trainer] epochs {epochs} and max_steps {max_steps}: one must be positive")
        if log_every < 1:
            raise errors.ValueError(f"[trainer] log_every {log_every} must be positive")
        if eval_every < 0 or checkpoint_every < 0:
            raise errors.ValueError("[trainer] eval_every and checkpoint_every must be >= 0 (0: at each epoch's end)")
        if resume and not checkpoint_dir:
            raise errors.ValueError("[trainer] resume needs a checkpoint_dir")
        if plot and not csv:
            raise errors.ValueError("[trainer] plot draws the CSV log: give csv too")
        train, held_out = _loader(train, "train"), _loader(held_out, "held_out")
        self.model, self.train, self.held_out = model, train, held_out
        self.epochs, self.max_steps, self.log_every = int(epochs), int(max_steps), int(log_every)
        self.eval_every, self.eval_at_start = int(eval_every), bool(eval_at_start)
        self.checkpoint_every, self.resume = int(checkpoint_every), bool(resume)
        self.csv, self.plot, self.progress, self.verbose = csv, plot, bool(progress), bool(verbose)
        self.on_batch, self.on_eval, self.on_epoch_end = on_batch, on_eval, on_epoch_end
        opt = getattr(model, "optimizer", None)
        world = getattr(opt, "world_size", None)
        world = world() if callable(world) else world
        if checkpoint_dir and world is not None and int(world) > 1:
            # Note [Checkpoints across ranks] (src/nn/trainer.h): C++'s nn::Trainer splits a
            # checkpoint by rank; this loop would have every rank write the same files.
            raise errors.ValueError(f"[trainer] checkpoint_dir with a DistOpt over {world} ranks: loom.trainer does "
                                    "not split checkpoints by rank yet (C++'s nn::Trainer does: loom-cnn --dist "
                                    "--checkpoint-dir); train without checkpoint_dir, or on one rank")
        self.dir = core.CheckpointDir(str(checkpoint_dir), int(keep_last)) if checkpoint_dir else None
        self.evaluator = Evaluator(model) if held_out is not None else None
        params = list(model.get_params().values())
        if not params:
            raise errors.ValueError("[trainer] the model has no parameters")
        self.device = model.device or params[0].device
        for loader in (train, held_out):
            if isinstance(loader, _data.DataLoader) and loader.device is None:
                loader.device = self.device
        use_graph = model._impl.use_graph() if isinstance(model, NativeModel) else model._use_graph
        self.monitor = core.StepMonitor(self.device, params, bool(use_graph))
        self.step = 0
        self.best_top1, self.best_step = -1.0, 0
        self.last_eval = None
        self._last_loss = math.nan
        self._seconds_before = 0.0
        self._start = time.perf_counter()  # fit restarts the clock
        self._bar = None

    # ---- checkpoints ----
    def save(self, path):
        """The model's states and optimizer (Model.save_states) with the run state as metadata;
        NonFiniteError instead when a step so far was not finite."""
        r = self.monitor.read(False)
        self._check_finite(r)  # only good states are saved
        s = core.capture_run_state(self.step, self._facts(), self.device)
        s.best_top1, s.best_step, s.seconds = self.best_top1, self.best_step, self._seconds()
        s.loss_sum, s.losses = r["loss_sum"], r["losses"]
        self.model.save_states(path, meta=s.to_meta())

    def restore(self, path):
        """Restores what save wrote: the run state is checked against the loader first, then the
        model and optimizer are restored (checked before they change), then the loader seeks and
        the device's generator is set."""
        meta = _io.load_checkpoint(path).meta
        s = core.RunState.from_meta(meta, str(path))
        core.check_run_state(s, self._facts(), str(path))
        self.model.load_states(path)
        core.apply_rng_state(s, self._facts(), self.device, str(path))
        self.train.seek(*core.run_state_position(s))
        self.monitor.set_steps(s.step, s.loss_sum, s.losses)
        self.step = self._last_log_step = s.step
        self.best_top1, self.best_step = s.best_top1, s.best_step
        self._seconds_before = s.seconds

    def _facts(self):
        """What the run state records of the training loader (nn::LoaderFacts)."""
        if isinstance(self.train, _io.DataLoader):
            return core.facts_of(self.train._impl)
        return self.train._facts()

    def _check_finite(self, reading=None):
        r = reading or self.monitor.read(False)
        if r["first_bad"] > 0:
            if self._bar is not None:
                self._bar.close()
            raise NonFiniteError(r["first_bad"], self.dir.latest_before(r["first_bad"]) if self.dir else None)

    def _checkpoint(self):
        self.save(self.dir.path_for(self.step))
        self.dir.prune()

    # ---- logging and evaluation ----
    def _seconds(self):
        return self._seconds_before + time.perf_counter() - self._start

    def _epoch(self):
        return self.step / self.train.batches_per_epoch

    def _log(self):
        r = self.monitor.read(True)
        self._check_finite(r)
        now = time.perf_counter()
        secs, steps = now - self._last_log_time, self.step - self._last_log_step
        self._last_log_time, self._last_log_step = now, self.step
        if r["losses"] == 0:
            return
        self._last_loss = r["loss_sum"] / r["losses"]
        ms = 1e3 * secs / steps if steps else 0.0
        items = steps * self._batch / secs if secs > 0 else 0.0
        lr = self._lr()
        self._bar.set_postfix_str(f"epoch {(self.step - 1) // self.train.batches_per_epoch + 1}  {ms:.1f} ms/step  "
                                  f"{items:.0f} items/s  loss {self._last_loss:.4f}  lr {lr:g}", refresh=False)
        if self._log_file is not None:
            self._log_file.train(self.step, self._epoch(), self._seconds(), lr, self._last_loss, ms, items)

    def _lr(self):
        """The optimizer's learning rate as the host knows it (NaN when it does not say)."""
        o = self.model.optimizer
        impl = getattr(o, "_impl", None)
        if impl is not None and impl.has_schedule():  # the rate lives on the device: a host read, at a log point
            return float(impl.current_learning_rate(self.device))
        lr = getattr(o, "lr", None)  # loom.opt's optimizers
        if lr is None and getattr(o, "_impl", None) is not None:
            lr = o._impl.learning_rate()
        try:
            return float(lr)
        except (TypeError, ValueError):
            return math.nan

    def _eval(self):
        if self.evaluator is None or self._last_eval_step == self.step:
            return
        self._last_eval_step = self.step
        self._check_finite()  # an evaluation of NaN weights says nothing: report the step instead
        r = self.last_eval = self.evaluator.run(self.held_out)
        best = r["top1"] > self.best_top1
        if best:
            self.best_top1, self.best_step = r["top1"], self.step
        if self.verbose:
            self._bar.write(f"step {self.step}  held-out loss {r['loss']:.4f}  top-1 {100 * r['top1']:.2f}%  "
                            f"top-5 {100 * r['top5']:.2f}%  {self._seconds():.1f}s"
                            + ("  (best)" if best and self.step > 0 else ""))
        if self._log_file is not None:
            res = core.EvalResult()
            res.samples, res.loss, res.top1, res.top5 = r["samples"], r["loss"], r["top1"], r["top5"]
            self._log_file.eval(self.step, self._epoch(), self._seconds(), res)
        if self.on_eval is not None:
            self.on_eval(self.step, self._last_loss if self.step > 0 else math.nan, r)
        if best and self.dir is not None and self.step > 0:
            self.save(self.dir.best_path())

    # ---- the loop ----
    def fit(self):
        """Trains to the end; {"steps", "resumed_from", "train_loss", "eval", "best_top1",
        "best_step", "seconds"}."""
        resumed_from = -1
        # A new run in a folder of another run's checkpoints would prune them first and overwrite
        # its best.ckpt: refused, resuming or not, when there is no step checkpoint to continue from.
        existing = self.dir.existing() if self.dir is not None else ""
        if self.resume and self.dir.latest():
            self.restore(self.dir.latest())
            resumed_from = self.step
        elif existing:
            raise errors.ValueError(f"[trainer] '{self.dir.dir()}' holds checkpoints of another run ('{existing}')"
                                    + (" but no step checkpoint to resume from" if self.resume else "")
                                    + ": resume it, or give a new checkpoint_dir")
        bpe = self.train.batches_per_epoch
        if bpe is None:
            raise errors.ValueError(f"[trainer] the training batches '{self.train.name}' come from a one-shot "
                                    "iterator of unknown length: give loom.data.Batches(it, batches_per_epoch=N), or "
                                    "a generator function (its epochs are counted)")
        if bpe < 1:
            raise errors.ValueError("[trainer] the training loader gives no batch")
        total = self.epochs * bpe
        if self.max_steps > 0 and (self.epochs < 1 or self.max_steps < total):
            total = self.max_steps
        self._start = self._last_log_time = time.perf_counter()
        self._last_log_step = self.step
        self._last_eval_step = -1
        self._batch = 0
        self._log_file = core.TrainingLog(str(self.csv), self.step) if self.csv else None
        self._bar = _bar(total, self.step, self.progress)
        try:
            if self.verbose and resumed_from >= 0:
                self._bar.write(f"resumed at step {self.step} from '{self.dir.latest()}'")
            if self.eval_at_start and self.step == 0:
                self._eval()
            while self.step < total:
                b = self.train.next()
                if b is None:
                    continue  # the end of an epoch: the next call starts the following one
                x, y = b[0], b[1]
                self._batch = x.shape[0]
                if self.on_batch is not None:
                    self.on_batch(self.step + 1, x, y)
                out = self.model.train_one_batch(x, y)
                loss = out[1] if isinstance(out, (tuple, list)) else out
                self.monitor.record(loss)
                self.step += 1
                epoch_end = self.train.position()[1] == bpe
                last = self.step == total
                if self.step % self.log_every == 0 or epoch_end or last:
                    self._log()
                self._bar.update(1)
                if (self.step % self.eval_every == 0 if self.eval_every else epoch_end) or last:
                    self._eval()
                if epoch_end and self.on_epoch_end is not None:
                    self.on_epoch_end(self.step // bpe)
                if self.dir is not None and ((self.step % self.checkpoint_every == 0 if self.checkpoint_every
                                              else epoch_end) or last):
                    self._checkpoint()
            self._check_finite()
        finally:
            self._bar.close()
            self._log_file = None  # closes the file
        if self.plot:
            try:
                plot_log(self.csv, self.plot, title=f"{type(self.model).__name__}")
            except ImportError:
                print("loom.trainer: matplotlib is not installed: no plot (the curves are in "
                      f"{self.csv})", file=sys.stderr)
        return {"steps": self.step, "resumed_from": resumed_from, "train_loss": self._last_loss,
                "eval": self.last_eval, "best_top1": self.best_top1, "best_step": self.best_step,
                "seconds": self._seconds()}
