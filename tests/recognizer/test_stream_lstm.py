"""Streaming with a trained unidirectional LSTM-CTC model (tests/recognizer/tone_lstm.py: five
tone "words", sliding CMVN, 3-frame stacking): chunked streams equal offline transcription,
words come out in partial results soon after they end, and ``asrkit bench stream`` measures it.
"""


import numpy as np
import pytest

from asrkit import Recognizer
from asrkit.recognizer.model_stream import CarriedStateStream
from tests.recognizer.tone_lstm import (
    FOLDER,
    check_bench_stream,
    check_partials_come_soon,
    check_streams_equal_offline,
    stream_events,
    tone_utterance,
)


@pytest.fixture(scope="module")
def rec():
    return Recognizer.from_dir(FOLDER)


@pytest.fixture(scope="module")
def utterances():
    rng = np.random.default_rng(2024)
    return [tone_utterance(rng) for _ in range(6)]


def test_the_model_streams_with_carried_state(rec):
    assert isinstance(rec.stream().model, CarriedStateStream)
    assert rec.normalization["cmvn"] == "sliding"


def test_streams_equal_offline_and_find_the_words(rec, utterances):
    check_streams_equal_offline(rec, utterances, (-0.1, 0.1))


def test_words_appear_in_partials_soon_after_they_end(rec, utterances):
    # 0.1 s chunks: a word shows in a partial result within a few chunks of its end (the
    # network's 2-frame stacking lookahead, the chunk, CTC's spike); exact sliding CMVN holds
    # the first min_cmn_window frames (1 s) until their window is there
    check_partials_come_soon(rec, utterances, 0.35)


def test_causal_cmvn_does_not_hold_the_start(rec, utterances):
    u = utterances[0]
    assert u.words[0][2] < 0.7
    exact = stream_events(rec, u.samples, 0.1, partial_interval=0.0)
    causal = stream_events(rec, u.samples, 0.1, partial_interval=0.0, cmvn_causal=True)
    assert rec.stream(cmvn_causal=True).cmvn.delay_frames == 0
    assert exact[0][1] > 1.0 and causal[0][1] <= u.words[0][2] + 0.35


def test_bench_stream_reports_latency_per_chunk(tmp_path, utterances, capsys):
    check_bench_stream(tmp_path, utterances, FOLDER, capsys)
