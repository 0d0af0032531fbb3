#!/usr/bin/env python3
"""A copy of a Kaldi data directory whose ``text`` is in sentencepiece pieces, for CTC training
with ``unit = "piece"``.

The other files of SRC (feats.scp, cmvn.scp, utt2spk, spk2utt, utt2num_frames, ...) are copied
unchanged; their archive paths are absolute, so archives are shared, not copied. The word
transcripts are kept as DST/text.words. An utterance whose transcript spells as ``<unk>``
(characters the model never saw) is reported with its id and line; it stays in the copy, and
the reader maps the piece to the ``<unk>`` token.

Usage: piece_transcripts.py BPE_MODEL SRC_DIR DST_DIR
"""

from __future__ import annotations

import os
import shutil
import sys


def piece_text(text_path: str, model_path: str) -> tuple[list[str], int]:
    """Kaldi text lines ``utt piece piece ...`` and the number of lines with ``<unk>``."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=model_path)
    out, unknown = [], 0
    with open(text_path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            utt, _, words = line.strip().partition(" ")
            if not utt:
                continue
            ids = sp.encode(words.strip())
            if sp.unk_id() in ids:
                unknown += 1
                print(f"warning: {text_path}:{lineno}: utterance {utt}: characters unknown to "
                      f"{model_path} (spelled as <unk>)", file=sys.stderr)
            out.append(f"{utt} {' '.join(sp.id_to_piece(i) for i in ids)}\n")
    return out, unknown


def main(argv=None) -> int:
    from asrkit.utils import atomic_write_text

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    model, src, dst = argv
    text = os.path.join(src, "text")
    if not os.path.isfile(text):
        print(f"error: {text}: no such file", file=sys.stderr)
        return 1
    lines, unknown = piece_text(text, model)
    os.makedirs(dst, exist_ok=True)
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if name != "text" and os.path.isfile(path) and not name.endswith(".ark"):
            shutil.copyfile(path, os.path.join(dst, name))
    shutil.copyfile(text, os.path.join(dst, "text.words"))
    atomic_write_text(os.path.join(dst, "text"), "".join(lines))
    print(f"{dst}: {len(lines)} transcripts in pieces ({unknown} with <unk>)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
