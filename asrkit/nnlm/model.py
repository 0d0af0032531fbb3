"""``LstmLM``: an LSTM language model with the query API of ``asrkit.lm.NgramLM``.

Scores are log10 probabilities, as ARPA models and KenLM give them, so the two model kinds are
interchangeable in rescoring::

    lm = LstmLM.load("lm.npz")
    lm.score("the cat sat")                     # log10 p(the cat sat </s> | <s>)
    lm.score_sentences(hyps)                    # many at once (batched, sorted by length)
    lm.perplexity(open("dev.txt"))              # SRILM conventions: OOVs skipped, </s> counted

    state = lm.begin_state()                    # after <s>
    logp, state = lm.score_word(state, "the")   # log10 p(the | <s>), the state after "the"

A state is an opaque, immutable object holding the LSTM's ``(h, c)`` after its history; the next
state is computed only when something is scored from it, so scoring ``</s>`` costs no LSTM step.
``bos=False`` scores from the null state: zero ``(h, c)`` and no ``<s>`` input (the first
word's distribution is then the softmax of the output bias).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator

import numpy as np

from asrkit.lm.perplexity import PerplexityStats
from asrkit.nnlm.config import LstmLMConfig
from asrkit.nnlm.inference import LN10, StepModel
from asrkit.nnlm.network import LMNetwork
from asrkit.nnlm.vocab import BOS, EOS, UNK, Vocabulary
from asrkit.utils.archive import Archive, ArchiveError, check_format, save_archive

FORMAT = "asrkit-lstm-lm"  # an archive (asrkit.utils.archive): parameters by name + JSON header
VERSION = 1
SCORE_FLOATS = 1 << 24  # 64 MB per [T, B, V] float32 array when scoring sentences


class ModelFileError(ArchiveError):
    """An unreadable or inconsistent LSTM LM file; the message names the file."""


def write_model_file(path: str | os.PathLike, header: dict, arrays: dict[str, np.ndarray]) -> None:
    """Write ``header`` (JSON-ready dict; the format tag is added) and ``arrays`` to ``path``,
    atomically."""
    save_archive(path, {"format": FORMAT, "version": VERSION, **header}, arrays)


def read_model_file(path: str | os.PathLike, want=None) -> tuple[dict, dict[str, np.ndarray]]:
    """``(header, {name: array})`` of a file written by :func:`write_model_file`, with the
    arrays whose names ``want(name)`` accepts (default: all; the others are never read).
    Errors are ModelFileError naming the file."""
    path = os.fspath(path)
    try:
        with Archive(path) as archive:
            header = archive.header
            check_format(header, path, FORMAT, VERSION, "asrkit LSTM LM")
            arrays = {k: archive.read(k) for k in archive.names if want is None or want(k)}
    except ArchiveError as e:
        raise ModelFileError(str(e)) from None
    return header, arrays


class LstmState:
    """The LSTM state after a word history (lazy: computed from the parent when first used)."""

    __slots__ = ("_parent", "_word", "_h", "_c", "_logp", "length")

    def __init__(self, parent=None, word: int = -1, h=None, c=None, length: int = 0):
        self._parent, self._word = parent, word
        self._h, self._c = h, c   # float32 [L, P], [L, H] once computed
        self._logp = None         # float64 [V]: log10 p(next word), once computed
        self.length = length      # words consumed (<s> included)

    def __repr__(self):
        return f"LstmState(length={self.length})"


class LstmLM:
    """An LSTM LM: ``config`` (LstmLMConfig), ``vocabulary`` (Vocabulary) and the graph network
    whose parameters it holds. ``vocab`` is the word list (ids = positions), as NgramLM's."""

    def __init__(self, config: LstmLMConfig, vocabulary: Vocabulary, seed: int = 0,
                 source: str = ""):
        if config.vocab_size != len(vocabulary):
            raise ValueError(f"config.vocab_size {config.vocab_size} != vocabulary size "
                             f"{len(vocabulary)}")
        self.config = config
        self.vocabulary = vocabulary
        self.network = LMNetwork(config, seed)
        self.source = source
        self.device = "cpu"  # where the graph scores sentences ("cpu" or "cuda")
        self.history: list[dict] = []  # per training epoch: lr, train/valid perplexity, ...
        self._stepper: StepModel | None = None
        self._begin: LstmState | None = None

    # -- construction, files ------------------------------------------------------------------

    @classmethod
    def create(cls, vocabulary: Vocabulary, embed_dim: int = 128, hidden_dim: int = 256,
               num_layers: int = 1, tie_embeddings: bool = False, dropout: float = 0.0,
               seed: int = 0) -> LstmLM:
        """A freshly initialised model over ``vocabulary`` (seeded)."""
        cfg = LstmLMConfig(len(vocabulary), embed_dim, hidden_dim, num_layers, tie_embeddings,
                           dropout)
        return cls(cfg, vocabulary, seed)

    @classmethod
    def train(cls, sentences, valid=None, vocabulary: Vocabulary | None = None,
              vocab_file: str | None = None, vocab_size: int | None = None, *,
              embed_dim: int = 128, hidden_dim: int = 256, num_layers: int = 1,
              tie_embeddings: bool = False, dropout: float = 0.0, options=None,
              output: str | os.PathLike | None = None, log=None,
              checkpoint: str | os.PathLike | None = None, resume: bool = False) -> LstmLM:
        """Build a vocabulary, create a model and train it (see :func:`fit`).

        sentences / valid: strings or lists of words, one per sentence. The vocabulary comes
        from ``vocabulary``, or the training text limited by ``vocab_file`` / ``vocab_size``.
        ``options``: :class:`asrkit.nnlm.TrainOptions` (its ``seed`` also seeds the weights).
        """
        from asrkit.nnlm.training import TrainOptions, tokenise

        options = options or TrainOptions()
        sentences = tokenise(sentences)
        if vocabulary is None:
            vocabulary = Vocabulary.from_sentences(sentences, vocab_file, vocab_size)
        lm = cls.create(vocabulary, embed_dim, hidden_dim, num_layers, tie_embeddings, dropout,
                        seed=options.seed)
        lm.fit(sentences, valid, options, output=output, log=log, checkpoint=checkpoint,
               resume=resume)
        return lm

    def fit(self, sentences, valid=None, options=None, output: str | os.PathLike | None = None,
            log=None, checkpoint: str | os.PathLike | None = None,
            resume: bool = False) -> list[dict]:
        """Train this model in place with the graph engine; returns the per-epoch history.

        See :func:`asrkit.nnlm.training.fit` for the procedure (bucketed minibatches, Adam/SGD
        with clipping, CV perplexity per epoch, newbob halving, best model kept and written
        atomically to ``output``; ``checkpoint``/``resume``: the training state, to continue an
        interrupted run exactly).
        """
        from asrkit.nnlm.training import fit

        return fit(self, sentences, valid, options, output=output, log=log,
                   checkpoint=checkpoint, resume=resume)

    def save(self, path: str | os.PathLike) -> None:
        """Write config, vocabulary, training history and parameters to one file, atomically."""
        header = {"config": self.config.as_dict(), "vocab": self.vocabulary.words,
                  "history": self.history}
        write_model_file(path, header, self.network.values())

    @classmethod
    def load(cls, path: str | os.PathLike) -> LstmLM:
        """Read a model written by :meth:`save`; errors name the file."""
        # "optimizer/..." members are a training state: never read here
        header, arrays = read_model_file(path, want=lambda name: "/" not in name)
        try:
            config = LstmLMConfig.from_dict(header["config"])
            vocab = header["vocab"]
            if not isinstance(vocab, list) or not all(isinstance(w, str) and w for w in vocab):
                raise ValueError("'vocab' must be a list of words")
            lm = cls(config, Vocabulary(vocab), source=os.fspath(path))
            bad = [k for k, v in arrays.items() if not np.isfinite(v).all()]
            if bad:
                raise ValueError(f"parameters hold NaN or inf: {', '.join(bad[:3])}")
            lm.network.load_values(arrays, os.fspath(path))
        except (KeyError, TypeError, ValueError) as e:
            raise ModelFileError(f"{path}: inconsistent LSTM LM file: {e}") from None
        lm.history = list(header.get("history", []))
        return lm

    def parameters_changed(self) -> None:
        """Drop what was derived from the parameter values (call after changing them)."""
        self._stepper = None
        self._begin = None

    def load_values(self, values: dict[str, np.ndarray]) -> None:
        """Set every parameter from ``{name: array}``."""
        self.network.load_values(values, self.source)
        self.parameters_changed()

    # -- vocabulary ---------------------------------------------------------------------------

    @property
    def vocab(self) -> list[str]:
        """The words, ids = positions (as ``NgramLM.vocab``)."""
        return self.vocabulary.words

    def word_id(self, word: str) -> int:
        """Id of ``word``; ``<unk>``'s id for words outside the vocabulary."""
        return self.vocabulary.word_id(word)

    def __contains__(self, word: str) -> bool:
        return word in self.vocabulary

    @property
    def unk_id(self) -> int:
        """Id of ``<unk>`` (0)."""
        return self.vocabulary.unk_id

    @property
    def bos_id(self) -> int:
        """Id of ``<s>`` (1)."""
        return self.vocabulary.bos_id

    @property
    def eos_id(self) -> int:
        """Id of ``</s>`` (2)."""
        return self.vocabulary.eos_id

    # -- stateful scoring ---------------------------------------------------------------------

    @property
    def _step(self) -> StepModel:
        if self._stepper is None:
            self._stepper = StepModel(self.network.values(), self.config.num_layers,
                                      self.config.tie_embeddings)
        return self._stepper

    def null_state(self) -> LstmState:
        """Zero ``(h, c)``, no word consumed (scores of ``bos=False``)."""
        h, c = self._step.zero_state(1)
        return LstmState(h=h[:, 0], c=c[:, 0])

    def begin_state(self) -> LstmState:
        """The state after ``<s>``."""
        if self._begin is None:
            self._begin = LstmState(self.null_state(), self.bos_id, length=1)
        return self._begin

    def _materialise(self, states: list[LstmState]) -> None:
        """Compute ``(h, c)`` of the lazy ``states``, parents first, one batched step per
        generation."""
        pending = [s for s in states if s._h is None]
        if not pending:
            return
        self._materialise([s._parent for s in pending])
        pending = list({id(s): s for s in pending if s._h is None}.values())
        h = np.stack([s._parent._h for s in pending], axis=1)
        c = np.stack([s._parent._c for s in pending], axis=1)
        ids = np.array([s._word for s in pending], dtype=np.int64)
        h, c = self._step.step(ids, h, c)
        for k, s in enumerate(pending):
            s._h, s._c = h[:, k], c[:, k]

    def next_logprobs(self, states: list[LstmState]) -> np.ndarray:
        """log10 p(next word | state) float64 ``[len(states), V]`` for many states at once
        (one batched LSTM step for those not computed yet); rows sum to 1 in probability."""
        self._materialise(states)
        todo = list({id(s): s for s in states if s._logp is None}.values())
        if todo:
            logp = self._step.log10_probs(np.stack([s._h[-1] for s in todo]))
            for s, row in zip(todo, logp):
                s._logp = row
        return np.stack([s._logp for s in states]) if states else np.zeros((0, len(self.vocab)))

    def score_id(self, state: LstmState, word_id: int) -> tuple[float, LstmState]:
        """``(log10 p(word | state), next_state)`` for a word given by id."""
        if not 0 <= word_id < len(self.vocab):
            raise ValueError(f"word id {word_id} is outside the vocabulary [0, {len(self.vocab)})")
        logp = float(self.next_logprobs([state])[0, word_id])
        return logp, LstmState(state, int(word_id), length=state.length + 1)

    def score_word(self, state: LstmState, word: str) -> tuple[float, LstmState]:
        """``(log10 p(word | state), next_state)``; an unknown word scores as ``<unk>``."""
        return self.score_id(state, self.word_id(word))

    # -- sentences ----------------------------------------------------------------------------

    def _token_costs(self, sentences: list[np.ndarray], bos: bool, eos: bool,
                     batch_size: int = 64) -> list[np.ndarray]:
        """Natural-log costs ``-ln p`` (float64 ``[n_i (+1 with eos)]``) of every token of
        each id sentence, through the graph, in length-sorted batches."""
        out: list[np.ndarray] = [np.zeros(0)] * len(sentences)
        head = [self.bos_id] if bos else []
        tail = [self.eos_id] if eos else []
        seqs = [np.concatenate([head, ids, tail]).astype(np.int32) for ids in sentences]
        first = None
        if not bos:  # the first token comes from the null state, which the graph cannot feed
            first = -self.next_logprobs([self.null_state()])[0] * LN10
        order = sorted(range(len(seqs)), key=lambda k: len(seqs[k]))
        order = [k for k in order if len(seqs[k]) >= 2]
        net = self.network
        # the graph holds a few [T, B, V] float32 arrays: keep each near SCORE_FLOATS values
        cap = max(1, SCORE_FLOATS // len(self.vocab))
        chunks, cur = [], []
        for k in order:
            if cur and (len(cur) >= batch_size or (len(cur) + 1) * (len(seqs[k]) - 1) > cap):
                chunks.append(cur)
                cur = []
            cur.append(k)
        chunks += [cur] if cur else []
        for chunk in chunks:
            T = len(seqs[chunk[-1]]) - 1
            words = np.zeros((T, len(chunk)), np.int32)
            targets = np.zeros((T, len(chunk)), np.int32)
            lengths = np.zeros(len(chunk), np.int32)
            for b, k in enumerate(chunk):
                s = seqs[k]
                words[: len(s) - 1, b] = s[:-1]
                targets[: len(s) - 1, b] = s[1:]
                lengths[b] = len(s) - 1
            cost = net.cost.eval({net.words: (words, lengths), net.targets: (targets, lengths)},
                                 device=self.device)
            data = np.asarray(cost.data, dtype=np.float64)
            for b, k in enumerate(chunk):
                out[k] = data[: lengths[b], b].copy()
        if first is not None:
            for k, s in enumerate(seqs):
                if len(s):
                    out[k] = np.concatenate([[first[s[0]]], out[k]])
        return out

    def word_scores(self, sentences: Iterable[str], bos: bool = True, eos: bool = True,
                    batch_size: int = 64) -> list[np.ndarray]:
        """Per sentence, log10 p of each word (then ``</s>`` with eos), float64 arrays."""
        ids = [self.vocabulary.encode(s.split()) for s in sentences]
        return [-c / LN10 for c in self._token_costs(ids, bos, eos, batch_size)]

    def score_sentences(self, sentences: Iterable[str], bos: bool = True, eos: bool = True,
                        batch_size: int = 64) -> np.ndarray:
        """Total log10 probability (float64 ``[n]``) of many sentences, batched."""
        return np.array([float(w.sum()) for w in self.word_scores(sentences, bos, eos,
                                                                  batch_size)])

    def score(self, sentence: str, bos: bool = True, eos: bool = True) -> float:
        """Total log10 probability of a whitespace-separated sentence (as ``NgramLM.score``)."""
        return float(self.score_sentences([sentence], bos, eos)[0])

    def full_scores(self, sentence: str, bos: bool = True,
                    eos: bool = True) -> Iterator[tuple[float, int, bool]]:
        """Per word (then ``</s>``) ``(log10 p, context length + 1, is OOV)``, as KenLM's
        ``full_scores`` (the LSTM conditions on the whole history, so the "n-gram length" is
        the number of tokens seen, ``<s>`` included, plus one)."""
        words = sentence.split()
        scores = self.word_scores([sentence], bos, eos)[0]
        flags = [self.vocabulary.is_oov(w) for w in words] + ([False] if eos else [])
        start = 2 if bos else 1
        for k, (lp, oov) in enumerate(zip(scores.tolist(), flags)):
            yield lp, start + k, oov

    def evaluate(self, sentences: str | Iterable[str], batch: int = 4096) -> PerplexityStats:
        """Perplexity figures over sentences with the conventions of ``asrkit.lm.evaluate``:
        OOVs (words outside the vocabulary, and literal ``<unk>``) are skipped in the log
        probability and the counts but stay in the history as ``<unk>``; ``</s>`` counts."""
        if isinstance(sentences, str):
            sentences = [sentences]
        stats = PerplexityStats()
        it = iter(sentences)
        while True:
            raw = list(itertools.islice(it, batch))
            if not raw:
                break
            chunk = [w for w in (s.split() for s in raw) if w]
            ids = [self.vocabulary.encode(w) for w in chunk]
            for w, i, cost in zip(chunk, ids, self._token_costs(ids, True, True)):
                logp = -cost / LN10
                oov = np.append(i == self.unk_id, False)
                stats.sentences += 1
                stats.words += len(w)
                stats.oovs += int(oov.sum())
                stats.logprob += float(logp[~oov].sum())
                stats.logprob_with_oovs += float(logp.sum())
        return stats

    def perplexity(self, sentences: str | Iterable[str]) -> float:
        """Perplexity per word and ``</s>`` (SRILM ``ppl``); a string is one sentence."""
        return self.evaluate(sentences).ppl

    def __repr__(self) -> str:
        c = self.config
        return (f"LstmLM(vocab={c.vocab_size}, embed={c.embed_dim}, hidden={c.hidden_dim}, "
                f"layers={c.num_layers}, tied={c.tie_embeddings})")


__all__ = ["BOS", "EOS", "UNK", "LstmLM", "LstmState"]
