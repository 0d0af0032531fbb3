"""N-gram LM: training time and words/s on a synthetic text (there is no lmplz binary to race),
and query speed against KenLM's python module on the same model and sentences.

The text is a seeded Zipfian word chain (each word's successors are shifted by the previous
word), so its count-of-counts look like language (Kneser-Ney discounts are estimable).

Queries are timed with each side alone in a fresh process (``asrkit.bench.sides``), median and
quartiles of ``--repeat`` runs: ``score`` per sentence; the stateful walk a decoder makes
(``score_word`` vs KenLM's ``BaseScore``, word by word through the sentences); and the batch
API (``score_words`` on state tuples, ``score_ids`` on state rows) against a ``BaseScore`` loop
over the same (state, word) pairs.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from asrkit.bench import Case, median_time
from asrkit.bench.sides import measure_step, run_side

NAME = "lm"
HELP = "n-gram LM training speed and query speed vs KenLM"


def add_arguments(parser) -> None:
    """Options: text size, order, vocabulary size and number of query sentences."""
    parser.add_argument("--words", type=int, default=1_000_000, help="training words")
    parser.add_argument("--order", type=int, default=3, help="n-gram order")
    parser.add_argument("--vocab", type=int, default=20_000, help="word types")
    parser.add_argument("--queries", type=int, default=5_000, help="query sentences")


def synthetic_text(n_words: int, vocab: int, seed: int = 0) -> list[str]:
    """Seeded sentences (5..25 words) of ``n_words`` words in total over ``vocab`` types."""
    rng = np.random.default_rng(seed)
    offsets = rng.zipf(1.3, size=3 * n_words)
    offsets = offsets[offsets <= vocab][:n_words] - 1
    jumps = rng.random(n_words) < 0.3
    ids = np.empty(n_words, dtype=np.int64)
    prev = 0
    for i in range(n_words):
        # successors shifted by the previous word keep the Zipfian marginals
        prev = int(offsets[i]) if jumps[i] else (int(offsets[i]) + 3 * (prev % 4)) % vocab
        ids[i] = prev
    words = np.array([f"w{i}" for i in range(vocab)])[ids]
    lines, i = [], 0
    lengths = rng.integers(5, 26, size=n_words // 5 + 1)
    for length in lengths:
        if i >= n_words:
            break
        lines.append(" ".join(words[i: i + length]))
        i += length
    return lines


def run(args) -> list[Case]:
    """Time training, loading and querying; returns the cases."""
    from asrkit.lm import NgramLM, train

    cases = []
    lines = synthetic_text(args.words, args.vocab)
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "text.txt")
        with open(text, "w") as f:
            f.write("\n".join(lines) + "\n")
        lm = None

        def fit():
            nonlocal lm
            lm = train(text, args.order)

        t = median_time(fit, repeat=args.repeat, warmup=1)
        cases.append(Case(f"train {args.order}-gram KN, {args.words} words", t, "lmplz", None,
                          {"words_per_s": round(args.words / t),
                           "ngrams": " ".join(map(str, lm.counts))}))
        arpa = os.path.join(tmp, "lm.arpa")
        binary = os.path.join(tmp, "lm.bin")
        t_write = median_time(lambda: lm.write_arpa(arpa), repeat=args.repeat, warmup=0)
        cases.append(Case("write ARPA", t_write, "-", None))
        lm.save_binary(binary)

        import kenlm

        t_ours = median_time(lambda: NgramLM.load(arpa), repeat=args.repeat, warmup=0)
        t_ken = median_time(lambda: kenlm.Model(arpa), repeat=args.repeat, warmup=0)
        cases.append(Case("load ARPA", t_ours, "kenlm", t_ken))
        t_bin = median_time(lambda: NgramLM.load(binary), repeat=args.repeat, warmup=1)
        mb = os.path.getsize(binary) / 1e6
        cases.append(Case("load binary (mmap, verified)", t_bin, "kenlm ARPA", t_ken,
                          {"binary_MB": round(mb, 1), "verify_MB_per_s": round(mb / t_bin)}))
        t_raw = median_time(lambda: NgramLM.from_binary(binary, verify=False),
                            repeat=args.repeat, warmup=1)
        cases.append(Case("load binary (mmap, verify=False)", t_raw, "verified", t_bin))

        qpath = os.path.join(tmp, "queries.txt")
        rng = np.random.default_rng(1)
        with open(qpath, "w") as f:
            f.write("\n".join(lines[int(i)] for i in rng.integers(0, len(lines), args.queries)))
        p = {"arpa": arpa, "binary": binary, "queries": qpath}
        ours = run_side(__name__, "asrkit", p, args.repeat)
        theirs = run_side(__name__, "kenlm", p, args.repeat)
    n_words, n_pairs = ours["words"], ours["pairs"]
    diff = max(abs(a - b) for a, b in zip(ours["probe"], theirs["probe"], strict=True))
    rows = [("score", f"score() loop, {args.queries} sentences", "kenlm score()",
             {"max_abs_diff_vs_kenlm": f"{diff:.2e}"}),
            ("sentences", "score_sentences() batch", "kenlm score() loop", {}),
            ("walk", f"score_word walk, {n_words} words", "kenlm BaseScore walk",
             {}),
            ("batch_words", f"score_words batch, {n_pairs} pairs", "kenlm BaseScore loop",
             {"note": "states as tuples, words as strings"}),
            ("batch_rows", f"score_ids batch, {n_pairs} pairs", "kenlm BaseScore loop",
             {"note": "states as int32 rows, word ids"})]
    for key, name, ref_name, extra in rows:
        t = ours[key]
        tt = theirs[{"batch_words": "batch", "batch_rows": "batch", "sentences": "score"}
                    .get(key, key)]
        words = n_pairs if key.startswith("batch") else n_words
        cases.append(Case(name, t["median"], ref_name, tt["median"],
                          {**extra, "asrkit_words_per_s": round(words / t["median"]),
                           "kenlm_words_per_s": round(words / tt["median"])},
                          asrkit_spread=(t["q1"], t["q3"]), reference_spread=(tt["q1"], tt["q3"])))
    return cases


def _walks(queries: list[str]) -> list[list[str]]:
    return [q.split() + ["</s>"] for q in queries]


def _asrkit_steps(p: dict, queries: list[str]):
    from asrkit.lm import NgramLM

    lm = NgramLM.load(p["binary"])
    walks = _walks(queries)
    states, words = [], []
    for ws in walks:
        state = lm.begin_state()
        for w in ws:
            states.append(state)
            words.append(w)
            _, state = lm.score_word(state, w)
    rows = lm.state_rows(states)
    ids = np.array([lm.word_id(w) for w in words], dtype=np.int32)

    def walk():
        for ws in walks:
            state = lm.begin_state()
            for w in ws:
                _, state = lm.score_word(state, w)

    steps = {"score": lambda: [lm.score(q) for q in queries],
             "sentences": lambda: lm.score_sentences(queries), "walk": walk,
             "batch_words": lambda: lm.score_words(states, words),
             "batch_rows": lambda: lm.score_ids(rows, ids)}
    return steps, [lm.score(q) for q in queries[:200]], len(states)


def _kenlm_steps(p: dict, queries: list[str]):
    import kenlm

    ref = kenlm.Model(p["arpa"])
    walks = _walks(queries)
    pairs = []
    for ws in walks:
        s = kenlm.State()
        ref.BeginSentenceWrite(s)
        for w in ws:
            out = kenlm.State()
            pairs.append((s, w))
            ref.BaseScore(s, w, out)
            s = out

    def walk():
        for ws in walks:
            s, out = kenlm.State(), kenlm.State()
            ref.BeginSentenceWrite(s)
            for w in ws:
                ref.BaseScore(s, w, out)
                s, out = out, s

    def batch():
        out = kenlm.State()
        base = ref.BaseScore
        return [base(s, w, out) for s, w in pairs]

    steps = {"score": lambda: [ref.score(q) for q in queries], "walk": walk, "batch": batch}
    return steps, [ref.score(q) for q in queries[:200]], len(pairs)


def measure_side(side: str, p: dict, repeat: int = 5) -> dict:
    """In a fresh process (``run_side``): the timing (median, quartiles) of each query step of
    ``side`` ("asrkit" or "kenlm"), and the scores of the first 200 sentences."""
    with open(p["queries"]) as f:
        queries = f.read().splitlines()
    steps, probe, pairs = (_asrkit_steps if side == "asrkit" else _kenlm_steps)(p, queries)
    out: dict = {"probe": probe, "pairs": pairs,
                 "words": sum(len(q.split()) + 1 for q in queries)}
    for name, step in steps.items():
        out[name] = measure_step(step, repeat=repeat, memory=False)["timing"]
    return out
