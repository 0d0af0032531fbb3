"""Word and character error rates with sclite-style alignments.

``align(ref, hyp)`` is a Levenshtein alignment with Kaldi's ``compute-wer`` costs (substitution,
insertion and deletion each cost 1); among alignments of equal cost it prefers substitutions, then
deletions, then insertions, as sclite does when printing. ``score_texts`` compares two Kaldi
``text`` tables (``utt-id word word ...``) and returns totals plus one alignment per utterance,
and the errors counted by word (``ScoreReport.confusions``: sclite's confusion pairs,
insertions and deletions, the first thing to read when asking what a model gets wrong).

CER is computed on characters with word boundaries removed (``"a b" -> ["a", "b"]``), as ESPnet
and icefall report it; pass ``keep_spaces=True`` to count the spaces as characters too.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence

CORRECT, SUB, INS, DEL = "C", "S", "I", "D"


@dataclasses.dataclass
class Alignment:
    """One utterance's alignment: parallel lists of reference/hypothesis tokens and edit ops.

    ``ref[i]`` is None for an insertion, ``hyp[i]`` is None for a deletion; ``ops[i]`` is one of
    "C", "S", "I", "D".
    """

    ref: list[str | None]
    hyp: list[str | None]
    ops: list[str]

    def count(self, op: str) -> int:
        """Number of edit operations of kind ``op`` ("C", "S", "I" or "D")."""
        return sum(o == op for o in self.ops)

    @property
    def errors(self) -> int:
        """Substitutions + deletions + insertions."""
        return sum(o != CORRECT for o in self.ops)

    @property
    def num_ref(self) -> int:
        """Number of reference tokens."""
        return sum(r is not None for r in self.ref)

    def pretty(self) -> str:
        """Three sclite-style lines: REF, HYP and EVAL, columns padded to equal width."""
        refs, hyps, evals = [], [], []
        for r, h, o in zip(self.ref, self.hyp, self.ops):
            r_s = "*" * len(h or "") if r is None else (r if o == CORRECT else r.upper())
            h_s = "*" * len(r or "") if h is None else (h if o == CORRECT else h.upper())
            w = max(len(r_s), len(h_s), 1)
            refs.append(r_s.ljust(w))
            hyps.append(h_s.ljust(w))
            evals.append(("" if o == CORRECT else o).ljust(w))
        return "REF:  " + " ".join(refs) + "\nHYP:  " + " ".join(hyps) + "\nEval: " + \
            " ".join(evals).rstrip()


def align(ref: Sequence[str], hyp: Sequence[str]) -> Alignment:
    """Minimum-edit-distance alignment of token lists ``ref`` and ``hyp``."""
    n, m = len(ref), len(hyp)
    # cost[i][j]: edit distance of ref[:i] and hyp[:j]
    cost = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        cost[i][0] = i
    for j in range(1, m + 1):
        cost[0][j] = j
    for i in range(1, n + 1):
        ri = ref[i - 1]
        row, prev = cost[i], cost[i - 1]
        for j in range(1, m + 1):
            diag = prev[j - 1] + (ri != hyp[j - 1])
            row[j] = min(diag, prev[j] + 1, row[j - 1] + 1)
    refs: list[str | None] = []
    hyps: list[str | None] = []
    ops: list[str] = []
    i, j = n, m
    while i > 0 or j > 0:
        if i > 0 and j > 0 and cost[i][j] == cost[i - 1][j - 1] + (ref[i - 1] != hyp[j - 1]):
            refs.append(ref[i - 1])
            hyps.append(hyp[j - 1])
            ops.append(CORRECT if ref[i - 1] == hyp[j - 1] else SUB)
            i, j = i - 1, j - 1
        elif i > 0 and cost[i][j] == cost[i - 1][j] + 1:
            refs.append(ref[i - 1])
            hyps.append(None)
            ops.append(DEL)
            i -= 1
        else:
            refs.append(None)
            hyps.append(hyp[j - 1])
            ops.append(INS)
            j -= 1
    return Alignment(refs[::-1], hyps[::-1], ops[::-1])


def tokenize(text: str, unit: str = "word", keep_spaces: bool = False) -> list[str]:
    """Split a transcript into words (``unit="word"``) or characters (``unit="char"``)."""
    words = text.split()
    if unit == "word":
        return words
    if unit != "char":
        raise ValueError(f"unit must be 'word' or 'char', got {unit!r}")
    return list(" ".join(words)) if keep_spaces else [c for w in words for c in w]


def _by_count(items) -> list:
    """``(key, count)`` pairs, most frequent first, ties in the order of their keys."""
    return sorted(items, key=lambda x: (-x[1], x[0]))


@dataclasses.dataclass
class ScoreReport:
    """Totals over a test set plus each utterance's alignment (``None`` hypothesis = missing)."""

    unit: str
    num_sentences: int
    num_ref: int
    correct: int
    substitutions: int
    deletions: int
    insertions: int
    sentence_errors: int
    missing_hyps: list[str]
    alignments: dict[str, Alignment]

    @property
    def errors(self) -> int:
        """Substitutions + deletions + insertions over the set."""
        return self.substitutions + self.deletions + self.insertions

    @property
    def error_rate(self) -> float:
        """Errors / reference tokens, in percent (WER or CER); 0 for an empty reference."""
        return 100.0 * self.errors / self.num_ref if self.num_ref else 0.0

    def summary_line(self) -> str:
        """Kaldi compute-wer's line, e.g. ``%WER 12.50 [ 1 / 8, 0 ins, 0 del, 1 sub ]``."""
        name = "WER" if self.unit == "word" else "CER"
        return (f"%{name} {self.error_rate:.2f} [ {self.errors} / {self.num_ref}, "
                f"{self.insertions} ins, {self.deletions} del, {self.substitutions} sub ]")

    def as_dict(self) -> dict:
        """JSON-ready totals and per-utterance counts."""
        return {
            "unit": self.unit, "error_rate": self.error_rate, "errors": self.errors,
            "num_ref": self.num_ref, "num_sentences": self.num_sentences,
            "correct": self.correct, "substitutions": self.substitutions,
            "deletions": self.deletions, "insertions": self.insertions,
            "sentence_error_rate": 100.0 * self.sentence_errors / max(self.num_sentences, 1),
            "missing_hyps": self.missing_hyps,
            "confusions": {kind: [[*(k if isinstance(k, tuple) else (k,)), n]
                                  for k, n in _by_count(c.items())]
                           for kind, c in self.confusions().items()},
            "utterances": {u: {"errors": a.errors, "num_ref": a.num_ref,
                               "sub": a.count(SUB), "del": a.count(DEL), "ins": a.count(INS)}
                           for u, a in self.alignments.items()},
        }

    def confusions(self) -> dict[str, collections.Counter]:
        """Errors by word over the set: ``substitutions`` counts ``(ref, hyp)`` pairs,
        ``insertions`` hypothesis words, ``deletions`` reference words."""
        out = {"substitutions": collections.Counter(), "insertions": collections.Counter(),
               "deletions": collections.Counter()}
        for a in self.alignments.values():
            for r, h, o in zip(a.ref, a.hyp, a.ops):
                if o == SUB:
                    out["substitutions"][(r, h)] += 1
                elif o == INS:
                    out["insertions"][h] += 1
                elif o == DEL:
                    out["deletions"][r] += 1
        return out

    def top_errors(self, n: int = 3) -> list[tuple[str, int]]:
        """The ``n`` most frequent errors as ``("six -> eight", count)``, ``("+ one", count)``
        (inserted) or ``("- two", count)`` (deleted); ties in the order of their text."""
        c = self.confusions()
        items = [(f"{r} -> {h}", k) for (r, h), k in c["substitutions"].items()]
        items += [(f"+ {w}", k) for w, k in c["insertions"].items()]
        items += [(f"- {w}", k) for w, k in c["deletions"].items()]
        return _by_count(items)[:max(n, 0)]

    def top_errors_text(self, n: int = 3) -> str:
        """``top_errors(n)`` as one line: ``"six -> eight x82, + one x7"`` ("" without errors)."""
        return ", ".join(f"{text} x{k}" for text, k in self.top_errors(n))

    def confusion_report(self, top: int = 10) -> str:
        """sclite's "CONFUSION PAIRS", "INSERTIONS" and "DELETIONS" sections, each its ``top``
        most frequent entries: ``   1:   88  ->  six ==> eight``."""
        c = self.confusions()
        sections = [("CONFUSION PAIRS", [(f"{r} ==> {h}", k) for (r, h), k in
                                         c["substitutions"].items()]),
                    ("INSERTIONS", list(c["insertions"].items())),
                    ("DELETIONS", list(c["deletions"].items()))]
        lines = []
        for title, unsorted in sections:
            items = _by_count(unsorted)
            lines.append(f"{title:32} Total ({sum(k for _, k in items)})")
            lines += [f"{i:4d}: {k:4d}  ->  {text}" for i, (text, k) in
                      enumerate(items[:top], 1)]
            if len(items) > top:
                lines.append(f"      ({len(items) - top} more)")
            lines.append("")
        return "\n".join(lines).rstrip()

    def report(self, worst: int | None = None, confusions: int = 10) -> str:
        """sclite-style text report: per-utterance alignments (worst first if ``worst``),
        totals, then the ``confusions`` most frequent substitutions, insertions and deletions
        (0: none)."""
        items = list(self.alignments.items())
        if worst is not None:
            items = sorted(items, key=lambda kv: (-kv[1].errors, kv[0]))[:worst]
        lines = []
        for utt, a in items:
            lines.append(f"id: {utt}")
            lines.append(f"Scores: (#C #S #D #I) {a.count(CORRECT)} {a.count(SUB)} "
                         f"{a.count(DEL)} {a.count(INS)}")
            lines.append(a.pretty())
            lines.append("")
        ser = 100.0 * self.sentence_errors / max(self.num_sentences, 1)
        lines.append(self.summary_line())
        lines.append(f"%SER {ser:.2f} [ {self.sentence_errors} / {self.num_sentences} ]")
        if self.missing_hyps:
            lines.append(f"missing hypotheses (scored as deletions): {len(self.missing_hyps)}")
        if confusions > 0 and self.errors:
            lines += ["", self.confusion_report(confusions)]
        return "\n".join(lines)


def score_texts(ref: dict[str, str], hyp: dict[str, str], unit: str = "word",
                keep_spaces: bool = False) -> ScoreReport:
    """Score hypothesis transcripts against references, both ``utt_id -> text``.

    Utterances missing from ``hyp`` count as all deletions (and are listed); hypotheses for
    utterances not in ``ref`` raise ValueError naming them, as Kaldi's compute-wer does in strict
    mode.
    """
    extra = sorted(set(hyp) - set(ref))
    if extra:
        raise ValueError(f"{len(extra)} hypothesis utterance(s) have no reference, e.g. "
                         f"{extra[0]!r}")
    totals = dict.fromkeys((CORRECT, SUB, INS, DEL), 0)
    alignments, missing, sent_err, num_ref = {}, [], 0, 0
    for utt in sorted(ref):
        if utt not in hyp:
            missing.append(utt)
        a = align(tokenize(ref[utt], unit, keep_spaces), tokenize(hyp.get(utt, ""), unit,
                                                                     keep_spaces))
        alignments[utt] = a
        for op in a.ops:
            totals[op] += 1
        num_ref += a.num_ref
        sent_err += a.errors > 0
    return ScoreReport(unit, len(ref), num_ref, totals[CORRECT], totals[SUB], totals[DEL],
                       totals[INS], sent_err, missing, alignments)


def split_report(report: ScoreReport, groups: dict[str, str]) -> dict[str, ScoreReport]:
    """Per-group totals (e.g. per speaker, from ``utt2spk``) of a scored set: group ->
    ``ScoreReport`` over its utterances; utterances missing from ``groups`` form group ``"-"``."""
    members: dict[str, list[str]] = {}
    for utt in report.alignments:
        members.setdefault(groups.get(utt, "-"), []).append(utt)
    missing = set(report.missing_hyps)
    out = {}
    for group, utts in sorted(members.items()):
        totals = dict.fromkeys((CORRECT, SUB, INS, DEL), 0)
        for utt in utts:
            for op in report.alignments[utt].ops:
                totals[op] += 1
        out[group] = ScoreReport(
            report.unit, len(utts), sum(report.alignments[u].num_ref for u in utts),
            totals[CORRECT], totals[SUB], totals[DEL], totals[INS],
            sum(report.alignments[u].errors > 0 for u in utts),
            [u for u in utts if u in missing], {u: report.alignments[u] for u in utts})
    return out


def read_text_table(path: str) -> dict[str, str]:
    """Read a Kaldi ``text`` file (``utt-id transcript``) into a dict; errors (ValueError, or
    OSError when it cannot be read) name file:line."""
    from asrkit.utils.textfile import read_lines

    table: dict[str, str] = {}
    for lineno, line in enumerate(read_lines(path), 1):
        line = line.strip()
        if not line:
            continue
        utt, _, text = line.partition(" ")
        if utt in table:
            raise ValueError(f"{path}:{lineno}: duplicate utterance id {utt!r}")
        table[utt] = text.strip()
    return table
