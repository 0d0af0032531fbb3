"""Feature normalisation modes: ``asrkit.features.normalize`` against references, the training
reader's ``[reader] cmvn = "sliding"`` and ``"global"``, and the settings' way from a model file
into a folder."""

import numpy as np
import pytest

from asrkit.features import apply_cmvn, cmvn_stats, normalize
from asrkit.io import read_table_dict
from asrkit.training import Reader, ReaderConfig
from asrkit.training.config import ConfigError, parse_train_config
from tests.training.datadirs import synthetic_dir


def kaldi_sliding_cmvn(feats, cmn_window=600, min_window=100, center=False, norm_vars=False):
    """Kaldi's ``SlidingWindowCmnInternal`` (src/transform/cmvn.cc) transcribed frame by frame:
    the window of each frame, its sums in double, variance floored at 1e-10, a one-frame window
    giving zeros when variances are normalised."""
    x = np.asarray(feats, np.float64)
    num_frames, dim = x.shape
    out = np.zeros((num_frames, dim))
    for t in range(num_frames):
        if center:
            window_start = t - cmn_window // 2
            window_end = window_start + cmn_window
        else:
            window_start = t - cmn_window
            window_end = t + 1
        if window_start < 0:
            window_end -= window_start
            window_start = 0
        if not center and window_end > t:
            window_end = max(t + 1, min_window)
        if window_end > num_frames:
            window_start -= window_end - num_frames
            window_end = num_frames
            if window_start < 0:
                window_start = 0
        n = window_end - window_start
        cur_sum = x[window_start:window_end].sum(axis=0)
        frame = x[t] - cur_sum / n
        if norm_vars:
            if n == 1:
                frame = np.zeros(dim)
            else:
                cur_sumsq = (x[window_start:window_end] ** 2).sum(axis=0)
                variance = cur_sumsq / n - cur_sum ** 2 / (n * n)
                frame = frame * np.maximum(variance, 1e-10) ** -0.5
        out[t] = frame
    return out.astype(np.float32)


SLIDING_CASES = [
    # (frames, cmn_window, min_window, center)
    (1000, 600, 100, False), (1000, 600, 100, True), (50, 600, 100, False), (50, 600, 100, True),
    (37, 10, 3, False), (37, 10, 3, True), (37, 9, 9, True), (7, 10, 3, False), (1, 10, 3, False),
    (2, 5, 1, True), (300, 1, 1, False), (64, 64, 64, False),
]


@pytest.mark.parametrize("norm_vars", [False, True])
@pytest.mark.parametrize("frames,window,min_window,center", SLIDING_CASES)
def test_sliding_matches_kaldi(rng, frames, window, min_window, center, norm_vars):
    x = (rng.normal(0, 3, (frames, 5)) + rng.normal(0, 10, 5)).astype(np.float32)
    got = normalize(x, "sliding", norm_vars, cmn_window=window, min_window=min_window,
                    center=center)
    want = kaldi_sliding_cmvn(x, window, min_window, center, norm_vars)
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_whole_utterance_modes(rng):
    x = (rng.normal(0, 2, (80, 6)) + 4).astype(np.float32)
    stats = cmvn_stats(rng.normal(1, 3, (200, 6)))
    np.testing.assert_array_equal(normalize(x, "none"), x)
    for norm_vars in (False, True):
        utt = normalize(x, "utterance", norm_vars)
        np.testing.assert_array_equal(utt, apply_cmvn(x, cmvn_stats(x), norm_vars=norm_vars))
        np.testing.assert_allclose(utt.mean(axis=0), 0, atol=1e-5)
        if norm_vars:
            np.testing.assert_allclose(utt.std(axis=0), 1, rtol=1e-4)
        spk = normalize(x, "speaker", norm_vars, stats)
        np.testing.assert_array_equal(spk, apply_cmvn(x, stats, norm_vars=norm_vars))
        glob = normalize(x, "global", norm_vars, stats)
        mean = stats[0, :-1] / stats[0, -1]
        want = x - mean
        if norm_vars:
            want = want / np.sqrt(stats[1, :-1] / stats[0, -1] - mean ** 2)
        np.testing.assert_allclose(glob, want, rtol=1e-5, atol=1e-5)
        # a recording's own mean is not taken away: a short one keeps its spectral shape
        assert np.abs(glob.mean(axis=0)).max() > 0.5


@pytest.mark.parametrize("kwargs,match", [
    ({"mode": "globl"}, "mode: expected one of"),
    ({"mode": "speaker"}, "needs the speaker's stats"),
    ({"mode": "global"}, "needs the training set's stats"),
    ({"mode": "sliding", "cmn_window": 0}, "cmn_window"),
    ({"mode": "sliding", "min_window": 700}, "min_window: 700 exceeds cmn_window 600"),
    ({"mode": "sliding", "cmn_window": 2.5}, "cmn_window"),
])
def test_bad_settings_name_the_option(kwargs, match):
    with pytest.raises(ValueError, match=match):
        normalize(np.ones((4, 2), np.float32), **kwargs)


def test_reader_sliding_mode(tmp_path):
    path, tokens = synthetic_dir(str(tmp_path / "d"), num_utts=4)
    cfg = ReaderConfig(data_dir=path, tokens=tokens, cmvn="sliding", norm_vars=True,
                       cmn_window=20, min_cmn_window=5, cmn_center=True)
    reader = Reader(cfg, training=False, log=lambda m: None)
    raw = read_table_dict(f"scp:{path}/feats.scp")
    batch = reader.load(reader.utts)
    for b, utt in enumerate(batch.utt_ids):
        n = batch.lengths[b]
        np.testing.assert_allclose(batch.feats[:n, b],
                                   kaldi_sliding_cmvn(raw[utt], 20, 5, True, True),
                                   rtol=1e-5, atol=1e-5)
    assert cfg.normalization() == {"cmvn": "sliding", "norm_vars": True, "cmn_window": 20,
                                   "min_cmn_window": 5, "cmn_center": True}


@pytest.mark.parametrize("reader,match", [
    ({"cmvn": "globl"}, r"\[reader\]\.cmvn: expected one of none, utterance, sliding"),
    ({"cmvn": "utterance", "global_cmvn": "stats"},
     r"\[reader\]\.global_cmvn: a statistics file is only for cmvn = \"global\""),
    ({"cmvn": "sliding", "cmn_window": 0}, r"\[reader\]\.cmn_window: expected a positive"),
    ({"cmvn": "sliding", "cmn_window": 10, "min_cmn_window": 20},
     r"\[reader\]\.min_cmn_window: 20 exceeds"),
    ({"cmn_center": 1}, r"\[reader\]\.cmn_center: expected bool"),
])
def test_reader_config_names_the_bad_key(reader, match):
    data = {"network": {"layers": [{"type": "dense", "dim": 4}]}, "reader": reader}
    with pytest.raises(ConfigError, match=match):
        parse_train_config(data, "conf.toml")


def test_model_settings_reach_the_folder(tmp_path):
    """The reader settings a model file records become the folder's manifest and the
    Recognizer's normalisation."""
    from asrkit import Recognizer
    from asrkit.models import Model, save
    from asrkit.recognizer import package_model_folder
    from tests.recognizer.tones import TOKENS, tone_model

    base = tone_model()
    norm = {"cmvn": "sliding", "norm_vars": True, "cmn_window": 300, "min_cmn_window": 50,
            "cmn_center": False}
    model = Model(base.network, 40, TOKENS, 0, params=base.state_dict(),
                  reader={**norm, "unit": "word"})
    save(str(tmp_path / "m.mdl"), model)
    (tmp_path / "fbank.toml").write_text('[features]\ntype = "fbank"\nnum_mel_bins = 40\n')
    manifest = package_model_folder(str(tmp_path / "final"), str(tmp_path / "m.mdl"),
                                    str(tmp_path / "fbank.toml"))
    assert {k: manifest[k] for k in norm} == norm
    rec = Recognizer.from_dir(tmp_path / "final")
    assert rec.normalization == {**norm, "global_stats": None}
    x = np.random.default_rng(0).normal(0, 1, (400, 40)).astype(np.float32)
    np.testing.assert_allclose(rec.normalize(x), kaldi_sliding_cmvn(x, 300, 50, False, True),
                               rtol=1e-5, atol=1e-5)


def test_reader_global_mode(tmp_path):
    """``cmvn = "global"``: one set of statistics, the training set's, for every utterance of
    the training and the CV reader alike; or a stats file's."""
    from asrkit.features import global_cmvn_stats
    from asrkit.io.kaldi_tables import write_value
    from asrkit.training.reader import ReaderError, training_set_stats

    train, tokens = synthetic_dir(str(tmp_path / "train"), num_utts=6, seed=1)
    cv, _ = synthetic_dir(str(tmp_path / "cv"), num_utts=3, seed=2)
    raw_train = read_table_dict(f"scp:{train}/feats.scp")
    raw_cv = read_table_dict(f"scp:{cv}/feats.scp")
    stats = global_cmvn_stats(raw_train)
    cfg = ReaderConfig(data_dir=train, tokens=tokens, cmvn="global", norm_vars=True)
    np.testing.assert_allclose(training_set_stats(train), stats)
    for data_dir, raw in ((None, raw_train), (cv, raw_cv)):
        reader = Reader(cfg, data_dir, training=False, log=lambda m: None)
        batch = reader.load(reader.utts)
        for b, utt in enumerate(batch.utt_ids):
            n = batch.lengths[b]
            np.testing.assert_allclose(batch.feats[:n, b],
                                       apply_cmvn(raw[utt], stats, norm_vars=True),
                                       rtol=1e-5, atol=1e-5)
    norm = cfg.normalization()
    assert norm["cmvn"] == "global"
    np.testing.assert_allclose(norm["global_stats"], stats)
    other = cmvn_stats(np.random.default_rng(3).normal(2, 5, (50, stats.shape[1] - 1)))
    with open(tmp_path / "global.stats", "wb") as f:
        write_value(f, other)
    cfg2 = ReaderConfig(data_dir=train, tokens=tokens, cmvn="global",
                        global_cmvn=str(tmp_path / "global.stats"))
    np.testing.assert_allclose(cfg2.normalization()["global_stats"], other)
    (tmp_path / "bad.stats").write_text("not a matrix")
    with pytest.raises(ReaderError, match="bad.stats: cannot read CMVN stats"):
        training_set_stats(train, str(tmp_path / "bad.stats"))


def test_global_settings_reach_the_folder_and_the_stream(tmp_path):
    """A model trained with ``global`` carries its statistics into the folder; the Recognizer
    and its stream normalise with them, frame by frame, as offline."""
    import json

    from asrkit import Recognizer
    from asrkit.features.online import OnlineCmvn
    from asrkit.models import Model, save
    from asrkit.recognizer import package_model_folder
    from asrkit.recognizer.model_folder import ModelFolderError
    from tests.recognizer.tones import TOKENS, tone_model

    rng = np.random.default_rng(0)
    stats = cmvn_stats(rng.normal(3, 2, (500, 40)))
    base = tone_model()
    norm = {"cmvn": "global", "norm_vars": True, "global_stats": stats.tolist()}
    model = Model(base.network, 40, TOKENS, 0, params=base.state_dict(),
                  reader={**norm, "unit": "word"})
    save(str(tmp_path / "m.mdl"), model)
    (tmp_path / "fbank.toml").write_text('[features]\ntype = "fbank"\nnum_mel_bins = 40\n')
    package_model_folder(str(tmp_path / "final"), str(tmp_path / "m.mdl"),
                         str(tmp_path / "fbank.toml"))
    rec = Recognizer.from_dir(tmp_path / "final")
    x = rng.normal(0, 1, (120, 40)).astype(np.float32)
    want = apply_cmvn(x, stats, norm_vars=True)
    np.testing.assert_allclose(rec.normalize(x), want, rtol=1e-6)
    online = OnlineCmvn("global", True, stats=rec.normalization["global_stats"])
    assert online.delay_frames == 0
    got = np.concatenate([online.accept(x[:7]), online.accept(x[7:50]), online.accept(x[50:]),
                          online.finish()])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    manifest = json.loads((tmp_path / "final" / "manifest.json").read_text())
    manifest["global_stats"] = [[1.0, 2.0], [3.0, float("nan")]]
    (tmp_path / "final" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelFolderError, match="manifest.json: global_stats: cmvn \"global\""):
        Recognizer.from_dir(tmp_path / "final")
