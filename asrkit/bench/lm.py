"""N-gram LM: training time and words/s on a synthetic text (there is no lmplz binary to race),
and query speed against KenLM's python module on the same model and sentences.

The text is a seeded Zipfian word chain (each word's successors are shifted by the previous
word), so its count-of-counts look like language (Kneser-Ney discounts are estimable).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from asrkit.bench import Case, median_time

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

        ours = NgramLM.load(binary)
        ref = kenlm.Model(arpa)
        rng = np.random.default_rng(1)
        queries = [lines[int(i)] for i in rng.integers(0, len(lines), args.queries)]
        n_words = sum(len(q.split()) + 1 for q in queries)
        diff = max(abs(ours.score(q) - ref.score(q)) for q in queries[:200])

        t_ours = median_time(lambda: [ours.score(q) for q in queries], repeat=args.repeat)
        t_ken = median_time(lambda: [ref.score(q) for q in queries], repeat=args.repeat)
        cases.append(Case(f"score() loop, {args.queries} sentences", t_ours, "kenlm", t_ken,
                          {"max_abs_diff_vs_kenlm": f"{diff:.2e}",
                           "asrkit_words_per_s": round(n_words / t_ours)}))
        t_batch = median_time(lambda: ours.score_sentences(queries), repeat=args.repeat)
        cases.append(Case("score_sentences() batch", t_batch, "kenlm score() loop", t_ken,
                          {"asrkit_words_per_s": round(n_words / t_batch)}))

        words = [q.split() + ["</s>"] for q in queries[:1000]]

        def ours_states():
            ours._memo.clear()  # time the lookups, not the memo of the previous run
            for ws in words:
                state = ours.begin_state()
                for w in ws:
                    _, state = ours.score_word(state, w)

        def kenlm_states():
            for ws in words:
                s, out = kenlm.State(), kenlm.State()
                ref.BeginSentenceWrite(s)
                for w in ws:
                    ref.BaseScore(s, w, out)
                    s, out = out, s

        t_ours = median_time(ours_states, repeat=args.repeat)
        t_ken = median_time(kenlm_states, repeat=args.repeat)
        cases.append(Case("stateful score_word loop, 1000 sent.", t_ours, "kenlm BaseScore",
                          t_ken, {"note": "score_id memo cleared before each run"}))
    return cases
