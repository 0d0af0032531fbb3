"""CTC forced alignment (Viterbi) and its per-token segments."""

import itertools

import numpy as np
import pytest

from asrkit.kernels import ctc_align
from asrkit.kernels.ctc import ctc_segments
from asrkit.kernels.reference import ctc as ref
from tests.kernels.test_ctc import make_batch


def collapse(path, blank):
    """Frame classes -> label sequence: merge repeats, drop blanks (and -1 padding)."""
    out, prev = [], None
    for c in path:
        if c != prev and c != blank and c >= 0:
            out.append(int(c))
        prev = c
    return out


def peaked(rng, targets, target_lengths, T, C, blank):
    """Log-probs [T, B, C] that strongly favour one random valid path per sequence."""
    B = len(target_lengths)
    x = rng.standard_normal((T, B, C))
    for b in range(B):
        labels = list(targets[b, :target_lengths[b]])
        frames = []
        for i, lab in enumerate(labels):
            if i and lab == labels[i - 1]:
                frames.append(blank)
            frames += [lab] * int(rng.integers(1, 3))
        frames += [blank] * (T - len(frames))
        x[np.arange(T), b, frames] += 8.0
    return ref.log_softmax(x).astype(np.float32)


@pytest.mark.parametrize("device", ["reference", "cpu"])
@pytest.mark.parametrize("blank", [0, 5])
def test_peaked_alignment_reproduces_target(rng, device, blank):
    T, B, C = 30, 4, 6
    labels = [c for c in range(C) if c != blank]
    targets = rng.choice(labels, size=(B, 6)).astype(np.int32)
    targets[0, 1] = targets[0, 0]
    target_lengths = np.array([6, 4, 0, 6], dtype=np.int32)
    logp = peaked(rng, targets, target_lengths, T, C, blank)
    input_lengths = np.full(B, T, dtype=np.int32)
    input_lengths[1] = 25
    path = ctc_align(logp, targets, input_lengths, target_lengths, blank=blank, device=device)
    assert path.dtype == np.int32 and path.shape == (T, B)
    for b in range(B):
        assert collapse(path[:, b], blank) == list(targets[b, :target_lengths[b]])
        assert (path[input_lengths[b]:, b] == -1).all()


def test_viterbi_score_is_the_brute_force_maximum(rng):
    T, C, blank = 5, 3, 0
    logp = ref.log_softmax(rng.standard_normal((T, 2, C)) * 2)
    targets = np.array([[1, 2], [2, 2]], dtype=np.int32)
    lengths = np.array([T, T], dtype=np.int32)
    tl = np.array([2, 2], dtype=np.int32)
    for device in ("reference", "cpu"):
        path, scores = ctc_align(logp, targets, lengths, tl, device=device, return_scores=True)
        for b in range(2):
            best = max(sum(logp[t, b, c] for t, c in enumerate(p))
                       for p in itertools.product(range(C), repeat=T)
                       if collapse(p, blank) == list(targets[b]))
            np.testing.assert_allclose(scores[b], best, rtol=1e-12)
            np.testing.assert_allclose(logp[np.arange(T), b, path[:, b]].sum(), best,
                                       rtol=1e-12)


def test_logits_and_logprobs_give_the_same_path(rng):
    logits, targets, il, tl = make_batch(rng, T=20, B=3, C=6, S=5, scale=3.0)
    from_logits = ctc_align(logits, targets, il, tl)
    from_logp = ctc_align(ref.log_softmax(logits).astype(np.float32), targets, il, tl)
    np.testing.assert_array_equal(from_logits, from_logp)


def test_cpu_alignment_matches_twin(rng):
    for _ in range(10):
        T, B, C, S = (int(v) for v in rng.integers(1, [12, 5, 7, 6]))
        C = max(C, 2)
        blank = int(rng.integers(0, C))
        batch = make_batch(rng, T, B, C, S, blank=blank, scale=3.0)
        p1, s1 = ref.ctc_align(*batch, blank=blank, return_scores=True)
        p2, s2 = ctc_align(*batch, blank=blank, device="cpu", return_scores=True)
        np.testing.assert_array_equal(p1, p2)
        np.testing.assert_allclose(s1, s2)


def test_impossible_alignment_is_all_minus_one(rng):
    logits = rng.standard_normal((3, 2, 4)).astype(np.float32)
    targets = np.array([[1, 1], [1, 2]], dtype=np.int32)
    path, scores = ctc_align(logits, targets, np.array([2, 3], np.int32),
                             np.array([2, 2], np.int32), return_scores=True)
    assert (path[:, 0] == -1).all() and scores[0] == -np.inf
    assert collapse(path[:, 1], 0) == [1, 2]


def test_segments_give_token_frame_ranges():
    path = np.array([0, 3, 3, 0, 0, 3, 5, 5, 0, -1, -1], dtype=np.int32)
    segs = ctc_segments(path, blank=0)
    np.testing.assert_array_equal(segs, [[3, 1, 3], [3, 5, 6], [5, 6, 8]])
    batch = ctc_segments(np.stack([path, np.full_like(path, 0)], axis=1), blank=0)
    assert len(batch) == 2 and batch[1].shape == (0, 3)
    # blank other than 0: class 0 is then a label
    np.testing.assert_array_equal(ctc_segments(np.array([0, 0, 2, 1, 1]), blank=2),
                                  [[0, 0, 2], [1, 3, 5]])
