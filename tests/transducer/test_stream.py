"""Streaming transducers: the resumable greedy and modified beam searches fed encoder frames in
pieces equal the offline searches; ``Recognizer.stream()`` on a transducer folder runs the encoder
through the CTC models' model streams (carried state for the hand-set tone transducer and a tiny
chunked Conformer-transducer, windows for a whole-utterance Conformer) and gives the offline
words and times, partial results, endpoints and segments; ``asrkit transcribe --stream``, the
server's WebSocket and ``asrkit bench stream`` take a transducer folder."""

import json
import subprocess
import sys

import numpy as np
import pytest

from asrkit import Recognizer
from asrkit.cli.main import main
from asrkit.decoders.context_graph import ContextGraph, Hotword, token_phrases
from asrkit.decoders.transducer import (
    TransducerBeamSearch,
    TransducerGreedySearch,
    hypothesis_timings,
    transducer_beam_search,
    transducer_greedy,
)
from asrkit.models import TransducerModel, save
from asrkit.ops.transducer import predictor_step
from asrkit.recognizer import RecognizerError, package_model_folder
from asrkit.recognizer.model_stream import CarriedStateStream, WindowedStream
from asrkit.recognizer.model_stream_conformer import ConformerChunks, Conv2dFrontEnd
from tests.recognizer.tones import recording, write_wav
from tests.streaming.weights import random_state
from tests.transducer.test_recognizer import FBANK
from tests.transducer.test_search import _model, _OneWordLM, _search_case

RATE = 16000
WORDS = ["three", "one", "two", "three", "one", "two"]


def _pieces(T, sizes):
    i, k = 0, 0
    while i < T:
        n = sizes[k % len(sizes)]
        yield i, min(i + n, T)
        i, k = i + n, k + 1


def _same(a, b):
    assert [(h.tokens, h.frames, h.words, h.word_frames) for h in a] == \
        [(h.tokens, h.frames, h.words, h.word_frames) for h in b]
    for x, y in zip(a, b):
        assert x.score == pytest.approx(y.score, abs=1e-9)
        assert x.lm == pytest.approx(y.lm, abs=1e-9)


@pytest.mark.parametrize("T,predictor", [(1, "stateless"), (9, "stateless"),
                                         (23, "stateless"), (17, "lstm")])
def test_resumable_searches_fed_in_pieces_equal_offline(T, predictor):
    m, enc, step, W, b = _search_case(seed=T, T=T, V=5, H=6)
    if predictor == "lstm":
        m = _model("lstm", V=5, H=6, predictor_layers=2)
        step = predictor_step("lstm", m.predictor_arrays(), 0)
        W = np.asarray(m.joiner.weight.value) * 3
    enc = enc * 2
    tokens = m.tokens
    context = ContextGraph(token_phrases([Hotword(["w2", "w3"], 1.5)], tokens))
    cases = [
        (lambda: TransducerGreedySearch(step, W, b, 0, 2, tokens),
         lambda: [transducer_greedy(enc, step, W, b, 0, 2, tokens)]),
        (lambda: TransducerBeamSearch(step, W, b, 0, 4, tokens),
         lambda: transducer_beam_search(enc, step, W, b, 0, 4, 4, tokens)),
        (lambda: TransducerBeamSearch(step, W, b, 0, 3, tokens, lm=_OneWordLM("w1"),
                                      lm_weight=0.5, word_bonus=0.2, context=context),
         lambda: transducer_beam_search(enc, step, W, b, 0, 3, 4, tokens, lm=_OneWordLM("w1"),
                                        lm_weight=0.5, word_bonus=0.2, context=context)),
    ]
    for new, offline in cases:
        want = offline()
        assert want[0].tokens or T < 5, "the case should emit labels"
        for sizes in ([1], [2, 5], [7], [T]):
            search = new()
            for i, j in _pieces(T, sizes):
                search.advance(enc[i:j])
                assert search.T == j
                best = search.best()
                assert best.frames == sorted(best.frames) and all(f < j for f in best.frames)
                assert 0 <= search.trailing_frames() <= j
            search.advance(enc[:0])
            got = search.finish(4)
            _same(got, want)
            assert [w.as_dict() for w in hypothesis_timings(got, 0.04)] == \
                [w.as_dict() for w in hypothesis_timings(want, 0.04)]


def test_a_search_starts_from_an_earlier_ones_prediction_network_state():
    m, enc, step, W, b = _search_case(seed=5, T=12, V=5, H=6)
    enc = enc * 2
    whole = TransducerGreedySearch(step, W, b, 0, 2)
    whole.advance(enc)
    first = TransducerGreedySearch(step, W, b, 0, 2)
    first.advance(enc[:5])
    second = TransducerGreedySearch(step, W, b, 0, 2, start=first.predictor_state())
    second.advance(enc[5:])
    assert first.best().tokens + second.best().tokens == whole.best().tokens
    assert [f + 5 for f in second.best().frames] == whole.best().frames[len(first.best().frames):]
    beam = TransducerBeamSearch(step, W, b, 0, 1)
    beam.advance(enc[:5])
    beam.finish()
    state, out = beam.predictor_state()
    assert state == first.predictor_state()[0] and np.array_equal(out, first.predictor_state()[1])


def _stream(rec, samples, seed=0, most=0.3, **options):
    """Events of ``samples`` fed in random chunks (empty ones too), then finish."""
    rng = np.random.default_rng(seed)
    stream = rec.stream(**options)
    events, i = [], 0
    while i < len(samples):
        n = int(rng.integers(0, int(most * RATE)))
        events += stream.accept(samples[i:i + n], RATE)
        i += n
    return stream, events + stream.finish()


def _finals(events):
    return [e for e in events if e.kind == "final"]


@pytest.mark.parametrize("method", ["beam", "greedy"])
def test_the_tone_transducer_streams_the_offline_words_and_times(tone_transducer, method):
    folder, _ = tone_transducer
    rec = Recognizer.from_dir(folder, method=method)
    wave, _ = recording(WORDS, seed=11, word_s=0.25, gap_s=0.3, lead_s=0.2)
    offline = rec.transcribe(wave, RATE)
    assert offline.text == " ".join(WORDS)
    for seed, most in ((0, 0.3), (1, 0.01), (2, 3.0)):
        stream, events = _stream(rec, wave, seed, most, endpoint=False)
        assert isinstance(stream.model, CarriedStateStream)  # the dense encoder carries state
        (final,) = _finals(events)
        assert [w.as_dict() for w in final.words] == [w.as_dict() for w in offline.words]
        partials = [e for e in events if e.kind == "partial"]
        assert partials and all(p.text == " ".join(WORDS[:len(p.words)]) for p in partials)
        for p in partials:
            assert all(w.confidence == 1.0 for w in p.words)
            for w, f in zip(p.words, final.words):
                assert w.start == pytest.approx(f.start)


def test_endpoints_cut_segments_and_the_next_goes_on_from_the_last_labels(tone_transducer):
    folder, _ = tone_transducer
    rec = Recognizer.from_dir(folder)
    # 0.9 s pauses: trailing blank frames after speech end segments (Kaldi's rule 2)
    wave, starts = recording(WORDS[:4], seed=4, word_s=0.25, gap_s=0.9, lead_s=0.3)
    offline = rec.transcribe(wave, RATE)
    _, events = _stream(rec, wave, 3)
    finals = _finals(events)
    assert len(finals) == 4 and [f.segment for f in finals] == [0, 1, 2, 3]
    assert [f.text for f in finals] == WORDS[:4]
    assert [w.as_dict() for f in finals for w in f.words] == \
        [w.as_dict() for w in offline.words]
    for f, nxt in zip(finals, finals[1:]):
        assert f.end == pytest.approx(nxt.start)
        # each segment ends 0.5 s of trailing blank after its word's emission, at the end
        # of the chunk that completes them (chunks of up to 0.3 s here)
        assert 0.5 <= f.end - f.words[-1].start <= 0.5 + 0.01 + 0.3
    assert all(0 < w.confidence <= 1 + 1e-9 for f in finals for w in f.words)
    # a word that sounds on over an endpoint is not emitted again: the prediction network
    # state carries into the next segment (the tone transducer suppresses its last word)
    long_wave, _ = recording(["two"], seed=1, word_s=1.5, gap_s=0.2, lead_s=0.2)
    _, events = _stream(rec, long_wave, 0, endpoint={"rule5": {"min_utterance_length": 0.6}})
    assert " ".join(f.text for f in _finals(events)) == "two"
    # maximum length (rule 5) cuts a stream with no pause
    _, events = _stream(rec, wave, 5, endpoint={"rule2": None, "rule3": None, "rule4": None,
                                                "rule5": {"min_utterance_length": 1.0}})
    ends = [f.end - f.start for f in _finals(events)]
    assert " ".join(f.text for f in _finals(events)) == offline.text
    assert max(ends) <= 1.0 + 0.3 + 1e-6  # a frame's chunk may overrun


ARPA = """\\data\\
ngram 1=5
ngram 2=2

\\1-grams:
-99 <s> -0.3
-0.7 </s>
-0.3 one -0.2
-0.6 two -0.2
-0.9 three -0.2

\\2-grams:
-0.1 one two
-0.2 two three

\\end\\
"""


def test_lm_fusion_streams_as_offline(tone_transducer, tmp_path):
    folder, _ = tone_transducer
    (tmp_path / "g.arpa").write_text(ARPA)
    rec = Recognizer.from_dir(folder, lm=str(tmp_path / "g.arpa"), lm_weight=0.8, beam=3)
    wave, _ = recording(WORDS, seed=21, word_s=0.25, gap_s=0.3, lead_s=0.2)
    offline = rec.transcribe(wave, RATE)
    assert offline.text == " ".join(WORDS)
    (final,) = _finals(_stream(rec, wave, 4, 0.05, endpoint=False)[1])
    assert [w.as_dict() for w in final.words] == [w.as_dict() for w in offline.words]


def test_hotwords_stream_as_offline_and_greedy_refuses_them(tone_transducer):
    folder, _ = tone_transducer
    rec = Recognizer.from_dir(folder, hotwords=["one two :1"])
    wave, _ = recording(WORDS, seed=2, word_s=0.25, gap_s=0.3, lead_s=0.2)
    offline = rec.transcribe(wave, RATE)
    (final,) = _finals(_stream(rec, wave, 6, endpoint=False)[1])
    assert [w.as_dict() for w in final.words] == [w.as_dict() for w in offline.words]
    (final,) = _finals(_stream(Recognizer.from_dir(folder), wave, 6, endpoint=False,
                               hotwords=["three :0.5"])[1])
    assert final.text == offline.text
    greedy = Recognizer.from_dir(folder, method="greedy")
    with pytest.raises(RecognizerError, match="hotwords need method = 'beam'"):
        greedy.stream(hotwords=["two"])
    with pytest.raises(RecognizerError, match="'four' cannot be spelled"):
        Recognizer.from_dir(folder).stream(hotwords=["four"])


# -- a tiny Conformer-transducer made here ------------------------------------------------------
def _conformer_transducer(chunk, seed=0):
    net = {"seed": 0, "layers": [
        {"type": "conv2d_subsampling", "dim": 16, "factor": 4, "channels": 4},
        {"type": "conformer", "dim": 16, "heads": 2, "ff_dim": 24, "num_layers": 2,
         "kernel_size": 5, "chunk_size": chunk, "left_chunks": 2 if chunk else -1}]}
    tokens = ["<blk>", "a", "b", "c", "d"]
    m = TransducerModel(net, 40, tokens, 0, reader={"cmvn": "none", "unit": "word"},
                        transducer={"predictor": "stateless", "predictor_dim": 8,
                                    "context_size": 2, "joiner_dim": 12})
    state = random_state(m, seed)
    state["joiner.weight"] *= 6.0
    state["joiner.bias"][0] = 1.0       # blank most frames, words where the encoder is sure
    return m.copy_with(state)


@pytest.fixture(scope="module")
def conformer_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("conformer_rnnt")
    (root / "fbank.toml").write_text(FBANK)
    out = {}
    for chunk in (4, 0):
        save(str(root / f"c{chunk}.mdl"), _conformer_transducer(chunk))
        out[chunk] = str(root / f"c{chunk}")
        package_model_folder(out[chunk], str(root / f"c{chunk}.mdl"), str(root / "fbank.toml"))
    return out


def _loud(seed):
    """3 s of tones and noise at int16 scale / 32768: something for a random encoder."""
    wave, _ = recording(WORDS, seed=seed, word_s=0.2, gap_s=0.2, lead_s=0.2)
    return wave


@pytest.mark.parametrize("method", ["beam", "greedy"])
def test_a_streaming_conformer_transducer_streams_the_offline_words(conformer_folders, method):
    rec = Recognizer.from_dir(conformer_folders[4], method=method)
    wave = _loud(8)
    offline = rec.transcribe(wave, RATE)
    assert len(offline.words) >= 3, offline.text
    stream = rec.stream(endpoint=False)
    ms = stream.model
    assert isinstance(ms, CarriedStateStream) and ms.is_encoder
    assert [type(s) for s in ms.stages[:2]] == [Conv2dFrontEnd, ConformerChunks]
    # the encoder frames of the stream are the whole-utterance encoder's
    feats = rec.normalize(rec.features(rec.load_audio(wave, RATE)))
    got = np.concatenate([ms.accept(feats[i:i + 13]) for i in range(0, len(feats), 13)]
                         + [ms.finish()])
    np.testing.assert_allclose(got, rec.encode(feats), atol=1e-5)
    for seed, most in ((0, 0.2), (1, 0.03), (2, 5.0)):
        (final,) = _finals(_stream(rec, wave, seed, most, endpoint=False)[1])
        assert [w.as_dict() for w in final.words] == [w.as_dict() for w in offline.words]


def test_a_whole_utterance_conformer_transducer_streams_through_windows(conformer_folders):
    rec = Recognizer.from_dir(conformer_folders[0])
    wave = _loud(9)
    offline = rec.transcribe(wave, RATE)
    stream = rec.stream()
    assert isinstance(stream.model, WindowedStream) and stream.model.is_encoder
    assert stream.model.num_classes == 12
    # every past and future frame in view: the offline words
    (final,) = _finals(_stream(rec, wave, 0, 0.3, endpoint=False, blstm_left=10.0,
                               blstm_right=10.0)[1])
    assert [w.as_dict() for w in final.words] == [w.as_dict() for w in offline.words]
    # the default windows run too (not exact: 0.3 s of future context)
    assert _finals(_stream(rec, wave, 0, 0.3)[1])


# -- the command, the server and the benchmark --------------------------------------------------
def test_transcribe_stream_command_on_a_transducer_folder(tone_transducer, tmp_path):
    folder, _ = tone_transducer
    wave, _ = recording(WORDS[:3], seed=12, word_s=0.25, gap_s=0.3, lead_s=0.2)
    pcm = np.round(wave * 32767).astype("<i2").tobytes()
    r = subprocess.run([sys.executable, "-m", "asrkit", "transcribe", "--model-dir", folder,
                        "--stream", "--json", "--no-endpoint", "--method", "greedy", "-"],
                       input=pcm, capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert events[-1]["kind"] == "final" and events[-1]["text"] == " ".join(WORDS[:3])
    assert any(e["kind"] == "partial" for e in events[:-1])
    path = write_wav(tmp_path / "a.wav", wave)
    (tmp_path / "hot.txt").write_text("two :1\n")
    r = subprocess.run([sys.executable, "-m", "asrkit", "transcribe", "--model-dir", folder,
                        "--stream", "--method", "greedy", "--hotwords",
                        str(tmp_path / "hot.txt"), str(path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        "asrkit transcribe: error: hotwords need method = 'beam' (the modified beam search carries "
        "them), not 'greedy'"], r.stderr


def test_server_streams_a_transducer(tone_transducer):
    pytest.importorskip("aiohttp")
    from asrkit.serve import BackgroundServer, ServeOptions, make_app
    from asrkit.serve.client import stream_audio
    from tests.serve.fixtures import run

    folder, _ = tone_transducer
    rec = Recognizer.from_dir(folder)
    wave, _ = recording(WORDS, seed=13, word_s=0.25, gap_s=0.3, lead_s=0.2)
    with BackgroundServer(make_app(rec, ServeOptions(workers=1, max_queue=2))) as server:
        r = run(stream_audio(server.url, wave, RATE, chunk_s=0.1))
    assert not r.errors and r.text == " ".join(WORDS)


def test_bench_stream_on_a_transducer_folder(tone_transducer, tmp_path, capsys):
    from tests.recognizer.tone_lstm import ToneUtterance, write_data_dir

    folder, _ = tone_transducer
    utts = []
    for seed in range(3):
        words = WORDS[seed:seed + 3]
        wave, starts = recording(words, seed=seed, word_s=0.25, gap_s=0.6, lead_s=0.3)
        utts.append(ToneUtterance(wave, [(w, s, s + 0.25) for w, s in zip(words, starts)]))
    write_data_dir(str(tmp_path / "data"), utts, "u")
    assert main(["bench", "stream", str(tmp_path / "data"), "--model-dir", folder,
                 "--chunks", "0.1", "0.5", "--json"]) == 0
    cases = json.loads(capsys.readouterr().out)["cases"]
    for c in cases:
        x = c["extra"]
        assert x["wer_stream"] == 0.0 and x["wer_offline"] == 0.0 and x["words_timed"] == 9
        assert x["first_partial_ms_p50"] <= x["final_ms_p50"]
    assert cases[0]["extra"]["first_partial_ms_p50"] < cases[1]["extra"]["first_partial_ms_p50"]
