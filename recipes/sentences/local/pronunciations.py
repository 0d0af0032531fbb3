"""Which CMUdict pronunciation did the synthesiser say? Its phonemes, mapped to ARPAbet.

eSpeak NG (and Piper, whose front end it is) can write the phonemes it speaks
(``espeak_TextToPhonemes``, IPA output; ``ESpeak.ipa`` in recipes/utils/synth) in the voice's
accent: "the" before a consonant is ``ðə`` (DH AH), "tomato" in en-us ``təmˈeɪɾoʊ`` (T AH M EY T
OW) but in en-gb ``təmˈɑːtəʊ`` (T AH M AA T OW). The data stage records this IPA per utterance
(``text.ipa``); the lang stage then picks, for each word of a transcript, the lexicon
pronunciation whose phones best match it, so the CTC targets follow what was said rather than
always CMUdict's first entry. flite and festival give their segments in CMU's own phone set
(``text.phones``; ``cmu_phones_to_arpabet``), used the same way.

The IPA is mapped to ARPAbet with a many-to-one table (British vowels to their nearest American
phone; an unknown symbol is dropped). eSpeak joins some words (``ʌvðə`` for "of the"), so the
choice is made over the whole sentence: the pronunciations form a sausage of alternatives per
word, aligned against the eSpeak phone string by edit distance (Viterbi over words, CMUdict's
order breaking ties).
"""

from __future__ import annotations

import numpy as np

# IPA (after removing stress marks) -> ARPAbet; longer keys are matched first
IPA_TO_ARPABET = {
    "aɪ": ["AY"], "aʊ": ["AW"], "eɪ": ["EY"], "oʊ": ["OW"], "əʊ": ["OW"], "ɔɪ": ["OY"],
    "tʃ": ["CH"], "dʒ": ["JH"], "eə": ["EH", "R"], "ɪə": ["IH", "R"], "ʊə": ["UH", "R"],
    "ɑː": ["AA"], "ɔː": ["AO"], "ɜː": ["ER"], "iː": ["IY"], "uː": ["UW"], "ʉː": ["UW"],
    "eː": ["EY"], "oː": ["OW"], "a:": ["AA"], "aː": ["AA"], "ɚ": ["ER"], "ə": ["AH"],
    "ɐ": ["AH"], "ʌ": ["AH"], "æ": ["AE"], "a": ["AE"], "ɑ": ["AA"], "ɒ": ["AA"], "ɔ": ["AO"],
    "ɛ": ["EH"], "e": ["EH"], "ɪ": ["IH"], "ᵻ": ["IH"], "i": ["IY"], "ʊ": ["UH"], "u": ["UW"],
    "ʉ": ["UW"], "o": ["OW"], "b": ["B"], "d": ["D"], "ð": ["DH"], "f": ["F"], "ɡ": ["G"],
    "g": ["G"], "h": ["HH"], "j": ["Y"], "k": ["K"], "l": ["L"], "ɫ": ["L"], "m": ["M"],
    "n": ["N"], "ŋ": ["NG"], "p": ["P"], "ɹ": ["R"], "r": ["R"], "ɾ": ["T"], "s": ["S"],
    "ʃ": ["SH"], "t": ["T"], "θ": ["TH"], "v": ["V"], "w": ["W"], "ʍ": ["W"], "z": ["Z"],
    "ʒ": ["ZH"], "x": ["K"], "ʔ": ["T"],
}
_KEYS = sorted(IPA_TO_ARPABET, key=len, reverse=True)
_IGNORED = "ˈˌː:ˑ̩̃ -_‿"


def ipa_to_arpabet(ipa: str) -> list[str]:
    """ARPAbet phones of an eSpeak IPA string (stress, length and word breaks dropped)."""
    out: list[str] = []
    i = 0
    s = ipa.replace("ˈ", "").replace("ˌ", "")
    while i < len(s):
        for key in _KEYS:
            if s.startswith(key, i):
                out.extend(IPA_TO_ARPABET[key])
                i += len(key)
                break
        else:
            i += 1  # length marks, word breaks and symbols without an ARPAbet phone
    return out


# flite's and festival's US phone set (CMU's, lower case) -> ARPAbet; pauses dropped
CMU_EXTRA = {"ax": ["AH"], "axr": ["ER"], "el": ["AH", "L"], "em": ["AH", "M"],
             "en": ["AH", "N"], "dx": ["T"], "pau": [], "sil": [], "h#": [], "brth": []}


def cmu_phones_to_arpabet(phones: list[str]) -> list[str]:
    """ARPAbet phones of the segments flite or festival spoke (``['pau', 'th', 'r', 'iy',
    ...]``): upper-cased, schwa ``ax`` as AH, ``axr`` as ER, pauses dropped."""
    out: list[str] = []
    for ph in phones:
        out.extend(CMU_EXTRA.get(ph, [ph.upper()]))
    return out


def _row_step(prev: np.ndarray, phone: str, ref: list[str]) -> np.ndarray:
    """One edit-distance row: ``prev`` is the cost of reaching each ref position before
    ``phone``; returns the costs after it (delete it, match/substitute, or insert ref phones)."""
    sub = np.array([0.0 if r == phone else 1.0 for r in ref])
    cand = prev + 1.0
    cand[1:] = np.minimum(cand[1:], prev[:-1] + sub)
    j = np.arange(len(prev), dtype=float)
    return np.minimum.accumulate(cand - j) + j  # then any number of inserted ref phones


def choose_pronunciations(words: list[str], lexicon: dict[str, list[list[str]]],
                          ref: list[str]) -> tuple[list[list[str]], float]:
    """For each word, the pronunciation (from ``lexicon[word]``, all alternatives) such that
    their concatenation is nearest to the phone string ``ref`` in edit distance.

    Returns (pronunciations, edit distance). Ties go to the earlier alternative."""
    m = len(ref)
    start = np.arange(m + 1, dtype=float)  # ref phones before the first word are insertions
    start = np.minimum.accumulate(start)
    boundary = [start]
    tables = []  # per word: per alternative, its rows [len(pron) + 1, m + 1]
    for w in words:
        prev = boundary[-1]
        rows_k = []
        best = np.full(m + 1, np.inf)
        for pron in lexicon[w]:
            rows = [prev]
            for ph in pron:
                rows.append(_row_step(rows[-1], ph, ref))
            rows_k.append(np.stack(rows))
            best = np.minimum(best, rows[-1])
        tables.append(rows_k)
        boundary.append(best)
    # backtrace from the end of both strings
    j = m
    chosen: list[list[str]] = []
    for i in range(len(words) - 1, -1, -1):
        target = boundary[i + 1][j]
        k = next(k for k, t in enumerate(tables[i]) if t[-1, j] <= target + 1e-9)
        pron, rows = lexicon[words[i]][k], tables[i][k]
        chosen.append(pron)
        r = len(pron)
        while r > 0:
            sub = 0.0 if j > 0 and ref[j - 1] == pron[r - 1] else 1.0
            if rows[r, j] == rows[r - 1, j] + 1.0:
                r -= 1
            elif j > 0 and rows[r, j] == rows[r - 1, j - 1] + sub:
                r -= 1
                j -= 1
            else:
                j -= 1  # an inserted ref phone
        # row 0 is the previous boundary: j is where this word started
    chosen.reverse()
    return chosen, float(boundary[-1][m])
