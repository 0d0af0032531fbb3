"""Training an LSTM LM with the graph engine: bucketed minibatches, newbob, best-model checkpoint.

The procedure (that of Kaldi nnet1's ``train_scheduler.sh`` with the RNNLM recipes' batching):

1. Sentences become ``<s> w1 .. wn`` (inputs) / ``w1 .. wn </s>`` (targets); each epoch sorts
   them by length (random tie-breaking), cuts runs of similar length into minibatches of
   ``batch_size`` sentences (and at most ``max_tokens`` padded tokens), and visits the
   minibatches in a seeded random order, so padding stays small and runs are reproducible.
2. The criterion is the cross-entropy summed over real tokens (the engine masks padding); the
   learner (Adam or SGD with momentum) sees the per-token mean gradient, clipped to a global
   norm.
3. After each epoch the cross-validation loss (mean ``-ln p`` per token, ``</s>`` included)
   drives :class:`asrkit.learners.NewBob`: keep the rate while CV improves by at least
   ``start_halving`` (relative), then multiply it by ``lr_decay`` each epoch, stop when an epoch
   during the decay improves by less than ``stop_threshold``. An epoch that makes CV worse is
   rejected: the previous best parameters come back.
4. Each accepted epoch writes the best model to ``output`` atomically (one file).

The epochs are those of ``asrkit.learners.Trainer``, the one epoch loop; :class:`LmTrainer` is
this training's configuration of it (the acoustic one is ``asrkit.training.Trainer``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time

import numpy as np

from asrkit.learners import LearnerConfig, Trainer, build_learner
from asrkit.nnlm.model import ModelFileError, read_model_file, write_model_file


@dataclasses.dataclass
class TrainOptions:
    """Training options; the comments give the defaults' reasons."""

    epochs: int = 10               # most epochs (newbob usually stops earlier)
    batch_size: int = 32           # sentences per minibatch
    max_tokens: int = 0            # also cap padded tokens (T x B) per minibatch; 0: no cap
    optimizer: str = "adam"        # "adam" or "sgd"
    lr: float | None = None        # None: 1e-3 for Adam, 1.0 for SGD (per-token mean gradient)
    momentum: float = 0.0          # SGD momentum
    clip_norm: float = 5.0         # global gradient norm limit (0: off), as the PyTorch LM example
    weight_decay: float = 0.0      # AdamW decoupled decay / SGD L2
    lr_decay: float = 0.5          # newbob: rate factor per epoch once halving has started
    start_halving: float = 0.01    # newbob: halve from the first epoch improving CV less than this
    stop_threshold: float = 0.001  # newbob: stop when, while halving, CV improves less than this
    min_epochs: int = 1            # newbob never stops before this many epochs
    valid_fraction: float = 0.05   # held out (seeded) when no validation text is given
    seed: int = 0                  # weights, batching order and dropout masks
    device: str = "cpu"            # "cpu" or "cuda" (the engine runs ops lacking CUDA code on
    #                                the host, and says so)

    def __post_init__(self):
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"optimizer must be 'adam' or 'sgd', got {self.optimizer!r}")
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError("epochs and batch_size must be positive")
        if not 0.0 < self.lr_decay <= 1.0:
            raise ValueError(f"lr_decay must be in (0, 1], got {self.lr_decay}")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {self.device!r}")
        if not 0.0 < self.valid_fraction < 1.0:
            raise ValueError(f"valid_fraction must be in (0, 1), got {self.valid_fraction}")
        # every other number a user gives: finite and in its range
        checks = (("lr", self.lr, 0, False), ("momentum", self.momentum, 0, True),
                  ("clip_norm", self.clip_norm, 0, True),
                  ("weight_decay", self.weight_decay, 0, True),
                  ("start_halving", self.start_halving, None, True),
                  ("stop_threshold", self.stop_threshold, None, True),
                  ("max_tokens", self.max_tokens, 0, True),
                  ("min_epochs", self.min_epochs, 0, True), ("seed", self.seed, 0, True))
        for name, v, low, closed in checks:
            if v is None and name == "lr":
                continue
            ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
            if ok and low is not None:
                ok = v >= low if closed else v > low
            if not ok:
                want = "a finite number" if low is None else f"{'>=' if closed else '>'} {low}"
                raise ValueError(f"{name} must be {want}, got {v!r}")
        if self.momentum >= 1.0:
            raise ValueError(f"momentum must be below 1, got {self.momentum}")

    @property
    def learning_rate(self) -> float:
        """The initial rate (the optimizer's default when ``lr`` is None)."""
        if self.lr is not None:
            return float(self.lr)
        return 1e-3 if self.optimizer == "adam" else 1.0


def tokenise(sentences) -> list[list[str]]:
    """Sentences as lists of words: strings are split on whitespace; empty ones are dropped."""
    out = []
    for s in sentences:
        words = s.split() if isinstance(s, str) else list(s)
        if words:
            out.append(words)
    return out


def bucket_batches(lengths: np.ndarray, batch_size: int, max_tokens: int,
                   rng: np.random.Generator) -> list[np.ndarray]:
    """Minibatches of sentence indices with similar ``lengths`` (int ``[N]``).

    Sentences are sorted by length (ties in random order), cut into runs of at most
    ``batch_size`` whose padded size ``len(run) * max length`` stays within ``max_tokens``
    (when > 0; a longer sentence gets a batch of its own), and the runs are shuffled. Returns
    a list of int64 index arrays covering every sentence once.
    """
    lengths = np.asarray(lengths)
    order = np.lexsort((rng.random(len(lengths)), lengths))
    batches, cur = [], []
    for k in order.tolist():
        n = int(lengths[k])
        if cur and (len(cur) >= batch_size or (max_tokens and (len(cur) + 1) * n > max_tokens)):
            batches.append(np.array(cur, np.int64))
            cur = []
        cur.append(k)
    if cur:
        batches.append(np.array(cur, np.int64))
    rng.shuffle(batches)
    return batches


def make_feeds(ids: list[np.ndarray], bos: int, eos: int):
    """Padded int32 ``words``/``targets`` ``[T, B]`` and ``lengths`` int32 ``[B]`` of id
    sentences: inputs ``<s> w1 .. wn``, targets ``w1 .. wn </s>`` (T = longest n + 1)."""
    lengths = np.array([len(s) + 1 for s in ids], np.int32)
    T = int(lengths.max())
    words = np.zeros((T, len(ids)), np.int32)
    targets = np.zeros((T, len(ids)), np.int32)
    for b, s in enumerate(ids):
        words[0, b] = bos
        words[1: len(s) + 1, b] = s
        targets[: len(s), b] = s
        targets[len(s), b] = eos
    return words, targets, lengths


def cv_loss(lm, ids: list[np.ndarray]) -> float:
    """Mean ``-ln p`` per token (words and ``</s>``, ``<unk>`` targets included) of id
    sentences under ``lm``, without dropout."""
    costs = lm._token_costs(ids, True, True)
    total = sum(float(c.sum()) for c in costs)
    return total / max(sum(len(c) for c in costs), 1)


def _ppl(loss: float) -> float:
    """Perplexity of a mean natural-log loss (inf when it overflows or is not a number)."""
    return math.exp(loss) if loss < 700.0 else math.inf


def _split_valid(sentences, fraction, seed):
    if len(sentences) < 2:
        raise ValueError("need at least two training sentences to hold some out for "
                         "validation; give a validation text")
    rng = np.random.default_rng(seed + 1)
    perm = rng.permutation(len(sentences))
    n_valid = max(1, int(round(fraction * len(sentences))))
    valid = [sentences[k] for k in sorted(perm[:n_valid])]
    train = [sentences[k] for k in sorted(perm[n_valid:])]
    return train, valid


def _copy_values(lm) -> dict[str, np.ndarray]:
    return {k: v.copy() for k, v in lm.network.values().items()}


OPTIMIZER = "optimizer/"  # array name prefix of the learner's slots in a training state
STATE_VERSION = 2  # 1: asrkit before one learner stack (slots per parameter, the old newbob)


class LmTrainer(Trainer):
    """The LSTM LM's configuration of the epoch loop (the procedure of the module docstring),
    its own batch source (``plan``, ``load``) over the id sentences ``train_ids``."""

    def __init__(self, lm, train_ids, valid_ids, opts: TrainOptions, output=None,
                 checkpoint=None, log=None):
        net = lm.network
        c = LearnerConfig("adamw" if opts.optimizer == "adam" else "sgd", opts.learning_rate,
                          opts.momentum, l2=opts.weight_decay, clip_norm=opts.clip_norm,
                          newbob=True, newbob_factor=opts.lr_decay,
                          newbob_threshold=opts.start_halving,
                          newbob_stop_threshold=opts.stop_threshold,
                          newbob_min_epochs=opts.min_epochs)
        learner = build_learner(c, [p for p in net.parameters.values() if p.trainable],
                                max_epochs=opts.epochs + 1)
        super().__init__(net.cost, learner, device=opts.device, cv_reader=valid_ids,
                         epochs=opts.epochs, log=log)
        lm.device = opts.device
        self.reader, self.lm, self.output, self.checkpoint = self, lm, output, checkpoint
        self.ids, self.opts, self.rng = train_ids, opts, np.random.default_rng(opts.seed)
        self.lengths = np.array([len(s) + 1 for s in train_ids])
        self.best, self.epoch_lr = {}, 0.0

    def plan(self, epoch: int) -> list[np.ndarray]:
        return bucket_batches(self.lengths, self.opts.batch_size, self.opts.max_tokens, self.rng)

    def load(self, idx, epoch: int, i: int) -> dict:
        voc, net = self.lm.vocabulary, self.lm.network
        words, targets, lens = make_feeds([self.ids[k] for k in idx], voc.bos_id, voc.eos_id)
        return {net.words: (words, lens), net.targets: (targets, lens)}

    def start(self, resume: bool) -> None:
        lm, path = self.lm, self.checkpoint
        if resume and path is not None and os.path.exists(path):
            self.epoch = self._restore(path)
            if lm.history and lm.history[-1].get("converged", False):
                self.epochs = self.epoch  # newbob had stopped the run: nothing more to train
            self._log(f"resuming from {path} after epoch {self.epoch}")
        else:
            loss0 = cv_loss(lm, self.cv_reader)
            self.learner.schedule.epoch_end(loss0)  # the untrained model's CV: the baseline
            self._log(f"epoch 0: valid ppl {_ppl(loss0):.5g} ({len(self.ids)} training "
                      f"sentences, {int(self.lengths.sum())} tokens; "
                      f"{len(self.cv_reader)} validation sentences)")
        self.best = _copy_values(lm)

    def evaluate(self) -> dict:
        self.lm.parameters_changed()
        self.epoch_lr = self.learner.schedule.lr  # the rate this epoch trained with
        return {"loss": cv_loss(self.lm, self.cv_reader)}

    def end_epoch(self, cv: dict | None, keep: bool, lowered: bool) -> None:
        schedule, lm = self.learner.schedule, self.lm
        accepted = not schedule.rejected
        if accepted:
            self.best = _copy_values(lm)
        else:  # newbob rejects an epoch that made CV worse: back to the best parameters
            lm.load_values(self.best)
        entry = {"epoch": self.epoch + 1, "lr": self.epoch_lr,
                 "train_ppl": _ppl(self.epoch_loss / max(self.epoch_frames, 1)),
                 "valid_ppl": _ppl(cv["loss"]), "accepted": accepted,
                 "seconds": round(time.perf_counter() - self.epoch_start, 3),
                 "tokens": self.epoch_frames}
        lm.history.append(entry)
        self._log(f"epoch {entry['epoch']}: lr {entry['lr']:.3g} train ppl "
                  f"{entry['train_ppl']:.5g} valid ppl {entry['valid_ppl']:.5g}"
                  f"{'' if accepted else ' (rejected)'} [{entry['seconds']:.1f}s]")
        # stopped by newbob itself, not by the epoch limit (which a resumed run may raise)
        entry["converged"] = not keep and schedule.epochs < schedule.max_epochs
        if accepted and self.output is not None:
            lm.save(self.output)

    def finish(self, stopped: bool) -> list[dict]:
        self.lm.load_values(self.best)
        if self.output is not None:
            self.lm.save(self.output)  # the best parameters with the complete history
        return self.lm.history

    def save_checkpoint(self) -> None:
        """Write everything a resumed run needs after this epoch to ``checkpoint``
        (atomically): the model file's content plus the learner's state (slots as
        ``optimizer/<slot>/<name>``, counters, scalars, newbob's state), the batching RNG and
        the minibatch counter (dropout seeds). The file also loads as a model."""
        if self.checkpoint is None:
            return
        lm, learner = self.lm, self.learner
        state = learner.state_dict()
        arrays = dict(lm.network.values()) | learner.slot_arrays(OPTIMIZER)
        header = {"config": lm.config.as_dict(), "vocab": lm.vocabulary.words,
                  "history": lm.history,
                  "training": {"version": STATE_VERSION, "epoch": self.epoch,
                               "step": state["step"], "samples": state["samples"],
                               "schedule": state["schedule"], "scalars": state["scalars"],
                               "parameters": [p.name for p in learner.parameters],
                               "rng": self.rng.bit_generator.state,
                               "minibatches": self.step}}
        write_model_file(self.checkpoint, header, arrays)

    def _restore(self, path) -> int:
        """Load :meth:`save_checkpoint`'s file into the model, the learner and the batching RNG;
        returns the epoch it was written after. The model must have the same config and
        vocabulary."""
        lm, learner = self.lm, self.learner
        header, arrays = read_model_file(path)
        t = header.get("training")
        if t is None:
            raise ModelFileError(f"{path}: a model file without training state; cannot resume")
        if t.get("version") != STATE_VERSION:
            raise ModelFileError(f"{path}: the training state of an older asrkit (before one "
                                 "learner stack); it cannot resume (the file still loads as a "
                                 "model)")
        if header["config"] != lm.config.as_dict() or header["vocab"] != lm.vocabulary.words:
            raise ModelFileError(f"{path}: the checkpoint's network config or vocabulary "
                                 "differs from this run's")
        if t["parameters"] != [p.name for p in learner.parameters]:
            raise ModelFileError(f"{path}: the checkpoint's optimizer covers other parameters")
        try:  # t: step, samples, schedule, scalars (and more) of learner.state_dict
            state = t | {"slots": learner.slots_from(arrays, OPTIMIZER)}
        except KeyError as e:
            raise ModelFileError(f"{path}: learner slot {e} is missing (another optimizer?)") \
                from None
        lm.load_values({k: v for k, v in arrays.items() if not k.startswith(OPTIMIZER)})
        learner.load_state_dict(state)
        self.rng.bit_generator.state = t["rng"]
        self.step = int(t["minibatches"])
        lm.history[:] = list(header.get("history", []))
        return int(t["epoch"])


def fit(lm, sentences, valid=None, options: TrainOptions | None = None,
        output: str | os.PathLike | None = None, log=None,
        checkpoint: str | os.PathLike | None = None, resume: bool = False) -> list[dict]:
    """Train ``lm`` (an LstmLM) in place on ``sentences``; returns its per-epoch history.

    sentences / valid: strings or word lists, one per sentence (no validation set: a seeded
    ``valid_fraction`` of the training sentences is held out). output: path of the best model,
    rewritten atomically after each accepted epoch. log: ``f(str)`` for one line per epoch.
    checkpoint: path of the training state (model, optimizer slots, newbob, batching RNG),
    rewritten atomically after every epoch; with ``resume`` and an existing checkpoint, training
    continues from it and ends exactly as an uninterrupted run would (same text, same options,
    ``epochs`` may be raised). At the end ``lm`` holds the parameters of the epoch with the best
    CV loss.
    """
    opts = options or TrainOptions()
    train = tokenise(sentences)
    if not train:
        raise ValueError("no training sentences (the text is empty)")
    if valid is None:
        train, valid_words = _split_valid(train, opts.valid_fraction, opts.seed)
    else:
        valid_words = tokenise(valid)
        if not valid_words:
            raise ValueError("the validation text has no sentences")
    voc = lm.vocabulary
    return LmTrainer(lm, [voc.encode(w) for w in train], [voc.encode(w) for w in valid_words],
                     opts, output, checkpoint, log).train(resume)
