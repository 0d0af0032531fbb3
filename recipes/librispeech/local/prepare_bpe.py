#!/usr/bin/env python3
"""BPE units for CTC: a sentencepiece model on the training transcripts, tokens.txt, a lexicon.

Trains a sentencepiece model (unigram by default, as icefall's LibriSpeech recipes; ``--model-type
bpe`` for byte-pair merges) on the transcripts of a Kaldi ``text`` file, with the CTC blank as
piece 0 (``<blk>``) and ``<unk>`` as piece 1, so piece ids are network output ids. Pieces never
cross a word boundary (sentencepiece splits at whitespace), so a sentence's pieces are the
concatenation of its words' pieces and the lexicon ``WORD ▁WO RD`` gives TLG exactly the
tokenisation the network was trained on.

Writes LANG/bpe.model (+ bpe.vocab), LANG/tokens.txt (``piece id``), LANG/words.txt and
LANG/lexicon.txt for the training words plus the words of ``--extra-words`` files (e.g. the
SLR11 ``librispeech-vocab.txt``, so that the lexicon covers the downloaded LMs). A word that only
spells as ``<unk>`` (characters never seen in training) is left out and counted.

Usage: prepare_bpe.py TRAIN_TEXT LANG [--vocab-size 500] [--model-type unigram]
                      [--extra-words FILE ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

BLANK, UNK = "<blk>", "<unk>"


def read_transcripts(path: str) -> list[str]:
    """Sentences (without utterance ids) of a Kaldi ``text`` file; errors name the line."""
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) == 1:
                print(f"warning: {path}:{lineno}: utterance {fields[0]} has an empty transcript",
                      file=sys.stderr)
                continue
            out.append(" ".join(fields[1:]))
    if not out:
        raise ValueError(f"{path}: no transcripts")
    return out


def read_words(path: str) -> list[str]:
    """First field of each non-empty line (word lists, lexicons, vocab files)."""
    with open(path, encoding="utf-8") as f:
        return [line.split()[0] for line in f if line.strip()]


def train_sentencepiece(sentences: list[str], prefix: str, vocab_size: int,
                        model_type: str = "unigram"):
    """Train and load a sentencepiece model ``PREFIX.model``; returns the processor.

    Raises ValueError with sentencepiece's reason (e.g. a vocabulary too large for the text)."""
    import sentencepiece as spm

    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8", delete=False) as f:
        f.write("".join(s + "\n" for s in sentences))
        text = f.name
    try:
        spm.SentencePieceTrainer.train(
            input=text, model_prefix=prefix, vocab_size=vocab_size, model_type=model_type,
            character_coverage=1.0, input_sentence_size=100_000_000, shuffle_input_sentence=True,
            user_defined_symbols=[BLANK], unk_id=1, bos_id=-1, eos_id=-1,
            minloglevel=2)
    except RuntimeError as e:
        raise ValueError(f"sentencepiece: {e}") from e
    finally:
        os.unlink(text)
    return spm.SentencePieceProcessor(model_file=prefix + ".model")


def main(argv=None) -> int:
    from asrkit.utils import atomic_write_text

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("text", help="training transcripts (Kaldi text)")
    p.add_argument("lang", help="output folder")
    p.add_argument("--vocab-size", type=int, default=500)
    p.add_argument("--model-type", default="unigram", choices=["unigram", "bpe"])
    p.add_argument("--extra-words", nargs="*", default=[], metavar="FILE",
                   help="more words for the lexicon (first field of each line)")
    args = p.parse_args(argv)
    try:
        sentences = read_transcripts(args.text)
        extra = [w for path in args.extra_words for w in read_words(path)]
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    os.makedirs(args.lang, exist_ok=True)
    try:
        sp = train_sentencepiece(sentences, os.path.join(args.lang, "bpe"), args.vocab_size,
                                 args.model_type)
    except ValueError as e:
        print(f"error: {args.text}: {e}", file=sys.stderr)
        return 1
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    assert pieces[0] == BLANK and pieces[1] == UNK, pieces[:2]
    atomic_write_text(os.path.join(args.lang, "tokens.txt"),
                      "".join(f"{s} {i}\n" for i, s in enumerate(pieces)))

    words = sorted({w for s in sentences for w in s.split()} | set(extra))
    lexicon, dropped = [], 0
    for w, ids in zip(words, sp.encode(words)):
        if sp.unk_id() in ids:
            dropped += 1
            continue
        lexicon.append(f"{w} {' '.join(sp.id_to_piece(i) for i in ids)}\n")
    atomic_write_text(os.path.join(args.lang, "lexicon.txt"), "".join(lexicon))
    atomic_write_text(os.path.join(args.lang, "words.txt"),
                      "".join(line.split(" ", 1)[0] + "\n" for line in lexicon))
    print(f"{args.lang}: {len(pieces)} tokens ({args.model_type}), {len(lexicon)} words in the "
          f"lexicon ({dropped} left out: characters unseen in training)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
