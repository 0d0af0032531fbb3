"""Decoding speed and accuracy: asrkit's TLG Viterbi search against flashlight-text's
LexiconDecoder (and asrkit's CTC prefix beam search) on the same synthetic emissions.

Everything is made here, seeded, without downloads:
  * a vocabulary of pronounceable words (CV(C) syllables) and a character lexicon whose
    spellings end in the word-boundary token ``|`` (wav2letter/wav2vec2 style); tokens are
    ``<blk> | a .. z``;
  * a training text from a Zipfian bigram process (each word has a few preferred successors,
    with Zipfian jumps in between), so a trigram LM (``asrkit.lm.train``, Kneser-Ney) lowers
    the perplexity a lot; TLG is built with ``asrkit.decoders.graph.make_graph``;
  * emissions for held-out sentences from the same process: per character 1-2 frames peaked on
    it, blanks between, Gaussian logit noise, and a confusion per character with probability
    ``--confusion`` (another vowel/consonant scores a little above the true one), so the
    acoustic-only best path is wrong in most words and the lexicon and LM must fix it. One
    output frame is ``--frame-shift`` seconds (default 40 ms: 10 ms features, 4x subsampling).

RTF = decoding seconds / audio seconds, on one core (numba with one thread; flashlight
decodes single-threaded). Flashlight gets the same ARPA model through a Python subclass of its
``LM`` (torchaudio's custom-LM recipe): a Python callback per LM query (memoised per state and
word, across runs) handicaps it against a compiled KenLM, so the like-for-like pair is also
printed: flashlight with ``ZeroLM`` against asrkit with a word-loop graph. LM weight and word
score are the same for every decoder (asrkit: ``acoustic_scale = 1 / lm_weight``).
"""

from __future__ import annotations

import importlib.util
import math
import os
import tempfile
import time
import warnings

import numpy as np

from asrkit.bench import Case, median_time

NAME = "decode"
HELP = "decoding RTF and WER: TLG Viterbi vs flashlight-text LexiconDecoder, CTC prefix search"

CONSONANTS = "bcdfghjklmnprstvwz"
VOWELS = "aeiou"
BLANK, BOUNDARY = "<blk>", "|"
TOKENS = [BLANK, BOUNDARY] + [chr(c) for c in range(ord("a"), ord("z") + 1)]


def add_arguments(parser) -> None:
    """Options: sizes of the task, noise, search beams and which decoders to run."""
    parser.add_argument("--words", type=int, default=1000, help="vocabulary size")
    parser.add_argument("--sentences", type=int, default=100, help="test sentences decoded")
    parser.add_argument("--train-sentences", type=int, default=20000,
                        help="sentences of LM training text")
    parser.add_argument("--order", type=int, default=3, help="LM order")
    parser.add_argument("--frame-shift", type=float, default=0.04,
                        help="seconds per output frame (after subsampling)")
    parser.add_argument("--confusion", type=float, default=0.3,
                        help="probability that a character's frames favour another letter")
    parser.add_argument("--lm-weight", type=float, default=1.0,
                        help="LM weight (asrkit: acoustic scale 1 / weight)")
    parser.add_argument("--beams", default="6,8,10,12",
                        help="asrkit Viterbi beams (comma-separated)")
    parser.add_argument("--max-active", type=int, default=7000)
    parser.add_argument("--fl-beams", default="5,10,20,50,100,200",
                        help="flashlight beam sizes (hypotheses kept, comma-separated)")
    parser.add_argument("--fl-beam-threshold", type=float, default=25.0)
    parser.add_argument("--ctc-beam", type=int, default=32, help="CTC prefix search beam")
    parser.add_argument("--ctc-score-beam", type=float, default=10.0,
                        help="CTC prefix search: drop prefixes this many nats below the best")
    parser.add_argument("--ctc-token-beam", type=float, default=6.0,
                        help="CTC prefix search: extend tokens this close to the frame's best")
    parser.add_argument("--no-flashlight", action="store_true", help="skip flashlight-text")
    parser.add_argument("--no-ctc", action="store_true", help="skip the CTC prefix search")
    parser.add_argument("--seed", type=int, default=0)


# -- the synthetic task ------------------------------------------------------------------------

def synthetic_words(n: int, rng: np.random.Generator) -> list[str]:
    """``n`` distinct pronounceable words of 1-3 CV(C) syllables."""
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        syllables = int(rng.choice([1, 2, 2, 3, 3]))
        w = "".join(CONSONANTS[rng.integers(len(CONSONANTS))] + VOWELS[rng.integers(len(VOWELS))]
                    + (CONSONANTS[rng.integers(len(CONSONANTS))] if rng.random() < 0.3 else "")
                    for _ in range(syllables))
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


class BigramProcess:
    """Sentences from a Zipfian bigram chain over ``vocab`` words: after word w, with
    probability 0.75 one of w's ``fanout`` successors (Zipfian ranks), else a Zipfian draw
    from the whole vocabulary. Sentences have 4-14 words."""

    def __init__(self, vocab: list[str], rng: np.random.Generator, fanout: int = 12):
        self.vocab = vocab
        v = len(vocab)
        self.succ = np.stack([rng.permutation(v)[:min(fanout, v)] for _ in range(v)])
        ranks = np.arange(1, self.succ.shape[1] + 1)
        self.p_succ = (1.0 / ranks) / (1.0 / ranks).sum()
        uni = 1.0 / np.arange(1, v + 1) ** 1.1
        self.p_uni = uni / uni.sum()
        self.order = rng.permutation(v)  # which word gets which unigram rank

    def sentences(self, n: int, rng: np.random.Generator) -> list[list[str]]:
        """``n`` sentences as word lists."""
        out = []
        v = len(self.vocab)
        for _ in range(n):
            length = int(rng.integers(4, 15))
            w = int(self.order[rng.choice(v, p=self.p_uni)])
            ids = [w]
            for _ in range(length - 1):
                if rng.random() < 0.75:
                    w = int(self.succ[w, rng.choice(self.succ.shape[1], p=self.p_succ)])
                else:
                    w = int(self.order[rng.choice(v, p=self.p_uni)])
                ids.append(w)
            out.append([self.vocab[i] for i in ids])
        return out


def synthetic_emissions(words: list[str], rng: np.random.Generator, confusion: float,
                        peak: float = 6.0, noise: float = 1.5) -> np.ndarray:
    """Log-softmax emissions float32 [T, len(TOKENS)] for a sentence spelled with ``|`` after
    each word: per character 1-2 peaked frames then 0-1 blank frames (1 between repeats), two
    blank frames at each end; a confused character's frames favour a same-class letter by
    0.3-2 nats."""
    index = {t: i for i, t in enumerate(TOKENS)}
    labels: list[int] = []
    confused: list[int] = []
    labels += [0, 0]
    confused += [-1, -1]
    chars = [c for w in words for c in w + BOUNDARY]
    for i, ch in enumerate(chars):
        tok = index[ch]
        other = -1
        if ch != BOUNDARY and rng.random() < confusion:
            pool = VOWELS if ch in VOWELS else CONSONANTS
            alt = pool[rng.integers(len(pool) - 1)]
            other = index[alt if alt != ch else pool[-1]]
        for _ in range(int(rng.integers(1, 3))):
            labels.append(tok)
            confused.append(other)
        nxt = chars[i + 1] if i + 1 < len(chars) else None
        n_blank = 1 if nxt == ch else int(rng.integers(0, 2))
        labels += [0] * n_blank
        confused += [-1] * n_blank
    labels += [0, 0]
    confused += [-1, -1]
    T, C = len(labels), len(TOKENS)
    logits = rng.normal(0.0, noise, size=(T, C))
    logits[np.arange(T), labels] += peak
    conf = np.array(confused)
    rows = np.flatnonzero(conf >= 0)
    logits[rows, conf[rows]] = logits[rows, np.array(labels)[rows]] + rng.uniform(0.3, 2.0,
                                                                                  rows.size)
    logits -= logits.max(axis=1, keepdims=True)
    logits -= np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return logits.astype(np.float32)


class Task:
    """The whole benchmark setup: vocabulary, LM, graphs, test emissions and references."""

    def __init__(self, args, folder: str):
        from asrkit.decoders.graph import make_graph
        from asrkit.lm import train

        rng = np.random.default_rng(args.seed)
        self.vocab = synthetic_words(args.words, rng)
        process = BigramProcess(self.vocab, rng)
        train_text = [" ".join(s) for s in process.sentences(args.train_sentences, rng)]
        test_rng = np.random.default_rng(args.seed + 1)
        self.refs = [" ".join(s) for s in process.sentences(args.sentences, test_rng)]
        self.emissions = [synthetic_emissions(r.split(), test_rng, args.confusion)
                          for r in self.refs]
        self.frames = sum(e.shape[0] for e in self.emissions)
        self.audio_s = self.frames * args.frame_shift
        self.num_chars = sum(len(r) + 1 for r in self.refs)

        t0 = time.perf_counter()
        with warnings.catch_warnings():
            # the synthetic text has no singletons, so Kneser-Ney falls back to fixed
            # unigram discounts and says so
            warnings.simplefilter("ignore", RuntimeWarning)
            self.lm = train(train_text, order=args.order)
        self.lm_train_s = time.perf_counter() - t0
        self.lm_path = os.path.join(folder, "lm.arpa")
        self.lm.write_arpa(self.lm_path)
        self.perplexity = self.lm.perplexity(self.refs)
        tokens_path = os.path.join(folder, "tokens.txt")
        with open(tokens_path, "w", encoding="utf-8") as f:
            f.writelines(f"{t} {i}\n" for i, t in enumerate(TOKENS))
        lexicon_path = os.path.join(folder, "lexicon.txt")
        with open(lexicon_path, "w", encoding="utf-8") as f:
            f.writelines(f"{w} {' '.join(w)} {BOUNDARY}\n" for w in self.vocab)
        t0 = time.perf_counter()
        self.tlg = make_graph(tokens_path, lexicon_path, lm=self.lm)
        self.tlg_build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.loop = make_graph(tokens_path, lexicon_path, word_loop=True)
        self.loop_build_s = time.perf_counter() - t0


def word_error_rate(refs: list[str], hyps: list[str]) -> float:
    """Corpus WER in percent."""
    from asrkit.decoders.scoring import score_texts

    ids = [f"u{i:05d}" for i in range(len(refs))]
    return score_texts(dict(zip(ids, refs)), dict(zip(ids, hyps))).error_rate


# -- decoders ----------------------------------------------------------------------------------

def search_graph(graph):
    """The search arrays of a built ``Graph`` and its word table, made once per graph (as
    ``DecodingGraph.load`` does once per decoding run)."""
    from asrkit.decoders.viterbi import GraphArrays

    cached = graph.__dict__.get("_bench_search")
    if cached is None:
        arrays = GraphArrays.from_fst(graph.TLG)
        arrays.search_arrays()
        cached = graph.__dict__["_bench_search"] = (arrays, dict(graph.words))
    return cached


def asrkit_viterbi(task: Task, graph, beam: float, args) -> list[str]:
    """Decode every test utterance with ``graph`` (1-best only, no lattice)."""
    from asrkit.decoders.viterbi import viterbi_decode

    arrays, words = search_graph(graph)
    scale = 1.0 / args.lm_weight
    hyps = []
    for e in task.emissions:
        res = viterbi_decode(arrays, e, beam=beam, max_active=args.max_active,
                             acoustic_scale=scale)
        hyps.append(" ".join(words[w] for w in res.words))
    return hyps


class _FlashlightNgram:
    """Builds the flashlight ``LM`` subclass over an ``asrkit.lm.NgramLM`` (natural-log scores).

    flashlight compares LM states by identity, so there is one ``LMState`` object per n-gram
    context (``state.child(word)`` of a parent would split equal contexts)."""

    def __new__(cls, lm, word_ids: list[int]):
        from flashlight.lib.text.decoder import LM, LMState

        class NgramLM(LM):
            def __init__(self):
                LM.__init__(self)
                self.memo: dict = {}
                self.context: dict = {}
                self.by_context: dict = {}

            def _state(self, ctx):
                st = self.by_context.get(ctx)
                if st is None:
                    st = self.by_context[ctx] = LMState()
                    self.context[st] = ctx
                return st

            def start(self, start_with_nothing):
                return self._state(lm.null_state() if start_with_nothing else lm.begin_state())

            def score(self, state, word):
                key = (state, word)
                hit = self.memo.get(key)
                if hit is None:
                    logp, nxt = lm.score_id(self.context[state], word_ids[word])
                    hit = self.memo[key] = (self._state(nxt), logp * math.log(10.0))
                return hit

            def finish(self, state):
                logp, nxt = lm.score_id(self.context[state], lm.eos_id)
                return self._state(nxt), logp * math.log(10.0)

        return NgramLM()


def flashlight_decoder(task: Task, beam_size: int, args, zero_lm: bool = False):
    """A ``LexiconDecoder`` over the same lexicon and LM (or ``ZeroLM``) and its word list."""
    from flashlight.lib.text.decoder import (
        CriterionType,
        LexiconDecoder,
        LexiconDecoderOptions,
        SmearingMode,
        Trie,
        ZeroLM,
    )

    index = {t: i for i, t in enumerate(TOKENS)}
    sil = index[BOUNDARY]
    if zero_lm:
        lm = ZeroLM()
        # asrkit's word loop costs ln V per word: the same as a word score of -ln V
        word_score = -math.log(len(task.vocab)) * args.lm_weight
    else:
        lm = task.__dict__.get("_fl_lm")
        if lm is None:
            lm = task._fl_lm = _FlashlightNgram(task.lm, [task.lm.word_id(w) for w in task.vocab])
        word_score = 0.0
    start = lm.start(False)
    trie = Trie(len(TOKENS), sil)
    for i, w in enumerate(task.vocab):
        _, score = lm.score(start, i)
        trie.insert([index[c] for c in w] + [sil], i, score)
    trie.smear(SmearingMode.MAX)
    opts = LexiconDecoderOptions(beam_size=beam_size, beam_size_token=len(TOKENS),
                                 beam_threshold=args.fl_beam_threshold, lm_weight=args.lm_weight,
                                 word_score=word_score, unk_score=-math.inf, sil_score=0.0,
                                 log_add=False, criterion_type=CriterionType.CTC)
    return LexiconDecoder(opts, trie, lm, sil, index[BLANK], -1, [], False)


def flashlight_decode(task: Task, decoder) -> list[str]:
    """Decode every test utterance; returns the hypotheses."""
    hyps = []
    for e in task.emissions:
        e = np.ascontiguousarray(e, np.float32)
        best = decoder.decode(e.ctypes.data, e.shape[0], e.shape[1])[0]
        hyps.append(" ".join(task.vocab[w] for w in best.words if w >= 0))
    return hyps


def ctc_prefix_decode(task: Task, args, with_lm: bool = True) -> list[str]:
    """CTC prefix beam search over the characters: with the n-gram LM fused at word ends and
    spelling constrained to the lexicon, or neither (the compiled no-LM search)."""
    from asrkit.decoders.ctc import Lexicon, ctc_prefix_beam_search

    lexicon = Lexicon(task.vocab) if with_lm else None
    lm = task.lm if with_lm else None
    return [" ".join(ctc_prefix_beam_search(e, TOKENS, beam=args.ctc_beam, lm=lm,
                                            lm_weight=args.lm_weight, unit="char",
                                            word_delimiter=BOUNDARY, lexicon=lexicon,
                                            score_beam=args.ctc_score_beam,
                                            token_beam=args.ctc_token_beam)[0].words)
            for e in task.emissions]


# -- the benchmark -----------------------------------------------------------------------------

def _timed(fn, repeat: int) -> tuple[float, list[str]]:
    out: list[list[str]] = []
    t = median_time(lambda: out.append(fn()), repeat=repeat, warmup=1)
    return t, out[-1]


def _one_thread() -> None:
    import numba

    numba.set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:
        pass


def run(args) -> list[Case]:
    """Build the task, decode it with every decoder and beam; returns the cases."""
    from asrkit.decoders.ctc import ctc_greedy

    _one_thread()
    repeat = max(1, args.repeat)
    beams = [float(b) for b in args.beams.split(",") if b]
    fl_beams = [int(b) for b in args.fl_beams.split(",") if b]
    with tempfile.TemporaryDirectory() as tmp:
        task = Task(args, tmp)
    cases = []
    sizes = task.tlg.sizes()
    cases.append(Case(f"build TLG ({args.words} words, {args.order}-gram)", task.tlg_build_s,
                      "-", None, {
                          "TLG": sizes["TLG"], "LG": sizes["LG"], "G": sizes["G"],
                          "lm_ngrams": task.lm.counts, "lm_train_s": round(task.lm_train_s, 3),
                          "test_perplexity": round(task.perplexity, 1),
                          "step_s": {k: round(v, 3) for k, v in task.tlg.timings.items()},
                          "word_loop_TLG": task.loop.sizes()["TLG"],
                          "word_loop_build_s": round(task.loop_build_s, 3)}))
    audio = {"utterances": len(task.refs), "frames": task.frames,
             "audio_s": round(task.audio_s, 1), "frame_shift_s": args.frame_shift}
    cases.append(Case("test set", 0.0, "-", None, audio))

    fl_runs: dict[bool, list[tuple[int, float, float]]] = {False: [], True: []}
    if not args.no_flashlight and importlib.util.find_spec("flashlight") is None:
        cases.append(Case("flashlight-text not installed (pip install flashlight-text)", 0.0,
                          "-", None))
    elif not args.no_flashlight:
        for zero in (False, True):
            for bs in fl_beams:
                dec = flashlight_decoder(task, bs, args, zero_lm=zero)
                t, hyps = _timed(lambda d=dec: flashlight_decode(task, d), repeat)
                fl_runs[zero].append((bs, t, word_error_rate(task.refs, hyps)))

    for zero, graph, label in ((False, task.tlg, "TLG"), (True, task.loop, "word-loop")):
        for beam in beams:
            t, hyps = _timed(lambda g=graph, b=beam: asrkit_viterbi(task, g, b, args), repeat)
            wer = word_error_rate(task.refs, hyps)
            extra = {"rtf": round(t / task.audio_s, 5), "wer": round(wer, 2)}
            ref_name, ref_t = "flashlight", None
            # the fastest flashlight setting that is at least as accurate
            good = [r for r in fl_runs[zero] if r[2] <= wer + 1e-9]
            if good:
                bs, ref_t, fl_wer = min(good, key=lambda r: r[1])
                ref_name = f"flashlight{'+ZeroLM' if zero else ''} bs={bs}"
                extra.update(fl_rtf=round(ref_t / task.audio_s, 5), fl_wer=round(fl_wer, 2))
            elif fl_runs[zero]:
                extra["fl"] = "no flashlight beam reached this WER"
            cases.append(Case(f"asrkit {label} beam={beam:g}", t, ref_name, ref_t, extra))
    for zero in (False, True):
        for bs, t, wer in fl_runs[zero]:
            cases.append(Case(f"flashlight{'+ZeroLM' if zero else '+py-LM'} bs={bs}", t, "-",
                              None, {"rtf": round(t / task.audio_s, 5), "wer": round(wer, 2)}))
    if not args.no_ctc:
        for with_lm, label in ((True, "+ LM + lexicon (Python)"), (False, "no LM (numba)")):
            t, hyps = _timed(lambda w=with_lm: ctc_prefix_decode(task, args, w), repeat)
            cases.append(Case(f"asrkit CTC prefix beam={args.ctc_beam} {label}", t, "-", None,
                              {"rtf": round(t / task.audio_s, 5),
                               "wer": round(word_error_rate(task.refs, hyps), 2)}))
    greedy = [" ".join("".join(TOKENS[i] for i in ctc_greedy(e)).split(BOUNDARY))
              for e in task.emissions]
    cases.append(Case("acoustic-only greedy (no lexicon, no LM)", 0.0, "-", None,
                      {"wer": round(word_error_rate(task.refs, greedy), 2)}))
    return cases
