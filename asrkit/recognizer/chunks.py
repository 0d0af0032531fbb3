"""Cutting long audio into chunks at quiet places, for decoding a long file piece by piece.

A chunk ends at the quietest 10 ms of the last third of the longest allowed span, so cuts fall in
pauses rather than inside words. The Recognizer computes and normalises the features of the whole
file first and cuts the feature matrix at the frames of these sample positions
(``frame_cuts``), so chunking changes what the network sees at the edges, never the
normalisation.
"""

from __future__ import annotations

import numpy as np

from asrkit.recognizer.options import chunk_seconds


def quiet_cuts(wave: np.ndarray, sample_rate: int, max_chunk_s: float) -> list[tuple[int, int]]:
    """Split ``wave`` ``[n]`` into ``(start, end)`` sample ranges of at most ``max_chunk_s``
    seconds each, cut at the quietest 10 ms frame in the last third of each chunk.

    The ranges are contiguous and cover ``[0, n)``. ``max_chunk_s`` must be finite and at least
    ``MIN_CHUNK_S`` (anything shorter would cut inside every word; zero would never advance):
    RecognizerError otherwise.
    """
    max_chunk_s = chunk_seconds(max_chunk_s)
    n = len(wave)
    limit = int(max_chunk_s * sample_rate)
    if n <= limit:
        return [(0, n)]
    hop = max(sample_rate // 100, 1)
    cuts, start = [], 0
    while n - start > limit:
        lo, hi = start + 2 * limit // 3, start + limit
        frames = (hi - lo) // hop
        if frames:
            span = np.asarray(wave[lo: lo + frames * hop], np.float64).reshape(frames, hop)
            energy = (span * span).sum(axis=1)
            cut = lo + hop * int(np.argmin(energy)) + hop // 2
        else:
            cut = hi
        cuts.append((start, cut))
        start = cut
    cuts.append((start, n))
    return cuts


def frame_cuts(cuts: list[tuple[int, int]], num_frames: int,
               shift_samples: int) -> list[tuple[int, int]]:
    """Feature-frame ranges ``(first, end)`` of sample ranges ``cuts``: frame ``i`` starts at
    sample ``i * shift_samples``, so a cut at sample ``s`` becomes frame ``round(s / shift)``.
    The ranges are contiguous, cover ``[0, num_frames)`` and may be empty at the very end."""
    bounds = [0] + [min(int(round(b / shift_samples)), num_frames) for _, b in cuts[:-1]]
    bounds.append(num_frames)
    return [(bounds[i], max(bounds[i], bounds[i + 1])) for i in range(len(cuts))]
