#!/usr/bin/env python3
"""Language resources for connected digits: tokens, lexicon, words and LM training text.

Each word is one CTC token (whole-word units, as TIDIGITS systems use whole-word models): with
eleven words and thousands of examples of each, whole words train fastest and need no
pronunciation lexicon. The lexicon still goes through the usual T o L o G construction, so the
recipe exercises the same graph building as the sentence and LibriSpeech recipes.

Writes LANG/tokens.txt (``<blk> 0`` then one line per word), LANG/lexicon.txt (``word word``),
LANG/words.txt and LANG/lm_text.txt (the training transcripts without utterance ids).

Usage: prepare_lang.py TRAIN_TEXT LANG
"""

from __future__ import annotations

import os
import sys

WORDS = ["zero", "oh", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    text_path, lang = argv
    os.makedirs(lang, exist_ok=True)
    sentences = []
    with open(text_path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            unknown = [w for w in fields[1:] if w not in WORDS]
            if unknown:
                print(f"{text_path}:{lineno}: unknown word(s) {unknown}", file=sys.stderr)
                return 1
            sentences.append(" ".join(fields[1:]))
    with open(os.path.join(lang, "tokens.txt"), "w", encoding="utf-8") as f:
        f.write("<blk> 0\n" + "".join(f"{w} {i + 1}\n" for i, w in enumerate(WORDS)))
    with open(os.path.join(lang, "lexicon.txt"), "w", encoding="utf-8") as f:
        f.write("".join(f"{w} {w}\n" for w in WORDS))
    with open(os.path.join(lang, "words.txt"), "w", encoding="utf-8") as f:
        f.write("".join(f"{w}\n" for w in WORDS))
    with open(os.path.join(lang, "lm_text.txt"), "w", encoding="utf-8") as f:
        f.write("".join(s + "\n" for s in sentences))
    print(f"{lang}: {len(WORDS)} words, {len(sentences)} LM training sentences")
    return 0


if __name__ == "__main__":
    sys.exit(main())
