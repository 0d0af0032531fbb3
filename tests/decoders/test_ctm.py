"""Word timings, CTM lines and n-best confidences."""

import numpy as np
import pytest

from asrkit.decoders.ctm import ctm_lines, nbest_confidences, word_timings


def test_timings_and_ctm():
    t = word_timings(["one", "two"], np.array([[3, 10], [11, 20]]), frame_shift=0.03,
                     confidences=[0.9, 0.5])
    assert t[0].start == pytest.approx(0.09) and t[0].duration == pytest.approx(0.24)
    assert ctm_lines("utt1", t) == ["utt1 1 0.090 0.240 one 0.9000",
                                    "utt1 1 0.330 0.300 two 0.5000"]
    assert t[1].as_dict() == {"word": "two", "start": 0.33, "duration": 0.3, "confidence": 0.5}


def test_nbest_confidence_sums_agreeing_hypotheses():
    nbest = [(["one", "two", "three"], 10.0), (["one", "too", "three"], 10.0 + np.log(3)),
             (["one", "three"], 10.0 + np.log(3))]
    # posteriors 0.6, 0.2, 0.2: "two" is in the first only; "one" and "three" in all
    conf = nbest_confidences(nbest)
    assert conf == pytest.approx([1.0, 0.6, 1.0])
    assert nbest_confidences([]) == []
