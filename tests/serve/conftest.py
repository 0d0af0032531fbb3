"""Fixtures of the server tests: a tone model folder (words known without training), a
recording, and a server on 127.0.0.1 in a background thread with an experiments folder."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("aiohttp")

from asrkit.recognizer import Recognizer  # noqa: E402
from asrkit.serve import BackgroundServer, ServeOptions, make_app  # noqa: E402
from tests.recognizer.tones import make_tone_folder, recording, write_wav  # noqa: E402
from tests.serve.fixtures import WORDS, make_experiments  # noqa: E402


@pytest.fixture(scope="module")
def tone_folder(tmp_path_factory) -> str:
    return make_tone_folder(str(tmp_path_factory.mktemp("tones")))


@pytest.fixture(scope="module")
def wav(tone_folder, tmp_path_factory) -> tuple[str, np.ndarray, list[float]]:
    """(path, samples, word starts) of a recording of WORDS."""
    x, starts = recording(WORDS)
    path = write_wav(tmp_path_factory.mktemp("wav") / "words.wav", x)
    return path, x, starts


@pytest.fixture(scope="module")
def server(tone_folder, tmp_path_factory):
    """A server of the tone model with an experiments folder (2 model threads)."""
    exp = make_experiments(str(tmp_path_factory.mktemp("exp")), tone_folder)
    rec = Recognizer.from_dir(tone_folder)
    app = make_app(rec, ServeOptions(workers=2, max_queue=4, max_upload_mb=1.0, exp_dir=exp))
    with BackgroundServer(app) as s:
        s.exp_dir = exp
        s.recognizer = rec
        yield s
